package autoscale

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	// The zone database is embedded so that schedules work on images
	// without /usr/share/zoneinfo (distroless).
	_ "time/tzdata"
)

// Defaults, from the HPA and Knative documentation.
const (
	DefaultTolerance               = 0.1
	DefaultScaleUpStabilization    = 0
	DefaultScaleDownStabilization  = 300
	DefaultMetricMaxAge            = 60 * time.Second
	DefaultPanicStableWindow       = 60 * time.Second
	DefaultPanicWindow             = 6 * time.Second
	DefaultPanicThresholdPercent   = 200
	DefaultLatencyPercentile       = 95
	DefaultPredictiveSlot          = 5 * time.Minute
	DefaultPredictiveHistory       = 4
	DefaultPredictiveEWMAWeightPct = 50
)

// Defaults of the burst recommender, from the MAF trace experiment
// (BENCHMARKS.md, "Autoscaling on the MAF trace (issue 6)"): 8 h beat 4,
// 12 and 24 h there.
const (
	DefaultBurstQuantile = 0.99
	DefaultBurstWindow   = 8 * time.Hour
	DefaultBurstBucket   = time.Minute
	// MaxBurstBuckets bounds window / bucket (the state kept per pool).
	MaxBurstBuckets = 10080
)

// FieldError says which configuration field is wrong and why. Field is the
// JSON path inside Config (for example "behavior.scaleUp.policies[0].value").
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("autoscale: %s: %s", e.Field, e.Reason)
}

// defaultScaleUpPolicies are the HPA's: 100 % or 4 pods per 15 s.
func defaultScaleUpPolicies() []ScalingPolicy {
	return []ScalingPolicy{
		{Type: PolicyPercent, Value: 100, PeriodSeconds: 15},
		{Type: PolicyPods, Value: 4, PeriodSeconds: 15},
	}
}

// defaultScaleDownPolicies are the HPA's: 100 % per 15 s.
func defaultScaleDownPolicies() []ScalingPolicy {
	return []ScalingPolicy{{Type: PolicyPercent, Value: 100, PeriodSeconds: 15}}
}

// rules is a ScalingRules with every default filled in.
type rules struct {
	window    time.Duration
	windowSec int32
	selectPol SelectPolicy
	policies  []ScalingPolicy
	tolerance float64
}

func (r rules) longestPeriod() int32 {
	var l int32
	for _, p := range r.policies {
		l = max(l, p.PeriodSeconds)
	}
	return l
}

// metric is a MetricSpec resolved.
type metric struct {
	name     string
	typ      MetricType
	target   float64
	additive bool
}

// schedule is a ScheduleSpec parsed.
type schedule struct {
	name       string
	start, end cronSchedule
	loc        *time.Location
	min        int32
}

// predictive is a PredictiveSpec resolved.
type predictive struct {
	metric      metric
	lead        time.Duration
	season      Season
	slot        time.Duration
	agg         Aggregation
	history     int
	minSeasons  int
	ewmaWeight  float64
	headroom    float64
	loc         *time.Location
	slotsPerDay int
}

// resolved is a validated Config with defaults applied.
type resolved struct {
	min, max   int32
	metrics    []metric
	up, down   rules
	maxAge     time.Duration
	panic      bool
	stableWin  time.Duration
	panicWin   time.Duration
	panicThres float64
	schedules  []schedule
	pred       *predictive
	burst      *burst
	// zero is set when the pool may scale to zero; keepOne when its
	// minimum is 0 but no additive metric could wake it.
	zero    *zeroCfg
	keepOne bool
}

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// resolve validates cfg and fills in the defaults. Every error names its
// field; all errors are returned joined.
func resolve(cfg Config) (*resolved, error) {
	var errs []error
	r := &resolved{min: cfg.MinReplicas, max: cfg.MaxReplicas, maxAge: DefaultMetricMaxAge}
	if cfg.MinReplicas < 0 {
		errs = append(errs, fieldErr("minReplicas", "must be >= 0 (got %d)", cfg.MinReplicas))
	}
	if cfg.MaxReplicas < 1 {
		errs = append(errs, fieldErr("maxReplicas", "must be >= 1 (got %d)", cfg.MaxReplicas))
	}
	if cfg.MinReplicas > cfg.MaxReplicas {
		errs = append(errs, fieldErr("minReplicas", "must be <= maxReplicas (%d > %d)", cfg.MinReplicas, cfg.MaxReplicas))
	}
	if cfg.MetricMaxAge != nil {
		if cfg.MetricMaxAge.Duration <= 0 {
			errs = append(errs, fieldErr("metricMaxAge", "must be > 0 (got %s)", cfg.MetricMaxAge.Duration))
		}
		r.maxAge = cfg.MetricMaxAge.Duration
	}

	names := map[string]bool{}
	for i, m := range cfg.Metrics {
		rm, err := resolveMetric(fmt.Sprintf("metrics[%d]", i), m)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if names[rm.name] {
			errs = append(errs, fieldErr(fmt.Sprintf("metrics[%d].name", i), "duplicate metric name %q: give each metric its own name", rm.name))
			continue
		}
		names[rm.name] = true
		r.metrics = append(r.metrics, rm)
	}

	var up, down *ScalingRules
	if cfg.Behavior != nil {
		up, down = cfg.Behavior.ScaleUp, cfg.Behavior.ScaleDown
	}
	var err error
	if r.up, err = resolveRules("behavior.scaleUp", up, DefaultScaleUpStabilization, defaultScaleUpPolicies()); err != nil {
		errs = append(errs, err)
	}
	if r.down, err = resolveRules("behavior.scaleDown", down, DefaultScaleDownStabilization, defaultScaleDownPolicies()); err != nil {
		errs = append(errs, err)
	}

	if p := cfg.Panic; p != nil {
		r.panic = true
		r.stableWin, r.panicWin, r.panicThres = DefaultPanicStableWindow, DefaultPanicWindow, DefaultPanicThresholdPercent/100.0
		if p.StableWindow != nil {
			r.stableWin = p.StableWindow.Duration
			if r.stableWin < 6*time.Second || r.stableWin > time.Hour {
				errs = append(errs, fieldErr("panic.stableWindow", "must be between 6s and 1h (got %s)", r.stableWin))
			}
		}
		if p.PanicWindow != nil {
			r.panicWin = p.PanicWindow.Duration
			if r.panicWin < time.Second || r.panicWin > r.stableWin {
				errs = append(errs, fieldErr("panic.panicWindow", "must be between 1s and the stable window %s (got %s)", r.stableWin, r.panicWin))
			}
		}
		if p.ThresholdPercent != nil {
			if *p.ThresholdPercent < 110 || *p.ThresholdPercent > 1000 {
				errs = append(errs, fieldErr("panic.thresholdPercent", "must be between 110 and 1000 (got %d)", *p.ThresholdPercent))
			}
			r.panicThres = float64(*p.ThresholdPercent) / 100
		}
		if !hasAdditive(r.metrics) {
			errs = append(errs, fieldErr("panic", "needs an additive metric (QPS, Concurrency, QueueLength or PromQL AverageValue) in metrics"))
		}
	}

	schedNames := map[string]bool{}
	for i, s := range cfg.Schedules {
		rs, err := resolveSchedule(fmt.Sprintf("schedules[%d]", i), s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if rs.name == "" {
			rs.name = fmt.Sprintf("schedule-%d", i)
		}
		if schedNames[rs.name] {
			errs = append(errs, fieldErr(fmt.Sprintf("schedules[%d].name", i), "duplicate schedule name %q", rs.name))
			continue
		}
		schedNames[rs.name] = true
		if s.MinReplicas > cfg.MaxReplicas {
			errs = append(errs, fieldErr(fmt.Sprintf("schedules[%d].minReplicas", i), "must be <= maxReplicas (%d > %d)", s.MinReplicas, cfg.MaxReplicas))
		}
		r.schedules = append(r.schedules, rs)
	}

	if cfg.Predictive != nil {
		p, err := resolvePredictive("predictive", *cfg.Predictive, r.metrics)
		if err != nil {
			errs = append(errs, err)
		}
		r.pred = p
	}
	if cfg.Burst != nil {
		b, err := resolveBurst("burst", *cfg.Burst, r.metrics)
		if err != nil {
			errs = append(errs, err)
		}
		r.burst = b
	}
	if z, keep, err := resolveZero(cfg, r.metrics); err != nil {
		errs = append(errs, err)
	} else {
		r.zero, r.keepOne = z, keep
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return r, nil
}

func hasAdditive(ms []metric) bool {
	for _, m := range ms {
		if m.additive {
			return true
		}
	}
	return false
}

func resolveMetric(path string, m MetricSpec) (metric, error) {
	out := metric{name: m.Name, typ: m.Type}
	switch m.Type {
	case MetricQPS:
		out.additive = true
		if out.name == "" {
			out.name = "qps"
		}
	case MetricConcurrency:
		out.additive = true
		if out.name == "" {
			out.name = "concurrency"
		}
	case MetricQueueLength:
		out.additive = true
		if out.name == "" {
			out.name = "queue-length"
		}
	case MetricLatency:
		p := int32(DefaultLatencyPercentile)
		if m.Percentile != nil {
			p = *m.Percentile
			if p < 1 || p > 99 {
				return out, fieldErr(path+".percentile", "must be between 1 and 99 (got %d)", p)
			}
		}
		if out.name == "" {
			out.name = fmt.Sprintf("latency-p%d", p)
		}
	case MetricGPUUtilization:
		if out.name == "" {
			out.name = "gpu-utilization"
		}
	case MetricPromQL:
		if strings.TrimSpace(m.Query) == "" {
			return out, fieldErr(path+".query", "required for PromQL metrics")
		}
		if out.name == "" {
			return out, fieldErr(path+".name", "required for PromQL metrics (observations are reported under it)")
		}
		switch m.TargetType {
		case "", TargetAverageValue:
			out.additive = true
		case TargetValue:
		default:
			return out, fieldErr(path+".targetType", "must be AverageValue or Value (got %q)", m.TargetType)
		}
	default:
		return out, fieldErr(path+".type", "must be one of QPS, Concurrency, QueueLength, Latency, GPUUtilization, PromQL (got %q)", m.Type)
	}
	if m.Type != MetricPromQL && m.TargetType != "" {
		return out, fieldErr(path+".targetType", "only PromQL metrics take a targetType")
	}
	out.target = m.Target.AsApproximateFloat64()
	if !(out.target > 0) || math.IsInf(out.target, 0) {
		return out, fieldErr(path+".target", "must be > 0 (got %s)", m.Target.String())
	}
	if m.Type == MetricGPUUtilization && out.target > 100 {
		return out, fieldErr(path+".target", "is a percentage, must be <= 100 (got %s)", m.Target.String())
	}
	return out, nil
}

func resolveRules(path string, in *ScalingRules, defWindow int32, defPolicies []ScalingPolicy) (rules, error) {
	out := rules{windowSec: defWindow, selectPol: SelectMax, policies: defPolicies, tolerance: DefaultTolerance}
	if in != nil {
		if in.StabilizationWindowSeconds != nil {
			out.windowSec = *in.StabilizationWindowSeconds
			if out.windowSec < 0 || out.windowSec > 3600 {
				return out, fieldErr(path+".stabilizationWindowSeconds", "must be between 0 and 3600 (got %d)", out.windowSec)
			}
		}
		if in.SelectPolicy != nil {
			switch *in.SelectPolicy {
			case SelectMax, SelectMin, SelectDisabled:
				out.selectPol = *in.SelectPolicy
			default:
				return out, fieldErr(path+".selectPolicy", "must be Max, Min or Disabled (got %q)", *in.SelectPolicy)
			}
		}
		if len(in.Policies) > 0 {
			out.policies = append([]ScalingPolicy(nil), in.Policies...)
		}
		if in.Tolerance != nil {
			out.tolerance = in.Tolerance.AsApproximateFloat64()
			if out.tolerance < 0 || out.tolerance >= 1 || math.IsNaN(out.tolerance) {
				return out, fieldErr(path+".tolerance", "must be >= 0 and < 1, e.g. 0.1 for 10%% (got %s)", in.Tolerance.String())
			}
		}
	}
	for i, p := range out.policies {
		pp := fmt.Sprintf("%s.policies[%d]", path, i)
		if p.Type != PolicyPods && p.Type != PolicyPercent {
			return out, fieldErr(pp+".type", "must be Pods or Percent (got %q)", p.Type)
		}
		if p.Value <= 0 {
			return out, fieldErr(pp+".value", "must be > 0 (got %d)", p.Value)
		}
		if p.PeriodSeconds <= 0 || p.PeriodSeconds > 1800 {
			return out, fieldErr(pp+".periodSeconds", "must be between 1 and 1800 (got %d)", p.PeriodSeconds)
		}
	}
	out.window = time.Duration(out.windowSec) * time.Second
	return out, nil
}

func loadZone(path, name string) (*time.Location, error) {
	if name == "" {
		return time.UTC, nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil || name == "Local" {
		return nil, fieldErr(path, "unknown IANA time zone %q (for example Europe/Berlin or America/New_York)", name)
	}
	return loc, nil
}

func resolveSchedule(path string, s ScheduleSpec) (schedule, error) {
	out := schedule{name: s.Name, min: s.MinReplicas}
	var err error
	if out.start, err = parseCron(s.Start); err != nil {
		return out, fieldErr(path+".start", "%v", err)
	}
	if out.end, err = parseCron(s.End); err != nil {
		return out, fieldErr(path+".end", "%v", err)
	}
	if strings.Join(strings.Fields(s.Start), " ") == strings.Join(strings.Fields(s.End), " ") {
		return out, fieldErr(path+".end", "must differ from start (%q)", s.Start)
	}
	if out.loc, err = loadZone(path+".timeZone", s.TimeZone); err != nil {
		return out, err
	}
	if s.MinReplicas < 0 {
		return out, fieldErr(path+".minReplicas", "must be >= 0 (got %d)", s.MinReplicas)
	}
	return out, nil
}

// resolveMetricRef finds the additive metric named name among ms.
func resolveMetricRef(path, name string, ms []metric) (metric, error) {
	for _, m := range ms {
		if m.name != name {
			continue
		}
		if !m.additive {
			return m, fieldErr(path, "metric %q is not additive: use a QPS, Concurrency, QueueLength or PromQL AverageValue metric", name)
		}
		return m, nil
	}
	return metric{}, fieldErr(path, "must name one of metrics[].name (got %q)", name)
}

func resolveBurst(path string, b BurstSpec, ms []metric) (*burst, error) {
	out := &burst{quantile: DefaultBurstQuantile, window: DefaultBurstWindow, bucket: DefaultBurstBucket}
	var err error
	if out.metric, err = resolveMetricRef(path+".metric", b.Metric, ms); err != nil {
		return nil, err
	}
	out.target = out.metric.target
	if b.Target != nil {
		out.target = b.Target.AsApproximateFloat64()
		if !(out.target > 0) || math.IsInf(out.target, 0) {
			return nil, fieldErr(path+".target", "must be > 0: the load one instance serves (got %s)", b.Target.String())
		}
	}
	if b.Quantile != nil {
		out.quantile = b.Quantile.AsApproximateFloat64()
		if !(out.quantile > 0) || out.quantile > 1 {
			return nil, fieldErr(path+".quantile", "must be > 0 and <= 1, e.g. 0.99 (got %s)", b.Quantile.String())
		}
	}
	if b.Window != nil {
		out.window = b.Window.Duration
		if out.window < 10*time.Minute || out.window > 7*24*time.Hour {
			return nil, fieldErr(path+".window", "must be between 10m and 168h (got %s)", out.window)
		}
	}
	if b.Bucket != nil {
		out.bucket = b.Bucket.Duration
		if out.bucket < time.Second || out.bucket > time.Hour || out.bucket%time.Second != 0 {
			return nil, fieldErr(path+".bucket", "must be whole seconds between 1s and 1h (got %s)", out.bucket)
		}
	}
	if out.bucket*2 > out.window {
		return nil, fieldErr(path+".bucket", "must be at most half the window %s (got %s)", out.window, out.bucket)
	}
	if n := out.window / out.bucket; n > MaxBurstBuckets {
		return nil, fieldErr(path+".bucket", "window %s / bucket %s is %d buckets, at most %d: use a longer bucket", out.window, out.bucket, n, MaxBurstBuckets)
	}
	return out, nil
}

func resolvePredictive(path string, p PredictiveSpec, ms []metric) (*predictive, error) {
	out := &predictive{
		lead: p.LeadTime.Duration, season: SeasonWeekly, slot: DefaultPredictiveSlot,
		agg: AggregateMax, history: DefaultPredictiveHistory, minSeasons: 1,
		ewmaWeight: DefaultPredictiveEWMAWeightPct / 100.0,
	}
	var err error
	if out.metric, err = resolveMetricRef(path+".metric", p.Metric, ms); err != nil {
		return nil, err
	}
	if out.lead < 0 || out.lead > 24*time.Hour {
		return nil, fieldErr(path+".leadTime", "must be between 0 and 24h (got %s)", out.lead)
	}
	switch p.Season {
	case "":
	case SeasonDaily, SeasonWeekly:
		out.season = p.Season
	default:
		return nil, fieldErr(path+".season", "must be Daily or Weekly (got %q)", p.Season)
	}
	if p.Slot != nil {
		out.slot = p.Slot.Duration
		if out.slot < time.Minute || out.slot > time.Hour || (24*time.Hour)%out.slot != 0 || out.slot%time.Minute != 0 {
			return nil, fieldErr(path+".slot", "must be whole minutes between 1m and 1h that divide a day (got %s)", out.slot)
		}
	}
	out.slotsPerDay = int(24 * time.Hour / out.slot)
	switch p.Aggregation {
	case "":
	case AggregateMax, AggregateEWMA:
		out.agg = p.Aggregation
	default:
		return nil, fieldErr(path+".aggregation", "must be Max or EWMA (got %q)", p.Aggregation)
	}
	if p.History != nil {
		if *p.History < 1 || *p.History > 12 {
			return nil, fieldErr(path+".history", "must be between 1 and 12 (got %d)", *p.History)
		}
		out.history = int(*p.History)
	}
	if p.MinSeasons != nil {
		if *p.MinSeasons < 1 || int(*p.MinSeasons) > out.history {
			return nil, fieldErr(path+".minSeasons", "must be between 1 and history %d (got %d)", out.history, *p.MinSeasons)
		}
		out.minSeasons = int(*p.MinSeasons)
	}
	if p.EWMAWeightPercent != nil {
		if *p.EWMAWeightPercent < 1 || *p.EWMAWeightPercent > 100 {
			return nil, fieldErr(path+".ewmaWeightPercent", "must be between 1 and 100 (got %d)", *p.EWMAWeightPercent)
		}
		out.ewmaWeight = float64(*p.EWMAWeightPercent) / 100
	}
	if p.HeadroomPercent != nil {
		if *p.HeadroomPercent < 0 || *p.HeadroomPercent > 1000 {
			return nil, fieldErr(path+".headroomPercent", "must be between 0 and 1000 (got %d)", *p.HeadroomPercent)
		}
		out.headroom = float64(*p.HeadroomPercent) / 100
	}
	if out.loc, err = loadZone(path+".timeZone", p.TimeZone); err != nil {
		return nil, err
	}
	return out, nil
}
