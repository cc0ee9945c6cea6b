package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/adjust/rmq/v5"
	"github.com/redis/go-redis/v9"
)

// rmqInst is rmq on a queue of its own, through a go-redis client that it
// closes at the end (rmq has no way to stop a connection's heartbeat; with
// its client closed the heartbeat fails without a word to the server).
// prefetch and poll are StartConsuming's; poolSize is go-redis's PoolSize
// (0: its default, 10 per GOMAXPROCS, what rmq.OpenConnection gets). conns
// connections consume the queue, each with its own fetcher (one
// RPOPLPUSH at a time), prefetch buffer and unacked list, and a share of
// the consumers, as several consumer processes would.
type rmqInst struct {
	rc       *redis.Client
	conns    []rmq.Connection
	qs       []rmq.Queue
	errs     chan error
	prefetch func(w int) int64
	poll     time.Duration
}

func openRmq(prefetch func(w int) int64, poll time.Duration, poolSize func(env) int, conns int) func(context.Context, env) (instance, error) {
	return func(_ context.Context, e env) (instance, error) {
		rc := redis.NewClient(&redis.Options{Addr: e.addr, PoolSize: poolSize(e)})
		// The README's advice: pass an error channel. It is never read
		// during a window; its length is the count of background errors.
		s := &rmqInst{rc: rc, errs: make(chan error, 1000), prefetch: prefetch, poll: poll}
		name := fmt.Sprintf("bench%d", time.Now().UnixNano())
		for range max(conns, 1) {
			conn, err := rmq.OpenConnectionWithRedisClient("bench", rc, s.errs)
			if err != nil {
				rc.Close()
				return nil, err
			}
			q, err := conn.OpenQueue(name)
			if err != nil {
				rc.Close()
				return nil, err
			}
			s.conns, s.qs = append(s.conns, conn), append(s.qs, q)
		}
		return s, nil
	}
}

func (s *rmqInst) submit(_ context.Context, j job) error {
	b, err := json.Marshal(j)
	if err != nil {
		return err
	}
	return s.qs[0].PublishBytes(b)
}

// consume starts consuming on each connection with the instance's
// prefetch (split between the connections) and poll, and adds w consumers
// in all, each handling one delivery at a time and acking it.
func (s *rmqInst) consume(_ context.Context, w int, t *tally, _ bool) (func(), error) {
	k := len(s.qs)
	for i, q := range s.qs {
		if err := q.StartConsuming(max(s.prefetch(w)/int64(k), 1), s.poll); err != nil {
			return nil, err
		}
		for range w/k + min(max(w%k-i, 0), 1) {
			_, err := q.AddConsumerFunc("c", func(d rmq.Delivery) {
				var j job
				if err := json.Unmarshal([]byte(d.Payload()), &j); err != nil {
					t.fail(err)
					_ = d.Reject()
					return
				}
				t.start(j.Seq, j.T)
				if err := d.Ack(); err != nil {
					t.fail(fmt.Errorf("rmq ack: %w", err))
					return
				}
				t.end(j.Seq)
			})
			if err != nil {
				return nil, err
			}
		}
	}
	return func() {
		for _, c := range s.conns {
			<-c.StopAllConsuming()
		}
		for n := len(s.errs); n > 0; n-- {
			t.fail(<-s.errs)
		}
	}, nil
}

func (s *rmqInst) close() { _ = s.rc.Close() }
