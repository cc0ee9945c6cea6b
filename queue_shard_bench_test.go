package fleet_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// BenchmarkQueueShards runs one queue end to end (SubmitMany -> Reserve ->
// Ack, 2 producers and 8 consumers over 2 Fleets) on the harness's
// three-master cluster, unsharded and with 12 shards, side by side in one
// run. Each op is one task. Besides ns/op it reports tasks/s and each
// master's share of the CPU the three masters used meanwhile (INFO cpu:
// used_cpu_user + used_cpu_sys deltas), and the largest deviation of a
// share from the mean (33.3%), in percent of the mean. Run alone, so that
// no other test loads the masters:
//
//	go test -run '^$' -bench BenchmarkQueueShards -benchtime 30000x -count 3 .
func BenchmarkQueueShards(b *testing.B) {
	tg := redistest.Targets(b)[2]
	masters := masterClients(b, tg)
	for _, k := range []int{1, 12} {
		b.Run("shards="+strconv.Itoa(k), func(b *testing.B) {
			prefix := redistest.Prefix(b, tg)
			fs := []*fleet.Fleet{shardBenchFleet(b, tg, prefix), shardBenchFleet(b, tg, prefix)}
			before := masterCPU(b, masters)
			start := time.Now()
			b.ResetTimer()
			runQueueLoad(b, fs, k, b.N)
			b.StopTimer()
			elapsed := time.Since(start)
			after := masterCPU(b, masters)
			var sum float64
			d := make([]float64, len(masters))
			for i := range masters {
				d[i] = after[i] - before[i]
				sum += d[i]
			}
			dev := 0.0
			for i := range d {
				share := 100 * d[i] / sum
				b.ReportMetric(share, fmt.Sprintf("cpu%%_m%d", i))
				dev = math.Max(dev, math.Abs(share-100/float64(len(d)))/(100/float64(len(d)))*100)
			}
			b.ReportMetric(dev, "maxdev%")
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "tasks/s")
			b.ReportMetric(sum/elapsed.Seconds()*100, "cpu%_all")
		})
	}
}

// runQueueLoad pushes n tasks through queue "bench" of k shards.
func runQueueLoad(b *testing.B, fs []*fleet.Fleet, k, n int) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const producers, consumers, batch = 2, 8, 50
	var submitted, acked atomic.Int64
	var wg sync.WaitGroup
	for p := range producers {
		q := fleet.NewQueue[job](fs[p%len(fs)], "bench", fleet.QueueOptions{Shards: k})
		wg.Add(1)
		go func() {
			defer wg.Done()
			payloads := jobs(batch)
			for {
				left := int64(n) - submitted.Add(batch) + batch
				if left <= 0 {
					return
				}
				if _, err := q.SubmitMany(ctx, payloads[:min(int64(batch), left)]); err != nil {
					b.Errorf("submit: %v", err)
					return
				}
			}
		}()
	}
	for c := range consumers {
		q := fleet.NewQueue[job](fs[c%len(fs)], "bench", fleet.QueueOptions{Shards: k})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for acked.Load() < int64(n) && ctx.Err() == nil {
				ts, err := q.Reserve(ctx, 20, 50*time.Millisecond)
				if err != nil {
					b.Errorf("reserve: %v", err)
					return
				}
				for _, t := range ts {
					if err := t.Ack(ctx); err != nil {
						b.Errorf("ack: %v", err)
						return
					}
				}
				acked.Add(int64(len(ts)))
			}
		}()
	}
	wg.Wait()
	if got := acked.Load(); got != int64(n) {
		b.Fatalf("acked %d of %d", got, n)
	}
}

func shardBenchFleet(b *testing.B, tg redistest.Target, prefix string) *fleet.Fleet {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f, err := fleet.Open(ctx, fleet.Options{URL: tg.URL, Prefix: prefix, Layout: fleet.LayoutTagged})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = f.Close() })
	return f
}

// masterClients connects to each master of the cluster on its own, in
// address order.
func masterClients(b *testing.B, tg redistest.Target) []rueidis.Client {
	b.Helper()
	raw := redistest.Client(b, tg)
	res, err := raw.Do(context.Background(), raw.B().ClusterSlots().Build()).ToArray()
	if err != nil {
		b.Fatalf("CLUSTER SLOTS: %v", err)
	}
	var addrs []string
	for _, r := range res {
		row, _ := r.ToArray()
		node, _ := row[2].ToArray()
		host, _ := node[0].ToString()
		port, _ := node[1].AsInt64()
		if a := host + ":" + strconv.FormatInt(port, 10); !slices.Contains(addrs, a) {
			addrs = append(addrs, a)
		}
	}
	slices.Sort(addrs)
	var out []rueidis.Client
	for _, a := range addrs {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{a}, ForceSingleClient: true, DisableCache: true})
		if err != nil {
			b.Fatalf("connect %s: %v", a, err)
		}
		b.Cleanup(c.Close)
		out = append(out, c)
	}
	if len(out) != 3 {
		b.Fatalf("cluster has %d masters (%v); want 3", len(out), addrs)
	}
	return out
}

// masterCPU reads used_cpu_user + used_cpu_sys (seconds) of each master.
func masterCPU(b *testing.B, cs []rueidis.Client) []float64 {
	b.Helper()
	out := make([]float64, len(cs))
	for i, c := range cs {
		info, err := c.Do(context.Background(), c.B().Info().Section("cpu").Build()).ToString()
		if err != nil {
			b.Fatalf("INFO cpu: %v", err)
		}
		for _, line := range strings.Split(info, "\n") {
			name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
			if ok && (name == "used_cpu_user" || name == "used_cpu_sys") {
				f, _ := strconv.ParseFloat(v, 64)
				out[i] += f
			}
		}
	}
	return out
}
