package fleet

import (
	"context"
	"strconv"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet/internal/keys"
)

// Counter is an atomic integer shared by the fleet (fleet:counter:<name>,
// no TTL). Every change is one INCRBY, so concurrent changes never lose an
// update. Reads go to the server. A Counter is safe for concurrent use.
type Counter struct {
	f    *Fleet
	name string
	key  string
	err  error
}

// Counter returns the counter name. A bad name makes every call return
// ErrInvalidName.
func (f *Fleet) Counter(name string) *Counter {
	return &Counter{f: f, name: name, key: f.keys.Counter(name), err: keys.Check(keys.KindCounter, name)}
}

func (c *Counter) ready(ctx context.Context) error {
	if c.err != nil {
		return c.err
	}
	return c.f.alive(ctx)
}

// Incr adds one and returns the new value.
func (c *Counter) Incr(ctx context.Context) (int64, error) { return c.IncrBy(ctx, 1) }

// Decr subtracts one and returns the new value.
func (c *Counter) Decr(ctx context.Context) (int64, error) { return c.IncrBy(ctx, -1) }

// IncrBy adds n (which may be negative) and returns the new value. A key
// that holds something other than an integer gives ErrWrongType and is left
// as it was.
func (c *Counter) IncrBy(ctx context.Context, n int64) (int64, error) {
	if err := c.ready(ctx); err != nil {
		return 0, opErr("counter incr", c.name, err)
	}
	cl := c.f.client
	v, err := cl.Do(ctx, cl.B().Incrby().Key(c.key).Increment(n).Build()).AsInt64()
	return v, opErr("counter incr", c.name, err)
}

// Get returns the current value; a counter never written is 0.
func (c *Counter) Get(ctx context.Context) (int64, error) {
	if err := c.ready(ctx); err != nil {
		return 0, opErr("counter get", c.name, err)
	}
	cl := c.f.client
	s, err := cl.Do(ctx, cl.B().Get().Key(c.key).Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return 0, nil
	}
	if err != nil {
		return 0, opErr("counter get", c.name, err)
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, opErr("counter get", c.name, ErrWrongType)
	}
	return v, nil
}

// Set replaces the value. A key that holds a hash, list or other
// non-string type gives ErrWrongType and is left as it was.
func (c *Counter) Set(ctx context.Context, v int64) error {
	if err := c.ready(ctx); err != nil {
		return opErr("counter set", c.name, err)
	}
	return opErr("counter set", c.name, c.f.setString(ctx, c.key, strconv.FormatInt(v, 10), 0))
}

// Delete removes the counter (it reads 0 afterwards) and reports whether it
// existed.
func (c *Counter) Delete(ctx context.Context) (bool, error) {
	if err := c.ready(ctx); err != nil {
		return false, opErr("counter delete", c.name, err)
	}
	cl := c.f.client
	n, err := cl.Do(ctx, cl.B().Del().Key(c.key).Build()).AsInt64()
	return n == 1, opErr("counter delete", c.name, err)
}

// Err returns the error every call of the Counter would return for its name
// (ErrInvalidName), or nil.
func (c *Counter) Err() error { return c.err }
