package fleet

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet/internal/keys"
)

// Defaults of StreamOptions.
const (
	// DefaultStreamMaxLen is the most members a stream keeps.
	DefaultStreamMaxLen = 50_000
	// DefaultStreamMaxAge is how long a stream keeps a member.
	DefaultStreamMaxAge = time.Hour
)

var streamPushScript = newScript("stream_push.lua")

// StreamOptions bounds a stream. The zero value means the defaults.
type StreamOptions struct {
	// MaxLen is the most members kept: each push drops the oldest beyond it.
	// Negative is ErrInvalidArgument. Defaults to DefaultStreamMaxLen.
	MaxLen int
	// MaxAge is how long a member is kept: each push drops those older.
	// Negative is ErrInvalidArgument. Defaults to DefaultStreamMaxAge.
	MaxAge time.Duration
	// Envelope wraps each member as {"id","ts","data"} (see Stream), so
	// that two equal outputs stay two members and each entry has an id.
	// A consumer that follows the documented schema (member = the
	// output's JSON) then reads the wrapper, not the output: turn it on
	// only when every reader of the stream is fleet. Defaults to false:
	// members are the outputs' JSON, bare, as documented.
	Envelope bool
}

// Stream is the bounded output stream of one automation type
// (stream:<type>, a sorted set). Each member is one output's JSON, as the
// documented schema says, scored by the server's time (TIME) of its push,
// in unix seconds with microsecond precision (the members of one PushMany
// a microsecond apart, in order). Being a sorted set, the stream holds two
// equal outputs as one member (the later push moves it to its time).
//
// With StreamOptions.Envelope, each member is instead the output wrapped
// in fleet's envelope:
//
//	{"id":"0193...","ts":1733130000.123,"data":<the output as JSON>}
//
// id is a UUIDv7, so two equal outputs are still two members, and members
// of the same millisecond sort in the order one process pushed them; ts
// equals the score, to the millisecond. Peek and Pop read both forms, whatever the option, so
// a stream may hold both. Every push trims
// the stream to MaxLen members and MaxAge of age in the same script, so a
// stream never outgrows its bounds. Scores and the age cutoff both come
// from the server's clock, so a pusher whose clock is off by hours neither
// trims the fresh entries of others nor sees its own trimmed. A Stream is
// safe for concurrent use.
type Stream[T any] struct {
	f      *Fleet
	typ    string
	key    string
	topic  string // the channel of Emit: event:<type>.emit
	maxLen int
	maxAge time.Duration
	wrap   bool // StreamOptions.Envelope
	err    error
	// now is the pusher's clock. It makes only the entries' ids (their
	// UUIDv7 time bits); scores, "ts" and the age cutoff are the server's.
	// Tests set it to play a pusher whose clock is off.
	now func() time.Time
}

// NewStream returns the stream of automation type typ. A bad typ or bad
// options make every call of the Stream return ErrInvalidName or
// ErrInvalidArgument; Err reports it at once.
func NewStream[T any](f *Fleet, typ string, opts StreamOptions) *Stream[T] {
	s := &Stream[T]{f: f, typ: typ, key: f.keys.Stream(typ), topic: f.keys.Event(typ + ".emit"),
		maxLen: opts.MaxLen, maxAge: opts.MaxAge, wrap: opts.Envelope, now: time.Now}
	if s.maxLen == 0 {
		s.maxLen = DefaultStreamMaxLen
	}
	if s.maxAge == 0 {
		s.maxAge = DefaultStreamMaxAge
	}
	switch {
	case opts.MaxLen < 0:
		s.err = fmt.Errorf("%w: StreamOptions.MaxLen %d is negative", ErrInvalidArgument, opts.MaxLen)
	case opts.MaxAge < 0:
		s.err = fmt.Errorf("%w: StreamOptions.MaxAge %v is negative", ErrInvalidArgument, opts.MaxAge)
	}
	s.err = keys.Join(keys.Check(keys.KindStream, typ), s.err)
	return s
}

// Err returns the error that every call of the Stream returns because of
// its name or options, or nil.
func (s *Stream[T]) Err() error { return s.err }

// Type returns the stream's automation type.
func (s *Stream[T]) Type() string { return s.typ }

// StreamEntry is one member of a stream, decoded. Its JSON is the member
// stored in Redis: the envelope {"id": ID, "ts": Time as unix seconds,
// "data": Data} when it has an ID, else Data's JSON, bare. It decodes
// either form, so Subscribe[StreamEntry[T]] reads the emit events of both.
type StreamEntry[T any] struct {
	// ID is the entry's UUIDv7, unique to this entry; empty for a bare
	// member.
	ID string
	// Time is when the entry was pushed, by the server's clock
	// (microsecond precision for a bare member, millisecond for an
	// envelope); its unix seconds are the member's score.
	// It is zero for a bare member read from an emit event, which
	// carries no time.
	Time time.Time
	// Data is the output.
	Data T
}

// envelope is the stored form of a StreamEntry. Field order is the JSON's.
type envelope struct {
	ID   string          `json:"id"`
	TS   float64         `json:"ts"`
	Data json.RawMessage `json:"data"`
}

// MarshalJSON encodes the entry as its envelope, or as Data's JSON alone
// when ID is empty.
func (e StreamEntry[T]) MarshalJSON() ([]byte, error) {
	data, err := json.Marshal(e.Data)
	if err != nil || e.ID == "" {
		return data, err
	}
	return json.Marshal(envelope{ID: e.ID, TS: unixSeconds(e.Time), Data: data})
}

// UnmarshalJSON decodes a member of either form. A JSON object with both
// an "id" and a "data" field is taken for an envelope, and refused
// without a non-empty string id, a ts or data; anything else is decoded
// as a bare T (ID empty, Time zero).
func (e *StreamEntry[T]) UnmarshalJSON(b []byte) error {
	if !looksLikeEnvelope(b) {
		var data T
		if err := json.Unmarshal(b, &data); err != nil {
			return fmt.Errorf("into %T: %w", data, err)
		}
		*e = StreamEntry[T]{Data: data}
		return nil
	}
	var env struct {
		ID   *string          `json:"id"`
		TS   *float64         `json:"ts"`
		Data *json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(b, &env); err != nil {
		return fmt.Errorf("not a fleet stream envelope: %w", err)
	}
	if env.ID == nil || *env.ID == "" || env.TS == nil || env.Data == nil {
		return errors.New("not a fleet stream envelope (id, ts and data required)")
	}
	var data T
	if err := json.Unmarshal(*env.Data, &data); err != nil {
		return fmt.Errorf("data into %T: %w", data, err)
	}
	*e = StreamEntry[T]{ID: *env.ID, Time: fromUnixSeconds(*env.TS), Data: data}
	return nil
}

// fromUnixSeconds reads a score (unix seconds, to the microsecond at most).
func fromUnixSeconds(s float64) time.Time {
	return time.UnixMicro(int64(math.Round(s * 1e6)))
}

// idClock makes the UUIDv7 ids of stream entries from a Stream's clock,
// rising within the process: entries of one millisecond (one PushMany, or
// pushes that the server scores alike) sort in the order this process
// pushed them, since members of equal score sort by their text.
var idClock struct {
	sync.Mutex
	last int64 // unix ms << 12 | sequence, of the last id made
}

// newID returns a UUIDv7 whose time is now (RFC 9562: 48 bits of unix ms,
// then 12 bits that keep the ids of one process rising).
func newID(now time.Time) (string, error) {
	var u uuid.UUID
	if _, err := rand.Read(u[8:]); err != nil {
		return "", err
	}
	idClock.Lock()
	t := now.UnixMilli() << 12
	if t <= idClock.last {
		t = idClock.last + 1
	}
	idClock.last = t
	idClock.Unlock()
	ms, seq := t>>12, t&0xfff
	for i := range 6 {
		u[i] = byte(ms >> (40 - 8*i))
	}
	u[6] = 0x70 | byte(seq>>8)
	u[7] = byte(seq)
	u[8] = u[8]&0x3f | 0x80
	return u.String(), nil
}

// envelopeText is the member that stream_push.lua stores for an entry of
// a Stream with Envelope: it builds the same text from the server's time
// (ts as it returns it).
func envelopeText(id, ts, data string) string {
	return `{"id":"` + id + `","ts":` + ts + `,"data":` + data + `}`
}

func (s *Stream[T]) check(ctx context.Context) error {
	if s.err != nil {
		return s.err
	}
	return s.f.alive(ctx)
}

// Push adds v to the stream and trims the stream to its bounds, in one
// script. It returns the new entry's id, or "" unless the stream has
// StreamOptions.Envelope (a bare member carries no id). It returns ErrInvalidArgument when
// v does not encode as JSON and ErrWrongType, changing nothing, when the
// key holds something other than a sorted set.
func (s *Stream[T]) Push(ctx context.Context, v T) (string, error) {
	ids, err := s.push(ctx, "stream push", []T{v})
	if err != nil {
		return "", err
	}
	return ids[0], nil
}

// PushMany adds every value of vs, in order, and trims, in one script and
// one round trip. It returns the ids in the order of vs ("" each unless
// the stream has StreamOptions.Envelope). When one value
// does not encode, nothing is pushed.
func (s *Stream[T]) PushMany(ctx context.Context, vs []T) ([]string, error) {
	if len(vs) == 0 {
		if err := s.check(ctx); err != nil {
			return nil, opErr("stream push", s.typ, err)
		}
		return nil, nil
	}
	return s.push(ctx, "stream push", vs)
}

func (s *Stream[T]) push(ctx context.Context, op string, vs []T) ([]string, error) {
	_, ids, err := s.pushMembers(ctx, op, vs)
	return ids, err
}

// pushMembers pushes vs and returns their members as well as their ids.
// The script stamps every entry with the server's time (one score for the
// whole call) and trims by the server's clock too: a pusher whose clock is
// off neither trims the fresh entries of others nor has its own trimmed.
func (s *Stream[T]) pushMembers(ctx context.Context, op string, vs []T) (members, ids []string, err error) {
	if err := s.check(ctx); err != nil {
		return nil, nil, opErr(op, s.typ, err)
	}
	args := make([]string, 3, 3+2*len(vs))
	args[0] = strconv.Itoa(s.maxLen)
	args[1] = millis(s.maxAge)
	args[2] = "0"
	if s.wrap {
		args[2] = "1"
	}
	ids = make([]string, len(vs))
	datas := make([]string, len(vs))
	for i, v := range vs {
		data, err := json.Marshal(v)
		if err != nil {
			return nil, nil, opErr(op, s.typ, fmt.Errorf("%w: cannot encode %T as JSON: %w", ErrInvalidArgument, v, err))
		}
		datas[i] = string(data)
		if !s.wrap {
			args = append(args, datas[i])
			continue
		}
		if ids[i], err = newID(s.now()); err != nil {
			return nil, nil, opErr(op, s.typ, err)
		}
		args = append(args, ids[i], datas[i])
	}
	res, err := streamPushScript.Exec(ctx, s.f.client, []string{s.key}, args).ToArray()
	if err != nil {
		return nil, nil, opErr(op, s.typ, err)
	}
	if len(res) != 2 {
		return nil, nil, opErr(op, s.typ, unexpectedReply("stream push", len(res)))
	}
	ts, err := res[1].ToString()
	if err != nil {
		return nil, nil, opErr(op, s.typ, err)
	}
	if !s.wrap {
		return datas, ids, nil
	}
	members = make([]string, len(vs))
	for i := range vs {
		members[i] = envelopeText(ids[i], ts, datas[i])
	}
	return members, ids, nil
}

// Emit pushes v (as Push) and then publishes the member it pushed (the
// output's JSON, or its envelope with StreamOptions.Envelope) on the
// channel event:<type>.emit, the low-latency signal of the documented
// schema; subscribe to it with Subscribe[T], or with
// Subscribe[StreamEntry[T]] to read either form, on "<type>.emit". The publish is a second command (on a Redis Cluster
// the stream and the channel live in different slots): when the push
// worked and the publish failed, Emit returns the id with the publish
// error, and the entry stays in the stream.
func (s *Stream[T]) Emit(ctx context.Context, v T) (string, error) {
	id, _, err := s.emit(ctx, v)
	return id, err
}

// emit is Emit that also reports whether the push took effect (the id
// cannot tell for a bare stream).
func (s *Stream[T]) emit(ctx context.Context, v T) (id string, pushed bool, err error) {
	members, ids, err := s.pushMembers(ctx, "stream emit", []T{v})
	if err != nil {
		return "", false, err
	}
	if err := s.f.publishRaw(ctx, s.topic, members[0]); err != nil {
		return ids[0], true, opErr("stream emit: publish", s.typ, err)
	}
	return ids[0], true, nil
}

// Pop removes and returns up to n of the oldest entries, oldest first
// (ZPOPMIN), bare members and envelopes alike; a bare member's Time is its
// score and its ID empty. Members that do not decode are removed too and reported in a
// *StreamDecodeError (errors.Is ErrDecode) returned with the entries that
// did decode. n <= 0 is ErrInvalidArgument.
func (s *Stream[T]) Pop(ctx context.Context, n int) ([]StreamEntry[T], error) {
	if err := s.checkN(ctx, n); err != nil {
		return nil, opErr("stream pop", s.typ, err)
	}
	c := s.f.client
	zs, err := c.Do(ctx, c.B().Zpopmin().Key(s.key).Count(int64(n)).Build()).AsZScores()
	if err != nil {
		return nil, opErr("stream pop", s.typ, err)
	}
	return s.decode(zs)
}

// Peek returns up to n of the oldest entries, oldest first, leaving them in
// the stream (ZRANGE 0 n-1). Undecodable members are reported as by Pop.
// n <= 0 is ErrInvalidArgument.
func (s *Stream[T]) Peek(ctx context.Context, n int) ([]StreamEntry[T], error) {
	if err := s.checkN(ctx, n); err != nil {
		return nil, opErr("stream peek", s.typ, err)
	}
	c := s.f.client
	zs, err := c.Do(ctx, c.B().Zrange().Key(s.key).Min("0").Max(strconv.Itoa(n-1)).Withscores().Build()).AsZScores()
	if err != nil {
		return nil, opErr("stream peek", s.typ, err)
	}
	return s.decode(zs)
}

// Len returns the number of members in the stream (ZCARD).
func (s *Stream[T]) Len(ctx context.Context) (int64, error) {
	if err := s.check(ctx); err != nil {
		return 0, opErr("stream len", s.typ, err)
	}
	c := s.f.client
	n, err := c.Do(ctx, c.B().Zcard().Key(s.key).Build()).AsInt64()
	return n, opErr("stream len", s.typ, err)
}

func (s *Stream[T]) checkN(ctx context.Context, n int) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if n <= 0 {
		return fmt.Errorf("%w: count %d must be > 0", ErrInvalidArgument, n)
	}
	return nil
}

func (s *Stream[T]) decode(zs []rueidis.ZScore) ([]StreamEntry[T], error) {
	out := make([]StreamEntry[T], 0, len(zs))
	var bad []BadMember
	for _, z := range zs {
		var e StreamEntry[T]
		err := json.Unmarshal([]byte(z.Member), &e)
		if err == nil && e.ID == "" {
			// A bare member, as the documented schema has it: its time
			// is its score.
			e.Time = fromUnixSeconds(z.Score)
		}
		if err != nil {
			bad = append(bad, BadMember{Raw: z.Member, Score: z.Score, Err: err})
			continue
		}
		out = append(out, e)
	}
	if bad != nil {
		return out, &StreamDecodeError{Stream: s.typ, Members: bad}
	}
	return out, nil
}

// looksLikeEnvelope reports whether a member carries an envelope's fields,
// so that a broken envelope is reported rather than read as bare data.
func looksLikeEnvelope(member []byte) bool {
	if !bytes.Contains(member, []byte(`"data"`)) {
		return false // the common case of a bare member, without a decode
	}
	var probe map[string]json.RawMessage
	if json.Unmarshal(member, &probe) != nil {
		return false
	}
	_, id := probe["id"]
	_, data := probe["data"]
	return id && data
}
