package fleettest_test

import (
	"context"
	"fmt"
	"log"

	"github.com/fleet-go/fleet/fleettest"
)

func ExampleStart() {
	ctx := context.Background()
	srv, err := fleettest.Start(ctx) // FLEET_REDIS_URL, else redis-server from PATH, else Docker
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()

	// Assert what code under test left in Redis, go-redis style.
	rc := srv.Compat()
	_ = rc.HSet(ctx, "example:wkr:pages:w1:state", "state", "IDLE").Err()
	state, _ := rc.HGet(ctx, "example:wkr:pages:w1:state", "state").Result()
	fmt.Println(state)
	_ = rc.Del(ctx, "example:wkr:pages:w1:state").Err()
	// Output: IDLE
}
