package autoscale

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Scaling to and from zero.
//
// A pool whose effective minimum is 0 may go to zero instances, the way
// KEDA and Knative let a workload go (KEDA's cooldownPeriod and
// activationThreshold, https://keda.sh/docs/2.17/concepts/scaling-deployments/;
// Knative's scale-to-zero grace period). The pool is idle while every
// additive metric (requests in flight, waiting or arriving; the requests a
// gateway holds for a pool at zero count as in flight) is at or below the
// activation threshold. After the idle window the last instance goes,
// unless the idle gaps seen so far say the pool would come back sooner than
// a restart pays off: the expected rest of an idle gap that has already
// lasted the window is compared with the measured cold start (the time an
// instance is paid for before it serves, and what the first request
// waits). At zero, any additive metric above the threshold wakes the pool
// at once, bypassing the stabilisation windows (there is nothing to
// stabilise: the pool serves nobody).

// Defaults of scaling to zero.
const (
	// DefaultIdleWindow is KEDA's default cooldownPeriod.
	DefaultIdleWindow = 5 * time.Minute
	// maxIdleGaps bounds the idle gaps remembered (the newest are kept).
	maxIdleGaps = 64
	// minIdleGaps is how many idle gaps past the window the cold-start
	// check needs before it may keep an instance.
	minIdleGaps = 3
)

// Sources of scale-to-zero decisions.
const (
	// SourceIdle: at zero, going to zero, or keeping the last instance
	// through the idle window.
	SourceIdle Source = "idle"
	// SourceActivation: woken from zero by a metric above the activation
	// threshold.
	SourceActivation Source = "activation"
)

// MetricWoken is the metric a decision names when a gateway's wake-up (a
// request waiting for a pool with no ready instance) activated the pool.
const MetricWoken = "gateway-wake"

// zeroCfg is a resolved ScaleToZeroSpec.
type zeroCfg struct {
	idle      time.Duration
	threshold float64
}

func resolveZero(cfg Config, ms []metric) (*zeroCfg, bool, error) {
	z := cfg.ScaleToZero
	if z == nil {
		if cfg.MinReplicas != 0 {
			return nil, false, nil
		}
		if !hasAdditive(ms) {
			// Nothing could wake the pool from zero: keep one instance.
			return nil, true, nil
		}
		return &zeroCfg{idle: DefaultIdleWindow}, false, nil
	}
	out := &zeroCfg{idle: DefaultIdleWindow}
	if z.IdleWindow != nil {
		out.idle = z.IdleWindow.Duration
		if out.idle < 30*time.Second || out.idle > 24*time.Hour {
			return nil, false, fieldErr("scaleToZero.idleWindow", "must be between 30s and 24h, such as 5m (got %s)", out.idle)
		}
	}
	if z.ActivationThreshold != nil {
		out.threshold = z.ActivationThreshold.AsApproximateFloat64()
		if !(out.threshold >= 0) || math.IsInf(out.threshold, 0) {
			return nil, false, fieldErr("scaleToZero.activationThreshold", "must be >= 0 (got %s)", z.ActivationThreshold.String())
		}
	}
	if cfg.MinReplicas != 0 {
		return nil, false, fieldErr("scaleToZero", "needs a minimum of 0 (spec.minimum 0 and minReplicas 0 or unset; got %d): lower the minimum, or remove scaleToZero", cfg.MinReplicas)
	}
	if !hasAdditive(ms) {
		return nil, false, fieldErr("scaleToZero", "needs an additive metric (QPS, Concurrency or QueueLength) in metrics to wake the pool: add one, for example {type: Concurrency, target: \"4\"}")
	}
	return out, false, nil
}

// activity is what the additive metrics say about load at one evaluation.
type activity struct {
	known  bool // some additive metric has a fresh observation
	active bool // one of them is above the threshold
	metric string
	value  float64
}

func (a *Autoscaler) activity(obs map[string]Observation, now time.Time, threshold float64) activity {
	var act activity
	note := func(name string) {
		o, ok := obs[name]
		if !ok || now.Sub(o.At) > a.cfg.maxAge {
			return
		}
		act.known = true
		if o.Value > threshold && (!act.active || o.Value > act.value) {
			act.active, act.metric, act.value = true, name, o.Value
		}
	}
	for _, m := range a.cfg.metrics {
		if m.additive {
			note(m.name)
		}
	}
	// The load metrics a signal source reports under their default names
	// count too, configured or not: a pool that scales on concurrency
	// sampled every few seconds still sees the short requests in between
	// through qps.
	for _, name := range loadMetrics {
		if !slices.ContainsFunc(a.cfg.metrics, func(m metric) bool { return m.name == name }) {
			note(name)
		}
	}
	return act
}

// loadMetrics are the default names of the additive metrics.
var loadMetrics = []string{"qps", "concurrency", "queue-length"}

// trackActivity folds one evaluation into the idle memory: the last time
// the pool was active and the idle gaps that outlasted the window.
func (a *Autoscaler) trackActivity(act activity, now time.Time, z *zeroCfg) {
	st := &a.st
	switch {
	case st.ActiveAt.IsZero():
		// The idle window starts when the autoscaler first looks.
		st.ActiveAt = now
	case act.active:
		if gap := now.Sub(st.ActiveAt); gap >= z.idle {
			st.IdleGaps = append(st.IdleGaps, int64(gap/time.Second))
			if len(st.IdleGaps) > maxIdleGaps {
				st.IdleGaps = st.IdleGaps[len(st.IdleGaps)-maxIdleGaps:]
			}
		}
		st.ActiveAt = now
	}
}

// expectedRest is the mean remaining length of an idle gap that has
// already lasted the window, over the remembered gaps that did, and how
// many those are.
func expectedRest(gaps []int64, window time.Duration) (time.Duration, int) {
	var sum float64
	n := 0
	for _, g := range gaps {
		d := time.Duration(g) * time.Second
		if d < window {
			continue
		}
		sum += float64(d - window)
		n++
	}
	if n == 0 {
		return 0, 0
	}
	return time.Duration(sum / float64(n)), n
}

// applyZero turns the decision into a scale-to-zero one where it applies:
// at zero (stay or wake), or with the pool's recommenders wanting zero
// (keep the last instance through the idle window and when a restart would
// not pay off, otherwise go).
func (a *Autoscaler) applyZero(cur int32, coldStart time.Duration, act activity, now time.Time, d *Decision) {
	z := a.cfg.zero
	if cur == 0 {
		switch {
		case act.active:
			want := min(max(d.DesiredReplicas, 1), a.cfg.max)
			d.DesiredReplicas, d.Source, d.Metric, d.Value, d.Limited = want, SourceActivation, act.metric, act.value, ""
			d.Reason = fmt.Sprintf("activation: %s %.4g > %.4g wakes the pool from zero → %d", act.metric, act.value, z.threshold, want)
			if act.metric == MetricWoken {
				d.Reason = fmt.Sprintf("activation: a request waits at the gateway, waking the pool from zero → %d", want)
			}
		case d.DesiredReplicas > 0 && (d.Source == SourcePredictive || d.Source == SourceBurst):
			// Provision ahead of the load the profile expects.
		default:
			d.DesiredReplicas, d.Source, d.Metric, d.Value, d.Limited = 0, SourceIdle, "", 0, ""
			d.Reason = fmt.Sprintf("idle: at zero since no request came for %s; the next one wakes the pool", z.idle)
			if !a.st.ActiveAt.IsZero() {
				d.Reason = fmt.Sprintf("idle: at zero, no request since %s; the next one wakes the pool", a.st.ActiveAt.UTC().Format(time.RFC3339))
			}
		}
		return
	}
	// As in KEDA, load at or below the activation threshold counts as idle
	// even where the reactive recommender still wants its one instance.
	if d.DesiredReplicas > 1 || d.Source == SourceHold || !act.known ||
		(d.DesiredReplicas > 0 && (d.Source == SourcePredictive || d.Source == SourceBurst || d.Panic)) {
		return
	}
	if act.active {
		if d.DesiredReplicas == 0 {
			d.DesiredReplicas, d.Source, d.Limited = 1, SourceIdle, ""
			d.Reason = fmt.Sprintf("idle: keeping 1 instance, %s %.4g > %.4g: requests still arrive", act.metric, act.value, z.threshold)
		}
		return
	}
	idleFor := now.Sub(a.st.ActiveAt)
	if idleFor < z.idle {
		d.DesiredReplicas, d.Source, d.Limited = 1, SourceIdle, ""
		d.Reason = fmt.Sprintf("idle: keeping 1 instance, no request for %s of the %s idle window", idleFor.Round(time.Second), z.idle)
		return
	}
	if rest, n := expectedRest(a.st.IdleGaps, z.idle); n >= minIdleGaps && coldStart > 0 && rest < coldStart {
		d.DesiredReplicas, d.Source, d.Limited = 1, SourceIdle, ""
		d.Reason = fmt.Sprintf("idle: keeping 1 instance, the last %d idle gaps past the %s window lasted %s more on average, less than a %s cold start: a restart would cost more than it saves",
			n, z.idle, rest.Round(time.Second), coldStart.Round(time.Second))
		return
	}
	d.DesiredReplicas, d.Source, d.Metric, d.Value, d.Limited = 0, SourceIdle, "", 0, ""
	d.Reason = fmt.Sprintf("idle: no request for %s (idle window %s) → 0", idleFor.Round(time.Second), z.idle)
}
