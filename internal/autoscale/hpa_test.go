package autoscale

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	testingclock "k8s.io/utils/clock/testing"
)

// The expected sequences below are derived by hand from the HPA's
// documented algorithm
// (https://kubernetes.io/docs/concepts/workloads/autoscaling/horizontal-pod-autoscale/#algorithm-details
// and #configurable-scaling-behavior) and the controller's code
// (pkg/controller/podautoscaler/horizontal.go: stabilizeRecommendationWithBehaviors,
// convertDesiredReplicasWithBehaviorRate, calculateScaleUpLimitWithScalingRules,
// calculateScaleDownLimitWithBehaviors, getReplicasChangePerPeriod;
// replica_calculator.go: GetExternalPerPodMetricReplicas,
// getUsageRatioReplicaCount). Each step applies the decision, as the HPA
// does when it updates the scale subresource.

var t0 = time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC) // a Monday

func i32(v int32) *int32 { return &v }

func sel(s SelectPolicy) *SelectPolicy { return &s }

func qty(s string) resource.Quantity { return resource.MustParse(s) }

// qpsConfig is a pool scaled on QPS with target per instance.
func qpsConfig(minR, maxR int32, target string, b *Behavior) Config {
	return Config{
		MinReplicas: minR, MaxReplicas: maxR,
		Metrics:  []MetricSpec{{Type: MetricQPS, Target: qty(target)}},
		Behavior: b,
	}
}

// step is one HPA sync: at offset `at` from t0 the pool total is `qps`;
// the decision must be `want`. The next step's current size is `want`.
type step struct {
	at   time.Duration
	qps  float64
	want int32
}

// every builds steps at a fixed interval from `from`, all with one load
// and one expected size.
func every(from, to, interval time.Duration, qps float64, want int32) []step {
	var s []step
	for at := from; at <= to; at += interval {
		s = append(s, step{at, qps, want})
	}
	return s
}

func concat(parts ...[]step) []step {
	var out []step
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func runSteps(t *testing.T, cfg Config, start int32, steps []step) {
	t.Helper()
	clk := testingclock.NewFakeClock(t0)
	a, err := New(cfg, clk)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	cur := start
	for i, s := range steps {
		clk.SetTime(t0.Add(s.at))
		d := a.Recommend(Input{CurrentReplicas: cur, Metrics: []Observation{{Metric: "qps", Value: s.qps, At: clk.Now()}}})
		if d.DesiredReplicas != s.want {
			t.Fatalf("step %d (t=%s, current %d, qps %g): desired %d, want %d; reason: %s", i, s.at, cur, s.qps, d.DesiredReplicas, s.want, d.Reason)
		}
		cur = d.DesiredReplicas
	}
}

func TestHPASequences(t *testing.T) {
	sec := time.Second
	tests := []struct {
		name  string
		cfg   Config
		start int32
		steps []step
	}{
		{
			// Tolerance 0.1: desired = ceil(total/target) only when the
			// usage ratio total/(target*current) leaves [0.9, 1.1].
			//   t=0   4 replicas, 42 qps: ratio 42/40 = 1.05, within → 4
			//   t=15  38 qps: ratio 0.95, within → 4
			//   t=30  45 qps: ratio 1.125 → ceil(4.5) = 5 (scale-up
			//         limit: max(ceil(4*2)=8, 4+4=8) = 8, not limiting)
			//   t=45  5 replicas, 46 qps: ratio 0.92 within → 5
			//   t=60  44 qps: ratio 0.88 → ceil(4.4) = 5 → 5
			name: "tolerance", cfg: qpsConfig(1, 10, "10", nil), start: 4,
			steps: []step{{0, 42, 4}, {15 * sec, 38, 4}, {30 * sec, 45, 5}, {45 * sec, 46, 5}, {60 * sec, 44, 5}},
		},
		{
			// Default scale-up: policies Percent 100 and Pods 4 per 15 s,
			// selectPolicy Max, no stabilisation. 1 replica, 200 qps needs 20.
			//   t=0   start 1: max(ceil(1*2)=2, 1+4=5) = 5 → 5 (event +4 @0)
			//   t=15  the +4 @0 is not after the cutoff 15-15=0, so the period
			//         starts at 5: max(10, 9) = 10 → 10 (event +5 @15)
			//   t=30  start 10: max(20, 14) = 20 → 20
			name: "default scale-up policies", cfg: qpsConfig(1, 50, "10", nil), start: 1,
			steps: []step{{0, 200, 5}, {15 * sec, 200, 10}, {30 * sec, 200, 20}, {45 * sec, 200, 20}},
		},
		{
			// Same with a 5 s sync: events inside the 15 s period count.
			//   t=0   → 5 (event +4 @0)
			//   t=5   period start = 5 - 4 = 1: max(2, 5) = 5 → 5 (ScaleUpLimit)
			//   t=10  same → 5
			//   t=15  +4 @0 left the period: start 5 → max(10, 9) = 10
			//   t=20  start 10-5 = 5 → 10; t=25 → 10
			//   t=30  start 10 → 20
			name: "scale-up periodSeconds with a 5s sync", cfg: qpsConfig(1, 50, "10", nil), start: 1,
			steps: []step{{0, 200, 5}, {5 * sec, 200, 5}, {10 * sec, 200, 5}, {15 * sec, 200, 10}, {20 * sec, 200, 10}, {25 * sec, 200, 10}, {30 * sec, 200, 20}},
		},
		{
			// selectPolicy Min picks the smaller proposal each period.
			//   1 → min(2, 5)=2 → min(4, 6)=4 → min(8, 8)=8 → min(16, 12)=12
			//   → min(24, 16)=16 → min(32, 20)=20 (= need) → 20
			name: "scale-up selectPolicy Min",
			cfg: qpsConfig(1, 50, "10", &Behavior{ScaleUp: &ScalingRules{SelectPolicy: sel(SelectMin),
				Policies: []ScalingPolicy{{Type: PolicyPercent, Value: 100, PeriodSeconds: 15}, {Type: PolicyPods, Value: 4, PeriodSeconds: 15}}}}),
			start: 1,
			steps: []step{{0, 200, 2}, {15 * sec, 200, 4}, {30 * sec, 200, 8}, {45 * sec, 200, 12}, {60 * sec, 200, 16}, {75 * sec, 200, 20}, {90 * sec, 200, 20}},
		},
		{
			// Percent 10 per 60 s: the controller computes the limit in
			// float64 as ceil(start * (1 + 10/100.0)); for 50 replicas that is
			// ceil(55.00000000000001) = 56, not 55.
			//   50 → 56 → ceil(61.6)=62 → ceil(68.2)=69 → ceil(75.9)=76
			name: "scale-up Percent 10 rounds like the controller",
			cfg: qpsConfig(1, 200, "10", &Behavior{ScaleUp: &ScalingRules{
				Policies: []ScalingPolicy{{Type: PolicyPercent, Value: 10, PeriodSeconds: 60}}}}),
			start: 50,
			steps: []step{{0, 1000, 56}, {60 * sec, 1000, 62}, {120 * sec, 1000, 69}, {180 * sec, 1000, 76}},
		},
		{
			// Percent 30 scale-down from 90: int(90 * (1 - 0.3)) =
			// int(62.99999999999999) = 62 in the controller.
			name: "scale-down Percent 30 truncates like the controller",
			cfg: qpsConfig(1, 200, "10", &Behavior{ScaleDown: &ScalingRules{StabilizationWindowSeconds: i32(0),
				Policies: []ScalingPolicy{{Type: PolicyPercent, Value: 30, PeriodSeconds: 60}}}}),
			start: 90,
			steps: []step{{0, 10, 62}},
		},
		{
			// Scale-up Disabled: the limit is the current size.
			name:  "scale-up Disabled",
			cfg:   qpsConfig(1, 50, "10", &Behavior{ScaleUp: &ScalingRules{SelectPolicy: sel(SelectDisabled)}}),
			start: 3, steps: every(0, 120*sec, 15*sec, 200, 3),
		},
		{
			// Default scale-down: 300 s stabilisation, 100 % per 15 s.
			// 10 replicas at 100 qps (ratio 1), then 20 qps (need 2).
			//   t=0    → 10; recommendations {10@0 (initial), 10@0}
			//   t=15..285: raw 2, but the highest recommendation after
			//          now-300 includes 10@0 → 10
			//   t=300  cutoff 0: 10@0 is not after it → highest is 2; the
			//          100 % policy allows int(10*0) = 0, minReplicas 1 → 2
			name: "default scale-down stabilisation 300s", cfg: qpsConfig(1, 20, "10", nil), start: 10,
			steps: concat([]step{{0, 100, 10}}, every(15*sec, 285*sec, 15*sec, 20, 10), []step{{300 * sec, 20, 2}}),
		},
		{
			// A load that dips and comes back inside the window never
			// scales down: the window keeps the highest recommendation.
			name: "scale-down stabilisation ignores a dip", cfg: qpsConfig(1, 20, "10", nil), start: 8,
			steps: concat(every(0, 60*sec, 15*sec, 80, 8), every(75*sec, 150*sec, 15*sec, 10, 8), every(165*sec, 400*sec, 15*sec, 80, 8)),
		},
		{
			// The documentation's example: scale-down policies Pods 4 and
			// Percent 10 per 60 s (Max = largest change), no stabilisation,
			// 80 replicas going to 10. Percent: int(start*0.9); Pods: start-4.
			//   80: min(72, 76)=72; 72: min(int 64.8=64, 68)=64; 64: 57;
			//   57: 51; 51: 45; 45: min(40, 41)=40; 40: min(36, 36)=36;
			//   36: min(32, 32)=32; 32: min(28, 28)=28; 28: min(25, 24)=24;
			//   24: min(21, 20)=20; 20: 16; 16: min(14, 12)=12;
			//   12: min(10, 8)=8 < need 10 → 10.
			name: "documented scale-down policies (Pods 4, Percent 10 per 60s)",
			cfg: qpsConfig(1, 100, "10", &Behavior{ScaleDown: &ScalingRules{StabilizationWindowSeconds: i32(0),
				Policies: []ScalingPolicy{{Type: PolicyPods, Value: 4, PeriodSeconds: 60}, {Type: PolicyPercent, Value: 10, PeriodSeconds: 60}}}}),
			start: 80,
			steps: func() []step {
				want := []int32{72, 64, 57, 51, 45, 40, 36, 32, 28, 24, 20, 16, 12, 10, 10}
				var s []step
				for i, w := range want {
					s = append(s, step{time.Duration(i) * 60 * sec, 100, w})
				}
				return s
			}(),
		},
		{
			// Same policies with selectPolicy Min (smallest change):
			//   80: max(72, 76)=76; 76: max(68, 72)=72; 72: max(64, 68)=68;
			//   68: max(61, 64)=64
			name: "scale-down selectPolicy Min",
			cfg: qpsConfig(1, 100, "10", &Behavior{ScaleDown: &ScalingRules{StabilizationWindowSeconds: i32(0), SelectPolicy: sel(SelectMin),
				Policies: []ScalingPolicy{{Type: PolicyPods, Value: 4, PeriodSeconds: 60}, {Type: PolicyPercent, Value: 10, PeriodSeconds: 60}}}}),
			start: 80,
			steps: []step{{0, 100, 76}, {60 * sec, 100, 72}, {120 * sec, 100, 68}, {180 * sec, 100, 64}},
		},
		{
			// Rate policies count changes within the period: with a 15 s
			// sync and Pods 4 per 60 s, only 4 replicas leave per minute.
			//   t=0: 20 → 16 (event 4@0); t=15,30,45: start 20 → 16, no change;
			//   t=60: 4@0 left the period → 12
			name: "scale-down Pods per period with a faster sync",
			cfg: qpsConfig(1, 100, "10", &Behavior{ScaleDown: &ScalingRules{StabilizationWindowSeconds: i32(0),
				Policies: []ScalingPolicy{{Type: PolicyPods, Value: 4, PeriodSeconds: 60}}}}),
			start: 20,
			steps: []step{{0, 10, 16}, {15 * sec, 10, 16}, {30 * sec, 10, 16}, {45 * sec, 10, 16}, {60 * sec, 10, 12}, {75 * sec, 10, 12}},
		},
		{
			// Scale-down Disabled keeps the size whatever the load.
			name:  "scale-down Disabled",
			cfg:   qpsConfig(1, 20, "10", &Behavior{ScaleDown: &ScalingRules{SelectPolicy: sel(SelectDisabled)}}),
			start: 10, steps: every(0, 900*sec, 15*sec, 5, 10),
		},
		{
			// Scale-up stabilisation 60 s: the lowest recommendation of the
			// last 60 s bounds scale-up. 2 replicas, 50 qps (needs 5).
			//   t=0..45: the window holds 2@0 (initial) → 2
			//   t=60: 2@0 and 5@0 are not after the cutoff 0; lowest of
			//         5@15..5@60 is 5 → 5
			name: "scale-up stabilisation window",
			cfg: qpsConfig(1, 20, "10", &Behavior{ScaleUp: &ScalingRules{StabilizationWindowSeconds: i32(60)},
				ScaleDown: &ScalingRules{StabilizationWindowSeconds: i32(0)}}),
			start: 2,
			steps: concat(every(0, 45*sec, 15*sec, 50, 2), []step{{60 * sec, 50, 5}}),
		},
		{
			// A one-sync spike inside a scale-up window is ignored:
			//   t=0..45 50 qps → 5 (10 @ t=30 would need 10, but the window's
			//   lowest is 5); the spike's 10@30 leaves after t=90.
			name: "scale-up stabilisation ignores a spike",
			cfg: qpsConfig(1, 20, "10", &Behavior{ScaleUp: &ScalingRules{StabilizationWindowSeconds: i32(60)},
				ScaleDown: &ScalingRules{StabilizationWindowSeconds: i32(0)}}),
			start: 5,
			steps: []step{{0, 50, 5}, {15 * sec, 50, 5}, {30 * sec, 100, 5}, {45 * sec, 50, 5}, {60 * sec, 50, 5}},
		},
		{
			// Bounds: a need above maxReplicas stops at max (TooManyReplicas);
			// a need of zero stops at minReplicas.
			//   t=0  4 → ceil(1000/10)=100; limit max(8, 8)=8 → 8
			//   t=15 8 → max(16, 12)=16 → 12 is the max → 12
			name: "clamped to maxReplicas", cfg: qpsConfig(2, 12, "10", nil), start: 4,
			steps: []step{{0, 1000, 8}, {15 * sec, 1000, 12}, {30 * sec, 1000, 12}},
		},
		{
			name:  "clamped to minReplicas",
			cfg:   qpsConfig(3, 12, "10", &Behavior{ScaleDown: &ScalingRules{StabilizationWindowSeconds: i32(0)}}),
			start: 6, steps: []step{{0, 0, 3}, {15 * sec, 0, 3}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { runSteps(t, tc.cfg, tc.start, tc.steps) })
	}
}

func TestOutOfBoundsCurrent(t *testing.T) {
	// The HPA's first branches: above max → max, below min → min, whatever
	// the metrics say and regardless of rate policies.
	tests := []struct {
		cur, want int32
		source    Source
	}{
		{30, 12, SourceMax},
		{0, 3, SourceMin},
		{1, 3, SourceMin},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprint(tc.cur), func(t *testing.T) {
			clk := testingclock.NewFakeClock(t0)
			a, err := New(qpsConfig(3, 12, "10", nil), clk)
			if err != nil {
				t.Fatal(err)
			}
			d := a.Recommend(Input{CurrentReplicas: tc.cur, Metrics: []Observation{{Metric: "qps", Value: 50, At: t0}}})
			if d.DesiredReplicas != tc.want || d.Source != tc.source {
				t.Fatalf("got %d from %s, want %d from %s (%s)", d.DesiredReplicas, d.Source, tc.want, tc.source, d.Reason)
			}
		})
	}
}

func TestReplicaCalculator(t *testing.T) {
	tests := []struct {
		name                     string
		additive                 bool
		cur, ready               int32
		value, target, tolerance float64
		want                     int32
	}{
		// GetExternalPerPodMetricReplicas: ratio = total/(target*current).
		{"additive within tolerance", true, 10, 10, 105, 10, 0.1, 10},
		{"additive at the band's edge", true, 10, 10, 90, 10, 0.1, 10},
		{"additive scale up", true, 10, 10, 150, 10, 0.1, 15},
		{"additive scale down", true, 10, 10, 31, 10, 0.1, 4},
		{"additive ignores readiness", true, 10, 3, 150, 10, 0.1, 15},
		{"additive from zero", true, 0, 0, 25, 10, 0.1, 3},
		{"additive zero load from zero", true, 0, 0, 0, 10, 0.1, 0},
		{"additive zero tolerance", true, 10, 10, 101, 10, 0, 11},
		// getUsageRatioReplicaCount (Value target): ceil(ratio*ready).
		{"value within tolerance", false, 4, 4, 210, 200, 0.1, 4},
		{"value scale up", false, 4, 4, 300, 200, 0.1, 6},
		{"value scales the ready count", false, 4, 3, 300, 200, 0.1, 5},
		{"value scale down", false, 4, 4, 100, 200, 0.1, 2},
		{"value from zero", false, 0, 0, 300, 200, 0.1, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got int32
			if tc.additive {
				got, _ = additiveReplicas(tc.cur, tc.value, tc.target, tc.tolerance, tc.tolerance)
			} else {
				got, _ = valueReplicas(tc.cur, tc.ready, tc.value, tc.target, tc.tolerance, tc.tolerance)
			}
			if got != tc.want {
				t.Fatalf("got %d, want %d", got, tc.want)
			}
		})
	}
}

func TestStabilizeReusesOldSample(t *testing.T) {
	up := rules{window: 0}
	down := rules{window: 300 * time.Second}
	recs := []Recommendation{{5, t0}, {7, t0.Add(10 * time.Second)}, {6, t0.Add(400 * time.Second)}}
	now := t0.Add(500 * time.Second)
	got, recs := stabilize(recs, now, up, down, 6, 3)
	// Only 6@400 is inside (200, 500]; the last sample older than both
	// windows (7@10) is replaced by 3@500.
	if got != 6 {
		t.Fatalf("stabilised %d, want 6", got)
	}
	want := []Recommendation{{5, t0}, {3, now}, {6, t0.Add(400 * time.Second)}}
	for i := range want {
		if recs[i].Replicas != want[i].Replicas || !recs[i].At.Equal(want[i].At) {
			t.Fatalf("recs = %v, want %v", recs, want)
		}
	}
}

func TestLimitsCountBothDirections(t *testing.T) {
	// The controller's period start is current - added + deleted, counting
	// both kinds of events in each policy's period.
	now := t0.Add(30 * time.Second)
	upEv := []ScaleEvent{{Change: 4, At: t0.Add(20 * time.Second)}}
	downEv := []ScaleEvent{{Change: 2, At: t0.Add(25 * time.Second)}}
	r := rules{selectPol: SelectMax, policies: []ScalingPolicy{{Type: PolicyPods, Value: 4, PeriodSeconds: 15}}}
	// start = 10 - 4 + 2 = 8 → 12
	if got := scaleUpLimit(10, upEv, downEv, r, now); got != 12 {
		t.Fatalf("scale-up limit %d, want 12", got)
	}
	// start 8 → 4
	if got := scaleDownLimit(10, upEv, downEv, r, now); got != 4 {
		t.Fatalf("scale-down limit %d, want 4", got)
	}
}

func TestStoreScaleEventReusesOutdated(t *testing.T) {
	ev := []ScaleEvent{{Change: 1, At: t0}, {Change: 2, At: t0.Add(50 * time.Second)}}
	ev = storeScaleEvent(ev, 15, 3, t0.Add(60*time.Second))
	// The cutoff is 60-15 = 45 s: 1@0 is outdated and replaced, 2@50 is not.
	if len(ev) != 2 || ev[0].Change != 3 || ev[1].Change != 2 {
		t.Fatalf("events = %+v", ev)
	}
	ev = storeScaleEvent(ev, 15, 5, t0.Add(61*time.Second))
	if len(ev) != 3 {
		t.Fatalf("nothing outdated should append: %+v", ev)
	}
}
