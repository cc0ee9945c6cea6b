package fleet_test

import (
	"context"
	"errors"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// histAt is the clock of the history tests that pin one: 17:30 into the
// hour before this run's (histHour), in the day that starts at histDay.
// It follows the real clock: a bucket's expiry (an hour's 25 h) is set on
// the server's clock, so a date pinned in the past would expire its
// buckets as they are written, once it is a day old.
var (
	histHourT = time.Now().UTC().Truncate(time.Hour).Add(-time.Hour)
	histAt    = histHourT.Add(17*time.Minute + 30*time.Second)
	histHour  = histHourT.Unix()
	histDay   = histAt.Truncate(24 * time.Hour).Unix()
)

// histKeys spells the history buckets of queue name at histAt.
func (e *env) histKeys(name string) (minute, day string) {
	base := e.key("fleet:queue:"+name, "fleet:queue:{"+name+"}")
	return base + ":hist:m:" + strconv.FormatInt(histHour, 10), base + ":hist:d:" + strconv.FormatInt(histDay, 10)
}

// openHist opens a Fleet that keeps history, flushed only when the test
// says (FlushHistory) or at Close, on a clock stopped at histAt.
func openHist(t *testing.T, tg redistest.Target, prefix string) *fleet.Fleet {
	f := openOn(t, tg, prefix, func(o *fleet.Options) { o.HistoryFlush = time.Hour })
	fleet.SetClock(f, func() time.Time { return histAt })
	return f
}

// flushHist flushes f's history and fails unless every batch was added.
func flushHist(t *testing.T, f *fleet.Fleet) {
	t.Helper()
	if n := fleet.FlushHistory(ctx(t), f); n != 0 {
		t.Fatalf("%d history batches unsent", n)
	}
}

// dayFields splits a day bucket into its counts and its Fleets' sequence
// fields ("s:<random>").
func dayFields(m map[string]string) (counts map[string]string, seqs []string) {
	counts = maps.Clone(m)
	for k, v := range m {
		if strings.HasPrefix(k, "s:") {
			seqs = append(seqs, v)
			delete(counts, k)
		}
	}
	return counts, seqs
}

// TestHistory: acks, a nack that retries, a dead letter and a release of
// two Fleets land in the queue's minute and day buckets, with their
// lifetimes; History reads them back, minute by minute and day by day,
// with the empty buckets in between.
func TestHistory(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		f := openHist(t, tg, e.Prefix)
		opts := fleet.QueueOptions{MaxAttempts: 3, BackoffBase: time.Hour, BackoffMax: time.Hour} // the nacked task stays scheduled
		q := fleet.NewQueue[job](f, "hq", opts)
		submitJobs(t, q, 6)
		tasks, err := q.Reserve(c, 6, 0)
		if err != nil || len(tasks) != 6 {
			t.Fatalf("reserve: %d %v", len(tasks), err)
		}
		for _, tk := range tasks[:3] {
			if err := tk.Ack(c); err != nil {
				t.Fatal(err)
			}
		}
		if err := tasks[3].Nack(c, errors.New("boom")); err != nil {
			t.Fatal(err)
		}
		if err := tasks[4].DeadLetter(c, errors.New("bad")); err != nil {
			t.Fatal(err)
		}
		if err := tasks[5].Release(c); err != nil { // not an end: no count
			t.Fatal(err)
		}
		flushHist(t, f)
		mk, dk := e.histKeys("hq")
		if got, want := e.hgetall(t, mk), map[string]string{"17:d": "3", "17:r": "1", "17:x": "1", "17:n": "1"}; !maps.Equal(got, want) {
			t.Fatalf("minute bucket %v, want %v", got, want)
		}
		counts, seqs := dayFields(e.hgetall(t, dk))
		if want := map[string]string{"d": "3", "r": "1", "x": "1", "n": "1"}; !maps.Equal(counts, want) || len(seqs) != 1 || seqs[0] != "1" {
			t.Fatalf("day bucket %v %v, want %v and one batch", counts, seqs, want)
		}
		for k, want := range map[string]int64{mk: histHour + 25*3600, dk: histDay + 31*86400} {
			if got, err := e.do(t, e.Raw.B().Expiretime().Key(k).Build()).AsInt64(); err != nil || got != want {
				t.Fatalf("%s expires at %d %v, want %d", k, got, err, want)
			}
		}

		// Another Fleet adds to the same buckets, with its own sequence.
		f2 := openHist(t, tg, e.Prefix)
		q2 := fleet.NewQueue[job](f2, "hq", opts)
		again, err := q2.Reserve(c, 1, 0)
		if err != nil || len(again) != 1 {
			t.Fatalf("reserve the released task: %d %v", len(again), err)
		}
		if err := again[0].Ack(c); err != nil {
			t.Fatal(err)
		}
		flushHist(t, f2)
		if got := e.hgetall(t, mk); got["17:d"] != "4" || got["17:n"] != "0" {
			t.Fatalf("minute bucket after the second Fleet %v", got)
		}
		counts, seqs = dayFields(e.hgetall(t, dk))
		if counts["d"] != "4" || counts["n"] != "1" || len(seqs) != 2 {
			t.Fatalf("day bucket after the second Fleet %v %v (the peak stays 1)", counts, seqs)
		}

		want := fleet.HistoryPoint{At: histAt.Truncate(time.Minute), Done: 4, Failed: 2, Retried: 1, DeadLettered: 1, Depth: 0}
		for _, span := range []time.Duration{time.Hour, fleet.HistoryMinutes} {
			ps, err := f.Queue("hq").History(c, span)
			if err != nil || len(ps) != int(span/time.Minute) {
				t.Fatalf("History(%v): %d points %v", span, len(ps), err)
			}
			if got := ps[len(ps)-1]; !got.At.Equal(want.At) || got.Done != want.Done || got.Failed != want.Failed ||
				got.Retried != want.Retried || got.DeadLettered != want.DeadLettered || got.Depth != want.Depth {
				t.Fatalf("History(%v) last point %+v, want %+v", span, got, want)
			}
			for i, p := range ps[:len(ps)-1] {
				if at := want.At.Add(time.Duration(i-len(ps)+1) * time.Minute); !p.At.Equal(at) || p.Done+p.Failed != 0 || p.Depth != -1 {
					t.Fatalf("History(%v) point %d: %+v, want an empty bucket at %v", span, i, p, at)
				}
			}
		}
		ps, err := f.Queue("hq").History(c, fleet.HistoryDays)
		if err != nil || len(ps) != 30 {
			t.Fatalf("History(30 days): %d points %v", len(ps), err)
		}
		if got := ps[29]; got.At.Unix() != histDay || got.Done != 4 || got.Retried != 1 || got.DeadLettered != 1 || got.Failed != 2 || got.Depth != 1 {
			t.Fatalf("today %+v", got)
		}
		if p := ps[0]; p.At.Unix() != histDay-29*86400 || p.Done != 0 || p.Depth != -1 {
			t.Fatalf("the first day %+v", p)
		}
	})
}

// TestHistorySweep: the reservations that a sweep re-queues count as
// retried, and those it buries as dead-lettered, in the sweeping Fleet's
// history; the sweep also makes it sample the queue's depth.
func TestHistorySweep(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		f := openHist(t, tg, e.Prefix)
		q := fleet.NewQueue[job](e.F, "hs", fleet.QueueOptions{MaxAttempts: 2, Lease: 100 * time.Millisecond, BackoffBase: time.Millisecond, BackoffMax: time.Millisecond})
		submitJobs(t, q, 1)
		var st fleet.SweepStats
		for _, want := range []fleet.SweepStats{{Requeued: 1}, {DeadLettered: 1}} {
			tasks, err := q.Reserve(c, 1, 5*time.Second)
			if err != nil || len(tasks) != 1 {
				t.Fatalf("reserve: %d %v", len(tasks), err)
			}
			waitFor(t, 10*time.Second, func() bool {
				s, err := f.Sweep(c, fleet.SweeperOptions{})
				if err != nil {
					t.Fatal(err)
				}
				st.Requeued += s.Requeued
				st.DeadLettered += s.DeadLettered
				return st.Requeued == want.Requeued && st.DeadLettered == want.DeadLettered
			}, "sweeps %+v, want %+v", st, want)
			st = fleet.SweepStats{}
		}
		flushHist(t, f)
		mk, _ := e.histKeys("hs")
		if got, want := e.hgetall(t, mk), map[string]string{"17:r": "1", "17:x": "1", "17:n": "0"}; !maps.Equal(got, want) {
			t.Fatalf("minute bucket %v, want %v", got, want)
		}
	})
}

// TestHistoryWorker: a worker's acks, retries and dead letters all reach
// the history, the last of them by the flush at Close; read from another
// Fleet.
func TestHistoryWorker(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		f := openOn(t, tg, e.Prefix, func(o *fleet.Options) { o.HistoryFlush = time.Hour })
		q := fleet.NewQueue[job](f, "hw", fleet.QueueOptions{MaxAttempts: 2, BackoffBase: time.Millisecond, BackoffMax: time.Millisecond})
		handler := fleet.BatchFunc[wcfg, out, job](func(ctx context.Context, s *fleet.Slot[wcfg, out], tk *fleet.Task[job]) error {
			if tk.Payload.N%5 == 0 {
				return errors.New("fails")
			}
			return nil
		})
		w := fleet.NewBatchWorker(f, fleet.WorkerOptions{Type: "hw", ID: "w1", Slots: 4}, q, handler)
		startWorker(t, w)
		runSweeper(t, f, 20*time.Millisecond) // moves the retries when due
		submitJobs(t, q, 20)
		k := e.qk("hw")
		waitFor(t, 30*time.Second, func() bool { return len(e.lrange(t, k.Dead)) == 4 }, "dead letters: %v", later(func() any { return e.dump(t) }))
		waitQueueGone(t, e, k)
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		ps, err := e.F.Queue("hw").History(c, 2*time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		var sum fleet.HistoryPoint
		for _, p := range ps {
			sum.Done += p.Done
			sum.Retried += p.Retried
			sum.DeadLettered += p.DeadLettered
			sum.Failed += p.Failed
		}
		if want := (fleet.HistoryPoint{Done: 16, Retried: 4, DeadLettered: 4, Failed: 8}); sum != want {
			t.Fatalf("history sums %+v, want %+v", sum, want)
		}
	})
}

// TestHistoryBadInput: a span out of bounds is refused and writes nothing;
// a bucket of another type is left alone, the counts wait for the next
// flush, and are added once it is gone; a count that is not a number reads
// as 0.
func TestHistoryBadInput(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		f := openHist(t, tg, e.Prefix)
		for _, span := range []time.Duration{0, -time.Minute, fleet.HistoryDays + time.Second} {
			if _, err := f.Queue("hb").History(c, span); !errors.Is(err, fleet.ErrInvalidArgument) {
				t.Fatalf("History(%v): %v, want ErrInvalidArgument", span, err)
			}
		}
		if keys := prefixedKeys(t, e.Raw, e.Prefix); len(keys) != 0 {
			t.Fatalf("a refused read wrote %v", keys)
		}
		mk, dk := e.histKeys("hb")
		e.do(t, e.Raw.B().Set().Key(mk).Value("not a hash").Build())
		q := fleet.NewQueue[job](f, "hb", fleet.QueueOptions{})
		submitJobs(t, q, 2)
		tasks, err := q.Reserve(c, 2, 0)
		if err != nil || len(tasks) != 2 {
			t.Fatalf("reserve: %d %v", len(tasks), err)
		}
		for _, tk := range tasks {
			if err := tk.Ack(c); err != nil {
				t.Fatal(err)
			}
		}
		if n := fleet.FlushHistory(c, f); n != 1 {
			t.Fatalf("%d batches unsent, want the one refused", n)
		}
		if got, _ := e.get(t, mk); got != "not a hash" {
			t.Fatalf("the string bucket became %q", got)
		}
		if rawExists(t, e.Raw, dk) {
			t.Fatalf("the day bucket was written beside a refused minute bucket: %v", e.hgetall(t, dk))
		}
		if _, err := f.Queue("hb").History(c, time.Hour); !errors.Is(err, fleet.ErrWrongType) {
			t.Fatalf("History over a string bucket: %v, want ErrWrongType", err)
		}
		e.do(t, e.Raw.B().Del().Key(mk).Build())
		flushHist(t, f)
		if got := e.hgetall(t, mk); got["17:d"] != "2" {
			t.Fatalf("minute bucket %v, want the 2 acks kept from the refused flush", got)
		}
		e.do(t, e.Raw.B().Hset().Key(mk).FieldValue().FieldValue("17:d", "many").Build())
		ps, err := f.Queue("hb").History(c, time.Hour)
		if err != nil || ps[59].Done != 0 || ps[59].Depth != 0 {
			t.Fatalf("a count that is no number: %+v %v", ps[59], err)
		}
	})
}

// TestHistoryLostReply: a flush whose reply is held back past its ctx is
// sent again, and added once; a flush over a cut connection is kept and
// added after; the flush at Close adds the last counts.
func TestHistoryLostReply(t *testing.T) {
	t.Parallel()
	p := startProxied(t, fleet.Options{Layout: fleet.LayoutCompat, HistoryFlush: time.Hour})
	e, f := p.E, p.Through
	fleet.SetClock(f, func() time.Time { return histAt })
	c := ctx(t)
	q := fleet.NewQueue[job](f, "hl", fleet.QueueOptions{})
	ack := func(n int) {
		t.Helper()
		submitJobs(t, q, n)
		tasks, err := q.Reserve(c, n, 0)
		if err != nil || len(tasks) != n {
			t.Fatalf("reserve: %d %v", len(tasks), err)
		}
		for _, tk := range tasks {
			if err := tk.Ack(c); err != nil {
				t.Fatal(err)
			}
		}
	}
	mk, dk := e.histKeys("hl")
	minuteDone := func() string { return e.hgetall(t, mk)["17:d"] }
	ack(1)
	flushHist(t, f) // samples the depth of this minute: the next flushes only add counts
	ack(2)
	p.P.HoldReplies()
	held, cancel := context.WithTimeout(c, 300*time.Millisecond)
	n := fleet.FlushHistory(held, f)
	cancel()
	if n != 1 {
		t.Fatalf("%d batches unsent with the reply held, want 1", n)
	}
	waitFor(t, 10*time.Second, func() bool { return minuteDone() == "3" }, "the held flush never ran: %v", later(func() any { return e.hgetall(t, mk) }))
	p.P.Thaw()
	flushHist(t, f)
	if got := minuteDone(); got != "3" {
		t.Fatalf("done %q after the batch was sent again, want 3 (added once)", got)
	}

	ack(3)
	p.P.Refuse(true)
	p.P.Cut()
	cut, cancel := context.WithTimeout(c, 300*time.Millisecond)
	n = fleet.FlushHistory(cut, f)
	cancel()
	if n != 1 || minuteDone() != "3" {
		t.Fatalf("over a cut connection: %d unsent, done %q", n, minuteDone())
	}
	p.P.Refuse(false)
	waitFor(t, 10*time.Second, func() bool { return fleet.FlushHistory(c, f) == 0 }, "the kept batch was never added")
	if got := minuteDone(); got != "6" {
		t.Fatalf("done %q after the cut, want 6", got)
	}

	ack(1)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if got := minuteDone(); got != "7" {
		t.Fatalf("done %q after Close, want 7 (Close flushes)", got)
	}
	counts, seqs := dayFields(e.hgetall(t, dk))
	if counts["d"] != "7" || len(seqs) != 1 {
		t.Fatalf("day bucket %v %v", counts, seqs)
	}
}
