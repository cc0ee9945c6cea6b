package fleet_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
)

// BenchmarkQueueGroups measures the cost of groups to a reserve, by turns
// on one redis-server (costInterleave): a cycle of submit, Reserve(1) and
// Ack from 16 goroutines on
//
//   - plain: an ungrouped queue;
//   - g10: a queue whose tasks go to 10 groups, round-robin;
//   - g10k: the same over 10,000 groups;
//   - blocked: 10,000 groups of concurrency 1, of which 9,990 are at their
//     limit (a task of each in flight under an hour's lease, another
//     waiting): the cycles go to the 10 others.
//
// It reports each kind's commands, Redis CPU and rate per cycle, and the
// ratios <kind>/plain-rate and blocked/g10k-rate (the goals: a grouped
// queue at ≥ 0.7x the ungrouped one; the blocked groups within 20% of
// all groups eligible).
//
//	go test -run '^$' -bench BenchmarkQueueGroups -benchtime 20000x .
func BenchmarkQueueGroups(b *testing.B) {
	srv := costServer(b)
	costClean(b, srv)
	ctx := context.Background()
	f := costFleet(b, srv.URL())
	const backlog = 100
	mk := func(name string, groups int, limits fleet.GroupLimits) (*fleet.Queue[costJob], func(i int64) string) {
		q := fleet.NewQueue[costJob](f, name, fleet.QueueOptions{Lease: time.Hour, Groups: limits})
		group := func(i int64) string {
			if groups == 0 {
				return ""
			}
			return fmt.Sprintf("%s%d", name, i%int64(groups))
		}
		return q, group
	}
	submit := func(q *fleet.Queue[costJob], g string, n int) {
		var subs []fleet.Submission[costJob]
		for i := range n {
			subs = append(subs, fleet.Submission[costJob]{Payload: costJob{N: i}, Options: fleet.SubmitOptions{Group: g}})
		}
		if _, err := q.SubmitManyWith(ctx, subs); err != nil {
			b.Fatal(err)
		}
	}
	kinds := []costKind{}
	cycle := func(name string, q *fleet.Queue[costJob], group func(int64) string) {
		var ctr atomic.Int64
		for range backlog {
			submit(q, group(ctr.Add(1)), 1)
		}
		kinds = append(kinds, costKind{name, func(b *testing.B, n int) {
			costPull(b, n, 16, func(ctx context.Context, _ int) error {
				if _, err := q.SubmitWith(ctx, costJob{N: 1}, fleet.SubmitOptions{Group: group(ctr.Add(1))}); err != nil {
					return err
				}
				ts, err := q.Reserve(ctx, 1, 0)
				if err != nil || len(ts) != 1 {
					return fmt.Errorf("%s: reserve: %d tasks, %v", name, len(ts), err)
				}
				return ts[0].Ack(ctx)
			})
		}})
	}
	plain, pg := mk("plain", 0, fleet.GroupLimits{})
	cycle("plain", plain, pg)
	g10, g10g := mk("ga", 10, fleet.GroupLimits{})
	cycle("g10", g10, g10g)
	g10k, g10kg := mk("gb", 10_000, fleet.GroupLimits{})
	cycle("g10k", g10k, g10kg)

	// blocked: 9,990 groups at their concurrency of 1, each with a task in
	// flight and one more waiting; 10 groups of their own, unbounded limit.
	blocked, _ := mk("gc", 0, fleet.GroupLimits{Concurrency: 1})
	for i := range 9_990 {
		submit(blocked, fmt.Sprintf("held%d", i), 2)
	}
	for held := 0; held < 9_990; {
		ts, err := blocked.Reserve(ctx, 1000, 0)
		if err != nil {
			b.Fatal(err)
		}
		held += len(ts)
	}
	for i := range 10 {
		if err := blocked.SetGroupLimit(ctx, fmt.Sprintf("free%d", i), fleet.GroupLimits{}); err != nil {
			b.Fatal(err)
		}
	}
	cycle("blocked", blocked, func(i int64) string { return fmt.Sprintf("free%d", i%10) })

	res := costInterleave(b, srv, kinds...)
	for _, k := range []string{"g10", "g10k", "blocked"} {
		b.ReportMetric(res[k].rate/res["plain"].rate, k+"/plain-rate")
	}
	b.ReportMetric(res["blocked"].rate/res["g10k"].rate, "blocked/g10k-rate")
}
