package fleet_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/fleet-go/fleet"
)

func ExampleNewBatchWorker() {
	f, done := exampleFleet("batchworker")
	defer done()
	ctx := context.Background()

	type Page struct {
		URL string `json:"url" validate:"required,url"`
	}
	type Config struct {
		UserAgent string `json:"user_agent" validate:"required"`
	}
	type Result struct {
		URL string `json:"url"`
	}
	q := fleet.NewQueue[Page](f, "pages", fleet.QueueOptions{})
	w := fleet.NewBatchWorker(f, fleet.WorkerOptions{Type: "pages", ID: "w1", Slots: 2, Config: Config{UserAgent: "bot/1"}}, q,
		fleet.BatchFunc[Config, Result, Page](func(ctx context.Context, s *fleet.Slot[Config, Result], t *fleet.Task[Page]) error {
			// s.Config() is the live config; s.Fleet() gives the primitives.
			_, err := s.Emit(ctx, Result{URL: t.Payload.URL})
			return err
		}))
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	_, _ = q.SubmitMany(ctx, []Page{{URL: "https://example.org/1"}, {URL: "https://example.org/2"}, {URL: "https://example.org/3"}})
	for w.Stats().Done < 3 {
		time.Sleep(5 * time.Millisecond)
	}
	_ = w.Stop(ctx)
	st := w.Stats()
	fmt.Printf("done=%d failed=%d emitted=%d\n", st.Done, st.Failed, st.Emitted)
	// Output: done=3 failed=0 emitted=3
}

func ExampleNewLoopWorker() {
	f, done := exampleFleet("loopworker")
	defer done()
	ctx := context.Background()

	type Config struct {
		Step int `json:"step" validate:"gte=1"`
	}
	type Tick struct {
		N int `json:"n"`
	}
	w := fleet.NewLoopWorker(f, fleet.WorkerOptions{Type: "ticker", ID: "t1", Slots: 1, Config: Config{Step: 10}},
		fleet.LoopFunc[Config, Tick](func(ctx context.Context, s *fleet.Slot[Config, Tick]) error {
			for i := range 3 {
				if _, err := s.Emit(ctx, Tick{N: i * s.Config().Step}); err != nil {
					return err
				}
			}
			<-ctx.Done() // run until stopped
			return nil
		}))
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	for w.Stats().Emitted < 3 {
		time.Sleep(5 * time.Millisecond)
	}
	_ = w.Stop(ctx)
	entries, _ := fleet.NewStream[Tick](f, "ticker", fleet.StreamOptions{}).Pop(ctx, 10)
	for _, e := range entries {
		fmt.Println(e.Data.N)
	}
	// Output:
	// 0
	// 10
	// 20
}

func ExampleFleet_UpdateConfig() {
	f, done := exampleFleet("updateconfig")
	defer done()
	ctx := context.Background()

	// The worker registers itself (wkr:scraper:host1:*) when it starts.
	w := fleet.NewLoopWorker(f, fleet.WorkerOptions{Type: "scraper", ID: "host1", Slots: 1},
		fleet.LoopFunc[map[string]any, struct{}](func(ctx context.Context, s *fleet.Slot[map[string]any, struct{}]) error {
			<-ctx.Done()
			return nil
		}))
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer w.Stop(ctx)

	_, _ = f.UpdateConfig(ctx, "scraper", "host1", json.RawMessage(`{"proxy":{"host":"p1","port":1080},"debug":true}`))
	// Objects merge, null deletes.
	gen, _ := f.UpdateConfig(ctx, "scraper", "host1", json.RawMessage(`{"proxy":{"port":1081},"debug":null}`))
	cfg, _, _ := f.WorkerConfig(ctx, "scraper", "host1")
	fmt.Println(gen, string(cfg))

	// A push with a gen not above the current one is refused.
	err := f.PushConfig(ctx, "scraper", "host1", map[string]any{"proxy": nil}, 2)
	fmt.Println(errors.Is(err, fleet.ErrStaleGen))
	// A worker that never registered is refused: a typo writes nothing.
	_, err = f.UpdateConfig(ctx, "scraper", "host2", json.RawMessage(`{}`))
	fmt.Println(errors.Is(err, fleet.ErrWorkerNotFound))
	// Output:
	// 2 {"proxy":{"host":"p1","port":1081}}
	// true
	// true
}

func ExampleWorker_SetSlots() {
	f, done := exampleFleet("setslots")
	defer done()
	ctx := context.Background()

	q := fleet.NewQueue[string](f, "thumbs", fleet.QueueOptions{})
	w := fleet.NewBatchWorker(f, fleet.WorkerOptions{Type: "thumbs", ID: "w1", Slots: 8}, q,
		fleet.TaskFunc(func(ctx context.Context, path string) error { return nil }))
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer w.Stop(ctx)

	// Fewer at once: the running tasks finish, and no task starts while 2
	// or more run.
	if err := w.SetSlots(2); err != nil {
		log.Fatal(err)
	}
	fmt.Println(w.Slots(), w.Stats().Slots)

	// A pushed config's "slots" member resizes the worker too.
	if _, err := f.UpdateConfig(ctx, "thumbs", "w1", json.RawMessage(`{"slots":4}`)); err != nil {
		log.Fatal(err)
	}
	for w.Slots() != 4 {
		time.Sleep(time.Millisecond)
	}
	fmt.Println(w.Slots())

	err := w.SetSlots(0)
	fmt.Println(errors.Is(err, fleet.ErrInvalidArgument))
	// Output:
	// 2 2
	// 4
	// true
}
