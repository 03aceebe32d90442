package autoscale

import tidev1 "github.com/tidegpu/tidegpu/api/v1"

// The configuration types live in the API package (api/v1) so that CRDs embed
// them; these aliases keep this package's names.

type (
	// Config is tidev1.AutoscalingSpec.
	Config = tidev1.AutoscalingSpec
	// MetricType is tidev1.MetricType.
	MetricType = tidev1.MetricType
	// TargetType is tidev1.TargetType.
	TargetType = tidev1.TargetType
	// MetricSpec is tidev1.MetricSpec.
	MetricSpec = tidev1.MetricSpec
	// Behavior is tidev1.Behavior.
	Behavior = tidev1.Behavior
	// SelectPolicy is tidev1.SelectPolicy.
	SelectPolicy = tidev1.SelectPolicy
	// ScalingRules is tidev1.ScalingRules.
	ScalingRules = tidev1.ScalingRules
	// ScalingPolicyType is tidev1.ScalingPolicyType.
	ScalingPolicyType = tidev1.ScalingPolicyType
	// ScalingPolicy is tidev1.ScalingPolicy.
	ScalingPolicy = tidev1.ScalingPolicy
	// PanicSpec is tidev1.PanicSpec.
	PanicSpec = tidev1.PanicSpec
	// ScheduleSpec is tidev1.ScheduleSpec.
	ScheduleSpec = tidev1.ScheduleSpec
	// Season is tidev1.Season.
	Season = tidev1.Season
	// Aggregation is tidev1.Aggregation.
	Aggregation = tidev1.Aggregation
	// PredictiveSpec is tidev1.PredictiveSpec.
	PredictiveSpec = tidev1.PredictiveSpec
	// BurstSpec is tidev1.BurstSpec.
	BurstSpec = tidev1.BurstSpec
	// ScaleToZeroSpec is tidev1.ScaleToZeroSpec.
	ScaleToZeroSpec = tidev1.ScaleToZeroSpec
)

// Constants of the configuration types.
const (
	MetricQPS            = tidev1.MetricQPS
	MetricConcurrency    = tidev1.MetricConcurrency
	MetricQueueLength    = tidev1.MetricQueueLength
	MetricLatency        = tidev1.MetricLatency
	MetricGPUUtilization = tidev1.MetricGPUUtilization
	MetricPromQL         = tidev1.MetricPromQL
	TargetAverageValue   = tidev1.TargetAverageValue
	TargetValue          = tidev1.TargetValue
	SelectMax            = tidev1.SelectMax
	SelectMin            = tidev1.SelectMin
	SelectDisabled       = tidev1.SelectDisabled
	PolicyPods           = tidev1.PolicyPods
	PolicyPercent        = tidev1.PolicyPercent
	SeasonDaily          = tidev1.SeasonDaily
	SeasonWeekly         = tidev1.SeasonWeekly
	AggregateMax         = tidev1.AggregateMax
	AggregateEWMA        = tidev1.AggregateEWMA
)

// ForPool is the autoscaling configuration a TidePool runs: its
// spec.autoscaling with the pool's watermarks filled in (minReplicas unset
// or below spec.minimum becomes spec.minimum; maxReplicas unset or above
// spec.maximum becomes spec.maximum). The engine runs it and
// internal/validation validates it, so both see the same configuration.
func ForPool(spec *tidev1.TidePoolSpec) Config {
	cfg := *spec.Autoscaling.DeepCopy()
	if cfg.MinReplicas == 0 || cfg.MinReplicas < spec.Minimum {
		cfg.MinReplicas = spec.Minimum
	}
	if cfg.MaxReplicas == 0 || cfg.MaxReplicas > spec.Maximum {
		cfg.MaxReplicas = spec.Maximum
	}
	return cfg
}
