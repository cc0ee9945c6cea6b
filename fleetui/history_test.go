package fleetui_test

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleetui"
	"github.com/fleet-go/fleet/internal/redistest"
)

// TestHistoryCharts: history written in Redis before the page ever
// opened (by the documented keys of docs/SCHEMA.md) fills the overview's
// rates, chart and depth line, and a queue's charts over 1 h, 24 h and 30
// days; a bad span is a 400; the acks and nacks of the bed's own Fleet
// reach the charts within its flush.
func TestHistoryCharts(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		b := newBed(t, tg, fleetui.Options{}, func(o *fleet.Options) { o.HistoryFlush = 50 * time.Millisecond })
		c := ctxFor(t)
		if _, err := b.Q.Submit(c, job{Note: "registers the queue"}); err != nil {
			t.Fatal(err)
		}
		base := "fleet:queue:past"
		if tg.Tagged {
			base = "fleet:queue:{past}"
		}
		if _, err := fleet.NewQueue[job](b.F, "past", fleet.QueueOptions{}).Submit(c, job{Note: "registers past"}); err != nil {
			t.Fatal(err)
		}
		// The last 8 minutes (the current one included) did 10 and failed
		// 2 each, with a depth of 5: the 5 whole minutes before this one
		// average 10.0 and 2.0 whichever minute the page is read in.
		now := time.Now().Unix() / 60 * 60
		for m := now - 7*60; m <= now; m += 60 {
			hour := m / 3600 * 3600
			key := b.Prefix + base + ":hist:m:" + strconv.FormatInt(hour, 10)
			mm := strconv.FormatInt((m-hour)/60, 10) + ":"
			if err := b.Raw.Do(c, b.Raw.B().Hset().Key(key).FieldValue().FieldValue(mm+"d", "10").FieldValue(mm+"x", "2").FieldValue(mm+"n", "5").Build()).Error(); err != nil {
				t.Fatal(err)
			}
		}
		day := b.Prefix + base + ":hist:d:" + strconv.FormatInt(now/86400*86400, 10)
		if err := b.Raw.Do(c, b.Raw.B().Hset().Key(day).FieldValue().FieldValue("d", "80").FieldValue("x", "16").FieldValue("n", "5").Build()).Error(); err != nil {
			t.Fatal(err)
		}

		code, body := b.get(t, "/fleet/")
		if code != http.StatusOK {
			t.Fatalf("overview %d", code)
		}
		mustContain(t, "overview", body, `<td class="n done-rate">10.0</td><td class="n failed-rate">2.0</td>`,
			`id="done-chart"`, `data-done="80" data-failed="16"`, `aria-label="pending depth, peak 5"`)
		for _, span := range []string{"", "?span=1h", "?span=24h", "?span=30d"} {
			code, body := b.get(t, "/fleet/queues/past"+span)
			if code != http.StatusOK {
				t.Fatalf("queue page %s: %d", span, code)
			}
			mustContain(t, "queue page "+span, body, `id="history-chart"`, `data-done="80" data-failed="16"`, `id="depth-chart"`)
		}
		for path, want := range map[string]int{
			"/fleet/queues/past?span=7d": http.StatusBadRequest,
			"/fleet/queues/past?span=1H": http.StatusBadRequest,
			"/fleet/queues/nope?span=1h": http.StatusNotFound,
		} {
			if code, _ := b.get(t, path); code != want {
				t.Errorf("GET %s: %d, want %d", path, code, want)
			}
		}

		// The bed's Fleet acks 3 tasks of jobs and nacks 1: its flushes
		// bring them to the charts.
		for range 3 {
			if _, err := b.Q.Submit(c, job{Note: "acked"}); err != nil {
				t.Fatal(err)
			}
		}
		ts, err := b.Q.Reserve(c, 4, 0)
		if err != nil || len(ts) != 4 {
			t.Fatalf("reserve: %d %v", len(ts), err)
		}
		for _, tk := range ts[:3] {
			if err := tk.Ack(c); err != nil {
				t.Fatal(err)
			}
		}
		if err := ts[3].Nack(c, errors.New("again")); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			_, body := b.get(t, "/fleet/queues/jobs")
			if containsAll(body, `id="history-chart"`, `data-done="3" data-failed="1"`) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the acks never reached the chart:\n%s", body)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// containsAll reports whether body holds every one of wants.
func containsAll(body string, wants ...string) bool {
	for _, w := range wants {
		if !strings.Contains(body, w) {
			return false
		}
	}
	return true
}
