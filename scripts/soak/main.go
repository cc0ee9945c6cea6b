// Command soak pushes many tasks (1,000,000 by default) through worker
// processes under faults, and samples what should stay flat: each
// worker's RSS and goroutines, the server's used_memory and key count, and
// the time of a sweep. It is not part of CI (it takes about seven minutes
// at the default rate):
//
//	go run ./scripts/soak -tasks 1000000 -workers 4 -out docs/soak
//
// It starts a redis-server of its own (AOF, appendfsync always), then
// worker processes (this program again, in the worker role), each a batch
// worker of -slots slots with a no-op handler. The submitter submits -rate
// tasks a second, keeping the backlog under -backlog. Every -fault-every one fault, in turn: a
// worker SIGKILLed and started again, a worker SIGSTOPped for two leases
// then SIGCONTed, redis-server SIGKILLed and restarted. A sweep runs every
// second, timed, and removes the workers not heard from for 30 s (the
// registrations of the killed ones). Every -sample it writes a row of samples.csv; at the end
// it waits for the queue to drain, lists the keys left, fits a line to the
// last 80% of each series and says whether its trend over that span is
// within 5% of the series' mean, and plots the series with gnuplot
// (Debian's gnuplot-nox) into soak.png when gnuplot is on PATH.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleettest"
)

const envRole = "FLEET_SOAK_WORKER" // the worker role: its value is "url statsfile"

type job struct {
	N int `json:"n"`
}

func main() {
	if v := os.Getenv(envRole); v != "" {
		url, stats, _ := strings.Cut(v, " ")
		if err := worker(url, stats); err != nil {
			fmt.Fprintln(os.Stderr, "soak worker:", err)
			os.Exit(1)
		}
		return
	}
	tasks := flag.Int("tasks", 1_000_000, "tasks to push through")
	workers := flag.Int("workers", 4, "worker processes")
	slots := flag.Int("slots", 16, "slots per worker")
	backlog := flag.Int("backlog", 20_000, "the submitter keeps at most about this many tasks pending")
	rate := flag.Int("rate", 2500, "tasks submitted per second (0: as fast as the backlog allows)")
	faultEvery := flag.Duration("fault-every", 4*time.Second, "one fault this often")
	sample := flag.Duration("sample", 10*time.Second, "sampling interval")
	out := flag.String("out", "soak-out", "directory for samples.csv, summary.txt and soak.png")
	replot := flag.Bool("replot", false, "only draw soak.png again from -out's samples.csv")
	flag.Parse()
	if *replot {
		if err := plot(*out, *workers); err != nil {
			fmt.Fprintln(os.Stderr, "soak:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*tasks, *workers, *slots, *backlog, *rate, *faultEvery, *sample, *out); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
}

// worker runs a batch worker until SIGTERM, writing its RSS and goroutine
// count to stats every second.
func worker(url, stats string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	f, err := fleet.Open(ctx, fleet.Options{URL: url})
	if err != nil {
		return err
	}
	defer f.Close()
	q := fleet.NewQueue[job](f, "soak", fleet.QueueOptions{Lease: 2 * time.Second})
	slots, _ := strconv.Atoi(os.Getenv("FLEET_SOAK_SLOTS"))
	w := fleet.NewBatchWorker(f, fleet.WorkerOptions{Type: "soak", Slots: max(slots, 1)}, q,
		fleet.TaskFunc(func(context.Context, job) error { return nil }))
	if err := w.Start(ctx); err != nil {
		return err
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			return w.Stop(sctx)
		case <-tick.C:
			line := fmt.Sprintf("%d %d\n", rssKB(os.Getpid()), runtime.NumGoroutine())
			_ = os.WriteFile(stats+".tmp", []byte(line), 0o644)
			_ = os.Rename(stats+".tmp", stats)
		}
	}
}

// rssKB reads a process's resident set (VmRSS) in KiB, 0 when it cannot.
func rssKB(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return n
		}
	}
	return 0
}

type proc struct {
	i     int
	stats string
	mu    sync.Mutex
	cmd   *exec.Cmd
}

func (p *proc) start(url string, slots int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), envRole+"="+url+" "+p.stats, "FLEET_SOAK_SLOTS="+strconv.Itoa(slots))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // a worker dies with the soak
	if err := cmd.Start(); err != nil {
		return err
	}
	p.cmd = cmd
	go func() { _ = cmd.Wait() }()
	return nil
}

func (p *proc) signal(s syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(s)
	}
}

// read returns the worker's last RSS (KiB) and goroutines.
func (p *proc) read() (rss, goroutines int64) {
	b, err := os.ReadFile(p.stats)
	if err != nil {
		return 0, 0
	}
	f := strings.Fields(string(b))
	if len(f) == 2 {
		rss, _ = strconv.ParseInt(f[0], 10, 64)
		goroutines, _ = strconv.ParseInt(f[1], 10, 64)
	}
	return rss, goroutines
}

func run(tasks, workers, slots, backlog, rate int, faultEvery, sample time.Duration, out string) error {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	srv, err := fleettest.StartServer(ctx, fleettest.Config{AppendOnly: true})
	if err != nil {
		return fmt.Errorf("%w (install redis-server: apt-get install -y redis-server)", err)
	}
	defer srv.Stop()
	f, err := fleet.Open(ctx, fleet.Options{URL: srv.URL()})
	if err != nil {
		return err
	}
	defer f.Close()
	q := fleet.NewQueue[job](f, "soak", fleet.QueueOptions{Lease: 2 * time.Second})
	tmp, err := os.MkdirTemp("", "soak")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	procs := make([]*proc, workers)
	for i := range procs {
		procs[i] = &proc{i: i, stats: filepath.Join(tmp, fmt.Sprintf("w%d", i))}
		if err := procs[i].start(srv.URL(), slots); err != nil {
			return err
		}
	}
	defer func() {
		for _, p := range procs {
			p.signal(syscall.SIGKILL)
		}
	}()

	start := time.Now()
	var submitted atomic.Int64
	var sweepMu sync.Mutex
	var sweepMax, sweepSum time.Duration
	var sweeps int
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Go(func() { // the submitter
		batch := make([]job, 500)
		for submitted.Load() < int64(tasks) && ctx.Err() == nil {
			if rate > 0 { // keep to the rate: the tasks due by now
				if due := int64(time.Since(start).Seconds() * float64(rate)); submitted.Load() >= due {
					time.Sleep(10 * time.Millisecond)
					continue
				}
			}
			st, err := q.Stats(ctx)
			if err != nil || st.Pending+st.Scheduled > int64(backlog) {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			n := min(len(batch), tasks-int(submitted.Load()))
			if _, err := q.SubmitMany(ctx, batch[:n]); err != nil {
				time.Sleep(50 * time.Millisecond) // redis-server restarting: the batch was all or none
				continue
			}
			submitted.Add(int64(n))
		}
	})
	wg.Go(func() { // a sweep every second, timed
		for {
			select {
			case <-done:
				return
			case <-time.After(time.Second):
			}
			t0 := time.Now()
			if _, err := f.Sweep(ctx, fleet.SweeperOptions{RemoveWorkersAfter: 30 * time.Second}); err == nil {
				d := time.Since(t0)
				sweepMu.Lock()
				sweepMax, sweepSum, sweeps = max(sweepMax, d), sweepSum+d, sweeps+1
				sweepMu.Unlock()
			}
		}
	})
	faults := map[string]int{}
	wg.Go(func() { // the faults
		for k := 0; ; k++ {
			select {
			case <-done:
				return
			case <-time.After(faultEvery):
			}
			p := procs[k%len(procs)]
			switch k % 3 {
			case 0:
				p.signal(syscall.SIGKILL)
				time.Sleep(200 * time.Millisecond)
				_ = p.start(srv.URL(), slots)
				faults["worker SIGKILL"]++
			case 1:
				p.signal(syscall.SIGSTOP)
				time.Sleep(4 * time.Second)
				p.signal(syscall.SIGCONT)
				faults["worker SIGSTOP"]++
			case 2:
				srv.Kill()
				time.Sleep(200 * time.Millisecond)
				if err := srv.Restart(ctx); err != nil {
					fmt.Fprintln(os.Stderr, "soak: redis-server did not come back:", err)
				}
				faults["redis-server SIGKILL"]++
			}
		}
	})

	names := []string{"t_s", "done", "used_memory_mb", "keys", "sweep_mean_ms", "sweep_max_ms"}
	for i := range procs {
		names = append(names, fmt.Sprintf("w%d_rss_mb", i), fmt.Sprintf("w%d_goroutines", i))
	}
	csv, err := os.Create(filepath.Join(out, "samples.csv"))
	if err != nil {
		return err
	}
	defer csv.Close()
	fmt.Fprintln(csv, strings.Join(names, ","))
	rows := [][]float64{}
	tick := time.NewTicker(sample)
	defer tick.Stop()
	drained := false
	for !drained && ctx.Err() == nil {
		<-tick.C
		st, err := q.Stats(ctx)
		if err != nil {
			continue // redis-server restarting
		}
		doneN := submitted.Load() - st.Pending - st.Scheduled - st.InFlight
		mem, keys := serverInfo(ctx, srv)
		sweepMu.Lock()
		swMax, swMean := sweepMax, time.Duration(0)
		if sweeps > 0 {
			swMean = sweepSum / time.Duration(sweeps)
		}
		sweepMax, sweepSum, sweeps = 0, 0, 0
		sweepMu.Unlock()
		row := []float64{time.Since(start).Seconds(), float64(doneN), float64(mem) / 1e6, float64(keys),
			float64(swMean.Microseconds()) / 1e3, float64(swMax.Microseconds()) / 1e3}
		for _, p := range procs {
			rss, g := p.read()
			row = append(row, float64(rss)/1024, float64(g))
		}
		rows = append(rows, row)
		cells := make([]string, len(row))
		for i, v := range row {
			cells[i] = strconv.FormatFloat(v, 'f', 2, 64)
		}
		fmt.Fprintln(csv, strings.Join(cells, ","))
		fmt.Println(strings.Join(cells, " "))
		drained = submitted.Load() == int64(tasks) && st.Pending+st.Scheduled+st.InFlight == 0
	}
	close(done)
	wg.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	st, _ := q.Stats(ctx)
	left, err := srv.Cli(ctx, "--scan")
	if err != nil {
		return err
	}
	var sum strings.Builder
	fmt.Fprintf(&sum, "tasks %d, workers %d x %d slots, %v, faults %v\n", tasks, workers, slots, time.Since(start).Round(time.Second), faults)
	fmt.Fprintf(&sum, "at the end: pending %d, in flight %d, scheduled %d, dead %d\n", st.Pending, st.InFlight, st.Scheduled, st.Dead)
	keysLeft := strings.Fields(left)
	sort.Strings(keysLeft)
	var other []string
	for _, k := range keysLeft {
		if !documented(k) {
			other = append(other, k)
		}
	}
	fmt.Fprintf(&sum, "keys left: %d, all of them documented ones (the queue's policy and registry, reserve-call tombstones that expire, the registrations of workers that were killed, which RemoveWorkersAfter removes) but %d: %s\n",
		len(keysLeft), len(other), strings.Join(other, " "))
	fmt.Fprintf(&sum, "trend over the last 80%% of each series (slope x span / mean; flat when within 5%%):\n")
	for c := 2; c < len(names); c++ {
		trend, mean := trendOf(rows, c)
		verdict := "flat"
		if math.Abs(trend) > 0.05*math.Abs(mean) {
			verdict = "NOT flat"
		}
		fmt.Fprintf(&sum, "  %-16s mean %10.2f  trend %+9.2f (%+.1f%%)  %s\n", names[c], mean, trend, 100*trend/math.Max(math.Abs(mean), 1e-9), verdict)
	}
	fmt.Print(sum.String())
	if err := os.WriteFile(filepath.Join(out, "summary.txt"), []byte(sum.String()), 0o644); err != nil {
		return err
	}
	return plot(out, len(procs))
}

// documented reports whether a key left after the drain is one that
// docs/SCHEMA.md says stays (or expires by itself).
func documented(k string) bool {
	switch k {
	case "fleet:meta", "fleet:queues", "fleet:queue:soak:policy", "wkrs:all", "wkrs:soak":
		return true
	}
	return strings.HasPrefix(k, "fleet:queue:soak:call:") || strings.HasPrefix(k, "wkr:soak:")
}

// serverInfo reads used_memory and the key count.
func serverInfo(ctx context.Context, srv *fleettest.Server) (mem, keys int64) {
	info, err := srv.Cli(ctx, "INFO", "memory")
	if err == nil {
		sc := bufio.NewScanner(strings.NewReader(info))
		for sc.Scan() {
			if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "used_memory:"); ok {
				mem, _ = strconv.ParseInt(v, 10, 64)
			}
		}
	}
	if n, err := srv.Cli(ctx, "DBSIZE"); err == nil {
		keys, _ = strconv.ParseInt(strings.TrimSpace(n), 10, 64)
	}
	return mem, keys
}

// trendOf fits a line to column c over the last 80% of rows (the first
// 20% is the warm-up) and returns its rise over that span and the mean.
func trendOf(rows [][]float64, c int) (trend, mean float64) {
	from := len(rows) / 5
	xs, ys := []float64{}, []float64{}
	for _, r := range rows[from:] {
		xs, ys = append(xs, r[0]), append(ys, r[c])
	}
	n := float64(len(xs))
	if n < 2 {
		return 0, 0
	}
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx, sy, sxx, sxy = sx+xs[i], sy+ys[i], sxx+xs[i]*xs[i], sxy+xs[i]*ys[i]
	}
	mean = sy / n
	den := n*sxx - sx*sx
	if den == 0 {
		return 0, mean
	}
	slope := (n*sxy - sx*sy) / den
	return slope * (xs[len(xs)-1] - xs[0]), mean
}

// plot draws the series with gnuplot into soak.png, when gnuplot is here.
func plot(out string, workers int) error {
	if _, err := exec.LookPath("gnuplot"); err != nil {
		fmt.Println("soak: no gnuplot on PATH (apt-get install -y gnuplot-nox): no plot")
		return nil
	}
	var rss, gor []string
	for i := range workers {
		rss = append(rss, fmt.Sprintf(`"samples.csv" using 1:%d with lines title "worker %d"`, 7+2*i, i))
		gor = append(gor, fmt.Sprintf(`"samples.csv" using 1:%d with lines title "worker %d"`, 8+2*i, i))
	}
	script := strings.Join([]string{
		`set datafile separator ","`,
		`set terminal pngcairo size 1200,900 font ",9" noenhanced`,
		`set yrange [0:*]`,
		`set output "soak.png"`,
		`set key autotitle columnhead`,
		`set multiplot layout 3,2 title "fleet soak: seconds on x"`,
		`set title "tasks done"`, `plot "samples.csv" using 1:2 with lines notitle`,
		`set title "redis used_memory (MB)"`, `plot "samples.csv" using 1:3 with lines notitle`,
		`set title "redis keys"`, `plot "samples.csv" using 1:4 with lines notitle`,
		`set title "sweep time in each sample (ms): mean, slowest"`, `set logscale y`,
		`plot "samples.csv" using 1:5 with lines title "mean", "samples.csv" using 1:6 with lines title "slowest"`, `unset logscale y`,
		`set title "worker RSS (MB)"`, `plot ` + strings.Join(rss, ", "),
		`set title "worker goroutines"`, `plot ` + strings.Join(gor, ", "),
		`unset multiplot`,
	}, "\n")
	cmd := exec.Command("gnuplot")
	cmd.Dir = out
	cmd.Stdin = strings.NewReader(script)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("gnuplot: %w: %s", err, b)
	}
	return nil
}
