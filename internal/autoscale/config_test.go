package autoscale

import (
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testingclock "k8s.io/utils/clock/testing"
	"sigs.k8s.io/yaml"
)

func TestNewValidates(t *testing.T) {
	base := func() Config { return qpsConfig(1, 10, "10", nil) }
	tests := []struct {
		name  string
		mut   func(*Config)
		field string
	}{
		{"negative min", func(c *Config) { c.MinReplicas = -1 }, "minReplicas"},
		{"zero max", func(c *Config) { c.MaxReplicas = 0 }, "maxReplicas"},
		{"min above max", func(c *Config) { c.MinReplicas = 11 }, "minReplicas"},
		{"unknown metric type", func(c *Config) { c.Metrics[0].Type = "CPU" }, "metrics[0].type"},
		{"zero target", func(c *Config) { c.Metrics[0].Target = qty("0") }, "metrics[0].target"},
		{"gpu over 100", func(c *Config) { c.Metrics[0] = MetricSpec{Type: MetricGPUUtilization, Target: qty("150")} }, "metrics[0].target"},
		{"percentile", func(c *Config) {
			c.Metrics[0] = MetricSpec{Type: MetricLatency, Target: qty("100"), Percentile: i32(100)}
		}, "metrics[0].percentile"},
		{"promql without query", func(c *Config) { c.Metrics[0] = MetricSpec{Type: MetricPromQL, Name: "x", Target: qty("1")} }, "metrics[0].query"},
		{"promql without name", func(c *Config) { c.Metrics[0] = MetricSpec{Type: MetricPromQL, Query: "up", Target: qty("1")} }, "metrics[0].name"},
		{"promql target type", func(c *Config) {
			c.Metrics[0] = MetricSpec{Type: MetricPromQL, Name: "x", Query: "up", Target: qty("1"), TargetType: "Utilization"}
		}, "metrics[0].targetType"},
		{"duplicate metric", func(c *Config) { c.Metrics = append(c.Metrics, c.Metrics[0]) }, "metrics[1].name"},
		{"window too long", func(c *Config) {
			c.Behavior = &Behavior{ScaleDown: &ScalingRules{StabilizationWindowSeconds: i32(3601)}}
		}, "behavior.scaleDown.stabilizationWindowSeconds"},
		{"select policy", func(c *Config) { c.Behavior = &Behavior{ScaleUp: &ScalingRules{SelectPolicy: sel("Fastest")}} }, "behavior.scaleUp.selectPolicy"},
		{"policy type", func(c *Config) {
			c.Behavior = &Behavior{ScaleUp: &ScalingRules{Policies: []ScalingPolicy{{Type: "Nodes", Value: 1, PeriodSeconds: 15}}}}
		}, "behavior.scaleUp.policies[0].type"},
		{"policy value", func(c *Config) {
			c.Behavior = &Behavior{ScaleDown: &ScalingRules{Policies: []ScalingPolicy{{Type: PolicyPods, Value: 1, PeriodSeconds: 15}, {Type: PolicyPods, Value: 0, PeriodSeconds: 15}}}}
		}, "behavior.scaleDown.policies[1].value"},
		{"policy period", func(c *Config) {
			c.Behavior = &Behavior{ScaleUp: &ScalingRules{Policies: []ScalingPolicy{{Type: PolicyPods, Value: 1, PeriodSeconds: 1801}}}}
		}, "behavior.scaleUp.policies[0].periodSeconds"},
		{"tolerance", func(c *Config) { q := qty("1.5"); c.Behavior = &Behavior{ScaleUp: &ScalingRules{Tolerance: &q}} }, "behavior.scaleUp.tolerance"},
		{"panic threshold", func(c *Config) { c.Panic = &PanicSpec{ThresholdPercent: i32(100)} }, "panic.thresholdPercent"},
		{"panic window", func(c *Config) { c.Panic = &PanicSpec{PanicWindow: dur(2 * time.Minute)} }, "panic.panicWindow"},
		{"panic without additive metric", func(c *Config) {
			c.Metrics[0] = MetricSpec{Type: MetricLatency, Target: qty("100")}
			c.Panic = &PanicSpec{}
		}, "panic"},
		{"schedule cron", func(c *Config) { c.Schedules = []ScheduleSpec{{Start: "61 * * * *", End: "0 1 * * *"}} }, "schedules[0].start"},
		{"schedule same start and end", func(c *Config) { c.Schedules = []ScheduleSpec{{Start: "0 1 * * *", End: "0  1 * * *"}} }, "schedules[0].end"},
		{"schedule zone", func(c *Config) {
			c.Schedules = []ScheduleSpec{{Start: "0 1 * * *", End: "0 2 * * *", TimeZone: "Mars/Olympus"}}
		}, "schedules[0].timeZone"},
		{"schedule tz prefix", func(c *Config) { c.Schedules = []ScheduleSpec{{Start: "TZ=UTC 0 1 * * *", End: "0 2 * * *"}} }, "schedules[0].start"},
		{"schedule above max", func(c *Config) {
			c.Schedules = []ScheduleSpec{{Start: "0 1 * * *", End: "0 2 * * *", MinReplicas: 11}}
		}, "schedules[0].minReplicas"},
		{"schedule never fires", func(c *Config) { c.Schedules = []ScheduleSpec{{Start: "0 0 30 2 *", End: "0 2 * * *"}} }, "schedules[0].start"},
		{"predictive metric", func(c *Config) { c.Predictive = &PredictiveSpec{Metric: "rps"} }, "predictive.metric"},
		{"predictive slot", func(c *Config) { c.Predictive = &PredictiveSpec{Metric: "qps", Slot: dur(7 * time.Minute)} }, "predictive.slot"},
		{"predictive lead", func(c *Config) {
			c.Predictive = &PredictiveSpec{Metric: "qps", LeadTime: metav1.Duration{Duration: -time.Minute}}
		}, "predictive.leadTime"},
		{"predictive minSeasons", func(c *Config) { c.Predictive = &PredictiveSpec{Metric: "qps", History: i32(2), MinSeasons: i32(3)} }, "predictive.minSeasons"},
		{"metric max age", func(c *Config) { c.MetricMaxAge = dur(0) }, "metricMaxAge"},
		{"burst metric unknown", func(c *Config) { c.Burst = &BurstSpec{Metric: "rps"} }, "burst.metric"},
		{"burst metric not additive", func(c *Config) {
			c.Metrics = append(c.Metrics, MetricSpec{Type: MetricLatency, Target: qty("100")})
			c.Burst = &BurstSpec{Metric: "latency-p95"}
		}, "burst.metric"},
		{"burst zero target", func(c *Config) { q := qty("0"); c.Burst = &BurstSpec{Metric: "qps", Target: &q} }, "burst.target"},
		{"burst negative target", func(c *Config) { q := qty("-2"); c.Burst = &BurstSpec{Metric: "qps", Target: &q} }, "burst.target"},
		{"burst zero quantile", func(c *Config) { q := qty("0"); c.Burst = &BurstSpec{Metric: "qps", Quantile: &q} }, "burst.quantile"},
		{"burst quantile above 1", func(c *Config) { q := qty("99"); c.Burst = &BurstSpec{Metric: "qps", Quantile: &q} }, "burst.quantile"},
		{"burst window too short", func(c *Config) { c.Burst = &BurstSpec{Metric: "qps", Window: dur(5 * time.Minute)} }, "burst.window"},
		{"burst window too long", func(c *Config) { c.Burst = &BurstSpec{Metric: "qps", Window: dur(8 * 24 * time.Hour)} }, "burst.window"},
		{"burst bucket fraction of a second", func(c *Config) { c.Burst = &BurstSpec{Metric: "qps", Bucket: dur(1500 * time.Millisecond)} }, "burst.bucket"},
		{"burst bucket too long", func(c *Config) { c.Burst = &BurstSpec{Metric: "qps", Bucket: dur(2 * time.Hour)} }, "burst.bucket"},
		{"burst bucket over half the window", func(c *Config) {
			c.Burst = &BurstSpec{Metric: "qps", Window: dur(20 * time.Minute), Bucket: dur(15 * time.Minute)}
		}, "burst.bucket"},
		{"burst too many buckets", func(c *Config) {
			c.Burst = &BurstSpec{Metric: "qps", Window: dur(7 * 24 * time.Hour), Bucket: dur(30 * time.Second)}
		}, "burst.bucket"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base()
			tc.mut(&cfg)
			_, err := New(cfg, testingclock.NewFakeClock(t0))
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("New = %v, want a FieldError", err)
			}
			if fe.Field != tc.field {
				t.Fatalf("field %q, want %q (%v)", fe.Field, tc.field, err)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("message %q does not name %s", err, tc.field)
			}
		})
	}
}

func TestNewAcceptsAFullConfig(t *testing.T) {
	// The YAML a user writes (sigs.k8s.io/yaml, as the CRD will decode it).
	doc := `
minReplicas: 1
maxReplicas: 30
metricMaxAge: 45s
metrics:
- type: Concurrency
  target: "6"
- type: Latency
  percentile: 99
  target: "2500"
- type: GPUUtilization
  target: "80"
- type: PromQL
  name: tokens
  query: sum(rate(vllm:generation_tokens_total[1m]))
  target: 1500m
behavior:
  scaleUp:
    policies:
    - {type: Pods, value: 4, periodSeconds: 30}
  scaleDown:
    stabilizationWindowSeconds: 600
    selectPolicy: Min
    tolerance: "0.05"
panic:
  thresholdPercent: 250
schedules:
- name: office
  start: 30 8 * * 1-5
  end: 0 18 * * 1-5
  timeZone: Europe/Berlin
  minReplicas: 6
predictive:
  metric: concurrency
  leadTime: 4m
  season: Weekly
  aggregation: EWMA
burst:
  metric: concurrency
  target: "8"
  quantile: "0.98"
  window: 6h
  bucket: 30s
`
	var cfg Config
	if err := yaml.UnmarshalStrict([]byte(doc), &cfg); err != nil {
		t.Fatal(err)
	}
	a, err := New(cfg, testingclock.NewFakeClock(t0))
	if err != nil {
		t.Fatal(err)
	}
	r := a.cfg
	if r.down.windowSec != 600 || r.down.selectPol != SelectMin || r.down.tolerance != 0.05 || r.up.windowSec != 0 ||
		len(r.up.policies) != 1 || r.panicThres != 2.5 || r.stableWin != time.Minute || r.maxAge != 45*time.Second ||
		r.metrics[3].target != 1.5 || r.metrics[1].name != "latency-p99" || r.pred.lead != 4*time.Minute ||
		r.burst.metric.name != "concurrency" || r.burst.target != 8 || r.burst.quantile != 0.98 || r.burst.window != 6*time.Hour || r.burst.bucket != 30*time.Second {
		t.Fatalf("resolved %+v", r)
	}
	// Burst defaults: the metric's target, q 0.99, 8 h of 1 min buckets.
	c2 := qpsConfig(1, 10, "1.5", nil)
	c2.Burst = &BurstSpec{Metric: "qps"}
	a2, err := New(c2, testingclock.NewFakeClock(t0))
	if err != nil {
		t.Fatal(err)
	}
	if b := a2.cfg.burst; b.target != 1.5 || b.quantile != DefaultBurstQuantile || b.window != DefaultBurstWindow || b.bucket != DefaultBurstBucket {
		t.Fatalf("burst defaults %+v", b)
	}
	// Default scale-down policy filled in next to the given fields.
	if len(r.down.policies) != 1 || r.down.policies[0] != (ScalingPolicy{Type: PolicyPercent, Value: 100, PeriodSeconds: 15}) {
		t.Fatalf("scale-down policies %+v", r.down.policies)
	}
}
