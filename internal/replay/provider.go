package replay

import (
	"context"
	"time"

	"k8s.io/utils/clock"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/provider"
	"github.com/tidegpu/tidegpu/internal/provider/spotsim"
)

// counting is the simulator as the engine sees it, counting what the
// engine asked of it and when it started each standby instance.
type counting struct {
	sim   *spotsim.Provider
	clock clock.PassiveClock

	launches, refused, starts, stops int
	started                          map[string]time.Time
}

var (
	_ provider.Provider       = (*counting)(nil)
	_ provider.OfferingSource = (*counting)(nil)
	_ provider.Stopper        = (*counting)(nil)
)

func (c *counting) Name() string { return c.sim.Name() }

func (c *counting) Launch(ctx context.Context, req provider.LaunchRequest) (provider.Instance, error) {
	in, err := c.sim.Launch(ctx, req)
	switch {
	case provider.IsInsufficientCapacity(err):
		c.refused++
	case err == nil:
		c.launches++
	}
	return in, err
}

func (c *counting) Terminate(ctx context.Context, id string) error { return c.sim.Terminate(ctx, id) }

func (c *counting) List(ctx context.Context, pool string) ([]provider.Instance, error) {
	return c.sim.List(ctx, pool)
}

func (c *counting) Offerings(ctx context.Context, spec *tidev1.TidePoolSpec) ([]provider.Offering, error) {
	return c.sim.Offerings(ctx, spec)
}

func (c *counting) Stop(ctx context.Context, id string) error {
	err := c.sim.Stop(ctx, id)
	if err == nil {
		c.stops++
	}
	return err
}

func (c *counting) Start(ctx context.Context, id string) (provider.Instance, error) {
	in, err := c.sim.Start(ctx, id)
	if err == nil {
		c.starts++
		c.started[id] = c.clock.Now()
	}
	return in, err
}
