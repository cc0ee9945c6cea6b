package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/go-playground/validator/v10"
	"github.com/google/uuid"
	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet/internal/keys"
)

var queueSubmitScript = newScript("queue_submit.lua")

// Defaults of QueueOptions.
const (
	// DefaultMaxAttempts is how many times a task runs before it is
	// dead-lettered.
	DefaultMaxAttempts = 10
	// DefaultLease is how long a reservation lasts before the sweeper may
	// hand the task to another worker.
	DefaultLease = 30 * time.Second
	// DefaultBackoffBase is the retry delay after the first failure.
	DefaultBackoffBase = time.Second
	// DefaultBackoffMax caps the retry delay.
	DefaultBackoffMax = 10 * time.Minute
	// DefaultDeadMax bounds how many dead letters a queue keeps.
	DefaultDeadMax = 10_000
	// DefaultDeadMaxAge bounds how long a dead letter is kept.
	DefaultDeadMaxAge = 7 * 24 * time.Hour
	// DefaultMaxPayloadBytes bounds a task's encoded payload.
	DefaultMaxPayloadBytes = 1 << 20
	// MaxReserve bounds how many tasks one Reserve may take.
	MaxReserve = 1000
)

// QueueOptions configures a Queue. The zero value of each field means its
// default; negative values are refused with ErrInvalidArgument (Shards out
// of range with ErrInvalidOptions).
type QueueOptions struct {
	// MaxAttempts is how many times a task runs: after that many failures
	// (nacks, or leases that ran out) it goes to the dead letters. Defaults
	// to DefaultMaxAttempts.
	MaxAttempts int
	// Lease is the visibility timeout of a reservation: past it the sweeper
	// re-queues the task, and the late worker's Ack, Nack and Extend get
	// ErrLeaseLost. Defaults to DefaultLease.
	Lease time.Duration
	// BackoffBase is the delay before the first retry; retry k waits
	// BackoffBase*2^(k-1), capped by BackoffMax, with jitter (between half
	// and all of it). Defaults to DefaultBackoffBase.
	BackoffBase time.Duration
	// BackoffMax caps the retry delay. Defaults to DefaultBackoffMax.
	BackoffMax time.Duration
	// Backoff, when set, is the queue's retry policy: exponential (as
	// BackoffBase and BackoffMax without it), fixed or linear, from its
	// Base and Max (which default to BackoffBase and BackoffMax; setting
	// both a Base and a different BackoffBase, or a Max and a different
	// BackoffMax, is ErrInvalidOptions), or a Go func (Backoff.Func).
	// Part of the stored policy (its kind, base and max), so that every
	// process's nacks and every sweeper apply the same; a Func stays in
	// this process. A declared Backoff also schedules the retry of a task
	// whose lease ran out, as a nack's: without one, the sweeper puts it
	// back at once. A task's own SubmitOptions.Backoff goes before it.
	// ParseBackoff reads one from text. Defaults to none.
	Backoff Backoff
	// DeadMax bounds the dead letters by count, oldest dropped first.
	// Defaults to DefaultDeadMax.
	DeadMax int
	// DeadMaxAge bounds the dead letters by age (RunSweeper trims them).
	// Defaults to DefaultDeadMaxAge.
	DeadMaxAge time.Duration
	// MaxPayloadBytes bounds a task's payload as JSON; a bigger one is
	// refused with ErrPayloadTooLarge. Defaults to DefaultMaxPayloadBytes.
	// It bounds the JSON before sealing (Sealer), as it does a result's.
	MaxPayloadBytes int
	// Sealer, when set, seals each task's payload, result and progress
	// before they reach Redis, and opens them when this process reads
	// them: Redis holds no clear text of them (seal.go, docs/SCHEMA.md's
	// "Sealed values"). Use a Keyring (AES-256-GCM, keys by id) to rotate
	// keys with no downtime. Every process of the queue needs a Sealer that
	// opens its values: a worker that cannot open a payload moves the task
	// to the dead letters with ErrSealed's reason, and a reader without it
	// (Lookup, fleetctl, the dashboard) shows the sealed value. A value
	// stored in the clear (before the queue was sealed) is still read as
	// it is. Task metadata, group, dedup key and errors stay in the clear.
	// Defaults to none.
	Sealer Sealer
	// Retention, when set, keeps the record of each task this handle acks
	// (its result, attempts, when it was done, by which worker) for this
	// long, in fleet:queue:<name>:result:<id>, for Lookup and ResultOf. A
	// result is what Task.SetResult set (or what a BatchResultFunc
	// returned), at most MaxPayloadBytes of JSON. Each retained task costs
	// one string key with a TTL: about 280 bytes of server memory with a
	// small result (BenchmarkRetainedResult), plus the result's bytes; so
	// memory is bounded by the ack rate times Retention. Defaults to 0:
	// nothing is kept, and an ack writes nothing more.
	Retention time.Duration
	// RateLimit, when set, limits how fast the queue's tasks are reserved,
	// fleet-wide: each task reserved takes a token of this Limiter (of the
	// same Fleet), and a reserve with no token to take sleeps until one
	// comes back instead of spinning (internal/engine/limit.go). Every process of the
	// queue must set the same limiter. Defaults to none.
	RateLimit *Limiter
	// Shards spreads the queue over this many shards, each its own set of
	// the queue's keys under its own hash tag, so that on a Redis Cluster
	// one hot queue uses every master (docs/SCALING.md). Submit
	// spreads tasks round-robin, or by SubmitOptions.ShardKey (or DedupKey);
	// Reserve drains every shard in turn. 0 and 1 mean one shard (the
	// queue's plain keys). The tagged layout only: Shards > 1 in the compat
	// layout, Shards < 0 or Shards > 1024 are refused with
	// ErrInvalidOptions. Every handle reserves from all the shards any
	// handle used lately (fleet:queue:<name>:shards), so K may change on a
	// live queue. Defaults to 0.
	Shards int
	// Groups are the limits of each group of the queue (SubmitOptions.Group)
	// that has none of its own (Queue.SetGroupLimit): at most so many of a
	// group's tasks running at once, and at most so fast. Reserves take
	// round-robin across the groups that have tasks and are under their
	// limits. Part of the stored policy (QueuePolicy). Defaults to none.
	Groups GroupLimits
	// GlobalConcurrency bounds how many of the queue's tasks run at once,
	// fleet-wide: a reserve takes no more than the permits left, each held
	// by its task's lease (a crashed worker's permit comes back with its
	// task), so no slot blocks waiting. Part of the stored policy. On a
	// queue of more than one shard (Shards > 1) the permits live in one
	// key of the queue's own slot (fleet:queue:<name>:permits, a
	// Semaphore's zset): a reserve takes up to the permits free there,
	// then that many tasks at most from the shards, and gives back the
	// rest; a task's end gives its permit back in a call of its own,
	// Extend extends it, and a crashed holder's permit comes back when its
	// lease runs out (docs/SCALING.md). Every process of a sharded queue
	// must set the same bound, as for a Semaphore. Negative is refused
	// (ErrInvalidArgument). Defaults to 0: no bound.
	GlobalConcurrency int
	// IndexMeta names the metadata keys (SubmitOptions.Metadata) that the
	// queue indexes, so that Queue.FindByMeta lists the tasks that carry a
	// key with a given value, in any state, a page at a time. A task
	// submitted through SubmitWith or SubmitManyWith (not a tracked one:
	// Track, After, a Flow or a Batch) with a value for such a key joins
	// fleet:queue:<name>:meta:<key>:<value> in its submit's script, and its
	// ack removes it unless its record is kept (Retention); a task
	// dead-lettered stays while its dead letter is kept. Entries whose
	// task is gone otherwise (a trimmed or purged dead letter, an expired
	// record, a task cancelled or deleted while it waited) are pruned by
	// the FindByMeta page that meets them, and every entry
	// goes at the latest max(DeadMaxAge, Retention) after its task's
	// submit (docs/SCHEMA.md). Each name follows the rules of a group name
	// (no ':', '{', '}', white space); at most MaxIndexMeta names, each
	// once, else ErrInvalidOptions naming the field. Part of the stored
	// policy, so that any process's FindByMeta knows the keys. Defaults
	// to none: a queue that indexes nothing writes and reads no index.
	IndexMeta []string
	// Logs bounds the per-task logs: what handlers write with the task's
	// logger (Logger, Task.Logger), kept with the task one entry per run
	// (TaskRecord.Logs). Defaults to DefaultLogLines lines and
	// DefaultLogBytes bytes a run, DefaultLogRuns runs a task; Lines < 0
	// keeps none.
	Logs LogOptions
}

// MaxIndexMeta bounds QueueOptions.IndexMeta.
const MaxIndexMeta = 8

func (o QueueOptions) withDefaults() (QueueOptions, error) {
	switch {
	case o.MaxAttempts < 0:
		return o, fmt.Errorf("%w: QueueOptions.MaxAttempts %d is negative", ErrInvalidArgument, o.MaxAttempts)
	case o.Lease < 0:
		return o, fmt.Errorf("%w: QueueOptions.Lease %v is negative", ErrInvalidArgument, o.Lease)
	case o.BackoffBase < 0:
		return o, fmt.Errorf("%w: QueueOptions.BackoffBase %v is negative", ErrInvalidArgument, o.BackoffBase)
	case o.BackoffMax < 0:
		return o, fmt.Errorf("%w: QueueOptions.BackoffMax %v is negative", ErrInvalidArgument, o.BackoffMax)
	case o.DeadMax < 0:
		return o, fmt.Errorf("%w: QueueOptions.DeadMax %d is negative", ErrInvalidArgument, o.DeadMax)
	case o.DeadMaxAge < 0:
		return o, fmt.Errorf("%w: QueueOptions.DeadMaxAge %v is negative", ErrInvalidArgument, o.DeadMaxAge)
	case o.Retention < 0:
		return o, fmt.Errorf("%w: QueueOptions.Retention %v is negative", ErrInvalidArgument, o.Retention)
	case o.Shards < 0 || o.Shards > keys.MaxShards:
		return o, fmt.Errorf("%w: QueueOptions.Shards %d is not in [0, %d]", ErrInvalidOptions, o.Shards, keys.MaxShards)
	case o.MaxPayloadBytes < 0:
		return o, fmt.Errorf("%w: QueueOptions.MaxPayloadBytes %d is negative", ErrInvalidArgument, o.MaxPayloadBytes)
	case o.GlobalConcurrency < 0:
		return o, fmt.Errorf("%w: QueueOptions.GlobalConcurrency %d is negative", ErrInvalidArgument, o.GlobalConcurrency)
	}
	if _, err := o.Groups.check("QueueOptions.Groups"); err != nil {
		return o, err
	}
	if len(o.IndexMeta) > MaxIndexMeta {
		return o, fmt.Errorf("%w: QueueOptions.IndexMeta names %d keys, more than MaxIndexMeta %d", ErrInvalidOptions, len(o.IndexMeta), MaxIndexMeta)
	}
	for i, k := range o.IndexMeta {
		if err := keys.Check(keys.KindGroup, k); err != nil {
			return o, fmt.Errorf("%w: QueueOptions.IndexMeta[%d]: %w", ErrInvalidOptions, i, err)
		}
		if slices.Contains(o.IndexMeta[:i], k) {
			return o, fmt.Errorf("%w: QueueOptions.IndexMeta names %q twice", ErrInvalidOptions, k)
		}
	}
	o.IndexMeta = slices.Clone(o.IndexMeta)
	var err error
	if o.Logs, err = o.Logs.withDefaults(); err != nil {
		return o, err
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = DefaultMaxAttempts
	}
	if o.Lease == 0 {
		o.Lease = DefaultLease
	}
	if err := o.withBackoff(); err != nil {
		return o, err
	}
	if o.DeadMax == 0 {
		o.DeadMax = DefaultDeadMax
	}
	if o.DeadMaxAge == 0 {
		o.DeadMaxAge = DefaultDeadMaxAge
	}
	if o.MaxPayloadBytes == 0 {
		o.MaxPayloadBytes = DefaultMaxPayloadBytes
	}
	if o.Shards == 0 {
		o.Shards = 1
	}
	return o, nil
}

// QueuePolicy is a queue's retry and dead-letter policy as stored in Redis
// (fleet:queue:<name>:policy, JSON). Every process applies the stored
// policy, whatever its own QueueOptions say: the nack script reads it, and
// so does every sweeper. A Queue handle writes its own options there the
// first time it reaches Redis (a submit or a reserve), so the process that
// opened the queue last wins; see Queue.Policy.
type QueuePolicy struct {
	// MaxAttempts is QueueOptions.MaxAttempts.
	MaxAttempts int `json:"max_attempts"`
	// BackoffBase and BackoffMax are QueueOptions.BackoffBase and
	// BackoffMax, in milliseconds.
	BackoffBaseMS int64 `json:"backoff_base_ms"`
	BackoffMaxMS  int64 `json:"backoff_max_ms"`
	// Backoff is QueueOptions.Backoff's kind ("exponential", "fixed",
	// "linear"), of BackoffBaseMS and BackoffMaxMS; "" when the queue
	// declares none (exponential, and a lease that ran out goes back at
	// once).
	Backoff BackoffKind `json:"backoff,omitempty"`
	// DeadMax is QueueOptions.DeadMax.
	DeadMax int `json:"dead_max"`
	// DeadMaxAgeMS is QueueOptions.DeadMaxAge, in milliseconds.
	DeadMaxAgeMS int64 `json:"dead_max_age_ms"`
	// GlobalConcurrency is QueueOptions.GlobalConcurrency: the reserves of
	// every process read it here.
	GlobalConcurrency int `json:"global_concurrency,omitempty"`
	// GroupConcurrency, GroupRate, GroupPerMS and GroupBurst are
	// QueueOptions.Groups (its Rate's Per in milliseconds), and
	// GroupIntervalUS its Rate's emission interval in µs (Per/Rate; 0 for
	// none), which the reserves use.
	GroupConcurrency int   `json:"group_concurrency,omitempty"`
	GroupRate        int   `json:"group_rate,omitempty"`
	GroupPerMS       int64 `json:"group_per_ms,omitempty"`
	GroupIntervalUS  int64 `json:"group_interval_us,omitempty"`
	GroupBurst       int   `json:"group_burst,omitempty"`
	// IndexMeta is QueueOptions.IndexMeta: the metadata keys indexed,
	// which FindByMeta of any process (fleetctl, fleetui) accepts.
	IndexMeta []string `json:"index_meta,omitempty"`
}

// policy returns the options' policy part.
func (o QueueOptions) policy() QueuePolicy {
	g, _ := o.Groups.check("") // checked by withDefaults
	return QueuePolicy{MaxAttempts: o.MaxAttempts, BackoffBaseMS: o.BackoffBase.Milliseconds(),
		BackoffMaxMS: o.BackoffMax.Milliseconds(), Backoff: o.Backoff.Kind, DeadMax: o.DeadMax, DeadMaxAgeMS: o.DeadMaxAge.Milliseconds(),
		GlobalConcurrency: o.GlobalConcurrency, GroupConcurrency: g.C, GroupRate: g.R, GroupPerMS: g.Per,
		GroupIntervalUS: g.IV, GroupBurst: g.B, IndexMeta: o.IndexMeta}
}

func (o QueueOptions) policyJSON() string {
	b, _ := json.Marshal(o.policy()) // plain numbers always encode
	return string(b)
}

// withPolicy returns o with the fields of a stored policy p that are set.
func (o QueueOptions) withPolicy(p QueuePolicy) QueueOptions {
	if p.MaxAttempts > 0 {
		o.MaxAttempts = p.MaxAttempts
	}
	if p.BackoffBaseMS > 0 {
		o.BackoffBase = time.Duration(p.BackoffBaseMS) * time.Millisecond
	}
	if p.BackoffMaxMS > 0 {
		o.BackoffMax = time.Duration(p.BackoffMaxMS) * time.Millisecond
	}
	o.Backoff = storedBackoff(p.Backoff, o)
	if p.DeadMax > 0 {
		o.DeadMax = p.DeadMax
	}
	if p.DeadMaxAgeMS > 0 {
		o.DeadMaxAge = time.Duration(p.DeadMaxAgeMS) * time.Millisecond
	}
	o.GlobalConcurrency = p.GlobalConcurrency
	o.Groups = storedLimits{C: p.GroupConcurrency, R: p.GroupRate, Per: p.GroupPerMS, IV: p.GroupIntervalUS, B: p.GroupBurst}.limits()
	return o
}

// storedPolicy reads the policy stored for queue k, if any.
func (f *Fleet) storedPolicy(ctx context.Context, k string) (QueuePolicy, bool, error) {
	var p QueuePolicy
	raw, err := f.client.Do(ctx, f.client.B().Get().Key(k).Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return p, false, nil
	}
	if err != nil {
		return p, false, err
	}
	if json.Unmarshal([]byte(raw), &p) != nil {
		return p, false, nil // not ours to read: the callers' own options stand
	}
	return p, true, nil
}

// Queue is a typed task queue (fleet:queue:<name> and its :processing,
// :processing:body, :scheduled and :dead keys; SCHEMA.md). Delivery is at
// least once: a task comes back when its worker nacks it or lets its lease
// run out, until MaxAttempts, and then goes to the dead letters. A Queue is
// safe for concurrent use.
type Queue[T any] struct {
	*queueCore      // the untyped queue: keys, options, reserve, the end of reservations
	check      bool // T is a struct (or a pointer to one): validate it
}

// queueEntry is what f.queues holds for a queue name: the untyped side of
// the latest Queue[T] this process made for it (SubmitJSON also takes it
// as a jsonSubmitter: queue_submit.go).
type queueEntry interface {
	core() *queueCore
}

// NewQueue returns the queue name of payload type T. A bad name or options
// is kept and returned by every call of the Queue (see Err). NewQueue also
// records the queue in this process, so that Fleet.SubmitJSON can decode
// into T by name (the latest NewQueue of a name wins) and RunSweeper uses
// its options. It does not touch Redis: the queue joins the fleet-wide
// registry (fleet:queues) on its first submit.
func NewQueue[T any](f *Fleet, name string, opts QueueOptions) *Queue[T] {
	if f == nil {
		return &Queue[T]{queueCore: &queueCore{name: name, err: fmt.Errorf("%w: NewQueue needs a Fleet", ErrInvalidArgument)}}
	}
	q := &Queue[T]{queueCore: newQueueCore(f, name, opts)}
	rt := reflect.TypeFor[T]()
	if rt.Kind() == reflect.Pointer {
		rt = rt.Elem()
	}
	q.check = rt.Kind() == reflect.Struct
	if q.err == nil {
		f.queues.Store(name, queueEntry(q))
	}
	return q
}

func (q *Queue[T]) core() *queueCore { return q.queueCore }

// payloadValidator checks payloads; it caches each type's rules, and is safe
// for concurrent use. Failing fields are named by their JSON names.
var payloadValidator = func() *validator.Validate {
	v := validator.New(validator.WithRequiredStructEnabled())
	v.RegisterTagNameFunc(func(f reflect.StructField) string {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			return ""
		case "":
			return f.Name
		}
		return name
	})
	return v
}()

// encodePayload validates p and returns it as JSON, sealed when the queue
// has a Sealer.
func (q *Queue[T]) encodePayload(p T) ([]byte, error) {
	if err := q.validate(p); err != nil {
		return nil, err
	}
	b, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("%w: cannot encode %T as JSON: %w", ErrInvalidPayload, p, err)
	}
	if len(b) > q.opts.MaxPayloadBytes {
		return nil, fmt.Errorf("%w: %d bytes of JSON, more than QueueOptions.MaxPayloadBytes %d", ErrPayloadTooLarge, len(b), q.opts.MaxPayloadBytes)
	}
	return seal(q.opts.Sealer, q.name, sealPayload, b)
}

func (q *Queue[T]) validate(p T) error {
	if !q.check {
		return nil
	}
	v := reflect.ValueOf(p)
	if v.Kind() == reflect.Pointer && v.IsNil() {
		return fmt.Errorf("%w: nil %T", ErrInvalidPayload, p)
	}
	err := payloadValidator.Struct(p)
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrInvalidPayload, validationFields(err))
}

// validationFields spells a validator error as the failing fields by their
// JSON names and the rules they fail, e.g. "url (fails url), depth (fails
// lte=5)"; any other error as its text.
func validationFields(err error) string {
	var ve validator.ValidationErrors
	if !errors.As(err, &ve) {
		return err.Error()
	}
	fields := make([]string, 0, len(ve))
	for _, fe := range ve {
		ns := fe.Namespace()
		if _, rest, ok := strings.Cut(ns, "."); ok {
			ns = rest
		}
		rule := fe.Tag()
		if fe.Param() != "" {
			rule += "=" + fe.Param()
		}
		fields = append(fields, ns+" (fails "+rule+")")
	}
	return strings.Join(fields, ", ")
}

// newTaskID returns a UUIDv7: unique across processes, ordered by time.
func newTaskID() (string, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return "", fmt.Errorf("task id: %w", err)
	}
	return id.String(), nil
}

// withBackoff checks o.Backoff and fills in the defaults of it and of
// BackoffBase and BackoffMax, which a declared Backoff's Base and Max
// become.
func (o *QueueOptions) withBackoff() error {
	b := o.Backoff
	switch {
	case b.Base > 0 && o.BackoffBase != 0 && b.Base != o.BackoffBase:
		return fmt.Errorf("%w: QueueOptions.Backoff.Base %v and BackoffBase %v differ: set one", ErrInvalidOptions, b.Base, o.BackoffBase)
	case b.Kind != BackoffFixed && b.Max > 0 && o.BackoffMax != 0 && b.Max != o.BackoffMax:
		return fmt.Errorf("%w: QueueOptions.Backoff.Max %v and BackoffMax %v differ: set one", ErrInvalidOptions, b.Max, o.BackoffMax)
	}
	if o.BackoffBase == 0 {
		o.BackoffBase = DefaultBackoffBase
	}
	if o.BackoffMax == 0 {
		o.BackoffMax = DefaultBackoffMax
	}
	b, err := b.check("QueueOptions.Backoff", o.BackoffBase, o.BackoffMax)
	if err != nil {
		return err
	}
	if !b.IsZero() {
		o.Backoff, o.BackoffBase, o.BackoffMax = b, b.Base, b.Max
	}
	if o.BackoffMax < o.BackoffBase {
		return fmt.Errorf("%w: QueueOptions.BackoffMax %v is below BackoffBase %v", ErrInvalidArgument, o.BackoffMax, o.BackoffBase)
	}
	return nil
}

// storedBackoff is the Backoff of a stored policy of kind (QueuePolicy's
// "backoff") for o, whose BackoffBase and BackoffMax are the policy's
// already: none for kind "", but this process's Func stays, as it does
// over any kind.
func storedBackoff(kind BackoffKind, o QueueOptions) Backoff {
	if kind == "" && o.Backoff.Func == nil {
		return Backoff{}
	}
	if kind == "" {
		kind = BackoffExponential
	}
	return Backoff{Kind: kind, Base: o.BackoffBase, Max: o.BackoffMax, Func: o.Backoff.Func}
}
