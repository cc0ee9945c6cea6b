package fleet_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet"
)

// job is the payload of the queue tests.
type job struct {
	URL string `json:"url" validate:"required,url"`
	N   int    `json:"n" validate:"gte=0,lte=1000"`
}

// qkeys spells the keys of queue name in the test's layout.
type qkeys struct {
	Pending, Processing, Body, Lease, Scheduled, Dead, Dedup, Policy, Call, Registry string
	// The keys of priorities, groups and GlobalConcurrency; Group, GroupRun
	// and GroupRate are prefixes of a group's name.
	Prio, Groups, GroupState, GroupBlocked, GroupLimits, GroupPaused, Running, Signal, GroupPending string
	Group, GroupRun, GroupRate                                                                      string
}

func (e *env) qk(name string) qkeys {
	base := e.key("fleet:queue:"+name, "fleet:queue:{"+name+"}")
	return qkeys{
		Pending:    base,
		Processing: base + ":processing",
		Body:       base + ":processing:body",
		Lease:      base + ":processing:lease",
		Scheduled:  base + ":scheduled",
		Dead:       base + ":dead",
		Dedup:      base + ":dedup",
		Policy:     base + ":policy",
		Call:       base + ":call:",
		Registry:   e.Prefix + "fleet:queues",

		Prio:         base + ":prio",
		Groups:       base + ":groups",
		GroupState:   base + ":gstate",
		GroupBlocked: base + ":gblocked",
		GroupLimits:  base + ":glimits",
		GroupPaused:  base + ":gpaused",
		Running:      base + ":running",
		Signal:       base + ":signal",
		GroupPending: base + ":gpending",
		Group:        base + ":g:",
		GroupRun:     base + ":grun:",
		GroupRate:    base + ":grate:",
	}
}

// dump reads every key the test left in Redis, as key -> readable content
// (type-prefixed; lists in order, hashes and sets sorted, zsets by score).
func (e *env) dump(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	rc := e.compat()
	bg := context.Background()
	for _, k := range e.keys(t) {
		typ := rc.Type(bg, k).Val()
		var l []string
		switch typ {
		case "string":
			l = []string{rc.Get(bg, k).Val()}
		case "list":
			l = rc.LRange(bg, k, 0, -1).Val()
		case "set":
			l = slices.Sorted(slices.Values(rc.SMembers(bg, k).Val()))
		case "hash":
			for f, x := range rc.HGetAll(bg, k).Val() {
				l = append(l, f+"="+x)
			}
			slices.Sort(l)
		case "zset":
			for _, z := range rc.ZRangeWithScores(bg, k, 0, -1).Val() {
				l = append(l, z.Member+"@"+strconv.FormatFloat(z.Score, 'f', 3, 64))
			}
		}
		out[k] = typ + ":" + strings.Join(l, "\n")
	}
	return out
}

func (e *env) lrange(t *testing.T, key string) []string {
	t.Helper()
	l, err := e.do(t, e.Raw.B().Lrange().Key(key).Start(0).Stop(-1).Build()).AsStrSlice()
	if err != nil && !rueidis.IsRedisNil(err) {
		t.Fatal(err)
	}
	return l
}

func (e *env) hgetall(t *testing.T, key string) map[string]string {
	t.Helper()
	m, err := e.compat().HGetAll(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func (e *env) zscores(t *testing.T, key string) []rueidis.ZScore {
	t.Helper()
	zs, err := e.do(t, e.Raw.B().Zrange().Key(key).Min("0").Max("-1").Withscores().Build()).AsZScores()
	if err != nil {
		t.Fatal(err)
	}
	return zs
}

// serverNow reads the server's clock.
func (e *env) serverNow(t *testing.T) time.Time {
	t.Helper()
	r, err := e.Raw.Do(context.Background(), e.Raw.B().Time().Build()).AsStrSlice()
	if err != nil || len(r) != 2 {
		t.Fatalf("TIME: %v %v", r, err)
	}
	s, _ := strconv.ParseInt(r[0], 10, 64)
	us, _ := strconv.ParseInt(r[1], 10, 64)
	return time.Unix(s, us*1000)
}

// near fails unless score (unix seconds) is within tol of want.
func near(t *testing.T, what string, score float64, want time.Time, tol time.Duration) {
	t.Helper()
	got := time.UnixMilli(int64(score * 1000))
	if d := got.Sub(want); d < -tol || d > tol {
		t.Fatalf("%s = %v, want %v ± %v (off by %v)", what, got, want, tol, d)
	}
}

// decodeMap decodes a JSON object for field-by-field assertions.
func decodeMap(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("not a JSON object: %q: %v", s, err)
	}
	return m
}

func fastQueue(f *fleet.Fleet, name string, lease time.Duration) *fleet.Queue[job] {
	return fleet.NewQueue[job](f, name, fleet.QueueOptions{
		Lease: lease, BackoffBase: 5 * time.Millisecond, BackoffMax: 20 * time.Millisecond, MaxAttempts: 100,
	})
}

func jobN(i int) job { return job{URL: fmt.Sprintf("https://example.com/%d", i), N: i % 1000} }

// reserveAll reserves n tasks of q, calling Reserve again while it took
// fewer: a Reserve whose reply came too late to use its lease (a loaded
// machine, a short test lease) hands its tasks back and returns none.
func reserveAll[T any](t *testing.T, q *fleet.Queue[T], n int) []*fleet.Task[T] {
	t.Helper()
	var got []*fleet.Task[T]
	deadline := time.Now().Add(30 * time.Second)
	for len(got) < n {
		ts, err := q.Reserve(ctx(t), n-len(got), time.Second)
		if err != nil {
			t.Fatalf("reserve: %v", err)
		}
		got = append(got, ts...)
		if time.Now().After(deadline) {
			t.Fatalf("reserved %d of %d tasks in 30 s", len(got), n)
		}
	}
	return got
}

// counted returns st without its Latency, once it is checked: 0 when
// nothing is pending, else under a minute (the tests' tasks are fresh).
func counted(t *testing.T, st fleet.QueueStats) fleet.QueueStats {
	t.Helper()
	if st.Latency < 0 || st.Latency >= time.Minute || (st.Pending == 0 && st.Latency != 0) {
		t.Errorf("latency %v of %+v", st.Latency, st)
	}
	st.Latency = 0
	return st
}
