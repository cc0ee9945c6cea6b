package chaos

// The child side of the flow-control faults (flowcontrol_test.go): a
// chunk worker process (NewChunkWorker) over the fc queue, recording each
// task's run and end.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/fleet-go/fleet"
)

const (
	chunkerRole = "chunker"
	fcQueue     = "fc"
)

// fcQueueOptions are the fc queue's options in every process.
func fcQueueOptions(lease time.Duration) fleet.QueueOptions {
	return fleet.QueueOptions{Lease: lease, MaxAttempts: maxAttempts, BackoffBase: 20 * time.Millisecond, BackoffMax: 200 * time.Millisecond}
}

// runChunker runs a chunk worker until ctx ends, then stops it gracefully.
// Its evidence, per task of each chunk:
//
//	S <run> <task> <seq> <start µs> <lease deadline µs> <alive 0|1>
//	E <run> <task> <end µs>
//	A <task> <µs>            (OnTaskEnd: acked)
//	F <task> <µs> <error>    (OnTaskEnd: any other end)
func runChunker(ctx context.Context, c childConfig, f *fleet.Fleet, rec *recorder, log *slog.Logger) error {
	q := fleet.NewQueue[job](f, fcQueue, fcQueueOptions(c.Lease))
	if err := q.Err(); err != nil {
		return err
	}
	var runs atomic.Int64
	id := fmt.Sprintf("%s.%d", c.Name, c.Inc)
	h := fleet.ChunkFunc[struct{}, struct{}, job](func(hctx context.Context, _ *fleet.Slot[struct{}, struct{}], ch *fleet.Chunk[job]) error {
		run := fmt.Sprintf("%s.%d", id, runs.Add(1))
		now := time.Now().UnixMicro()
		for i, t := range ch.Tasks {
			alive := 1
			if ch.Context(i).Err() != nil {
				alive = 0
			}
			rec.line("S %s %s %d %d %d %d", run, t.ID, t.Payload.Seq, now, t.Deadline().UnixMicro(), alive)
		}
		select {
		case <-time.After(time.Duration(10+runs.Load()%5*10) * time.Millisecond): // 10-50 ms: kills land mid-chunk
		case <-hctx.Done():
		}
		end := time.Now().UnixMicro()
		for _, t := range ch.Tasks {
			rec.line("E %s %s %d", run, t.ID, end)
		}
		return nil
	})
	end := func(task string, err error) {
		if err == nil {
			rec.line("A %s %d", task, time.Now().UnixMicro())
			return
		}
		rec.line("F %s %d %s", task, time.Now().UnixMicro(), word(errClass(err)))
	}
	for {
		w := fleet.NewChunkWorker(f, fleet.WorkerOptions{
			Type: "fc", ID: id, Slots: c.Slots, Heartbeat: c.Heartbeat, StopGrace: 5 * time.Second, Logger: log, OnTaskEnd: end,
		}, q, fleet.ChunkOptions{MinSize: 10, MaxSize: 50, MaxWait: 20 * time.Millisecond}, h)
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := w.Start(context.WithoutCancel(sctx))
		cancel()
		if err == nil {
			<-ctx.Done()
			stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := w.Stop(stopCtx); err != nil {
				return fmt.Errorf("stop: %w", err)
			}
			return nil
		}
		if errors.Is(err, fleet.ErrInvalidArgument) || errors.Is(err, fleet.ErrInvalidOptions) {
			return err
		}
		log.Warn("chaos: chunk worker start failed; retrying", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(200 * time.Millisecond):
		}
	}
}
