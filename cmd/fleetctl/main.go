// Command fleetctl is an operator's tool over fleet's admin API: it lists
// workers, queues, pools, dead letters and the catalog, reads and changes
// worker configs, removes workers, types and pools (asking first, or with
// --yes), repairs derived keys (sync) and checks the server (health). It
// prints the ACL rules of a tenant's users (acl, which needs no Redis).
//
// Usage:
//
//	fleetctl [--url URL] [--prefix P] [--layout compat|tagged] [--json] <command> [flags] [args]
//
// The URL defaults to $FLEET_REDIS_URL. Every command takes the same
// connection flags (before or after its name) and --help.
//
// Exit codes:
//
//	0  success
//	1  an error (Redis unreachable, a command failed)
//	2  usage: unknown command, bad flag or argument
//	3  health: problems found (health), or sync found data it could not repair
//	4  not found: the dead letter, catalog type, ... named does not exist
//
// With --json, output and errors are JSON; an error is
// {"error": "...", "code": N} on stderr.
//
// Each command lives in a cmd_<name>.go file that registers itself in an
// init function; adding a command is adding a file.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/term"

	"github.com/fleet-go/fleet"
)

// Exit codes.
const (
	exitOK       = 0
	exitError    = 1
	exitUsage    = 2
	exitProblems = 3
	exitNotFound = 4
)

// command is one subcommand of fleetctl.
type command struct {
	name    string
	args    string // usage of the positional arguments
	summary string
	// flags adds the command's own flags to fs (may be nil).
	flags func(fs *flag.FlagSet)
	// run does the work; it returns an exit code.
	run func(ctx context.Context, a *app, args []string) int
	// offline commands need no Redis: run gets no Fleet (a.f is nil).
	offline bool
}

// commands is the table of subcommands, filled by each cmd_*.go file.
var commands = map[string]*command{}

func register(c *command) { commands[c.name] = c }

// conn is the connection flags every command takes.
type conn struct {
	url, prefix, layout string
	keys                string // a key file for sealed values (seal.go)
	json, yes           bool
	timeout             time.Duration
}

func (c *conn) bind(fs *flag.FlagSet) {
	fs.StringVar(&c.url, "url", c.url, "Redis URL (defaults to $FLEET_REDIS_URL)")
	fs.StringVar(&c.prefix, "prefix", c.prefix, "key prefix of the fleet")
	fs.StringVar(&c.layout, "layout", c.layout, "key layout: compat or tagged (defaults to compat on a single node, tagged on a cluster)")
	fs.StringVar(&c.keys, "keys", c.keys, "a key file to open sealed payloads, results and progress with: one '<id> <base64 of 32 bytes>' per line (defaults to $FLEET_KEYS_FILE; without one they show as sealed)")
	fs.BoolVar(&c.json, "json", c.json, "print JSON instead of tables")
	fs.DurationVar(&c.timeout, "timeout", c.timeout, "bound on the whole command")
	fs.BoolVar(&c.yes, "yes", c.yes, "do not ask before a destructive command (remove-worker, remove-type, remove-pool)")
}

// app is what a command runs with.
type app struct {
	conn
	out, err io.Writer
	in       io.Reader // where confirmations are read
	tty      bool      // stderr is a terminal: progress may be shown
	ttyIn    bool      // stdin is a terminal: a confirmation may be asked
	f        *fleet.Fleet
}

// stdin and stdinTTY are what run reads confirmations from (tests set them).
var (
	stdin    io.Reader = os.Stdin
	stdinTTY bool
)

// open connects to the fleet.
func (a *app) open(ctx context.Context) error {
	if a.url == "" {
		a.url = os.Getenv("FLEET_REDIS_URL") // not a flag default: --help would print its password
	}
	if a.url == "" {
		return fmt.Errorf("no Redis URL: pass --url or set FLEET_REDIS_URL")
	}
	if a.keys == "" {
		a.keys = os.Getenv("FLEET_KEYS_FILE")
	}
	var openWith fleet.Sealer
	if a.keys != "" {
		kr, err := readKeyFile(a.keys)
		if err != nil {
			return err
		}
		openWith = kr
	}
	f, err := fleet.Open(ctx, fleet.Options{URL: a.url, Prefix: a.prefix, Layout: fleet.Layout(a.layout), OpenWith: openWith})
	if err != nil {
		return err
	}
	a.f = f
	return nil
}

// emit prints v as JSON with --json, else calls table with a tabwriter.
func (a *app) emit(v any, table func(w *tabwriter.Writer)) {
	if a.json {
		enc := json.NewEncoder(a.out)
		enc.SetIndent("", "  ")
		_ = enc.Encode(v)
		return
	}
	w := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
	table(w)
	_ = w.Flush()
}

// fail prints err and returns the exit code it means.
func (a *app) fail(err error) int {
	code := exitError
	switch {
	case errors.Is(err, fleet.ErrInvalidName), errors.Is(err, fleet.ErrInvalidArgument), errors.Is(err, fleet.ErrInvalidConfig):
		code = exitUsage
	case errors.Is(err, fleet.ErrNotFound):
		code = exitNotFound
	}
	return a.problem(code, err.Error())
}

// notFound prints err and returns exitNotFound.
func (a *app) notFound(err error) int { return a.problem(exitNotFound, err.Error()) }

// problem prints msg on stderr, as {"error": msg, "code": code} with
// --json, and returns code.
func (a *app) problem(code int, msg string) int {
	if a.json {
		_ = json.NewEncoder(a.err).Encode(struct {
			Error string `json:"error"`
			Code  int    `json:"code"`
		}{msg, code})
		return code
	}
	fmt.Fprintln(a.err, "fleetctl:", msg)
	return code
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: fleetctl [--url URL] [--prefix P] [--layout compat|tagged] [--json] <command> [flags] [args]")
	fmt.Fprintln(w, "\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-9s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nexit codes: 0 ok, 1 error, 2 usage, 3 problems found, 4 not found")
	fmt.Fprintln(w, "run 'fleetctl <command> --help' for a command's flags")
}

// run is main without os.Exit, for tests.
func run(args []string, stdout, stderr io.Writer, tty bool) int {
	a, cmd, fs, code, ok := parse(args, stdout, stderr, tty)
	if !ok {
		return code
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	if cmd.offline {
		return cmd.run(ctx, a, fs.Args())
	}
	if err := a.open(ctx); err != nil {
		return a.fail(err)
	}
	defer a.f.Close()
	return cmd.run(ctx, a, fs.Args())
}

// parse reads the command line: the app with its connection flags, the
// command and its flag set, parsed. When the line asks for no more (help,
// a usage error, an unknown command), ok is false and code is the exit
// code; what it had to say went to stderr.
func parse(args []string, stdout, stderr io.Writer, tty bool) (a *app, cmd *command, fs *flag.FlagSet, code int, ok bool) {
	a = &app{conn: conn{timeout: 5 * time.Minute}, out: stdout, err: stderr, in: stdin, tty: tty, ttyIn: stdinTTY}
	top := flag.NewFlagSet("fleetctl", flag.ContinueOnError)
	top.SetOutput(stderr)
	a.conn.bind(top)
	top.Usage = func() { usage(stderr) }
	if err := top.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return a, nil, nil, exitOK, false
		}
		return a, nil, nil, exitUsage, false
	}
	if top.NArg() == 0 {
		usage(stderr)
		return a, nil, nil, exitUsage, false
	}
	cmd, known := commands[top.Arg(0)]
	if !known {
		if a.json {
			return a, nil, nil, a.problem(exitUsage, fmt.Sprintf("unknown command %q", top.Arg(0))), false
		}
		fmt.Fprintf(stderr, "fleetctl: unknown command %q\n", top.Arg(0))
		usage(stderr)
		return a, nil, nil, exitUsage, false
	}
	fs = flag.NewFlagSet("fleetctl "+cmd.name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	a.conn.bind(fs)
	if cmd.flags != nil {
		cmd.flags(fs)
	}
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: fleetctl %s [flags] %s\n\n%s\n\nflags:\n", cmd.name, cmd.args, cmd.summary)
		fs.PrintDefaults()
	}
	if err := fs.Parse(interleave(fs, top.Args()[1:])); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return a, cmd, fs, exitOK, false
		}
		return a, cmd, fs, exitUsage, false
	}
	return a, cmd, fs, 0, true
}

// interleave moves flags that follow positional arguments before them, so
// that "dlq list jobs --json" works as "dlq list --json jobs".
func interleave(fs *flag.FlagSet, args []string) []string {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		s := args[i]
		if s == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if !strings.HasPrefix(s, "-") || s == "-" {
			pos = append(pos, s)
			continue
		}
		flags = append(flags, s)
		name := strings.TrimLeft(s, "-")
		if strings.Contains(name, "=") {
			continue
		}
		if f := fs.Lookup(name); f != nil {
			if bf, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && bf.IsBoolFlag() {
				continue
			}
			if i+1 < len(args) {
				i++
				flags = append(flags, args[i])
			}
		}
	}
	return append(flags, pos...)
}

func main() {
	stdinTTY = isTerminal(os.Stdin)
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, isTerminal(os.Stderr)))
}

// isTerminal reports whether f is a terminal (not merely a character
// device such as /dev/null).
func isTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }

// usageErr prints a usage problem of cmd and returns exitUsage.
func (a *app) usageErr(cmd, format string, args ...any) int {
	msg := fmt.Sprintf(format, args...)
	if a.json {
		return a.problem(exitUsage, cmd+": "+msg)
	}
	fmt.Fprintf(a.err, "fleetctl %s: %s (see fleetctl %s --help)\n", cmd, msg, cmd)
	return exitUsage
}

func ts(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}
