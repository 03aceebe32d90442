package autoscale

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testingclock "k8s.io/utils/clock/testing"
)

func dur(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

func obs(name string, v float64, at time.Time) Observation {
	return Observation{Metric: name, Value: v, At: at}
}

func TestMissingAndStaleMetrics(t *testing.T) {
	twoMetrics := Config{
		MinReplicas: 1, MaxReplicas: 20,
		Metrics: []MetricSpec{
			{Type: MetricQPS, Target: qty("10")},
			{Type: MetricLatency, Target: qty("200"), Percentile: i32(99)},
		},
		Behavior:     &Behavior{ScaleDown: &ScalingRules{StabilizationWindowSeconds: i32(0)}},
		MetricMaxAge: dur(30 * time.Second),
	}
	tests := []struct {
		name   string
		cfg    Config
		cur    int32
		obs    []Observation
		want   int32
		source Source
	}{
		{"no observation holds", qpsConfig(1, 20, "10", nil), 5, nil, 5, SourceHold},
		{"stale observation holds", qpsConfig(1, 20, "10", nil), 5, []Observation{obs("qps", 0, t0.Add(-2*time.Minute))}, 5, SourceHold},
		{"NaN counts as missing", qpsConfig(1, 20, "10", nil), 5, []Observation{obs("qps", nanValue(), t0)}, 5, SourceHold},
		{"negative counts as missing", qpsConfig(1, 20, "10", nil), 5, []Observation{obs("qps", -3, t0)}, 5, SourceHold},
		{"one missing, the other says down: hold", twoMetrics, 5, []Observation{obs("qps", 10, t0)}, 5, SourceHold},
		{"one stale, the other says up: up", twoMetrics, 5, []Observation{obs("qps", 80, t0), obs("latency-p99", 10, t0.Add(-time.Minute))}, 8, SourceReactive},
		{"both fresh, the larger wins", twoMetrics, 5, []Observation{obs("qps", 60, t0), obs("latency-p99", 400, t0)}, 10, SourceReactive},
		{"both fresh, both down", twoMetrics, 5, []Observation{obs("qps", 20, t0), obs("latency-p99", 100, t0)}, 3, SourceReactive},
		{"newest of several observations counts", qpsConfig(1, 20, "10", nil), 5, []Observation{obs("qps", 80, t0), obs("qps", 20, t0.Add(-10*time.Second))}, 8, SourceReactive},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := testingclock.NewFakeClock(t0)
			a, err := New(tc.cfg, clk)
			if err != nil {
				t.Fatal(err)
			}
			d := a.Recommend(Input{CurrentReplicas: tc.cur, Metrics: tc.obs})
			if d.DesiredReplicas != tc.want || d.Source != tc.source {
				t.Fatalf("got %d from %s, want %d from %s (%s)", d.DesiredReplicas, d.Source, tc.want, tc.source, d.Reason)
			}
		})
	}
}

func nanValue() float64 {
	zero := 0.0
	return zero / zero
}

func TestHoldDoesNotRecord(t *testing.T) {
	// While metrics are missing the HPA returns before its normalisation, so
	// no recommendation is remembered: a scale-down after the gap is judged
	// on the window's real recommendations only.
	clk := testingclock.NewFakeClock(t0)
	a, _ := New(qpsConfig(1, 20, "10", nil), clk)
	a.Recommend(Input{CurrentReplicas: 5})
	if n := len(a.State().Recommendations); n != 1 { // the initial one
		t.Fatalf("%d recommendations after a hold, want 1", n)
	}
}

func panicConfig() Config {
	// Scale-up is slowed to 1 pod per minute so that only panic mode can
	// jump; scale-down has no stabilisation so that only panic holds.
	return Config{
		MinReplicas: 1, MaxReplicas: 40,
		Metrics: []MetricSpec{{Type: MetricConcurrency, Target: qty("4")}},
		Behavior: &Behavior{
			ScaleUp:   &ScalingRules{Policies: []ScalingPolicy{{Type: PolicyPods, Value: 1, PeriodSeconds: 60}}},
			ScaleDown: &ScalingRules{StabilizationWindowSeconds: i32(0)},
		},
		Panic: &PanicSpec{},
	}
}

func TestPanicMode(t *testing.T) {
	type pstep struct {
		at      time.Duration
		load    float64
		ready   int32
		want    int32
		panic   bool
		source  Source
		comment string
	}
	sec := time.Second
	tests := []struct {
		name  string
		start int32
		steps []pstep
	}{
		{
			// Knative: panic when the panic window needs >= 200 % of ready.
			//   t=0  2 ready, 40 in flight / 4 = 10 needed: 10/2 = 5 >= 2
			//        → panic, straight to 10 (the rate policy allows 3).
			//   t=7  load back to 4 (needs 1; the 40@0 left the 6 s window):
			//        in panic, never below 10.
			//   t=50 still within 60 s of the last over-threshold → 10.
			//   t=61 calm for > 60 s → panic ends; scale-down has no
			//        stabilisation, 100 %/15 s → 1.
			name: "burst, hold, release", start: 2,
			steps: []pstep{
				{0, 40, 2, 10, true, SourcePanic, "enter"},
				{7 * sec, 4, 2, 10, true, SourcePanic, "hold: never scale down in panic"},
				{50 * sec, 4, 10, 10, true, SourcePanic, "hold"},
				{61 * sec, 4, 10, 1, false, SourceReactive, "calm for a stable window"},
			},
		},
		{
			// 7 needed with 4 ready: 1.75 < 2 → no panic; the rate policy
			// (1 pod per minute) limits the reactive step to 5.
			name: "below threshold", start: 4,
			steps: []pstep{{0, 28, 4, 5, false, SourceReactive, ""}},
		},
		{
			// Exactly 200 %: 8 needed with 4 ready → panic → 8.
			name: "at threshold", start: 4,
			steps: []pstep{{0, 32, 4, 8, true, SourcePanic, ""}},
		},
		{
			// The ratchet: a bigger burst raises the panic target, a smaller
			// one within the panic does not lower it.
			//   t=0: 10 needed / 2 ready → 10; t=10 (40@0 out of the window):
			//   20 needed / 10 ready = 2 → 20; t=20: 12 needed / 20 ready,
			//   not over → stays 20.
			name: "ratchet", start: 2,
			steps: []pstep{
				{0, 40, 2, 10, true, SourcePanic, ""},
				{10 * sec, 80, 10, 20, true, SourcePanic, ""},
				{20 * sec, 48, 20, 20, true, SourcePanic, ""},
			},
		},
		{
			// Readiness: 3 instances wanted but 1 ready; 8 in flight needs 2:
			// 2/1 >= 2 → panic. The HPA alone would go down to 2; panic
			// never scales down, so 3.
			name: "compares with ready instances", start: 3,
			steps: []pstep{{0, 8, 1, 3, true, SourcePanic, "panic holds the current size"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := testingclock.NewFakeClock(t0)
			a, err := New(panicConfig(), clk)
			if err != nil {
				t.Fatal(err)
			}
			cur := tc.start
			for i, s := range tc.steps {
				clk.SetTime(t0.Add(s.at))
				d := a.Recommend(Input{CurrentReplicas: cur, ReadyReplicas: s.ready, Metrics: []Observation{obs("concurrency", s.load, clk.Now())}})
				if d.DesiredReplicas != s.want || d.Panic != s.panic || d.Source != s.source {
					t.Fatalf("step %d (%s): got %d panic=%v from %s, want %d panic=%v from %s (%s)", i, s.comment, d.DesiredReplicas, d.Panic, d.Source, s.want, s.panic, s.source, d.Reason)
				}
				cur = d.DesiredReplicas
			}
		})
	}
}

func TestPanicWindowAveragesRecentSamples(t *testing.T) {
	// Samples older than the panic window (6 s before the newest) are
	// dropped; the rest are averaged. 2 ready:
	//   samples 100@-10s (dropped), 4@-4s, 12@0 → mean 8 → 2 needed → 1x: calm.
	clk := testingclock.NewFakeClock(t0)
	a, _ := New(panicConfig(), clk)
	d := a.Recommend(Input{CurrentReplicas: 2, Metrics: []Observation{
		obs("concurrency", 100, t0.Add(-10*time.Second)), obs("concurrency", 4, t0.Add(-4*time.Second)), obs("concurrency", 12, t0),
	}})
	if d.Panic {
		t.Fatalf("panic from a sample outside the window: %s", d.Reason)
	}
	// Now 36@+1s: samples 4@-4, 12@0, 36@+1 → mean 17.33 → 5 needed ≥ 2×2.
	clk.Step(time.Second)
	d = a.Recommend(Input{CurrentReplicas: 2, Metrics: []Observation{obs("concurrency", 36, clk.Now())}})
	if !d.Panic || d.DesiredReplicas != 5 {
		t.Fatalf("got %d panic=%v, want 5 in panic (%s)", d.DesiredReplicas, d.Panic, d.Reason)
	}
}

func TestPanicModeReadsTheStableMean(t *testing.T) {
	// With panic mode on, the reactive stage reads the 60 s mean of the
	// samples: 40@-50s, 4@-20s, 4@0 → 16 in flight / 4 = 4 needed; the
	// newest sample alone (4) would say 1. The panic window (4) is calm.
	clk := testingclock.NewFakeClock(t0)
	a, _ := New(panicConfig(), clk)
	d := a.Recommend(Input{CurrentReplicas: 4, Metrics: []Observation{
		obs("concurrency", 40, t0.Add(-50*time.Second)), obs("concurrency", 4, t0.Add(-20*time.Second)), obs("concurrency", 4, t0),
	}})
	if d.DesiredReplicas != 4 || d.Panic || d.Value != 16 {
		t.Fatalf("got %d panic=%v value %v, want 4 from the mean 16 (%s)", d.DesiredReplicas, d.Panic, d.Value, d.Reason)
	}
}

func TestPanicNeedsFreshData(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	a, _ := New(panicConfig(), clk)
	d := a.Recommend(Input{CurrentReplicas: 2, Metrics: []Observation{obs("concurrency", 400, t0.Add(-5*time.Minute))}})
	if d.Panic || d.DesiredReplicas != 2 {
		t.Fatalf("stale burst caused %d panic=%v (%s)", d.DesiredReplicas, d.Panic, d.Reason)
	}
}

func scheduleConfig(zone string) Config {
	return Config{
		MinReplicas: 1, MaxReplicas: 20,
		Metrics:  []MetricSpec{{Type: MetricQPS, Target: qty("10")}},
		Behavior: &Behavior{ScaleDown: &ScalingRules{StabilizationWindowSeconds: i32(0)}},
		Schedules: []ScheduleSpec{{
			Name: "office-hours", Start: "30 8 * * 1-5", End: "0 18 * * 1-5", TimeZone: zone, MinReplicas: 6,
		}},
	}
}

func TestScheduleWindows(t *testing.T) {
	ny, _ := time.LoadLocation("America/New_York")
	berlin, _ := time.LoadLocation("Europe/Berlin")
	tests := []struct {
		name       string
		zone       string
		start, end string
		at         time.Time
		want       bool
	}{
		// Office hours Mon-Fri 08:30-18:00 New York.
		{"before opening", "America/New_York", "30 8 * * 1-5", "0 18 * * 1-5", time.Date(2026, 3, 2, 8, 29, 0, 0, ny), false},
		{"at opening", "America/New_York", "30 8 * * 1-5", "0 18 * * 1-5", time.Date(2026, 3, 2, 8, 30, 0, 0, ny), true},
		{"midday", "America/New_York", "30 8 * * 1-5", "0 18 * * 1-5", time.Date(2026, 3, 4, 12, 0, 0, 0, ny), true},
		{"at closing", "America/New_York", "30 8 * * 1-5", "0 18 * * 1-5", time.Date(2026, 3, 6, 18, 0, 0, 0, ny), false},
		{"saturday", "America/New_York", "30 8 * * 1-5", "0 18 * * 1-5", time.Date(2026, 3, 7, 12, 0, 0, 0, ny), false},
		// The same instant is 17:00 in London: that window is open.
		{"zone matters", "Europe/London", "30 8 * * 1-5", "0 18 * * 1-5", time.Date(2026, 3, 2, 12, 0, 0, 0, ny), true},
		// A window across midnight.
		{"overnight open", "UTC", "0 22 * * *", "0 6 * * *", time.Date(2026, 3, 2, 2, 0, 0, 0, time.UTC), true},
		{"overnight closed", "UTC", "0 22 * * *", "0 6 * * *", time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC), false},
		// US DST began 2026-03-08 02:00 → 03:00. Office hours keep their
		// wall-clock times: 08:30 EDT is 12:30 UTC (13:30 UTC before).
		{"after spring forward", "America/New_York", "30 8 * * 1-5", "0 18 * * 1-5", time.Date(2026, 3, 9, 12, 31, 0, 0, time.UTC), true},
		{"before spring forward", "America/New_York", "30 8 * * 1-5", "0 18 * * 1-5", time.Date(2026, 3, 6, 12, 31, 0, 0, time.UTC), false},
		// Berlin skips 02:00-03:00 on 2026-03-29. A window ending at the
		// nonexistent 02:30 closes when the clock jumps (robfig's Next alone
		// would keep it open until the next day's 02:30).
		{"end inside skipped hour, before", "Europe/Berlin", "30 1 * * *", "30 2 * * *", time.Date(2026, 3, 29, 1, 45, 0, 0, berlin), true},
		{"end inside skipped hour, after", "Europe/Berlin", "30 1 * * *", "30 2 * * *", time.Date(2026, 3, 29, 3, 5, 0, 0, berlin), false},
		// A window starting in the skipped hour opens at the jump.
		{"start inside skipped hour", "Europe/Berlin", "30 2 * * *", "0 5 * * *", time.Date(2026, 3, 29, 3, 1, 0, 0, berlin), true},
		// Berlin repeats 02:00-03:00 on 2026-10-25 (CEST then CET): the
		// window follows the wall clock in both passes.
		{"repeated hour, first pass", "Europe/Berlin", "0 2 * * *", "30 2 * * *", time.Date(2026, 10, 25, 0, 15, 0, 0, time.UTC), true},
		{"repeated hour, first pass after end", "Europe/Berlin", "0 2 * * *", "30 2 * * *", time.Date(2026, 10, 25, 0, 45, 0, 0, time.UTC), false},
		{"repeated hour, second pass", "Europe/Berlin", "0 2 * * *", "30 2 * * *", time.Date(2026, 10, 25, 1, 15, 0, 0, time.UTC), true},
		{"descriptor", "UTC", "@daily", "0 1 * * *", time.Date(2026, 3, 2, 0, 30, 0, 0, time.UTC), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := resolveSchedule("s", ScheduleSpec{Start: tc.start, End: tc.end, TimeZone: tc.zone, MinReplicas: 3})
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := s.active(tc.at); got != tc.want {
				t.Fatalf("active at %s = %v, want %v", tc.at, got, tc.want)
			}
		})
	}
}

func TestScheduleRaisesMinimum(t *testing.T) {
	ny, _ := time.LoadLocation("America/New_York")
	open := time.Date(2026, 3, 2, 8, 30, 0, 0, ny)
	clk := testingclock.NewFakeClock(open.Add(-time.Minute))
	a, err := New(scheduleConfig("America/New_York"), clk)
	if err != nil {
		t.Fatal(err)
	}
	cur := int32(1)
	in := func() Input {
		return Input{CurrentReplicas: cur, Metrics: []Observation{obs("qps", 5, clk.Now())}}
	}
	d := a.Recommend(in())
	if d.DesiredReplicas != 1 || !d.NextScheduleChange.Equal(open) {
		t.Fatalf("before the window: %d, next change %s (%s)", d.DesiredReplicas, d.NextScheduleChange, d.Reason)
	}
	clk.SetTime(open)
	d = a.Recommend(in())
	if d.DesiredReplicas != 6 || d.Source != SourceSchedule || d.Metric != "office-hours" {
		t.Fatalf("at opening: %d from %s/%s (%s)", d.DesiredReplicas, d.Source, d.Metric, d.Reason)
	}
	cur = 6
	// A busy moment inside the window goes above the scheduled minimum.
	clk.Step(time.Hour)
	d = a.Recommend(Input{CurrentReplicas: cur, Metrics: []Observation{obs("qps", 90, clk.Now())}})
	if d.DesiredReplicas != 9 || d.Source != SourceReactive {
		t.Fatalf("busy: %d from %s (%s)", d.DesiredReplicas, d.Source, d.Reason)
	}
	cur = 9
	// Quiet again: back to the scheduled minimum, not below.
	clk.Step(time.Minute)
	d = a.Recommend(in())
	if d.DesiredReplicas != 6 || d.Source != SourceSchedule {
		t.Fatalf("quiet in the window: %d from %s (%s)", d.DesiredReplicas, d.Source, d.Reason)
	}
	cur = 6
	// After closing the pool goes back to the metric's need.
	clk.SetTime(time.Date(2026, 3, 2, 18, 0, 0, 0, ny))
	d = a.Recommend(in())
	if d.DesiredReplicas != 1 {
		t.Fatalf("after closing: %d (%s)", d.DesiredReplicas, d.Reason)
	}
}

func predictiveConfig(lead time.Duration) Config {
	return Config{
		MinReplicas: 1, MaxReplicas: 50,
		Metrics:  []MetricSpec{{Type: MetricQPS, Target: qty("10")}},
		Behavior: &Behavior{ScaleDown: &ScalingRules{StabilizationWindowSeconds: i32(0)}},
		Predictive: &PredictiveSpec{
			Metric: "qps", LeadTime: metav1.Duration{Duration: lead}, Season: SeasonDaily,
		},
	}
}

func TestPredictiveLeadTime(t *testing.T) {
	// Day 1: 100 qps from 09:00 to 09:05, 10 otherwise (fed every minute).
	// Day 2 at 08:49 (lead 10 min → looks until 08:59): nothing → 1.
	// At 08:50 the horizon reaches 09:00: the slot's peak 100 needs 10;
	// the default scale-up policy takes 1 → 5 → 10 in two syncs.
	clk := testingclock.NewFakeClock(time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC))
	a, err := New(predictiveConfig(10*time.Minute), clk)
	if err != nil {
		t.Fatal(err)
	}
	cur := int32(1)
	for m := 0; m < 24*60; m++ {
		now := clk.Now()
		load := 10.0
		if now.Hour() == 9 && now.Minute() < 5 {
			load = 100
		}
		d := a.Recommend(Input{CurrentReplicas: cur, Metrics: []Observation{obs("qps", load, now)}})
		cur = d.DesiredReplicas
		clk.Step(time.Minute)
	}
	if cur != 1 {
		t.Fatalf("end of day 1 at %d", cur)
	}
	at := func(h, m int) Decision {
		clk.SetTime(time.Date(2026, 3, 3, h, m, 0, 0, time.UTC))
		d := a.Recommend(Input{CurrentReplicas: cur, Metrics: []Observation{obs("qps", 10, clk.Now())}})
		cur = d.DesiredReplicas
		return d
	}
	if d := at(8, 49); d.DesiredReplicas != 1 {
		t.Fatalf("08:49: %d (%s)", d.DesiredReplicas, d.Reason)
	}
	if d := at(8, 50); d.DesiredReplicas != 5 || d.Source != SourcePredictive {
		t.Fatalf("08:50: %d from %s (%s)", d.DesiredReplicas, d.Source, d.Reason)
	}
	if d := at(8, 51); d.DesiredReplicas != 10 || d.Source != SourcePredictive {
		t.Fatalf("08:51: %d from %s (%s)", d.DesiredReplicas, d.Source, d.Reason)
	}
	// Once 09:05 has passed the profile no longer holds the pool up.
	if d := at(9, 6); d.DesiredReplicas != 1 {
		t.Fatalf("09:06: %d (%s)", d.DesiredReplicas, d.Reason)
	}
}

func TestPredictiveAbstainsWithoutHistory(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	a, _ := New(predictiveConfig(5*time.Minute), clk)
	d := a.Recommend(Input{CurrentReplicas: 3, Metrics: []Observation{obs("qps", 30, t0)}})
	for _, p := range d.Proposals {
		if p.Source == SourcePredictive && !p.Abstained {
			t.Fatalf("predictive answered without a past season: %+v", p)
		}
	}
}

func TestForecastSlot(t *testing.T) {
	peaks := []SeasonPeak{{1, 10}, {2, 30}, {3, 20}, {4, 99}}
	tests := []struct {
		name       string
		agg        Aggregation
		history    int
		minSeasons int
		season     int64
		want       float64
		ok         bool
	}{
		{"max of past seasons", AggregateMax, 4, 1, 4, 30, true},
		{"current season excluded", AggregateMax, 4, 1, 4, 30, true},
		{"history bounds", AggregateMax, 1, 1, 4, 20, true},
		{"future season sees all", AggregateMax, 4, 1, 5, 99, true},
		// EWMA weight 0.5 over 10, 30, 20: 10 → 20 → 20.
		{"ewma", AggregateEWMA, 4, 1, 4, 20, true},
		{"not enough seasons", AggregateMax, 4, 4, 4, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := &predictive{agg: tc.agg, history: tc.history, minSeasons: tc.minSeasons, ewmaWeight: 0.5}
			got, ok := p.forecastSlot(peaks, tc.season)
			if ok != tc.ok || got != tc.want {
				t.Fatalf("got %v/%v, want %v/%v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestSlotOf(t *testing.T) {
	tokyo, _ := time.LoadLocation("Asia/Tokyo")
	tests := []struct {
		name     string
		season   Season
		loc      *time.Location
		at       time.Time
		slot     int
		seasonID int64
	}{
		{"weekly monday midnight", SeasonWeekly, time.UTC, time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC), 0, 2931},
		{"weekly sunday last slot", SeasonWeekly, time.UTC, time.Date(2026, 3, 8, 23, 59, 0, 0, time.UTC), 7*288 - 1, 2931},
		{"weekly next monday", SeasonWeekly, time.UTC, time.Date(2026, 3, 9, 0, 0, 0, 0, time.UTC), 0, 2932},
		{"daily", SeasonDaily, time.UTC, time.Date(2026, 3, 2, 9, 7, 0, 0, time.UTC), 109, 20514},
		// 2026-03-01 15:00 UTC is Monday 00:00 in Tokyo.
		{"zone", SeasonWeekly, tokyo, time.Date(2026, 3, 1, 15, 0, 0, 0, time.UTC), 0, 2931},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := &predictive{season: tc.season, slot: 5 * time.Minute, slotsPerDay: 288, loc: tc.loc}
			slot, season := p.slotOf(tc.at)
			if slot != tc.slot || season != tc.seasonID {
				t.Fatalf("got slot %d season %d, want %d %d", slot, season, tc.slot, tc.seasonID)
			}
		})
	}
}

func TestStateRoundTrip(t *testing.T) {
	// Two autoscalers see the same series; one is restarted from its JSON
	// state halfway. Their decisions must stay identical.
	cfg := predictiveConfig(10 * time.Minute)
	cfg.Panic = &PanicSpec{}
	cfg.Behavior = nil // default 300 s scale-down stabilisation: history matters
	start := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	clkA := testingclock.NewFakeClock(start)
	clkB := testingclock.NewFakeClock(start)
	a, _ := New(cfg, clkA)
	b, _ := New(cfg, clkB)
	load := func(m int) float64 {
		switch {
		case m%1440 >= 540 && m%1440 < 560:
			return 120
		case m%97 == 0:
			return 300
		}
		return 15
	}
	curA, curB := int32(1), int32(1)
	for m := 0; m < 3*1440; m += 1 {
		if m == 1440+600 {
			raw, err := json.Marshal(b.State())
			if err != nil {
				t.Fatal(err)
			}
			var st State
			if err := json.Unmarshal(raw, &st); err != nil {
				t.Fatal(err)
			}
			b, _ = New(cfg, clkB)
			if err := b.Restore(st); err != nil {
				t.Fatal(err)
			}
		}
		now := start.Add(time.Duration(m) * time.Minute)
		clkA.SetTime(now)
		clkB.SetTime(now)
		da := a.Recommend(Input{CurrentReplicas: curA, Metrics: []Observation{obs("qps", load(m), now)}})
		db := b.Recommend(Input{CurrentReplicas: curB, Metrics: []Observation{obs("qps", load(m), now)}})
		if da.DesiredReplicas != db.DesiredReplicas || da.Source != db.Source || da.Panic != db.Panic {
			t.Fatalf("minute %d: %d/%s/%v vs restored %d/%s/%v", m, da.DesiredReplicas, da.Source, da.Panic, db.DesiredReplicas, db.Source, db.Panic)
		}
		curA, curB = da.DesiredReplicas, db.DesiredReplicas
	}
}

func TestRestore(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	a, _ := New(predictiveConfig(time.Minute), clk)
	if err := a.Restore(State{Version: 99}); !errors.Is(err, ErrStateVersion) {
		t.Fatalf("Restore(v99) = %v, want ErrStateVersion", err)
	}
	// A profile learned with another slot length is dropped.
	st := State{Version: StateVersion, Profile: &Profile{Season: SeasonDaily, SlotSeconds: 60, Slots: map[int][]SeasonPeak{3: {{1, 5}}}},
		Samples: map[string][]Sample{"gone": {{1, t0}}}}
	if err := a.Restore(st); err != nil {
		t.Fatal(err)
	}
	got := a.State()
	if got.Profile == nil || got.Profile.SlotSeconds != 300 || len(got.Profile.Slots) != 0 {
		t.Fatalf("profile of another layout kept: %+v", got.Profile)
	}
	if _, ok := got.Samples["gone"]; ok {
		t.Fatal("samples of an unknown metric kept")
	}
	// The returned state is a copy.
	got.Recommendations = append(got.Recommendations, Recommendation{Replicas: 9})
	if len(a.State().Recommendations) != 0 {
		t.Fatal("State() shares memory with the autoscaler")
	}
}

func TestDecisionExplains(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	a, _ := New(qpsConfig(1, 20, "10", nil), clk)
	d := a.Recommend(Input{CurrentReplicas: 2, Metrics: []Observation{obs("qps", 150, t0)}})
	if d.Source != SourceReactive || d.Metric != "qps" || d.Value != 150 || d.Limited != limitScaleUp {
		t.Fatalf("decision %+v", d)
	}
	for _, want := range []string{"qps above target", "ScaleUpLimit"} {
		if !strings.Contains(d.Reason, want) {
			t.Fatalf("reason %q lacks %q", d.Reason, want)
		}
	}
	if _, err := json.Marshal(d); err != nil {
		t.Fatalf("decision does not marshal: %v", err)
	}
}
