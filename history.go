package fleet

// The queues' history (docs/SCHEMA.md): each Fleet counts, per queue, the
// ends of the tasks that it acks, nacks and dead-letters, and that its
// sweeps re-queue or bury; every Options.HistoryFlush it adds them to the
// queue's per-minute bucket (kept 25 hours) and per-day bucket (kept 31
// days), one script per queue. It also samples the depth of each queue it
// counted or swept, once a minute. Nothing is added to the hot path's
// Redis calls: a task's end costs an atomic add in the process.

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"
)

// Bounds and lifetimes of the queues' history.
const (
	// DefaultHistoryFlush is how often a Fleet adds what it counted to the
	// queues' history (Options.HistoryFlush).
	DefaultHistoryFlush = 5 * time.Second
	// HistoryMinutes is the longest span that Queue.History reads minute
	// by minute; the per-minute buckets are kept 25 hours.
	HistoryMinutes = 24 * time.Hour
	// HistoryDays is the longest span that Queue.History reads, day by
	// day (UTC days); the per-day buckets are kept 31 days.
	HistoryDays = 30 * 24 * time.Hour

	histMinuteTTL = 25 * time.Hour
	histDayTTL    = 31 * 24 * time.Hour
	// histFlushTimeout bounds one flush, and the last one at Close.
	histFlushTimeout = 2 * time.Second
)

var historyAddScript = newScript("history_add.lua")

// defaultHistoryFlush is Options.HistoryFlush's default: DefaultHistoryFlush,
// except in the package's own tests, which count commands and read the
// keyspace while a flush could land (history_test.go turns it on).
var defaultHistoryFlush = DefaultHistoryFlush

// HistoryPoint is one bucket of a queue's history (Queue.History): what
// the Fleets that ran and swept the queue counted in it.
type HistoryPoint struct {
	// At is the bucket's start: a minute, or a UTC day.
	At time.Time `json:"at"`
	// Done counts the tasks acked.
	Done int64 `json:"done"`
	// Failed counts the runs that ended in failure: Retried plus
	// DeadLettered.
	Failed int64 `json:"failed"`
	// Retried counts the failed runs whose task was scheduled for another
	// attempt: nacked, or re-queued by a sweeper after its lease ran out.
	Retried int64 `json:"retried"`
	// DeadLettered counts the tasks moved to the dead letters (after their
	// last attempt, by DeadLetter, or as cancelled).
	DeadLettered int64 `json:"dead_lettered"`
	// Depth is the pending tasks sampled in the minute (for a day, the
	// day's highest sample), or -1 when no Fleet sampled it.
	Depth int64 `json:"depth"`
}

// newHistory returns a Fleet's history of Options.HistoryFlush every (0:
// the default; < 0: off).
func newHistory(every time.Duration) *history {
	if every == 0 {
		every = defaultHistoryFlush
	}
	return &history{every: every}
}

// history returns f's history.
func (f *Fleet) history() *history {
	if f.hist != nil {
		return f.hist
	}
	return noHistory
}

// histOf returns the counts of queue, and starts the flusher on first use;
// nil when the history is off.
func (f *Fleet) histOf(queue string) *histCounts {
	h := f.history()
	if h.every < 0 {
		return nil
	}
	v, ok := h.queues.Load(queue)
	if !ok {
		v, _ = h.queues.LoadOrStore(queue, &histCounts{})
		h.start.Do(func() {
			h.mu.Lock()
			h.id, h.last = "s:"+newToken(), f.now()
			h.mu.Unlock()
			f.spawn(f.flushHistory)
		})
	}
	return v.(*histCounts)
}

// recordEnd counts the end of task id of queue with outcome for the
// queue's history, and tells the Observer (taskEnded), if it ended (ok).
// Every end of a task's run goes through it.
func (f *Fleet) recordEnd(ctx context.Context, queue, id string, outcome TaskOutcome, ok bool) {
	if ok {
		f.countEnd(queue, outcome, 1)
	}
	f.taskEnded(ctx, queue, id, outcome, ok)
}

// countEnd counts n task ends of queue with outcome, for the history.
func (f *Fleet) countEnd(queue string, outcome TaskOutcome, n int64) {
	if n <= 0 {
		return
	}
	c := f.histOf(queue)
	if c == nil {
		return
	}
	switch outcome {
	case TaskProcessed:
		c.done.Add(n)
	case TaskRetried:
		c.retried.Add(n)
	case TaskDeadLettered:
		c.dead.Add(n)
	}
}

// flushHistory adds the counts every HistoryFlush, and right after each
// minute's end (so that a flush covers one minute), until Close; then
// once more.
func (f *Fleet) flushHistory() {
	t := time.NewTimer(f.histWait())
	defer t.Stop()
	for {
		select {
		case <-f.done:
			// The client closes after this goroutine ends: a last flush.
			ctx, cancel := context.WithTimeout(context.Background(), histFlushTimeout)
			f.flushHistoryOnce(ctx, false)
			cancel()
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(f.life, histFlushTimeout)
		f.flushHistoryOnce(ctx, true)
		cancel()
		t.Reset(f.histWait())
	}
}

// histWait is the wait until the next flush: HistoryFlush, or until just
// past the current minute's end when that comes first.
func (f *Fleet) histWait() time.Duration {
	now := f.now()
	d := f.history().every
	if end := now.Truncate(time.Minute).Add(time.Minute + 5*time.Millisecond).Sub(now); end < d {
		d = end
	}
	return d
}

// flushHistoryOnce sends the batches that earlier flushes could not, and
// when all are added, every queue's new counts and (when sample) a depth
// sample of each queue not sampled this minute (one Stats each), one
// script per queue (sendHistory). The counts go to the
// minute that holds the middle of the span since the last flush (the
// flushes follow the minutes' ends, so a span rarely holds two).
func (f *Fleet) flushHistoryOnce(ctx context.Context, sample bool) {
	h := f.history()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.unsent = f.sendHistory(ctx, h.unsent); len(h.unsent) > 0 {
		return // the new counts wait: a batch must not overtake an unsent one
	}
	now := f.now()
	at := h.last.Add(now.Sub(h.last) / 2)
	if at.After(now) || now.Sub(h.last) > time.Minute {
		at = now
	}
	h.last = now
	nowMin := now.Unix() / 60 * 60
	var bs []histBatch
	h.queues.Range(func(k, v any) bool {
		c, name := v.(*histCounts), k.(string)
		done, retried, dead := c.done.Swap(0), c.retried.Swap(0), c.dead.Swap(0)
		depth, bucket := "", at.Unix()/60*60
		if sample && c.sampled.Load() != nowMin {
			if st, err := f.coreOf(name, QueueOptions{}).Stats(ctx); err == nil {
				depth = strconv.FormatInt(st.Pending, 10)
				if done+retried+dead == 0 {
					bucket = nowMin
				}
			}
		}
		if done+retried+dead == 0 && depth == "" {
			return true
		}
		h.seq++
		hour, day := bucket/3600*3600, bucket/86400*86400
		k2 := f.keys.Queue(name)
		b := histBatch{c: c, queue: name, exec: rueidis.LuaExec{
			Keys: []string{k2.HistMinute + strconv.FormatInt(hour, 10), k2.HistDay + strconv.FormatInt(day, 10)},
			Args: []string{strconv.FormatInt((bucket-hour)/60, 10), strconv.FormatInt(done, 10), strconv.FormatInt(retried, 10),
				strconv.FormatInt(dead, 10), depth,
				strconv.FormatInt(hour+int64(histMinuteTTL/time.Second), 10), strconv.FormatInt(day+int64(histDayTTL/time.Second), 10),
				h.id, strconv.FormatInt(h.seq, 10)},
		}}
		if depth != "" {
			b.minute = nowMin
		}
		bs = append(bs, b)
		return true
	})
	h.unsent = f.sendHistory(ctx, bs)
}

// sendHistory runs the batches' scripts, one after the other (one call
// each: a queue's history is written every few seconds), and returns
// those that got no answer or an error.
func (f *Fleet) sendHistory(ctx context.Context, bs []histBatch) []histBatch {
	var unsent []histBatch
	for _, b := range bs {
		if err := historyAddScript.Exec(ctx, f.client, b.exec.Keys, b.exec.Args).Error(); err != nil {
			unsent = append(unsent, b)
			f.log.Debug("fleet: history not added yet; sent again at the next flush", "queue", b.queue, "error", err)
			continue
		}
		if b.minute != 0 {
			b.c.sampled.Store(b.minute)
		}
	}
	return unsent
}

// History reads the queue's history over the last span, oldest first,
// one point per bucket with none missing (a bucket no Fleet wrote is all
// zeros, with Depth -1): minute by minute up to HistoryMinutes (24 h),
// day by day (UTC days, the current one included) up to HistoryDays (30
// days). The buckets are those of the Fleets' clocks, and a process adds
// its counts every Options.HistoryFlush, so the current bucket fills
// within that; a process that dies loses what it had not added. It reads
// one hash per hour (per day) spanned, in one round trip. A field that is
// not a count (written by another client) reads as 0. May return
// ErrInvalidArgument (span <= 0 or past HistoryDays), ErrWrongType,
// ErrUnavailable.
func (q *queueCore) History(ctx context.Context, span time.Duration) ([]HistoryPoint, error) {
	const op = "history"
	if err := q.ready(ctx); err != nil {
		return nil, opErr(op, q.name, err)
	}
	if span <= 0 || span > HistoryDays {
		return nil, opErr(op, q.name, fmt.Errorf("%w: span %v is not in (0, %v]", ErrInvalidArgument, span, HistoryDays))
	}
	now := q.fleet.now().Unix()
	step, key := int64(60), func(at int64) (string, string) {
		hour := at / 3600 * 3600
		return q.key.HistMinute + strconv.FormatInt(hour, 10), strconv.FormatInt((at-hour)/60, 10) + ":"
	}
	if span > HistoryMinutes {
		step, key = 86400, func(at int64) (string, string) { return q.key.HistDay + strconv.FormatInt(at, 10), "" }
	}
	n := int64((span + time.Duration(step)*time.Second - 1) / (time.Duration(step) * time.Second))
	first := now/step*step - (n-1)*step
	points := make([]HistoryPoint, n)
	var names []string
	idx := map[string]int{}
	for i := range points {
		at := first + int64(i)*step
		points[i] = HistoryPoint{At: time.Unix(at, 0), Depth: -1}
		if k, _ := key(at); idx[k] == 0 {
			names = append(names, k)
			idx[k] = len(names)
		}
	}
	c := q.fleet.client
	cmds := make(rueidis.Commands, len(names))
	for i, k := range names {
		cmds[i] = c.B().Hgetall().Key(k).Build()
	}
	hashes := make([]map[string]string, len(names))
	for i, r := range c.DoMulti(ctx, cmds...) {
		m, err := r.AsStrMap()
		if err != nil && !rueidis.IsRedisNil(err) {
			return nil, opErr(op, names[i], err)
		}
		hashes[i] = m
	}
	for i := range points {
		k, field := key(first + int64(i)*step)
		m := hashes[idx[k]-1]
		num := func(c string) (int64, bool) {
			v, err := strconv.ParseInt(m[field+c], 10, 64)
			return v, err == nil
		}
		p := &points[i]
		p.Done, _ = num("d")
		p.Retried, _ = num("r")
		p.DeadLettered, _ = num("x")
		p.Failed = p.Retried + p.DeadLettered
		if d, ok := num("n"); ok {
			p.Depth = d
		}
	}
	return points, nil
}

// historyKeys spells every bucket of queue name's history that can exist
// now: the hours of the last 26 hours and the days of the last 32 days,
// by this process's clock (a day's margin for the others').
func (f *Fleet) historyKeys(name string) []string {
	k, now := f.keys.Queue(name), f.now().Unix()
	out := make([]string, 0, 26+32)
	for h := range int64(26) {
		out = append(out, k.HistMinute+strconv.FormatInt(now/3600*3600-h*3600, 10))
	}
	for d := range int64(32) {
		out = append(out, k.HistDay+strconv.FormatInt(now/86400*86400-d*86400, 10))
	}
	return out
}
