package registrar

import (
	"context"
	"errors"
	"sync"
)

// Router sends each pool's targets to the registrars that pool uses: the
// default ones (such as the embedded gateway) plus the pool's own (such as
// its Kong). It reports in-flight counts from the first default registrar
// that can.
type Router struct {
	defaults []Registrar

	mu     sync.RWMutex
	byPool map[string]Registrar
}

var (
	_ Registrar        = (*Router)(nil)
	_ InFlightReporter = (*Router)(nil)
)

// NewRouter returns a router that always syncs the default registrars.
func NewRouter(defaults ...Registrar) *Router {
	return &Router{defaults: defaults, byPool: map[string]Registrar{}}
}

// Set gives a pool its own registrar (nil removes it). The caller owns the
// removed registrar's clean-up.
func (r *Router) Set(pool string, reg Registrar) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if reg == nil {
		delete(r.byPool, pool)
		return
	}
	r.byPool[pool] = reg
}

// Get returns the pool's own registrar, if any.
func (r *Router) Get(pool string) Registrar {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.byPool[pool]
}

// Sync syncs the default registrars and the pool's own; every one is tried
// even when another fails.
func (r *Router) Sync(ctx context.Context, pool string, targets []Target) error {
	var errs []error
	for _, d := range r.defaults {
		if err := d.Sync(ctx, pool, targets); err != nil {
			errs = append(errs, err)
		}
	}
	if own := r.Get(pool); own != nil {
		if err := own.Sync(ctx, pool, targets); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// InFlight returns the first default registrar's in-flight count, or -1.
func (r *Router) InFlight(id string) int {
	for _, d := range r.defaults {
		if rep, ok := d.(InFlightReporter); ok {
			return rep.InFlight(id)
		}
	}
	return -1
}
