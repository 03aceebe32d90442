package autoscale

import (
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

func TestWeightedQuantile(t *testing.T) {
	ninetyNineOnesAndAHundred := append(slices.Repeat([]float64{1}, 99), 100)
	tests := []struct {
		name  string
		loads []float64
		q     float64
		want  float64
	}{
		{"no buckets", nil, 0.99, 0},
		{"no load", []float64{0, 0, 0}, 0.99, 0},
		{"one bucket", []float64{5}, 0.99, 5},
		{"q 1 is the maximum", []float64{3, 9, 1}, 1, 9},
		// Sorted 1 1 1 1 6, total 10, cumulative 1 2 3 4 10.
		{"half the load is in the top bucket", []float64{1, 6, 1, 1, 1}, 0.5, 6},
		{"40 % fits the small buckets", []float64{1, 6, 1, 1, 1}, 0.4, 1},
		// One bucket in a hundred carries 100 of 199: by time it is the top
		// 1 %, by load half of everything, so q 0.99 must cover it.
		{"weighted by load, not by time", ninetyNineOnesAndAHundred, 0.99, 100},
		{"below the small buckets' share", ninetyNineOnesAndAHundred, 0.49, 1},
		{"zeros carry no weight", []float64{0, 0, 0, 0, 2, 2}, 0.5, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := slices.Clone(tc.loads)
			if got := weightedQuantile(tc.loads, tc.q); got != tc.want {
				t.Fatalf("weightedQuantile(%v, %g) = %g, want %g", tc.loads, tc.q, got, tc.want)
			}
			if !slices.Equal(in, tc.loads) {
				t.Fatalf("input changed: %v", tc.loads)
			}
		})
	}
}

func TestBurstFeed(t *testing.T) {
	b := &burst{metric: metric{name: "qps", additive: true}, target: 1, quantile: 1, window: 10 * time.Minute, bucket: time.Minute}
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	o := func(s int, v float64) Observation { return obs("qps", v, at(s)) }
	tests := []struct {
		name      string
		prior     BurstState
		obs       []Observation
		now       int
		want      []BurstBucket
		openCount int
		changed   bool
	}{
		{
			name: "observations fill the open bucket", obs: []Observation{o(0, 2), o(10, 4)}, now: 10,
			openCount: 2,
		},
		{
			name: "a bucket closes when the next one starts", obs: []Observation{o(0, 2), o(30, 4), o(60, 9)}, now: 60,
			want: []BurstBucket{{at(0), 3}}, openCount: 1, changed: true,
		},
		{
			name: "a bucket closes when its time is up", obs: []Observation{o(0, 2), o(59, 4)}, now: 60,
			want: []BurstBucket{{at(0), 3}}, changed: true,
		},
		{
			name: "out of order observations are sorted", obs: []Observation{o(61, 9), o(0, 2), o(30, 4)}, now: 61,
			want: []BurstBucket{{at(0), 3}}, openCount: 1, changed: true,
		},
		{
			name:  "old, duplicate, future, foreign and invalid observations are ignored",
			prior: BurstState{BucketSeconds: 60, OpenStart: at(0), OpenSum: 2, OpenCount: 1, FedUntil: at(5)},
			obs: []Observation{
				o(4, 100), o(5, 100), o(30, 100), obs("concurrency", 100, at(10)), o(10, math.NaN()), o(11, -1), o(12, 4),
			},
			now: 20, openCount: 2,
		},
		{
			name:  "buckets that have left the window are dropped",
			prior: BurstState{BucketSeconds: 60, Buckets: []BurstBucket{{at(0), 5}, {at(60), 6}}, FedUntil: at(119)},
			obs:   []Observation{o(660, 1)}, now: 660, // the window starts at 60: [0, 60) has left, [60, 120) has not
			want: []BurstBucket{{at(60), 6}}, openCount: 1, changed: true,
		},
		{
			name:  "a gap leaves no bucket",
			prior: BurstState{BucketSeconds: 60, OpenStart: at(0), OpenSum: 4, OpenCount: 1, FedUntil: at(0)},
			obs:   []Observation{o(300, 1)}, now: 300,
			want: []BurstBucket{{at(0), 4}}, openCount: 1, changed: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := tc.prior
			st.BucketSeconds = 60
			changed := b.feed(&st, tc.obs, at(tc.now))
			if changed != tc.changed || st.OpenCount != tc.openCount || !slices.EqualFunc(st.Buckets, tc.want, func(x, y BurstBucket) bool {
				return x.Start.Equal(y.Start) && x.Load == y.Load
			}) {
				t.Fatalf("changed %v, buckets %v, open %d; want %v, %v, %d", changed, st.Buckets, st.OpenCount, tc.changed, tc.want, tc.openCount)
			}
		})
	}
}

// burstConfig: reactive qps at 10 per instance with no stabilisation and
// no rate limit; burst on qps at target per instance over a 10 min window.
func burstConfig(target, quantile string) Config {
	cfg := qpsConfig(1, 40, "10", &Behavior{
		ScaleUp:   &ScalingRules{Policies: []ScalingPolicy{{Type: PolicyPods, Value: 100, PeriodSeconds: 15}}},
		ScaleDown: &ScalingRules{StabilizationWindowSeconds: i32(0)},
	})
	tq, qq := qty(target), qty(quantile)
	cfg.Burst = &BurstSpec{Metric: "qps", Target: &tq, Quantile: &qq, Window: dur(10 * time.Minute)}
	return cfg
}

// burstCheck is one evaluation at offset At (seconds from t0); every
// second since the previous one is observed with the scenario's load.
type burstCheck struct {
	at     int
	want   int32
	source Source
}

func TestBurstRecommender(t *testing.T) {
	// Background 10 qps; a one-minute burst of 200 qps in [60 s, 120 s).
	oneBurst := func(s int) float64 {
		if s >= 60 && s < 120 {
			return 200
		}
		return 10
	}
	tests := []struct {
		name   string
		cfg    Config
		load   func(int) float64
		checks []burstCheck
	}{
		{
			name: "a burst raises the floor once its bucket closes and for the window",
			cfg:  burstConfig("20", "1"), load: oneBurst,
			checks: []burstCheck{
				{0, 1, SourceReactive}, // no completed bucket: burst abstains
				{60, 20, SourceReactive},
				// t=60 sees the burst's first second (reactive: 200/10);
				// t=75 is in the burst: reactive wins at 20.
				{75, 20, SourceReactive},
				// t=120: the burst bucket closed with 200 → 200/20 = 10,
				// reactive now says 1.
				{120, 10, SourceBurst},
				{300, 10, SourceBurst},
				{719, 10, SourceBurst},
				// t=720: the bucket [60, 120) ended at the window's start.
				{720, 1, SourceReactive},
			},
		},
		{
			// Over 10 buckets, the burst bucket carries 200 of 290: any
			// quantile above 90/290 covers it.
			name: "the load-weighted quantile covers a burst that is 1 bucket in 10",
			cfg:  burstConfig("20", "0.5"), load: oneBurst,
			checks: []burstCheck{{120, 10, SourceBurst}, {600, 10, SourceBurst}},
		},
		{
			// 8 buckets of 10 and one of 15 (total 95): 0.8 of the load fits
			// 10 (cumulative 80 >= 76), so q 0.8 provisions 10/5 = 2 and q
			// 0.9 provisions 15/5 = 3 (85.5 > 80).
			name:   "a small burst above the quantile is not provisioned",
			cfg:    burstConfig("5", "0.8"),
			load:   func(s int) float64 { return map[bool]float64{true: 15, false: 10}[s >= 60 && s < 120] },
			checks: []burstCheck{{540, 2, SourceBurst}},
		},
		{
			name:   "q 0.9 provisions the small burst",
			cfg:    burstConfig("5", "0.9"),
			load:   func(s int) float64 { return map[bool]float64{true: 15, false: 10}[s >= 60 && s < 120] },
			checks: []burstCheck{{540, 3, SourceBurst}},
		},
		{
			name: "default target is the metric's",
			cfg: func() Config {
				c := burstConfig("20", "1")
				c.Burst.Target = nil
				return c
			}(), load: oneBurst,
			checks: []burstCheck{{120, 20, SourceBurst}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := testingclock.NewFakeClock(t0)
			a, err := New(tc.cfg, clk)
			if err != nil {
				t.Fatal(err)
			}
			cur, next := int32(1), 0
			for _, c := range tc.checks {
				var in []Observation
				for s := next; s <= c.at; s++ {
					in = append(in, obs("qps", tc.load(s), t0.Add(time.Duration(s)*time.Second)))
				}
				next = c.at + 1
				clk.SetTime(t0.Add(time.Duration(c.at) * time.Second))
				d := a.Recommend(Input{CurrentReplicas: cur, Metrics: in})
				if d.DesiredReplicas != c.want || d.Source != c.source {
					t.Fatalf("t=%ds: %d from %s, want %d from %s (%s)", c.at, d.DesiredReplicas, d.Source, c.want, c.source, d.Reason)
				}
				i := slices.IndexFunc(d.Proposals, func(p Proposal) bool { return p.Source == SourceBurst })
				if i < 0 || d.Proposals[i].Name != "qps" {
					t.Fatalf("t=%ds: no burst proposal named qps in %+v", c.at, d.Proposals)
				}
				if d.Source == SourceBurst && (d.Metric != "qps" || !strings.Contains(d.Reason, "burst: qps load-weighted")) {
					t.Fatalf("t=%ds: burst decision without its metric or reason: %+v", c.at, d)
				}
				cur = d.DesiredReplicas
			}
		})
	}
}

func TestBurstWithMissingMetrics(t *testing.T) {
	// The window remembers a burst; then the metric stops. The reactive
	// recommender holds (never down on missing data); the burst floor may
	// still raise the pool, and never lowers it.
	clk := testingclock.NewFakeClock(t0)
	a, err := New(burstConfig("20", "1"), clk)
	if err != nil {
		t.Fatal(err)
	}
	var in []Observation
	for s := 0; s < 60; s++ {
		in = append(in, obs("qps", 100, t0.Add(time.Duration(s)*time.Second)))
	}
	a.Recommend(Input{CurrentReplicas: 10, Metrics: in})
	tests := []struct {
		cur    int32
		want   int32
		source Source
	}{
		{2, 5, SourceBurst}, // 100 / 20 = 5 > 2
		{5, 5, SourceHold},
		{9, 9, SourceHold}, // the floor is 5, but no scale-down without data
	}
	for _, tc := range tests {
		clk.SetTime(t0.Add(2 * time.Minute))
		d := a.Recommend(Input{CurrentReplicas: tc.cur})
		if d.DesiredReplicas != tc.want || d.Source != tc.source {
			t.Fatalf("current %d: %d from %s, want %d from %s (%s)", tc.cur, d.DesiredReplicas, d.Source, tc.want, tc.source, d.Reason)
		}
	}
}

func TestBurstStateRoundTrip(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	a, _ := New(burstConfig("20", "1"), clk)
	var in []Observation
	for s := 0; s < 90; s++ {
		in = append(in, obs("qps", 100, t0.Add(time.Duration(s)*time.Second)))
	}
	clk.SetTime(t0.Add(90 * time.Second))
	a.Recommend(Input{CurrentReplicas: 5, Metrics: in})

	raw, err := json.Marshal(a.State())
	if err != nil {
		t.Fatal(err)
	}
	var st State
	if err := json.Unmarshal(raw, &st); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		cfg    Config
		want   int32
		source Source
	}{
		// 10 qps now: reactive says 1, the restored window still says 5.
		{"same layout keeps the window", burstConfig("20", "1"), 5, SourceBurst},
		{"another bucket length discards it", func() Config {
			c := burstConfig("20", "1")
			c.Burst.Bucket = dur(30 * time.Second)
			return c
		}(), 1, SourceReactive},
		{"no burst recommender drops it", qpsConfig(1, 40, "10", &Behavior{ScaleDown: &ScalingRules{StabilizationWindowSeconds: i32(0)}}), 1, SourceReactive},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := testingclock.NewFakeClock(t0.Add(100 * time.Second))
			b, err := New(tc.cfg, clk)
			if err != nil {
				t.Fatal(err)
			}
			if err := b.Restore(st); err != nil {
				t.Fatal(err)
			}
			d := b.Recommend(Input{CurrentReplicas: 5, Metrics: []Observation{obs("qps", 10, clk.Now())}})
			if d.DesiredReplicas != tc.want || d.Source != tc.source {
				t.Fatalf("%d from %s, want %d from %s (%s)", d.DesiredReplicas, d.Source, tc.want, tc.source, d.Reason)
			}
			if (tc.cfg.Burst == nil) != (b.State().Burst == nil) {
				t.Fatalf("burst state %+v with config %+v", b.State().Burst, tc.cfg.Burst)
			}
		})
	}
}
