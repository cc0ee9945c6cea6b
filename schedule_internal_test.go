package fleet

import (
	"slices"
	"testing"
	"time"
)

// TestDueTicks: ticks within Grace of now each fire; older ones are missed:
// one task stands for them under MissedRunOnce, none under MissedSkip; a
// tick at or before last never comes back.
func TestDueTicks(t *testing.T) {
	ms := func(s int64) time.Time { return time.UnixMilli(s) }
	sp := Every(100 * time.Millisecond)
	once := ScheduleInfo{Missed: MissedRunOnce, Grace: 250 * time.Millisecond}
	skip := ScheduleInfo{Missed: MissedSkip, Grace: 250 * time.Millisecond}
	cases := []struct {
		name      string
		info      ScheduleInfo
		last, now int64
		want      []tick
	}{
		{"none due", once, 10_000, 10_099, nil},
		{"one due", once, 10_000, 10_100, []tick{{10_100, true}}},
		{"late but in grace", once, 10_000, 10_320, []tick{{10_100, true}, {10_200, true}, {10_300, true}}},
		{"missed, run once", once, 10_000, 11_030, []tick{{10_700, true}, {10_800, true}, {10_900, true}, {11_000, true}}},
		{"missed, skip", skip, 10_000, 11_030, []tick{{10_700, false}, {10_800, true}, {10_900, true}, {11_000, true}}},
		{"last ahead of now", once, 12_000, 11_030, nil},
	}
	for _, c := range cases {
		got := dueTicks(sp, c.info, ms(c.last), ms(c.now))
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
	cr := Cron("0 * * * *") // hourly, UTC
	h := time.Date(2026, 1, 2, 10, 0, 0, 0, time.UTC)
	if got := cr.latest(h.Add(59 * time.Minute)); !got.Equal(h) {
		t.Fatalf("cron latest %v", got)
	}
	if got := cr.next(h); !got.Equal(h.Add(time.Hour)) {
		t.Fatalf("cron next %v", got)
	}
	got := dueTicks(cr, ScheduleInfo{Missed: MissedRunOnce, Grace: time.Minute}, h.Add(-5*time.Hour), h.Add(30*time.Second))
	if want := []tick{{h.Add(-time.Hour).UnixMilli(), true}, {h.UnixMilli(), true}}; !slices.Equal(got, want) {
		t.Fatalf("cron due %v, want %v", got, want)
	}
}
