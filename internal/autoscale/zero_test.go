package autoscale

import (
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	testingclock "k8s.io/utils/clock/testing"
)

func zeroConfig(z *ScaleToZeroSpec) Config {
	return Config{
		MinReplicas: 0, MaxReplicas: 10,
		Metrics:     []MetricSpec{{Type: MetricConcurrency, Target: qty("4")}},
		Behavior:    &Behavior{ScaleDown: &ScalingRules{StabilizationWindowSeconds: i32(0)}},
		ScaleToZero: z,
	}
}

// step runs the autoscaler every 5 s for d with a constant concurrency,
// applying each decision, and returns the last decision and the size.
func idleStep(a *Autoscaler, clk *testingclock.FakeClock, cur int32, load float64, d time.Duration, cold time.Duration) (Decision, int32) {
	var dec Decision
	for end := clk.Now().Add(d); !clk.Now().After(end); clk.Step(5 * time.Second) {
		dec = a.Recommend(Input{CurrentReplicas: cur, ColdStart: cold, Metrics: []Observation{obs("concurrency", load, clk.Now())}})
		cur = dec.DesiredReplicas
	}
	return dec, cur
}

func TestScaleToZero(t *testing.T) {
	tests := []struct {
		name    string
		z       *ScaleToZeroSpec
		cur     int32
		load    float64
		for_    time.Duration
		want    int32
		source  Source
		reasonH string
	}{
		{"idle within the window keeps one", nil, 2, 0, 4 * time.Minute, 1, SourceIdle, "of the 5m0s idle window"},
		{"idle past the window goes to zero", nil, 2, 0, 300 * time.Second, 0, SourceIdle, "(idle window 5m0s) → 0"},
		{"a shorter window goes sooner", &ScaleToZeroSpec{IdleWindow: dur(time.Minute)}, 1, 0, 60 * time.Second, 0, SourceIdle, "idle window 1m0s"},
		{"at zero after the window", nil, 2, 0, 6 * time.Minute, 0, SourceIdle, "at zero, no request since"},
		{"load keeps the pool up", nil, 1, 3, 10 * time.Minute, 1, SourceReactive, ""},
		{"load at the threshold is idle", &ScaleToZeroSpec{IdleWindow: dur(time.Minute), ActivationThreshold: ptrQty("1")}, 1, 1, 2 * time.Minute, 0, SourceIdle, ""},
		{"at zero without load stays", nil, 0, 0, time.Minute, 0, SourceIdle, "at zero"},
		{"at zero a request wakes the pool", nil, 0, 1, 0, 1, SourceActivation, "wakes the pool from zero"},
		{"at zero many requests wake enough", nil, 0, 9, 0, 3, SourceActivation, "→ 3"},
		{"at zero below the threshold stays", &ScaleToZeroSpec{ActivationThreshold: ptrQty("2")}, 0, 2, 0, 0, SourceIdle, ""},
		{"at zero above the threshold wakes", &ScaleToZeroSpec{ActivationThreshold: ptrQty("2")}, 0, 3, 0, 1, SourceActivation, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := testingclock.NewFakeClock(t0)
			a, err := New(zeroConfig(tc.z), clk)
			if err != nil {
				t.Fatal(err)
			}
			d, cur := idleStep(a, clk, tc.cur, tc.load, tc.for_, 0)
			if cur != tc.want || d.Source != tc.source || !strings.Contains(d.Reason, tc.reasonH) {
				t.Fatalf("got %d from %s (%q), want %d from %s containing %q", cur, d.Source, d.Reason, tc.want, tc.source, tc.reasonH)
			}
		})
	}
}

func ptrQty(s string) *resource.Quantity { q := resource.MustParse(s); return &q }

func TestScaleToZeroWeighsTheColdStart(t *testing.T) {
	// Idle gaps of 7 min after a 5 min window leave 2 min of expected idle:
	// less than a 5 min cold start, so the last instance stays; with a
	// 1 min cold start it goes.
	for _, tc := range []struct {
		cold time.Duration
		want int32
	}{{5 * time.Minute, 1}, {time.Minute, 0}, {0, 0}} {
		clk := testingclock.NewFakeClock(t0)
		a, err := New(zeroConfig(nil), clk)
		if err != nil {
			t.Fatal(err)
		}
		cur := int32(1)
		for range 4 {
			_, cur = idleStep(a, clk, cur, 2, 30*time.Second, tc.cold)
			_, cur = idleStep(a, clk, cur, 0, 7*time.Minute, tc.cold)
		}
		if n := len(a.State().IdleGaps); n < 3 {
			t.Fatalf("%d idle gaps remembered, want >= 3", n)
		}
		_, cur = idleStep(a, clk, cur, 2, 30*time.Second, tc.cold)
		d, cur := idleStep(a, clk, cur, 0, 6*time.Minute, tc.cold)
		if cur != tc.want {
			t.Fatalf("cold start %s: %d instances (%s), want %d", tc.cold, cur, d.Reason, tc.want)
		}
		if tc.want == 1 && !strings.Contains(d.Reason, "cold start") {
			t.Fatalf("reason %q does not name the cold start", d.Reason)
		}
	}
}

func TestScaleToZeroNeverOnMissingMetrics(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	a, _ := New(zeroConfig(nil), clk)
	var d Decision
	for range 100 {
		d = a.Recommend(Input{CurrentReplicas: 1})
		clk.Step(5 * time.Second)
	}
	if d.DesiredReplicas != 1 || d.Source != SourceHold {
		t.Fatalf("got %d from %s, want a hold at 1", d.DesiredReplicas, d.Source)
	}
}

func TestScaleToZeroScheduleFloor(t *testing.T) {
	cfg := zeroConfig(nil)
	cfg.Schedules = []ScheduleSpec{{Name: "office", Start: "0 9 * * 1-5", End: "0 18 * * 1-5", MinReplicas: 1}}
	clk := testingclock.NewFakeClock(t0) // Monday 12:00 UTC: in the window
	a, err := New(cfg, clk)
	if err != nil {
		t.Fatal(err)
	}
	if _, cur := idleStep(a, clk, 1, 0, 10*time.Minute, 0); cur != 1 {
		t.Fatalf("%d instances in office hours, want the schedule's 1", cur)
	}
	clk.SetTime(t0.Add(7 * time.Hour)) // 19:00, window closed
	if d, cur := idleStep(a, clk, 1, 0, 6*time.Minute, 0); cur != 0 {
		t.Fatalf("%d instances out of hours (%s), want 0", cur, d.Reason)
	}
}

func TestScaleToZeroKeepsOneWithoutAdditiveMetric(t *testing.T) {
	cfg := Config{MinReplicas: 0, MaxReplicas: 5, Metrics: []MetricSpec{{Type: MetricLatency, Target: qty("200")}},
		Behavior: &Behavior{ScaleDown: &ScalingRules{StabilizationWindowSeconds: i32(0)}}}
	clk := testingclock.NewFakeClock(t0)
	a, err := New(cfg, clk)
	if err != nil {
		t.Fatal(err)
	}
	d := a.Recommend(Input{CurrentReplicas: 2, Metrics: []Observation{obs("latency-p95", 0, t0)}})
	if d.DesiredReplicas != 1 || !strings.Contains(d.Reason, "could wake") {
		t.Fatalf("got %d (%s), want 1: nothing could wake the pool", d.DesiredReplicas, d.Reason)
	}
}

func TestScaleToZeroValidation(t *testing.T) {
	tests := []struct {
		name  string
		cfg   Config
		field string
	}{
		{"window too short", zeroConfig(&ScaleToZeroSpec{IdleWindow: dur(time.Second)}), "scaleToZero.idleWindow"},
		{"negative threshold", zeroConfig(&ScaleToZeroSpec{ActivationThreshold: ptrQty("-1")}), "scaleToZero.activationThreshold"},
		{"minimum above zero", func() Config { c := zeroConfig(&ScaleToZeroSpec{}); c.MinReplicas = 1; return c }(), "scaleToZero"},
		{"no additive metric", func() Config {
			c := zeroConfig(&ScaleToZeroSpec{})
			c.Metrics = []MetricSpec{{Type: MetricLatency, Target: qty("200")}}
			return c
		}(), "scaleToZero"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate(tc.cfg)
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field {
				t.Fatalf("got %v, want a field error on %s", err, tc.field)
			}
		})
	}
}

func TestScaleToZeroStateRoundTrips(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	a, _ := New(zeroConfig(nil), clk)
	idleStep(a, clk, 1, 2, 10*time.Second, 0)
	idleStep(a, clk, 1, 0, 6*time.Minute, 0)
	idleStep(a, clk, 0, 2, 0, 0)
	st := a.State()
	if st.ActiveAt.IsZero() || len(st.IdleGaps) != 1 {
		t.Fatalf("state %+v: want the last activity and one idle gap", st)
	}
	b, _ := New(zeroConfig(nil), clk)
	if err := b.Restore(st); err != nil {
		t.Fatal(err)
	}
	if got := b.State(); !got.ActiveAt.Equal(st.ActiveAt) || len(got.IdleGaps) != 1 {
		t.Fatalf("restored %+v, want %+v", got, st)
	}
}

func TestScaleToZeroWokenByTheGateway(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	a, _ := New(zeroConfig(nil), clk)
	// No observation at all (a standalone gateway's counts not yet read):
	// the wake-up alone activates the pool.
	d := a.Recommend(Input{CurrentReplicas: 0, Woken: true})
	if d.DesiredReplicas != 1 || d.Source != SourceActivation || !strings.Contains(d.Reason, "waits at the gateway") {
		t.Fatalf("got %d from %s (%s), want an activation to 1", d.DesiredReplicas, d.Source, d.Reason)
	}
	// The wake-up starts the idle window again: the instance stays while
	// it boots.
	clk.Step(4 * time.Minute)
	d = a.Recommend(Input{CurrentReplicas: 1, Metrics: []Observation{obs("concurrency", 0, clk.Now())}})
	if d.DesiredReplicas != 1 {
		t.Fatalf("got %d (%s) 4 min after a wake-up, want 1", d.DesiredReplicas, d.Reason)
	}
}

func TestScaleToZeroSeesShortRequestsThroughQPS(t *testing.T) {
	// Concurrency sampled at 0 between short requests, qps above 0: the
	// pool is not idle.
	clk := testingclock.NewFakeClock(t0)
	a, _ := New(zeroConfig(&ScaleToZeroSpec{IdleWindow: dur(time.Minute)}), clk)
	var d Decision
	for range 30 {
		d = a.Recommend(Input{CurrentReplicas: 1, Metrics: []Observation{obs("concurrency", 0, clk.Now()), obs("qps", 0.2, clk.Now())}})
		clk.Step(5 * time.Second)
	}
	if d.DesiredReplicas != 1 || !strings.Contains(d.Reason, "qps 0.2 > 0") {
		t.Fatalf("got %d from %s (%s), want the pool kept by its qps", d.DesiredReplicas, d.Source, d.Reason)
	}
}
