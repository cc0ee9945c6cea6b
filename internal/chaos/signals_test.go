package chaos

// The durable waits under the faults: some tasks sleep (fleet.Sleep) and
// some wait for a signal (fleet.WaitSignal) after their step, parked
// meanwhile; the parent process sends each waiting task its signal
// (Queue.Signal, through the submitter's proxy, so that the faults hit
// it; one send in four with a ctx of a few ms, which may end while its
// script is in flight), retrying a send whose outcome it did not learn until a reply says
// it applied (nil) or had applied (ErrSignalSent). A sampler reads Redis
// every 100 ms for a task parked (its body in :scheduled) that holds a
// lease (its id in :processing) at once. waitCounts counts, from the
// evidence, the signals confirmed sent that no wait took (lost), waits
// that returned another value (wrong), sends refused, waits timed out,
// runs of a parked or woken task that overlapped (resumed twice at
// once), and the samples that found a parked task leased: all want 0.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/keys"
	"github.com/fleet-go/fleet/internal/redistest"
)

// gotRec is a value a wait returned (a G line).
type gotRec struct {
	run string
	at  int64
	v   int
}

// waitFigures are the counts of the durable waits.
type waitFigures struct {
	Waiters, Sleepers                int // tasks submitted to wait for a signal; to sleep
	Parked                           int // runs that parked their task (W lines)
	SignalsSent, SignalsDelivered    int // confirmed by the sender; taken by a wait with the right value
	SignalLost, SignalWrong          int // sent, yet no wait took it; a wait that returned another value
	SignalRefused, WaitTimedOut      int // a send refused for good (the task not found or finished); a wait timed out
	WaitOverlaps                     int // overlapping runs of a task that parked or took a signal (among Overlaps)
	ParkSamples, ParkedLeased        int // samples of Redis read; tasks found parked and leased at once
	SignalRetries, SignalSentOnRetry int // sends whose outcome was unknown (sent again); retries told ErrSignalSent
}

// waitCounts counts the waits' violations into rep.
func (w *world) waitCounts(ev *evidence, rep *report, violate func(string, ...any)) {
	for _, ps := range ev.parks {
		rep.Parked += len(ps)
	}
	rep.Waiters, rep.SignalsSent = len(w.waiters), len(w.signaled)
	rep.ParkSamples, rep.ParkedLeased = w.parkSamples, len(w.parkedLeased)
	for _, v := range w.parkedLeased {
		violate("parked and leased at once: %s", v)
	}
	for _, id := range slices.Sorted(mapKeys(ev.got)) {
		want, ok := w.waiters[id]
		if !ok {
			want = -1 // a task of a submit whose reply was lost: the sender's sweep sends -1
		}
		for _, g := range ev.got[id] {
			if g.v != want {
				rep.SignalWrong++
				violate("task %s: run %s's wait returned %d at %s, want %d", id, g.run, g.v, w.sec(g.at), want)
			}
		}
	}
	for _, id := range slices.Sorted(mapKeys(ev.waitErrs)) {
		for _, h := range ev.waitErrs[id] {
			if h.class == "timeout" {
				rep.WaitTimedOut++
				violate("task %s: run %s's wait timed out at %s", id, h.proc, w.sec(h.at))
			}
		}
	}
	ids := make([]string, 0, len(w.waiters))
	for id := range w.waiters {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		seq := w.waiters[id]
		if why, ok := w.sigRefused[id]; ok {
			rep.SignalRefused++
			violate("task %s (seq %d): its signal was refused: %s; runs: %s", id, seq, why, w.runsOf(ev, id))
			continue
		}
		if len(ev.got[id]) > 0 { // delivered, or a wrong value (counted above)
			if slices.ContainsFunc(ev.got[id], func(g gotRec) bool { return g.v == seq }) {
				rep.SignalsDelivered++
			}
			continue
		}
		if _, sent := w.signaled[id]; sent {
			rep.SignalLost++
			state := "gone"
			switch {
			case len(ev.acks[id]) > 0:
				state = "acked"
			case w.dead[id]:
				state = "dead"
			case w.left[id]:
				state = "still in Redis"
			}
			violate("task %s (seq %d): its signal was sent, and no wait took it (the task is %s); runs: %s", id, seq, state, w.runsOf(ev, id))
		}
	}
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// sigJob is a signal to send.
type sigJob struct {
	id  string
	v   int
	due time.Time
}

// signaller is the parent's sender of the waiting tasks' signals.
type signaller struct {
	rng *rng

	mu       sync.Mutex
	queue    []sigJob
	waiters  map[string]int    // id -> seq: every waiting task submitted
	signaled map[string]int    // id -> the value, once a reply confirmed it
	refused  map[string]string // id -> why, refused for good
	retries  int               // sends whose outcome was unknown
	onRetry  int               // of which a later send was told ErrSignalSent (or that the task ended)
	retried  map[string]bool   // ids whose send's outcome was unknown once
	orphans  map[string]bool   // tasks not submitted (a lost submit reply) signalled -1
	sleepers int               // tasks submitted to sleep
}

func (s *signaller) slept() {
	s.mu.Lock()
	s.sleepers++
	s.mu.Unlock()
}

func newSignaller(seed int64) *signaller {
	return &signaller{rng: newRNG(seed), waiters: map[string]int{}, signaled: map[string]int{},
		refused: map[string]string{}, retried: map[string]bool{}, orphans: map[string]bool{}}
}

// add queues the signal of waiting task id (value seq) for 0-1.5 s after
// now: mostly after the task parked, sometimes before its wait.
func (s *signaller) add(id string, seq int) {
	d := s.rng.between(0, 1500*time.Millisecond)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waiters[id] = seq
	s.queue = append(s.queue, sigJob{id: id, v: seq, due: time.Now().Add(d)})
}

// run sends the signals as they come due through q (the submitter's
// Fleet), until ctx ends. Once the submitter is done (subDone: no submit
// is in flight whose reply may still come), every 500 ms it also signals
// -1 to any task parked in Redis (read through direct) that no submit
// confirmed (known): a task of a submit whose reply was lost, which would
// otherwise wait past the drain.
func (s *signaller) run(ctx context.Context, r *run, q *fleet.Queue[job], direct *fleet.Fleet, subDone <-chan struct{}, known func(string) bool) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	lastSweep := time.Now()
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := time.Now()
		s.mu.Lock()
		var due []sigJob
		rest := s.queue[:0]
		for _, j := range s.queue {
			if !j.due.After(now) {
				due = append(due, j)
			} else {
				rest = append(rest, j)
			}
		}
		s.queue = rest
		s.mu.Unlock()
		for _, j := range due {
			s.send(ctx, q, j)
		}
		select {
		case <-subDone:
		default:
			continue
		}
		if time.Since(lastSweep) > 500*time.Millisecond {
			lastSweep = time.Now()
			s.sweepOrphans(ctx, r, direct, known)
		}
	}
}

// send sends j once; an unknown outcome puts it back, 100 ms later.
func (s *signaller) send(ctx context.Context, q *fleet.Queue[job], j sigJob) {
	// One send in four has a ctx of 0.2-3 ms, which may end while the
	// script is in flight: its outcome is unknown, and it is sent again.
	d := 2 * time.Second
	if s.rng.intn(4) == 0 {
		d = s.rng.between(200*time.Microsecond, 3*time.Millisecond)
	}
	sctx, cancel := context.WithTimeout(ctx, d)
	err := q.Signal(sctx, j.id, signalName, j.v)
	cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case err == nil:
		s.signaled[j.id] = j.v
	case errors.Is(err, fleet.ErrSignalSent):
		// An earlier send applied though its reply was lost (a fresh
		// send's ErrSignalSent would be a double: counted as refused).
		if s.retried[j.id] {
			s.onRetry++
			s.signaled[j.id] = j.v
		} else {
			s.refused[j.id] = err.Error()
		}
	case s.retried[j.id] && (errors.Is(err, fleet.ErrTaskNotFound) || errors.Is(err, fleet.ErrTaskFinished)):
		// An earlier send applied, and the task took it and ended before
		// the retry (the wait's G line says whether it took it).
		s.onRetry++
		s.signaled[j.id] = j.v
	case errors.Is(err, fleet.ErrTaskNotFound), errors.Is(err, fleet.ErrTaskFinished), errors.Is(err, fleet.ErrInvalidArgument):
		s.refused[j.id] = err.Error()
	default: // unavailable, a ctx that ended in flight: applied or not
		s.retries++
		s.retried[j.id] = true
		j.due = time.Now().Add(100 * time.Millisecond)
		if ctx.Err() == nil {
			s.queue = append(s.queue, j)
		}
	}
}

// bodyIDOf is the id of a task's body as stored ("?body" if it does not
// parse).
func bodyIDOf(body string) string {
	var b struct {
		ID string `json:"id"`
	}
	if json.Unmarshal([]byte(body), &b) != nil {
		return "?" + body
	}
	return b.ID
}

// sweepOrphans signals -1 to the tasks parked in :scheduled that no
// submit confirmed (known says which were).
func (s *signaller) sweepOrphans(ctx context.Context, r *run, direct *fleet.Fleet, known func(string) bool) {
	k := keys.New(r.prefix, r.tg.layout == fleet.LayoutTagged).Queue(queueName)
	c := direct.Client()
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	bodies, err := c.Do(rctx, c.B().Zrange().Key(k.Scheduled).Min("0").Max("-1").Build()).AsStrSlice()
	if err != nil {
		return
	}
	for _, b := range bodies {
		id := bodyIDOf(b)
		s.mu.Lock()
		_, queued := s.waiters[id]
		done := s.orphans[id]
		s.mu.Unlock()
		if queued || done || known(id) {
			continue
		}
		q := fleet.NewQueue[job](direct, queueName, queueOptions(r.s.lease, maxAttempts, 0, 0))
		err := q.Signal(rctx, id, signalName, -1)
		if err == nil || errors.Is(err, fleet.ErrSignalSent) {
			s.mu.Lock()
			s.orphans[id] = true
			s.mu.Unlock()
		}
	}
}

// parkedLeasedScript lists the ids of the tasks whose body is in
// KEYS[1] :scheduled (parked, asleep or scheduled) while their id is in
// KEYS[2] :processing (leased) or holds a permit (KEYS[3..]: the groups'
// :grun:<g>, :running), read at one instant.
var parkedLeasedScript = rueidis.NewLuaScript(`
local out = {}
for _, b in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local ok, t = pcall(cjson.decode, b)
  if ok and type(t) == 'table' and type(t.id) == 'string' then
    for i = 2, #KEYS do
      if redis.call('ZSCORE', KEYS[i], t.id) then
        out[#out+1] = t.id .. ' ' .. KEYS[i]
        break
      end
    end
  end
end
return out`)

// parkedKeys are parkedLeasedScript's keys for queue k with groups g0..
// g<groups-1>.
func parkedKeys(k keys.Queue, groups int) []string {
	out := []string{k.Scheduled, k.Processing, k.Running}
	for i := range groups {
		out = append(out, k.GroupRun+fmt.Sprintf("g%d", i))
	}
	return out
}

// sampleParked reads every 100 ms, until ctx ends, the tasks parked and
// leased (or holding a group's permit) at once, and adds what it found to
// r.parkedLeased.
func (r *run) sampleParked(ctx context.Context, direct *fleet.Fleet) {
	k := keys.New(r.prefix, r.tg.layout == fleet.LayoutTagged).Queue(queueName)
	c := direct.Client()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		ids, err := parkedLeasedScript.Exec(sctx, c, parkedKeys(k, r.s.groups), nil).AsStrSlice()
		cancel()
		if err != nil {
			continue // a restart, a cut: no sample
		}
		r.mu.Lock()
		r.parkSamples++
		for _, id := range ids {
			r.parkedLeased = append(r.parkedLeased, fmt.Sprintf("task %s at %s", id, time.Now().UTC().Format("15:04:05.000")))
		}
		r.mu.Unlock()
	}
}

// TestParkedLeasedScript: the sampler's script finds a task whose body is
// in :scheduled while its id is in :processing or holds a group's permit,
// and nothing else.
func TestParkedLeasedScript(t *testing.T) {
	for _, tg := range redistest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			c := redistest.Client(t, tg)
			prefix := redistest.Prefix(t, tg)
			k := keys.New(prefix, tg.Tagged).Queue(queueName)
			ctx := context.Background()
			for _, cmd := range []rueidis.Completed{
				c.B().Zadd().Key(k.Scheduled).ScoreMember().ScoreMember(1, `{"id":"a","payload":{}}`).ScoreMember(2, `{"id":"b"}`).
					ScoreMember(3, "not json").ScoreMember(4, `{"id":"d","group":"g1"}`).Build(),
				c.B().Zadd().Key(k.Processing).ScoreMember().ScoreMember(1, "b").ScoreMember(2, "c").Build(),
				c.B().Zadd().Key(k.GroupRun+"g1").ScoreMember().ScoreMember(1, "d").ScoreMember(2, "e").Build(),
			} {
				if err := c.Do(ctx, cmd).Error(); err != nil {
					t.Fatal(err)
				}
			}
			ids, err := parkedLeasedScript.Exec(ctx, c, parkedKeys(k, 2), nil).AsStrSlice()
			if err != nil || len(ids) != 2 || ids[0] != "b "+k.Processing || ids[1] != "d "+k.GroupRun+"g1" {
				t.Fatalf("parked and leased: %q, %v; want b (processing) and d (its group's permit)", ids, err)
			}
		})
	}
}
