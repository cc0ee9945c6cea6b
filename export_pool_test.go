package fleet

import (
	"context"
	"strconv"
	"time"
)

// SweepPools runs the sweeper's pool reconcile once (sweepPools) and
// returns how many pools it visited, entries it fixed and items it freed,
// and whether some pool finished a pass.
func SweepPools(ctx context.Context, f *Fleet, budget int) (pools, fixed, freed, cycles int, err error) {
	st, err := sweepPools(ctx, f, budget)
	return st.Pools, st.Fixed, st.Freed, st.Cycles, err
}

// ClaimScript runs pool_claim.lua once, unfiltered, under token: whether
// it took an item (and which), or found a tombstone.
func ClaimScript[P, T any](ctx context.Context, p *Pool[P, T], token string, hold time.Duration) (id string, tomb bool, err error) {
	c := p.core
	k, a := c.std()
	a = append(a, token, millis(hold), millis(hold+poolTombMargin), "", "0", strconv.Itoa(poolClaimBudget), "0")
	res, err := poolClaimScript.Exec(ctx, c.f.client, k, a).ToArray()
	if err != nil {
		return "", false, err
	}
	switch kind, _ := res[0].AsInt64(); kind {
	case 1:
		id, _ = res[1].ToString()
		return id, false, nil
	case 2:
		return "", true, nil
	}
	return "", false, nil
}

// AbandonScript runs pool_abandon.lua once for token, as a claim given up
// in flight does in the background: 0 when it left a tombstone, 1 when it
// undid a claim that had run.
func AbandonScript[P, T any](ctx context.Context, p *Pool[P, T], token string, hold time.Duration) (int64, error) {
	c := p.core
	k, a := c.std(c.tokenKey(token))
	return poolAbandonScript.Exec(ctx, c.f.client, k, append(a, token, millis(hold+poolTombMargin))).AsInt64()
}
