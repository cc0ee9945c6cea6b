package engine

// The protocol of the queue scripts, written once for Go and Lua: the
// order of the keys every queue script takes, and the codes the end of a
// reservation answers. scripts.go hands both to the script linker
// (internal/script), which links them into the scripts that use them.

import (
	"strconv"
	"strings"
	"time"

	"github.com/fleet-go/fleet/internal/keys"
)

// queueScriptKeys are the keys of a queue (or of one shard of it) in the
// one order that every queue script takes them, KEYS[1..8], with the names
// the scripts know them by (linked in from here: KeyBlock). A script's
// own keys (a call's tombstone, a task's unique or result key) come after.
var queueScriptKeys = [...]struct {
	lua, typ string // the script's name for it; its Redis type
	key      func(k *keys.Queue) string
}{

	{"PENDING", "list", func(k *keys.Queue) string { return k.Pending }}, // pending bodies

	{"PROCESSING", "zset", func(k *keys.Queue) string { return k.Processing }}, // id -> deadline (unix s)

	{"BODY", "hash", func(k *keys.Queue) string { return k.Body }}, // id -> body

	{"LEASE", "hash", func(k *keys.Queue) string { return k.Lease }}, // id -> "token deadline_ms[ c]" (derived)

	{"SCHEDULED", "zset", func(k *keys.Queue) string { return k.Scheduled }}, // body -> ready_at (unix s)

	{"DEAD", "list", func(k *keys.Queue) string { return k.Dead }}, // dead letters

	{"DEDUP", "hash", func(k *keys.Queue) string { return k.Dedup }}, // dedup key -> id (derived)

	{"POLICY", "string", func(k *keys.Queue) string { return k.Policy }}, // the stored policy (derived)

}

// ScriptKeys returns k's keys in queueScriptKeys' order, then extra.
func ScriptKeys(k *keys.Queue, extra ...string) []string {
	out := make([]string, len(queueScriptKeys), len(queueScriptKeys)+len(extra))
	for i, s := range queueScriptKeys {
		out[i] = s.key(k)
	}
	return append(out, extra...)
}

// KeyBlock is the library blocks that name KEYS[1..8] of a queue
// script, and their types (for wrong_types), and PRIORITY_STEP_MS, the
// root's PriorityStep in ms.
func KeyBlock(priorityStep time.Duration) string {
	n := len(queueScriptKeys)
	names, refs, types := make([]string, n), make([]string, n), make([]string, n)
	for i, s := range queueScriptKeys {
		names[i], refs[i], types[i] = s.lua, "KEYS["+strconv.Itoa(i+1)+"]", "'"+s.typ+"'"
	}
	// One block per derived key: a script makes only the keys it uses
	// (and a lazy block's only when it runs: internal/script, Linker.Text).
	var derived strings.Builder
	for _, s := range keys.QueueSuffixes {
		what := "of priorities and groups (internal/keys, docs/SCHEMA.md)"
		if s.Flow {
			what = "of a task: flows, progress, logs (docs/SCHEMA.md)"
		}
		derived.WriteString("-- A key " + what + ", built from PENDING: it shares the queue's slot.\n" +
			"local " + s.Lua + " = PENDING .. '" + s.Suffix + "'\n\n")
	}
	return "-- The queue's keys, KEYS[1..8] of every queue script (queue.go).\n" +
		"local " + strings.Join(names, ", ") + " = " + strings.Join(refs, ", ") + "\n\n" +
		"-- The types of KEYS[1..8], for wrong_types (lib_types.lua).\n" +
		"local QUEUE_TYPES = {" + strings.Join(types, ", ") + "}\n\n" +
		derived.String() +
		"-- How much earlier a task counts as ready per level of priority, in ms\n" +
		"-- (the root's PriorityStep).\n" +
		"local PRIORITY_STEP_MS = " + strconv.FormatInt(priorityStep.Milliseconds(), 10)
}

// EndCode is what an end-of-reservation step answers (lib_queue.lua): its
// name in the scripts is endCodeNames'.
type EndCode int64

const (
	// EndLost: the reservation is not the caller's (its lease ran out, it
	// was re-queued, it already ended): nothing changed.
	EndLost EndCode = iota
	// EndDone: done as asked (acked, retried, released, snoozed, extended).
	EndDone
	// EndBuried: moved to the dead letters.
	EndBuried
	// EndCanceled: moved to the dead letters as cancelled (Queue.Cancel
	// asked the task to stop); for an extension, extended all the same.
	EndCanceled
	// EndNeedEntry: the task is cancelled, and the script needs its
	// cancelled dead letter to bury it: call again with it. Nothing changed.
	EndNeedEntry
)

var endCodeNames = [...]string{EndLost: "LOST", EndDone: "DONE", EndBuried: "BURIED", EndCanceled: "CANCELED", EndNeedEntry: "NEED_ENTRY"}

// EndCodeBlock is the library block that names the end codes.
func EndCodeBlock() string {
	vals := make([]string, len(endCodeNames))
	for i := range endCodeNames {
		vals[i] = strconv.Itoa(i)
	}
	return "-- What the end-of-reservation steps answer (EndCode, queue.go).\n" +
		"local " + strings.Join(endCodeNames[:], ", ") + " = " + strings.Join(vals, ", ")
}
