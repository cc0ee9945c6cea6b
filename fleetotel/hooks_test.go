package fleetotel_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleetotel"
)

// TestHooksConcurrentAttributes: the span start options are pooled and
// filled per call; hooks called at once from many goroutines, on two
// queues, with and without a schedule, each make spans with exactly their
// own attributes (nothing left over from another call).
func TestHooksConcurrentAttributes(t *testing.T) {
	k := newKit(t, fleetotel.Options{})
	obs := k.tel.Observer()
	h := k.tel.Middleware()(func(context.Context, fleet.TaskInfo) error { return nil })
	const goroutines, each = 8, 50
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			ctx := context.Background()
			for i := range each {
				queue := fmt.Sprintf("q%d", (g+i)%2)
				id := fmt.Sprintf("task-%d-%d", g, i)
				e := fleet.SubmitEvent{Queue: queue, IDs: []string{id}}
				if i%3 == 0 {
					e.Schedule = "sched-" + id
				}
				if i%5 == 0 {
					e.IDs = append(e.IDs, id+"-b")
				}
				tr, done := obs.Submit(ctx, e)
				if err := h(ctx, fleet.TaskInfo{Queue: queue, ID: id, Attempts: i, Trace: tr}); err != nil {
					t.Error(err)
				}
				done(len(e.IDs), nil)
			}
		})
	}
	wg.Wait()
	spans := k.ended()
	if len(spans) != 2*goroutines*each {
		t.Fatalf("%d spans", len(spans))
	}
	scheduled := 0
	for _, s := range spans {
		a := attrs(s.Attributes)
		var g, i int
		if _, err := fmt.Sscanf(a["messaging.message.id"], "task-%d-%d", &g, &i); err != nil && s.Name[:6] != "submit" {
			t.Fatalf("%s: %v", s.Name, a)
		}
		queue := a["messaging.destination.name"]
		base := map[string]string{"messaging.system": "fleet", "messaging.destination.name": queue}
		switch s.Name {
		case "process " + queue:
			base["messaging.operation.name"], base["messaging.operation.type"] = "process", "process"
			base["messaging.message.id"] = a["messaging.message.id"]
			base["fleet.task.attempts"] = fmt.Sprint(i)
			if queue != fmt.Sprintf("q%d", (g+i)%2) {
				t.Fatalf("process span of %s on %s", a["messaging.message.id"], queue)
			}
		case "submit " + queue:
			base["messaging.operation.name"], base["messaging.operation.type"] = "submit", "send"
			if n, ok := a["messaging.batch.message_count"]; ok {
				base["messaging.batch.message_count"] = n
				if n != "2" {
					t.Fatalf("batch of %s", n)
				}
			} else {
				base["messaging.message.id"] = a["messaging.message.id"]
			}
			if sched, ok := a["fleet.schedule.name"]; ok {
				scheduled++
				base["fleet.schedule.name"] = sched
				base["fleet.submit.written"] = a["fleet.submit.written"]
				if id, ok := a["messaging.message.id"]; ok && sched != "sched-"+id {
					t.Fatalf("schedule %q on the submit of %s", sched, id)
				}
			}
		default:
			t.Fatalf("span %q", s.Name)
		}
		if !sameMap(a, base) {
			t.Fatalf("%s:\n got %v\nwant %v", s.Name, a, base)
		}
	}
	if want := goroutines * ((each + 2) / 3); scheduled != want {
		t.Fatalf("%d submit spans with a schedule, want %d", scheduled, want)
	}
}
