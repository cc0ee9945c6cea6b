package examples_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

var (
	buildOnce sync.Map // example name -> *builtExample
)

type builtExample struct {
	once sync.Once
	path string
	err  error
}

// build compiles examples/<name> once per test binary.
func build(t *testing.T, name string) string {
	t.Helper()
	v, _ := buildOnce.LoadOrStore(name, &builtExample{})
	b := v.(*builtExample)
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "fleet-example-")
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(dir, name)
		out, err := exec.Command("go", "build", "-o", b.path, "./"+name).CombinedOutput()
		if err != nil {
			b.err = fmt.Errorf("go build %s: %v\n%s", name, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// runExample runs an example bounded by timeout and returns its stdout.
func runExample(t *testing.T, url, name string, timeout time.Duration, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, build(t, name), args...)
	cmd.Env = append(os.Environ(), "FLEET_REDIS_URL="+url)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %v: %v\nstdout:\n%s\nstderr:\n%s", name, args, err, out, stderr.String())
	}
	return string(out)
}

// summary finds the last "done=N failed=M" line.
func summary(t *testing.T, out string) (done, failed int) {
	t.Helper()
	m := regexp.MustCompile(`(?m)^done=(\d+) failed=(\d+)`).FindAllStringSubmatch(out, -1)
	if len(m) == 0 {
		t.Fatalf("no summary line in:\n%s", out)
	}
	done, _ = strconv.Atoi(m[len(m)-1][1])
	failed, _ = strconv.Atoi(m[len(m)-1][2])
	return done, failed
}

func prefix(t *testing.T) string {
	return fmt.Sprintf("exbatch-%d-%d:", os.Getpid(), time.Now().UnixNano())
}

func TestExampleBatch(t *testing.T) {
	t.Parallel()
	url := redistest.SingleURL(t)
	out := runExample(t, url, "batch", time.Minute, "-tasks", "100", "-slots", "8", "-timeout", "50s", "-prefix", prefix(t))
	if done, failed := summary(t, out); done != 100 || failed != 0 {
		t.Fatalf("done=%d failed=%d\n%s", done, failed, out)
	}
}

// TestExampleBatchKilled kills a batch worker process with SIGKILL in the
// middle of its tasks; another worker, with a sweeper, gets the tasks back
// when their leases run out and finishes them. Nothing is lost, and no task
// is acked twice.
func TestExampleBatchKilled(t *testing.T) {
	for _, tg := range redistest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			const tasks = 60
			bin := build(t, "batch")
			p := prefix(t)
			layout := "compat"
			if tg.Tagged {
				layout = "tagged"
			}
			runExample(t, tg.URL, "batch", time.Minute, "-role", "submit", "-tasks", strconv.Itoa(tasks), "-prefix", p, "-layout", layout)

			// Worker A: slow tasks; killed after some acks.
			cmd := exec.Command(bin, "-role", "worker", "-id", "A", "-slots", "4", "-work", "150ms", "-lease", "1s",
				"-print-acks", "-timeout", "50s", "-prefix", p, "-layout", layout)
			cmd.Env = append(os.Environ(), "FLEET_REDIS_URL="+tg.URL)
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			acks := map[string]int{}
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				if id, ok := strings.CutPrefix(sc.Text(), "acked "); ok {
					acks[id]++
					if len(acks) == 10 {
						break
					}
				}
			}
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			// Read on with the same scanner: it may hold lines already.
			for sc.Scan() {
				if id, ok := strings.CutPrefix(sc.Text(), "acked "); ok {
					acks[id]++
				}
				if strings.HasPrefix(sc.Text(), "done=") {
					t.Fatal("worker A finished before it was killed")
				}
			}
			_ = cmd.Wait()
			killedAcks := len(acks)
			if killedAcks >= tasks {
				t.Fatalf("worker A acked all %d tasks before the kill", killedAcks)
			}

			// Worker B, with a sweeper: finishes everything.
			out := runExample(t, tg.URL, "batch", time.Minute, "-role", "worker", "-id", "B", "-slots", "8", "-work", "5ms",
				"-lease", "1s", "-sweep", "200ms", "-print-acks", "-timeout", "50s", "-prefix", p, "-layout", layout)
			bAcks := 0
			for _, l := range strings.Split(out, "\n") {
				if id, ok := strings.CutPrefix(l, "acked "); ok {
					acks[id]++
					bAcks++
				}
			}
			done, failed := summary(t, out)
			if done != bAcks || failed != 0 || done == 0 {
				t.Fatalf("worker B done=%d failed=%d, %d acks printed", done, failed, bAcks)
			}

			raw := redistest.Client(t, tg)
			ctx := context.Background()
			counters := map[string]int64{}
			for _, k := range redistest.Keys(t, raw, p) {
				if id, ok := strings.CutPrefix(k, p+"fleet:counter:done."); ok {
					n, err := raw.Do(ctx, raw.B().Get().Key(k).Build()).AsInt64()
					if err != nil {
						t.Fatal(err)
					}
					counters[id] = n
				}
			}
			// Every task was done at least once.
			if len(counters) != tasks {
				t.Fatalf("%d tasks done, want %d", len(counters), tasks)
			}
			// No task was acked twice. A task done but never seen acked can
			// only be one whose ack A's server ran while A was killed before
			// it read the reply or printed it: at most one per slot of A.
			unseen := 0
			for id := range counters {
				switch acks[id] {
				case 0:
					unseen++
				case 1:
				default:
					t.Fatalf("task %s acked %d times", id, acks[id])
				}
			}
			if unseen > 4 {
				t.Fatalf("%d tasks done but never acked", unseen)
			}
			if len(acks) > tasks {
				t.Fatalf("%d ids acked, %d tasks", len(acks), tasks)
			}
			// The queue is empty: nothing pending, in flight, scheduled or dead.
			for _, k := range redistest.Keys(t, raw, p) {
				if strings.Contains(k, ":hist:d:") {
					// The queue's history (docs/SCHEMA.md), not tasks: the
					// killed worker loses what it had not added, and no
					// task is counted done twice.
					done, _ := raw.Do(ctx, raw.B().Hget().Key(k).Field("d").Build()).AsInt64()
					if done > int64(tasks) {
						t.Fatalf("%s counts %d tasks done, of %d", k, done, tasks)
					}
					continue
				}
				if strings.Contains(k, "fleet:queue:") && !strings.HasSuffix(k, "fleet:queues") && !strings.Contains(k, ":hist:m:") {
					typ, _ := raw.Do(ctx, raw.B().Type().Key(k).Build()).ToString()
					var n int64
					switch typ {
					case "list":
						n, _ = raw.Do(ctx, raw.B().Llen().Key(k).Build()).AsInt64()
					case "zset":
						n, _ = raw.Do(ctx, raw.B().Zcard().Key(k).Build()).AsInt64()
					case "hash":
						n, _ = raw.Do(ctx, raw.B().Hlen().Key(k).Build()).AsInt64()
					}
					if n != 0 {
						t.Fatalf("%s (%s) holds %d", k, typ, n)
					}
				}
			}
			t.Logf("A acked %d before SIGKILL, B acked %d, %d unseen", killedAcks, bAcks, unseen)
			cleanup(t, raw, p)
		})
	}
}

func cleanup(t *testing.T, c rueidis.Client, prefix string) {
	for _, k := range redistest.Keys(t, c, prefix) {
		c.Do(context.Background(), c.B().Del().Key(k).Build())
	}
}

func TestExampleStream(t *testing.T) {
	t.Parallel()
	out := runExample(t, redistest.SingleURL(t), "stream", time.Minute, "-slots", "4", "-per-slot", "25", "-timeout", "50s")
	if done, failed := summary(t, out); done != 100 || failed != 0 {
		t.Fatalf("done=%d failed=%d\n%s", done, failed, out)
	}
	if !strings.Contains(out, "emitted=100 events=100") {
		t.Fatalf("emit line missing:\n%s", out)
	}
}

func TestExampleHTTP(t *testing.T) {
	t.Parallel()
	out := runExample(t, redistest.SingleURL(t), "http", time.Minute, "-selftest", "-timeout", "50s")
	if done, failed := summary(t, out); done != 16 || failed != 0 {
		t.Fatalf("done=%d failed=%d\n%s", done, failed, out)
	}
}

// TestExampleCookies runs the cookies walkthrough and checks, from the fake
// web's own records, that the fleet-wide limits held: no site was fetched
// more than its rate (plus the burst of 1, plus 3 for 100 ms of jitter
// between a token's time on the server and the request's arrival) within
// any second, and no site had more challenges solved at once than its
// semaphore allows.
func TestExampleCookies(t *testing.T) {
	t.Parallel()
	out := runExample(t, redistest.SingleURL(t), "cookies", time.Minute,
		"-scrapers", "8", "-harvesters", "4", "-pages", "150", "-sites", "2", "-rate", "30", "-harvest-limit", "2")
	m := regexp.MustCompile(`(?m)^pages=(\d+) harvested=(\d+) `).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no summary line in:\n%s", out)
	}
	if pages, _ := strconv.Atoi(m[1]); pages < 150 {
		t.Fatalf("fetched %d pages, want 150:\n%s", pages, out)
	}
	l := regexp.MustCompile(`(?m)^max_fetches_per_site_1s=(\d+) rate=30 max_harvests_per_site=(\d+) harvest_limit=2$`).FindStringSubmatch(out)
	if l == nil {
		t.Fatalf("no limits line in:\n%s", out)
	}
	fetches, _ := strconv.Atoi(l[1])
	harvests, _ := strconv.Atoi(l[2])
	if fetches > 30+1+3 || fetches < 1 {
		t.Fatalf("a site was fetched %d times within a second, limit 30/s:\n%s", fetches, out)
	}
	if harvests > 2 || harvests < 1 {
		t.Fatalf("a site had %d challenges solved at once, limit 2:\n%s", harvests, out)
	}
}

// TestExampleDurable: a worker process dies right after recording a
// harvest's second child (a page to fetch); the worker that resumes it
// runs none of the steps recorded before the crash and submits no child
// again, each page is fetched once, and every harvest ends with the bytes
// of all its pages (its children's results) and the approval that
// another process sent before it waited (a kept signal).
func TestExampleDurable(t *testing.T) {
	t.Parallel()
	url := redistest.SingleURL(t)
	out := runExample(t, url, "durable", time.Minute, "-crash-after", "fetch-1", "-prefix", prefix(t))
	if !strings.Contains(out, "crash after fetch-1\n") || !strings.Contains(out, "first worker exited: exit status 3\n") || !strings.Contains(out, "approved=3\n") || !strings.Contains(out, "all 3 harvests done\n") {
		t.Fatalf("no crash and resume:\n%s", out)
	}
	for _, acct := range []string{"acct-0", "acct-1", "acct-2"} {
		for _, step := range []string{"login", "fetch-0", "fetch-1", "fetch-2", "write"} {
			if n := strings.Count(out, "effect "+acct+" "+step+" "); n != 1 {
				t.Errorf("%s's step %s ran %d times, want once", acct, step, n)
			}
		}
		if !strings.Contains(out, "done "+acct+" bytes=3003 with session-"+acct+" approved by ops\n") {
			t.Errorf("%s not done with its pages' bytes (its children's results) and its approval (a signal)", acct)
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}
}
