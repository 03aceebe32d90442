// Package gc finds instances that a provider holds for pools nobody claims —
// left by a crash between launch and status write, or by a pool deleted
// while its controller was away — and terminates them after a grace period.
// Instances without our ownership tags are never listed by providers, so
// they are never touched.
package gc

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/tidegpu/tidegpu/internal/provider"
)

// Orphans returns the instances to terminate now: owned by a pool that does
// not exist, launched at least grace ago, not already terminating. Pure.
func Orphans(insts []provider.Instance, pools map[string]bool, now time.Time, grace time.Duration) []provider.Instance {
	var out []provider.Instance
	for _, in := range insts {
		if pools[in.Pool] || in.State == provider.StateTerminating || now.Sub(in.LaunchedAt) < grace {
			continue
		}
		out = append(out, in)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Collect lists every instance of p, and terminates the orphans. pools says
// which pools exist now. It returns the instances it terminated.
func Collect(ctx context.Context, p provider.Provider, pools map[string]bool, now time.Time, grace time.Duration) ([]provider.Instance, error) {
	insts, err := p.List(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("gc: listing %s instances: %w", p.Name(), err)
	}
	var done []provider.Instance
	for _, in := range Orphans(insts, pools, now, grace) {
		if err := p.Terminate(ctx, in.ID); err != nil {
			return done, fmt.Errorf("gc: terminating %s of vanished pool %s: %w", in.ID, in.Pool, err)
		}
		done = append(done, in)
	}
	return done, nil
}
