// Package builtin is the registrar for TideGPU's own data plane: a sync
// replaces the pool's backend set in the embedded gateway, effective before
// the next request.
package builtin

import (
	"context"
	"fmt"

	"github.com/tidegpu/tidegpu/internal/gateway"
	"github.com/tidegpu/tidegpu/internal/metrics"
	"github.com/tidegpu/tidegpu/internal/registrar"
)

// Registrar feeds an in-process gateway.
type Registrar struct {
	gw *gateway.Gateway
}

var (
	_ registrar.Registrar        = (*Registrar)(nil)
	_ registrar.InFlightReporter = (*Registrar)(nil)
)

// New returns a registrar for gw.
func New(gw *gateway.Gateway) *Registrar { return &Registrar{gw: gw} }

// Sync makes the gateway's backends for pool equal to targets.
func (r *Registrar) Sync(_ context.Context, pool string, targets []registrar.Target) error {
	bs := make([]gateway.Backend, 0, len(targets))
	for _, t := range targets {
		b := gateway.Backend{ID: t.ID, Pool: pool, Address: t.Address, Weight: t.Weight,
			Models: t.Models, Version: t.Version}
		fam, off, err := metrics.SpecFamily(t.Metrics)
		if err != nil {
			return fmt.Errorf("pool %s: %w", pool, err)
		}
		b.MetricsFamily, b.NoMetrics, b.MetricsQueries = fam, off, metrics.SpecQueries(t.Metrics)
		bs = append(bs, b)
	}
	r.gw.SetBackends(pool, bs)
	return nil
}

// InFlight returns the requests still in flight on the backend.
func (r *Registrar) InFlight(id string) int { return r.gw.InFlight(id) }
