package replay

import (
	"context"
	"time"

	"k8s.io/utils/clock"

	"github.com/tidegpu/tidegpu/internal/provider"
	"github.com/tidegpu/tidegpu/internal/provider/spotsim"
)

// counting is the simulator as the engine sees it, counting what the
// engine asked of it and when it started each standby instance. It is a
// decorator (provider.Unwrapper): it implements the Stopper it counts, which
// the simulator always has, and leaves the rest (offerings) to be found in
// the simulator with provider.As.
type counting struct {
	sim   *spotsim.Provider
	clock clock.PassiveClock

	launches, refused, starts, stops int
	started                          map[string]time.Time
}

var (
	_ provider.Provider  = (*counting)(nil)
	_ provider.Unwrapper = (*counting)(nil)
	_ provider.Stopper   = (*counting)(nil)
)

func (c *counting) Unwrap() provider.Provider { return c.sim }

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
