package main

import (
	"strings"
	"testing"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// TestFleetctlControl: pause and resume a queue, list schedules; an
// unknown queue is "not found".
func TestFleetctlControl(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		ctx, f, conn, _ := openTarget(t, tg)
		q := fleet.NewQueue[job](f, "jobs", fleet.QueueOptions{})
		if _, err := q.Submit(ctx, job{N: 1}); err != nil {
			t.Fatal(err)
		}
		if err := fleet.AddSchedule(ctx, q, "hourly", fleet.Cron("@hourly"), job{N: 2}, fleet.ScheduleOptions{}); err != nil {
			t.Fatal(err)
		}
		out, errOut, code := fctl(t, append(conn, "pause", "jobs")...)
		if code != 0 || !strings.Contains(out, "paused=true") {
			t.Fatalf("pause: %d %q %q", code, out, errOut)
		}
		if st, err := q.Stats(ctx); err != nil || !st.Paused {
			t.Fatalf("stats %+v %v", st, err)
		}
		out, _, code = fctl(t, append(conn, "queues")...)
		if code != 0 || !strings.Contains(out, "PAUSED") || !strings.Contains(out, "true") {
			t.Fatalf("queues: %d %q", code, out)
		}
		out, errOut, code = fctl(t, append(conn, "resume", "jobs")...)
		if code != 0 || !strings.Contains(out, "paused=false") {
			t.Fatalf("resume: %d %q %q", code, out, errOut)
		}
		_, errOut, code = fctl(t, append(conn, "pause", "nosuch")...)
		if code != exitNotFound || !strings.Contains(errOut, "no such queue") {
			t.Fatalf("pause unknown: %d %q", code, errOut)
		}
		out, _, code = fctl(t, append(conn, "schedules")...)
		if code != 0 || !strings.Contains(out, "hourly") || !strings.Contains(out, "cron @hourly") || !strings.Contains(out, "once") {
			t.Fatalf("schedules: %d %q", code, out)
		}
	})
}
