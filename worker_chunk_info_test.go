package fleet_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// TestChunkWorkerRegistersOptions: a chunk worker registers its
// ChunkOptions in its :hardware ("chunk"), and Workers reads them back; a
// batch worker's :hardware has no "chunk" and its WorkerInfo.Chunk is nil.
func TestChunkWorkerRegistersOptions(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		q := fleet.NewQueue[job](e.F, "chunkinfo", fleet.QueueOptions{})
		co := fleet.ChunkOptions{MinSize: 5, MaxSize: 20, MaxWait: 1500 * time.Millisecond}
		cw := fleet.NewChunkWorker(e.F, fleet.WorkerOptions{Type: "chunkinfo", ID: "c1", Slots: 2}, q, co,
			fleet.ChunkFunc[wcfg, out, job](func(ctx context.Context, s *fleet.Slot[wcfg, out], c *fleet.Chunk[job]) error { return nil }))
		startWorker(t, cw)
		bw := fleet.NewBatchWorker(e.F, fleet.WorkerOptions{Type: "chunkinfo", ID: "b1", Slots: 1}, q,
			fleet.BatchFunc[wcfg, out, job](func(ctx context.Context, s *fleet.Slot[wcfg, out], tk *fleet.Task[job]) error { return nil }))
		startWorker(t, bw)

		raw, ok := e.get(t, e.wk("chunkinfo", "c1").Hardware)
		if !ok || !strings.HasSuffix(raw, `,"chunk":{"min_size":5,"max_size":20,"max_wait":1500000000}}`) {
			t.Fatalf("chunk worker's :hardware %q", raw)
		}
		var hw fleet.Hardware
		if err := json.Unmarshal([]byte(raw), &hw); err != nil || hw.Kind != "batch" || hw.Slots != 2 || hw.Chunk == nil || *hw.Chunk != co {
			t.Fatalf("chunk worker's :hardware %+v, %v", hw, err)
		}
		raw, ok = e.get(t, e.wk("chunkinfo", "b1").Hardware)
		if !ok || strings.Contains(raw, `"chunk"`) {
			t.Fatalf("batch worker's :hardware %q", raw)
		}
		ws, err := e.F.Workers(ctx(t), fleet.WorkersFilter{Type: "chunkinfo"})
		if err != nil || len(ws) != 2 || ws[0].ID != "b1" || ws[0].Chunk != nil || ws[1].ID != "c1" || ws[1].Chunk == nil || *ws[1].Chunk != co {
			t.Fatalf("Workers %+v, %v", ws, err)
		}
	})
}
