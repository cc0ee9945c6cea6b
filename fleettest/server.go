// Package fleettest gives tests, examples and benchmarks a Redis: Start
// finds a single node the way fleet's own tests do (FLEET_REDIS_URL, else a
// redis-server from PATH, else Docker) and hands a go-redis style client
// (rueidiscompat) for assertions with it; StartServer and StartCluster start
// throwaway redis-server processes, a single node or a Redis Cluster, and
// need the redis-server and redis-cli binaries on PATH (Debian: apt-get
// install -y redis-server); StartClusterWith adds replicas to a cluster,
// and StartSentinel starts a master with replicas watched by sentinels
// (apt-get install -y redis-sentinel, or a redis-server that runs with
// --sentinel), both with ways to SIGKILL a master and wait for its
// replica's promotion; StartProxy puts a TCP proxy that can cut or freeze
// connections in front of one. Package fleettest/handlertest runs a batch
// handler once, as a worker would, for a handler's unit test.
//
// FLEET_REDIS_SERVER, FLEET_REDIS_CLI and FLEET_REDIS_SENTINEL name other
// programs to run in place of redis-server, redis-cli and redis-sentinel,
// such as Valkey's valkey-server and valkey-cli (EnvServer).
//
// Servers keep nothing on disk beyond a temporary directory, listen on
// 127.0.0.1 only, and die with the process that started them (Linux), so a
// crashed test leaves no server behind.
package fleettest

import (
	"bufio"
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
	"syscall"
	"time"
)

// ErrNoRedisServer is returned when redis-server or redis-cli is not on
// PATH (by Available and StartServer, and by Start when Docker failed too).
var ErrNoRedisServer = errors.New("fleettest: redis-server not found on PATH (install it: apt-get install -y redis-server; fleettest.Start also takes the server of FLEET_REDIS_URL, or a Docker container)")

// TLS names the files of a TLS listener. CA signs the clients' certificates
// when ClientAuth is set.
type TLS struct {
	CertFile   string // server certificate (PEM)
	KeyFile    string // server key (PEM)
	CAFile     string // CA certificate (PEM)
	ClientAuth bool   // require client certificates; defaults to false
}

// Config describes a server to start. The zero value starts a plain single
// node on a free port.
type Config struct {
	// Port is the plain TCP port. Defaults to a free port.
	Port int
	// Cluster starts the node with cluster-enabled yes.
	Cluster bool
	// TLS, when set, adds a TLS listener on a second free port.
	TLS *TLS
	// AppendOnly turns AOF on (appendfsync always), so a restart keeps data.
	AppendOnly bool
	// Password, when set, is the server's requirepass (and masterauth, for
	// a replica of a master with the same password). Server.Cli and
	// Server.URL use it.
	Password string
	// Args are extra redis-server arguments, such as "--maxmemory", "10mb".
	Args []string
	// ClusterNodeTimeout is the cluster-node-timeout of a Cluster node: how
	// long a master may be unreachable before its replica takes over.
	// Defaults to 5 s.
	ClusterNodeTimeout time.Duration
}

// Server is one redis-server process. Its methods are safe for concurrent use.
type Server struct {
	// Addr is the plain address, "127.0.0.1:port".
	Addr string
	// Port is the plain TCP port.
	Port int
	// TLSPort is the TLS port, 0 without TLS.
	TLSPort int
	// Dir is the server's working directory.
	Dir string
	// Password is the password clients authenticate with ("" for none):
	// Config.Password, or a sentinel's SentinelConfig.SentinelPassword.
	Password string

	mu   sync.Mutex
	bin  []string // the program and its first arguments; redis-server when empty
	args []string
	cmd  *exec.Cmd
	done chan struct{}
}

// FreePort returns a TCP port on 127.0.0.1 that nothing listens on now.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Available reports whether redis-server and redis-cli (or the programs
// that FLEET_REDIS_SERVER and FLEET_REDIS_CLI name) are on PATH.
func Available() error {
	for _, bin := range []string{serverProgram(), cliProgram()} {
		if _, err := exec.LookPath(bin); err != nil {
			return ErrNoRedisServer
		}
	}
	return nil
}

// StartServer starts a redis-server and waits until it answers PING.
//
// The free ports it picks (FreePort) may be taken by another process before
// the server binds them, on a busy machine: it then tries again on other
// ports, up to five times in all.
func StartServer(ctx context.Context, cfg Config) (*Server, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	for try := 1; ; try++ {
		s, err := startServer(ctx, cfg)
		if err == nil || try == 5 || !strings.Contains(err.Error(), "Address already in use") || ctx.Err() != nil {
			return s, err
		}
	}
}

// startServer is one try of StartServer.
func startServer(ctx context.Context, cfg Config) (*Server, error) {
	dir, err := os.MkdirTemp("", "fleettest-redis-")
	if err != nil {
		return nil, err
	}
	s := &Server{Dir: dir, Port: cfg.Port, Password: cfg.Password}
	if s.Port == 0 {
		if s.Port, err = FreePort(); err != nil {
			return nil, err
		}
	}
	s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port))
	s.args = []string{
		"--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1",
		"--dir", dir, "--save", "", "--daemonize", "no",
		"--logfile", filepath.Join(dir, "redis.log"),
	}
	if cfg.AppendOnly {
		s.args = append(s.args, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		s.args = append(s.args, "--appendonly", "no")
	}
	if cfg.Cluster {
		busPort, err := FreePort()
		if err != nil {
			return nil, err
		}
		timeout := cfg.ClusterNodeTimeout
		if timeout <= 0 {
			timeout = 5 * time.Second
		}
		s.args = append(s.args, "--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(busPort),
			"--cluster-config-file", filepath.Join(dir, "nodes.conf"), "--cluster-node-timeout", strconv.FormatInt(timeout.Milliseconds(), 10))
	}
	if cfg.TLS != nil {
		if s.TLSPort, err = FreePort(); err != nil {
			return nil, err
		}
		auth := "no"
		if cfg.TLS.ClientAuth {
			auth = "yes"
		}
		s.args = append(s.args, "--tls-port", strconv.Itoa(s.TLSPort),
			"--tls-cert-file", cfg.TLS.CertFile, "--tls-key-file", cfg.TLS.KeyFile,
			"--tls-ca-cert-file", cfg.TLS.CAFile, "--tls-auth-clients", auth)
	}
	if cfg.Password != "" {
		s.args = append(s.args, "--requirepass", cfg.Password, "--masterauth", cfg.Password)
	}
	s.args = append(s.args, cfg.Args...)
	if err := s.start(ctx); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

func (s *Server) start(ctx context.Context) error {
	bin := s.bin
	if len(bin) == 0 {
		bin = []string{serverProgram()}
	}
	cmd := exec.Command(bin[0], append(append([]string(nil), bin[1:]...), s.args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("fleettest: start %s: %w", bin[0], err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	if err := waitPing(ctx, s.Addr, s.Password, done); err != nil {
		s.kill()
		return fmt.Errorf("fleettest: %s on %s did not come up: %w%s", strings.Join(bin, " "), s.Addr, err, s.logTail())
	}
	return nil
}

func (s *Server) logTail() string {
	b, err := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
	if err != nil || len(b) == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return "\n  redis.log: " + strings.Join(lines, "\n  ")
}

// waitPing dials addr until the server answers PING with PONG (after AUTH
// with password, when it is not ""): it is up, its data loaded.
func waitPing(ctx context.Context, addr, password string, exited <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	for {
		if err := ping(ctx, addr, password); err == nil {
			return nil
		}
		select {
		case <-exited:
			return errors.New("the process exited")
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Ping checks that a Redis server answers PING on addr, within a second
// (or ctx), with a connection of its own.
func Ping(ctx context.Context, addr string) error { return ping(ctx, addr, "") }

// ping is Ping after AUTH with password, when it is not "".
func ping(ctx context.Context, addr, password string) error {
	d := net.Dialer{Timeout: time.Second}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	req := "PING\r\n"
	if password != "" {
		req = fmt.Sprintf("*2\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n", len(password), password) + req
	}
	if _, err := conn.Write([]byte(req)); err != nil {
		return err
	}
	r := bufio.NewReader(conn)
	if password != "" {
		line, err := r.ReadString('\n')
		if err != nil {
			return err
		}
		if !strings.HasPrefix(line, "+OK") {
			return fmt.Errorf("AUTH: unexpected reply %q", strings.TrimSpace(line))
		}
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("unexpected reply %q", strings.TrimSpace(line))
	}
	return nil
}

func (s *Server) kill() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-done
}

// URL returns the server's redis:// URL, with its password when it has
// one.
func (s *Server) URL() string {
	if s.Password != "" {
		return "redis://" + (&url.URL{User: url.UserPassword("", s.Password)}).User.String() + "@" + s.Addr
	}
	return "redis://" + s.Addr
}

// Kill ends the process at once with SIGKILL, as a crash would. Restart
// brings it back on the same port.
func (s *Server) Kill() { s.kill() }

// Restart stops the server (SIGTERM, so an AOF is flushed) and starts it
// again on the same ports with the same arguments.
func (s *Server) Restart(ctx context.Context) error {
	s.stopGraceful()
	return s.start(ctx)
}

func (s *Server) stopGraceful() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

// Stop ends the server and removes its directory.
func (s *Server) Stop() {
	s.kill()
	os.RemoveAll(s.Dir)
}

// Cli runs redis-cli against the server (authenticated with its Password)
// and returns its trimmed output.
func (s *Server) Cli(ctx context.Context, args ...string) (string, error) {
	return cliAuth(ctx, s.Port, s.Password, args...)
}

// cliAuth runs redis-cli on port, with password (through REDISCLI_AUTH,
// not the command line) when it is not "".
func cliAuth(ctx context.Context, port int, password string, args ...string) (string, error) {
	full := append([]string{"-h", "127.0.0.1", "-p", strconv.Itoa(port)}, args...)
	cmd := exec.CommandContext(ctx, cliProgram(), full...)
	if password != "" {
		cmd.Env = append(os.Environ(), "REDISCLI_AUTH="+password)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("fleettest: redis-cli %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}
