package v1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The types of this file configure autoscaling (spec.autoscaling of a
// TidePool; the same type serves AIBalancer). internal/autoscale implements
// them.

// AutoscalingSpec is the autoscaling configuration of one pool.
//
// Its markers and CEL rules mirror internal/autoscale's resolver (which
// internal/validation applies for `tidegpu up`). Go only, as CEL cannot
// express them: cron expressions (start, end: the cron grammar, "never
// fires"), IANA time zones (timeZone: the zone database), and the rules
// over metric and schedule names (duplicates, predictive.metric and
// burst.metric naming an additive metric), since unset names default from
// the type, percentile or index (latency-p95, schedule-0). The API server
// accepts those; the engine refuses them at run time (condition
// AutoscalingActive False, reason InvalidConfig).
//
// +kubebuilder:validation:XValidation:rule="!has(self.panic) || (has(self.metrics) && self.metrics.exists(m, m.type in ['QPS', 'Concurrency', 'QueueLength'] || (m.type == 'PromQL' && (!has(m.targetType) || m.targetType == 'AverageValue'))))",fieldPath=".panic",message="panic needs an additive metric (QPS, Concurrency, QueueLength or PromQL AverageValue) in metrics: add one or remove panic"
// +kubebuilder:validation:XValidation:rule="!has(self.scaleToZero) || (has(self.metrics) && self.metrics.exists(m, m.type in ['QPS', 'Concurrency', 'QueueLength'] || (m.type == 'PromQL' && (!has(m.targetType) || m.targetType == 'AverageValue'))))",fieldPath=".scaleToZero",message="scaleToZero needs an additive metric (QPS, Concurrency or QueueLength) in metrics to wake the pool: add one, for example {type: Concurrency, target: \"4\"}"
type AutoscalingSpec struct {
	// MinReplicas is the lowest size the autoscaler recommends. On a
	// TidePool, unset means spec.minimum.
	// +kubebuilder:validation:Minimum=0
	// +optional
	MinReplicas int32 `json:"minReplicas,omitempty"`

	// MaxReplicas is the highest size the autoscaler recommends. On a
	// TidePool, unset means spec.maximum.
	// +kubebuilder:validation:Minimum=0
	// +optional
	MaxReplicas int32 `json:"maxReplicas,omitempty"`

	// Metrics drive the reactive (HPA) recommender; the largest
	// recommendation over all metrics wins, as in the HPA.
	// +kubebuilder:validation:MaxItems=10
	// +optional
	Metrics []MetricSpec `json:"metrics,omitempty"`

	// Behavior configures stabilisation windows and rate policies exactly
	// like autoscaling/v2's HorizontalPodAutoscalerBehavior. Unset (or unset
	// fields) take the HPA defaults.
	// +optional
	Behavior *Behavior `json:"behavior,omitempty"`

	// Panic enables Knative-style panic mode. Unset means off.
	// +optional
	Panic *PanicSpec `json:"panic,omitempty"`

	// Schedules raise the minimum during cron windows.
	// +kubebuilder:validation:MaxItems=32
	// +optional
	Schedules []ScheduleSpec `json:"schedules,omitempty"`

	// Predictive enables the recommender that learns the daily or weekly
	// load profile and scales ahead of it. Unset means off.
	// +optional
	Predictive *PredictiveSpec `json:"predictive,omitempty"`

	// Burst enables the recommender that keeps standing capacity for the
	// bursts seen recently: a request-weighted quantile of the load over a
	// trailing window. Unset means off.
	// +optional
	Burst *BurstSpec `json:"burst,omitempty"`

	// ScaleToZero tunes how a pool whose minimum is 0 goes to zero
	// instances when idle and wakes at the next request. A pool with
	// spec.minimum 0 (and minReplicas 0 or unset) and an additive metric
	// (QPS, Concurrency, QueueLength) scales to zero with the defaults when
	// this is unset; without an additive metric it keeps one instance, as
	// nothing could wake it.
	// +optional
	ScaleToZero *ScaleToZeroSpec `json:"scaleToZero,omitempty"`

	// MetricMaxAge is how old an observation may be before it counts as
	// missing. Default 60s.
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="metricMaxAge must be > 0, such as 60s"
	// +optional
	MetricMaxAge *metav1.Duration `json:"metricMaxAge,omitempty"`
}

// MetricType names what a metric measures and how it turns into replicas.
// +kubebuilder:validation:Enum=QPS;Concurrency;QueueLength;Latency;GPUUtilization;PromQL
type MetricType string

// Metric types.
//
// QPS, Concurrency and QueueLength are additive: the observation is the pool
// total and the target is per instance, so desired = ceil(total / target)
// (the HPA's External metric with an AverageValue target). Latency,
// GPUUtilization and PromQL with a Value target are not additive: the
// observation is a pool-wide value and desired = ceil(ready × value /
// target) (the HPA's Object metric with a Value target).
const (
	// MetricQPS is requests per second; target per instance.
	MetricQPS MetricType = "QPS"
	// MetricConcurrency is requests in flight; target per instance.
	MetricConcurrency MetricType = "Concurrency"
	// MetricQueueLength is requests waiting for a slot; target per instance.
	MetricQueueLength MetricType = "QueueLength"
	// MetricLatency is a latency percentile in milliseconds; target in ms.
	MetricLatency MetricType = "Latency"
	// MetricGPUUtilization is the mean GPU utilisation in percent (0-100).
	MetricGPUUtilization MetricType = "GPUUtilization"
	// MetricPromQL is the value of a PromQL query; see TargetType.
	MetricPromQL MetricType = "PromQL"
)

// TargetType says how a PromQL metric's value relates to replicas.
// +kubebuilder:validation:Enum=AverageValue;Value
type TargetType string

// Target types (the HPA's MetricTargetType names).
const (
	// TargetAverageValue: the query returns a pool total, the target is per
	// instance.
	TargetAverageValue TargetType = "AverageValue"
	// TargetValue: the query returns a pool-wide value compared with the
	// target as is.
	TargetValue TargetType = "Value"
)

// MetricSpec is one metric the reactive recommender follows.
//
// +kubebuilder:validation:XValidation:rule="self.type != 'PromQL' || (has(self.query) && !self.query.matches('^\\\\s*$'))",fieldPath=".query",message="query: required for PromQL metrics: set the PromQL expression"
// +kubebuilder:validation:XValidation:rule="self.type != 'PromQL' || has(self.name)",fieldPath=".name",message="name: required for PromQL metrics (observations are reported under it)"
// +kubebuilder:validation:XValidation:rule="self.type == 'PromQL' || !has(self.targetType)",fieldPath=".targetType",message="targetType: only PromQL metrics take a targetType: remove it"
// +kubebuilder:validation:XValidation:rule="self.type != 'GPUUtilization' || quantity(string(self.target)).compareTo(quantity('100')) <= 0",fieldPath=".target",message="target: a GPUUtilization target is a percentage, must be <= 100"
type MetricSpec struct {
	// Type of the metric.
	Type MetricType `json:"type"`

	// Name identifies the metric in observations and decisions. Default:
	// qps, concurrency, queue-length, latency-pNN, gpu-utilization; required
	// for PromQL.
	// +optional
	Name string `json:"name,omitempty"`

	// Target is the wanted value: per instance for QPS, Concurrency,
	// QueueLength and PromQL AverageValue; milliseconds for Latency;
	// percent for GPUUtilization.
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).isGreaterThan(quantity('0'))",message="target must be > 0"
	Target resource.Quantity `json:"target"`

	// Percentile of the latency distribution (Latency only), 1-99. Default 95.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=99
	// +optional
	Percentile *int32 `json:"percentile,omitempty"`

	// Query is the PromQL expression (PromQL only). The autoscaler does not
	// run it; the metrics source does and reports its value under Name.
	// +kubebuilder:validation:MaxLength=4096
	// +optional
	Query string `json:"query,omitempty"`

	// TargetType for PromQL: AverageValue (default) or Value.
	// +optional
	TargetType TargetType `json:"targetType,omitempty"`
}

// Behavior mirrors autoscaling/v2 HorizontalPodAutoscalerBehavior.
type Behavior struct {
	// ScaleUp rules. Default: no stabilisation; policies 100 % or 4 pods per
	// 15 s; selectPolicy Max.
	// +optional
	ScaleUp *ScalingRules `json:"scaleUp,omitempty"`
	// ScaleDown rules. Default: 300 s stabilisation; policy 100 % per 15 s.
	// +optional
	ScaleDown *ScalingRules `json:"scaleDown,omitempty"`
}

// SelectPolicy picks among the policies of one direction.
// +kubebuilder:validation:Enum=Max;Min;Disabled
type SelectPolicy string

// Select policies.
const (
	// SelectMax allows the largest change any policy allows.
	SelectMax SelectPolicy = "Max"
	// SelectMin allows the smallest change any policy allows.
	SelectMin SelectPolicy = "Min"
	// SelectDisabled forbids scaling in that direction.
	SelectDisabled SelectPolicy = "Disabled"
)

// ScalingRules mirrors autoscaling/v2 HPAScalingRules.
type ScalingRules struct {
	// StabilizationWindowSeconds: past recommendations considered, 0-3600.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=3600
	// +optional
	StabilizationWindowSeconds *int32 `json:"stabilizationWindowSeconds,omitempty"`

	// SelectPolicy: Max (default), Min or Disabled.
	// +optional
	SelectPolicy *SelectPolicy `json:"selectPolicy,omitempty"`

	// Policies limit the rate of change. Empty means the default.
	// +optional
	Policies []ScalingPolicy `json:"policies,omitempty"`

	// Tolerance on the usage ratio in this direction (for example 0.1 for
	// 10 %), like the HPA's per-direction tolerance. Default 0.1.
	// +kubebuilder:validation:XValidation:rule="!quantity(string(self)).isLessThan(quantity('0')) && quantity(string(self)).isLessThan(quantity('1'))",message="tolerance must be >= 0 and < 1, such as 0.1 for 10%"
	// +optional
	Tolerance *resource.Quantity `json:"tolerance,omitempty"`
}

// ScalingPolicyType is Pods or Percent.
// +kubebuilder:validation:Enum=Pods;Percent
type ScalingPolicyType string

// Scaling policy types.
const (
	// PolicyPods allows Value instances of change per period.
	PolicyPods ScalingPolicyType = "Pods"
	// PolicyPercent allows Value percent of the size at the period's start.
	PolicyPercent ScalingPolicyType = "Percent"
)

// ScalingPolicy mirrors autoscaling/v2 HPAScalingPolicy.
type ScalingPolicy struct {
	// Type is Pods or Percent.
	Type ScalingPolicyType `json:"type"`
	// Value is the change allowed per period, > 0.
	// +kubebuilder:validation:Minimum=1
	Value int32 `json:"value"`
	// PeriodSeconds the policy holds over, 1-1800.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1800
	PeriodSeconds int32 `json:"periodSeconds"`
}

// PanicSpec configures Knative-style panic mode. It looks at the additive
// metrics (QPS, Concurrency, QueueLength, PromQL AverageValue). With panic
// mode on, those metrics are read as Knative does: the reactive (and
// predictive) recommenders use the mean of the observations over
// StableWindow, panic mode their mean over PanicWindow, so feed raw
// observations (every few seconds) rather than pre-averaged ones.
//
// +kubebuilder:validation:XValidation:rule="!has(self.panicWindow) || (duration(self.panicWindow) >= duration('1s') && duration(self.panicWindow) <= (has(self.stableWindow) ? duration(self.stableWindow) : duration('60s')))",fieldPath=".panicWindow",message="panicWindow must be between 1s and the stable window (default 60s)"
type PanicSpec struct {
	// StableWindow: panic ends once the load has stayed under the threshold
	// this long. Default 60s.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('6s') && duration(self) <= duration('1h')",message="stableWindow must be between 6s and 1h"
	// +optional
	StableWindow *metav1.Duration `json:"stableWindow,omitempty"`
	// PanicWindow: observations averaged to detect a burst. Default 6s.
	// +optional
	PanicWindow *metav1.Duration `json:"panicWindow,omitempty"`
	// ThresholdPercent: panic when the panic window needs at least this
	// percentage of the ready instances. Default 200, minimum 110.
	// +kubebuilder:validation:Minimum=110
	// +kubebuilder:validation:Maximum=1000
	// +optional
	ThresholdPercent *int32 `json:"thresholdPercent,omitempty"`
}

// ScheduleSpec raises the minimum to MinReplicas from each Start until the
// next End (KEDA's cron scaler semantics: active while the next End comes
// before the next Start).
type ScheduleSpec struct {
	// Name for decisions and events.
	// +optional
	Name string `json:"name,omitempty"`
	// Start is a 5-field cron expression (minute hour day-of-month month
	// day-of-week) or @daily/@weekly/@monthly/@yearly/@hourly.
	Start string `json:"start"`
	// End is a cron expression like Start.
	End string `json:"end"`
	// TimeZone is an IANA zone (Europe/Berlin). Default UTC. Start and End
	// follow that zone's wall clock; a boundary inside a skipped DST hour
	// takes effect when the clock jumps.
	// +optional
	TimeZone string `json:"timeZone,omitempty"`
	// MinReplicas while the window is active.
	// +kubebuilder:validation:Minimum=0
	MinReplicas int32 `json:"minReplicas"`
}

// Season is the period of the predictive profile.
// +kubebuilder:validation:Enum=Daily;Weekly
type Season string

// Seasons.
const (
	// SeasonDaily: one profile per time of day.
	SeasonDaily Season = "Daily"
	// SeasonWeekly: one profile per time of week.
	SeasonWeekly Season = "Weekly"
)

// Aggregation folds the past seasons of a slot into a forecast.
// +kubebuilder:validation:Enum=Max;EWMA
type Aggregation string

// Aggregations.
const (
	// AggregateMax forecasts the maximum of the last History seasons.
	AggregateMax Aggregation = "Max"
	// AggregateEWMA forecasts an exponentially weighted mean of the last
	// History seasons, the newest weighted EWMAWeightPercent.
	AggregateEWMA Aggregation = "EWMA"
)

// PredictiveSpec configures the predictive recommender.
//
// +kubebuilder:validation:XValidation:rule="!has(self.minSeasons) || self.minSeasons <= (has(self.history) ? self.history : 4)",fieldPath=".minSeasons",message="minSeasons must be between 1 and history (default 4)"
type PredictiveSpec struct {
	// Metric names the additive metric (of Metrics) whose profile is learned
	// and whose target converts the forecast into replicas.
	Metric string `json:"metric"`
	// LeadTime is how far ahead to provision: the measured cold start.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s') && duration(self) <= duration('24h')",message="leadTime must be between 0 and 24h"
	LeadTime metav1.Duration `json:"leadTime"`
	// Season: Daily or Weekly (default).
	// +optional
	Season Season `json:"season,omitempty"`
	// Slot is the profile's resolution. Default 5m; 1m-1h; must divide a day.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m') && duration(self) <= duration('1h') && duration(self).getMilliseconds() % 60000 == 0 && 86400 % duration(self).getSeconds() == 0",message="slot must be whole minutes between 1m and 1h that divide a day, such as 5m"
	// +optional
	Slot *metav1.Duration `json:"slot,omitempty"`
	// Aggregation: Max (default) or EWMA.
	// +optional
	Aggregation Aggregation `json:"aggregation,omitempty"`
	// History is the number of past seasons kept per slot. Default 4, 1-12.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=12
	// +optional
	History *int32 `json:"history,omitempty"`
	// MinSeasons is how many past seasons a slot needs before it forecasts.
	// Default 1.
	// +kubebuilder:validation:Minimum=1
	// +optional
	MinSeasons *int32 `json:"minSeasons,omitempty"`
	// EWMAWeightPercent is the weight of the newest season (EWMA). Default 50.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	EWMAWeightPercent *int32 `json:"ewmaWeightPercent,omitempty"`
	// HeadroomPercent is added to the forecast. Default 0.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	// +optional
	HeadroomPercent *int32 `json:"headroomPercent,omitempty"`
	// TimeZone of the profile's wall clock (IANA). Default UTC.
	// +optional
	TimeZone string `json:"timeZone,omitempty"`
}

// BurstSpec configures the burst recommender. It keeps the pool at least
// as large as the load of the bursts seen over the trailing Window needs,
// so that capacity is already serving when the next burst of that size
// comes, whatever the cold start. The load is averaged per Bucket; the
// buckets are weighted by their load (the requests they carried), and the
// smallest bucket load at or above which lies no more than 1 - Quantile of
// the window's load is provisioned: with Quantile 0.99, the buckets that
// carried 99 % of the requests fit the pool. The floor follows the window:
// it rises after a burst and falls once the burst has left the window.
//
// +kubebuilder:validation:XValidation:rule="(has(self.bucket) ? duration(self.bucket) : duration('1m')) + (has(self.bucket) ? duration(self.bucket) : duration('1m')) <= (has(self.window) ? duration(self.window) : duration('8h'))",fieldPath=".bucket",message="bucket must be at most half the window (default 8h): use a shorter bucket or a longer window"
// +kubebuilder:validation:XValidation:rule="!has(self.bucket) || duration(self.bucket) < duration('1s') || (has(self.window) ? duration(self.window) : duration('8h')).getMilliseconds() / duration(self.bucket).getMilliseconds() <= 10080",fieldPath=".bucket",message="window / bucket must be at most 10080 buckets: use a longer bucket"
type BurstSpec struct {
	// Metric names the additive metric (of Metrics) whose load is observed.
	Metric string `json:"metric"`

	// Target is the load one instance serves within the latency objective
	// (for QPS, its throughput at full batch). It is usually above the
	// metric's own target, which keeps headroom for reactive scaling.
	// Default: the metric's target.
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).isGreaterThan(quantity('0'))",message="target must be > 0: the load one instance serves"
	// +optional
	Target *resource.Quantity `json:"target,omitempty"`

	// Quantile of the window's load, weighted by load, to provision for:
	// more than 0 and at most 1 (1 is the largest bucket). Default 0.99.
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).isGreaterThan(quantity('0')) && quantity(string(self)).compareTo(quantity('1')) <= 0",message="quantile must be > 0 and <= 1, such as 0.99"
	// +optional
	Quantile *resource.Quantity `json:"quantile,omitempty"`

	// Window is how far back bursts are remembered, 10m-7d. Default 8h.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('10m') && duration(self) <= duration('168h')",message="window must be between 10m and 168h"
	// +optional
	Window *metav1.Duration `json:"window,omitempty"`

	// Bucket is the averaging interval of the load, 1s-1h; Window holds at
	// most 10080 buckets. Default 1m.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('1h') && duration(self).getMilliseconds() % 1000 == 0",message="bucket must be whole seconds between 1s and 1h"
	// +optional
	Bucket *metav1.Duration `json:"bucket,omitempty"`
}

// ScaleToZeroSpec configures scaling to and from zero instances.
type ScaleToZeroSpec struct {
	// IdleWindow is how long every additive metric must stay at or below
	// the activation threshold (no request in flight, waiting or arriving)
	// before the last instance goes. 30s-24h. Default 5m (KEDA's
	// cooldownPeriod). The autoscaler also keeps the last instance when the
	// idle gaps it has seen after the window were on average shorter than
	// the pool's measured cold start: a restart would cost more than it
	// saves.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('30s') && duration(self) <= duration('24h')",message="idleWindow must be between 30s and 24h, such as 5m"
	// +optional
	IdleWindow *metav1.Duration `json:"idleWindow,omitempty"`

	// ActivationThreshold: at zero, the pool wakes when an additive metric
	// (the requests the gateway holds for it count as in flight and
	// waiting) is above it; the pool also counts as idle only while every
	// additive metric is at or below it. Default 0: the first request wakes
	// the pool (KEDA's activationThreshold).
	// +kubebuilder:validation:XValidation:rule="!quantity(string(self)).isLessThan(quantity('0'))",message="activationThreshold must be >= 0"
	// +optional
	ActivationThreshold *resource.Quantity `json:"activationThreshold,omitempty"`
}

// AutoscalingStatus records the autoscaler's last decision.
type AutoscalingStatus struct {
	// DesiredReplicas is what the autoscaler wants.
	DesiredReplicas int32 `json:"desiredReplicas"`
	// Recommender that won: reactive, panic, predictive, burst, schedule,
	// minReplicas, maxReplicas, hold, idle (at or going to zero, or keeping
	// the last instance through an idle window) or activation (woken from
	// zero).
	Recommender string `json:"recommender"`
	// Metric (or schedule) and Value behind the decision.
	// +optional
	Metric string `json:"metric,omitempty"`
	// +optional
	Value string `json:"value,omitempty"`
	// Reason is a one-line explanation.
	Reason string `json:"reason"`
	// Panic is true while panic mode is active.
	// +optional
	Panic bool `json:"panic,omitempty"`
	// LastScaleTime is when the desired size last changed.
	// +optional
	LastScaleTime *metav1.Time `json:"lastScaleTime,omitempty"`
}
