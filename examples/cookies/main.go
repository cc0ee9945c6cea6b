// Command cookies is the pool walkthrough of fleet's own design, runnable
// offline. A fake web (an httptest server) serves a few sites; each answers
// 403 to a request without a clearance cookie, or with one it no longer
// honours (each clearance serves a few pages). Harvesters fill a pool of
// clearance cookies, one per harvest request on their queue; scrapers claim
// a fresh cookie for their site, fetch with it, mark it bad on 403, and ask
// for a new one when the pool has none (a dedup key per site and scraper
// lane folds their requests).
//
// Fleet-wide limits keep the fleet polite: a Limiter per site paces the
// fetches (-rate per second, whatever the number of scrapers), and a
// Semaphore per site bounds the challenges being solved at once
// (-harvest-limit, whatever the number of harvesters). The fake web
// measures both and the summary line reports what it saw.
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
	"slices"
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
	harvesters := flag.Int("harvesters", 4, "concurrent harvesters")
	pages := flag.Int("pages", 200, "pages to fetch in all")
	uses := flag.Int("uses", 15, "pages a clearance serves before the site rejects it")
	sites := flag.Int("sites", 2, "sites to scrape (site1.example, site2.example, ...)")
	rate := flag.Int("rate", 40, "fetches per second per site, fleet-wide")
	harvestLimit := flag.Int("harvest-limit", 2, "challenges solved at once per site, fleet-wide")
	flag.Parse()
	cfg := config{scrapers: *scrapers, harvesters: *harvesters, pages: *pages, uses: *uses, rate: *rate, harvestLimit: *harvestLimit}
	for i := range *sites {
		cfg.sites = append(cfg.sites, fmt.Sprintf("site%d.example", i+1))
	}
	if err := run(cfg); err != nil {
		log.Fatal(err)
	}
}

// config is what the flags say.
type config struct {
	scrapers, harvesters, pages, uses int
	sites                             []string
	rate, harvestLimit                int
}

// fakeSite hands out clearances and honours each for a number of pages. It
// records when each site was fetched and how many challenges of a site were
// being solved at once, to check the fleet's limits from the outside.
type fakeSite struct {
	mu      sync.Mutex
	uses    int
	valid   map[string]int         // clearance -> pages left
	fetches map[string][]time.Time // site -> when its pages were asked for
	solving map[string]int         // site -> challenges being solved now
	most    map[string]int         // site -> the most solved at once
}

func newFakeSite(uses int) *fakeSite {
	return &fakeSite{uses: uses, valid: map[string]int{}, fetches: map[string][]time.Time{},
		solving: map[string]int{}, most: map[string]int{}}
}

func (s *fakeSite) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	site := r.URL.Query().Get("site")
	if r.URL.Path == "/challenge" { // solving the challenge yields a clearance
		s.mu.Lock()
		s.solving[site]++
		s.most[site] = max(s.most[site], s.solving[site])
		s.mu.Unlock()
		time.Sleep(20 * time.Millisecond) // solving takes a while
		var b [8]byte
		_, _ = rand.Read(b[:])
		c := hex.EncodeToString(b[:])
		s.mu.Lock()
		s.solving[site]--
		s.valid[c] = s.uses
		s.mu.Unlock()
		fmt.Fprint(w, c)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fetches[site] = append(s.fetches[site], time.Now())
	ck, err := r.Cookie("cf_clearance")
	if err != nil || s.valid[ck.Value] <= 0 {
		http.Error(w, "clearance required", http.StatusForbidden)
		return
	}
	s.valid[ck.Value]--
	fmt.Fprint(w, "<html>page</html>")
}

// busiest returns the most fetches of one site within any second, and the
// most challenges of one site solved at once.
func (s *fakeSite) busiest() (fetches, solving int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ts := range s.fetches {
		ts = slices.Clone(ts)
		slices.SortFunc(ts, time.Time.Compare)
		j := 0
		for i := range ts {
			for ts[i].Sub(ts[j]) >= time.Second {
				j++
			}
			fetches = max(fetches, i-j+1)
		}
	}
	for _, n := range s.most {
		solving = max(solving, n)
	}
	return fetches, solving
}

func run(cfg config) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	web := newFakeSite(cfg.uses)
	srv := httptest.NewServer(web)
	defer srv.Close()

	f, done, err := exredis.Open(ctx, "cookies")
	if err != nil {
		return err
	}
	defer done()
	pool := fleet.NewPool[CfCookie, CfCookieTags](f, cookiePool, fleet.PoolOptions{})
	harvests := fleet.NewQueue[HarvestRequest](f, harvesterQueue, fleet.QueueOptions{Lease: 10 * time.Second})

	// The harvesters: one task, one fresh cookie in the pool; at most
	// harvestLimit challenges per site at once, fleet-wide.
	hctx, hcancel := context.WithCancel(ctx)
	defer hcancel()
	var harvested atomic.Int64
	harvestErrs := make(chan error, cfg.harvesters)
	for range cfg.harvesters {
		go func() { harvestErrs <- harvest(hctx, f, cfg.harvestLimit, srv.URL, pool, harvests, &harvested) }()
	}

	// The scrapers: each on one site, all of a site's fetches paced by one
	// limiter, fleet-wide.
	var fetched, rejected, asked atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, cfg.scrapers)
	for i := range cfg.scrapers {
		site := cfg.sites[i%len(cfg.sites)]
		lane := fmt.Sprintf("%s#%d", site, i/len(cfg.sites)%cfg.harvesters)
		limit := f.Limiter("fetch:"+site, fleet.LimitOptions{Rate: cfg.rate})
		wg.Go(func() {
			for fetched.Load() < int64(cfg.pages) {
				if err := scrape(ctx, srv.URL, site, lane, limit, pool, harvests, &fetched, &rejected, &asked); err != nil {
					errc <- err
					return
				}
			}
		})
	}
	wg.Wait()
	hcancel()
	close(errc)
	errs := []error{<-errc}
	for range cfg.harvesters {
		errs = append(errs, <-harvestErrs)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	left, err := pool.Size(ctx)
	if err != nil {
		return err
	}
	most, solving := web.busiest()
	fmt.Printf("pages=%d harvested=%d rejected=%d harvest_requests=%d cookies_left=%d\n",
		fetched.Load(), harvested.Load(), rejected.Load(), asked.Load(), left)
	fmt.Printf("max_fetches_per_site_1s=%d rate=%d max_harvests_per_site=%d harvest_limit=%d\n",
		most, cfg.rate, solving, cfg.harvestLimit)
	if fetched.Load() < int64(cfg.pages) || harvested.Load() < 1 {
		return fmt.Errorf("fetched %d of %d pages with %d harvests", fetched.Load(), cfg.pages, harvested.Load())
	}
	return nil
}

// scrape fetches one page of site with a claimed cookie, once the site's
// limiter lets it, or asks for a harvest (one request per lane at a time,
// whoever asks).
func scrape(ctx context.Context, base, site, lane string, limit *fleet.Limiter, pool *fleet.Pool[CfCookie, CfCookieTags],
	harvests *fleet.Queue[HarvestRequest], fetched, rejected, asked *atomic.Int64) error {
	claimed, err := pool.Where(fleet.Eq("site", site), fleet.Eq("fresh", true)).Do(ctx,
		fleet.ClaimOptions{Hold: 20 * time.Second, Wait: 200 * time.Millisecond},
		func(ctx context.Context, c *fleet.Claim[CfCookie, CfCookieTags]) error {
			if err := limit.Wait(ctx, 1); err != nil {
				return err
			}
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/page?site="+site, nil)
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
	// The pool has no fresh cookie for the site: ask the harvesters, and
	// wait for the put on the next claim.
	asked.Add(1)
	_, err = harvests.SubmitWith(ctx, HarvestRequest{Site: site}, fleet.SubmitOptions{DedupKey: lane})
	return err
}

// harvest solves challenges for harvest requests until ctx ends, holding
// one of the site's harvestLimit permits while it solves.
func harvest(ctx context.Context, f *fleet.Fleet, harvestLimit int, base string, pool *fleet.Pool[CfCookie, CfCookieTags],
	harvests *fleet.Queue[HarvestRequest], harvested *atomic.Int64) error {
	for ctx.Err() == nil {
		tasks, err := harvests.Reserve(ctx, 1, time.Second)
		if err != nil {
			return stopped(ctx, err)
		}
		for _, t := range tasks {
			site := t.Payload.Site
			permit, err := f.Semaphore("harvest:"+site, harvestLimit).Acquire(ctx, fleet.SemaphoreOptions{Hold: 10 * time.Second, Wait: 5 * time.Second})
			if err != nil {
				_ = t.Release(context.WithoutCancel(ctx))
				return stopped(ctx, err)
			}
			clearance, err := solve(ctx, base, site)
			if rerr := permit.Release(context.WithoutCancel(ctx)); rerr != nil {
				return rerr
			}
			if err != nil {
				_ = t.Nack(ctx, err)
				continue
			}
			cookie := CfCookie{Cookies: map[string]string{"cf_clearance": clearance}, UserAgent: "Mozilla/5.0 (fleet example)"}
			if _, err := pool.Put(ctx, cookie, CfCookieTags{Site: site, Fresh: true}, 25*time.Minute); err != nil {
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

// solve solves the site's challenge and returns the clearance.
func solve(ctx context.Context, base, site string) (string, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/challenge?site="+site, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var clearance [16]byte
	n, _ := resp.Body.Read(clearance[:])
	return string(clearance[:n]), nil
}

// stopped is nil when err only says the harvester was told to stop.
func stopped(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}
