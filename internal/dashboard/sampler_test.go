package dashboard

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/tidegpu/tidegpu/internal/gateway"
)

func TestQuantile(t *testing.T) {
	inf := math.Inf(1)
	cases := []struct {
		name   string
		q      float64
		bounds []float64
		cum    []float64
		want   float64
		ok     bool
	}{
		// The worked example of ClickHouse's quantilePrometheusHistogram,
		// which follows PromQL's histogram_quantile:
		// https://clickhouse.com/docs/sql-reference/aggregate-functions/reference/quantilePrometheusHistogram
		{"documented example", 0.5, []float64{0, 0.5, 1}, []float64{6, 11, 14, 19}, 0.35, true},
		{"first bucket interpolates from zero", 0.5, []float64{0.1, 1}, []float64{10, 10, 10}, 0.05, true},
		{"rank in the +Inf bucket gives the highest bound", 0.99, []float64{0.1, 1}, []float64{1, 2, 10}, 1, true},
		{"empty buckets before the rank are skipped", 0.5, []float64{0.1, 0.2, 0.4}, []float64{0, 0, 4, 4}, 0.3, true},
		{"q = 1 is the top of the last used bucket", 1, []float64{0.1, 0.2, 0.4}, []float64{0, 4, 4, 4}, 0.2, true},
		{"no observations", 0.5, []float64{0.1}, []float64{0, 0}, 0, false},
		{"q out of range", 1.5, []float64{0.1}, []float64{1, 1}, 0, false},
		{"q NaN", math.NaN(), []float64{0.1}, []float64{1, 1}, 0, false},
		{"lengths disagree", 0.5, []float64{0.1, 0.2}, []float64{1, 1}, 0, false},
		{"only the +Inf bucket", 0.5, nil, []float64{3}, 0, false},
		{"a non-monotonic read is tolerated", 0.5, []float64{0.1, 0.2, 0.4}, []float64{2, 1, 8, 8}, 0.2 + 0.2*2/6, true},
		{"negative first bound returns the bound", 0.1, []float64{-1, 1}, []float64{5, 10, 10}, -1, true},
		{"+Inf in bounds is not expected but ends the search", 0.9, []float64{1, inf}, []float64{1, 10, 10}, inf, true},
	}
	for _, tc := range cases {
		got, ok := Quantile(tc.q, tc.bounds, tc.cum)
		if ok != tc.ok || (ok && math.Abs(got-tc.want) > 1e-9 && !(math.IsInf(got, 1) && math.IsInf(tc.want, 1))) {
			t.Errorf("%s: Quantile(%v) = %v, %t; want %v, %t", tc.name, tc.q, got, ok, tc.want, tc.ok)
		}
	}
}

func TestCounterDelta(t *testing.T) {
	cases := []struct {
		name      string
		prev, cur map[string]float64
		want      float64
	}{
		{"growth", map[string]float64{"a": 5, "b": 1}, map[string]float64{"a": 8, "b": 1}, 3},
		{"a new series counts whole", map[string]float64{"a": 5}, map[string]float64{"a": 5, "b": 2}, 2},
		{"a gone series counts nothing", map[string]float64{"a": 5, "b": 9}, map[string]float64{"a": 6}, 1},
		{"a reset counts from zero", map[string]float64{"a": 5}, map[string]float64{"a": 2}, 2},
		{"nothing before", nil, map[string]float64{"a": 2}, 2},
		{"nothing now", map[string]float64{"a": 2}, nil, 0},
	}
	for _, tc := range cases {
		if got := counterDelta(tc.prev, tc.cur); got != tc.want {
			t.Errorf("%s: counterDelta = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestHistogramDelta(t *testing.T) {
	cases := []struct {
		name           string
		pb, pc, cb, cc []float64
		want           []float64
	}{
		{"subtracts", []float64{1, 2}, []float64{1, 2, 3}, []float64{1, 2}, []float64{2, 4, 7}, []float64{1, 2, 4}},
		{"first reading", nil, nil, []float64{1}, []float64{2, 3}, []float64{2, 3}},
		{"bounds changed: reset", []float64{1, 3}, []float64{1, 2, 3}, []float64{1, 2}, []float64{2, 4, 7}, []float64{2, 4, 7}},
		{"total shrank: reset", []float64{1}, []float64{5, 9}, []float64{1}, []float64{1, 1}, []float64{1, 1}},
		{"never negative", []float64{1}, []float64{5, 9}, []float64{1}, []float64{4, 10}, []float64{0, 1}},
	}
	for _, tc := range cases {
		got := histogramDelta(tc.pb, tc.pc, tc.cb, tc.cc)
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: histogramDelta = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestBuildSeries(t *testing.T) {
	now := t0.Add(20 * time.Minute)
	ewma := 40 * time.Millisecond
	ivs := []interval{
		{end: t0, seconds: 5, source: SourceGateway, requests: 10}, // older than the window
		{end: now.Add(-10 * time.Second), seconds: 5, source: SourceGateway, requests: 10, errors: 1,
			bounds: []float64{0.1, 1}, counts: []float64{5, 10, 10}, ewma: &ewma},
		{end: now.Add(-5 * time.Second), seconds: 5, source: SourceGateway},
		{end: now, seconds: 0, source: SourceGateway, requests: 3}, // no time passed: skipped
	}
	s := buildSeries(ivs, now, 5*time.Second, 15*time.Minute)
	if !s.Available || s.Source != SourceGateway || s.Latency != LatencyHistogram || len(s.Points) != 2 {
		t.Fatalf("series = %+v", s)
	}
	p := s.Points[0]
	if p.RPS != 2 || p.ErrorRatio == nil || *p.ErrorRatio != 0.1 || p.P50Ms == nil || math.Abs(*p.P50Ms-100) > 1e-9 ||
		p.P99Ms == nil || math.Abs(*p.P99Ms-982) > 1e-6 || p.EWMAMs == nil || *p.EWMAMs != 40 {
		t.Errorf("busy point = %+v", fmtPoint(p))
	}
	q := s.Points[1]
	if q.RPS != 0 || q.ErrorRatio != nil || q.P50Ms != nil || q.P99Ms != nil || q.EWMAMs != nil {
		t.Errorf("idle point = %+v, want zero rate and no ratio or latency", fmtPoint(q))
	}

	s = buildSeries([]interval{{end: now, seconds: 5, source: SourceBackends, requests: 4, errors: 8}}, now, 5*time.Second, 15*time.Minute)
	if s.Latency != LatencyEWMA || *s.Points[0].ErrorRatio != 1 {
		t.Errorf("backend series = %+v %s", s, fmtPoint(s.Points[0]))
	}
	s = buildSeries(nil, now, 5*time.Second, 15*time.Minute)
	if s.Available || s.Points == nil {
		t.Errorf("empty series = %+v, want unavailable with an empty (not null) point list", s)
	}
}

func fmtPoint(p Point) string {
	f := func(v *float64) string {
		if v == nil {
			return "nil"
		}
		return fmt.Sprint(*v)
	}
	return fmt.Sprintf("rps=%v err=%s p50=%s p99=%s ewma=%s", p.RPS, f(p.ErrorRatio), f(p.P50Ms), f(p.P99Ms), f(p.EWMAMs))
}

// newGateway starts a real gateway with two backends: "ok" answers 200
// and "bad" (in pool "broken") answers 500.
func newGateway(t *testing.T, reg prometheus.Registerer) *gateway.Gateway {
	t.Helper()
	gw, err := gateway.New(gateway.Options{Registry: reg, ProbeInterval: -1, MaxRetries: -1, EjectAfter: -1, WaitForBackend: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.Close)
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, `{"done":true}`)
	}))
	t.Cleanup(ok.Close)
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		http.Error(w, `{"error":"boom"}`, http.StatusInternalServerError)
	}))
	t.Cleanup(bad.Close)
	gw.SetBackends("p", []gateway.Backend{{ID: "ok", Pool: "p", Address: strings.TrimPrefix(ok.URL, "http://")}})
	gw.SetBackends("broken", []gateway.Backend{{ID: "bad", Pool: "broken", Address: strings.TrimPrefix(bad.URL, "http://")}})
	return gw
}

// send makes n requests to pool through the gateway and returns their codes.
func send(t *testing.T, gw http.Handler, pool string, n int) []int {
	t.Helper()
	var codes []int
	for range n {
		req := httptest.NewRequest(http.MethodPost, "/api/chat", strings.NewReader(`{"model":"m","messages":[]}`))
		req.Header.Set("X-Tidegpu-Pool", pool)
		rec := httptest.NewRecorder()
		gw.ServeHTTP(rec, req)
		codes = append(codes, rec.Code)
	}
	return codes
}

func TestSamplerReadsTheGatewaysMetrics(t *testing.T) {
	// The same series from the gateway's two request metrics alone (as
	// wired) and from the whole registry they are in.
	for _, tc := range []struct {
		name     string
		gatherer func(reg *prometheus.Registry, gw *gateway.Gateway) prometheus.Gatherer
	}{
		{"RequestMetrics", func(_ *prometheus.Registry, gw *gateway.Gateway) prometheus.Gatherer { return gw.RequestMetrics() }},
		{"whole registry", func(reg *prometheus.Registry, _ *gateway.Gateway) prometheus.Gatherer { return reg }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			gw := newGateway(t, reg)
			testSamplerReadsTheGatewaysMetrics(t, gw, tc.gatherer(reg, gw))
		})
	}
}

func testSamplerReadsTheGatewaysMetrics(t *testing.T, gw *gateway.Gateway, g prometheus.Gatherer) {
	clk := clocktesting.NewFakeClock(t0)
	s := NewSampler(SamplerOptions{Gatherer: g, Backends: gw.Backends, Clock: clk})

	if got := s.Series(); len(got.Points) != 0 || got.Available {
		t.Fatalf("no reading yet, yet the series is %+v", got)
	}
	s.Sample()
	if got := s.Series(); len(got.Points) != 0 || !got.Available || got.Source != SourceGateway || got.Latency != LatencyHistogram {
		t.Fatalf("one reading makes no point but says what will come: %+v", got)
	}
	codes := append(send(t, gw, "p", 8), send(t, gw, "broken", 2)...)
	clk.Step(5 * time.Second)
	s.Sample()
	ser := s.Series()
	if !ser.Available || ser.Source != SourceGateway || ser.Latency != LatencyHistogram || len(ser.Points) != 1 {
		t.Fatalf("series = %+v (codes %v)", ser, codes)
	}
	p := ser.Points[0]
	if p.RPS != 2 || p.ErrorRatio == nil || *p.ErrorRatio != 0.2 || p.P50Ms == nil || p.P99Ms == nil || *p.P99Ms < *p.P50Ms || p.EWMAMs == nil {
		t.Fatalf("point = %s, want 10 requests in 5 s with 2 errors (codes %v)", fmtPoint(p), codes)
	}

	// A backend leaves: its request series is deleted; the rate must not go
	// negative or count it again.
	gw.SetBackends("broken", nil)
	send(t, gw, "p", 3)
	clk.Step(5 * time.Second)
	s.Sample()
	p = s.Series().Points[1]
	if p.RPS != 0.6 || *p.ErrorRatio != 0 {
		t.Fatalf("after a backend left: %s, want 3 requests in 5 s and no error", fmtPoint(p))
	}
}

func TestSamplerFallsBackToBackendCounters(t *testing.T) {
	gw := newGateway(t, nil) // no registry: no gateway metrics
	clk := clocktesting.NewFakeClock(t0)
	s := NewSampler(SamplerOptions{Gatherer: prometheus.NewRegistry(), Backends: gw.Backends, Clock: clk, Interval: 2 * time.Second})
	s.Sample()
	send(t, gw, "p", 3)
	send(t, gw, "broken", 1)
	clk.Step(2 * time.Second)
	s.Sample()
	ser := s.Series()
	if ser.Source != SourceBackends || ser.Latency != LatencyEWMA || len(ser.Points) != 1 || ser.IntervalSeconds != 2 {
		t.Fatalf("series = %+v", ser)
	}
	p := ser.Points[0]
	if p.RPS != 2 || *p.ErrorRatio != 0.25 || p.P50Ms != nil || p.EWMAMs == nil || *p.EWMAMs <= 0 {
		t.Fatalf("point = %s, want 4 attempts in 2 s, 1 failed, EWMA only", fmtPoint(p))
	}
}

func TestSamplerWithNothingToSample(t *testing.T) {
	// The operator's registry holds no gateway metrics, and it has no
	// gateway: nothing is available, whatever the samples.
	clk := clocktesting.NewFakeClock(t0)
	s := NewSampler(SamplerOptions{Gatherer: prometheus.NewRegistry(), Clock: clk})
	s.Sample()
	clk.Step(DefaultInterval)
	s.Sample()
	if got := s.Series(); got.Available || got.Source != "" || len(got.Points) != 0 {
		t.Fatalf("series = %+v", got)
	}
}

func TestSamplerKeepsOnlyTheWindow(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	s := NewSampler(SamplerOptions{Backends: func() []gateway.BackendStatus { return nil }, Clock: clk, Interval: time.Minute, Window: 10 * time.Minute})
	for range 30 {
		s.Sample()
		clk.Step(time.Minute)
	}
	s.mu.Lock()
	n := len(s.intervals)
	s.mu.Unlock()
	if n > 11 {
		t.Fatalf("kept %d intervals of a minute for a 10-minute window", n)
	}
	if got := len(s.Series().Points); got < 9 || got > 10 {
		t.Fatalf("series has %d points, want the last 10 minutes", got)
	}
}

func TestUntilAligned(t *testing.T) {
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, tc := range []struct {
		now   string
		every time.Duration
		want  time.Duration
	}{
		{"2026-12-02T11:00:00Z", 5 * time.Second, 5 * time.Second},                                // on a multiple: the next one
		{"2026-12-02T11:00:01Z", 5 * time.Second, 4 * time.Second},                                // the next multiple
		{"2026-12-02T11:00:02.4Z", 5 * time.Second, 2600 * time.Millisecond},                      // over half an interval ahead
		{"2026-12-02T11:00:02.5Z", 5 * time.Second, 7500 * time.Millisecond},                      // half ahead exactly: the one after
		{"2026-12-02T11:00:04.999Z", 5 * time.Second, 5001 * time.Millisecond},                    // a timer a hair early: not again at once
		{"2026-12-02T11:00:12Z", time.Minute, 48 * time.Second},                                   // minutes: from the zero time, so on the clock's minutes
		{"2026-12-02T11:00:01Z", 0, 0},                                                            // no interval
		{"2026-12-02T11:00:01.000000001+01:00", 5 * time.Second, 4*time.Second - time.Nanosecond}, // the zone does not matter
	} {
		if got := untilAligned(at(tc.now), tc.every); got != tc.want {
			t.Errorf("untilAligned(%s, %v) = %v, want %v", tc.now, tc.every, got, tc.want)
		}
	}
}

func TestSamplerRunSamplesOnTheGrid(t *testing.T) {
	// Started off the grid, Run samples at once, then on multiples of the
	// interval only: the clock moves in steps of 100 ms, one at a time
	// while Run waits, so a sample anywhere else would show.
	start := t0.Add(1300 * time.Millisecond)
	clk := clocktesting.NewFakeClock(start)
	s := NewSampler(SamplerOptions{Backends: func() []gateway.BackendStatus { return nil }, Clock: clk})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Run(ctx)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for len(s.Series().Points) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("Run took %d samples after stepping the clock to %v", len(s.Series().Points), clk.Now())
		}
		if clk.HasWaiters() {
			clk.Step(100 * time.Millisecond)
		}
		time.Sleep(time.Millisecond) // polling interval of a condition
	}
	cancel()
	<-done
	var got []time.Time
	for _, p := range s.Series().Points {
		got = append(got, p.T)
	}
	want := []time.Time{t0.Add(DefaultInterval), t0.Add(2 * DefaultInterval), t0.Add(3 * DefaultInterval)}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("samples ended at %v, want %v (the first at %v)", got, want, start)
	}
}
