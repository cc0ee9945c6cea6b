package engine

// The typed protocol of the queue scripts that every task's life goes
// through: each script's ARGV as a Go struct that spells it, and each
// reply as a Go struct read from it, here and nowhere else, with the
// meaning the script's header gives (queue_protocol_test.go checks each
// struct's argv tags against the header's ARGV lines). The order of the
// keys and the end codes are keys.go's, generated into the scripts.

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet/internal/argv"
	"github.com/fleet-go/fleet/internal/fault"
)

// reserveArgs is ARGV[1..6] of queue_reserve.lua; the acks to make first
// (ackArgs) follow them.
type reserveArgs struct {
	n       int           `argv:"1"` // tasks to take at most (0 only acks)
	lease   time.Duration `argv:"2"` // the tasks' lease
	prefix  string        `argv:"3"` // the call's token prefix: the i-th task's token is prefix..i
	move    int           `argv:"4"` // due scheduled tasks to move at most; 0 skips the look at :scheduled
	deadMax int           `argv:"5"` // the dead letters' bound when no policy is stored (0: none)
	flags   int           `argv:"6"` // flagLeft, flagUncapped
}

// The flags of reserveArgs.
const (
	flagLeft     = 1 // learn whether tasks are left pending (Req.WantLeft)
	flagUncapped = 2 // the caller holds fleet-wide permits (permit.go): the stored global_concurrency is not applied
)

// appendTo appends the ARGV that a spells to args.
func (a reserveArgs) appendTo(args []string) []string {
	return append(args, strconv.Itoa(a.n), argv.Millis(a.lease), a.prefix, strconv.Itoa(a.move), strconv.Itoa(a.deadMax), strconv.Itoa(a.flags))
}

// reserveReply is what queue_reserve.lua answers: {now_ms, left,
// next_ready, wake, acked, signal, id1, token1, body1, ...}, or, when the
// acks were done and the take then failed, {'0', 1, '-', <empty>, acked,
// '0', error}.
type reserveReply struct {
	now int64 // the server's clock when the script ran, unix ms
	// left is 0 when nothing is left pending, 1 when something is or may
	// be, 2 when the queue's GlobalConcurrency is reached; plus 4 when the
	// tasks taken hold GlobalConcurrency permits (see drained, capped,
	// permits).
	left int64
	// NextReady is the earliest scheduled ready_at (unix s) when none was
	// due, "" when none is scheduled, "-" when :scheduled was not looked at.
	NextReady string
	// wake is when (server ms) a group at its limit, or the
	// GlobalConcurrency, may let a task go next; "" when nothing waits on
	// a limit.
	wake string
	// acked has a code per ack, in ackArgs' order ("" without acks).
	acked string
	// signal is the queue's signal (:signal), when the reply had one that
	// reads as a number (hasSignal).
	signal    int64
	hasSignal bool
	// taken is the tasks' part of the reply, id, token and body for each
	// (tasks, task): read where it is used, so that a reserve allocates
	// nothing for it.
	taken []rueidis.RedisMessage
	// failed is the take's error when the acks were done and the take then
	// failed (a wrong-type key: it changed nothing); "" otherwise.
	failed string
}

// takenTask is one task of a reserve's reply.
type takenTask struct{ id, token, body string }

// reserveReplyHead is how many elements of a reserve's reply come before
// its tasks.
const reserveReplyHead = 6

// readReserveReply reads a reply of queue_reserve.lua. A reply whose acked
// could be read is returned with it even when the rest is malformed, so
// that the caller learns the acks' outcome.
func readReserveReply(reply []rueidis.RedisMessage) (reserveReply, error) {
	var r reserveReply
	if len(reply) < reserveReplyHead {
		return r, fault.UnexpectedReply("reserve", len(reply))
	}
	r.acked, _ = reply[4].ToString()
	switch (len(reply) - reserveReplyHead) % 3 {
	case 0:
	case 1:
		// The acks were done, and then the take failed.
		r.failed, _ = reply[len(reply)-1].ToString()
		if r.failed == "" {
			r.failed = "reserve failed after its acks"
		}
		return r, nil
	default:
		return r, fault.UnexpectedReply("reserve", len(reply))
	}
	nowStr, _ := reply[0].ToString()
	r.now, _ = strconv.ParseInt(nowStr, 10, 64)
	r.left, _ = reply[1].AsInt64()
	r.NextReady, _ = reply[2].ToString()
	r.wake, _ = reply[3].ToString()
	if sig, err := reply[5].AsInt64(); err == nil {
		r.signal, r.hasSignal = sig, true
	}
	r.taken = reply[reserveReplyHead:]
	return r, nil
}

// tasks is how many tasks the reply took.
func (r *reserveReply) tasks() int { return len(r.taken) / 3 }

// task returns the i-th task the reply took.
func (r *reserveReply) task(i int) takenTask {
	var t takenTask
	t.id, _ = r.taken[3*i].ToString()
	t.token, _ = r.taken[3*i+1].ToString()
	t.body, _ = r.taken[3*i+2].ToString()
	return t
}

// failure is the error of a reply whose take failed after its acks, nil
// for one whose did not.
func (r *reserveReply) failure() error {
	switch {
	case r.failed == "":
		return nil
	case strings.HasPrefix(r.failed, "WRONGTYPE"):
		return fmt.Errorf("%w: %s", fault.WrongType, r.failed)
	}
	return errors.New(r.failed)
}

// drained reports that nothing was left pending (asked for with WantLeft).
func (r *reserveReply) drained() bool { return r.left&3 != 1 }

// capped reports that GlobalConcurrency is reached.
func (r *reserveReply) capped() bool { return r.left&3 == 2 }

// permits reports that the tasks taken hold GlobalConcurrency permits.
func (r *reserveReply) permits() bool { return r.left&4 != 0 }

// ackArgs appends the ARGV of acks (ack_all in lib_queue.lua: ARGV[7..] of
// queue_reserve.lua, the whole ARGV of queue_ack.lua) to args: how many
// plain acks, the plain acks as triples (ackPlain), then those that keep
// something, belong to a group or pass on their end (flowFlags) as
// 10-tuples (ackKept), whose unique and result keys it returns (keep).
// order maps each ack of the reply to its place in acks.
func ackArgs(acks []*Reservation, args []string) (keep, _ []string, order []int) {
	at := len(args)
	args = append(args, "")
	order = make([]int, 0, len(acks))
	for i, r := range acks {
		if !r.keeps() {
			args = ackPlain{id: r.id, token: r.token, dedup: r.dedup}.appendTo(args)
			order = append(order, i)
		}
	}
	args[at] = strconv.Itoa(len(order))
	for i, r := range acks {
		if !r.keeps() {
			continue
		}
		a := ackKept{id: r.id, token: r.token, dedup: r.dedup, retention: r.retention(), attempts: r.attempts, group: r.group, flags: r.ackFlags()}
		if l := r.log.Load(); l != nil {
			a.log = *l
		}
		if r.dedup != "" && r.unique > 0 {
			a.unique = r.unique
		}
		if p := r.result.Load(); p != nil {
			a.result = string(*p)
		}
		args = a.appendTo(args)
		keep = append(keep, r.core.key.Unique+r.dedup, r.core.key.Result+r.id)
		order = append(order, i)
	}
	return keep, args, order
}

// ackPlain is a plain ack of ack_all: a task that keeps nothing, belongs to
// no group, holds no permit and passes on no end.
type ackPlain struct {
	id    string `argv:"1"`
	token string `argv:"2"` // the caller's lease token
	dedup string `argv:"3"` // the task's dedup key, or ""
}

func (a ackPlain) appendTo(args []string) []string { return append(args, a.id, a.token, a.dedup) }

// ackKept is an ack of ack_all that does more than a plain one
// (reservation.keeps).
type ackKept struct {
	id        string        `argv:"1"`
	token     string        `argv:"2"`
	dedup     string        `argv:"3"`
	unique    int64         `argv:"4"` // the unique window in ms, 0: none
	retention time.Duration `argv:"5"` // how long the record is kept, 0: not kept
	result    string        `argv:"6"` // the result's JSON, or ""
	attempts  int           `argv:"7"`
	group     string        `argv:"8"`
	flags     string        `argv:"9"`  // ackFlags: "m" (drop from the metadata index), "l" (the log), then flowFlags
	log       string        `argv:"10"` // the run's log entry as "<runs>:<entry>" (SetLog), or ""
}

func (a ackKept) appendTo(args []string) []string {
	return append(args, a.id, a.token, a.dedup, strconv.FormatInt(a.unique, 10), argv.Millis(a.retention), a.result, strconv.Itoa(a.attempts), a.group, a.flags, a.log)
}

// ackCodes reads the acks' codes of a reply, one digit per ack in the
// order of ackArgs, into the order of the acks.
func ackCodes(acked string, order []int) ([]EndCode, error) {
	if len(acked) != len(order) {
		return nil, fault.UnexpectedReply("ack", len(acked))
	}
	codes := make([]EndCode, len(order))
	for i, j := range order {
		codes[j] = EndCode(acked[i] - '0')
	}
	return codes, nil
}

// endPolicy is ARGV[1..4] of queue_end.lua: the caller's policy, for a
// queue with no stored policy.
type endPolicy struct {
	maxAttempts int           `argv:"1"`
	backoffBase time.Duration `argv:"2"`
	backoffMax  time.Duration `argv:"3"`
	deadMax     int           `argv:"4"` // 0: none
}

func (p endPolicy) appendTo(args []string) []string {
	return append(args, strconv.Itoa(p.maxAttempts), argv.Millis(p.backoffBase), argv.Millis(p.backoffMax), strconv.Itoa(p.deadMax))
}

// endMode is what an end of queue_end.lua does.
type endMode string

const (
	endNack    endMode = "nack"    // an attempt failed: retried after the backoff, or buried past max attempts
	endBury    endMode = "bury"    // dead-lettered at once
	endRelease endMode = "release" // back to the head of the queue, no attempt counted
	endSnooze  endMode = "snooze"  // to :scheduled after a delay, no attempt counted
)

// endArgs is one end of queue_end.lua, ARGV[i..i+11].
type endArgs struct {
	mode  endMode `argv:"i"`
	id    string  `argv:"i+1"`
	token string  `argv:"i+2"` // the caller's lease token
	dedup string  `argv:"i+3"` // the task's dedup key, or ""
	// entry is the task's dead letter should it be cancelled: "" when the
	// caller has not made it (a cancelled task then answers EndNeedEntry,
	// and the caller calls again with it), "-" for body itself (a nack or
	// bury whose cause is a cancel).
	entry string `argv:"i+4"`
	// body is, for nack and bury, the new body (attempts counted, "error"
	// set); for snooze, the delay (after); for release, nothing.
	body        string        `argv:"i+5"`
	after       time.Duration // snooze's delay, spelled in body's place
	attempts    int           `argv:"i+6"` // nack: the attempts as counted in body
	jitter      float64       `argv:"i+7"` // nack: a random number in [0, 1)
	maxAttempts int           `argv:"i+8"` // nack: the task's own (0: the policy's)
	group       string        `argv:"i+9"`
	flags       string        `argv:"i+10"` // flowFlags
	// retry is a nack's delay that the caller chose (NackAfter), when
	// chosen; else the stored policy's backoff applies ("").
	retry  time.Duration `argv:"i+11"`
	chosen bool
	park   bool // snooze: "p" in retry's place (Reservation.Park)
}

// endArity is how many ARGV one end takes.
const endArity = 12

func (e *endArgs) appendTo(args []string) []string {
	body := e.body
	if e.mode == endSnooze {
		body = argv.Millis(e.after)
	}
	retry := ""
	if e.chosen {
		retry = argv.Millis(e.retry)
	} else if e.park && e.mode == endSnooze {
		retry = "p"
	}
	return append(args, string(e.mode), e.id, e.token, e.dedup, e.entry, body, strconv.Itoa(e.attempts),
		strconv.FormatFloat(e.jitter, 'f', 6, 64), strconv.Itoa(e.maxAttempts), e.group, e.flags, retry)
}

// newJitter is a nack's random number for its backoff's jitter.
func newJitter() float64 { return rand.Float64() }

// readEndReply reads queue_end.lua's reply to n ends: a pair {code, n} per
// end, in order; what is read is each end's code.
func readEndReply(reply []int64, n int, mode endMode) ([]EndCode, error) {
	if len(reply) != 2*n {
		return nil, fault.UnexpectedReply(string(mode), len(reply))
	}
	codes := make([]EndCode, n)
	for i := range codes {
		codes[i] = EndCode(reply[2*i])
	}
	return codes, nil
}

// extendArgs is queue_extend.lua's ARGV.
type extendArgs struct {
	id    string        `argv:"1"`
	token string        `argv:"2"` // the caller's lease token
	lease time.Duration `argv:"3"`
}

func (a extendArgs) args() []string { return []string{a.id, a.token, argv.Millis(a.lease)} }

// readExtendReply reads queue_extend.lua's reply, {code, deadline}.
func readExtendReply(reply []int64) (EndCode, error) {
	if len(reply) != 2 {
		return 0, fault.UnexpectedReply("extend", len(reply))
	}
	return EndCode(reply[0]), nil
}
