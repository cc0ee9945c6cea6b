package fleet_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/fleet-go/fleet"
)

// Card is a payload to keep out of Redis in the clear.
type Card struct {
	Number string `json:"number" validate:"required"`
}

// A queue whose payloads and results are sealed with AES-256-GCM: the
// Keyring seals with its newest key and opens with any, so a key is
// rotated by adding the new one first, everywhere, and dropping the old
// one once no task sealed with it is left. Keys come from your secret
// store; these are fixed for the example.
func ExampleNewKeyring() {
	f, done := exampleFleet("seal")
	defer done()
	ctx := context.Background()
	oldKey := fleet.Key{ID: "2026-11", Secret: []byte("an example key, 32 bytes long..!")}
	newKey := fleet.Key{ID: "2026-12", Secret: []byte("another example key, 32 bytes..!")}
	kr, err := fleet.NewKeyring(newKey, oldKey)
	if err != nil {
		panic(err)
	}
	q := fleet.NewQueue[Card](f, "payments", fleet.QueueOptions{Sealer: kr, Retention: time.Hour})
	id, err := q.Submit(ctx, Card{Number: "4111 1111 1111 1111"})
	if err != nil {
		panic(err)
	}

	// What Redis holds, and what this process reads.
	pending, _ := f.Client().Do(ctx, f.Client().B().Lindex().Key("fleet:queue:payments").Index(0).Build()).ToString()
	fmt.Println("in the clear in Redis:", strings.Contains(pending, "4111"))
	rec, _ := q.Lookup(ctx, id)
	fmt.Println("Lookup here:", string(rec.Payload))

	tasks, _ := q.Reserve(ctx, 1, time.Second)
	t := tasks[0]
	_ = t.SetResult("charged " + t.Payload.Number[len(t.Payload.Number)-4:])
	_ = t.Ack(ctx)
	res, _ := fleet.ResultOf[string](ctx, q, id)
	fmt.Println("result:", res)

	// Output:
	// in the clear in Redis: false
	// Lookup here: {"number":"4111 1111 1111 1111"}
	// result: charged 1111
}
