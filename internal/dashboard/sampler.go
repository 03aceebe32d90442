package dashboard

import (
	"context"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/utils/clock"

	"github.com/tidegpu/tidegpu/internal/gateway"
)

// The gateway's metrics the sampler reads (internal/gateway/metrics.go).
const (
	requestsMetric = "tidegpu_gateway_requests_total"
	durationMetric = "tidegpu_gateway_request_duration_seconds"
)

// Where a series' numbers come from.
const (
	// SourceGateway: requests and 5xx answers from the gateway's
	// tidegpu_gateway_requests_total, latency percentiles from its
	// request-duration histogram.
	SourceGateway = "gateway-metrics"
	// SourceBackends: attempts and failed attempts from the backends'
	// counters (retries included); latency only as EWMA.
	SourceBackends = "backend-counters"
	// LatencyHistogram: p50/p99 estimated from histogram buckets.
	LatencyHistogram = "histogram"
	// LatencyEWMA: the mean of the backends' moving averages only.
	LatencyEWMA = "ewma"
)

// Defaults of SamplerOptions.
const (
	DefaultInterval = 5 * time.Second
	DefaultWindow   = 15 * time.Minute
)

// SamplerOptions configure a Sampler. At least one of Gatherer and
// Backends should be set; with neither the series stays empty.
type SamplerOptions struct {
	// Gatherer holds the gateway's request counter and duration histogram:
	// gateway.(*Gateway).RequestMetrics(), which gathers those two only. The
	// whole registry passed to gateway.Options.Registry works too, but every
	// sample then runs all its collectors (the process collector reads
	// /proc), a fifth of an idle gateway's CPU (BENCHMARKS.md, "Idle cost").
	Gatherer prometheus.Gatherer
	// Backends reports the gateway's backends (gateway.(*Gateway).Backends).
	Backends func() []gateway.BackendStatus
	// Clock is injected for tests; default real.
	Clock clock.WithTicker
	// Interval between samples; default DefaultInterval.
	Interval time.Duration
	// Window kept; default DefaultWindow.
	Window time.Duration
}

// Sampler samples the gateway's cumulative counters every Interval and
// keeps the differences over the last Window, so the dashboard can chart
// request rate, error rate and latency.
type Sampler struct {
	o SamplerOptions

	mu        sync.Mutex
	last      *reading
	intervals []interval
}

// NewSampler returns a Sampler; call Run to start sampling.
func NewSampler(o SamplerOptions) *Sampler {
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.Window <= 0 {
		o.Window = DefaultWindow
	}
	return &Sampler{o: o}
}

// Run samples at once, then at every multiple of Interval (counted from
// the zero time, like the gateway's backed-off reads of idle backends: see
// gateway's alignedNext), until ctx ends. On the same instants as those
// reads, an idle process wakes once for both, not once each. After a late
// sample (a stalled process) the next falls on the next multiple ahead.
func (s *Sampler) Run(ctx context.Context) {
	s.Sample()
	t := s.o.Clock.NewTimer(untilAligned(s.o.Clock.Now(), s.o.Interval))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			s.Sample()
			t.Reset(untilAligned(s.o.Clock.Now(), s.o.Interval))
		}
	}
}

// untilAligned returns how long from now to the first multiple of every
// (counted from the zero time) more than every/2 ahead: a timer that fires
// a hair early by the wall clock (it runs on the monotonic one) must not
// make a second sample right after the first. The wait is in (every/2,
// 3*every/2]. Pure.
func untilAligned(now time.Time, every time.Duration) time.Duration {
	if every <= 0 {
		return 0
	}
	return now.Add(every / 2).Truncate(every).Add(every).Sub(now)
}

// Sample takes one reading now and records the interval since the last.
func (s *Sampler) Sample() {
	r := reading{at: s.o.Clock.Now()}
	if s.o.Gatherer != nil {
		if mfs, err := s.o.Gatherer.Gather(); err == nil || len(mfs) > 0 {
			readGateway(&r, mfs)
		}
	}
	if s.o.Backends != nil {
		readBackends(&r, s.o.Backends())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last != nil && r.at.After(s.last.at) {
		s.intervals = append(s.intervals, diff(*s.last, r))
	}
	s.last = &r
	cut := r.at.Add(-s.o.Window)
	i := 0
	for i < len(s.intervals) && s.intervals[i].end.Before(cut) {
		i++
	}
	s.intervals = append(s.intervals[:0], s.intervals[i:]...)
}

// Series returns the kept intervals as chart points. Before the second
// sample there is no point yet, but the series says what it will show.
func (s *Sampler) Series() Series {
	s.mu.Lock()
	ivs := append([]interval(nil), s.intervals...)
	var last reading
	if s.last != nil {
		last = *s.last
	}
	s.mu.Unlock()
	ser := buildSeries(ivs, s.o.Clock.Now(), s.o.Interval, s.o.Window)
	if !ser.Available {
		switch {
		case last.metrics:
			ser.Available, ser.Source, ser.Latency = true, SourceGateway, LatencyHistogram
		case last.backends:
			ser.Available, ser.Source, ser.Latency = true, SourceBackends, LatencyEWMA
		}
	}
	return ser
}

// Series is what GET /api/v1/timeseries answers.
type Series struct {
	// Available is false when there is nothing to sample (no sampler, or
	// no gateway behind this admin server).
	Available       bool      `json:"available"`
	IntervalSeconds float64   `json:"intervalSeconds"`
	WindowSeconds   float64   `json:"windowSeconds"`
	Now             time.Time `json:"now"`
	// Source of the request and error counts of the newest point
	// (SourceGateway or SourceBackends).
	Source string `json:"source,omitempty"`
	// Latency says what the latency lines are (LatencyHistogram or
	// LatencyEWMA).
	Latency string  `json:"latency,omitempty"`
	Points  []Point `json:"points"`
}

// Point is one sampling interval. Pointers are null when there was nothing
// to measure (no request in the interval).
type Point struct {
	// T is the end of the interval.
	T time.Time `json:"t"`
	// RPS is requests per second over the interval.
	RPS float64 `json:"rps"`
	// ErrorRatio is errors / requests (0..1).
	ErrorRatio *float64 `json:"errorRatio"`
	P50Ms      *float64 `json:"p50Ms"`
	P99Ms      *float64 `json:"p99Ms"`
	// EWMAMs is the mean of the backends' EWMA latency to response headers.
	EWMAMs *float64 `json:"ewmaMs"`
}

// reading is the cumulative state at one instant.
type reading struct {
	at time.Time
	// metrics is true when the gateway's histogram was found.
	metrics  bool
	requests map[string]float64 // per series (pool, backend, code)
	errors   map[string]float64 // the series with code >= 500
	bounds   []float64          // finite upper bounds
	cum      []float64          // cumulative counts per bound, then the total
	// From the backends.
	backends    bool
	attempts    map[string]float64
	failures    map[string]float64
	ewma        time.Duration
	ewmaPresent bool
}

// interval is the difference between two readings.
type interval struct {
	end      time.Time
	seconds  float64
	source   string
	requests float64
	errors   float64
	bounds   []float64
	counts   []float64 // cumulative, like reading.cum
	ewma     *time.Duration
}

// readGateway reads the gateway's request counter and duration histogram.
func readGateway(r *reading, mfs []*dto.MetricFamily) {
	for _, mf := range mfs {
		switch mf.GetName() {
		case requestsMetric:
			r.requests, r.errors = map[string]float64{}, map[string]float64{}
			for _, m := range mf.GetMetric() {
				key, code := "", 0
				for _, lp := range m.GetLabel() {
					key += lp.GetName() + "=" + lp.GetValue() + ","
					if lp.GetName() == "code" {
						code, _ = strconv.Atoi(lp.GetValue())
					}
				}
				v := m.GetCounter().GetValue()
				r.requests[key] = v
				if code >= 500 {
					r.errors[key] = v
				}
			}
		case durationMetric:
			ms := mf.GetMetric()
			if len(ms) == 0 || ms[0].GetHistogram() == nil {
				continue
			}
			h := ms[0].GetHistogram()
			r.metrics = true
			r.bounds, r.cum = nil, nil
			for _, b := range h.GetBucket() {
				if math.IsInf(b.GetUpperBound(), +1) {
					continue
				}
				r.bounds = append(r.bounds, b.GetUpperBound())
				r.cum = append(r.cum, float64(b.GetCumulativeCount()))
			}
			r.cum = append(r.cum, float64(h.GetSampleCount()))
		}
	}
}

// readBackends reads the backends' attempt counters and EWMA latencies.
func readBackends(r *reading, bs []gateway.BackendStatus) {
	r.backends = true
	r.attempts, r.failures = map[string]float64{}, map[string]float64{}
	var sum time.Duration
	n := 0
	for _, b := range bs {
		key := b.Pool + "/" + b.ID + "/" + b.Address
		if b.Removed {
			key += "/removed"
		}
		r.attempts[key] = float64(b.Requests)
		r.failures[key] = float64(b.Failures)
		if !b.Removed && b.Requests > 0 && b.EWMALatency > 0 {
			sum += b.EWMALatency
			n++
		}
	}
	if n > 0 {
		r.ewma, r.ewmaPresent = sum/time.Duration(n), true
	}
}

// diff returns what happened between two readings.
func diff(prev, cur reading) interval {
	iv := interval{end: cur.at, seconds: cur.at.Sub(prev.at).Seconds()}
	switch {
	case cur.metrics:
		iv.source = SourceGateway
		iv.requests = counterDelta(prev.requests, cur.requests)
		iv.errors = counterDelta(prev.errors, cur.errors)
		iv.bounds, iv.counts = cur.bounds, histogramDelta(prev.bounds, prev.cum, cur.bounds, cur.cum)
	case cur.backends:
		iv.source = SourceBackends
		iv.requests = counterDelta(prev.attempts, cur.attempts)
		iv.errors = counterDelta(prev.failures, cur.failures)
	}
	if cur.ewmaPresent && iv.requests > 0 {
		d := cur.ewma
		iv.ewma = &d
	}
	return iv
}

// counterDelta sums how much each counter series grew between two
// readings. A series that is new counts whole (it was created by its first
// increment); one that shrank was reset and counts from zero; one that is
// gone (a removed backend) counts nothing more.
func counterDelta(prev, cur map[string]float64) float64 {
	var d float64
	for k, v := range cur {
		p, ok := prev[k]
		switch {
		case !ok || v < p:
			d += v
		default:
			d += v - p
		}
	}
	return d
}

// histogramDelta subtracts two cumulative histograms (counts per bound,
// then the total). Different bounds or a smaller total mean a reset: the
// current histogram counts whole.
func histogramDelta(pb, pc, cb, cc []float64) []float64 {
	out := make([]float64, len(cc))
	reset := len(pb) != len(cb) || len(pc) != len(cc) || (len(cc) > 0 && cc[len(cc)-1] < pc[len(pc)-1])
	for i := 0; !reset && i < len(cb); i++ {
		reset = pb[i] != cb[i]
	}
	for i := range cc {
		out[i] = cc[i]
		if !reset {
			out[i] = math.Max(0, cc[i]-pc[i])
		}
	}
	return out
}

// Quantile estimates the q-quantile of observations from a classic
// histogram the way PromQL's histogram_quantile does: find the bucket the
// rank falls in and interpolate linearly between its lower and upper bound
// (the lower bound of the first bucket is 0). A rank in the +Inf bucket
// yields the highest finite bound. bounds are the finite upper bounds in
// increasing order; cum the cumulative counts for each, then the total.
// It reports false when there are no observations or q is outside [0, 1].
// (https://prometheus.io/docs/prometheus/latest/querying/functions/#histogram_quantile)
func Quantile(q float64, bounds, cum []float64) (float64, bool) {
	if len(cum) != len(bounds)+1 || math.IsNaN(q) || q < 0 || q > 1 {
		return 0, false
	}
	total := cum[len(cum)-1]
	if total <= 0 {
		return 0, false
	}
	rank := q * total
	prevCount, lower := 0.0, 0.0
	for i, upper := range bounds {
		c := math.Max(cum[i], prevCount) // tolerate a non-monotonic read
		if c >= rank && c > prevCount {
			if i == 0 && upper <= 0 {
				return upper, true
			}
			return lower + (upper-lower)*(rank-prevCount)/(c-prevCount), true
		}
		prevCount, lower = c, upper
	}
	if len(bounds) == 0 {
		return 0, false
	}
	return bounds[len(bounds)-1], true
}

// buildSeries turns intervals into chart points; intervals that ended
// before now-window are left out.
func buildSeries(ivs []interval, now time.Time, every, window time.Duration) Series {
	s := Series{IntervalSeconds: every.Seconds(), WindowSeconds: window.Seconds(), Now: now, Points: []Point{}}
	cut := now.Add(-window)
	for _, iv := range ivs {
		if iv.end.Before(cut) || iv.seconds <= 0 || iv.source == "" {
			continue // nothing was sampled in it
		}
		s.Available = true
		s.Source = iv.source
		p := Point{T: iv.end, RPS: iv.requests / iv.seconds}
		if iv.requests > 0 {
			p.ErrorRatio = ptr(math.Min(1, iv.errors/iv.requests))
		}
		if iv.source == SourceGateway {
			s.Latency = LatencyHistogram
			if v, ok := Quantile(0.5, iv.bounds, iv.counts); ok {
				p.P50Ms = ptr(v * 1000)
			}
			if v, ok := Quantile(0.99, iv.bounds, iv.counts); ok {
				p.P99Ms = ptr(v * 1000)
			}
		} else if iv.source == SourceBackends {
			s.Latency = LatencyEWMA
		}
		if iv.ewma != nil {
			p.EWMAMs = ptr(float64(*iv.ewma) / float64(time.Millisecond))
		}
		s.Points = append(s.Points, p)
	}
	return s
}

func ptr(v float64) *float64 { return &v }
