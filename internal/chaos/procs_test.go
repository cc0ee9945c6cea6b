package chaos

// The parent side of the processes: start, SIGKILL, SIGSTOP/SIGCONT,
// SIGTERM, and what each incarnation's end was.

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/fleet-go/fleet/fleettest"
)

// proc is one place of the run (a worker "w2", a sweeper "s1", or the
// submitter "sub", which is no process and only has a proxy), started
// again after each kill as a new incarnation.
type proc struct {
	r     *run
	name  string
	role  string           // "worker", "sweeper" or "" (the submitter)
	proxy *fleettest.Proxy // nil on the cluster
	busy  chan struct{}    // one place: held by the fault acting on it

	mu       sync.Mutex
	inc      int // incarnation of the current (or last) process
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	done     chan struct{} // closed when the current process exited
	stopped  int64         // µs of the SIGSTOP in force, 0 when running
	expected bool          // the current process's exit was asked for
	sentAt   int64         // µs of the last signal (see signal)
}

func (p *proc) id() string { return fmt.Sprintf("%s.%d", p.name, p.inc) }

// tryBusy takes the proc for a fault, or reports that another fault has it.
func (p *proc) tryBusy() bool {
	select {
	case p.busy <- struct{}{}:
		return true
	default:
		return false
	}
}

func (p *proc) free() { <-p.busy }

// url is where the process reaches Redis.
func (p *proc) url() string {
	if p.proxy != nil {
		return p.proxy.URL()
	}
	return p.r.tg.url
}

func (p *proc) aliveLocked() bool {
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// start starts a new incarnation, unless one runs.
func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.role == "" || p.aliveLocked() {
		return nil
	}
	if p.cmd != nil {
		p.inc++
	}
	r := p.r
	cfg := childConfig{
		Name: p.name, Inc: p.inc, URL: p.url(), Prefix: r.prefix, Layout: r.tg.layout, Queue: queueName,
		Evidence: filepath.Join(r.dir, "ev", p.id()+".log"),
		Slots:    r.s.slots, Lease: r.s.lease, Heartbeat: time.Second, SweepInterval: r.s.sweepEvery,
		MaxAttempts: maxAttempts, BackoffBase: 20 * time.Millisecond, BackoffMax: 200 * time.Millisecond,
		SubmitGrace: submitGrace,
	}
	if r.s.flows > 0 {
		cfg.FlowQueues = flowQueues[:]
	}
	raw, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	logf, err := os.Create(filepath.Join(r.dir, "log", p.id()+".err"))
	if err != nil {
		return err
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envRole+"="+p.role, envConfig+"="+string(raw))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		logf.Close()
		return err
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", p.id(), err)
	}
	done := make(chan struct{})
	p.cmd, p.stdin, p.done, p.stopped, p.expected = cmd, stdin, done, 0, false
	id := p.id()
	r.bg.Add(1)
	go func() {
		defer r.bg.Done()
		err := cmd.Wait()
		logf.Close()
		now := time.Now().UnixMicro()
		p.mu.Lock()
		expected, stopped := p.expected, p.stopped
		p.stopped = 0
		p.mu.Unlock()
		r.ended(id, cfg.Evidence, now, stopped, expected, err)
		close(done)
	}()
	r.flog.add("start", p.name, id)
	return nil
}

// signal sends sig to the current process, if it runs. For SIGSTOP it
// notes the time after the signal went, for SIGCONT before: the time
// counted as stopped is never longer than the true one.
func (p *proc) signal(sig syscall.Signal, expectExit bool) (chan struct{}, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sentAt = time.Now().UnixMicro()
	if !p.aliveLocked() {
		return nil, false
	}
	if expectExit {
		p.expected = true
	}
	switch sig {
	case syscall.SIGSTOP:
		if p.stopped != 0 {
			return p.done, false
		}
	case syscall.SIGCONT:
		if p.stopped == 0 {
			return p.done, false
		}
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		return p.done, false
	}
	if sig == syscall.SIGCONT {
		p.stopped = 0
	} else {
		p.sentAt = time.Now().UnixMicro()
	}
	if sig == syscall.SIGSTOP {
		p.stopped = p.sentAt
	}
	return p.done, true
}

// kill sends SIGKILL and waits for the process to end.
func (p *proc) kill(kind string) {
	done, ok := p.signal(syscall.SIGKILL, true)
	if ok {
		p.r.flog.add(kind, p.name, p.id())
	}
	if done != nil {
		<-done
	}
}

// stop sends SIGSTOP; cont sends SIGCONT.
func (p *proc) stop(kind string) bool {
	_, ok := p.signal(syscall.SIGSTOP, false)
	if ok {
		p.r.flog.addAt(p.sent(), kind, p.name, p.id())
	}
	return ok
}

func (p *proc) cont(kind string) {
	if _, ok := p.signal(syscall.SIGCONT, false); ok {
		p.r.flog.addAt(p.sent(), kind, p.name, p.id())
	}
}

func (p *proc) sent() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sentAt
}

// term sends SIGTERM (a graceful stop) and waits up to grace for the
// process to end, then kills it.
func (p *proc) term(kind string, grace time.Duration) {
	p.cont(kind + "-cont")
	done, ok := p.signal(syscall.SIGTERM, true)
	if ok {
		p.r.flog.add(kind, p.name, p.id())
	}
	if done == nil {
		return
	}
	select {
	case <-done:
	case <-time.After(grace):
		p.r.t.Errorf("%s did not stop within %v of SIGTERM: killed", p.id(), grace)
		p.kill(kind + "-timeout")
	}
}

// closeStdin ends the process through its stdin watch (the parent's end).
func (p *proc) closeStdin() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stdin != nil {
		_ = p.stdin.Close()
	}
}
