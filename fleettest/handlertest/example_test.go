package handlertest_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleettest"
	"github.com/fleet-go/fleet/fleettest/handlertest"
)

// Resize is the payload of the handler under test.
type Resize struct {
	Width int `json:"width" validate:"min=1"`
}

// resize is the handler under test: it halves a width, reports its
// progress and emits a line; a width it can never handle is a permanent
// failure.
var resize = fleet.BatchResultFunc[struct{}, string, Resize, int](
	func(ctx context.Context, s *fleet.Slot[struct{}, string], t *fleet.Task[Resize]) (int, error) {
		if t.Payload.Width > 4096 {
			return 0, fmt.Errorf("%w: width %d is over 4096", fleet.ErrPermanent, t.Payload.Width)
		}
		fleet.Logger(ctx).Info("resizing", "width", t.Payload.Width) // kept with the task, and in Outcome.Logs
		if err := t.Progress(ctx, 50); err != nil {
			return 0, err
		}
		if _, err := s.Emit(ctx, "resized"); err != nil {
			return 0, err
		}
		return t.Payload.Width / 2, nil
	})

// A handler's unit test: each case is one call of Run, whose Outcome says
// how the run ended and what it left. In a test, t.Fatal stands for
// log.Fatal.
func ExampleRun() {
	ctx := context.Background()
	srv, err := fleettest.Start(ctx) // FLEET_REDIS_URL, else redis-server from PATH, else Docker
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	f, err := fleet.Open(ctx, fleet.Options{URL: srv.URL(), Prefix: "example-handlertest:"})
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()

	out, err := handlertest.Run(ctx, f, resize, Resize{Width: 800}, handlertest.Options{})
	if err != nil {
		log.Fatal(err)
	}
	half, err := handlertest.ResultAs[int](out)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(out.Kind, half, string(out.Progress[0]), string(out.Emitted[0]), out.Logs[0].Message)

	out, err = handlertest.Run(ctx, f, resize, Resize{Width: 8000}, handlertest.Options{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(out.Kind, out.Reason)

	_, err = handlertest.Run(ctx, f, resize, Resize{Width: 0}, handlertest.Options{})
	fmt.Println(errors.Is(err, fleet.ErrInvalidPayload)) // the payload fails validation: nothing ran
	// Output:
	// acked 400 50 "resized" resizing
	// dead-lettered fleet: permanent failure: width 8000 is over 4096
	// true
}
