package autoscalebench

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/tidegpu/tidegpu/internal/autoscale"
)

// fixedScaler keeps the pool at one size.
type fixedScaler int32

func (f fixedScaler) Decide(time.Time, int32, int32, Window) int32 { return int32(f) }

// autoscalerScaler drives internal/autoscale with a fake clock set to the
// simulated time.
type autoscalerScaler struct {
	a      *autoscale.Autoscaler
	clk    *testingclock.FakeClock
	metric metricKind
	raw    bool // per-second samples of the last sync (panic mode), else the 60 s mean
	sync   int
}

// metricKind is the one metric a policy scales on.
type metricKind string

const (
	byConcurrency metricKind = "concurrency" // requests in service or queued
	byQPS         metricKind = "qps"         // arrival rate
)

func (m metricKind) spec(target float64) []autoscale.MetricSpec {
	q := resource.MustParse(fmt.Sprintf("%dm", int64(math.Round(target*1000))))
	t := autoscale.MetricConcurrency
	if m == byQPS {
		t = autoscale.MetricQPS
	}
	return []autoscale.MetricSpec{{Type: t, Target: q}}
}

func newAutoscalerScaler(cfg autoscale.Config, m metricKind, raw bool) (*autoscalerScaler, error) {
	clk := testingclock.NewFakeClock(benchStart)
	a, err := autoscale.New(cfg, clk)
	if err != nil {
		return nil, err
	}
	return &autoscalerScaler{a: a, clk: clk, metric: m, raw: raw, sync: int(benchSync / time.Second)}, nil
}

func (s *autoscalerScaler) Decide(now time.Time, cur, ready int32, w Window) int32 {
	s.clk.SetTime(now)
	series := w.Concurrency
	if s.metric == byQPS {
		series = w.Arrivals
	}
	var obs []autoscale.Observation
	if s.raw {
		n := min(len(series), s.sync)
		for i := len(series) - n; i < len(series); i++ {
			at := now.Add(-time.Duration(len(series)-1-i) * time.Second)
			obs = append(obs, autoscale.Observation{Metric: string(s.metric), Value: series[i], At: at})
		}
	} else if len(series) > 0 {
		sum := 0.0
		for _, c := range series {
			sum += c
		}
		obs = []autoscale.Observation{{Metric: string(s.metric), Value: sum / float64(len(series)), At: now}}
	}
	// The cold start is what the engine passes (its measured one).
	return s.a.Recommend(autoscale.Input{CurrentReplicas: cur, ReadyReplicas: ready, Metrics: obs, ColdStart: benchModel.ColdStart}).DesiredReplicas
}

// The experiment's parameters (see BENCHMARKS.md, "Autoscaling on the MAF
// trace (issue 6)").
var (
	benchModel = Model{
		Slots: 8, BaseService: 2 * time.Second, Slowdown: 1,
		ColdStart: 5 * time.Minute, SLO: 10 * time.Second, Timeout: 2 * time.Minute,
	}
	benchSync      = 15 * time.Second
	benchMax       = int32(20)
	benchExponent  = 0.25
	benchWarmDays  = 7  // simulated before scoring (trace days 7-13)
	benchFirstDay  = 14 // first scored trace day
	benchScoreDays = 14 // scored: trace days 14-27
	benchStart     = time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	benchGoal      = 0.99
)

func tracePath() string {
	if p := os.Getenv("TIDEGPU_MAF_TRACE"); p != "" {
		return p
	}
	return filepath.Join("..", "..", "..", "shared", "data", "requests", "maf-requests-per-minute.csv")
}

// policy builds one scaler configuration.
type policy struct {
	family string // "fixed", "hpa-default", "hybrid..."
	label  string
	target float64
	build  func() (Scaler, error)
}

type outcome struct {
	policy
	res Result
}

// hpaDefault is the HPA with its default behavior (no scale-up
// stabilisation, 100 % or 4 pods per 15 s; 300 s scale-down stabilisation),
// syncing every 15 s on the metric's 60 s mean (a Prometheus rate[1m]).
func hpaDefault(m metricKind, target float64) policy { return hpaDefaultMin(m, target, 1) }

// hpaDefaultMin is hpaDefault with a warm floor (minReplicas).
func hpaDefaultMin(m metricKind, target float64, floor int32) policy {
	fam := "HPA-default (" + string(m) + ")"
	if floor > 1 {
		fam = fmt.Sprintf("HPA-default (%s, minReplicas %d)", m, floor)
	}
	return policy{family: fam, label: fmt.Sprintf("target %.2f", target), target: target, build: func() (Scaler, error) {
		cfg := autoscale.Config{MinReplicas: floor, MaxReplicas: benchMax, Metrics: m.spec(target)}
		return newAutoscalerScaler(cfg, m, false)
	}}
}

// hybridVariant is one hybrid configuration: reactive HPA on raw samples
// (panic mode averages them over 60 s and 6 s) + panic mode + the
// predictive daily profile with lead time = cold start.
type hybridVariant struct {
	name        string
	metric      metricKind
	agg         autoscale.Aggregation
	history     int32
	headroomPct int32
	upWindow    int32 // scale-up stabilisation, seconds
	downWindow  int32 // scale-down stabilisation, seconds
	panicPct    int32
	predictive  bool
	floor       int32 // minReplicas; 0 means 1
	// burst, when set, adds the burst recommender (see burstVariant).
	burst *burstVariant
	// zero, when set, lets the pool scale to zero (minReplicas 0).
	zero *autoscale.ScaleToZeroSpec
}

// burstVariant configures the burst recommender of a hybrid: the
// load-weighted quantile of the per-minute qps over a trailing window,
// provisioned at target req/s per instance.
type burstVariant struct {
	quantile string // e.g. "0.99"
	window   time.Duration
	target   float64
}

func hybrid(v hybridVariant, target float64) policy {
	label := fmt.Sprintf("target %.2f", target)
	if v.burst != nil {
		label = fmt.Sprintf("burst target %.2f, reactive target %.2f", v.burst.target, target)
	}
	return policy{family: "hybrid: " + v.name, label: label, target: target, build: func() (Scaler, error) {
		cfg := autoscale.Config{
			MinReplicas: max(v.floor, 1), MaxReplicas: benchMax, Metrics: v.metric.spec(target),
			Panic: &autoscale.PanicSpec{ThresholdPercent: &v.panicPct},
			Behavior: &autoscale.Behavior{
				ScaleUp:   &autoscale.ScalingRules{StabilizationWindowSeconds: &v.upWindow},
				ScaleDown: &autoscale.ScalingRules{StabilizationWindowSeconds: &v.downWindow},
			},
		}
		if v.predictive {
			cfg.Predictive = &autoscale.PredictiveSpec{
				Metric: string(v.metric), LeadTime: metav1.Duration{Duration: benchModel.ColdStart},
				Season: autoscale.SeasonDaily, Aggregation: v.agg, History: &v.history, HeadroomPercent: &v.headroomPct,
			}
		}
		if v.zero != nil {
			cfg.MinReplicas, cfg.ScaleToZero = 0, v.zero
		}
		if b := v.burst; b != nil {
			bt := resource.MustParse(fmt.Sprintf("%dm", int64(math.Round(b.target*1000))))
			q := resource.MustParse(b.quantile)
			cfg.Burst = &autoscale.BurstSpec{Metric: string(v.metric), Target: &bt, Quantile: &q, Window: &metav1.Duration{Duration: b.window}}
		}
		return newAutoscalerScaler(cfg, v.metric, true)
	}}
}

func fixed(n int32) policy {
	return policy{family: "fixed pool", label: fmt.Sprintf("%d instances", n), build: func() (Scaler, error) { return fixedScaler(n), nil }}
}

// runAll simulates every policy over scored trace days [first,
// first+days), after benchWarmDays of warm-up, on two workers.
func runAll(t *testing.T, rates []float64, ps []policy, first, days int) []outcome {
	out := make([]outcome, len(ps))
	work := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				sc, err := ps[i].build()
				if err != nil {
					t.Errorf("%s %s: %v", ps[i].family, ps[i].label, err)
					continue
				}
				out[i] = outcome{ps[i], Simulate(Run{
					Rates: rates, From: (first - benchWarmDays) * 1440, To: (first + days) * 1440,
					ScoreFrom: first * 1440, Start: benchStart, Sync: benchSync, Initial: 2,
					Model: benchModel, Scaler: sc,
				})}
			}
		}()
	}
	for i := range ps {
		work <- i
	}
	close(work)
	wg.Wait()
	return out
}

// cheapestMeeting returns, per family, the outcome with the fewest
// instance-hours whose attainment meets the goal (ok false if none does).
func cheapestMeeting(os []outcome) map[string]outcome {
	best := map[string]outcome{}
	for _, o := range os {
		if o.res.Attainment() < benchGoal {
			continue
		}
		if b, ok := best[o.family]; !ok || o.res.InstanceHours() < b.res.InstanceHours() {
			best[o.family] = o
		}
	}
	return best
}

// TestMAF replays the MAF trace (see BENCHMARKS.md). It takes a few
// minutes, so it runs only with TIDEGPU_BENCH_MAF=1.
func TestMAF(t *testing.T) {
	if os.Getenv("TIDEGPU_BENCH_MAF") == "" {
		t.Skip("the MAF autoscaling experiment takes minutes: run with TIDEGPU_BENCH_MAF=1 go test ./bench/autoscale -run TestMAF -v -timeout 30m")
	}
	f, err := os.Open(tracePath())
	if err != nil {
		t.Skipf("MAF trace not found (%v): it lives in ../shared/data/requests/ next to the repository; set TIDEGPU_MAF_TRACE to its path", err)
	}
	defer f.Close()
	trace, err := ParseTrace(f)
	if err != nil {
		t.Fatal(err)
	}
	end := (benchFirstDay + benchScoreDays) * 1440
	if len(trace) < end {
		t.Fatalf("trace has %d minutes, the experiment needs %d", len(trace), end)
	}
	// Scale: rate = c × v^0.25 / 60 with c chosen so that the scored
	// window's busiest minute needs benchMax instances at full batch.
	tr := FitTransform(trace[benchFirstDay*1440:end], benchExponent, float64(benchMax)*benchModel.Capacity())
	rates := make([]float64, len(trace))
	for i, v := range trace {
		rates[i] = tr.Rate(v)
	}
	scored := rates[benchFirstDay*1440 : end]
	sum := 0.0
	for _, r := range scored {
		sum += r
	}
	t.Logf("trace: %d minutes; scored days %d-%d; transform rate = %.4g x v^%.2f / 60 req/s; mean %.2f req/s (%.2f instances at full batch), peak %.2f req/s",
		len(trace), benchFirstDay, benchFirstDay+benchScoreDays-1, tr.Scale, tr.Exponent, sum/float64(len(scored)), sum/float64(len(scored))/benchModel.Capacity(), float64(benchMax)*benchModel.Capacity())

	// Targets per instance: concurrency (8 slots) and requests/s (an
	// instance serves 2 req/s at full batch).
	concTargets := []float64{4, 3, 2.5, 2, 1.5, 1.25, 1, 0.75}
	qpsTargets := []float64{1.6, 1.2, 1, 0.8, 0.6, 0.5, 0.4, 0.3}
	variants := []hybridVariant{
		{name: "concurrency, panic, EWMA(7 d) profile", metric: byConcurrency, predictive: true, agg: autoscale.AggregateEWMA, history: 7, downWindow: 300, panicPct: 200},
		{name: "concurrency, panic, EWMA(7 d) profile, 900 s down", metric: byConcurrency, predictive: true, agg: autoscale.AggregateEWMA, history: 7, downWindow: 900, panicPct: 200},
		{name: "qps, panic, EWMA(7 d) profile, 900 s down", metric: byQPS, predictive: true, agg: autoscale.AggregateEWMA, history: 7, downWindow: 900, panicPct: 200},
		{name: "qps, panic, EWMA(7 d) profile, 180 s up / 900 s down", metric: byQPS, predictive: true, agg: autoscale.AggregateEWMA, history: 7, upWindow: 180, downWindow: 900, panicPct: 200},
		{name: "qps, panic, max(7 d) profile, 180 s up / 900 s down", metric: byQPS, predictive: true, agg: autoscale.AggregateMax, history: 7, upWindow: 180, downWindow: 900, panicPct: 200},
	}
	ps := []policy{fixed(benchMax), fixed(4), fixed(6), fixed(8), fixed(10), fixed(12)}
	for i := range concTargets {
		ps = append(ps, hpaDefault(byConcurrency, concTargets[i]), hpaDefault(byQPS, qpsTargets[i]))
		for _, v := range variants {
			tg := concTargets[i]
			if v.metric == byQPS {
				tg = qpsTargets[i]
			}
			ps = append(ps, hybrid(v, tg))
		}
	}
	// Warm floors, for the HPA and the hybrid alike.
	for _, floor := range []int32{8, 10} {
		for _, tg := range []float64{1, 0.8, 0.6} {
			ps = append(ps, hpaDefaultMin(byQPS, tg, floor), hybrid(hybridVariant{
				name: fmt.Sprintf("qps, panic, EWMA(7 d) profile, 900 s down, minReplicas %d", floor), metric: byQPS, predictive: true,
				agg: autoscale.AggregateEWMA, history: 7, downWindow: 900, panicPct: 200, floor: floor,
			}, tg))
		}
	}
	// The burst recommender (standing capacity for the bursts of the last
	// hours) under the hybrid; the sweep is over its per-instance target
	// (an instance serves 2 req/s at full batch).
	// The burst recommender (standing capacity for the bursts of the last
	// hours) in the hybrid: reactive qps + panic + predictive profile +
	// burst. The sweep is over the burst target (req/s per instance; an
	// instance serves 2 req/s at full batch).
	type burstFamily struct {
		q       string
		window  time.Duration
		profile autoscale.Aggregation // "" for no predictive profile
		react   float64               // reactive qps target per instance
		down    int32                 // scale-down stabilisation, seconds
		targets []float64             // burst targets (req/s per instance)
	}
	for _, bf := range []burstFamily{
		{"0.99", 8 * time.Hour, autoscale.AggregateEWMA, 1.6, 300, []float64{2.0, 2.1, 2.2, 2.3, 2.4}},
		{"0.98", 8 * time.Hour, autoscale.AggregateEWMA, 1.6, 300, []float64{2.0, 2.1, 2.2}},
		{"0.99", 8 * time.Hour, "", 1.6, 300, []float64{2.2, 2.3}},
		{"0.99", 8 * time.Hour, autoscale.AggregateEWMA, 2.0, 300, []float64{2.2}},
		{"0.99", 8 * time.Hour, autoscale.AggregateEWMA, 1.0, 900, []float64{2.2}},
		{"0.99", 8 * time.Hour, autoscale.AggregateEWMA, 1.6, 60, []float64{2.2}},
		{"0.99", 8 * time.Hour, autoscale.AggregateEWMA, 1.6, 900, []float64{2.2}},
		{"0.99", 8 * time.Hour, autoscale.AggregateMax, 1.6, 300, []float64{2.2}},
		{"0.99", 4 * time.Hour, autoscale.AggregateEWMA, 1.6, 300, []float64{2.2}},
		{"0.99", 12 * time.Hour, autoscale.AggregateEWMA, 1.6, 300, []float64{2.2}},
		{"0.99", 24 * time.Hour, autoscale.AggregateEWMA, 1.6, 300, []float64{2.2}},
	} {
		for _, bt := range bf.targets {
			ps = append(ps, hybrid(burstHybrid(bf.q, bf.window, bf.profile, bf.react, bf.down, bt), bf.react))
		}
	}
	// Scale to zero (issue 15) on the chosen hybrid: the default (the
	// first request wakes the pool; idle means no request) and activation
	// thresholds that count a trickle as idle.
	for _, th := range []string{"0", "0.5", "1"} {
		v := burstHybrid("0.99", 8*time.Hour, autoscale.AggregateEWMA, 1.6, 300, 2.2)
		q := resource.MustParse(th)
		v.zero = &autoscale.ScaleToZeroSpec{IdleWindow: &metav1.Duration{Duration: 5 * time.Minute}, ActivationThreshold: &q}
		v.name += ", scale to zero (activation threshold " + th + " req/s)"
		ps = append(ps, hybrid(v, 1.6))
	}
	// TIDEGPU_MAF_ONLY=substring runs only the policies whose family
	// contains it (for quick iterations; the table needs the full run).
	if only := os.Getenv("TIDEGPU_MAF_ONLY"); only != "" {
		ps = slices.DeleteFunc(ps, func(p policy) bool { return !strings.Contains(p.family, only) })
	}
	start := time.Now()
	outs := runAll(t, rates, ps, benchFirstDay, benchScoreDays)
	checkScaleToZero(t, outs)
	t.Logf("%d simulations in %s", len(outs), time.Since(start).Round(time.Second))

	sort.SliceStable(outs, func(i, j int) bool { return outs[i].family < outs[j].family })
	var b strings.Builder
	fmt.Fprintf(&b, "\n| policy | setting | SLO attainment | instance-hours | max instances | scale changes |\n|---|---|---|---|---|---|\n")
	for _, o := range outs {
		fmt.Fprintf(&b, "| %s | %s | %.3f %% | %.1f | %d | %d |\n", o.family, o.label, 100*o.res.Attainment(), o.res.InstanceHours(), o.res.MaxInstances, o.res.ScaleEvents)
	}
	t.Log(b.String())

	best := cheapestMeeting(outs)
	// The baseline is the cheaper of the two HPA-default metrics (default
	// minReplicas 1).
	hpa, ok := outcome{}, false
	for k, o := range best {
		if strings.HasPrefix(k, "HPA-default") && !strings.Contains(k, "minReplicas") && (!ok || o.res.InstanceHours() < hpa.res.InstanceHours()) {
			hpa, ok = o, true
		}
	}
	var s strings.Builder
	fmt.Fprintf(&s, "\ncheapest setting of each policy reaching %.0f %% (baseline: %s %s):\n| policy | setting | SLO attainment | instance-hours | vs HPA-default |\n|---|---|---|---|---|\n", benchGoal*100, hpa.family, hpa.label)
	fams := make([]string, 0, len(best))
	for k := range best {
		fams = append(fams, k)
	}
	sort.Strings(fams)
	for _, k := range fams {
		o := best[k]
		vs := "—"
		if ok {
			vs = fmt.Sprintf("%+.1f %%", 100*(o.res.InstanceHours()/hpa.res.InstanceHours()-1))
		}
		fmt.Fprintf(&s, "| %s | %s | %.3f %% | %.1f | %s |\n", k, o.label, 100*o.res.Attainment(), o.res.InstanceHours(), vs)
	}
	t.Log(s.String())
	if !ok {
		t.Logf("no HPA-default target reached %.0f %%", benchGoal*100)
	}

	// Hold-out: the settings chosen above on days 14-27, replayed on the
	// trace's remaining whole days (same transform, same warm-up length).
	hoFirst, hoDays := benchFirstDay+benchScoreDays, len(trace)/1440-(benchFirstDay+benchScoreDays)
	if hoDays < 1 || os.Getenv("TIDEGPU_MAF_ONLY") != "" {
		return
	}
	hold := []policy{fixed(12), hpaDefault(byConcurrency, 1), hpaDefault(byQPS, 0.4)}
	for _, bt := range []float64{2.2, 2.3} {
		hold = append(hold, hybrid(burstHybrid("0.99", 8*time.Hour, autoscale.AggregateEWMA, 1.6, 300, bt), 1.6))
	}
	hold = append(hold, hybrid(burstHybrid("0.98", 8*time.Hour, autoscale.AggregateEWMA, 1.6, 300, 2.2), 1.6))
	hos := runAll(t, rates, hold, hoFirst, hoDays)
	var h strings.Builder
	fmt.Fprintf(&h, "\nhold-out: trace days %d-%d (%d days), settings chosen on days %d-%d:\n| policy | setting | SLO attainment | instance-hours | vs %s %s |\n|---|---|---|---|---|\n",
		hoFirst, hoFirst+hoDays-1, hoDays, benchFirstDay, benchFirstDay+benchScoreDays-1, hos[1].family, hos[1].label)
	for _, o := range hos {
		fmt.Fprintf(&h, "| %s | %s | %.3f %% | %.1f | %+.1f %% |\n", o.family, o.label, 100*o.res.Attainment(), o.res.InstanceHours(), 100*(o.res.InstanceHours()/hos[1].res.InstanceHours()-1))
	}
	t.Log(h.String())
}

// burstHybrid is the hybrid with the burst recommender: reactive qps at
// react req/s per instance, panic mode, the predictive daily profile
// (profile "" for none), down s of scale-down stabilisation, and the burst
// floor at quantile q of the per-minute qps over window, target req/s per
// instance.
func burstHybrid(q string, window time.Duration, profile autoscale.Aggregation, react float64, down int32, target float64) hybridVariant {
	name := fmt.Sprintf("burst q %s / %s + qps reactive %.1f, panic, %d s down", q, strings.TrimSuffix(window.String(), "0m0s"), react, down)
	if profile != "" {
		name += fmt.Sprintf(", %s(7 d) profile", profile)
	}
	return hybridVariant{
		name: name, metric: byQPS, predictive: profile != "", agg: profile, history: 7, downWindow: down, panicPct: 200,
		burst: &burstVariant{quantile: q, window: window, target: target},
	}
}

// checkScaleToZero asserts BENCHMARKS.md's headline of scale to zero on
// this trace: each zero variant of the chosen hybrid keeps the SLO
// attainment and the instance-hours of the same hybrid with minReplicas 1
// (the trace has no idle minute, so going to zero may only cost).
func checkScaleToZero(t *testing.T, outs []outcome) {
	base := map[string]outcome{}
	for _, o := range outs {
		if !strings.Contains(o.family, "scale to zero") {
			base[o.family+"|"+o.label] = o
		}
	}
	for _, o := range outs {
		fam, _, ok := strings.Cut(o.family, ", scale to zero")
		if !ok {
			continue
		}
		b, found := base[fam+"|"+o.label]
		if !found {
			continue
		}
		t.Logf("scale to zero: %s %s: %.3f %% / %.1f h against %.3f %% / %.1f h with minReplicas 1",
			o.family, o.label, 100*o.res.Attainment(), o.res.InstanceHours(), 100*b.res.Attainment(), b.res.InstanceHours())
		if o.res.Attainment() < b.res.Attainment()-1e-4 || o.res.InstanceHours() > b.res.InstanceHours()*1.001 {
			t.Errorf("scale to zero costs on this trace: %s %s: %.3f %% / %.1f h against %.3f %% / %.1f h",
				o.family, o.label, 100*o.res.Attainment(), o.res.InstanceHours(), 100*b.res.Attainment(), b.res.InstanceHours())
		}
	}
}
