package fleet_test

import (
	"context"
	"fmt"
	"time"

	"github.com/fleet-go/fleet"
)

// CfCookie and CfCookieTags are a pool's contract: payload and tags.
type CfCookie struct {
	Cookies   map[string]string `json:"cookies"`
	UserAgent string            `json:"user_agent"`
}

type CfCookieTags struct {
	Site  string `json:"site"`
	Fresh bool   `json:"fresh"`
}

func ExamplePool() {
	ctx := context.Background()
	f, done := exampleFleet("pool")
	defer done()
	pool := fleet.NewPool[CfCookie, CfCookieTags](f, "cf-cookies", fleet.PoolOptions{})

	// producer
	_, err := pool.Put(ctx, CfCookie{Cookies: map[string]string{"cf_clearance": "abc"}, UserAgent: "Mozilla/5.0"},
		CfCookieTags{Site: "x", Fresh: true}, 25*time.Minute)
	if err != nil {
		fmt.Println(err)
		return
	}

	// consumer: an exclusive claim with a 20 s lease, always released
	claimed, err := pool.Where(fleet.Eq("site", "x"), fleet.Eq("fresh", true)).Do(ctx, fleet.ClaimOptions{Hold: 20 * time.Second},
		func(ctx context.Context, c *fleet.Claim[CfCookie, CfCookieTags]) error {
			fmt.Println("cookie:", c.Item.Payload.Cookies["cf_clearance"], "site:", c.Item.Tags.Site)
			return c.MarkBad(ctx, "clearance rejected") // gone for every reader
		})
	fmt.Println("claimed:", claimed, err)

	// an unknown field is an error at the call
	fmt.Println(pool.Where(fleet.Eq("sight", "x")).Err())
	// Output:
	// cookie: abc site: x
	// claimed: true <nil>
	// fleet: pool where "cf-cookies": unknown tag field: "sight" is not a JSON field of the tags type
}
