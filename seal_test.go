package fleet_test

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

type secret struct {
	Card string `json:"card" validate:"required"`
	N    int    `json:"n"`
}

func newKey(t testing.TB, id string) fleet.Key {
	k := fleet.Key{ID: id, Secret: make([]byte, 32)}
	if _, err := rand.Read(k.Secret); err != nil {
		t.Fatal(err)
	}
	return k
}

func keyring(t testing.TB, newest fleet.Key, older ...fleet.Key) *fleet.Keyring {
	kr, err := fleet.NewKeyring(newest, older...)
	if err != nil {
		t.Fatal(err)
	}
	return kr
}

// payloadOf returns the "payload" of a body as stored.
func payloadOf(t *testing.T, body string) json.RawMessage {
	t.Helper()
	var b struct {
		Payload json.RawMessage `json:"payload"`
	}
	if err := json.Unmarshal([]byte(body), &b); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	return b.Payload
}

// TestSealedQueue: a sealed queue's payload, progress and result reach
// Redis sealed (no clear text in any key, nor on the progress channel)
// and come back opened to a process with the queue's Sealer: the worker's
// payload, Lookup, WatchProgress, ResultOf, the dead letters. A process
// without it sees the sealed values (SealedKeyID names the key), and its
// ResultOf says ErrSealed.
func TestSealedQueue(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		kr := keyring(t, newKey(t, "k1"))
		q := fleet.NewQueue[secret](e.F, "sealed", fleet.QueueOptions{Sealer: kr, Retention: time.Hour, IndexMeta: []string{"tenant"}})
		other := openOn(t, tg, e.Prefix) // no Sealer: an operator's tool
		oq := fleet.NewQueue[secret](other, "sealed", fleet.QueueOptions{Retention: time.Hour})
		k := e.qk("sealed")

		sub, err := q.WatchProgress(c, fleet.SubscribeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		osub, err := oq.WatchProgress(c, fleet.SubscribeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer osub.Close()

		id, err := q.Submit(c, secret{Card: "4111-1111", N: 7})
		if err != nil {
			t.Fatal(err)
		}
		// Bad input is refused before sealing, as on any queue.
		if _, err := q.Submit(c, secret{}); !errors.Is(err, fleet.ErrInvalidPayload) {
			t.Fatalf("invalid payload: %v", err)
		}
		bodies, err := e.compat().LRange(c, k.Pending, 0, -1).Result()
		if err != nil || len(bodies) != 1 {
			t.Fatalf("pending %q %v", bodies, err)
		}
		p := payloadOf(t, bodies[0])
		if kid, ok := fleet.SealedKeyID(p); !ok || kid != "k1" || !strings.HasPrefix(string(p), `"fleet:sealed:1:k1:`) || strings.Contains(bodies[0], "4111") {
			t.Fatalf("stored body %s: want its payload sealed with k1", bodies[0])
		}
		if !strings.Contains(bodies[0], `"id":"`+id+`"`) {
			t.Fatalf("stored body %s: want the id in the clear", bodies[0])
		}

		// Lookup: opened here, sealed there.
		rec, err := q.Lookup(c, id)
		if err != nil || string(rec.Payload) != `{"card":"4111-1111","n":7}` {
			t.Fatalf("Lookup with the Sealer: %s %v", rec.Payload, err)
		}
		orec, err := oq.Lookup(c, id)
		if err != nil || !bytes.Equal(orec.Payload, p) {
			t.Fatalf("Lookup without it: %s %v; want the stored %s", orec.Payload, err, p)
		}
		pend, err := q.Pending(c, 0, 10)
		if err != nil || len(pend) != 1 || string(pend[0].Payload) != `{"card":"4111-1111","n":7}` {
			t.Fatalf("Pending %+v %v", pend, err)
		}

		// FindByMeta, as Lookup: opened here, sealed there.
		found, err := q.SubmitWith(c, secret{Card: "4111-2222", N: 8}, fleet.SubmitOptions{Metadata: map[string]string{"tenant": "acme"}})
		if err != nil {
			t.Fatal(err)
		}
		page, _, err := q.FindByMeta(c, "tenant", "acme", "", 10)
		if err != nil || len(page) != 1 || page[0].ID != found || string(page[0].Payload) != `{"card":"4111-2222","n":8}` {
			t.Fatalf("FindByMeta with the Sealer: %+v %v", page, err)
		}
		page, _, err = oq.FindByMeta(c, "tenant", "acme", "", 10)
		if kid, ok := fleet.SealedKeyID(page[0].Payload); err != nil || !ok || kid != "k1" {
			t.Fatalf("FindByMeta without it: %+v %v", page, err)
		}
		if err := q.Cancel(c, found); err != nil {
			t.Fatal(err)
		}

		tasks, err := q.Reserve(c, 1, time.Second)
		if err != nil || len(tasks) != 1 || tasks[0].Payload != (secret{Card: "4111-1111", N: 7}) {
			t.Fatalf("Reserve = %+v, %v", tasks, err)
		}
		tk := tasks[0]
		if err := tk.Progress(c, map[string]string{"step": "charging 4111"}); err != nil {
			t.Fatal(err)
		}
		prog, err := e.compat().HGet(c, k.Pending+":progress", id).Result()
		if err != nil || strings.Contains(prog, "4111") || !strings.Contains(prog, `"fleet:sealed:1:k1:`) {
			t.Fatalf("stored progress %q %v: want it sealed", prog, err)
		}
		select {
		case ev := <-sub.C():
			if string(ev.Progress) != `{"step":"charging 4111"}` {
				t.Fatalf("watcher with the Sealer got %s", ev.Progress)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no progress event")
		}
		select {
		case ev := <-osub.C():
			if kid, ok := fleet.SealedKeyID(ev.Progress); !ok || kid != "k1" {
				t.Fatalf("watcher without the Sealer got %s; want it sealed", ev.Progress)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no progress event without the Sealer")
		}
		if rec, err := q.Lookup(c, id); err != nil || string(rec.Progress) != `{"step":"charging 4111"}` {
			t.Fatalf("Lookup progress %s %v", rec.Progress, err)
		}

		if err := tk.SetResult(map[string]string{"auth": "ok-4111"}); err != nil {
			t.Fatal(err)
		}
		if err := tk.Ack(c); err != nil {
			t.Fatal(err)
		}
		raw, ok := e.get(t, e.key("fleet:queue:sealed:result:"+id, "fleet:queue:{sealed}:result:"+id))
		if !ok || strings.Contains(raw, "4111") || !strings.Contains(raw, `"result":"fleet:sealed:1:k1:`) {
			t.Fatalf("stored record %q: want its result sealed", raw)
		}
		got, err := fleet.ResultOf[map[string]string](c, q, id)
		if err != nil || got["auth"] != "ok-4111" {
			t.Fatalf("ResultOf = %v, %v", got, err)
		}
		if _, err := fleet.ResultOf[map[string]string](c, oq, id); !errors.Is(err, fleet.ErrSealed) {
			t.Fatalf("ResultOf without the Sealer = %v; want ErrSealed", err)
		}
		done, err := q.Done(c, fleet.TaskCursor{}, 10)
		if err != nil || len(done) != 1 || string(done[0].Result) != `{"auth":"ok-4111"}` {
			t.Fatalf("Done %+v %v", done, err)
		}

		// No key holds the clear text.
		for _, key := range e.keys(t) {
			if v := contents(t, e, key); strings.Contains(v, "4111") {
				t.Fatalf("key %s holds the clear text: %s", key, v)
			}
		}
	})
}

// contents returns everything key holds, as text.
func contents(t *testing.T, e *env, key string) string {
	t.Helper()
	c, r := ctx(t), e.compat()
	typ, err := r.Type(c, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	var v any
	switch typ {
	case "string":
		v, err = r.Get(c, key).Result()
	case "list":
		v, err = r.LRange(c, key, 0, -1).Result()
	case "hash":
		v, err = r.HGetAll(c, key).Result()
	case "set":
		v, err = r.SMembers(c, key).Result()
	case "zset":
		v, err = r.ZRangeWithScores(c, key, 0, -1).Result()
	case "stream":
		v, err = r.XRange(c, key, "-", "+").Result()
	case "none":
		return ""
	default:
		t.Fatalf("key %s of type %s", key, typ)
	}
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// TestSealedRotation: tasks sealed with an old key and with the new one
// both run on a worker whose Keyring holds the two; a worker that dropped
// the old key, or has no Sealer, or meets an altered body, moves the task
// to the dead letters with ErrSealed's reason, once (no loop), its body
// unchanged; a payload stored in the clear before the queue was sealed
// still runs.
func TestSealedRotation(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		k1, k2 := newKey(t, "2026-11"), newKey(t, "2026-12")
		k := e.qk("rot")
		plain := fleet.NewQueue[secret](openOn(t, tg, e.Prefix), "rot", fleet.QueueOptions{})
		old := fleet.NewQueue[secret](openOn(t, tg, e.Prefix), "rot", fleet.QueueOptions{Sealer: keyring(t, k1)})
		cur := fleet.NewQueue[secret](e.F, "rot", fleet.QueueOptions{Sealer: keyring(t, k2, k1)})
		if _, err := plain.Submit(c, secret{Card: "clear", N: 0}); err != nil {
			t.Fatal(err)
		}
		for i := 1; i <= 3; i++ {
			if _, err := old.Submit(c, secret{Card: "c", N: i}); err != nil {
				t.Fatal(err)
			}
			if _, err := cur.Submit(c, secret{Card: "c", N: 10 + i}); err != nil {
				t.Fatal(err)
			}
		}
		bodies, _ := e.compat().LRange(c, k.Pending, 0, -1).Result()
		byKey := map[string]int{}
		for _, b := range bodies {
			kid, _ := fleet.SealedKeyID(payloadOf(t, b))
			byKey[kid]++
		}
		if len(bodies) != 7 || byKey["2026-11"] != 3 || byKey["2026-12"] != 3 || byKey[""] != 1 {
			t.Fatalf("stored key ids %v of %d bodies; want 3 each and 1 clear", byKey, len(bodies))
		}
		tasks, err := cur.Reserve(c, 10, time.Second)
		if err != nil || len(tasks) != 7 {
			t.Fatalf("Reserve = %d tasks, %v", len(tasks), err)
		}
		sum := 0
		for _, tk := range tasks {
			sum += tk.Payload.N
			if err := tk.Ack(c); err != nil {
				t.Fatal(err)
			}
		}
		if sum != 1+2+3+11+12+13 {
			t.Fatalf("payloads summed to %d", sum)
		}

		// A worker that dropped the old key; one with no Sealer; an altered body.
		only2 := fleet.NewQueue[secret](openOn(t, tg, e.Prefix), "rot", fleet.QueueOptions{Sealer: keyring(t, k2)})
		none := plain
		for _, c2 := range []struct {
			name   string
			submit *fleet.Queue[secret]
			take   *fleet.Queue[secret]
			alter  bool
			reason string
		}{
			{"old key dropped", old, only2, false, `key "2026-11" is not in the keyring`},
			{"no Sealer", cur, none, false, `has no QueueOptions.Sealer for queue "rot"`},
			{"altered", cur, cur, true, "authentication failed"},
		} {
			id, err := c2.submit.Submit(c, secret{Card: "c", N: 99})
			if err != nil {
				t.Fatal(err)
			}
			if c2.alter { // flip one character of the sealed text
				b, _ := e.compat().LIndex(c, k.Pending, 0).Result()
				p := string(payloadOf(t, b))
				i := len(p) - 5
				ch := byte('A')
				if p[i] == 'A' {
					ch = 'B'
				}
				altered := strings.Replace(b, p, p[:i]+string(ch)+p[i+1:], 1)
				if err := e.compat().LSet(c, k.Pending, 0, altered).Err(); err != nil {
					t.Fatal(err)
				}
			}
			stored, _ := e.compat().LIndex(c, k.Pending, 0).Result()
			// Poison is buried under the reserve's lease: no task, no error.
			tasks, err := c2.take.Reserve(c, 1, 0)
			if len(tasks) != 0 || err != nil {
				t.Fatalf("%s: Reserve = %d tasks, %v; want none", c2.name, len(tasks), err)
			}
			dead, err := cur.DeadLetters(c, 0, 10)
			if err != nil || len(dead) != 1 || dead[0].ID != id || !strings.Contains(dead[0].Error, c2.reason) || !strings.Contains(dead[0].Error, "payload does not open") {
				t.Fatalf("%s: dead letters %+v %v; want %s with %q", c2.name, dead, err, id, c2.reason)
			}
			if !bytes.Equal(payloadOf(t, dead[0].Raw), payloadOf(t, stored)) {
				t.Fatalf("%s: the dead letter's payload changed: %s, was %s", c2.name, payloadOf(t, dead[0].Raw), payloadOf(t, stored))
			}
			if n, _ := e.compat().LLen(c, k.Pending).Result(); n != 0 {
				t.Fatalf("%s: %d left pending", c2.name, n)
			}
			if n, _ := e.compat().HLen(c, k.Body).Result(); n != 0 {
				t.Fatalf("%s: %d left in flight", c2.name, n)
			}
			if _, err := cur.PurgeDead(c); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestKeyringBadInput: bad keys are refused with ErrInvalidOptions naming
// the key; a queue's value sealed for another queue or another kind does
// not open; garbage does not open and never panics.
func TestKeyringBadInput(t *testing.T) {
	k := newKey(t, "a")
	for _, c := range []struct {
		name string
		keys []fleet.Key
		want string
	}{
		{"short secret", []fleet.Key{{ID: "a", Secret: make([]byte, 16)}}, `key "a" has a secret of 16 bytes`},
		{"empty id", []fleet.Key{{ID: "", Secret: k.Secret}}, `key id ""`},
		{"colon in id", []fleet.Key{{ID: "a:b", Secret: k.Secret}}, `key id "a:b"`},
		{"long id", []fleet.Key{{ID: strings.Repeat("x", 65), Secret: k.Secret}}, "want 1 to 64"},
		{"twice", []fleet.Key{k, k}, `key id "a" given twice`},
	} {
		_, err := fleet.NewKeyring(c.keys[0], c.keys[1:]...)
		if !errors.Is(err, fleet.ErrInvalidOptions) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want ErrInvalidOptions with %q", c.name, err, c.want)
		}
	}
	kr := keyring(t, k)
	id, sealed, err := kr.Seal([]byte(`{"x":1}`), []byte("aad"))
	if err != nil || id != "a" {
		t.Fatal(id, err)
	}
	if plain, err := kr.Open("a", sealed, []byte("aad")); err != nil || string(plain) != `{"x":1}` {
		t.Fatalf("Open = %s, %v", plain, err)
	}
	for _, c := range []struct {
		name   string
		id     string
		sealed []byte
		aad    string
	}{
		{"other aad", "a", sealed, "other"},
		{"unknown key", "b", sealed, "aad"},
		{"short", "a", sealed[:10], "aad"},
		{"empty", "a", nil, "aad"},
	} {
		if _, err := kr.Open(c.id, c.sealed, []byte(c.aad)); !errors.Is(err, fleet.ErrSealed) {
			t.Errorf("%s: Open = %v; want ErrSealed", c.name, err)
		}
	}
	for _, raw := range []string{`"fleet:sealed:1:"`, `"fleet:sealed:1:a"`, `"fleet:sealed:1:a:`, `"fleet:sealed:1:a:!!!"`, `"fleet:sealed:1:bad id:AAAA"`} {
		if _, ok := fleet.SealedKeyID([]byte(raw)); raw == `"fleet:sealed:1:"` && ok {
			t.Errorf("SealedKeyID(%s) ok", raw)
		}
	}
}

// TestSealedFlowResult: a dependent reads the sealed result of its
// dependency (another sealed queue) through ResultOf, as its handler does.
func TestSealedFlowResult(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		kr := keyring(t, newKey(t, "k"))
		qa := fleet.NewQueue[secret](e.F, "sf-a", fleet.QueueOptions{Sealer: kr})
		qd := fleet.NewQueue[secret](e.F, "sf-d", fleet.QueueOptions{Sealer: kr})
		a, err := qa.SubmitWith(c, secret{Card: "a"}, fleet.SubmitOptions{Track: true})
		if err != nil {
			t.Fatal(err)
		}
		d, err := qd.SubmitWith(c, secret{Card: "d"}, fleet.SubmitOptions{After: fleet.DependOn(qa, a)})
		if err != nil {
			t.Fatal(err)
		}
		tasks, err := qa.Reserve(c, 1, time.Second)
		if err != nil || len(tasks) != 1 {
			t.Fatal(tasks, err)
		}
		_ = tasks[0].SetResult("token-a")
		if err := tasks[0].Ack(c); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, func() bool { rec, _ := qd.Lookup(c, d); return rec.Status == fleet.TaskPending }, "dependent released")
		tasks, err = qd.Reserve(c, 1, time.Second)
		if err != nil || len(tasks) != 1 || tasks[0].Payload.Card != "d" {
			t.Fatal(tasks, err)
		}
		deps, err := tasks[0].Dependencies(c)
		if err != nil || len(deps) != 1 || string(deps[0].Result) != `"token-a"` {
			t.Fatalf("Dependencies %+v %v", deps, err)
		}
		if got, err := fleet.ResultOf[string](c, qa, a); err != nil || got != "token-a" {
			t.Fatalf("ResultOf = %q, %v", got, err)
		}
		if err := tasks[0].Ack(c); err != nil {
			t.Fatal(err)
		}
	})
}
