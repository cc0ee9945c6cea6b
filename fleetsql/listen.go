package fleetsql

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
)

// listen LISTENs on the outbox's channel on a connection of its own, and
// sends on wake (without blocking) at each notification, and each time it
// starts listening (rows may have been committed while nobody listened).
// After a lost connection it listens again, with a backoff. It returns
// when ctx ends.
func (r *relay) listen(ctx context.Context, wake chan<- struct{}) {
	const first = 50 * time.Millisecond
	backoff := first
	for {
		err := r.listenOnce(ctx, wake, func() { backoff = first })
		if ctx.Err() != nil {
			return
		}
		r.log.Warn("fleetsql: relay LISTEN connection lost; listening again", "error", err, "retry_in", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, r.opts.RetryMax)
	}
}

func poke(wake chan<- struct{}) {
	select {
	case wake <- struct{}{}:
	default: // a wake is pending already
	}
}

// listenOnce holds one connection of the pool for LISTEN until it fails
// or ctx ends; the connection is closed then, never returned to the pool
// (it would go on receiving notifications).
func (r *relay) listenOnce(ctx context.Context, wake chan<- struct{}, ok func()) error {
	cctx, cancel := context.WithTimeout(ctx, r.opts.BatchTimeout)
	conn, err := r.o.db.Conn(cctx)
	cancel()
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		sc, isPgx := dc.(*stdlib.Conn)
		if !isPgx {
			return fmt.Errorf("driver connection %T is not pgx's", dc)
		}
		pc := sc.Conn()
		defer func() {
			cctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_ = pc.Close(cctx)
		}()
		lctx, cancel := context.WithTimeout(ctx, r.opts.BatchTimeout)
		_, err := pc.Exec(lctx, `LISTEN "`+strings.ReplaceAll(r.o.channel, `"`, `""`)+`"`)
		cancel()
		if err != nil {
			return errors.Join(driver.ErrBadConn, err)
		}
		ok()
		poke(wake)
		for {
			if _, err := pc.WaitForNotification(ctx); err != nil {
				return errors.Join(driver.ErrBadConn, err)
			}
			poke(wake)
		}
	})
}
