package fleet_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"time"

	"github.com/fleet-go/fleet"
)

func ExampleStream() {
	f, done := exampleFleet("stream")
	defer done()
	ctx := context.Background()

	type page struct {
		URL  string `json:"url"`
		Code int    `json:"code"`
	}
	// stream:cf-scraper, bounded to 1,000 members and 10 minutes. Each
	// member is the output's JSON, as the documented schema says.
	s := fleet.NewStream[page](f, "cf-scraper", fleet.StreamOptions{MaxLen: 1000, MaxAge: 10 * time.Minute})
	if _, err := s.Push(ctx, page{"https://a.example", 200}); err != nil {
		log.Fatal(err)
	}
	// Two equal outputs are one member of the sorted set.
	if _, err := s.PushMany(ctx, []page{{"https://b.example", 503}, {"https://b.example", 503}}); err != nil {
		log.Fatal(err)
	}
	n, _ := s.Len(ctx)
	fmt.Println("len", n)

	peek, _ := s.Peek(ctx, 1) // the oldest, left in place
	fmt.Printf("peek %+v\n", peek[0].Data)
	entries, _ := s.Pop(ctx, 10) // oldest first
	for _, e := range entries {
		fmt.Printf("pop %+v, recent %v\n", e.Data, time.Since(e.Time) < time.Minute)
	}

	// With Envelope, each member wraps its output with an id and a time:
	// equal outputs stay two entries. Only fleet reads that form.
	w := fleet.NewStream[page](f, "cf-scraper-wrapped", fleet.StreamOptions{Envelope: true})
	if _, err := w.PushMany(ctx, []page{{"https://b.example", 503}, {"https://b.example", 503}}); err != nil {
		log.Fatal(err)
	}
	entries, _ = w.Pop(ctx, 10)
	for _, e := range entries {
		fmt.Printf("pop %+v id of %d chars\n", e.Data, len(e.ID))
	}
	// Output:
	// len 2
	// peek {URL:https://a.example Code:200}
	// pop {URL:https://a.example Code:200}, recent true
	// pop {URL:https://b.example Code:503}, recent true
	// pop {URL:https://b.example Code:503} id of 36 chars
	// pop {URL:https://b.example Code:503} id of 36 chars
}

func ExampleSubscribe() {
	f, done := exampleFleet("events")
	defer done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	type alert struct {
		Level string `json:"level"`
		Msg   string `json:"msg"`
	}
	// Subscribe returns once the server confirmed the subscription to
	// event:alerts: what is published after it is delivered.
	sub, err := fleet.Subscribe[alert](ctx, f, "alerts", fleet.SubscribeOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close()

	if err := f.Publish(ctx, "alerts", alert{"warn", "proxy pool low"}); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%+v\n", <-sub.C())

	// Emit pushes onto stream:<type> and publishes event:<type>.emit.
	s := fleet.NewStream[string](f, "harvester", fleet.StreamOptions{})
	emits, err := fleet.Subscribe[fleet.StreamEntry[string]](ctx, f, "harvester.emit", fleet.SubscribeOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer emits.Close()
	_, _ = s.Emit(ctx, "cookie jar refreshed")
	e := <-emits.C()
	fmt.Println(e.Data)
	// Output:
	// {Level:warn Msg:proxy pool low}
	// cookie jar refreshed
}

func ExampleFleet_PublishCatalog() {
	f, done := exampleFleet("catalog")
	defer done()
	ctx := context.Background()

	type config struct {
		Threads int    `json:"threads" validate:"required,min=1,max=10"`
		Mode    string `json:"mode,omitempty" validate:"oneof=fast slow"`
	}
	type output struct {
		URL string `json:"url"`
	}
	type task struct {
		URLs []string `json:"urls" validate:"required,min=1"`
	}
	err := f.PublishCatalog(ctx,
		fleet.Describe[config, output, task]("cf-scraper"),
		fleet.DescribeLoop[config, output]("watcher"), // takes no tasks
	)
	if err != nil {
		log.Fatal(err)
	}
	s, ok, err := f.CatalogSchemas(ctx, "cf-scraper")
	if err != nil || !ok {
		log.Fatal(ok, err)
	}
	var cfg struct {
		Required   []string                   `json:"required"`
		Properties map[string]json.RawMessage `json:"properties"`
	}
	_ = json.Unmarshal(s.Config, &cfg)
	fmt.Println("required:", cfg.Required)
	fmt.Println("threads:", string(cfg.Properties["threads"]))
	fmt.Println("mode:", string(cfg.Properties["mode"]))

	all, _ := f.Catalog(ctx)
	fmt.Println("watcher task_payload:", all["watcher"].TaskPayload == nil)
	// Output:
	// required: [threads]
	// threads: {"type":"integer","maximum":10,"minimum":1}
	// mode: {"type":"string","enum":["fast","slow"]}
	// watcher task_payload: true
}
