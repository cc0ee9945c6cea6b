package fleet

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet/internal/keys"
)

// poolSweepBudget is how many entries sweepPools examines per call when
// its caller passes a budget <= 0.
const poolSweepBudget = 2048

// poolSweepStateTTL bounds how long a pool's reconcile position
// (fleet:pidx:<name>:sweep) outlives the last sweep that moved it.
const poolSweepStateTTL = time.Hour

// poolSweepStats counts what one sweepPools call did.
type poolSweepStats struct {
	Pools    int // pools visited
	Examined int // hash and index entries looked at (about)
	Fixed    int // entries indexed, moved between free and held, or removed
	Freed    int // items that became claimable
	Cycles   int // pools whose reconcile finished a whole pass in this call
}

// sweepPools reconciles the derived indexes of every pool in fleet:pools
// with its hash, about budget entries per call in all (shared between the
// pools, at least 64 each), in bounded script steps that resume where the
// last call stopped (fleet:pidx:<name>:sweep). A pass checks each entry of
// the hash (pool_check.lua: index what the indexes lack, move items whose
// claim key was set or deleted by another client), then drops index
// entries of items gone from the hash (pool_clean.lua over the item, free
// and bad sets). It finds what a claim cannot see cheaply: another
// client's writes that leave the hash's size unchanged (an item deleted
// and another added), and claims released early by another client.
//
// The sweeper calls it once per sweep; an error names the pool.
func sweepPools(ctx context.Context, f *Fleet, budget int) (poolSweepStats, error) {
	var st poolSweepStats
	if budget <= 0 {
		budget = poolSweepBudget
	}
	names, err := f.client.Do(ctx, f.client.B().Smembers().Key(f.keys.Pools()).Build()).AsStrSlice()
	if err != nil {
		return st, opErr("pool sweep", "", err)
	}
	names = slices.DeleteFunc(names, func(n string) bool { return keys.Check(keys.KindPool, n) != nil })
	if len(names) == 0 {
		return st, nil
	}
	slices.Sort(names)
	per := max(budget/len(names), 64)
	o, _ := (&PoolOptions{}).withDefaults()
	for _, name := range names {
		if err := f.alive(ctx); err != nil {
			return st, err
		}
		st.Pools++
		if err := newPoolCore(f, name, o).sweep(ctx, per, &st); err != nil {
			return st, opErr("pool sweep", name, err)
		}
	}
	return st, nil
}

// sweep phases, in order: check the hash, then clean the item, free and
// bad sets.
var poolSweepPhases = []string{"h", "a", "f", "b"}

// sweep runs reconcile steps of this pool until about budget entries were
// examined or a pass ended.
func (c *poolCore) sweep(ctx context.Context, budget int, st *poolSweepStats) error {
	cl := c.f.client
	state, err := cl.Do(ctx, cl.B().Get().Key(c.idx.Sweep).Build()).ToString()
	if err != nil && !rueidis.IsRedisNil(err) {
		return err
	}
	phase, cursor, ok := strings.Cut(state, ":")
	if !ok || !slices.Contains(poolSweepPhases, phase) {
		phase, cursor = "h", "0"
	}
	for budget > 0 {
		count := min(budget, poolIndexStep)
		budget -= count
		st.Examined += count
		var next string
		switch phase {
		case "h":
			var freed, fixed int64
			if next, freed, fixed, err = c.checkStepFixed(ctx, cursor, count); err != nil {
				return err
			}
			st.Freed += int(freed)
			st.Fixed += int(fixed)
		default:
			set := map[string]string{"a": c.idx.All, "f": c.idx.Free, "b": c.idx.Bad}[phase]
			k, a := c.std(set)
			res, err := poolCleanScript.Exec(ctx, cl, k, append(a, cursor, strconv.Itoa(count), "", "")).ToArray()
			if err != nil {
				return err
			}
			if len(res) != 2 {
				return unexpectedReply("pool clean", len(res))
			}
			if next, err = res[0].ToString(); err != nil {
				return err
			}
			n, _ := res[1].AsInt64()
			st.Fixed += int(n)
		}
		cursor = next
		if cursor != "0" {
			continue
		}
		i := slices.Index(poolSweepPhases, phase)
		if i == len(poolSweepPhases)-1 {
			st.Cycles++
			return cl.Do(ctx, cl.B().Del().Key(c.idx.Sweep).Build()).Error()
		}
		phase = poolSweepPhases[i+1]
	}
	return cl.Do(ctx, cl.B().Set().Key(c.idx.Sweep).Value(phase+":"+cursor).Px(poolSweepStateTTL).Build()).Error()
}
