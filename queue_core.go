package fleet

import (
	"strconv"
	"strings"

	"github.com/fleet-go/fleet/internal/keys"
)

// queueScriptKeys are the keys of a queue (or of one shard of it) in the
// one order that every queue script takes them, KEYS[1..8], with the names
// the scripts know them by (linked in from here: queueKeyBlock). A script's
// own keys (a call's tombstone, a task's unique or result key) come after.
var queueScriptKeys = [...]struct {
	lua string
	key func(k *keys.Queue) string
}{
	{"PENDING", func(k *keys.Queue) string { return k.Pending }},       // list: pending bodies
	{"PROCESSING", func(k *keys.Queue) string { return k.Processing }}, // zset: id -> deadline (unix s)
	{"BODY", func(k *keys.Queue) string { return k.Body }},             // hash: id -> body
	{"LEASE", func(k *keys.Queue) string { return k.Lease }},           // hash: id -> "token deadline_ms[ c]" (derived)
	{"SCHEDULED", func(k *keys.Queue) string { return k.Scheduled }},   // zset: body -> ready_at (unix s)
	{"DEAD", func(k *keys.Queue) string { return k.Dead }},             // list: dead letters
	{"DEDUP", func(k *keys.Queue) string { return k.Dedup }},           // hash: dedup key -> id (derived)
	{"POLICY", func(k *keys.Queue) string { return k.Policy }},         // string: the stored policy (derived)
}

// scriptKeys returns k's keys in queueScriptKeys' order, then extra.
func scriptKeys(k *keys.Queue, extra ...string) []string {
	out := make([]string, len(queueScriptKeys), len(queueScriptKeys)+len(extra))
	for i, s := range queueScriptKeys {
		out[i] = s.key(k)
	}
	return append(out, extra...)
}

// queueKeyBlock is the library block that names KEYS[1..8] of a queue
// script.
func queueKeyBlock() string {
	names, refs := make([]string, len(queueScriptKeys)), make([]string, len(queueScriptKeys))
	for i, s := range queueScriptKeys {
		names[i], refs[i] = s.lua, "KEYS["+strconv.Itoa(i+1)+"]"
	}
	return "-- The queue's keys, KEYS[1..8] of every queue script (queue_core.go).\n" +
		"local " + strings.Join(names, ", ") + " = " + strings.Join(refs, ", ")
}

// endCode is what an end-of-reservation step answers (lib_queue.lua): its
// name in the scripts is endCodeNames'.
type endCode int64

const (
	// endLost: the reservation is not the caller's (its lease ran out, it
	// was re-queued, it already ended): nothing changed.
	endLost endCode = iota
	// endDone: done as asked (acked, retried, released, snoozed, extended).
	endDone
	// endBuried: moved to the dead letters.
	endBuried
	// endCanceled: moved to the dead letters as cancelled (Queue.Cancel
	// asked the task to stop); for an extension, extended all the same.
	endCanceled
	// endNeedEntry: the task is cancelled, and the script needs its
	// cancelled dead letter to bury it: call again with it. Nothing changed.
	endNeedEntry
)

var endCodeNames = [...]string{endLost: "LOST", endDone: "DONE", endBuried: "BURIED", endCanceled: "CANCELED", endNeedEntry: "NEED_ENTRY"}

// endCodeBlock is the library block that names the end codes.
func endCodeBlock() string {
	vals := make([]string, len(endCodeNames))
	for i := range endCodeNames {
		vals[i] = strconv.Itoa(i)
	}
	return "-- What the end-of-reservation steps answer (endCode, queue_core.go).\n" +
		"local " + strings.Join(endCodeNames[:], ", ") + " = " + strings.Join(vals, ", ")
}
