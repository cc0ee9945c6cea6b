package fleet_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleettest"
)

// BenchmarkLockPair: an uncontended acquire+release (each goroutine its own
// lock name) by fleet, beside the floor: bare rueidis SET NX PX and a Lua
// compare-and-delete, with a random token per acquisition as any lock needs.
// Both run on one server of the benchmark's own, and report the rate,
// Redis commands per pair (INFO commandstats, commands inside scripts
// included) and server CPU µs per pair (used_cpu_user+sys). fleet also
// reports its rate as a share of the floor's (x-floor), when the floor ran
// first.
//
//	go test -run '^$' -bench 'LockPair' -benchtime 5s -count 3 .
func BenchmarkLockPair(b *testing.B) {
	if err := fleettest.Available(); err != nil {
		b.Fatal(err)
	}
	s, err := fleettest.StartServer(context.Background(), fleettest.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(s.Stop)
	var floorRate float64
	b.Run("floor", func(b *testing.B) {
		opt, _ := rueidis.ParseURL(s.URL())
		c, err := rueidis.NewClient(opt)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		release := rueidis.NewLuaScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)
		var id atomic.Int64
		rate := measurePairs(b, s, func(pb *testing.PB) {
			ctx := context.Background()
			key := "floor:lock:" + strconv.FormatInt(id.Add(1), 10)
			for pb.Next() {
				tok := benchToken()
				if err := c.Do(ctx, c.B().Set().Key(key).Value(tok).Nx().Px(10*time.Second).Build()).Error(); err != nil {
					b.Fatal(err)
				}
				if n, err := release.Exec(ctx, c, []string{key}, []string{tok}).AsInt64(); err != nil || n != 1 {
					b.Fatal(n, err)
				}
			}
		})
		floorRate = rate
	})
	b.Run("fleet", func(b *testing.B) {
		f, err := fleet.Open(context.Background(), fleet.Options{URL: s.URL()})
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		var id atomic.Int64
		rate := measurePairs(b, s, func(pb *testing.PB) {
			ctx := context.Background()
			lk := f.Lock("bench:" + strconv.FormatInt(id.Add(1), 10))
			for pb.Next() {
				l, err := lk.Acquire(ctx, fleet.LockOptions{Hold: 10 * time.Second})
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
		if floorRate > 0 {
			b.ReportMetric(rate/floorRate, "x-floor")
		}
	})
}

// BenchmarkLockPairInterleaved runs fleet's pair and the floor's pair by
// turns in every goroutine and sums the time each took, so that both see
// the same load (the machine is shared): x-floor is the floor's time per
// pair over fleet's, that is fleet's rate as a share of the floor's.
//
//	go test -run '^$' -bench 'LockPairInterleaved' -benchtime 5s -count 3 .
func BenchmarkLockPairInterleaved(b *testing.B) {
	if err := fleettest.Available(); err != nil {
		b.Fatal(err)
	}
	s, err := fleettest.StartServer(context.Background(), fleettest.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(s.Stop)
	opt, _ := rueidis.ParseURL(s.URL())
	c, err := rueidis.NewClient(opt)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	f, err := fleet.Open(context.Background(), fleet.Options{URL: s.URL()})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	release := rueidis.NewLuaScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)
	var id atomic.Int64
	var fleetNs, floorNs atomic.Int64
	parallel(b, func(pb *testing.PB) {
		ctx := context.Background()
		n := strconv.FormatInt(id.Add(1), 10)
		lk, key := f.Lock("bench:"+n), "floor:lock:"+n
		var fl, fr time.Duration
		for pb.Next() {
			t0 := time.Now()
			l, err := lk.Acquire(ctx, fleet.LockOptions{Hold: 10 * time.Second})
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			tok := benchToken()
			if err := c.Do(ctx, c.B().Set().Key(key).Value(tok).Nx().Px(10*time.Second).Build()).Error(); err != nil {
				b.Fatal(err)
			}
			if n, err := release.Exec(ctx, c, []string{key}, []string{tok}).AsInt64(); err != nil || n != 1 {
				b.Fatal(n, err)
			}
			fl, fr = fl+t1.Sub(t0), fr+time.Since(t1)
		}
		fleetNs.Add(int64(fl))
		floorNs.Add(int64(fr))
	})
	b.StopTimer()
	if fleetNs.Load() > 0 {
		b.ReportMetric(float64(floorNs.Load())/float64(fleetNs.Load()), "x-floor")
		b.ReportMetric(float64(fleetNs.Load())/float64(b.N)/1e3, "fleet-µs/pair")
		b.ReportMetric(float64(floorNs.Load())/float64(b.N)/1e3, "floor-µs/pair")
	}
}

// measurePairs runs fn in parallel and reports pairs/s, commands/op and
// server-cpu-µs/op; it returns the rate.
func measurePairs(b *testing.B, s *fleettest.Server, fn func(pb *testing.PB)) float64 {
	b.Helper()
	cmds0, cpu0 := serverCounters(b, s)
	parallel(b, fn)
	b.StopTimer()
	cmds1, cpu1 := serverCounters(b, s)
	rate := float64(b.N) / b.Elapsed().Seconds()
	b.ReportMetric(rate, "pairs/s")
	b.ReportMetric(float64(cmds1-cmds0)/float64(b.N), "cmds/op")
	b.ReportMetric((cpu1-cpu0)*1e6/float64(b.N), "server-cpu-µs/op")
	return rate
}

// serverCounters returns the calls of every command but INFO, and the
// server's CPU seconds (user + sys).
func serverCounters(b *testing.B, s *fleettest.Server) (int64, float64) {
	b.Helper()
	out, err := s.Cli(context.Background(), "INFO", "all")
	if err != nil {
		b.Fatal(err)
	}
	var n int64
	var cpu float64
	for line := range strings.SplitSeq(out, "\n") {
		line = strings.TrimSpace(line)
		if name, rest, ok := strings.Cut(line, ":calls="); ok && name != "cmdstat_info" {
			v, _, _ := strings.Cut(rest, ",")
			c, _ := strconv.ParseInt(v, 10, 64)
			n += c
		}
		if name, v, ok := strings.Cut(line, ":"); ok && (name == "used_cpu_user" || name == "used_cpu_sys") {
			x, _ := strconv.ParseFloat(v, 64)
			cpu += x
		}
	}
	return n, cpu
}

func benchToken() string {
	var b [18]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}
