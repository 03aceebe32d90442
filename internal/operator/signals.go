package operator

import (
	"context"
	"time"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/autoscale"
	"github.com/tidegpu/tidegpu/internal/engine"
	"github.com/tidegpu/tidegpu/internal/metrics"
	"github.com/tidegpu/tidegpu/internal/registrar"
)

// inFlightNop is the registrar of standalone gateways (nothing to push:
// they watch the pools) that reports a backend's requests in flight
// through them, so a drain ends when the gateways are done with it.
type inFlightNop struct{ registrar.InFlightReporter }

// Sync implements registrar.Registrar: nothing to do.
func (inFlightNop) Sync(context.Context, string, []registrar.Target) error { return nil }

// gpuSignals observes a pool's GPU utilisation for its autoscaler
// (gpu-utilization, percent: the mean over its Ready instances of each
// one's mean over its GPUs) from a source that reads GPU utilisation
// (dcgm-exporter).
type gpuSignals struct {
	src   metrics.Source
	pools func(pool string) (engine.PoolView, bool)
}

// Observe implements engine.Signals. An instance without a reading is left
// out of the mean; none at all observes nothing.
func (s gpuSignals) Observe(pool string, now time.Time) []autoscale.Observation {
	v, ok := s.pools(pool)
	if !ok {
		return nil
	}
	var targets []metrics.Target
	for _, in := range v.Status.Instances {
		if in.Phase == tidev1.PhaseReady && in.Address != "" {
			targets = append(targets, metrics.Target{ID: in.ID, Address: in.Address})
		}
	}
	if len(targets) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	snap, _ := s.src.Snapshot(ctx, targets) // the missing are left out; the AIBalancer and logs say why
	var sum float64
	n := 0
	for _, m := range snap {
		if m.Has&metrics.FieldGPUUtil != 0 {
			sum += m.GPUUtil
			n++
		}
	}
	if n == 0 {
		return nil
	}
	return []autoscale.Observation{{Metric: "gpu-utilization", Value: 100 * sum / float64(n), At: now}}
}

// joinedSignals are the observations of every source, and the signal
// health of the first that has one.
type joinedSignals []engine.Signals

// Observe implements engine.Signals.
func (j joinedSignals) Observe(pool string, now time.Time) []autoscale.Observation {
	var out []autoscale.Observation
	for _, s := range j {
		out = append(out, s.Observe(pool, now)...)
	}
	return out
}

// SignalHealth implements engine.SignalHealth.
func (j joinedSignals) SignalHealth(pool string) (source string, fallback bool, reason string, ok bool) {
	for _, s := range j {
		if h, is := s.(engine.SignalHealth); is {
			if source, fallback, reason, ok = h.SignalHealth(pool); ok {
				return
			}
		}
	}
	return "", false, "", false
}

// SignalGaps implements engine.SignalGaps with the first source that does.
func (j joinedSignals) SignalGaps(pool string) []string {
	for _, s := range j {
		if g, is := s.(engine.SignalGaps); is {
			return g.SignalGaps(pool)
		}
	}
	return nil
}
