package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet-go/fleet/fleettest"
	"github.com/fleet-go/fleet/internal/costmeter"
	"github.com/fleet-go/fleet/internal/engine"
)

// evalshaCalls reads how many EVALSHA calls s has served.
func evalshaCalls(t *testing.T, s *fleettest.Server) int {
	return int(serverStats(t, s).Calls["evalsha"])
}

// serverStats reads INFO commandstats and cpu of s through redis-cli.
func serverStats(t *testing.T, s *fleettest.Server) costmeter.Snapshot {
	t.Helper()
	out, err := s.Cli(context.Background(), "INFO", "commandstats", "cpu")
	if err != nil {
		t.Fatal(err)
	}
	snap, err := costmeter.Parse(out)
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// TestAckGroup: concurrent Task.Acks of one queue share a call. With the
// replies held back, one ack goes alone, the next engine.SecondRound wait
// and go together in a second call (fillGroup); fifty more wait; one of
// them whose ctx ends leaves the group at once (ctx's error) and its ack
// is never sent; when the replies flow, the other 49 go in one script
// call.
// Each caller gets its own outcome, and Redis holds exactly the one
// reservation that was not acked, which can still be acked.
func TestAckGroup(t *testing.T) {
	ctx, cancelAll := context.WithTimeout(context.Background(), time.Minute)
	defer cancelAll()
	s, p, f, _ := groupServer(t)
	q := NewQueue[int](f, "ag", QueueOptions{Lease: time.Minute})
	const lone = 1 + engine.SecondRound // the acks in flight (fillGroup)
	const n = lone + 50
	for i := range n {
		if _, err := q.Submit(ctx, i); err != nil {
			t.Fatal(err)
		}
	}
	tasks, err := q.Reserve(ctx, n, 0)
	if err != nil || len(tasks) != n {
		t.Fatalf("Reserve = %d tasks, %v", len(tasks), err)
	}
	before := evalshaCalls(t, s)

	p.HoldReplies()
	errs := make([]error, n-1)
	var wg sync.WaitGroup
	fillGroup(t, q.queueCore, func(i int) { wg.Go(func() { errs[i] = tasks[i].Ack(ctx) }) })
	leaving, leave := context.WithCancel(ctx)
	left := make(chan error, 1)
	go func() { left <- tasks[n-1].Ack(leaving) }()
	for i := lone; i < n-1; i++ {
		wg.Go(func() { errs[i] = tasks[i].Ack(ctx) })
	}
	pending := func() int { _, n := groupState(q.queueCore); return n }
	waitUntil(t, func() bool { return pending() == n-lone })
	leave()
	awaitCanceled(t, left, "the ack whose ctx ended while it waited")
	if got := pending(); got != n-lone-1 {
		t.Fatalf("%d acks wait after one left, want %d", got, n-lone-1)
	}
	p.Thaw()
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("ack %d: %v", i, err)
		}
	}
	if calls := evalshaCalls(t, s) - before; calls != 3 {
		t.Fatalf("%d ack scripts for %d acks, want 3 (the one alone, the %d that went second, then the %d that waited)", calls, n-1, engine.SecondRound, n-lone-1)
	}
	st, err := q.Stats(ctx)
	if err != nil || st.InFlight != 1 || st.Pending != 0 {
		t.Fatalf("Stats = %+v, %v; want the one reservation that was not acked", st, err)
	}
	// The ack that left was never sent: its reservation is intact.
	if err := tasks[n-1].Ack(ctx); err != nil {
		t.Fatalf("acking the reservation whose ack left: %v", err)
	}
	if st, err := q.Stats(ctx); err != nil || st.InFlight != 0 {
		t.Fatalf("Stats = %+v, %v; want nothing in flight", st, err)
	}
	// The group goes idle (its flusher ends once none wait).
	waitUntil(t, func() bool { busy, n := groupState(q.queueCore); return !busy && n == 0 })
}

// groupServer starts a server of the test's own with a proxy in front of
// it, and returns a Fleet through the proxy (every connection dialled
// before a test holds replies back: see startProxied) and one on the
// server, to arrange and assert what is stored.
func groupServer(t *testing.T) (*fleettest.Server, *fleettest.Proxy, *Fleet, *Fleet) {
	t.Helper()
	ctx := context.Background()
	s, err := fleettest.StartServer(ctx, fleettest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	p, err := fleettest.StartProxy(s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	through, err := Open(ctx, Options{URL: p.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = through.Close() })
	for range 64 {
		if _, err := through.Counter("warm").Get(ctx); err != nil {
			t.Fatal(err)
		}
	}
	direct, err := Open(ctx, Options{URL: s.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = direct.Close() })
	return s, p, through, direct
}

// ownServer starts a server of the test's own and returns it, with a
// function that opens a Fleet on it with opts (its URL set), closed when
// the test ends.
func ownServer(t *testing.T) (*fleettest.Server, func(Options) *Fleet) {
	t.Helper()
	s, err := fleettest.StartServer(context.Background(), fleettest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s, func(opts Options) *Fleet {
		t.Helper()
		opts.URL = s.URL()
		f, err := Open(context.Background(), opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Close() })
		return f
	}
}

// groupState reads q's group: whether a call is in flight, and how many
// calls wait.
func groupState(q *queueCore) (busy bool, pending int) {
	flying, pending := q.e.GroupState()
	return flying > 0, pending
}

// fillGroup makes q's group hold as many calls in flight as it allows
// (engine.InFlight, with the replies held back), with the calls that call
// starts, one at a time: the first goes alone, then engine.SecondRound
// wait and go together in the second call. It returns how many calls it
// started; the calls that come after them wait.
func fillGroup(t *testing.T, q *queueCore, call func(i int)) int {
	t.Helper()
	call(0)
	waitUntil(t, func() bool { busy, _ := groupState(q); return busy })
	for i := 1; i <= engine.SecondRound; i++ {
		call(i)
		if i < engine.SecondRound {
			waitUntil(t, func() bool { _, n := groupState(q); return n == i })
		}
	}
	waitUntil(t, func() bool { flying, n := q.e.GroupState(); return flying == engine.InFlight && n == 0 })
	return 1 + engine.SecondRound
}

// heldBy plays a lone caller whose call is in flight: the calls that come
// wait in q's group until release hands them to the group's goroutine.
func heldBy(q *queueCore) (release func()) { return q.e.HoldGroup() }

// queueLeft returns how many of q's keys that hold tasks (pending,
// processing, bodies, leases) exist.
func queueLeft(t *testing.T, f *Fleet, q *queueCore) int64 {
	t.Helper()
	n, err := f.client.Do(context.Background(), f.client.B().Exists().Key(q.key.Pending, q.key.Processing, q.key.Body, q.key.Lease).Build()).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestReserveGroupDrain: 50 goroutines loop Reserve(1) and Ack (or Nack,
// with one attempt: each task goes to the dead letters) until the queue is
// empty. Every task is delivered exactly once, nothing is left pending, in
// flight or leased, every nacked task is dead once, and the reserves and
// ends share script calls: far fewer calls than reserves.
func TestReserveGroupDrain(t *testing.T) {
	for _, end := range []string{"ack", "nack"} {
		t.Run(end, func(t *testing.T) { testReserveGroupDrain(t, end == "nack") })
	}
}

func testReserveGroupDrain(t *testing.T, nack bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := fleettest.StartServer(ctx, fleettest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	f, err := Open(ctx, Options{URL: s.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	q := NewQueue[int](f, "drain", QueueOptions{Lease: time.Minute, MaxAttempts: 1, DeadMax: 10000})
	const n, c = 3000, 50
	items := make([]int, n)
	for i := range items {
		items[i] = i
	}
	ids, err := q.SubmitMany(ctx, items)
	if err != nil {
		t.Fatal(err)
	}
	before := evalshaCalls(t, s)
	var mu sync.Mutex
	got := make(map[string]int, n)
	payloads := make(map[int]bool, n)
	var wg sync.WaitGroup
	errs := make(chan error, c)
	for range c {
		wg.Go(func() {
			for {
				ts, err := q.Reserve(ctx, 1, 0)
				if err != nil {
					errs <- err
					return
				}
				if len(ts) == 0 {
					return
				}
				if len(ts) != 1 {
					errs <- fmt.Errorf("Reserve(1) gave %d tasks", len(ts))
					return
				}
				mu.Lock()
				got[ts[0].ID]++
				payloads[ts[0].Payload] = true
				mu.Unlock()
				end := ts[0].Ack
				if nack {
					end = func(ctx context.Context) error { return ts[0].Nack(ctx, errors.New("no")) }
				}
				if err := end(ctx); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	calls := evalshaCalls(t, s) - before
	if len(got) != n || len(payloads) != n {
		t.Fatalf("%d tasks (%d payloads) delivered, want %d", len(got), len(payloads), n)
	}
	for _, id := range ids {
		if got[id] != 1 {
			t.Fatalf("task %s delivered %d times", id, got[id])
		}
	}
	// Alone, every reserve and every end is a call of its own: 2n. With a
	// second call in flight (engine.SecondRound) the rounds split more: the
	// nack runs took 720-755 calls, the ack runs about 390, for n = 3000.
	t.Logf("%d script calls for %d reserves and %d ends", calls, n+c, n)
	if calls > n/3 {
		t.Fatalf("%d script calls for %d reserves and %d ends, want at most %d", calls, n+c, n, n/3)
	}
	if left := queueLeft(t, f, q.queueCore); left != 0 {
		t.Fatalf("%d of pending, processing, bodies and leases left", left)
	}
	dead, err := q.DeadLetters(ctx, 0, n+1)
	if err != nil {
		t.Fatal(err)
	}
	if !nack {
		if len(dead) != 0 {
			t.Fatalf("%d dead letters after acks", len(dead))
		}
	} else {
		buried := make(map[string]int, n)
		for _, d := range dead {
			buried[d.ID]++
		}
		for _, id := range ids {
			if buried[id] != 1 {
				t.Fatalf("task %s is dead %d times, want once (%d dead letters)", id, buried[id], len(dead))
			}
		}
	}
	if busy, pending := groupState(q.queueCore); busy || pending != 0 {
		t.Fatalf("group busy %v with %d waiting after the drain", busy, pending)
	}
}

// TestReserveGroupLeaves: two reserves wait in the group (B for one task,
// then C for two); the group's call takes the three tasks, and B's ctx
// ends while the call is in flight: B returns ctx's error at once, C gets
// its two tasks (the queue's second and third: B's share is the first), and
// B's task goes back to the head of the queue, uncounted, nothing of it
// held; the call's record keeps only C's tasks.
func TestReserveGroupLeaves(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, p, through, direct := groupServer(t)
	opts := QueueOptions{Lease: time.Minute, MaxAttempts: 1}
	q := NewQueue[int](through, "left", opts)
	qd := NewQueue[int](direct, "left", opts)
	if ts, err := q.Reserve(ctx, 1, 0); err != nil || len(ts) != 0 {
		t.Fatalf("the first Reserve (which stores the policy) = %v, %v", ts, err)
	}
	ids, err := qd.SubmitMany(ctx, []int{1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	release := heldBy(q.queueCore)
	leaving, leave := context.WithCancel(ctx)
	defer leave()
	left := make(chan error, 1)
	go func() {
		ts, err := q.Reserve(leaving, 1, 0)
		if len(ts) > 0 {
			err = fmt.Errorf("got %d tasks", len(ts))
		}
		left <- err
	}()
	waitUntil(t, func() bool { _, n := groupState(q.queueCore); return n == 1 })
	type result struct {
		ts  []*Task[int]
		err error
	}
	stays := make(chan result, 1)
	go func() {
		ts, err := q.Reserve(ctx, 2, 0)
		stays <- result{ts, err}
	}()
	waitUntil(t, func() bool { _, n := groupState(q.queueCore); return n == 2 })
	p.HoldReplies()
	release()
	// The group's call ran (the three tasks are reserved on the server);
	// its reply waits in the proxy.
	k := q.key
	zcard := func() int64 {
		n, _ := direct.client.Do(ctx, direct.client.B().Zcard().Key(k.Processing).Build()).AsInt64()
		return n
	}
	waitUntil(t, func() bool { return zcard() == 3 })
	leave()
	awaitCanceled(t, left, "the reserve whose ctx ended in flight")
	p.Thaw()
	r := <-stays
	if r.err != nil || len(r.ts) != 2 || r.ts[0].ID != ids[1] || r.ts[1].ID != ids[2] {
		t.Fatalf("C's Reserve(2) = %v, %v; want tasks %v", r.ts, r.err, ids[1:])
	}
	llen := func() int64 {
		n, _ := direct.client.Do(ctx, direct.client.B().Llen().Key(k.Pending).Build()).AsInt64()
		return n
	}
	waitUntil(t, func() bool { return llen() == 1 })
	if n := zcard(); n != 2 {
		t.Fatalf("processing holds %d, want C's 2", n)
	}
	lease, err := direct.client.Do(ctx, direct.client.B().Hgetall().Key(k.Lease).Build()).AsStrMap()
	if err != nil {
		t.Fatal(err)
	}
	tok := r.ts[0].Token()
	prefix := tok[:strings.LastIndexByte(tok, '.')+1]
	want := map[string]string{
		ids[1]:               r.ts[0].Token() + " ",
		ids[2]:               r.ts[1].Token() + " ",
		"\xffcall:" + prefix: fmt.Sprintf(`["%s","%s"]`, ids[1], ids[2]),
	}
	if len(lease) != len(want) {
		t.Fatalf("lease entries %v, want C's two and the call's record of them", lease)
	}
	for f, v := range want {
		if got, ok := lease[f]; !ok || !strings.HasPrefix(got, v) {
			t.Fatalf("lease entry %q = %q, want %q...", f, got, v)
		}
	}
	// B's task is reservable again, uncounted (MaxAttempts 1: it still runs).
	ts, err := qd.Reserve(ctx, 1, 0)
	if err != nil || len(ts) != 1 || ts[0].ID != ids[0] || ts[0].Attempts != 0 {
		t.Fatalf("Reserve after = %v, %v; want task %s, uncounted", ts, err, ids[0])
	}
	for _, task := range append(ts, r.ts...) {
		if err := task.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := queueLeft(t, direct, qd.queueCore); n != 0 {
		t.Fatalf("%d of pending, processing, bodies and leases left", n)
	}
	if dead, err := qd.DeadLetters(ctx, 0, 10); err != nil || len(dead) != 0 {
		t.Fatalf("dead letters %v, %v", dead, err)
	}
	waitUntil(t, func() bool { busy, n := groupState(q.queueCore); return !busy && n == 0 })
}

// TestReserveGroupClose: Close with reserves waiting in the group returns,
// and each waiter gets ErrClosed: whether a lone caller's call was in
// flight (its end hands nothing on), or the group's own call (Close ends
// it; Close waits for the group's goroutine).
func TestReserveGroupClose(t *testing.T) {
	for _, lead := range []string{"caller", "group"} {
		t.Run(lead, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, p, through, direct := groupServer(t)
			q := NewQueue[int](through, "close", QueueOptions{Lease: time.Minute})
			if ts, err := q.Reserve(ctx, 1, 0); err != nil || len(ts) != 0 {
				t.Fatalf("the first Reserve (which stores the policy) = %v, %v", ts, err)
			}
			if _, err := NewQueue[int](direct, "close", QueueOptions{}).SubmitMany(ctx, []int{1, 2, 3}); err != nil {
				t.Fatal(err)
			}
			var release func()
			first := make(chan error, 1+engine.SecondRound)
			if lead == "caller" {
				p.HoldReplies()
				fillGroup(t, q.queueCore, func(int) {
					go func() {
						_, err := q.Reserve(ctx, 1, 0)
						first <- err
					}()
				})
			} else {
				release = heldBy(q.queueCore)
				close(first)
			}
			errs := make(chan error, 2)
			for range 2 {
				go func() {
					ts, err := q.Reserve(ctx, 1, 0)
					if len(ts) > 0 {
						err = fmt.Errorf("got %d tasks", len(ts))
					}
					errs <- err
				}()
			}
			waitUntil(t, func() bool { _, n := groupState(q.queueCore); return n == 2 })
			if release != nil {
				p.HoldReplies()
				release()
				waitUntil(t, func() bool { _, n := groupState(q.queueCore); return n == 0 })
			}
			closed := make(chan error, 1)
			go func() { closed <- through.Close() }()
			waitUntil(t, func() bool { return through.closed.Load() })
			if lead == "caller" {
				p.Thaw() // the lone call's reply: its end finds the Fleet closed
			}
			for range 2 {
				select {
				case err := <-errs:
					if !errors.Is(err, ErrClosed) {
						t.Fatalf("a waiting reserve returned %v, want ErrClosed", err)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("a waiting reserve did not return after Close")
				}
			}
			p.Thaw()
			if err := <-closed; err != nil {
				t.Fatal(err)
			}
			for range cap(first) {
				<-first
			}
			if busy, n := groupState(q.queueCore); busy || n != 0 {
				t.Fatalf("group busy %v with %d waiting after Close", busy, n)
			}
		})
	}
}

// TestEndGroup: the ends that concurrent callers make of one queue while
// a call of it is in flight (Nack, DeadLetter, Release, Snooze, a Nack of
// a cancelled task, a Nack whose lease was lost) share one queue_end.lua
// call, with an Ack and a Reserve beside them in the round's take, which
// runs after the ends and so gets the released task. An end whose ctx
// ends while it waits leaves the group, never sent: its reservation is
// intact. Each caller gets its own outcome, and Redis holds exactly what
// each end leaves.
func TestEndGroup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, _, through, direct := groupServer(t)
	opts := QueueOptions{Lease: time.Minute, MaxAttempts: 3, BackoffBase: time.Hour, BackoffMax: time.Hour}
	q := NewQueue[int](through, "eg", opts)
	qd := NewQueue[int](direct, "eg", opts)
	ids, err := q.SubmitMany(ctx, []int{0, 1, 2, 3, 4, 5, 6, 7, 8})
	if err != nil {
		t.Fatal(err)
	}
	ts, err := q.Reserve(ctx, 8, 0)
	if err != nil || len(ts) != 8 {
		t.Fatalf("Reserve(8) = %d tasks, %v", len(ts), err)
	}
	if err := q.Cancel(ctx, ids[4]); err != nil {
		t.Fatal(err)
	}
	if err := ts[7].Ack(ctx); err != nil { // its Nack below finds the lease lost
		t.Fatal(err)
	}
	before := evalshaCalls(t, s)

	release := heldBy(q.queueCore)
	errs := make([]error, 8)
	var wg sync.WaitGroup
	pending := func() int { _, n := groupState(q.queueCore); return n }
	calls := []func() error{
		0: func() error { return ts[0].Nack(ctx, errors.New("boom")) },
		1: func() error { return ts[1].DeadLetter(ctx, errors.New("bad input")) },
		2: func() error { return ts[2].Release(ctx) },
		3: func() error { return ts[3].Snooze(ctx, time.Hour) },
		4: func() error { return ts[4].Nack(ctx, errors.New("late")) },
		5: func() error { return ts[5].Ack(ctx) },
		7: func() error { return ts[7].Nack(ctx, errors.New("lost")) },
	}
	waiting := 0
	for i, call := range calls {
		if call == nil {
			continue
		}
		waiting++
		wg.Go(func() { errs[i] = call() })
		want := waiting // in arrival order
		waitUntil(t, func() bool { return pending() == want })
	}
	leaving, leave := context.WithCancel(ctx)
	left := make(chan error, 1)
	go func() { left <- ts[6].Nack(leaving, errors.New("left")) }()
	waitUntil(t, func() bool { return pending() == 8 })
	leave()
	if err := <-left; !errors.Is(err, context.Canceled) {
		t.Fatalf("the nack whose ctx ended returned %v, want context.Canceled", err)
	}
	type result struct {
		ts  []*Task[int]
		err error
	}
	reserved := make(chan result, 1)
	go func() {
		ts, err := q.Reserve(ctx, 1, 0)
		reserved <- result{ts, err}
	}()
	waitUntil(t, func() bool { return pending() == 8 })
	release()
	wg.Wait()
	r := <-reserved
	for i, err := range errs[:6] {
		if err != nil {
			t.Fatalf("end %d: %v", i, err)
		}
	}
	if !errors.Is(errs[7], ErrLeaseLost) {
		t.Fatalf("the nack of an acked task returned %v, want ErrLeaseLost", errs[7])
	}
	if r.err != nil || len(r.ts) != 1 || r.ts[0].ID != ids[2] {
		t.Fatalf("Reserve(1) beside the ends = %v, %v; want the released task %s", r.ts, r.err, ids[2])
	}
	// One queue_end.lua for the seven ends, one queue_reserve.lua for the
	// ack and the reserve, and the cancelled task's end sent again with
	// its dead letter (NEED_ENTRY).
	if n := evalshaCalls(t, s) - before; n != 3 {
		t.Fatalf("%d script calls, want 3", n)
	}
	st, err := qd.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Pending != 1 || st.InFlight != 2 || st.Scheduled != 2 || st.Dead != 2 {
		t.Fatalf("Stats = %+v; want 1 pending, 2 in flight (the left nack's and the reserved), 2 scheduled (retry, snooze), 2 dead", st)
	}
	k := q.key
	sched, err := direct.client.Do(ctx, direct.client.B().Zrange().Key(k.Scheduled).Min("0").Max("-1").Build()).AsStrSlice()
	if err != nil || len(sched) != 2 {
		t.Fatalf("scheduled = %v, %v", sched, err)
	}
	attempts := map[string]int{}
	for _, raw := range sched {
		var body struct {
			ID       string `json:"id"`
			Attempts int    `json:"attempts"`
		}
		if err := json.Unmarshal([]byte(raw), &body); err != nil {
			t.Fatalf("scheduled body %s: %v", raw, err)
		}
		attempts[body.ID] = body.Attempts
	}
	if a, ok := attempts[ids[0]]; !ok || a != 1 || len(attempts) != 2 {
		t.Fatalf("scheduled %v; want the retry of %s (1 attempt) and the snooze of %s", attempts, ids[0], ids[3])
	}
	if a, ok := attempts[ids[3]]; !ok || a != 0 {
		t.Fatalf("scheduled %v; want the snooze of %s, no attempt counted", attempts, ids[3])
	}
	dead, err := qd.DeadLetters(ctx, 0, 10)
	if err != nil || len(dead) != 2 {
		t.Fatalf("dead letters %v, %v", dead, err)
	}
	causes := map[string]string{}
	for _, d := range dead {
		causes[d.ID] = d.Error
	}
	if causes[ids[1]] != "bad input" || !strings.HasPrefix(causes[ids[4]], ErrCanceled.Error()) {
		t.Fatalf("dead letters' causes %v; want %s's bad input and %s's cancel", causes, ids[1], ids[4])
	}
	// The nack that left was never sent: its reservation is intact.
	if err := ts[6].Nack(ctx, errors.New("now")); err != nil {
		t.Fatalf("nacking the reservation whose nack left: %v", err)
	}
	if err := r.ts[0].Ack(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := qd.Stats(ctx); err != nil || st.InFlight != 0 || st.Scheduled != 3 {
		t.Fatalf("Stats = %+v, %v; want nothing in flight, 3 scheduled", st, err)
	}
	waitUntil(t, func() bool { busy, n := groupState(q.queueCore); return !busy && n == 0 })
}

// TestEndGroupLeavesInFlight: two Nacks wait in the group and go in one
// call; the first's ctx ends while the call is in flight (its reply held
// back): it returns ctx's error at once, its outcome unknown to it. The
// call ran all the same: both tasks wait for their retry (beside a third
// nacked alone before), each once, and the first's reservation is gone (a
// second Nack says ErrLeaseLost).
func TestEndGroupLeavesInFlight(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, p, through, direct := groupServer(t)
	opts := QueueOptions{Lease: time.Minute, MaxAttempts: 3, BackoffBase: time.Hour, BackoffMax: time.Hour}
	q := NewQueue[int](through, "egl", opts)
	qd := NewQueue[int](direct, "egl", opts)
	if _, err := q.SubmitMany(ctx, []int{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	ts, err := q.Reserve(ctx, 3, 0)
	if err != nil || len(ts) != 3 {
		t.Fatalf("Reserve(3) = %d tasks, %v", len(ts), err)
	}
	// A lone Nack first, so that the server has the script: a NOSCRIPT
	// reply held back would keep the group's call from being sent.
	if err := ts[2].Nack(ctx, errors.New("alone")); err != nil {
		t.Fatal(err)
	}
	release := heldBy(q.queueCore)
	leaving, leave := context.WithCancel(ctx)
	defer leave()
	left := make(chan error, 1)
	go func() { left <- ts[0].Nack(leaving, errors.New("first")) }()
	waitUntil(t, func() bool { _, n := groupState(q.queueCore); return n == 1 })
	stays := make(chan error, 1)
	go func() { stays <- ts[1].Nack(ctx, errors.New("second")) }()
	waitUntil(t, func() bool { _, n := groupState(q.queueCore); return n == 2 })
	p.HoldReplies()
	release()
	scheduled := func() int64 {
		st, err := qd.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st.Scheduled
	}
	waitUntil(t, func() bool { return scheduled() == 3 }) // the call ran; its reply waits
	leave()
	awaitCanceled(t, left, "the nack whose ctx ended in flight")
	p.Thaw()
	if err := <-stays; err != nil {
		t.Fatalf("the other nack: %v", err)
	}
	st, err := qd.Stats(ctx)
	if err != nil || st.InFlight != 0 || st.Scheduled != 3 || st.Pending != 0 || st.Dead != 0 {
		t.Fatalf("Stats = %+v, %v; want both tasks scheduled for their retry, nothing else", st, err)
	}
	if err := ts[0].Nack(ctx, errors.New("again")); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("a second Nack of the task whose nack ran = %v, want ErrLeaseLost", err)
	}
	if n := scheduled(); n != 3 {
		t.Fatalf("%d scheduled after the second Nack, want 3", n)
	}
	waitUntil(t, func() bool { busy, n := groupState(q.queueCore); return !busy && n == 0 })
}

// TestReserveGroupBuries: a reserve that waits in the group, whose share
// holds a task past its ExpiresAt: the group's call buries it (a burial
// made inside a take goes alone, never back into the group that is making
// the call), and the reserve returns with nothing. The server's clock is
// this machine's: the test waits on it.
func TestReserveGroupBuries(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, _, through, direct := groupServer(t)
	q := NewQueue[int](through, "gbury", QueueOptions{Lease: time.Minute})
	if ts, err := q.Reserve(ctx, 1, 0); err != nil || len(ts) != 0 {
		t.Fatalf("the first Reserve (which stores the policy) = %v, %v", ts, err)
	}
	qd := NewQueue[int](direct, "gbury", QueueOptions{Lease: time.Minute})
	at := time.Now().Add(200 * time.Millisecond)
	id, err := qd.SubmitWith(ctx, 1, SubmitOptions{ExpiresAt: at})
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return time.Now().After(at.Add(50 * time.Millisecond)) })
	release := heldBy(q.queueCore)
	type result struct {
		ts  []*Task[int]
		err error
	}
	got := make(chan result, 1)
	go func() {
		ts, err := q.Reserve(ctx, 1, 0)
		got <- result{ts, err}
	}()
	waitUntil(t, func() bool { _, n := groupState(q.queueCore); return n == 1 })
	release()
	select {
	case r := <-got:
		if r.err != nil || len(r.ts) != 0 {
			t.Fatalf("Reserve = %v, %v; want nothing (the task expired)", r.ts, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the group's call that buried an expired task never returned")
	}
	dead, err := qd.DeadLetters(ctx, 0, 10)
	if err != nil || len(dead) != 1 || dead[0].ID != id || dead[0].Error != "expired" {
		t.Fatalf("dead letters %+v, %v; want %s, expired", dead, err, id)
	}
	if n := queueLeft(t, direct, qd.queueCore); n != 0 {
		t.Fatalf("%d of pending, processing, bodies and leases left", n)
	}
	waitUntil(t, func() bool { busy, n := groupState(q.queueCore); return !busy && n == 0 })
}

// awaitCanceled waits up to 5 s for the call whose ctx ended (what) to
// return on left, and checks that it returned context.Canceled: a caller
// that leaves never waits on the group.
func awaitCanceled(t *testing.T, left <-chan error, what string) {
	t.Helper()
	select {
	case err := <-left:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("%s returned %v, want context.Canceled", what, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s kept waiting on the group", what)
	}
}

// waitUntil polls cond until it holds, for up to 10 s (the conditions here
// only wait on goroutines of the test).
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10 s")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestGroupOwners: the one group commit carries a worker slot's ack with
// its next take (AckTake, as finish makes it), raw Task.Acks and raw
// Reserves of the same queue. With the group held, a raw Reserve, a
// slot's ack-and-take for worker "w|1", a raw Ack and a second slot's
// ack-and-take come in that order. The first round acks the three acks
// and takes for the raw Reserve only (the first reserve's owner, none);
// the two takes of "w|1" wait for the second round, in one call. Each
// caller gets its own outcome: the worker's tasks hold tokens that name
// it ("w|1/..."), the raw one's does not, and Redis holds exactly the
// three tasks taken.
func TestGroupOwners(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, _, _, f := groupServer(t)
	q := NewQueue[int](f, "owners", QueueOptions{Lease: time.Minute})
	if _, err := q.SubmitMany(ctx, []int{1, 2, 3, 4, 5, 6}); err != nil {
		t.Fatal(err)
	}
	held, err := q.Reserve(ctx, 3, 0)
	if err != nil || len(held) != 3 {
		t.Fatalf("Reserve = %d tasks, %v", len(held), err)
	}
	before := evalshaCalls(t, s)
	release := heldBy(q.queueCore)
	pending := func() int { _, n := groupState(q.queueCore); return n }
	type taken struct {
		code    engine.EndCode
		replied bool
		res     engine.Reserved
		err     error
	}
	var raw []*Task[int]
	var rawErr, ackErr error
	slots := make([]taken, 2)
	var wg sync.WaitGroup
	wg.Go(func() { raw, rawErr = q.Reserve(ctx, 1, 0) })
	waitUntil(t, func() bool { return pending() == 1 })
	wg.Go(func() {
		c, r, res, err := q.e.AckTake(ctx, held[0].r, 1, "w|1")
		slots[0] = taken{c, r, res, err}
	})
	waitUntil(t, func() bool { return pending() == 2 })
	wg.Go(func() { ackErr = held[1].Ack(ctx) })
	waitUntil(t, func() bool { return pending() == 3 })
	wg.Go(func() {
		c, r, res, err := q.e.AckTake(ctx, held[2].r, 1, "w|1")
		slots[1] = taken{c, r, res, err}
	})
	waitUntil(t, func() bool { return pending() == 4 })
	release()
	wg.Wait()
	if rawErr != nil || len(raw) != 1 || strings.Contains(raw[0].Token(), "/") {
		t.Fatalf("raw Reserve = %v, %v; want one task whose token names no worker", raw, rawErr)
	}
	if ackErr != nil {
		t.Fatalf("raw Ack = %v", ackErr)
	}
	for i, sl := range slots {
		if sl.err != nil || !sl.replied || sl.code != engine.EndDone || len(sl.res.Tasks) != 1 || !strings.HasPrefix(sl.res.Tasks[0].Token(), "w|1/") {
			t.Fatalf("slot %d = %+v; want its ack done and one task whose token names w|1", i, sl)
		}
	}
	if a, b := slots[0].res.Tasks[0].Token(), slots[1].res.Tasks[0].Token(); a[:strings.LastIndexByte(a, '.')] != b[:strings.LastIndexByte(b, '.')] {
		t.Fatalf("the two slots' tasks came from two calls (tokens %s, %s), want one", a, b)
	}
	if calls := evalshaCalls(t, s) - before; calls != 2 {
		t.Fatalf("%d scripts, want 2: the acks with the raw take, then the worker's two takes", calls)
	}
	st, err := q.Stats(ctx)
	if err != nil || st.InFlight != 3 || st.Pending != 0 {
		t.Fatalf("Stats = %+v, %v; want the three tasks taken in flight, none pending", st, err)
	}
	for _, tk := range append([]*engine.Reservation{raw[0].r}, slots[0].res.Tasks[0], slots[1].res.Tasks[0]) {
		if err := tk.Ack(ctx); err != nil {
			t.Fatalf("ack of a task taken: %v", err)
		}
	}
	waitUntil(t, func() bool { busy, n := groupState(q.queueCore); return !busy && n == 0 })
}
