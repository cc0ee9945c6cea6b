package fleettest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ErrNoSentinel is returned by StartSentinel when neither redis-sentinel
// nor redis-server --sentinel can run a sentinel.
var ErrNoSentinel = errors.New("fleettest: no Redis Sentinel: neither redis-sentinel nor redis-server --sentinel ran (install it: apt-get install -y redis-sentinel)")

// SentinelConfig describes a Sentinel setup to start. The zero value starts
// a master, one replica and three sentinels that fail over after a second.
type SentinelConfig struct {
	// MasterSet is the name the sentinels monitor the master under.
	// Defaults to "fleet".
	MasterSet string
	// Replicas is the number of replicas of the master. Defaults to 1.
	Replicas int
	// Sentinels is the number of sentinels; a majority of them is the
	// quorum. Defaults to 3.
	Sentinels int
	// DownAfter is the sentinels' down-after-milliseconds: how long the
	// master may not answer before it counts as down. Defaults to 1 s.
	DownAfter time.Duration
	// FailoverTimeout is the sentinels' failover-timeout. Defaults to 3 s.
	FailoverTimeout time.Duration
	// Password, when set, is the requirepass (and masterauth) of the master
	// and replicas; the sentinels authenticate to them with it (sentinel
	// auth-pass). Defaults to none.
	Password string
	// SentinelPassword, when set, is the sentinels' own requirepass (and
	// sentinel-pass, which they use with each other). Defaults to none.
	SentinelPassword string
	// Args are extra redis-server arguments for the master and replicas.
	Args []string
}

// Sentinel is a Redis master with replicas, watched by sentinels that
// promote a replica when the master dies. Its methods are safe for
// concurrent use.
type Sentinel struct {
	// MasterSet is the name the sentinels know the master by.
	MasterSet string
	// Servers are the data nodes: Servers[0] is the first master, the rest
	// its replicas. Roles change with each failover: ask Master.
	Servers []*Server
	// Sentinels are the sentinel processes.
	Sentinels []*Server

	password, sentinelPassword string

	mu sync.Mutex
}

// StartSentinel starts a master, its replicas (in sync before it returns)
// and sentinels that monitor it, and waits until every sentinel knows
// every replica and every other sentinel, so that a failover can start as
// soon as the master dies. It needs redis-server and redis-cli on PATH, and
// redis-sentinel or a redis-server that runs with --sentinel (Debian:
// apt-get install -y redis-server redis-sentinel).
func StartSentinel(ctx context.Context, cfg SentinelConfig) (*Sentinel, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	if cfg.MasterSet == "" {
		cfg.MasterSet = "fleet"
	}
	if cfg.Replicas <= 0 {
		cfg.Replicas = 1
	}
	if cfg.Sentinels <= 0 {
		cfg.Sentinels = 3
	}
	if cfg.DownAfter <= 0 {
		cfg.DownAfter = time.Second
	}
	if cfg.FailoverTimeout <= 0 {
		cfg.FailoverTimeout = 3 * time.Second
	}
	bin, err := sentinelBin()
	if err != nil {
		return nil, err
	}
	st := &Sentinel{MasterSet: cfg.MasterSet, password: cfg.Password, sentinelPassword: cfg.SentinelPassword}
	// A replica that is promoted serves the others at once: no diskless
	// sync delay.
	args := append([]string{"--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0"}, cfg.Args...)
	m, err := StartServer(ctx, Config{Args: args, Password: cfg.Password})
	if err != nil {
		return nil, err
	}
	st.Servers = append(st.Servers, m)
	for range cfg.Replicas {
		r, err := StartServer(ctx, Config{Args: append(args, "--replicaof", "127.0.0.1", strconv.Itoa(m.Port)), Password: cfg.Password})
		if err != nil {
			st.Stop()
			return nil, err
		}
		st.Servers = append(st.Servers, r)
	}
	if err := waitReplicas(ctx, m, cfg.Replicas); err != nil {
		st.Stop()
		return nil, err
	}
	quorum := cfg.Sentinels/2 + 1
	for range cfg.Sentinels {
		s, err := startSentinelProc(ctx, bin, cfg, m.Port, quorum)
		if err != nil {
			st.Stop()
			return nil, err
		}
		st.Sentinels = append(st.Sentinels, s)
	}
	if err := st.waitKnown(ctx, cfg.Replicas, cfg.Sentinels-1); err != nil {
		st.Stop()
		return nil, err
	}
	return st, nil
}

var (
	sentinelBinOnce sync.Once
	sentinelBinArgs []string
	sentinelBinErr  error
)

// sentinelBin finds how to run a sentinel: redis-sentinel (or
// FLEET_REDIS_SENTINEL) from PATH, else the server (redis-server, or
// FLEET_REDIS_SERVER) with --sentinel (redis-sentinel is a link to it).
func sentinelBin() ([]string, error) {
	sentinelBinOnce.Do(func() {
		if p, err := exec.LookPath(sentinelProgram()); err == nil {
			sentinelBinArgs = []string{p}
			return
		}
		if p, err := exec.LookPath(serverProgram()); err == nil {
			out, err := exec.Command(p, "--version").CombinedOutput()
			if err == nil && strings.Contains(string(out), " server v=") { // Redis or Valkey
				sentinelBinArgs = []string{p, "--sentinel"}
				return
			}
		}
		sentinelBinErr = ErrNoSentinel
	})
	return sentinelBinArgs, sentinelBinErr
}

func startSentinelProc(ctx context.Context, bin []string, cfg SentinelConfig, masterPort, quorum int) (*Server, error) {
	dir, err := os.MkdirTemp("", "fleettest-sentinel-")
	if err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "sentinel.conf")
	body := fmt.Sprintf(`port %d
bind 127.0.0.1
daemonize no
dir %s
logfile %s
sentinel resolve-hostnames no
sentinel monitor %s 127.0.0.1 %d %d
sentinel down-after-milliseconds %s %d
sentinel failover-timeout %s %d
sentinel parallel-syncs %s 1
`, port, dir, filepath.Join(dir, "redis.log"), cfg.MasterSet, masterPort, quorum,
		cfg.MasterSet, cfg.DownAfter.Milliseconds(), cfg.MasterSet, cfg.FailoverTimeout.Milliseconds(), cfg.MasterSet)
	if cfg.Password != "" {
		body += fmt.Sprintf("sentinel auth-pass %s %s\n", cfg.MasterSet, confQuote(cfg.Password))
	}
	if cfg.SentinelPassword != "" {
		q := confQuote(cfg.SentinelPassword)
		body += fmt.Sprintf("requirepass %s\nsentinel sentinel-pass %s\n", q, q)
	}
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &Server{Dir: dir, Port: port, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Password: cfg.SentinelPassword}
	// redis-sentinel takes the file first; redis-server --sentinel too.
	if len(bin) == 1 {
		s.bin, s.args = bin, []string{conf}
	} else {
		s.bin, s.args = []string{bin[0]}, []string{conf, bin[1]}
	}
	if err := s.start(ctx); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("%w: %w", ErrNoSentinel, err)
	}
	return s, nil
}

// confQuote spells s as a quoted argument of a Redis config file: any
// byte but a printable ASCII one other than a quote or a backslash as
// \xHH, so that spaces, quotes and newlines stay in the value.
func confQuote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			fmt.Fprintf(&b, "\\x%02x", c)
		} else {
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// waitReplicas waits, up to two minutes (or ctx), until m reports n
// replicas online.
func waitReplicas(ctx context.Context, m *Server, n int) error {
	return poll(ctx, 2*time.Minute, func(ctx context.Context) error {
		got, err := OnlineReplicas(ctx, m)
		if err == nil && got < n {
			err = fmt.Errorf("%s has %d of %d replicas online", m.Addr, got, n)
		}
		return err
	})
}

// OnlineReplicas returns the number of replicas in sync with s (INFO
// replication: the slaveN lines with state=online).
func OnlineReplicas(ctx context.Context, s *Server) (int, error) {
	info, err := s.Cli(ctx, "info", "replication")
	if err != nil {
		return 0, err
	}
	n := 0
	for line := range strings.SplitSeq(info, "\n") {
		if strings.HasPrefix(line, "slave") && strings.Contains(line, "state=online") {
			n++
		}
	}
	return n, nil
}

// Role returns what s says it is: "master" or "slave" (INFO replication).
func Role(ctx context.Context, s *Server) (string, error) {
	info, err := s.Cli(ctx, "info", "replication")
	if err != nil {
		return "", err
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "role:"); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("fleettest: %s: no role in INFO replication", s.Addr)
}

// poll runs try every 50 ms until it returns nil, or bound (or ctx) ends.
func poll(ctx context.Context, bound time.Duration, try func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	for {
		err := try(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("fleettest: %w (last: %w)", ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (st *Sentinel) waitKnown(ctx context.Context, replicas, others int) error {
	for _, s := range st.Sentinels {
		err := poll(ctx, 30*time.Second, func(ctx context.Context) error {
			out, err := s.Cli(ctx, "sentinel", "master", st.MasterSet)
			if err != nil {
				return err
			}
			f := fields(out)
			if f["num-slaves"] != strconv.Itoa(replicas) || f["num-other-sentinels"] != strconv.Itoa(others) {
				return fmt.Errorf("sentinel %s knows %s replicas and %s other sentinels, want %d and %d",
					s.Addr, f["num-slaves"], f["num-other-sentinels"], replicas, others)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// fields reads redis-cli's output of a flat map reply (one key or value
// per line).
func fields(out string) map[string]string {
	lines := strings.Split(out, "\n")
	m := map[string]string{}
	for i := 0; i+1 < len(lines); i += 2 {
		m[strings.TrimSpace(lines[i])] = strings.TrimSpace(lines[i+1])
	}
	return m
}

// Addrs returns the sentinels' addresses.
func (st *Sentinel) Addrs() []string {
	out := make([]string, len(st.Sentinels))
	for i, s := range st.Sentinels {
		out[i] = s.Addr
	}
	return out
}

// URL returns a redis-sentinel:// URL naming every sentinel and the master
// set, for fleet.Options.URL: redis-sentinel://h1:p1,h2:p2,h3:p3/fleet,
// with the master's password in front (":pw@") and the sentinels' as
// ?sentinel_password= when they have them.
func (st *Sentinel) URL() string {
	u := "redis-sentinel://"
	if st.password != "" {
		u += (&url.URL{User: url.UserPassword("", st.password)}).User.String() + "@"
	}
	u += strings.Join(st.Addrs(), ",") + "/" + st.MasterSet
	if st.sentinelPassword != "" {
		u += "?" + url.Values{"sentinel_password": {st.sentinelPassword}}.Encode()
	}
	return u
}

// MasterAddr asks the sentinels, in turn, for the master's address.
func (st *Sentinel) MasterAddr(ctx context.Context) (string, error) {
	var last error = errors.New("no sentinel")
	for _, s := range st.Sentinels {
		out, err := s.Cli(ctx, "sentinel", "get-master-addr-by-name", st.MasterSet)
		if err != nil {
			last = err
			continue
		}
		hp := strings.Fields(out)
		if len(hp) != 2 {
			last = fmt.Errorf("sentinel %s answered %q", s.Addr, out)
			continue
		}
		return net.JoinHostPort(hp[0], hp[1]), nil
	}
	return "", fmt.Errorf("fleettest: no sentinel named the master: %w", last)
}

// Master returns the server the sentinels name as master.
func (st *Sentinel) Master(ctx context.Context) (*Server, error) {
	addr, err := st.MasterAddr(ctx)
	if err != nil {
		return nil, err
	}
	for _, s := range st.Servers {
		if s.Addr == addr {
			return s, nil
		}
	}
	return nil, fmt.Errorf("fleettest: the sentinels name %s, which is not one of the servers", addr)
}

// KillMaster ends the master's process with SIGKILL, as a crash would, and
// returns it (Rejoin brings it back as a replica of the new master).
// WaitFailover waits for the promotion.
func (st *Sentinel) KillMaster(ctx context.Context) (*Server, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	m, err := st.Master(ctx)
	if err != nil {
		return nil, err
	}
	m.Kill()
	return m, nil
}

// WaitFailover waits, up to a minute (or ctx), until every sentinel names
// a master other than old (an address), and that master says it is one,
// and returns it.
func (st *Sentinel) WaitFailover(ctx context.Context, old string) (*Server, error) {
	var m *Server
	err := poll(ctx, time.Minute, func(ctx context.Context) error {
		for _, s := range st.Sentinels {
			out, err := s.Cli(ctx, "sentinel", "get-master-addr-by-name", st.MasterSet)
			if err != nil {
				return err
			}
			if hp := strings.Fields(out); len(hp) != 2 || net.JoinHostPort(hp[0], hp[1]) == old {
				return fmt.Errorf("sentinel %s still names %q", s.Addr, out)
			}
		}
		var err error
		if m, err = st.Master(ctx); err != nil {
			return err
		}
		role, err := Role(ctx, m)
		if err == nil && role != "master" {
			err = fmt.Errorf("%s says it is a %s", m.Addr, role)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("fleettest: no failover from %s: %w", old, err)
	}
	return m, nil
}

// Rejoin restarts s, a killed master, and makes it a replica of the
// current master at once (REPLICAOF; the sentinels would do it too, but
// only after several seconds), then waits until the master counts every
// server but itself as an online replica.
func (st *Sentinel) Rejoin(ctx context.Context, s *Server) error {
	m, err := st.Master(ctx)
	if err != nil {
		return err
	}
	if err := s.Restart(ctx); err != nil {
		return err
	}
	if _, err := s.Cli(ctx, "replicaof", "127.0.0.1", strconv.Itoa(m.Port)); err != nil {
		return err
	}
	return st.WaitReplicas(ctx, len(st.Servers)-1)
}

// WaitReplicas waits, up to two minutes (or ctx), until the master has n
// replicas online (after a Restart of a killed master, say). It asks the
// sentinels for the master at each look: one that fails over meanwhile
// (the sentinels may elect another master while a server rejoins) is
// followed, not waited on.
func (st *Sentinel) WaitReplicas(ctx context.Context, n int) error {
	return poll(ctx, 2*time.Minute, func(ctx context.Context) error {
		m, err := st.Master(ctx)
		if err != nil {
			return err
		}
		got, err := OnlineReplicas(ctx, m)
		if err == nil && got < n {
			err = fmt.Errorf("%s has %d of %d replicas online", m.Addr, got, n)
		}
		return err
	})
}

// Stop ends every process and removes their directories.
func (st *Sentinel) Stop() {
	for _, s := range st.Sentinels {
		s.Stop()
	}
	for _, s := range st.Servers {
		s.Stop()
	}
}
