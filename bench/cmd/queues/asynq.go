package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"time"

	"github.com/hibiken/asynq"
)

// asynqInst is asynq on a queue of its own. check is Config.TaskCheckInterval
// (0: asynq's default, 1 s); poolSize is RedisClientOpt.PoolSize (0:
// go-redis's default, 10 per GOMAXPROCS), for the client and the servers
// alike. servers Servers share the handlers, each with its own processor
// (one dequeue script at a time), as several worker processes would.
type asynqInst struct {
	opt     asynq.RedisClientOpt
	client  *asynq.Client
	queue   string
	check   time.Duration
	servers int
}

func openAsynq(check time.Duration, poolSize func(env) int, servers int) func(context.Context, env) (instance, error) {
	return func(_ context.Context, e env) (instance, error) {
		opt := asynq.RedisClientOpt{Addr: e.addr, PoolSize: poolSize(e)}
		return &asynqInst{opt: opt, client: asynq.NewClient(opt), queue: fmt.Sprintf("bench%d", time.Now().UnixNano()),
			check: check, servers: max(servers, 1)}, nil
	}
}

func (s *asynqInst) submit(_ context.Context, j job) error {
	b, err := json.Marshal(j)
	if err != nil {
		return err
	}
	_, err = s.client.Enqueue(asynq.NewTask("tiny", b), asynq.Queue(s.queue))
	return err
}

// consume starts the Servers, w workers in all. asynq says nothing after a
// task's ack, so a task counts done when its handler returns nil.
func (s *asynqInst) consume(_ context.Context, w int, t *tally, _ bool) (func(), error) {
	var srvs []*asynq.Server
	stop := func() {
		for _, srv := range srvs {
			srv.Shutdown()
		}
	}
	for i := range s.servers {
		srv := asynq.NewServer(s.opt, asynq.Config{
			Concurrency:       w/s.servers + min(max(w%s.servers-i, 0), 1),
			Queues:            map[string]int{s.queue: 1},
			TaskCheckInterval: s.check,
			Logger:            quietLogger{},
			LogLevel:          asynq.ErrorLevel,
		})
		err := srv.Start(asynq.HandlerFunc(func(_ context.Context, task *asynq.Task) error {
			var j job
			if err := json.Unmarshal(task.Payload(), &j); err != nil {
				t.fail(err)
				return err
			}
			t.handled(j.Seq, j.T)
			return nil
		}))
		if err != nil {
			stop()
			return nil, err
		}
		srvs = append(srvs, srv)
	}
	return stop, nil
}

func (s *asynqInst) close() { _ = s.client.Close() }

// quietLogger keeps asynq's chatter out of the figures; its errors go to
// stderr.
type quietLogger struct{}

func (quietLogger) Debug(args ...any) {}
func (quietLogger) Info(args ...any)  {}
func (quietLogger) Warn(args ...any)  {}
func (quietLogger) Error(args ...any) { log.Print("asynq: ", fmt.Sprint(args...)) }
func (quietLogger) Fatal(args ...any) { log.Fatal(args...) }
