package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet/internal/fault"
	"github.com/fleet-go/fleet/internal/redistest"
)

// argvTags returns the argv tags of struct v's fields, in order.
func argvTags(t *testing.T, v any) []string {
	t.Helper()
	rt := reflect.TypeOf(v)
	var tags []string
	for i := range rt.NumField() {
		if tag, ok := rt.Field(i).Tag.Lookup("argv"); ok {
			tags = append(tags, tag)
		}
	}
	if len(tags) == 0 {
		t.Fatalf("%s has no argv tags", rt)
	}
	return tags
}

// headerArgv returns the ARGV positions that the header of script (its
// leading comment) describes on lines of their own, as re's first group
// finds them.
func headerArgv(t *testing.T, script string, re *regexp.Regexp) []string {
	t.Helper()
	var out []string
	for _, l := range strings.Split(readScript(t, script), "\n") {
		if !strings.HasPrefix(l, "--") {
			break
		}
		if m := re.FindStringSubmatch(l); m != nil {
			out = append(out, m[1])
		}
	}
	return out
}

var (
	argvLine   = regexp.MustCompile(`^-- ARGV\[(\d+)\]\s`)
	argvRange  = regexp.MustCompile(`^-- ARGV\[(\d+\.\.\d*)\]\s`)
	endArgLine = regexp.MustCompile(`^--\s+(i(?:\+\d+)?)\s`)
)

// TestQueueProtocolHeaders holds each ARGV struct of protocol.go to
// the header of its script: the same positions, in the same order, and an
// encoder that spells exactly one value per position.
func TestQueueProtocolHeaders(t *testing.T) {
	check := func(name string, tags, header []string, encoded int) {
		t.Helper()
		if !slices.Equal(tags, header) {
			t.Errorf("%s: the struct's argv tags %q, the header's ARGV %q", name, tags, header)
		}
		if encoded != len(tags) {
			t.Errorf("%s: the encoder spells %d values for %d positions", name, encoded, len(tags))
		}
	}
	check("reserveArgs / queue_reserve.lua", argvTags(t, reserveArgs{}), headerArgv(t, "queue_reserve.lua", argvLine),
		len(reserveArgs{}.appendTo(nil)))
	if r := headerArgv(t, "queue_reserve.lua", argvRange); !slices.Equal(r, []string{"7.."}) {
		t.Errorf("queue_reserve.lua: the acks should follow ARGV[1..6] at ARGV[7..], the header has ranges %q", r)
	}
	check("extendArgs / queue_extend.lua", argvTags(t, extendArgs{}), headerArgv(t, "queue_extend.lua", argvLine),
		len(extendArgs{}.args()))
	if r := headerArgv(t, "queue_end.lua", argvRange); !slices.Equal(r, []string{"1..4", "5.."}) {
		t.Errorf("queue_end.lua: want the policy at ARGV[1..4] and the ends from ARGV[5..], the header has %q", r)
	}
	pol := argvTags(t, endPolicy{})
	check("endPolicy / queue_end.lua", pol, []string{"1", "2", "3", "4"}, len(endPolicy{}.appendTo(nil)))
	end := argvTags(t, endArgs{})
	check("endArgs / queue_end.lua", end, headerArgv(t, "queue_end.lua", endArgLine), len((&endArgs{}).appendTo(nil)))
	if len(end) != endArity || !strings.Contains(readScript(t, "queue_end.lua"), "an end per "+strconv.Itoa(endArity)+" arguments") {
		t.Errorf("endArity %d: the struct has %d positions; the header must say \"an end per %d arguments\"", endArity, len(end), endArity)
	}

	// ack_all's tuples, as lib_queue.lua's comment spells them.
	lib := readScript(t, "lib_queue.lua")
	tuple := func(re string) int {
		m := regexp.MustCompile(re).FindStringSubmatch(strings.ReplaceAll(lib, "\n--- ", " "))
		if m == nil {
			t.Fatalf("lib_queue.lua: no %s", re)
		}
		return len(strings.Split(m[1], ","))
	}
	check("ackPlain / ack_all", argvTags(t, ackPlain{}), numbered(tuple(`P plain acks as triples \(([^)]*)\)`)), len(ackPlain{}.appendTo(nil)))
	check("ackKept / ack_all", argvTags(t, ackKept{}), numbered(tuple(`as 10-tuples \(([^)]*)\)`)), len(ackKept{}.appendTo(nil)))

	// The reply's head: the elements before the first task.
	m := regexp.MustCompile(`returns\s+\{([^}]*)\}`).FindStringSubmatch(strings.ReplaceAll(readScript(t, "queue_reserve.lua"), "\n--", ""))
	if m == nil {
		t.Fatal("queue_reserve.lua: no returns {...} in the header")
	}
	head := strings.Split(m[1], ",")
	if i := slices.IndexFunc(head, func(s string) bool { return strings.TrimSpace(s) == "id1" }); i != reserveReplyHead {
		t.Errorf("queue_reserve.lua returns %q: id1 at %d, reserveReplyHead is %d", m[1], i, reserveReplyHead)
	}
}

// numbered is "1" .. "n".
func numbered(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = strconv.Itoa(i + 1)
	}
	return out
}

// TestQueueProtocolEncode pins the spelling of each ARGV struct.
func TestQueueProtocolEncode(t *testing.T) {
	got := reserveArgs{n: 3, lease: 1500 * time.Millisecond, prefix: "w/ab.", move: 1000, deadMax: 7, flags: flagLeft}.appendTo(nil)
	if want := []string{"3", "1500", "w/ab.", "1000", "7", "1"}; !slices.Equal(got, want) {
		t.Errorf("reserveArgs: %q, want %q", got, want)
	}
	e := &endArgs{mode: endSnooze, id: "t1", token: "k.1", dedup: "d", entry: "", body: "ignored", after: 2 * time.Second,
		attempts: 2, jitter: 0.5, maxAttempts: 4, group: "g", flags: "t60000"}
	if got, want := e.appendTo(nil), []string{"snooze", "t1", "k.1", "d", "", "2000", "2", "0.500000", "4", "g", "t60000", ""}; !slices.Equal(got, want) {
		t.Errorf("endArgs (snooze): %q, want %q", got, want)
	}
	e.mode, e.body = endNack, `{"id":"t1"}`
	if got := e.appendTo(nil); got[5] != `{"id":"t1"}` || got[11] != "" {
		t.Errorf("endArgs (nack): body %q, retry %q", got[5], got[11])
	}
	e.retry, e.chosen = 0, true // a delay the caller chose: 0 too is one
	if got := e.appendTo(nil); got[11] != "0" {
		t.Errorf("endArgs (nack after 0): retry %q", got[11])
	}
	if got, want := (ackKept{id: "a", token: "b", unique: 60000, retention: time.Hour, result: "1", attempts: 2, flags: "lp", log: `10:{"attempt":1}`}).appendTo(nil),
		[]string{"a", "b", "", "60000", "3600000", "1", "2", "", "lp", `10:{"attempt":1}`}; !slices.Equal(got, want) {
		t.Errorf("ackKept: %q, want %q", got, want)
	}
}

// TestQueueProtocolReplies reads replies that a real server makes (a
// script that returns them) into reserveReply, and refuses malformed ones.
func TestQueueProtocolReplies(t *testing.T) {
	c := redistest.Client(t, redistest.Targets(t)[0])
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	read := func(lua string) (reserveReply, error) {
		t.Helper()
		raw, err := c.Do(ctx, c.B().Eval().Script(lua).Numkeys(0).Build()).ToArray()
		if err != nil {
			t.Fatalf("%s: %v", lua, err)
		}
		return readReserveReply(raw)
	}
	r, err := read(`return {'1700000000123', 5, '1700000001.5', '1700000000200', '10', '42', 'a', 'tok.1', '{"id":"a"}', 'b', 'tok.2', '{"id":"b"}'}`)
	if err != nil {
		t.Fatal(err)
	}
	var tasks []takenTask
	for i := range r.tasks() {
		tasks = append(tasks, r.task(i))
	}
	r.taken = nil
	want := reserveReply{now: 1700000000123, left: 5, NextReady: "1700000001.5", wake: "1700000000200", acked: "10", signal: 42, hasSignal: true}
	if !reflect.DeepEqual(r, want) {
		t.Errorf("got %+v\nwant %+v", r, want)
	}
	if wantTasks := []takenTask{{"a", "tok.1", `{"id":"a"}`}, {"b", "tok.2", `{"id":"b"}`}}; !reflect.DeepEqual(tasks, wantTasks) {
		t.Errorf("tasks %+v, want %+v", tasks, wantTasks)
	}
	if r.drained() || r.capped() || !r.permits() || r.failure() != nil {
		t.Errorf("left 5: drained %v capped %v permits %v failure %v", r.drained(), r.capped(), r.permits(), r.failure())
	}

	r, err = read(`return {'0', 1, '-', '', '1', '0', 'WRONGTYPE Operation against a key holding the wrong kind of value'}`)
	if err != nil || r.acked != "1" || !errors.Is(r.failure(), fault.WrongType) {
		t.Errorf("a take that failed after its Acks: %+v, %v, failure %v", r, err, r.failure())
	}
	for _, bad := range []string{`return {'1', 0, '', '', '', '0', 'a', 'b'}`, `return {'1', 0, ''}`} {
		if _, err := read(bad); err == nil || !strings.Contains(err.Error(), "unexpected reply") {
			t.Errorf("%s: %v, want an unexpected reply", bad, err)
		}
	}
}

// readScript reads scripts/<name>, where the root keeps the Lua files.
func readScript(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "scripts", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
