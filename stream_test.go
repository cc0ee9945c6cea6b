package fleet_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

type scraped struct {
	URL  string `json:"url"`
	Code int    `json:"code"`
}

func datas[T any](es []fleet.StreamEntry[T]) []T {
	out := make([]T, len(es))
	for i, e := range es {
		out[i] = e.Data
	}
	return out
}

// zrange returns every member and score of a zset, raw.
func (e *env) zrange(t *testing.T, key string) []rueidis.ZScore {
	t.Helper()
	zs, err := e.Raw.Do(context.Background(), e.Raw.B().Zrange().Key(key).Min("0").Max("-1").Withscores().Build()).AsZScores()
	if err != nil {
		t.Fatalf("zrange %s: %v", key, err)
	}
	return zs
}

var envelopeRE = regexp.MustCompile(`^\{"id":"([0-9a-f-]{36})","ts":([0-9]+(?:\.[0-9]{1,3})?),"data":(.*)\}$`)

// TestStreamPushPeekPop: a stream with StreamOptions.Envelope.
func TestStreamPushPeekPop(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		s := fleet.NewStream[scraped](e.F, "cf-scraper", fleet.StreamOptions{Envelope: true})
		if s.Err() != nil {
			t.Fatal(s.Err())
		}
		// Each entry's time is the server's when its push ran.
		before := e.serverTime(t).Truncate(time.Millisecond)
		pushes := []scraped{{"c", 200}, {"a", 200}, {"a", 200}} // equal outputs: still two members
		ids := map[string]time.Time{}
		var order []string
		for _, v := range pushes {
			id, err := s.Push(c, v)
			if err != nil {
				t.Fatal(err)
			}
			ids[id] = time.Time{}
			order = append(order, id)
		}
		after := e.serverTime(t)
		if len(ids) != 3 {
			t.Fatalf("ids not unique: %v", ids)
		}
		if n, err := s.Len(c); err != nil || n != 3 {
			t.Fatalf("Len = %d, %v; want 3", n, err)
		}

		// What is in Redis: one zset, stream:<type> in both layouts, scored by
		// unix seconds, members the JSON envelope.
		key := e.Prefix + "stream:cf-scraper"
		if got := e.keys(t); !slices.Equal(got, []string{key}) {
			t.Fatalf("keys = %v, want [%s]", got, key)
		}
		zs := e.zrange(t, key)
		wantData := []string{`{"url":"c","code":200}`, `{"url":"a","code":200}`, `{"url":"a","code":200}`}
		for i, z := range zs {
			m := envelopeRE.FindStringSubmatch(z.Member)
			if m == nil {
				t.Fatalf("member %d = %s, not the envelope", i, z.Member)
			}
			u, err := uuid.Parse(m[1])
			if err != nil || u.Version() != 7 {
				t.Fatalf("id %q is not a UUIDv7 (%v)", m[1], err)
			}
			ts, _ := strconv.ParseFloat(m[2], 64)
			pushed := time.UnixMilli(int64(ts*1000 + 0.5))
			if ts != z.Score || m[1] != order[i] || pushed.Before(before) || pushed.After(after) {
				t.Fatalf("member %d: id %s ts %v, score %v; want id %s, the server's time in [%v, %v]", i, m[1], ts, z.Score, order[i], before, after)
			}
			ids[m[1]] = pushed
			if m[3] != wantData[i] {
				t.Fatalf("member %d data = %s, want %s", i, m[3], wantData[i])
			}
		}

		peek, err := s.Peek(c, 2)
		if err != nil {
			t.Fatal(err)
		}
		if got := datas(peek); !slices.Equal(got, []scraped{{"c", 200}, {"a", 200}}) {
			t.Fatalf("Peek = %+v", got)
		}
		if peek[0].ID != order[0] || !peek[0].Time.Equal(ids[order[0]]) {
			t.Fatalf("Peek[0] = %v %v, want %v at %v", peek[0].ID, peek[0].Time, order[0], ids[order[0]])
		}
		if n, _ := s.Len(c); n != 3 {
			t.Fatalf("Peek removed: Len = %d", n)
		}
		pop, err := s.Pop(c, 10)
		if err != nil {
			t.Fatal(err)
		}
		if got := datas(pop); !slices.Equal(got, []scraped{{"c", 200}, {"a", 200}, {"a", 200}}) {
			t.Fatalf("Pop = %+v", got)
		}
		if pop[1].ID == pop[2].ID {
			t.Fatal("equal outputs share an id")
		}
		if got, err := s.Pop(c, 1); err != nil || len(got) != 0 {
			t.Fatalf("Pop of empty = %v, %v", got, err)
		}
		if got := e.keys(t); len(got) != 0 {
			t.Fatalf("keys left: %v", got)
		}
	})
}

func TestStreamBoundByCount(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		s := fleet.NewStream[int](e.F, "counted", fleet.StreamOptions{MaxLen: 5})
		// One PushMany: the members' scores are a microsecond apart, in order.
		ids, err := s.PushMany(c, []int{0, 1, 2, 3, 4, 5, 6, 7})
		if err != nil || len(ids) != 8 || ids[0] != "" {
			t.Fatalf("PushMany = %q, %v; want 8 empty ids (bare members)", ids, err)
		}
		if n, _ := s.Len(c); n != 5 {
			t.Fatalf("Len = %d, want 5", n)
		}
		got, err := s.Peek(c, 100)
		if err != nil || !slices.Equal(datas(got), []int{3, 4, 5, 6, 7}) {
			t.Fatalf("Peek = %v, %v; want the 5 newest", datas(got), err)
		}
		// With envelopes, one timestamp for all: the UUIDv7 ids keep the order.
		w := fleet.NewStream[int](e.F, "counted-wrapped", fleet.StreamOptions{MaxLen: 5, Envelope: true})
		wids, err := w.PushMany(c, []int{0, 1, 2, 3, 4, 5, 6, 7})
		if err != nil || len(wids) != 8 {
			t.Fatalf("PushMany = %v, %v", wids, err)
		}
		if got, err := w.Peek(c, 100); err != nil || !slices.Equal(datas(got), []int{3, 4, 5, 6, 7}) || got[0].ID != wids[3] {
			t.Fatalf("wrapped Peek = %+v, %v; want the 5 newest, %s first", got, err, wids[3])
		}
		if _, err := s.Push(c, 8); err != nil {
			t.Fatal(err)
		}
		got, _ = s.Peek(c, 100)
		if !slices.Equal(datas(got), []int{4, 5, 6, 7, 8}) {
			t.Fatalf("after one more push: %v", datas(got))
		}
		// The default bound is 50,000: a larger batch is trimmed to it.
		big := fleet.NewStream[int](e.F, "big", fleet.StreamOptions{})
		vs := make([]int, fleet.DefaultStreamMaxLen+10)
		for i := range vs {
			vs[i] = i
		}
		if _, err := big.PushMany(c, vs); err != nil {
			t.Fatal(err)
		}
		if n, _ := big.Len(c); n != fleet.DefaultStreamMaxLen {
			t.Fatalf("big Len = %d", n)
		}
		if first, _ := big.Peek(c, 1); len(first) != 1 || first[0].Data != 10 {
			t.Fatalf("big oldest = %+v, want 10", first)
		}
	})
}

func TestStreamBoundByAge(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		// Entries of other ages are written raw, as another client of the
		// schema would, scored by the server's clock; each push trims by it.
		now := e.serverTime(t)
		old := func(key string, ago time.Duration, v string) {
			at := now.Add(-ago)
			ts := strconv.FormatFloat(float64(at.UnixMilli())/1000, 'f', -1, 64)
			e.do(t, e.Raw.B().Zadd().Key(e.Prefix+key).ScoreMember().
				ScoreMember(float64(at.UnixMilli())/1000, `{"id":"`+uuid.NewString()+`","ts":`+ts+`,"data":"`+v+`"}`).Build())
		}
		s := fleet.NewStream[string](e.F, "aged", fleet.StreamOptions{MaxAge: time.Minute})
		old("stream:aged", 2*time.Hour, "old1")
		old("stream:aged", 2*time.Hour, "old2")
		old("stream:aged", 90*time.Second, "old3")
		old("stream:aged", 30*time.Second, "fresh")
		if _, err := s.Push(c, "now"); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.Peek(c, 10); !slices.Equal(datas(got), []string{"fresh", "now"}) {
			t.Fatalf("Peek = %v, want the entries of the last minute", datas(got))
		}
		// The default age bound is an hour.
		d := fleet.NewStream[string](e.F, "aged-default", fleet.StreamOptions{})
		old("stream:aged-default", fleet.DefaultStreamMaxAge+time.Second, "too old")
		old("stream:aged-default", fleet.DefaultStreamMaxAge-time.Minute, "kept")
		if _, err := d.Push(c, "now"); err != nil {
			t.Fatal(err)
		}
		if got, _ := d.Peek(c, 10); !slices.Equal(datas(got), []string{"kept", "now"}) {
			t.Fatalf("default age: %v", datas(got))
		}
	})
}

func TestStreamBadInput(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		for _, name := range []string{"", "a b", "{x}", "a\nb"} {
			s := fleet.NewStream[int](e.F, name, fleet.StreamOptions{})
			if !errors.Is(s.Err(), fleet.ErrInvalidName) {
				t.Fatalf("NewStream(%q).Err() = %v", name, s.Err())
			}
			if _, err := s.Push(c, 1); !errors.Is(err, fleet.ErrInvalidName) {
				t.Fatalf("Push on %q: %v", name, err)
			}
			if _, err := s.Pop(c, 1); !errors.Is(err, fleet.ErrInvalidName) {
				t.Fatalf("Pop on %q: %v", name, err)
			}
		}
		for _, o := range []fleet.StreamOptions{{MaxLen: -1}, {MaxAge: -time.Second}} {
			if err := fleet.NewStream[int](e.F, "x", o).Err(); !errors.Is(err, fleet.ErrInvalidArgument) {
				t.Fatalf("options %+v: %v", o, err)
			}
		}
		anyS := fleet.NewStream[any](e.F, "any", fleet.StreamOptions{})
		if _, err := anyS.Push(c, make(chan int)); !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Fatalf("Push of a channel: %v", err)
		}
		if _, err := anyS.PushMany(c, []any{1, func() {}}); !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Fatalf("PushMany with a func: %v", err)
		}
		if _, err := anyS.Pop(c, 0); !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Fatalf("Pop(0): %v", err)
		}
		if _, err := anyS.Peek(c, -1); !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Fatalf("Peek(-1): %v", err)
		}
		cancelled, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := anyS.Push(cancelled, 1); !errors.Is(err, context.Canceled) {
			t.Fatalf("Push with a cancelled ctx: %v", err)
		}
		if got := e.keys(t); len(got) != 0 {
			t.Fatalf("refused calls wrote %v", got)
		}

		// A key of another type: ErrWrongType, nothing changed.
		key := e.Prefix + "stream:taken"
		e.do(t, e.Raw.B().Set().Key(key).Value("v").Build())
		w := fleet.NewStream[int](e.F, "taken", fleet.StreamOptions{})
		if _, err := w.Push(c, 1); !errors.Is(err, fleet.ErrWrongType) {
			t.Fatalf("Push on a string: %v", err)
		}
		if _, err := w.PushMany(c, []int{1, 2}); !errors.Is(err, fleet.ErrWrongType) {
			t.Fatalf("PushMany on a string: %v", err)
		}
		if _, err := w.Emit(c, 1); !errors.Is(err, fleet.ErrWrongType) {
			t.Fatalf("Emit on a string: %v", err)
		}
		if _, err := w.Pop(c, 1); !errors.Is(err, fleet.ErrWrongType) {
			t.Fatalf("Pop on a string: %v", err)
		}
		if _, err := w.Peek(c, 1); !errors.Is(err, fleet.ErrWrongType) {
			t.Fatalf("Peek on a string: %v", err)
		}
		if _, err := w.Len(c); !errors.Is(err, fleet.ErrWrongType) {
			t.Fatalf("Len on a string: %v", err)
		}
		if v, ok := e.get(t, key); !ok || v != "v" {
			t.Fatalf("the string changed: %q %v", v, ok)
		}

		f2 := openOn(t, tg, e.Prefix)
		s2 := fleet.NewStream[int](f2, "closed", fleet.StreamOptions{})
		_ = f2.Close()
		if _, err := s2.Push(c, 1); !errors.Is(err, fleet.ErrClosed) {
			t.Fatalf("Push after Close: %v", err)
		}
	})
}

func TestStreamUndecodableMembers(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		s := fleet.NewStream[scraped](e.F, "mixed", fleet.StreamOptions{})
		key := e.Prefix + "stream:mixed"
		now := float64(time.Now().Unix())
		// Written by something else: not JSON, bare JSON without the envelope
		// (read as data, as the documented schema only says "member = JSON"),
		// and an envelope whose data is not a scraped.
		e.do(t, e.Raw.B().Zadd().Key(key).ScoreMember().
			ScoreMember(now-3, "not json").
			ScoreMember(now-2, `{"url":"x","code":1}`).
			ScoreMember(now-1, `{"id":"i","ts":1,"data":"a string"}`).Build())
		if _, err := s.Push(c, scraped{"ok", 200}); err != nil {
			t.Fatal(err)
		}
		for _, op := range []struct {
			name string
			fn   func(context.Context, int) ([]fleet.StreamEntry[scraped], error)
		}{{"Peek", s.Peek}, {"Pop", s.Pop}} {
			got, err := op.fn(c, 10)
			if !errors.Is(err, fleet.ErrDecode) {
				t.Fatalf("%s: err %v, want ErrDecode", op.name, err)
			}
			var de *fleet.StreamDecodeError
			if !errors.As(err, &de) || len(de.Members) != 2 || de.Members[0].Raw != "not json" ||
				de.Members[1].Score != now-1 || de.Stream != "mixed" {
				t.Fatalf("%s: %#v", op.name, err)
			}
			if !slices.Equal(datas(got), []scraped{{"x", 1}, {"ok", 200}}) {
				t.Fatalf("%s: decoded %v", op.name, datas(got))
			}
			if got[0].ID != "" || got[0].Time.Unix() != int64(now-2) {
				t.Fatalf("%s: bare member read as id %q time %v", op.name, got[0].ID, got[0].Time)
			}
		}
		if n, _ := s.Len(c); n != 0 {
			t.Fatalf("Pop left %d members", n)
		}
	})
}

func TestStreamEmit(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		s := fleet.NewStream[scraped](e.F, "emitter", fleet.StreamOptions{Envelope: true})
		sub, err := fleet.Subscribe[fleet.StreamEntry[scraped]](c, e.F, "emitter.emit", fleet.SubscribeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		raw, err := fleet.Subscribe[json.RawMessage](c, e.F, "emitter.emit", fleet.SubscribeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		id, err := s.Emit(c, scraped{"u", 204})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-sub.C():
			if got.ID != id || got.Data != (scraped{"u", 204}) || time.Since(got.Time) > time.Minute {
				t.Fatalf("event = %+v, want id %s", got, id)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no emit event")
		}
		// The event is the stream member, byte for byte.
		zs := e.zrange(t, e.Prefix+"stream:emitter")
		select {
		case got := <-raw.C():
			if len(zs) != 1 || string(got) != zs[0].Member {
				t.Fatalf("event %s, member %v", got, zs)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no raw emit event")
		}
	})
}

// serverTime is the server's clock, read raw (TIME).
func (e *env) serverTime(t *testing.T) time.Time {
	t.Helper()
	r, err := e.Raw.Do(context.Background(), e.Raw.B().Time().Build()).AsStrSlice()
	if err != nil || len(r) != 2 {
		t.Fatalf("TIME: %v %v", r, err)
	}
	sec, _ := strconv.ParseInt(r[0], 10, 64)
	usec, _ := strconv.ParseInt(r[1], 10, 64)
	return time.Unix(sec, usec*1000)
}

// A pusher whose clock is 2 h fast (or 2 h slow) neither trims the fresh
// entries of others nor has its own trimmed: scores and the MaxAge cutoff
// come from the server's clock.
func TestStreamSkewedPusherUsesServerClock(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		honest := fleet.NewStream[string](e.F, "skew", fleet.StreamOptions{Envelope: true})
		fast := fleet.NewStream[string](openOn(t, tg, e.Prefix), "skew", fleet.StreamOptions{Envelope: true})
		fleet.SetStreamClock(fast, func() time.Time { return time.Now().Add(2 * time.Hour) })
		slow := fleet.NewStream[string](openOn(t, tg, e.Prefix), "skew", fleet.StreamOptions{Envelope: true})
		fleet.SetStreamClock(slow, func() time.Time { return time.Now().Add(-2 * time.Hour) })

		before := e.serverTime(t).Truncate(time.Millisecond)
		var want []string
		for i := range 10 {
			v := fmt.Sprint("fresh", i)
			if _, err := honest.Push(c, v); err != nil {
				t.Fatal(err)
			}
			want = append(want, v)
		}
		if _, err := fast.Push(c, "fast"); err != nil {
			t.Fatal(err)
		}
		if _, err := slow.Push(c, "slow"); err != nil {
			t.Fatal(err)
		}
		if _, err := honest.Push(c, "last"); err != nil {
			t.Fatal(err)
		}
		want = append(want, "fast", "slow", "last")
		after := e.serverTime(t)

		got, err := honest.Peek(c, 100)
		if err != nil || !slices.Equal(datas(got), want) {
			t.Fatalf("Peek = %v, %v; want %v", datas(got), err, want)
		}
		zs := e.zrange(t, e.Prefix+"stream:skew")
		if len(zs) != len(want) {
			t.Fatalf("%d members, want %d", len(zs), len(want))
		}
		for i, z := range zs {
			m := envelopeRE.FindStringSubmatch(z.Member)
			if m == nil {
				t.Fatalf("member %d = %s, not the envelope", i, z.Member)
			}
			ts, _ := strconv.ParseFloat(m[2], 64)
			at := time.UnixMilli(int64(z.Score*1000 + 0.5))
			if ts != z.Score || at.Before(before) || at.After(after) {
				t.Fatalf("member %d (%s): ts %v, score %v: not the server's time in [%v, %v]", i, m[3], ts, z.Score, before, after)
			}
			if got[i].Time != at {
				t.Fatalf("entry %d: Time %v, score %v", i, got[i].Time, at)
			}
		}
	})
}

// TestStreamBareMembers: by default a member is the output's JSON, bare, as
// the documented schema says; equal outputs are one member; the emit event
// is the same JSON; Peek and Pop read bare members and envelopes alike.
func TestStreamBareMembers(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		s := fleet.NewStream[scraped](e.F, "bare", fleet.StreamOptions{})
		raw, err := fleet.Subscribe[json.RawMessage](c, e.F, "bare.emit", fleet.SubscribeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		typed, err := fleet.Subscribe[fleet.StreamEntry[scraped]](c, e.F, "bare.emit", fleet.SubscribeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer typed.Close()
		before := e.serverTime(t).Truncate(time.Microsecond)
		for _, v := range []scraped{{"c", 200}, {"a", 200}} {
			if id, err := s.Push(c, v); err != nil || id != "" {
				t.Fatalf("Push = %q, %v; want no id", id, err)
			}
		}
		if id, err := s.Emit(c, scraped{"a", 200}); err != nil || id != "" { // equal to the second: one member
			t.Fatalf("Emit = %q, %v", id, err)
		}
		after := e.serverTime(t)
		key := e.Prefix + "stream:bare"
		zs := e.zrange(t, key)
		want := []string{`{"url":"c","code":200}`, `{"url":"a","code":200}`}
		if len(zs) != 2 || zs[0].Member != want[0] || zs[1].Member != want[1] {
			t.Fatalf("members = %+v, want %q", zs, want)
		}
		for i, z := range zs {
			at := time.UnixMicro(int64(z.Score*1e6 + 0.5))
			if at.Before(before) || at.After(after) {
				t.Fatalf("member %d score %v: not the server's time in [%v, %v]", i, z.Score, before, after)
			}
		}
		if zs[1].Score <= zs[0].Score {
			t.Fatalf("the re-pushed member kept its old score: %+v", zs)
		}
		select {
		case got := <-raw.C():
			if string(got) != want[1] {
				t.Fatalf("emit event %s, want %s", got, want[1])
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no emit event")
		}
		select {
		case got := <-typed.C():
			if got.ID != "" || !got.Time.IsZero() || got.Data != (scraped{"a", 200}) {
				t.Fatalf("typed emit event %+v", got)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no typed emit event")
		}

		// An envelope written by a Stream with Envelope, between bare ones.
		wrapped := fleet.NewStream[scraped](e.F, "bare", fleet.StreamOptions{Envelope: true})
		id, err := wrapped.Push(c, scraped{"w", 201})
		if err != nil || id == "" {
			t.Fatalf("wrapped Push = %q, %v", id, err)
		}
		if _, err := s.Push(c, scraped{"z", 202}); err != nil {
			t.Fatal(err)
		}
		// An envelope's score is to the millisecond, so it may sort before
		// a bare member of the same millisecond: expect the zset's order.
		zs = e.zrange(t, key)
		var wantData []scraped
		for _, z := range zs {
			var d scraped
			if m := envelopeRE.FindStringSubmatch(z.Member); m != nil {
				_ = json.Unmarshal([]byte(m[3]), &d)
			} else {
				_ = json.Unmarshal([]byte(z.Member), &d)
			}
			wantData = append(wantData, d)
		}
		peek, err := s.Peek(c, 10)
		if err != nil || len(zs) != 4 || !slices.Equal(datas(peek), wantData) {
			t.Fatalf("Peek = %+v, %v; want %+v", datas(peek), err, wantData)
		}
		for i, p := range peek {
			wantID := ""
			if p.Data == (scraped{"w", 201}) {
				wantID = id
			}
			if p.ID != wantID || !p.Time.Equal(time.UnixMicro(int64(zs[i].Score*1e6+0.5))) {
				t.Fatalf("entry %d = %q at %v; want id %q at score %v", i, p.ID, p.Time, wantID, zs[i].Score)
			}
		}
		pop, err := s.Pop(c, 10)
		if err != nil || !slices.Equal(datas(pop), datas(peek)) {
			t.Fatalf("Pop = %+v, %v", pop, err)
		}
		if got := e.keys(t); len(got) != 0 {
			t.Fatalf("keys left: %v", got)
		}
	})
}
