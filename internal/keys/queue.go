package keys

import (
	"crypto/sha1"
	"encoding/hex"
	"math/bits"
	"strconv"
	"strings"
	"sync"
)

// Queue holds the keys of one task queue. Every key shares the queue's slot
// in the tagged layout.
type Queue struct {
	Pending    string // fleet:queue:<name> (list of JSON bodies)
	Processing string // fleet:queue:<name>:processing (zset: id -> deadline)
	Body       string // fleet:queue:<name>:processing:body (hash: id -> body)
	Scheduled  string // fleet:queue:<name>:scheduled (zset: body -> ready_at)
	Dead       string // fleet:queue:<name>:dead (list of dead bodies)

	// Lease is fleet:queue:<name>:processing:lease (hash: id -> "<token>
	// <deadline_ms>", with " c" after it once Queue.Cancel asked the task to
	// stop; derived). It holds the token of each reservation that
	// fleet made and the deadline fleet last gave it, so that only the
	// reservation that exists now can be acked, nacked or extended, and only
	// by its owner. Losing it only revokes the leases in flight: their tasks
	// come back through the sweeper when their deadlines pass, so it never
	// needs rebuilding.
	Lease string
	// Policy is fleet:queue:<name>:policy (string: JSON; derived): the
	// queue's retry and dead-letter policy, which every process applies.
	Policy string
	// Call is the prefix of fleet:queue:<name>:call:<token prefix> (string,
	// PX lease; derived): the ids one reserve call took, or a tombstone, so
	// that a caller that gave up mid-call can hand them back.
	Call string
	// Dedup is fleet:queue:<name>:dedup (hash: dedup key -> task id;
	// derived). An entry lives while its task is pending, scheduled or in
	// flight, and ends when the task is acked or dead-lettered. It can be
	// rebuilt from the "dedup" field of the bodies in the documented keys.
	Dedup string
	// Unique is the prefix of fleet:queue:<name>:unique:<dedup key> (string:
	// the id of the task that held the key, PX the window; optional): a dedup
	// key kept held after its task was acked, for SubmitOptions.UniqueFor.
	Unique string
	// Paused is fleet:queue:<name>:paused (string "1"; optional): while it
	// exists, batch workers reserve nothing from the queue.
	Paused string
	// Result is the prefix of fleet:queue:<name>:result:<id> (string: JSON
	// {id, result, attempts, done_at, worker}, PX QueueOptions.Retention;
	// optional): a completed task's record, kept when retention is on.
	Result string
	// Shards is fleet:queue:<name>:shards (hash; derived; tagged layout
	// only, and only for a queue ever opened with QueueOptions.Shards > 1):
	// "max" is the highest shard count in use (every reserve looks at
	// shards 0..max-1), and "at:<K>" the server time in ms at which a handle
	// of K shards last registered. The sweeper lowers "max" once the shards
	// past the counts still in use are empty, and deletes the hash when
	// only one shard is left. It lives with shard 0 only.
	Shards string
	// Permits is fleet:queue:<name>:permits (zset: permit token -> server
	// ms when its lease ends; optional; set on the queue's own keys only,
	// as Shards): the fleet-wide GlobalConcurrency permits of a sharded
	// queue, one key in one slot whatever the shards. Its tokens are taken,
	// extended and given back as a Semaphore's (sem_acquire.lua with a
	// count, sem_extend.lua, sem_release.lua); its TTL is its last
	// member's deadline.
	Permits string
	// HistMinute and HistDay are the prefixes of the queue's history
	// (derived; docs/SCHEMA.md), before a bucket's start in unix seconds:
	// fleet:queue:<name>:hist:m:<hour> (hash: "<minute>:<count>" -> n, one
	// hour of per-minute buckets) and fleet:queue:<name>:hist:d:<day>
	// (hash: "<count>" -> n, one day). They live with shard 0 only.
	HistMinute, HistDay string
	// Shard is the shard these keys are of (0 for the queue's own keys).
	Shard int

	// The keys of priorities, groups and GlobalConcurrency (derived;
	// docs/SCHEMA.md): each is Pending plus a suffix of QueueSuffixes, which
	// the queue scripts build the same way. Prio is a zset of the pending
	// prioritized bodies; Groups the round of the groups that may run (a
	// list of names); GroupState a hash of each active group's state;
	// GroupBlocked a zset of the groups out of the round until a time;
	// GroupLimits a hash of the groups' own limits; GroupPaused a set of
	// the paused groups; Running a zset of the running tasks' ids by lease
	// deadline (QueueOptions.GlobalConcurrency). Group, GroupRun and
	// GroupRate are prefixes, before a group's name: its pending list, its
	// running tasks (a zset by lease deadline), its rate limiter (GCRA).
	Prio, Groups, GroupState, GroupBlocked, GroupLimits, GroupPaused, Running string
	Group, GroupRun, GroupRate                                                string
	// Signal (a counter) rises whenever grouped or prioritized work becomes
	// available, for waiting reserves to wake on; GroupPending counts the
	// tasks on the groups' lists.
	Signal, GroupPending string

	// The keys of flows, tracked tasks and progress (docs/FLOWS.md,
	// docs/SCHEMA.md), each Pending plus a suffix of QueueSuffixes (those
	// with Flow set), which the flow scripts build the same way. Flow and
	// FlowOut are prefixes, before a task id: a tracked task's flow record
	// (hash) and the refs of its dependents (set). Outbox is a zset of the
	// tracked tasks that ended and whose end is not yet passed on (id ->
	// server ms); Waiting a zset of the tasks that wait (id -> server ms
	// made while uncommitted, +inf once committed); Progress a hash of the
	// running tasks' progress (id -> "<lease token> <json>").
	Flow, FlowOut, Outbox, Waiting, Progress string

	// Retained (a zset: task id -> done_at, unix s on the server's clock)
	// indexes the records of the done tasks kept for QueueOptions.Retention
	// (Result), so that they can be listed a page at a time; each ack that
	// keeps a record adds its id and drops the ids past the retention.
	Retained string

	// Log is the prefix of fleet:queue:<name>:log:<id> (list: one JSON
	// element per run that wrote lines with the task's logger; derived):
	// the task's per-run logs (docs/SCHEMA.md).
	Log string

	// Steps is the prefix of fleet:queue:<name>:steps:<id> (hash: step
	// name -> its record, JSON; derived): the recorded steps and sleeps of
	// durable task <id> (docs/DURABLE.md, docs/SCHEMA.md). It lives as the
	// task's log does.
	Steps string

	// MetaIndex is the prefix of fleet:queue:<name>:meta:<key>:<canon>
	// (zset: task id -> 0, read BYLEX; derived; QueueOptions.IndexMeta): the
	// tasks submitted with metadata key <key> set to the value that
	// MetaCanon spells <canon>. MetaKey spells one.
	MetaIndex string
}

// MaxMetaPlain bounds the values that MetaCanon spells as they are.
const MaxMetaPlain = 128

// MetaCanon spells a metadata value in a key of the metadata index:
// "s<value>" when the value is at most MaxMetaPlain bytes of valid UTF-8
// with no brace, white space or control character, else "h<sha1 hex>",
// so that any value gives a key of bounded length that Parse reads back
// and that no brace can steer to another slot.
func MetaCanon(value string) string {
	if len(value) <= MaxMetaPlain && (value == "" || Check(KindItem, value) == nil) {
		return "s" + value
	}
	sum := sha1.Sum([]byte(value))
	return "h" + hex.EncodeToString(sum[:])
}

// MetaSuffix is what follows MetaIndex in the index key of metadata key
// key (a name that Check(KindGroup) accepts) and value: "<key>:<canon>".
func MetaSuffix(key, value string) string { return key + ":" + MetaCanon(value) }

// MetaKey returns the index key of metadata key key and value value.
func (q Queue) MetaKey(key, value string) string { return q.MetaIndex + MetaSuffix(key, value) }

// QueueSuffixes are the suffixes, after Pending, of Queue's keys of
// priorities, groups and GlobalConcurrency, and of flows (Flow set), with
// the names the queue scripts know them by (each set in a block of its
// own, so that a script that uses no flow key builds none).
// queueAt spells them from this table; Parse and Spell read them back by
// their family.
var QueueSuffixes = []struct {
	Lua, Suffix string
	Family      Family
	Key         func(*Queue) *string
	Flow        bool
}{
	{"PRIO", ":prio", FamQueuePrio, func(q *Queue) *string { return &q.Prio }, false},
	{"GROUPS", ":groups", FamQueueGroups, func(q *Queue) *string { return &q.Groups }, false},
	{"GSTATE", ":gstate", FamQueueGroupState, func(q *Queue) *string { return &q.GroupState }, false},
	{"GBLOCKED", ":gblocked", FamQueueGroupBlocked, func(q *Queue) *string { return &q.GroupBlocked }, false},
	{"GLIMITS", ":glimits", FamQueueGroupLimits, func(q *Queue) *string { return &q.GroupLimits }, false},
	{"GPAUSED", ":gpaused", FamQueueGroupPaused, func(q *Queue) *string { return &q.GroupPaused }, false},
	{"RUNNING", ":running", FamQueueRunning, func(q *Queue) *string { return &q.Running }, false},
	{"GROUP", ":g:", FamQueueGroup, func(q *Queue) *string { return &q.Group }, false},
	{"GRUN", ":grun:", FamQueueGroupRun, func(q *Queue) *string { return &q.GroupRun }, false},
	{"GRATE", ":grate:", FamQueueGroupRate, func(q *Queue) *string { return &q.GroupRate }, false},
	{"SIGNAL", ":signal", FamQueueSignal, func(q *Queue) *string { return &q.Signal }, false},
	{"GPENDING", ":gpending", FamQueueGroupPending, func(q *Queue) *string { return &q.GroupPending }, false},
	{"FLOW", ":flow:", FamQueueFlow, func(q *Queue) *string { return &q.Flow }, true},
	{"FOUT", ":fout:", FamQueueFlowOut, func(q *Queue) *string { return &q.FlowOut }, true},
	{"OUTBOX", ":outbox", FamQueueOutbox, func(q *Queue) *string { return &q.Outbox }, true},
	{"WAITING", ":waiting", FamQueueWaiting, func(q *Queue) *string { return &q.Waiting }, true},
	{"PROGRESS", ":progress", FamQueueProgress, func(q *Queue) *string { return &q.Progress }, true},
	{"RETAINED", ":retained", FamQueueRetained, func(q *Queue) *string { return &q.Retained }, false},
	{"METAIDX", ":meta:", FamQueueMeta, func(q *Queue) *string { return &q.MetaIndex }, false},
	{"TLOG", ":log:", FamQueueLog, func(q *Queue) *string { return &q.Log }, true},
	{"STEPS", ":steps:", FamQueueSteps, func(q *Queue) *string { return &q.Steps }, true},
}

// Queue returns the keys of queue name.
func (k Keys) Queue(name string) Queue {
	q := queueAt(k.join("fleet", "queue", k.tag(name)))
	q.Shards = q.Pending + ":shards"
	q.Permits = q.Pending + ":permits"
	return q
}

// MaxShards bounds a queue's shard count (QueueOptions.Shards).
const MaxShards = 1024

// QueueShard returns the keys of shard i (0 <= i < MaxShards) of queue
// name. Shard 0 is the queue's own keys (Queue); shard i > 0, in the
// tagged layout only, has the hash tag {<name>:<i>:<s>} (see ShardTag),
// which no queue name can spell since ':' is refused in queue names. In
// the compat layout every shard is shard 0. Shards hold no Shards key.
func (k Keys) QueueShard(name string, i int) Queue {
	if i <= 0 || !k.tagged {
		return k.Queue(name)
	}
	q := queueAt(k.join("fleet", "queue", "{"+ShardTag(name, i)+"}"))
	q.Shard = i
	return q
}

func queueAt(base string) Queue {
	q := Queue{
		Pending:    base,
		Processing: base + ":processing",
		Body:       base + ":processing:body",
		Scheduled:  base + ":scheduled",
		Dead:       base + ":dead",
		Lease:      base + ":processing:lease",
		Dedup:      base + ":dedup",
		Policy:     base + ":policy",
		Call:       base + ":call:",
		Unique:     base + ":unique:",
		Paused:     base + ":paused",
		Result:     base + ":result:",
		HistMinute: base + ":hist:m:",
		HistDay:    base + ":hist:d:",
	}
	for _, x := range QueueSuffixes {
		*x.Key(&q) = base + x.Suffix
	}
	return q
}

// Queues is fleet:queues (set of queue names; derived): the queue registry
// that lets a sweeper find every queue without scanning the keyspace. It is
// not tagged, so on a cluster it lives in another slot than the queues' keys
// and is never touched by a queue script. It can be rebuilt by scanning for
// fleet:queue:* keys.
func (k Keys) Queues() string { return k.join("fleet", "queues") }

// Slot returns the Redis Cluster hash slot of key (CRC16/XMODEM of its hash
// tag, or of the whole key without one, modulo 16384).
func Slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16(key) & 16383)
}

func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

var shardTags sync.Map // name "\x00" i -> tag

// ShardTag returns the hash tag (without braces) of shard i > 0 of queue
// name: "<name>:<i>:<s>", where s is the smallest integer >= 0 that puts
// the tag's slot in the window of shard i. The windows follow a van der
// Corput sequence in mixed radix (3, 2, 2, 2, ...) from the slot of shard
// 0 (the slot of name): with d = i mod 3, m = i div 3, b the bit length of
// m and r the bits of m reversed (as a b-bit number), shard i sits at the
// fraction p = (d + r/2^b)/3 of the slot space after shard 0, and its window
// starts at p*16384 and is 1/32 of the grid's step, 16384/(3*2^b)/32
// slots, wide (at least 16). So the
// first K shards sit on an even grid for K = 3*2^j (12 shards: every
// twelfth of the slot space), near one for any other K: a cluster whose
// masters own even slot ranges gets an even share of them, exactly (but
// for a window that straddles a range's edge) when K is a multiple of
// their count and both divide 3*2^j (3, 4, 6 or 12 masters and 12 shards:
// 4, 3, 2 or 1 each). Finding s takes about 96*2^b CRC16s (at most about
// 1,000); the result is cached.
func ShardTag(name string, i int) string {
	ck := name + "\x00" + strconv.Itoa(i)
	if t, ok := shardTags.Load(ck); ok {
		return t.(string)
	}
	d, m := i%3, i/3
	b := bits.Len(uint(m))
	r := 0
	if b > 0 {
		r = int(bits.Reverse(uint(m)) >> (bits.UintSize - b))
	}
	start := (Slot(name) + (d<<b+r)*16384/(3<<b)) % 16384
	width := max(16384/(3<<b)/32, 16)
	prefix := name + ":" + strconv.Itoa(i) + ":"
	for s := 0; ; s++ {
		tag := prefix + strconv.Itoa(s)
		if (int(crc16(tag)&16383)-start+16384)%16384 < width {
			shardTags.Store(ck, tag)
			return tag
		}
	}
}

// ParseShardTag takes apart a shard's hash tag: the queue's name and the
// shard index, when tag is the one ShardTag spells for them.
func ParseShardTag(tag string) (name string, i int, ok bool) {
	j := strings.LastIndexByte(tag, ':')
	if j < 0 {
		return "", 0, false
	}
	k := strings.LastIndexByte(tag[:j], ':')
	if k < 0 {
		return "", 0, false
	}
	name = tag[:k]
	i, err := strconv.Atoi(tag[k+1 : j])
	if err != nil || i <= 0 || i >= MaxShards || Check(KindQueue, name) != nil || ShardTag(name, i) != tag {
		return "", 0, false
	}
	return name, i, true
}
