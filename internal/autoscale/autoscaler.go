package autoscale

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Observation is one value of one metric as the metrics source saw it.
type Observation struct {
	// Metric is the MetricSpec name (qps, concurrency, latency-p95, ...).
	Metric string `json:"metric"`
	// Value: the pool total for additive metrics, the pool-wide value
	// otherwise. NaN, infinite and negative values count as missing.
	Value float64 `json:"value"`
	// At is when the value was measured; older than metricMaxAge is stale.
	At time.Time `json:"at"`
}

// Input is what the autoscaler is told at each evaluation.
type Input struct {
	// CurrentReplicas is the pool's current wanted size (the HPA's
	// scale.spec.replicas): instances serving, starting or pending.
	CurrentReplicas int32
	// ReadyReplicas is the number of instances serving. Zero or less means
	// CurrentReplicas. Value metrics scale it (the HPA's ready pod count);
	// panic mode compares the burst with it (Knative).
	ReadyReplicas int32
	// ColdStart is how long a new instance takes to serve (the pool's
	// measured cold start; zero if unknown). Scaling to zero weighs it
	// against the idle gaps it has seen.
	ColdStart time.Duration
	// Woken: a gateway holds a request for the pool and found no ready
	// instance. It counts as load above the activation threshold.
	Woken bool
	// Metrics holds the latest observation of each metric; several of one
	// metric are allowed (the newest counts for the HPA, all that fall in
	// the panic window count for panic mode).
	Metrics []Observation
}

// Source names the recommender that decided.
type Source string

// Sources.
const (
	SourceReactive   Source = "reactive"
	SourcePanic      Source = "panic"
	SourcePredictive Source = "predictive"
	// SourceBurst: the burst recommender's floor (standing capacity for
	// the bursts of the trailing window).
	SourceBurst    Source = "burst"
	SourceSchedule Source = "schedule"
	SourceMin      Source = "minReplicas"
	SourceMax      Source = "maxReplicas"
	// SourceHold: no recommender could say anything (metrics missing) and
	// the size is kept.
	SourceHold Source = "hold"
)

// Proposal is what one recommender said at one evaluation.
type Proposal struct {
	Source Source `json:"source"`
	// Name is the metric (reactive, panic, predictive, burst) or schedule
	// name.
	Name string `json:"name,omitempty"`
	// Value is the observed or forecast value behind the proposal.
	Value float64 `json:"value,omitempty"`
	// Replicas proposed; meaningless when Abstained.
	Replicas int32 `json:"replicas"`
	// Abstained: the recommender had nothing to say (missing or stale
	// metric, no history yet, schedule inactive).
	Abstained bool   `json:"abstained,omitempty"`
	Reason    string `json:"reason,omitempty"`
}

// Decision is the outcome of one evaluation.
type Decision struct {
	At              time.Time `json:"at"`
	CurrentReplicas int32     `json:"currentReplicas"`
	DesiredReplicas int32     `json:"desiredReplicas"`
	// Source, Metric and Value say which recommender won, on which metric
	// (or schedule) and with which value.
	Source Source  `json:"source"`
	Metric string  `json:"metric,omitempty"`
	Value  float64 `json:"value,omitempty"`
	// Reason is a one-line explanation for status and events.
	Reason string `json:"reason"`
	// Panic is true while panic mode is active.
	Panic bool `json:"panic"`
	// Limited is the HPA's ScalingLimited reason (ScaleUpLimit,
	// ScaleDownLimit, TooManyReplicas, TooFewReplicas) or empty.
	Limited string `json:"limited,omitempty"`
	// Proposals lists what every recommender said.
	Proposals []Proposal `json:"proposals,omitempty"`
	// NextScheduleChange is when a schedule window next opens or closes
	// (zero if there are no schedules): evaluate again then.
	NextScheduleChange time.Time `json:"nextScheduleChange,omitzero"`
}

// Sample is one stored observation of an additive metric (panic window).
type Sample struct {
	Value float64   `json:"value"`
	At    time.Time `json:"at"`
}

// StateVersion is the version of State this package writes and reads.
const StateVersion = 1

// State is everything the Autoscaler remembers; it round-trips through
// encoding/json so that a restarted controller continues.
type State struct {
	Version int `json:"version"`
	// Recommendations, ScaleUpEvents and ScaleDownEvents are the HPA's
	// per-autoscaler memory.
	Recommendations []Recommendation `json:"recommendations,omitempty"`
	ScaleUpEvents   []ScaleEvent     `json:"scaleUpEvents,omitempty"`
	ScaleDownEvents []ScaleEvent     `json:"scaleDownEvents,omitempty"`
	// PanicSince is when panic mode was last (re)triggered; nil when calm.
	PanicSince *time.Time `json:"panicSince,omitempty"`
	// MaxPanicReplicas is the ratchet of panic mode.
	MaxPanicReplicas int32 `json:"maxPanicReplicas,omitempty"`
	// Samples of the additive metrics within the panic window.
	Samples map[string][]Sample `json:"samples,omitempty"`
	// Profile is the predictive recommender's learned load profile.
	Profile *Profile `json:"profile,omitempty"`
	// ProfileFedUntil is the newest observation folded into Profile.
	ProfileFedUntil time.Time `json:"profileFedUntil,omitzero"`
	// Burst is the burst recommender's window of bucket loads.
	Burst *BurstState `json:"burst,omitempty"`
	// ActiveAt is the last evaluation that saw load above the activation
	// threshold (scaling to zero; the idle window runs from it).
	ActiveAt time.Time `json:"activeAt,omitzero"`
	// IdleGaps are the lengths in seconds of the newest idle gaps that
	// outlasted the idle window.
	IdleGaps []int64 `json:"idleGaps,omitempty"`
}

// ErrStateVersion is returned by Restore for a State of another version.
var ErrStateVersion = errors.New("autoscale: unsupported state version")

// Autoscaler holds one pool's configuration and memory. It is safe for
// concurrent use.
type Autoscaler struct {
	clk clock.PassiveClock
	cfg *resolved

	mu sync.Mutex
	st State
	// burstQ caches the burst window's quantile; burstCached says it is
	// up to date with st.Burst.
	burstQ      float64
	burstCached bool
}

// Validate checks cfg as New does, without building an autoscaler: the
// errors are joined *FieldError values, each naming its field.
func Validate(cfg Config) error {
	_, err := resolve(cfg)
	return err
}

// New validates cfg (every error names its field; see FieldError) and
// returns an Autoscaler reading time from clk.
func New(cfg Config, clk clock.PassiveClock) (*Autoscaler, error) {
	if clk == nil {
		return nil, errors.New("autoscale: nil clock")
	}
	r, err := resolve(cfg)
	if err != nil {
		return nil, err
	}
	a := &Autoscaler{clk: clk, cfg: r}
	a.st = a.emptyState()
	return a, nil
}

func (a *Autoscaler) emptyState() State {
	st := State{Version: StateVersion, Samples: map[string][]Sample{}}
	if p := a.cfg.pred; p != nil {
		st.Profile = &Profile{Season: p.season, SlotSeconds: int64(p.slot / time.Second), Slots: map[int][]SeasonPeak{}}
	}
	if b := a.cfg.burst; b != nil {
		st.Burst = b.emptyState()
	}
	return st
}

// State returns a deep copy of the autoscaler's memory.
func (a *Autoscaler) State() State {
	a.mu.Lock()
	defer a.mu.Unlock()
	return copyState(a.st)
}

// Restore replaces the autoscaler's memory with s (from State, possibly of
// an earlier process). A profile learned under another season or slot
// length, and a burst window kept under another bucket length, are
// discarded; samples of metrics no longer configured are dropped.
func (a *Autoscaler) Restore(s State) error {
	if s.Version != StateVersion {
		return fmt.Errorf("%w %d (want %d)", ErrStateVersion, s.Version, StateVersion)
	}
	st := copyState(s)
	fresh := a.emptyState()
	if st.Samples == nil {
		st.Samples = map[string][]Sample{}
	}
	for name := range st.Samples {
		if !slices.ContainsFunc(a.cfg.metrics, func(m metric) bool { return m.name == name }) {
			delete(st.Samples, name)
		}
	}
	if fresh.Profile == nil {
		st.Profile, st.ProfileFedUntil = nil, time.Time{}
	} else if st.Profile == nil || st.Profile.Season != fresh.Profile.Season || st.Profile.SlotSeconds != fresh.Profile.SlotSeconds {
		st.Profile, st.ProfileFedUntil = fresh.Profile, time.Time{}
	} else if st.Profile.Slots == nil {
		st.Profile.Slots = map[int][]SeasonPeak{}
	}
	if fresh.Burst == nil || st.Burst == nil || st.Burst.BucketSeconds != fresh.Burst.BucketSeconds {
		st.Burst = fresh.Burst
	}
	a.mu.Lock()
	a.st = st
	a.burstCached = false
	a.mu.Unlock()
	return nil
}

func copyState(s State) State {
	out := s
	out.Recommendations = slices.Clone(s.Recommendations)
	out.ScaleUpEvents = slices.Clone(s.ScaleUpEvents)
	out.ScaleDownEvents = slices.Clone(s.ScaleDownEvents)
	out.IdleGaps = slices.Clone(s.IdleGaps)
	if s.PanicSince != nil {
		t := *s.PanicSince
		out.PanicSince = &t
	}
	if s.Samples != nil {
		out.Samples = make(map[string][]Sample, len(s.Samples))
		for k, v := range s.Samples {
			out.Samples[k] = slices.Clone(v)
		}
	}
	if s.Profile != nil {
		p := *s.Profile
		if s.Profile.Slots != nil {
			p.Slots = make(map[int][]SeasonPeak, len(s.Profile.Slots))
			for k, v := range s.Profile.Slots {
				p.Slots[k] = slices.Clone(v)
			}
		}
		out.Profile = &p
	}
	if s.Burst != nil {
		b := *s.Burst
		b.Buckets = slices.Clone(s.Burst.Buckets)
		out.Burst = &b
	}
	return out
}

// valid reports whether v can be used as a metric value.
func valid(v float64) bool { return v >= 0 && !math.IsInf(v, 0) && !math.IsNaN(v) }

// latest returns, per metric name, the newest valid observation.
func latest(obs []Observation) map[string]Observation {
	out := map[string]Observation{}
	for _, o := range obs {
		if !valid(o.Value) {
			continue
		}
		if cur, ok := out[o.Metric]; !ok || o.At.After(cur.At) {
			out[o.Metric] = o
		}
	}
	return out
}

// windowMean is the mean of the stored samples of a metric within win of
// its newest sample, with that sample's time.
func (a *Autoscaler) windowMean(name string, win time.Duration) (float64, time.Time, bool) {
	s := a.st.Samples[name]
	if len(s) == 0 {
		return 0, time.Time{}, false
	}
	newest := s[len(s)-1].At
	sum, n := 0.0, 0
	for _, x := range s {
		if x.At.After(newest.Add(-win)) {
			sum += x.Value
			n++
		}
	}
	return sum / float64(n), newest, true
}

// value is what the reactive and predictive recommenders read for metric
// m: the newest observation (the HPA), or, with panic mode on and m
// additive, the mean over the stable window (Knative's stable mode).
func (a *Autoscaler) value(m metric, obs map[string]Observation) (Observation, bool) {
	if a.cfg.panic && m.additive {
		v, at, ok := a.windowMean(m.name, a.cfg.stableWin)
		return Observation{Metric: m.name, Value: v, At: at}, ok
	}
	o, ok := obs[m.name]
	return o, ok
}

// Recommend evaluates the recommenders at the clock's now and returns the
// decision. It records what the HPA records: the unstabilised
// recommendation and, when the decision differs from CurrentReplicas, a
// scale event as if the decision were applied (the next Input's
// CurrentReplicas tells the truth either way).
func (a *Autoscaler) Recommend(in Input) Decision {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.clk.Now()
	cfg := a.cfg
	cur := max(in.CurrentReplicas, 0)
	ready := in.ReadyReplicas
	if ready <= 0 {
		ready = cur
	}
	d := Decision{At: now, CurrentReplicas: cur}
	obs := latest(in.Metrics)
	a.storeSamples(in.Metrics, now)

	// Schedules raise the minimum.
	effMin, schedName := cfg.min, ""
	for _, s := range cfg.schedules {
		on, change := s.active(now)
		if !change.IsZero() && (d.NextScheduleChange.IsZero() || change.Before(d.NextScheduleChange)) {
			d.NextScheduleChange = change
		}
		p := Proposal{Source: SourceSchedule, Name: s.name, Replicas: s.min, Abstained: !on}
		if on {
			p.Reason = fmt.Sprintf("window %s..%s open, at least %d", s.start.expr, s.end.expr, s.min)
			if s.min > effMin {
				effMin, schedName = s.min, s.name
			}
		} else {
			p.Reason = "window closed"
		}
		d.Proposals = append(d.Proposals, p)
	}
	effMin = min(effMin, cfg.max)

	// The HPA seeds its history with the current size.
	if len(a.st.Recommendations) == 0 {
		a.st.Recommendations = append(a.st.Recommendations, Recommendation{Replicas: cur, At: now})
	}

	react := a.reactive(cur, ready, obs, now, &d)
	pred := a.predict(obs, now, &d)
	bst := a.recommendBurst(in.Metrics, now, &d)
	pn := a.updatePanic(ready, now, &d)

	switch {
	case cur > cfg.max:
		d.DesiredReplicas, d.Source = cfg.max, SourceMax
		d.Reason = fmt.Sprintf("%s (%d > %d)", reasonAboveMax, cur, cfg.max)
	case cur < effMin:
		d.DesiredReplicas = effMin
		if schedName != "" && effMin > cfg.min {
			d.Source, d.Metric = SourceSchedule, schedName
			d.Reason = fmt.Sprintf("%s %q (%d < %d)", reasonBelowSchedMn, schedName, cur, effMin)
		} else {
			d.Source = SourceMin
			d.Reason = fmt.Sprintf("%s (%d < %d)", reasonBelowMin, cur, effMin)
		}
	default:
		a.normalize(cur, effMin, schedName, react, pred, bst, &d, now)
	}

	// Panic mode: straight to the panic need, never below the current size.
	if !d.Panic {
		a.st.MaxPanicReplicas = 0
	} else {
		want := min(max(d.DesiredReplicas, a.st.MaxPanicReplicas, cur), cfg.max)
		if want > d.DesiredReplicas {
			d.DesiredReplicas, d.Source, d.Metric, d.Value, d.Limited = want, SourcePanic, pn.name, pn.value, ""
			if pn.over {
				d.Reason = fmt.Sprintf("panic: %s %.4g over the last %s needs %d instances (>= %.0f%% of %d ready) → %d",
					pn.name, pn.value, cfg.panicWin, pn.need, cfg.panicThres*100, max(ready, 1), want)
			} else {
				d.Reason = fmt.Sprintf("panic: holding %d (no scale-down in panic) until the load stays under %.0f%% of ready for %s after %s",
					want, cfg.panicThres*100, cfg.stableWin, a.st.PanicSince.Format(time.RFC3339))
			}
		}
	}

	if z := cfg.zero; z != nil {
		act := a.activity(obs, now, z.threshold)
		if in.Woken && !act.active {
			act = activity{known: true, active: true, metric: MetricWoken, value: 1}
		}
		a.trackActivity(act, now, z)
		if effMin == 0 {
			a.applyZero(cur, in.ColdStart, act, now, &d)
		}
	} else if cfg.keepOne && effMin == 0 && cur > 0 && d.DesiredReplicas == 0 {
		d.DesiredReplicas, d.Source, d.Limited = 1, SourceIdle, ""
		d.Reason = "idle: keeping 1 instance: no additive metric (QPS, Concurrency, QueueLength) could wake the pool from zero"
	}

	if d.DesiredReplicas != cur {
		if d.DesiredReplicas > cur {
			a.st.ScaleUpEvents = storeScaleEvent(a.st.ScaleUpEvents, cfg.up.longestPeriod(), d.DesiredReplicas-cur, now)
		} else {
			a.st.ScaleDownEvents = storeScaleEvent(a.st.ScaleDownEvents, cfg.down.longestPeriod(), cur-d.DesiredReplicas, now)
		}
	}
	return d
}

// reactiveResult is the HPA's metric stage.
type reactiveResult struct {
	replicas int32 // max over the metrics that answered (0 if none configured)
	metric   string
	value    float64
	ratio    float64
	target   float64
	additive bool
	answered int  // metrics that answered
	hold     bool // the HPA would not scale: all metrics missing, or some missing and the rest say scale down
	missing  []string
}

func (a *Autoscaler) reactive(cur, ready int32, obs map[string]Observation, now time.Time, d *Decision) reactiveResult {
	cfg := a.cfg
	res := reactiveResult{replicas: 0}
	best := int32(-1)
	for _, m := range cfg.metrics {
		o, ok := a.value(m, obs)
		p := Proposal{Source: SourceReactive, Name: m.name}
		switch {
		case !ok:
			p.Abstained, p.Reason = true, "no observation"
		case now.Sub(o.At) > cfg.maxAge:
			p.Abstained, p.Reason = true, fmt.Sprintf("stale: measured %s ago (max %s)", now.Sub(o.At).Round(time.Second), cfg.maxAge)
		}
		if p.Abstained {
			res.missing = append(res.missing, m.name)
			d.Proposals = append(d.Proposals, p)
			continue
		}
		var n int32
		var ratio float64
		if m.additive {
			n, ratio = additiveReplicas(cur, o.Value, m.target, cfg.up.tolerance, cfg.down.tolerance)
		} else {
			n, ratio = valueReplicas(cur, ready, o.Value, m.target, cfg.up.tolerance, cfg.down.tolerance)
		}
		p.Value, p.Replicas = o.Value, n
		p.Reason = fmt.Sprintf("observed %.4g, target %.4g%s, usage ratio %.3f", o.Value, m.target, perInstanceStr(m.additive), ratio)
		d.Proposals = append(d.Proposals, p)
		res.answered++
		if n > best {
			best = n
			res.metric, res.value, res.ratio, res.target, res.additive = m.name, o.Value, ratio, m.target, m.additive
		}
	}
	if best >= 0 {
		res.replicas = best
	}
	if len(cfg.metrics) > 0 && (res.answered == 0 || (len(res.missing) > 0 && res.replicas < cur)) {
		res.hold = true
	}
	return res
}

// predResult is the predictive recommender's say.
type predResult struct {
	ok       bool
	replicas int32
	value    float64
}

// predict feeds the profile with the new observation and forecasts.
func (a *Autoscaler) predict(obs map[string]Observation, now time.Time, d *Decision) (res predResult) {
	p := a.cfg.pred
	if p == nil {
		return res
	}
	if o, ok := a.value(p.metric, obs); ok && o.At.After(a.st.ProfileFedUntil) && now.Sub(o.At) <= a.cfg.maxAge {
		p.observe(a.st.Profile, o.At, o.Value)
		a.st.ProfileFedUntil = o.At
	}
	prop := Proposal{Source: SourcePredictive, Name: p.metric.name}
	f, ok := p.forecast(a.st.Profile, now)
	if !ok {
		prop.Abstained, prop.Reason = true, "not enough history for the coming slots"
		d.Proposals = append(d.Proposals, prop)
		return res
	}
	res.ok, res.value = true, f
	res.replicas = ceilReplicas(f * (1 + p.headroom) / p.metric.target)
	prop.Value, prop.Replicas = f, res.replicas
	prop.Reason = fmt.Sprintf("%s forecast %.4g over the next %s (+%.0f%% headroom), target %.4g per instance", p.metric.name, f, p.lead, p.headroom*100, p.metric.target)
	d.Proposals = append(d.Proposals, prop)
	return res
}

// storeSamples keeps the observations of additive metrics that fall in the
// stable window (which contains the panic window) of their newest one.
func (a *Autoscaler) storeSamples(obs []Observation, now time.Time) {
	if !a.cfg.panic {
		return
	}
	for _, m := range a.cfg.metrics {
		if !m.additive {
			continue
		}
		s := a.st.Samples[m.name]
		for _, o := range obs {
			if o.Metric != m.name || !valid(o.Value) || o.At.After(now) {
				continue
			}
			if !slices.ContainsFunc(s, func(x Sample) bool { return x.At.Equal(o.At) }) {
				s = append(s, Sample{Value: o.Value, At: o.At})
			}
		}
		slices.SortFunc(s, func(x, y Sample) int { return x.At.Compare(y.At) })
		if len(s) > 0 {
			newest := s[len(s)-1].At
			cut := 0
			for cut < len(s) && !s[cut].At.After(newest.Add(-a.cfg.stableWin)) {
				cut++
			}
			s = slices.Clone(s[cut:])
		}
		a.st.Samples[m.name] = s
	}
}

// panicResult is what panic mode saw at one evaluation.
type panicResult struct {
	need  int32 // instances the panic window needs (0 without fresh data)
	name  string
	value float64
	over  bool // need >= threshold × ready
}

// updatePanic runs Knative's panic state machine.
func (a *Autoscaler) updatePanic(ready int32, now time.Time, d *Decision) panicResult {
	cfg := a.cfg
	if !cfg.panic {
		return panicResult{}
	}
	var need int32
	var name string
	var value float64
	for _, m := range cfg.metrics {
		if !m.additive {
			continue
		}
		mean, newest, ok := a.windowMean(m.name, cfg.panicWin)
		if !ok || now.Sub(newest) > cfg.maxAge {
			continue
		}
		if n := ceilReplicas(mean / m.target); n > need || name == "" {
			need, name, value = n, m.name, mean
		}
	}
	readyN := float64(max(ready, 1))
	over := name != "" && float64(need)/readyN >= cfg.panicThres
	since := a.st.PanicSince
	switch {
	case since == nil && over:
		t := now
		a.st.PanicSince = &t
	case over:
		t := now
		a.st.PanicSince = &t
	case since != nil && since.Add(cfg.stableWin).Before(now):
		a.st.PanicSince = nil
	}
	p := Proposal{Source: SourcePanic, Name: name, Value: value, Replicas: need}
	switch {
	case name == "":
		p.Abstained, p.Reason = true, "no fresh observation in the panic window"
	case over:
		p.Reason = fmt.Sprintf("needs %d >= %.0f%% of %d ready", need, cfg.panicThres*100, int32(readyN))
	default:
		p.Reason = fmt.Sprintf("needs %d < %.0f%% of %d ready", need, cfg.panicThres*100, int32(readyN))
	}
	d.Proposals = append(d.Proposals, p)
	if a.st.PanicSince != nil {
		d.Panic = true
		if name != "" {
			a.st.MaxPanicReplicas = max(a.st.MaxPanicReplicas, min(need, cfg.max))
		}
	}
	return panicResult{need: need, name: name, value: value, over: over}
}

// normalize is the HPA's path for a size within [min, max]: the metric
// recommendation (raised by the predictive and burst ones), stabilised,
// then limited by the rate policies and the bounds.
func (a *Autoscaler) normalize(cur, effMin int32, schedName string, react reactiveResult, pred predResult, bst burstResult, d *Decision, now time.Time) {
	cfg := a.cfg
	raw, src := react.replicas, SourceReactive
	d.Metric, d.Value = react.metric, react.value
	if react.hold {
		if (!pred.ok || pred.replicas <= cur) && (!bst.ok || bst.replicas <= cur) {
			d.DesiredReplicas, d.Source, d.Metric, d.Value = cur, SourceHold, "", 0
			d.Reason = fmt.Sprintf("hold at %d: metrics missing or stale (%s); never scaling down on missing data", cur, strings.Join(react.missing, ", "))
			return
		}
		raw = cur
	}
	if pred.ok && pred.replicas > raw {
		raw, src = pred.replicas, SourcePredictive
		d.Metric, d.Value = cfg.pred.metric.name, pred.value
	}
	if bst.ok && bst.replicas > raw {
		raw, src = bst.replicas, SourceBurst
		d.Metric, d.Value = cfg.burst.metric.name, bst.value
	}

	var why string
	switch {
	case src == SourcePredictive:
		why = fmt.Sprintf("%s forecast %.4g within %s needs %d", d.Metric, pred.value, cfg.pred.lead, raw)
	case src == SourceBurst:
		why = cfg.burst.describe(bst.value, raw, len(a.st.Burst.Buckets))
	case len(cfg.metrics) == 0:
		why = "no metrics configured"
	case raw > cur:
		why = fmt.Sprintf("%s above target (%.4g, target %.4g%s, ratio %.3f)", react.metric, react.value, react.target, perInstanceStr(react.additive), react.ratio)
	case raw < cur:
		why = fmt.Sprintf("all metrics below target (largest need %d from %s %.4g)", raw, react.metric, react.value)
	default:
		why = fmt.Sprintf("%s within tolerance (%.4g, ratio %.3f)", react.metric, react.value, react.ratio)
	}

	stab, recs := stabilize(a.st.Recommendations, now, cfg.up, cfg.down, cur, raw)
	a.st.Recommendations = recs
	desired, limited := limitRate(cur, stab, effMin, cfg.max, a.st.ScaleUpEvents, a.st.ScaleDownEvents, cfg.up, cfg.down, now)

	d.Source, d.DesiredReplicas = src, desired
	if limited != limitNone {
		d.Limited = limited
	}
	parts := []string{fmt.Sprintf("%s: %s → %d", src, why, raw)}
	if stab != raw {
		cond := stabilizedDown
		if raw >= cur {
			cond = stabilizedUp
		}
		parts = append(parts, fmt.Sprintf("%s → %d", cond, stab))
	}
	if limited != limitNone {
		parts = append(parts, fmt.Sprintf("%s → %d", limited, desired))
		if limited == limitTooFew && desired == effMin && schedName != "" && effMin > cfg.min {
			d.Source, d.Metric, d.Value = SourceSchedule, schedName, 0
			parts = append(parts, fmt.Sprintf("(schedule %q)", schedName))
		} else if limited == limitTooFew {
			d.Source, d.Metric, d.Value = SourceMin, "", 0
		}
	}
	d.Reason = strings.Join(parts, "; ")
}

func perInstanceStr(additive bool) string {
	if additive {
		return " per instance"
	}
	return ""
}
