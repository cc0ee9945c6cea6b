package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet/internal/keys"
)

// DefaultSubscribeBuffer is how many decoded messages a Subscription holds
// for a slow reader before it drops new ones.
const DefaultSubscribeBuffer = 1024

// Publish sends v as JSON on the channel event:<topic>. Nobody stores it:
// subscribers listening now get it, later ones never do. On a single node
// it is a plain PUBLISH, so any client of the documented schema that
// SUBSCRIBEs to event:<topic> gets it; on a Redis Cluster it is a sharded
// SPUBLISH (Redis 7), which reaches only the node of the channel's slot
// instead of every node, and which Subscribe listens to with SSUBSCRIBE.
// It returns ErrInvalidName for a bad topic and ErrInvalidArgument when v
// does not encode as JSON.
func (f *Fleet) Publish(ctx context.Context, topic string, v any) error {
	if err := keys.Check(keys.KindTopic, topic); err != nil {
		return opErr("publish", topic, err)
	}
	if err := f.alive(ctx); err != nil {
		return opErr("publish", topic, err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return opErr("publish", topic, fmt.Errorf("%w: cannot encode %T as JSON: %w", ErrInvalidArgument, v, err))
	}
	return opErr("publish", topic, f.publishRaw(ctx, f.keys.Event(topic), string(b)))
}

// publishRaw publishes msg on channel, sharded on a cluster.
func (f *Fleet) publishRaw(ctx context.Context, channel, msg string) error {
	c := f.client
	if f.cluster {
		return c.Do(ctx, c.B().Spublish().Channel(channel).Message(msg).Build()).Error()
	}
	return c.Do(ctx, c.B().Publish().Channel(channel).Message(msg).Build()).Error()
}

// SubscribeOptions tunes a Subscription. The zero value means the defaults.
type SubscribeOptions struct {
	// Buffer is how many decoded messages wait for the reader of C; when
	// it is full, new messages are dropped (counted by Dropped, logged as a
	// warning), so a slow reader never slows the publisher or the
	// connection. Negative is ErrInvalidArgument. Defaults to
	// DefaultSubscribeBuffer.
	Buffer int
}

// Subscription delivers the messages of one topic, decoded into T, on C.
// It resubscribes by itself, with a capped backoff, when the connection
// breaks (a server restart, a failover, a slot moving): messages published
// while it was away are missed, as pub/sub promises nothing else. Its
// methods are safe for concurrent use.
type Subscription[T any] struct {
	f       *Fleet
	topic   string
	channel string
	c       chan T
	cancel  context.CancelFunc
	done    chan struct{} // closed when the goroutine ended
	err     error         // why it ended; read after done

	dropped     atomic.Int64
	undecodable atomic.Int64
	subscribed  atomic.Bool // a subscribe was confirmed since the last failure
}

// Subscribe listens to the channel event:<topic> and delivers each message
// decoded into T (JSON) on the Subscription's C, until ctx ends, Close is
// called, or the Fleet closes; then C is closed. It returns once the server
// has confirmed the subscription, so a message published after Subscribe
// returns is delivered. It returns ErrInvalidName for a bad topic and the
// error of the first subscribe when that fails (no goroutine is left then).
// Messages that do not decode into T are dropped and counted (Undecodable).
// See Publish for the cluster's sharded pub/sub.
func Subscribe[T any](ctx context.Context, f *Fleet, topic string, opts SubscribeOptions) (*Subscription[T], error) {
	if err := keys.Check(keys.KindTopic, topic); err != nil {
		return nil, opErr("subscribe", topic, err)
	}
	if opts.Buffer < 0 {
		return nil, opErr("subscribe", topic, fmt.Errorf("%w: SubscribeOptions.Buffer %d is negative", ErrInvalidArgument, opts.Buffer))
	}
	if opts.Buffer == 0 {
		opts.Buffer = DefaultSubscribeBuffer
	}
	if err := f.alive(ctx); err != nil {
		return nil, opErr("subscribe", topic, err)
	}
	runCtx, cancel := context.WithCancelCause(ctx)
	s := &Subscription[T]{
		f: f, topic: topic, channel: f.keys.Event(topic),
		c: make(chan T, opts.Buffer), done: make(chan struct{}),
		cancel: func() { cancel(errSubscriptionClosed) },
	}
	ready := make(chan struct{})
	var readyOnce sync.Once
	hook := func(sub rueidis.PubSubSubscription) {
		if sub.Kind == "subscribe" || sub.Kind == "ssubscribe" {
			s.subscribed.Store(true)
			readyOnce.Do(func() { close(ready) })
		}
	}
	first := make(chan error, 1)
	watching := f.spawn(func() { // end the run when the Fleet closes
		select {
		case <-f.done:
			cancel(ErrClosed)
		case <-runCtx.Done():
		}
	})
	if !watching || !f.spawn(func() { s.run(rueidis.WithOnSubscriptionHook(runCtx, hook), ready, first) }) {
		cancel(ErrClosed)
		return nil, opErr("subscribe", topic, ErrClosed)
	}
	select {
	case <-ready:
		return s, nil
	case err := <-first:
		s.cancel()
		<-s.done
		if err == nil {
			err = ctx.Err()
		}
		return nil, opErr("subscribe", topic, err)
	}
}

// run receives until runCtx ends, resubscribing after failures. Before the
// first confirmed subscribe, a failure ends it, reported on first.
func (s *Subscription[T]) run(ctx context.Context, ready <-chan struct{}, first chan<- error) {
	defer close(s.done)
	defer close(s.c)
	defer s.cancel()
	bo := backoff{min: 50 * time.Millisecond, max: 5 * time.Second}
	for {
		err := s.f.client.Receive(ctx, s.subscribeCmd(), s.deliver)
		if ctx.Err() != nil {
			s.end(ctx)
			select {
			case <-ready:
			default:
				first <- s.err
			}
			return
		}
		select {
		case <-ready:
		default:
			if err == nil {
				err = errors.New("unsubscribed before the subscription was confirmed")
			}
			s.err = err
			first <- err
			return
		}
		if s.subscribed.Swap(false) {
			bo.n = 0
		}
		wait := bo.next()
		s.f.log.Warn("fleet: subscription lost; resubscribing", "topic", s.topic, "err", err, "retry_in", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			s.end(ctx)
			return
		case <-t.C:
		}
	}
}

// end records why the subscription ended.
func (s *Subscription[T]) end(ctx context.Context) {
	select {
	case <-s.f.done:
		s.err = ErrClosed
		return
	default:
	}
	if cause := context.Cause(ctx); !errors.Is(cause, errSubscriptionClosed) {
		s.err = cause
	}
}

func (s *Subscription[T]) subscribeCmd() rueidis.Completed {
	c := s.f.client
	if s.f.cluster {
		return c.B().Ssubscribe().Channel(s.channel).Build()
	}
	return c.B().Subscribe().Channel(s.channel).Build()
}

// deliver runs on the connection's reader: it never blocks.
func (s *Subscription[T]) deliver(msg rueidis.PubSubMessage) {
	var v T
	if err := json.Unmarshal([]byte(msg.Message), &v); err != nil {
		if n := s.undecodable.Add(1); logWorthy(n) {
			s.f.log.Warn("fleet: dropped a message that does not decode", "topic", s.topic, "type", fmt.Sprintf("%T", v), "err", err, "undecodable", n)
		}
		return
	}
	if pe, ok := any(&v).(*ProgressEvent); ok { // a sealed queue's value: opened where this process can
		pe.Progress = s.f.shown(pe.Queue, sealProgress, pe.Progress)
	}
	select {
	case s.c <- v:
	default:
		if n := s.dropped.Add(1); logWorthy(n) {
			s.f.log.Warn("fleet: subscription buffer full; dropped a message", "topic", s.topic, "buffer", cap(s.c), "dropped", n)
		}
	}
}

// logWorthy thins out repeated warnings: the 1st, 2nd, 4th, 8th... time.
func logWorthy(n int64) bool { return n > 0 && bits.OnesCount64(uint64(n)) == 1 }

// C returns the channel of decoded messages. It is closed when the
// subscription ends.
func (s *Subscription[T]) C() <-chan T { return s.c }

// Topic returns the subscription's topic.
func (s *Subscription[T]) Topic() string { return s.topic }

// Dropped returns how many decoded messages were dropped because the
// buffer was full.
func (s *Subscription[T]) Dropped() int64 { return s.dropped.Load() }

// Undecodable returns how many messages were dropped because they did not
// decode into T.
func (s *Subscription[T]) Undecodable() int64 { return s.undecodable.Load() }

// Close ends the subscription and waits for its goroutine; C is closed
// after. Close is idempotent.
func (s *Subscription[T]) Close() {
	s.cancel()
	<-s.done
}

// Done returns a channel closed when the subscription has ended.
func (s *Subscription[T]) Done() <-chan struct{} { return s.done }

// Err returns why the subscription ended: ctx's error when the ctx given to
// Subscribe ended, ErrClosed when the Fleet closed, nil after Close or
// while it runs.
func (s *Subscription[T]) Err() error {
	select {
	case <-s.done:
		return s.err
	default:
		return nil
	}
}
