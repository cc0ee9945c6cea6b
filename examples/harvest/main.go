// Command harvest runs a small fleet of scraper workers that share three
// primitives: a Counter of requests in flight, a KV holding when the site's
// clearance was last harvested, and a Lock so that only one worker anywhere
// re-harvests a stale clearance while the others carry on.
//
//	go run ./examples/harvest -workers 8 -requests 200
//
// It uses FLEET_REDIS_URL, or starts a throwaway redis-server.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/examples/internal/exredis"
)

type clearance struct {
	Site      string    `json:"site"`
	Harvested time.Time `json:"harvested"`
}

func main() {
	workers := flag.Int("workers", 8, "concurrent workers")
	requests := flag.Int("requests", 200, "requests per worker")
	fresh := flag.Duration("fresh", 50*time.Millisecond, "how long a harvested clearance stays fresh")
	site := flag.String("site", "example.org", "the site to scrape")
	flag.Parse()
	if err := run(*workers, *requests, *fresh, *site); err != nil {
		log.Fatal(err)
	}
}

func run(workers, requests int, fresh time.Duration, site string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f, done, err := exredis.Open(ctx, "harvest")
	if err != nil {
		return err
	}
	defer done()

	inflight := f.Counter("scraper:inflight")
	harvests := f.Counter("harvester:runs")
	state := f.KV("harvester-state")
	var peak atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for range requests {
				if err := scrape(ctx, f, inflight, harvests, state, &peak, fresh, site); err != nil {
					errc <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		return err
	}
	left, err := inflight.Get(ctx)
	if err != nil {
		return err
	}
	runs, err := harvests.Get(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("site=%s requests=%d harvests=%d peak_inflight=%d inflight_after=%d\n",
		site, workers*requests, runs, peak.Load(), left)
	if left != 0 || runs < 1 {
		return fmt.Errorf("in-flight counter ended at %d (want 0), harvests %d (want >= 1)", left, runs)
	}
	return nil
}

// scrape is one request: count it in flight, make sure the clearance is
// fresh (harvesting under the lock when it is not), then "fetch".
func scrape(ctx context.Context, f *fleet.Fleet, inflight, harvests *fleet.Counter, state *fleet.KV, peak *atomic.Int64, fresh time.Duration, site string) error {
	n, err := inflight.Incr(ctx)
	if err != nil {
		return err
	}
	defer inflight.Decr(context.WithoutCancel(ctx))
	for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
	}
	if _, ok, err := fleet.GetAs[clearance](ctx, state, site); err != nil {
		return err
	} else if !ok {
		// Stale: one worker harvests; the others do not wait for it.
		err := f.Lock("harvest:"+site).Do(ctx, fleet.LockOptions{Hold: 5 * time.Second}, func(ctx context.Context, l *fleet.Lease) error {
			if _, ok, err := state.Get(ctx, site); err != nil || ok {
				return err // another worker harvested meanwhile
			}
			time.Sleep(2 * time.Millisecond) // the harvest itself
			if _, err := harvests.Incr(ctx); err != nil {
				return err
			}
			return state.Set(ctx, site, clearance{Site: site, Harvested: time.Now()}, fresh)
		})
		if err != nil && !errors.Is(err, fleet.ErrNotObtained) {
			return err
		}
	}
	time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond) // the fetch
	return nil
}
