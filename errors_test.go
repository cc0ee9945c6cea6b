package fleet_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// checkMessage fails unless err is want (errors.Is) and its text is exactly
// text, which says "fleet: " once, at its start.
func checkMessage(t *testing.T, what string, err, want error, text string) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: %v is not %v", what, err, want)
		return
	}
	if got := err.Error(); got != text {
		t.Errorf("%s:\n got %q\nwant %q", what, got, text)
	}
	if n := strings.Count(err.Error(), "fleet: "); n != 1 {
		t.Errorf("%s: %q says \"fleet: \" %d times", what, err, n)
	}
}

// The messages of the errors users meet most: each says "fleet: " once,
// names the call and the thing, then the kind, then the cause.
func TestErrorMessages(t *testing.T) {
	t.Run("open on a closed port", func(t *testing.T) {
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := fleet.Open(c, fleet.Options{Addrs: []string{"127.0.0.1:1"}, DialTimeout: time.Second})
		if !errors.Is(err, fleet.ErrUnavailable) || !strings.HasPrefix(err.Error(), "fleet: connect to 127.0.0.1:1: redis unavailable: ") {
			t.Fatalf("Open on a closed port = %v", err)
		}
		if n := strings.Count(err.Error(), "fleet: "); n != 1 {
			t.Fatalf("%q says \"fleet: \" %d times", err, n)
		}
	})
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		kv := e.F.KV("ns")
		e.do(t, e.Raw.B().Hset().Key(e.key("fleet:kv:ns:k", "fleet:kv:ns:k")).FieldValue().FieldValue("a", "1").Build())
		_, _, err := fleet.GetAs[string](ctx(t), kv, "k")
		if !errors.Is(err, fleet.ErrWrongType) || !strings.HasPrefix(err.Error(), `fleet: kv get "k": key holds the wrong kind of value: WRONGTYPE`) ||
			strings.Count(err.Error(), "fleet: ") != 1 {
			t.Errorf("a wrong type: %v", err)
		}

		_, err = e.F.SubmitJSON(ctx(t), "nope", []byte(`{}`))
		checkMessage(t, "an unknown queue", err, fleet.ErrQueueNotFound, `fleet: submit json "nope": no such queue`)
		if !errors.Is(err, fleet.ErrNotFound) {
			t.Errorf("%v is not ErrNotFound", err)
		}

		// A lease that already ended, on each primitive.
		lease, err := e.F.Lock("l").Acquire(ctx(t), fleet.LockOptions{Hold: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if err := lease.Release(ctx(t)); err != nil {
			t.Fatal(err)
		}
		checkMessage(t, "a lock", lease.Release(ctx(t)), fleet.ErrLeaseLost, `fleet: lock release "l": lease lost`)

		permit, err := e.F.Semaphore("s", 2).Acquire(ctx(t), fleet.SemaphoreOptions{Hold: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if err := permit.Release(ctx(t)); err != nil {
			t.Fatal(err)
		}
		checkMessage(t, "a permit", permit.Release(ctx(t)), fleet.ErrLeaseLost, `fleet: semaphore release "s": lease lost`)

		p := fleet.NewPool[string, struct{}](e.F, "p", fleet.PoolOptions{})
		item, err := p.Put(ctx(t), "v", struct{}{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		cl, err := p.Claim(ctx(t), fleet.ClaimOptions{Hold: time.Minute})
		if err != nil || cl == nil {
			t.Fatal(cl, err)
		}
		if err := cl.Release(ctx(t)); err != nil {
			t.Fatal(err)
		}
		checkMessage(t, "a claim", cl.Release(ctx(t)), fleet.ErrLeaseLost, `fleet: pool release "p": lease lost: item "`+item+`"`)

		q := fleet.NewQueue[job](e.F, "q", fleet.QueueOptions{})
		if _, err := q.Submit(ctx(t), jobN(1)); err != nil {
			t.Fatal(err)
		}
		ts, err := q.Reserve(ctx(t), 1, 0)
		if err != nil || len(ts) != 1 {
			t.Fatal(ts, err)
		}
		if err := ts[0].Ack(ctx(t)); err != nil {
			t.Fatal(err)
		}
		checkMessage(t, "a task", ts[0].Ack(ctx(t)), fleet.ErrLeaseLost, `fleet: ack "q": lease lost: task `+ts[0].ID)

		_, err = e.F.Lock("l2").Acquire(ctx(t), fleet.LockOptions{Hold: 0})
		checkMessage(t, "a bad argument", err, fleet.ErrInvalidArgument, `fleet: lock acquire "l2": invalid argument: hold 0s must be > 0`)
	})
}
