// Command cookies is the pool walkthrough of fleet's own design, runnable offline. A fake
// site (an httptest server) answers 403 to a request without a clearance
// cookie, or with one it no longer honours (each clearance serves a few
// pages). A harvester fills a pool of clearance cookies, one per harvest
// request on its queue; scrapers claim a fresh cookie for their site, fetch
// with it, mark it bad on 403, and ask the harvester for a new one when the
// pool has none (a dedup key folds their requests into one).
//
//	go run ./examples/cookies -scrapers 8 -pages 200
//
// It uses FLEET_REDIS_URL, or starts a throwaway redis-server.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/examples/internal/exredis"
)

// The contracts two automations share: a pool and a queue, by name and type.
const (
	cookiePool     = "cf-cookies"
	harvesterQueue = "cf-cookie-harvester"
)

// CfCookie is the pool's payload.
type CfCookie struct {
	Cookies   map[string]string `json:"cookies"`
	UserAgent string            `json:"user_agent"`
}

// CfCookieTags are the pool's tags: claims filter on them.
type CfCookieTags struct {
	Site  string `json:"site" fleet:"index"`
	Fresh bool   `json:"fresh" fleet:"index"`
}

// HarvestRequest is the harvester queue's task payload.
type HarvestRequest struct {
	Site string `json:"site" validate:"required,hostname"`
}

func main() {
	scrapers := flag.Int("scrapers", 8, "concurrent scrapers")
	pages := flag.Int("pages", 200, "pages to fetch in all")
	uses := flag.Int("uses", 15, "pages a clearance serves before the site rejects it")
	site := flag.String("site", "example.org", "the site")
	flag.Parse()
	if err := run(*scrapers, *pages, *uses, *site); err != nil {
		log.Fatal(err)
	}
}

// fakeSite hands out clearances and honours each for a number of pages.
type fakeSite struct {
	mu    sync.Mutex
	uses  int
	valid map[string]int // clearance -> pages left
}

func (s *fakeSite) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.URL.Path == "/challenge" { // solving the challenge yields a clearance
		var b [8]byte
		_, _ = rand.Read(b[:])
		c := hex.EncodeToString(b[:])
		s.valid[c] = s.uses
		fmt.Fprint(w, c)
		return
	}
	ck, err := r.Cookie("cf_clearance")
	if err != nil || s.valid[ck.Value] <= 0 {
		http.Error(w, "clearance required", http.StatusForbidden)
		return
	}
	s.valid[ck.Value]--
	fmt.Fprint(w, "<html>page</html>")
}

func run(scrapers, pages, uses int, site string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := httptest.NewServer(&fakeSite{uses: uses, valid: map[string]int{}})
	defer srv.Close()

	f, done, err := exredis.Open(ctx, "cookies")
	if err != nil {
		return err
	}
	defer done()
	pool := fleet.NewPool[CfCookie, CfCookieTags](f, cookiePool, fleet.PoolOptions{})
	harvests := fleet.NewQueue[HarvestRequest](f, harvesterQueue, fleet.QueueOptions{Lease: 10 * time.Second})

	// The harvester: one task, one fresh cookie in the pool.
	hctx, hcancel := context.WithCancel(ctx)
	defer hcancel()
	var harvested atomic.Int64
	harvesterDone := make(chan error, 1)
	go func() { harvesterDone <- harvest(hctx, srv.URL, pool, harvests, &harvested) }()

	// The scrapers.
	var fetched, rejected, asked atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, scrapers)
	for range scrapers {
		wg.Go(func() {
			for fetched.Load() < int64(pages) {
				if err := scrape(ctx, srv.URL, site, pool, harvests, &fetched, &rejected, &asked); err != nil {
					errc <- err
					return
				}
			}
		})
	}
	wg.Wait()
	hcancel()
	close(errc)
	if err := errors.Join(<-errc, <-harvesterDone); err != nil {
		return err
	}
	left, err := pool.Size(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("pages=%d harvested=%d rejected=%d harvest_requests=%d cookies_left=%d\n",
		fetched.Load(), harvested.Load(), rejected.Load(), asked.Load(), left)
	if fetched.Load() < int64(pages) || harvested.Load() < 1 {
		return fmt.Errorf("fetched %d of %d pages with %d harvests", fetched.Load(), pages, harvested.Load())
	}
	return nil
}

// scrape fetches one page with a claimed cookie, or asks for a harvest.
func scrape(ctx context.Context, base, site string, pool *fleet.Pool[CfCookie, CfCookieTags],
	harvests *fleet.Queue[HarvestRequest], fetched, rejected, asked *atomic.Int64) error {
	claimed, err := pool.Where(fleet.Eq("site", site), fleet.Eq("fresh", true)).Do(ctx,
		fleet.ClaimOptions{Hold: 20 * time.Second, Wait: 200 * time.Millisecond},
		func(ctx context.Context, c *fleet.Claim[CfCookie, CfCookieTags]) error {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/page", nil)
			req.Header.Set("User-Agent", c.Item.Payload.UserAgent)
			req.AddCookie(&http.Cookie{Name: "cf_clearance", Value: c.Item.Payload.Cookies["cf_clearance"]})
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode == http.StatusForbidden {
				rejected.Add(1)
				return c.MarkBad(ctx, "clearance rejected")
			}
			fetched.Add(1)
			return nil
		})
	if err != nil || claimed {
		return err
	}
	// The pool has no fresh cookie: ask the harvester (one request per site
	// at a time, whoever asks), and wait for the put on the next claim.
	asked.Add(1)
	_, err = harvests.SubmitWith(ctx, HarvestRequest{Site: site}, fleet.SubmitOptions{DedupKey: site})
	return err
}

// harvest solves challenges for harvest requests until ctx ends.
func harvest(ctx context.Context, base string, pool *fleet.Pool[CfCookie, CfCookieTags],
	harvests *fleet.Queue[HarvestRequest], harvested *atomic.Int64) error {
	for ctx.Err() == nil {
		tasks, err := harvests.Reserve(ctx, 1, time.Second)
		if err != nil {
			return stopped(ctx, err)
		}
		for _, t := range tasks {
			resp, err := http.Get(base + "/challenge")
			if err != nil {
				_ = t.Nack(ctx, err)
				continue
			}
			var clearance [16]byte
			n, _ := resp.Body.Read(clearance[:])
			resp.Body.Close()
			cookie := CfCookie{Cookies: map[string]string{"cf_clearance": string(clearance[:n])}, UserAgent: "Mozilla/5.0 (fleet example)"}
			if _, err := pool.Put(ctx, cookie, CfCookieTags{Site: t.Payload.Site, Fresh: true}, 25*time.Minute); err != nil {
				return stopped(ctx, err)
			}
			harvested.Add(1)
			if err := t.Ack(ctx); err != nil {
				return stopped(ctx, err)
			}
		}
	}
	return nil
}

// stopped is nil when err only says the harvester was told to stop.
func stopped(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}
