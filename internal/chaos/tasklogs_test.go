package chaos

import (
	"context"
	"strings"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/keys"
	"github.com/fleet-go/fleet/internal/redistest"
)

// checkTaskLogs checks the per-task logs (fleet.Logger) that the chaos
// handler writes on every run, after the drain. The chaos queue keeps no
// records, so an ack deletes its task's log: a log left for a task that
// is not a dead letter is an orphan (want 0). A dead letter's log, when
// its last runs ended in the handler rather than with a killed process,
// is kept with a lifetime, and each of its entries opens with the run's
// keys (the queue seals them) and names its attempt.
func (r *run) checkTaskLogs(ctx context.Context, f *fleet.Fleet, dead map[string]bool) {
	qk := keys.New(r.prefix, r.tg.layout == fleet.LayoutTagged).Queue(queueName)
	prefix := qk.Log
	q := fleet.NewQueue[job](f, queueName, queueOptions(time.Minute, 1, time.Second, time.Second))
	c := f.Client()
	var orphans, stepOrphans []string
	kept, opened := 0, 0
	for _, k := range redistest.Keys(r.t, c, r.prefix) {
		// A durable step's record (the handler's "first") goes with its
		// task's ack as its log does: one left for a task that is not a
		// dead letter is an orphan too.
		if id, ok := strings.CutPrefix(k, qk.Steps); ok {
			if !dead[id] {
				stepOrphans = append(stepOrphans, id)
			}
			continue
		}
		id, ok := strings.CutPrefix(k, prefix)
		if !ok {
			continue
		}
		if !dead[id] {
			orphans = append(orphans, id)
			continue
		}
		kept++
		ttl, err := c.Do(ctx, c.B().Pttl().Key(k).Build()).AsInt64()
		if err != nil {
			r.t.Fatalf("PTTL %s: %v", k, err)
		}
		if ttl < 0 {
			r.t.Errorf("task %s's log has no lifetime (PTTL %d)", id, ttl)
		}
		if opened < 50 {
			opened++
			rec, err := q.Lookup(ctx, id)
			if err != nil {
				r.t.Fatalf("lookup dead task %s: %v", id, err)
			}
			for _, l := range rec.Logs {
				if l.Sealed != "" || l.Attempt < 1 || len(l.Lines) != 1 || l.Lines[0].Message != "run" {
					r.t.Errorf("dead task %s: a log entry that does not open or read: %+v", id, l)
				}
			}
		}
	}
	r.t.Logf("%s: task logs kept for dead letters %d (%d opened), orphaned %d", r.tg.name, kept, opened, len(orphans))
	if len(dead) > 0 && kept == 0 {
		r.t.Errorf("%s: %d dead letters and not one kept its log", r.tg.name, len(dead))
	}
	if len(stepOrphans) > 0 {
		r.t.Errorf("%s: %d durable steps left for tasks that are not dead letters (want 0), e.g. %s", r.tg.name, len(stepOrphans), stepOrphans[0])
	}
	if len(orphans) > 0 {
		r.t.Errorf("%s: %d task logs left for tasks that are not dead letters (want 0), e.g. %s", r.tg.name, len(orphans), orphans[0])
	}
}
