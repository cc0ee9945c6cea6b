package chaos

// The child side of the flows: a worker process also runs the flows'
// queues, and every process records the releases it made (R lines).

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/fleet-go/fleet"
)

// releases is an Observer that records each release this process made,
// as "R <task> <µs>".
func releases(rec *recorder) *fleet.Observer {
	return &fleet.Observer{Released: func(_ context.Context, e fleet.ReleaseEvent) {
		rec.line("R %s %d", e.ID, time.Now().UnixMicro())
	}}
}

// startFlowWorker starts a worker over the flows' queues (a priority worker
// of equal weights), with the handler of the plain tasks; nil when Start
// failed for want of Redis (a fault may be on): the run goes on without it
// until the process is started again.
func startFlowWorker(ctx context.Context, c childConfig, f *fleet.Fleet, h *handler, log *slog.Logger) (*fleet.Worker, error) {
	var qs []fleet.WeightedQueue[job]
	for _, name := range c.FlowQueues {
		q := fleet.NewQueue[job](f, name, c.queueOptions())
		if err := q.Err(); err != nil {
			return nil, err
		}
		qs = append(qs, fleet.WeightedQueue[job]{Queue: q, Weight: 1})
	}
	for {
		w := fleet.NewPriorityWorker(f, fleet.WorkerOptions{
			Type: "chaosflow", ID: fmt.Sprintf("%s.%d", c.Name, c.Inc), Slots: c.Slots,
			Heartbeat: c.Heartbeat, StopGrace: 5 * time.Second, Logger: log, OnTaskEnd: h.taskEnd,
		}, fleet.PriorityWeighted, qs, fleet.BatchFunc[struct{}, struct{}, job](h.handle))
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := w.Start(context.WithoutCancel(sctx))
		cancel()
		if err == nil {
			return w, nil
		}
		log.Warn("chaos: flow worker start failed; retrying", "err", err)
		select {
		case <-ctx.Done():
			return nil, nil
		case <-time.After(200 * time.Millisecond):
		}
	}
}
