package wake

import (
	"context"
	"encoding/binary"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// invalidation returns the invalidation message of key, as rueidis hands
// it to OnInvalidations: a blob string. rueidis exports no constructor, so
// it is read from rueidis's cache encoding (7 bytes of TTL, the RESP type,
// the length, the bytes); the test fails if that encoding changed.
func invalidation(t *testing.T, key string) rueidis.RedisMessage {
	t.Helper()
	buf := make([]byte, 7, 7+1+8+len(key))
	buf = append(buf, '$')
	buf = binary.BigEndian.AppendUint64(buf, uint64(len(key)))
	buf = append(buf, key...)
	var m rueidis.RedisMessage
	if err := m.CacheUnmarshalView(buf); err != nil {
		t.Fatalf("building the invalidation of %q: %v", key, err)
	}
	if s, err := m.ToString(); err != nil || s != key {
		t.Fatalf("the invalidation of %q reads %q, %v", key, s, err)
	}
	return m
}

// woken reports whether ch holds a wake-up, taking it.
func woken(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestListenCoalesces(t *testing.T) {
	w := New()
	ch, stop := w.Listen("k")
	defer stop()
	for range 3 {
		w.PokeAll("k")
	}
	w.OnInvalidations([]rueidis.RedisMessage{invalidation(t, "k"), invalidation(t, "k")})
	if !woken(ch) {
		t.Fatal("no wake-up after changes of the key")
	}
	if woken(ch) {
		t.Fatal("five changes gave more than one wake-up")
	}
	w.PokeAll("other")
	if woken(ch) {
		t.Fatal("a change of another key woke the listener")
	}
	w.PokeAll("k")
	if !woken(ch) {
		t.Fatal("no wake-up after a change that followed the taken one")
	}
}

func TestWakeOneWakesOnlyOne(t *testing.T) {
	w := New()
	g := w.Join("k")
	defer w.Leave("k", g)
	ch, stop := w.Listen("k")
	defer stop()
	w.WakeOne("k")
	if !woken(g.One()) {
		t.Fatal("WakeOne did not wake the gate's one channel")
	}
	if woken(ch) {
		t.Fatal("WakeOne woke a listener")
	}
	w.WakeOne("k")
	w.WakeOne("k")
	if !woken(g.One()) || woken(g.One()) {
		t.Fatal("two WakeOnes in a row did not leave exactly one wake-up")
	}
	g.WakeOne()
	if !woken(g.One()) || woken(ch) {
		t.Fatal("Gate.WakeOne did not wake the one channel alone")
	}
	w.WakeOne("nobody") // no gate: nothing to wake, nothing made
	if _, ok := w.gates["nobody"]; ok {
		t.Fatal("WakeOne of a key without waiters made a gate")
	}
}

func TestNilInvalidationWakesAllAndCleans(t *testing.T) {
	w := New()
	g := w.Join("a")
	defer w.Leave("a", g)
	ch, stop := w.Listen("b")
	defer stop()
	w.Wrote("a")
	w.Wrote("c")
	if !w.Stale("a") || !w.Stale("c") {
		t.Fatal("written keys are not stale")
	}
	w.OnInvalidations(nil)
	if !woken(g.One()) || !woken(ch) {
		t.Fatal("a nil invalidation did not wake every gate")
	}
	if w.Stale("a") || w.Stale("c") {
		t.Fatal("a nil invalidation left a key stale")
	}
	if n := w.ndirty.Load(); n != 0 {
		t.Fatalf("%d dirty marks counted after a nil invalidation", n)
	}
	var left int
	w.dirty.Range(func(any, any) bool { left++; return true })
	if left != 0 {
		t.Fatalf("%d dirty marks left after a nil invalidation", left)
	}
}

func TestInvalidationCleansAndWakesItsKey(t *testing.T) {
	w := New()
	ga, gb := w.Join("a"), w.Join("b")
	defer w.Leave("a", ga)
	defer w.Leave("b", gb)
	w.Wrote("a")
	w.Wrote("b")
	w.OnInvalidations([]rueidis.RedisMessage{invalidation(t, "a")})
	if !woken(ga.One()) {
		t.Fatal("the invalidation of a did not wake its gate")
	}
	if woken(gb.One()) {
		t.Fatal("the invalidation of a woke the gate of b")
	}
	if w.Stale("a") {
		t.Fatal("a is stale after its invalidation")
	}
	if !w.Stale("b") {
		t.Fatal("b is not stale after the invalidation of a")
	}
	if n := w.ndirty.Load(); n != 1 {
		t.Fatalf("%d dirty marks counted, want 1 (b)", n)
	}
}

func TestStale(t *testing.T) {
	w := New()
	if w.Stale("k") {
		t.Fatal("a key never written is stale")
	}
	w.Wrote("k")
	if !w.Stale("k") {
		t.Fatal("a key just written is not stale")
	}
	w.Wrote("k") // a second write before the invalidation: still one mark
	if n := w.ndirty.Load(); n != 1 {
		t.Fatalf("%d dirty marks counted for one key", n)
	}
	w.OnInvalidations([]rueidis.RedisMessage{invalidation(t, "k")})
	if w.Stale("k") {
		t.Fatal("a key is stale after its invalidation")
	}
}

func TestSettleWaitsForTheInvalidation(t *testing.T) {
	w := New()
	w.Wrote("k")
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Settle(context.Background(), "k", time.Minute)
	}()
	time.Sleep(5 * time.Millisecond)
	w.OnInvalidations([]rueidis.RedisMessage{invalidation(t, "k")})
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Settle did not return on the key's invalidation")
	}
	// A mark waited for in vain is not waited for again.
	w.Wrote("j")
	w.Settle(context.Background(), "j", time.Millisecond)
	start := time.Now()
	w.Settle(context.Background(), "j", time.Minute)
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Settle waited %v again for a mark already waited for in vain", d)
	}
}

func TestReadMarks(t *testing.T) {
	w := New()
	const ttl = 2 * time.Second
	w.WroteCached("k", 0)
	if w.Stale("k") {
		t.Fatal("a write to a key never read through the cache marked it dirty")
	}
	w.ReadCached("k", ttl, 0)
	w.WroteCached("k", int64(ttl))
	if !w.Stale("k") {
		t.Fatal("a write to a key read lately did not mark it dirty")
	}
	w.clean("k")
	w.WroteCached("k", int64(ttl+cachedSlack)+1)
	if w.Stale("k") {
		t.Fatal("a write to a key whose cached copy has expired marked it dirty")
	}
}

// waiter is a hand-over waiter as the root's lockWaiter is one.
type waiter struct {
	Place
	name string
}

func TestHandoffQueue(t *testing.T) {
	w := New()
	g := w.Join("k")
	defer w.Leave("k", g)
	if x := w.Pick("k"); x != nil {
		t.Fatalf("Pick of an empty queue gave %v", x)
	}
	if x := w.Pick("none"); x != nil {
		t.Fatalf("Pick of a key without a gate gave %v", x)
	}
	a, b, c := &waiter{name: "a"}, &waiter{name: "b"}, &waiter{name: "c"}
	w.Enqueue(g, a, false)
	w.Enqueue(g, b, false)
	w.Enqueue(g, b, false) // already queued: stays where it is
	w.Enqueue(g, c, true)  // lost a hand-over: goes first
	var got []string
	for range 3 {
		x := w.Pick("k")
		if x == nil {
			t.Fatalf("Pick gave none after %v", got)
		}
		got = append(got, x.(*waiter).name)
	}
	if want := "c a b"; strings.Join(got, " ") != want {
		t.Fatalf("picked %s, want %s", strings.Join(got, " "), want)
	}
	if x := w.Pick("k"); x != nil {
		t.Fatalf("Pick gave %v from an emptied queue", x)
	}
	if !w.Dequeue(g, a) {
		t.Fatal("Dequeue of a picked waiter did not report it assigned")
	}

	// Dequeue of a waiter not picked takes it out.
	d := &waiter{name: "d"}
	w.Enqueue(g, d, false)
	if w.Dequeue(g, d) {
		t.Fatal("Dequeue of a waiter never picked reported it assigned")
	}
	if x := w.Pick("k"); x != nil {
		t.Fatalf("Pick gave %v after its only waiter was dequeued", x)
	}

	// After maxHandovers in a row, Pick gives none once, and the count
	// starts again.
	g.handovers = 0
	for i := range maxHandovers {
		e := &waiter{name: "e"}
		w.Enqueue(g, e, false)
		if x := w.Pick("k"); x != Waiter(e) {
			t.Fatalf("hand-over %d picked %v", i+1, x)
		}
	}
	e := &waiter{name: "e"}
	w.Enqueue(g, e, false)
	if x := w.Pick("k"); x != nil {
		t.Fatalf("hand-over %d in a row picked %v", maxHandovers+1, x)
	}
	if x := w.Pick("k"); x != Waiter(e) {
		t.Fatalf("Pick after the reset gave %v, want the waiter left", x)
	}
	if w.Dequeue(g, e) != true {
		t.Fatal("a picked waiter is not assigned")
	}
	// Enqueued again, a waiter is no longer assigned.
	w.Enqueue(g, e, true)
	if w.Dequeue(g, e) {
		t.Fatal("a waiter enqueued again is still assigned")
	}
}

func TestLeaveOfLastRefRemovesGate(t *testing.T) {
	w := New()
	g1 := w.Join("k")
	g2 := w.Join("k")
	if g1 != g2 {
		t.Fatal("two joins of a key gave two gates")
	}
	ch, stop := w.Listen("k")
	w.Leave("k", g1)
	stop()
	if w.gates["k"] != g2 {
		t.Fatal("the gate went while a ref was left")
	}
	w.PokeAll("k")
	if woken(ch) {
		t.Fatal("a stopped listener was woken")
	}
	w.Leave("k", g2)
	if _, ok := w.gates["k"]; ok {
		t.Fatal("the gate stayed after the leave of its last ref")
	}
	if g3 := w.Join("k"); g3 == g1 {
		t.Fatal("a join after the last leave got the old gate")
	}
}

func TestListenerOfManyKeys(t *testing.T) {
	w := New()
	ch := make(chan struct{}, 1)
	ga, gb := w.AddListener("a", ch), w.AddListener("b", ch)
	w.PokeAll("b")
	if !woken(ch) {
		t.Fatal("a change of b did not wake its listener")
	}
	w.RemoveListener(ch, ga, gb)
	w.Leave("a", ga)
	w.Leave("b", gb)
	w.PokeAll("a")
	w.OnInvalidations(nil)
	if woken(ch) {
		t.Fatal("a removed listener was woken")
	}
	if len(w.gates) != 0 {
		t.Fatalf("%d gates left after every leave", len(w.gates))
	}
}

// TestConcurrent runs every entry point at once, for the race detector.
func TestConcurrent(t *testing.T) {
	w := New()
	msg := invalidation(t, "k")
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 200 {
				g := w.Join("k")
				x := &waiter{}
				w.Enqueue(g, x, false)
				w.WakeOne("k")
				_ = w.Pick("k")
				w.Dequeue(g, x)
				ch, stop := w.Listen("k")
				w.Wrote("k")
				w.ReadCached("k", time.Second, 0)
				w.WroteCached("k", 1)
				_ = w.Stale("k")
				w.OnInvalidations([]rueidis.RedisMessage{msg})
				woken(ch)
				stop()
				w.Leave("k", g)
			}
		})
	}
	wg.Go(func() {
		for range 50 {
			w.OnInvalidations(nil)
			w.CloseAll()
		}
	})
	wg.Wait()
	if len(w.gates) != 0 {
		t.Fatalf("%d gates left", len(w.gates))
	}
}
