package tidepool

import (
	"context"
	"fmt"

	"github.com/tidegpu/tidegpu/internal/engine"
)

// Locate finds the pool of a cloud instance: first in the engines' own
// view of their pools, then in their providers' listings (the ownership
// tags), so that an instance launched a moment ago is found too. ok is
// false for an instance of no pool of this installation.
func (e *Engines) Locate(ctx context.Context, id string) (pool string, ok bool, err error) {
	for _, pv := range e.Pools() {
		for _, in := range pv.Status.Instances {
			if in.ID == id {
				return pv.Name, true, nil
			}
		}
	}
	e.mu.Lock()
	provs := make([]string, 0, len(e.providers))
	for k := range e.providers {
		provs = append(provs, k)
	}
	e.mu.Unlock()
	for _, k := range provs {
		e.mu.Lock()
		p := e.providers[k]
		e.mu.Unlock()
		insts, lerr := p.List(ctx, "")
		if lerr != nil {
			err = fmt.Errorf("listing instances of %s: %w", k, lerr)
			continue
		}
		for _, in := range insts {
			if in.ID == id && in.Pool != "" && e.Has(in.Pool) {
				return in.Pool, true, nil
			}
		}
	}
	return "", false, err
}

// Round wakes a pool for a round at once.
func (e *Engines) Round(pool string) error {
	e.mu.Lock()
	m := e.managers[e.poolKey[pool]]
	e.mu.Unlock()
	if m == nil {
		return fmt.Errorf("pool %q: %w", pool, engine.ErrNotFound)
	}
	return m.Trigger(pool)
}
