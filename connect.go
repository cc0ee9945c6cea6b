package fleet

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"sync/atomic"

	"github.com/redis/rueidis"
)

// openDialer dials for a client that Open builds. While Open runs, every
// dial also ends with Open's ctx (rueidis dials under its own timeout
// only); after Open it dials as rueidis would. A TLS handshake that fails
// after the TCP connection is up says so, since the likely cause is
// rediss:// against a plain-text port (which never answers a handshake).
type openDialer struct {
	open atomic.Pointer[context.Context] // Open's ctx, until Open returns
}

func (d *openDialer) dial(ctx context.Context, dst string, dialer *net.Dialer, cfg *tls.Config) (net.Conn, error) {
	var cancel context.CancelFunc
	if dialer.Timeout > 0 { // as tls.Dialer does: the handshake too
		ctx, cancel = context.WithTimeout(ctx, dialer.Timeout)
	} else {
		ctx, cancel = context.WithCancel(ctx)
	}
	defer cancel()
	if p := d.open.Load(); p != nil {
		defer context.AfterFunc(*p, cancel)()
	}
	conn, err := dialer.DialContext(ctx, "tcp", dst)
	if err != nil || cfg == nil {
		return conn, err
	}
	if cfg.ServerName == "" {
		host, _, _ := net.SplitHostPort(dst)
		cfg = cfg.Clone()
		cfg.ServerName = host
	}
	tc := tls.Client(conn, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = conn.Close()
		var rh tls.RecordHeaderError
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) &&
			!errors.Is(err, os.ErrDeadlineExceeded) && !errors.Is(err, io.EOF) && !errors.As(err, &rh) {
			return nil, err // a handshake with a TLS server that failed (a certificate)
		}
		return nil, fmt.Errorf("%w with %s: is it a plain-text port? use redis:// for a server without TLS: %w", errTLSHandshake, dst, err)
	}
	return tc, nil
}

// checkURL refuses, naming the fix, a URL that rueidis would refuse with a
// parse error: a bare host:port, or a scheme other than redis, rediss and
// unix.
func checkURL(u string) error {
	scheme, _, ok := strings.Cut(u, "://")
	if !ok {
		return fmt.Errorf("%w: URL %q has no scheme: write redis://%s (rediss:// for TLS), or put host:port in Addrs", ErrInvalidOptions, u, u)
	}
	switch scheme {
	case "redis", "rediss", "unix":
		if _, err := url.Parse(u); err != nil {
			return fmt.Errorf("%w: URL: %w", ErrInvalidOptions, err)
		}
		return nil
	}
	return fmt.Errorf("%w: URL %q: scheme %q is not redis://, rediss:// (TLS), unix:// or redis-sentinel://", ErrInvalidOptions, u, scheme)
}

// connectErr wraps a failure to connect (or of Open's first commands) with
// the sentinel that classifies it and, where it is likely, its cause.
func connectErr(addrs []string, err error) error {
	where := ""
	if len(addrs) > 0 {
		where = " to " + strings.Join(addrs, ",")
	}
	msg := err.Error()
	switch {
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return opErr("connect"+where, "", err)
	case strings.Contains(msg, "unknown message type"):
		// RESP starts every reply with one of a few bytes; an HTTP
		// server answers "HTTP/1.1 400" or "<html>".
		return opErr("connect"+where, "", fmt.Errorf("%w: the server does not speak the Redis protocol (an HTTP server? another service on this port?): %w", ErrInvalidOptions, err))
	case strings.Contains(msg, "DB index is out of range"):
		return opErr("connect"+where, "", fmt.Errorf("%w: DB: the database number is out of range for this server (see its \"databases\" setting): %w", ErrInvalidOptions, err))
	}
	kind := classify(err)
	if kind == nil {
		kind = ErrUnavailable
	}
	if ownError(err) {
		return opErr("connect"+where, "", err)
	}
	return &opError{op: "connect" + where, kind: kind, err: err}
}

// connectClient builds the rueidis client of co with Open's ctx bounding
// its dials, falling back to no caching on a server without RESP3 client
// tracking.
func (f *Fleet) connectClient(ctx context.Context, co rueidis.ClientOption) (rueidis.Client, rueidis.ClientOption, error) {
	var d openDialer
	d.open.Store(&ctx)
	defer d.open.Store(nil)
	co.DialCtxFn = d.dial
	client, err := rueidis.NewClient(co)
	if errors.Is(err, rueidis.ErrNoCache) {
		f.log.Warn("fleet: server has no RESP3 client tracking; caching off")
		co.DisableCache = true
		client, err = rueidis.NewClient(co)
	}
	switch {
	case err == nil:
	case ctx.Err() != nil && !errors.Is(err, ctx.Err()):
		err = fmt.Errorf("%w (%w)", ctx.Err(), err)
	case ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
		err = fmt.Errorf("%w: no answer within DialTimeout: %w", ErrUnavailable, err) // not Open's ctx
	}
	return client, co, err
}
