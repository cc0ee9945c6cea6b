// Command queues measures fleet's task queue against its Go peers on Redis,
// github.com/hibiken/asynq, github.com/adjust/rmq/v5 and
// github.com/gocraft/work, and against a bare rueidis floor, on one
// throwaway redis-server (fleettest.StartServer, or FLEET_REDIS_URL), in
// one run: every system takes its turn on each measure in each of R rounds
// (the order rotating), so that all see the same load, and the ratios are
// taken inside each round. Each window runs in a process of its own
// (-procs each, proc.go): this program started again with -child, which
// warms its one system up and measures the one window, so that no system
// shares a heap, a scheduler or a leftover goroutine with another; -procs
// one runs every system in this process, as the harness did before. It prints Markdown: the medians, the min–max of
// the ratios, the server's CPU and commands per task, and the goals of
// issue #22 checked.
//
//	cd bench && GOWORK=off go run ./cmd/queues                        # the whole table, ~9 min
//	cd bench && GOWORK=off go run ./cmd/queues -systems fleet,fleet-raw,floor,safe -shapes drain,cycle
//
// # Measures
//
//   - submit: -n tasks, one per call, from -c submitters.
//   - drain: -n tasks submitted first (untimed), then consumed with -c
//     concurrent no-op handlers until all are done; the window starts
//     with the consumer (its start is in it).
//   - cycle (full cycle): the consumer started and idle, then -n tasks
//     submitted by -c submitters while -c handlers run them (submit →
//     no-op handler → ack), until all are done.
//   - idle@R: a consumer of -c handlers, idle for -settle, then tasks
//     submitted one per call at R per second for -idle-for (an open loop:
//     each submit on its own goroutine at its due time): p50 and p99 from
//     the submit call's start to the handler's start, and commands per
//     task over the whole window.
//
// A window ends when its last task is done, or at -cap (from its start;
// idle: from its last submit), when it reports what was done by then,
// marked with * in the table. Every task carries its sequence number:
// each must end exactly once, and a task ended twice (doubles), started
// twice (redeliveries), never ended (lost, or unfinished at the cap) or
// any error of the system is reported under the tables. A task is done,
// for fleet's BatchWorker, when OnTaskEnd says it was acked; for fleet's
// raw loop, rmq and the floors, when the ack returned; asynq and
// gocraft/work say nothing after their ack, so there it is when the
// handler returned nil (their last ≤ -c acks fall outside the window).
//
// Around each window the server's INFO (commandstats, cpu) is read: Redis
// CPU per task (used_cpu_user + used_cpu_sys), its share of a core, and
// commands per task, a script's EVALSHA and each command it ran counting
// one each (INFO itself left out). Each window opens the system afresh
// (its clients, a queue of its own) and FLUSHALL ends it; before the
// rounds every system runs -warm tasks once, uncounted (scripts loaded,
// code warm).
//
// # Systems and their settings (-systems)
//
//   - fleet: a BatchWorker with Slots -c on a Fleet with the default
//     options (client-side caching on: an idle worker sleeps on the
//     invalidation of the queue key).
//   - fleet-raw: -c goroutines, each looping Queue.Reserve(ctx, 1, 1 s) then
//     Task.Ack; a waiting Reserve is woken by the same invalidation. Its
//     submit is fleet's.
//   - asynq: asynq's defaults. TaskCheckInterval is 1 s: when every queue
//     is empty its processor sleeps 0.5–1.5 s before it looks again, so
//     an idle pickup waits up to 1.5 s, and a full cycle whose handlers
//     catch up with the submitters stalls; go-redis's default pool (10 per
//     GOMAXPROCS) for the client and the server.
//   - asynq-fast: 5 Servers of -c/5 workers each (-asynq-fast-servers),
//     TaskCheckInterval 1 ms (-asynq-fast-check), PoolSize 2×-c. A Server
//     dequeues one task at a time (one script, then a goroutine for it),
//     so one Server tops out near one task per round trip; several, as
//     several worker processes would, dequeue in parallel (1 → 5 Servers
//     took the drain from about 6k/s to 8k/s here, 10 no further). The
//     1 ms check ends the idle wait, for one dequeue script per Server
//     per check while the queue is empty (5 Servers at 1 ms: about 10,000
//     commands a second on an idle queue).
//   - rmq-readme: StartConsuming(prefetch 2×-c, poll 1 s): the README's
//     poll duration, and a prefetch limit above the consumer count, as it
//     advises (its example's 10 would starve 50 consumers); the go-redis
//     client rmq.OpenConnection makes (default pool). rmq's fetcher sleeps
//     its poll duration after every batch, not only on an empty queue, so
//     it moves at most prefetch deliveries per poll: about 100 tasks a
//     second here, and an idle pickup waits up to a poll.
//   - rmq-fast: 10 connections on the queue (-rmq-fast-conns), each with
//     its own fetcher, unacked list and 1/10 of the consumers and of the
//     prefetch limit 4×-c (-rmq-fast-prefetch), poll 1 ms (-rmq-fast-poll),
//     one go-redis client with PoolSize 2×-c. A fetcher moves one
//     delivery per round trip (RPOPLPUSH), so one connection tops out near
//     12k/s here; 10 took the drain to 19–27k/s (25 and 50, or a poll of
//     100 µs or 0, no further). A short poll polls an empty queue more
//     (two commands per poll and connection: LLEN of the unacked list,
//     RPOPLPUSH; 10 connections at 1 ms: about 20,000 commands a second
//     on an idle queue); a bigger prefetch makes each ack's LREM walk a
//     longer unacked list (rmq acks by value).
//   - gocraft-readme: a WorkerPool of concurrency -c with the README's
//     redigo pool (MaxActive 5, MaxIdle 5, Wait: true), shared by the
//     Enqueuer, the workers and their observers, and its handler form, a
//     method of a custom context type, called through reflection. Its
//     workers' idle backoff is fixed (0, 10, 100, 1000, then 5000 ms
//     between fetches that found nothing): an idle pickup waits up to 5 s.
//   - gocraft-fast: the same with an unlimited pool (MaxIdle 4×-c+10) and
//     the generic handler form, func(*work.Job) error. Nothing shortens
//     the backoff.
//   - floor: plain rueidis, -c goroutines running Lua scripts shaped like
//     fleet's: RPUSH to submit, a reserve script LPOP+ZADD+HSET, an ack
//     script ZREM+HDEL, sleeping 100 µs on an empty queue; for idle@R one
//     goroutine reserving for -c handlers, asleep on the invalidation of
//     the list (LLEN read through DoCache), one reserve at a time while
//     tasks come one at a time and up to -c at once (pipelined) on a
//     backlog. These are the root package's cost benchmarks' floor and
//     scripts (cost_queue_bench_test.go).
//   - safe: the "safe floor" of the same file, the floor with the Redis
//     work of fleet's guarantees and nothing else: the reserve also checks
//     the call's tombstone (EXISTS), reads the server's clock (TIME) and
//     writes a lease entry with the call's record (HSET); the ack checks
//     the lease's token and deadline (HGET, ZSCORE) and deletes them
//     (HDEL). Its submit is the floor's.
//
// fleet ÷ fastest peer divides fleet's rate by the fastest of the six
// peer settings in the same round. To compare settings of a peer in one
// run, name variants in -systems: rmq-fast/conns=5/poll=100us/prefetch=400,
// asynq-fast/servers=2/check=10ms. -cpuprofile PREFIX writes a CPU
// profile of this process for each fleet and fleet-raw window,
// PREFIX.<system>.<measure>.r<round>.pprof; go tool pprof merges several.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet/fleettest"
)

type options struct {
	n, c, rounds, warm int
	systems, shapes    string
	idleRates          string
	idleFor, settle    time.Duration
	cap                time.Duration
	cpuprofile         string
	breakdown          bool
	procs              string // "each": a process per window (proc.go); "one": every system in this one

	child, childShape string // a child's system and shape (-procs each)
	childRound        int

	asynqFastCheck   time.Duration
	asynqFastServers int
	rmqFastPrefetch  int
	rmqFastPoll      time.Duration
	rmqFastConns     int
}

// system is one contender and its setting.
type system struct {
	key      string // -systems name
	title    string // column header
	family   string // the peer it is a setting of; "" for fleet and the floors
	sharesOf string // the system whose submit it shares (its submit is not measured again)
	profiled bool   // -cpuprofile covers it
	open     func(context.Context, env) (instance, error)
}

func fatalf(format string, args ...any) { log.Fatalf(format, args...) }

func main() {
	var o options
	flag.IntVar(&o.n, "n", 20000, "tasks per window (submit, drain, cycle)")
	flag.IntVar(&o.c, "c", 50, "concurrent handlers, and concurrent submitters")
	flag.IntVar(&o.rounds, "rounds", 3, "rounds: each system takes a turn on each measure once per round")
	flag.IntVar(&o.warm, "warm", 200, "tasks each system runs once before the rounds, uncounted")
	flag.StringVar(&o.systems, "systems", "all", "comma-separated: fleet,fleet-raw,asynq,asynq-fast,rmq-readme,rmq-fast,gocraft-readme,gocraft-fast,floor,safe (or all)")
	flag.StringVar(&o.shapes, "shapes", "submit,drain,cycle,idle", "comma-separated measures: submit,drain,cycle,idle")
	flag.StringVar(&o.idleRates, "idle-rates", "500,5000", "idle pickup: submit rates, tasks per second")
	flag.DurationVar(&o.idleFor, "idle-for", 2*time.Second, "idle pickup: how long tasks are submitted at each rate")
	flag.DurationVar(&o.settle, "settle", 1500*time.Millisecond, "idle pickup: how long the consumer idles first (gocraft/work reaches its 5 s backoff after 1.1 s)")
	flag.DurationVar(&o.cap, "cap", 10*time.Second, "longest window (idle: after its last submit); a window cut short is marked *")
	flag.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile of each fleet window to PREFIX.<system>.<measure>.r<round>.pprof")
	flag.BoolVar(&o.breakdown, "breakdown", true, "list the commands per task of each system and measure")
	flag.DurationVar(&o.asynqFastCheck, "asynq-fast-check", time.Millisecond, "asynq-fast: TaskCheckInterval")
	flag.IntVar(&o.asynqFastServers, "asynq-fast-servers", 5, "asynq-fast: Servers sharing the -c handlers")
	flag.IntVar(&o.rmqFastConns, "rmq-fast-conns", 10, "rmq-fast: connections consuming the queue, sharing the -c consumers and the prefetch")
	flag.IntVar(&o.rmqFastPrefetch, "rmq-fast-prefetch", 0, "rmq-fast: prefetch limit (0: 4×-c)")
	flag.DurationVar(&o.rmqFastPoll, "rmq-fast-poll", time.Millisecond, "rmq-fast: poll duration")
	flag.StringVar(&o.procs, "procs", "each", "each: every window runs in a process of its own, by turns; one: every system runs in this process")
	flag.StringVar(&o.child, "child", "", "(set by -procs each) measure this one system in this process, and write the result as JSON")
	flag.StringVar(&o.childShape, "child-shape", "", "(with -child) the measure")
	flag.IntVar(&o.childRound, "child-round", 0, "(with -child) the round, for -cpuprofile's file names")
	flag.Parse()
	if o.procs != "each" && o.procs != "one" {
		fatalf("-procs: %q is neither each nor one", o.procs)
	}
	if o.rmqFastPrefetch == 0 {
		o.rmqFastPrefetch = 4 * o.c
	}
	ctx := context.Background()

	url := os.Getenv("FLEET_REDIS_URL")
	if url == "" {
		s, err := fleettest.StartServer(ctx, fleettest.Config{})
		if err != nil {
			log.Fatal(err)
		}
		defer s.Stop()
		url = s.URL()
	}
	opt, err := rueidis.ParseURL(url)
	if err != nil {
		log.Fatal(err)
	}
	opt.DisableCache = true
	meter, err := rueidis.NewClient(opt)
	if err != nil {
		log.Fatal(err)
	}
	defer meter.Close()
	b := &bench{o: o, e: env{addr: opt.InitAddress[0], url: url, c: o.c}, meter: meter}
	if o.child != "" {
		runChild(ctx, b, o, o.child, o.childShape, o.childRound)
		return
	}

	systems := pickSystems(o)
	shapes := pickShapes(o)
	info := runInfo{
		args:    strings.Join(os.Args[1:], " "),
		started: time.Now(),
		loadPre: loadavg(),
		version: redisVersion(ctx, meter),
		procs:   runtime.GOMAXPROCS(0),
	}
	log.Printf("redis %s at %s; %d systems, %d measures, %d rounds; load %s", info.version, b.e.addr, len(systems), len(shapes), o.rounds, info.loadPre)

	if o.procs == "one" {
		for _, s := range systems {
			b.warm(ctx, s)
		}
	}
	res := make(map[string]map[string][]winResult) // shape key, system key, rounds
	for _, sh := range shapes {
		res[sh.key] = make(map[string][]winResult)
	}
	for r := range o.rounds {
		info.loads = append(info.loads, loadavg())
		for _, sh := range shapes {
			for _, s := range rotate(systems, r) {
				if sh.kind == shSubmit && s.sharesOf != "" {
					continue
				}
				var w winResult
				left := ""
				if o.procs == "each" {
					w = b.windowProc(ctx, s, sh, r) // warmed up in its process
				} else {
					// What the systems before left in this process: their
					// goroutines still running, and the heap.
					var ms runtime.MemStats
					runtime.ReadMemStats(&ms)
					left = fmt.Sprintf(" (before it: %d goroutines, heap %d MiB)", runtime.NumGoroutine(), ms.HeapAlloc>>20)
					w = b.window(ctx, s, sh, r)
				}
				res[sh.key][s.key] = append(res[sh.key][s.key], w)
				log.Printf("round %d %-8s %-15s %s%s", r+1, sh.key, s.key, w.summary(), left)
			}
		}
	}
	info.loadPost = loadavg()
	info.took = time.Since(info.started)
	report(os.Stdout, o, info, systems, shapes, res)
}

// allSystems returns every system, in the table's order, set up by o.
func allSystems(o options) []system {
	c2 := func(e env) int { return 2 * e.c }
	dflt := func(env) int { return 0 }
	return []system{
		{key: "fleet", title: "fleet", profiled: true, open: openFleet(false)},
		{key: "fleet-raw", title: "fleet raw", sharesOf: "fleet", profiled: true, open: openFleet(true)},
		{key: "asynq", title: "asynq", family: "asynq", open: openAsynq(0, dflt, 1)},
		{key: "asynq-fast", title: "asynq fast", family: "asynq", open: openAsynq(o.asynqFastCheck, c2, o.asynqFastServers)},
		{key: "rmq-readme", title: "rmq README", family: "rmq", open: openRmq(func(w int) int64 { return int64(2 * w) }, time.Second, dflt, 1)},
		{key: "rmq-fast", title: "rmq fast", family: "rmq", open: openRmq(func(int) int64 { return int64(o.rmqFastPrefetch) }, o.rmqFastPoll, c2, o.rmqFastConns)},
		{key: "gocraft-readme", title: "gocraft README", family: "gocraft", open: openGocraft(true)},
		{key: "gocraft-fast", title: "gocraft fast", family: "gocraft", open: openGocraft(false)},
		{key: "floor", title: "floor", open: openFloor(false)},
		{key: "safe", title: "safe floor", sharesOf: "floor", open: openFloor(true)},
	}
}

// pickSystems returns the systems that -systems names, in the table's
// order. A name may carry settings of its own after slashes, to compare
// settings of one peer in one run: rmq-fast/conns=5/poll=100us/prefetch=400,
// asynq-fast/servers=2/check=10ms; such a variant keeps its whole name.
func pickSystems(o options) []system {
	if o.systems == "all" {
		return allSystems(o)
	}
	var out []system
	for _, name := range strings.Split(o.systems, ",") {
		parts := strings.Split(name, "/")
		v := o
		for _, kv := range parts[1:] {
			k, val, _ := strings.Cut(kv, "=")
			var err error
			switch {
			case parts[0] == "rmq-fast" && k == "conns":
				v.rmqFastConns, err = strconv.Atoi(val)
			case parts[0] == "rmq-fast" && k == "prefetch":
				v.rmqFastPrefetch, err = strconv.Atoi(val)
			case parts[0] == "rmq-fast" && k == "poll":
				v.rmqFastPoll, err = time.ParseDuration(val)
			case parts[0] == "asynq-fast" && k == "servers":
				v.asynqFastServers, err = strconv.Atoi(val)
			case parts[0] == "asynq-fast" && k == "check":
				v.asynqFastCheck, err = time.ParseDuration(val)
			default:
				fatalf("-systems: %q: no setting %q", name, kv)
			}
			if err != nil {
				fatalf("-systems: %q: %v", name, err)
			}
		}
		i := slices.IndexFunc(allSystems(v), func(s system) bool { return s.key == parts[0] })
		if i < 0 {
			fatalf("-systems: no system %q", parts[0])
		}
		s := allSystems(v)[i]
		if len(parts) > 1 {
			s.key, s.title = name, name
		}
		out = append(out, s)
	}
	order := func(s system) int {
		return slices.IndexFunc(allSystems(o), func(a system) bool { return a.key == strings.Split(s.key, "/")[0] })
	}
	slices.SortStableFunc(out, func(a, b system) int { return order(a) - order(b) })
	return out
}

// pickShapes returns the measures that -shapes names, idle once per rate.
func pickShapes(o options) []shape {
	var out []shape
	want := strings.Split(o.shapes, ",")
	for _, k := range want {
		switch k {
		case "submit":
			out = append(out, shape{key: "submit", title: fmt.Sprintf("submit, 1 per call, %d submitters", o.c), kind: shSubmit})
		case "drain":
			out = append(out, shape{key: "drain", title: fmt.Sprintf("drain, %d handlers", o.c), kind: shDrain})
		case "cycle":
			out = append(out, shape{key: "cycle", title: "full cycle submit → no-op → ack", kind: shCycle})
		case "idle":
			for r := range strings.SplitSeq(o.idleRates, ",") {
				rate, err := strconv.Atoi(r)
				if err != nil || rate <= 0 {
					fatalf("-idle-rates: %q", r)
				}
				out = append(out, shape{key: "idle@" + r, title: fmt.Sprintf("idle pickup at %d/s", rate), kind: shIdle, rate: rate})
			}
		default:
			fatalf("-shapes: no measure %q", k)
		}
	}
	return out
}

// rotate returns the systems in round r's order: shifted by r×3, so that
// no system always follows the same one.
func rotate(s []system, r int) []system {
	k := (r * 3) % len(s)
	return append(slices.Clone(s[k:]), s[:k]...)
}

// loadavg returns the first three fields of /proc/loadavg.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func redisVersion(ctx context.Context, c rueidis.Client) string {
	s, err := c.Do(ctx, c.B().Info().Section("server").Build()).ToString()
	if err != nil {
		return "?"
	}
	for line := range strings.SplitSeq(s, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v
		}
	}
	return "?"
}
