package gateway

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	loadmetrics "github.com/tidegpu/tidegpu/internal/metrics"
)

func TestScore(t *testing.T) {
	ms := time.Millisecond
	none, lat, ttft, met := Basis{}, Basis{Latency: true}, Basis{TTFT: true, Latency: true}, Basis{Metrics: true, Concurrency: true}
	tests := []struct {
		name  string
		l     Load
		basis Basis
		want  float64
	}{
		{"idle, no signals", Load{Weight: 100}, none, 1.0 / 100},
		{"in flight counts with the new request", Load{InFlight: 3, Weight: 100}, none, 4.0 / 100},
		{"weight divides", Load{InFlight: 3, Weight: 200}, none, 4.0 / 200},
		{"zero weight is the default", Load{InFlight: 1, Weight: 0}, none, 2.0 / DefaultWeight},
		{"latency multiplies", Load{InFlight: 1, Weight: 100, Latency: 500 * ms}, lat, 0.5 * 2 / 100},
		{"TTFT before latency", Load{InFlight: 1, Weight: 100, TTFT: 100 * ms, Latency: 500 * ms}, ttft, 0.1 * 2 / 100},
		{"latency ignored when not compared", Load{InFlight: 1, Weight: 100, Latency: 500 * ms}, none, 2.0 / 100},
		{"queue adds work", Load{InFlight: 1, Weight: 100, Queue: 3, Fresh: true}, met, 5.0 / 100},
		{"queue ignored when not compared", Load{InFlight: 1, Weight: 100, Queue: 3, Fresh: true}, none, 2.0 / 100},
		{"negative queue ignored", Load{InFlight: 1, Weight: 100, Queue: -3, Fresh: true}, met, 2.0 / 100},
		{"errors penalise", Load{Weight: 100, ErrorRate: 0.5}, none, 1.0 / 100 * 3},
		{"error rate clamped", Load{Weight: 100, ErrorRate: 7}, none, 1.0 / 100 * 5},
		{"all together", Load{InFlight: 2, Weight: 50, TTFT: 100 * ms, Queue: 1, Fresh: true, ErrorRate: 0.25}, Basis{TTFT: true, Metrics: true}, 0.1 * 4 / 50 * 2},
		{"in flight divided by the concurrency", Load{InFlight: 4, Weight: 100, Concurrency: 8, Fresh: true}, met, 1.5 / 100},
		{"queue is not divided", Load{InFlight: 4, Weight: 100, Queue: 2, Concurrency: 8, Fresh: true}, met, 3.5 / 100},
		{"concurrency ignored when not compared", Load{InFlight: 4, Weight: 100, Concurrency: 8, Fresh: true}, none, 5.0 / 100},
		{"concurrency without a fresh queue", Load{InFlight: 9, Weight: 100, Queue: 5, Concurrency: 8}, Basis{Concurrency: true}, 4.0 / 100},
		{"concurrency below 1 counts as 1", Load{InFlight: 4, Weight: 100, Concurrency: 0.5, Fresh: true}, met, 6.0 / 100},
		{"a full batch: the new request waits behind one", Load{InFlight: 8, Weight: 100, Concurrency: 8, Fresh: true}, met, 3.0 / 100},
		{"beyond the batch: the gateway's count of waiting", Load{InFlight: 10, Weight: 100, Queue: 1, Concurrency: 8, Fresh: true}, met, 5.0 / 100},
		{"the backend's queue when larger", Load{InFlight: 2, Weight: 100, Queue: 4, Concurrency: 8, Fresh: true}, met, 5.25 / 100},
		// With a pace, a request in the batch costs the batch's slowdown.
		{"paced: in the batch, the slowdown", Load{InFlight: 4, Weight: 100, TTFT: 100 * ms, Concurrency: 8, Fresh: true}, Basis{TTFT: true, Metrics: true, Concurrency: true}, 0.1 * (1 + 0.35*4/8) / 100},
		{"paced: a full batch, the slowdown and a wait", Load{InFlight: 8, Weight: 100, Latency: 500 * ms, Concurrency: 8, Fresh: true}, Basis{Latency: true, Metrics: true, Concurrency: true}, 0.5 * 2.35 / 100},
		{"paced: the queue is not scaled", Load{InFlight: 2, Weight: 100, TTFT: 100 * ms, Queue: 4, Concurrency: 8, Fresh: true}, Basis{TTFT: true, Metrics: true, Concurrency: true}, 0.1 * (1 + 0.35*2/8 + 4) / 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Score(tt.l, tt.basis); math.Abs(got-tt.want) > 1e-12 {
				t.Fatalf("Score = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestCompare(t *testing.T) {
	ms := time.Millisecond
	fast := func(in int64) Load { return Load{InFlight: in, Weight: 100, TTFT: 40 * ms} }
	slow := func(in int64) Load { return Load{InFlight: in, Weight: 100, TTFT: 120 * ms} }
	q := func(l Load, n float64) Load { l.Queue, l.Fresh = n, true; return l }
	stale := func(l Load, n float64) Load { l.Queue, l.Fresh = n, false; return l }
	c := func(l Load, b float64) Load { l.Concurrency = b; return l }
	tests := []struct {
		name string
		a, b Load
		want int
	}{
		{"fewer in flight wins", fast(1), fast(3), -1},
		{"tie", fast(2), fast(2), 0},
		{"a 3x slower idle backend loses to a fast one with one in flight", slow(0), fast(1), 1},
		{"and ties with a fast one with two in flight", slow(0), fast(2), 0},
		{"and wins against three", slow(0), fast(3), -1},
		{"no latency sample on one side: in flight only", Load{Weight: 100}, slow(1), -1},
		{"no latency sample does not make a backend free", Load{InFlight: 5, Weight: 100}, slow(1), 1},
		{"fresh queues compared", q(fast(1), 4), q(fast(3), 0), 1},
		{"a stale queue is neutral, not zero", stale(fast(3), 0), q(fast(1), 4), 1},
		{"a stale queue is neutral, not infinite", stale(fast(1), 50), q(fast(3), 0), -1},
		{"missing metrics are neutral", fast(2), q(fast(1), 9), 1},
		{"weight shares the work", Load{InFlight: 3, Weight: 200, TTFT: 40 * ms}, fast(1), 0},
		{"error rate steers away", Load{Weight: 100, TTFT: 40 * ms, ErrorRate: 0.5}, fast(1), 1},
		{"whole-response latency when TTFT is not on both", Load{InFlight: 1, Weight: 100, TTFT: 10 * ms, Latency: 900 * ms},
			Load{InFlight: 1, Weight: 100, Latency: 300 * ms}, 1},
		{"TTFT and whole-response latency are not compared", Load{InFlight: 1, Weight: 100, TTFT: 10 * ms},
			Load{InFlight: 0, Weight: 100, Latency: 300 * ms}, 1},
		// Batching backends of 8: a fast one with free slots beats an
		// idle one three times slower...
		{"a fast batch with free slots beats an idle slow backend", c(q(fast(6), 0), 8), c(q(slow(0), 0), 8), -1},
		// ...until it queues: 40ms x (1 + 0.35 + 2) > 120ms x 1.
		{"until it queues", c(q(fast(9), 2), 8), c(q(slow(0), 0), 8), 1},
		{"one estimate unknown: neither is used", c(q(fast(6), 0), 8), q(slow(0), 0), 1},
		{"stale metrics: the batch size still counts", c(stale(fast(6), 0), 8), c(q(slow(0), 0), 8), -1},
		{"stale metrics: the queue does not", c(stale(fast(6), 5), 8), c(q(slow(0), 0), 8), -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Compare(tt.a, tt.b); got != tt.want {
				t.Fatalf("Compare = %d, want %d", got, tt.want)
			}
			if got := Compare(tt.b, tt.a); got != -tt.want {
				t.Fatalf("Compare reversed = %d, want %d", got, -tt.want)
			}
		})
	}
}

func TestConcurrencyEstimate(t *testing.T) {
	const both = loadmetrics.FieldRunning | loadmetrics.FieldKVCacheUsage
	tests := []struct {
		name string
		m    loadmetrics.BackendMetrics
		want float64
		ok   bool
	}{
		{"simulator: running / (running/MaxBatch)", loadmetrics.BackendMetrics{Running: 3, KVCacheUsage: 3.0 / 8, Has: both}, 8, true},
		{"vLLM: 10 sequences hold 40% of the cache", loadmetrics.BackendMetrics{Running: 10, KVCacheUsage: 0.4, Has: both}, 25, true},
		{"at least 1", loadmetrics.BackendMetrics{Running: 1, KVCacheUsage: 1, Has: both}, 1, true},
		{"nothing running", loadmetrics.BackendMetrics{Running: 0, KVCacheUsage: 0, Has: both}, 0, false},
		{"no KV usage", loadmetrics.BackendMetrics{Running: 2, KVCacheUsage: 0, Has: both}, 0, false},
		{"no running field", loadmetrics.BackendMetrics{Running: 2, KVCacheUsage: 0.5, Has: loadmetrics.FieldKVCacheUsage}, 0, false},
	}
	for _, tt := range tests {
		got, ok := concurrencyEstimate(tt.m)
		if ok != tt.ok || math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("%s: got %v %v, want %v %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}

func TestNextPeak(t *testing.T) {
	tau := 10 * time.Second
	sec := int64(time.Second)
	e := math.Exp(-1)
	tests := []struct {
		name        string
		prev, floor float64
		dt          int64
		rtt, want   float64
	}{
		{"a peak replaces the estimate", 0.1, 0, sec, 0.5, 0.5},
		{"a lower sample pulls it down by 1-exp(-dt/tau)", 0.5, 0, 10 * sec, 0.1, 0.5*e*e + 0.1*(1-e)},
		{"toward the floor", 0.5, 0.2, 10 * sec, 0.1, (0.2+0.3*e)*e + 0.1*(1-e)},
		{"same time: no pull", 0.5, 0, 0, 0.1, 0.5},
		{"equal sample keeps it", 0.2, 0, 0, 0.2, 0.2},
		{"decayed estimate below a sample: the sample", 0.5, 0, 30 * sec, 0.1, 0.1},
		{"decayed to the floor, a sample above it replaces it", 0.5, 0.3, 1000 * sec, 0.35, 0.35},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := nextPeak(tt.prev, tt.floor, tt.dt, tt.rtt, tau); math.Abs(got-tt.want) > 1e-12 {
				t.Fatalf("nextPeak = %v, want %v", got, tt.want)
			}
		})
	}
	for _, tt := range []struct {
		name     string
		v, floor float64
		dt       int64
		tau      time.Duration
		want     float64
	}{
		{"one time constant toward 0", 2, 0, 10 * sec, tau, 2 * e},
		{"one time constant toward the floor", 2, 1, 10 * sec, tau, 1 + e},
		{"long idle: the floor", 2, 1, 1000 * sec, tau, 1},
		{"below the floor: unchanged", 0.5, 1, 10 * sec, tau, 0.5},
		{"no time", 2, 0, 0, tau, 2},
		{"clock went back", 2, 0, -sec, tau, 2},
		{"no decay configured", 2, 0, sec, 0, 2},
	} {
		if got := decayed(tt.v, tt.floor, tt.dt, tt.tau); math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("decayed %s = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestPeakEWMA(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Unix(1000, 0))
	var p peakEWMA
	if got := p.value(fc.Now(), 10*time.Second); got != 0 {
		t.Fatalf("no sample: %v", got)
	}
	p.observe(fc.Now(), 100*time.Millisecond, 10*time.Second)
	p.observe(fc.Now(), 300*time.Millisecond, 10*time.Second)
	if got := p.value(fc.Now(), 10*time.Second); got != 300*time.Millisecond {
		t.Fatalf("after a peak: %v, want 300ms", got)
	}
	// The plain EWMA (alpha 0.3) is 0.3*300 + 0.7*100 = 160ms: idle, the
	// peak decays toward it, not toward 0.
	floor := 160 * time.Millisecond
	fc.Step(10 * time.Second)
	want := floor + time.Duration(float64(140*time.Millisecond)*math.Exp(-1))
	if got := p.value(fc.Now(), 10*time.Second); got < want-time.Microsecond || got > want+time.Microsecond {
		t.Fatalf("after one time constant idle: %v, want %v", got, want)
	}
	fc.Step(time.Hour)
	if got := p.value(fc.Now(), 10*time.Second); got < floor-time.Microsecond || got > floor+time.Microsecond {
		t.Fatalf("after long idle: %v, want the EWMA %v", got, floor)
	}
}

func TestStreamedAndCompleteLatenciesApart(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Unix(1000, 0))
	g, err := New(Options{Clock: fc, ProbeInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	u := newUpstream("a", "p", "127.0.0.1:1", 100, true)
	g.recordSuccess(u, 40*time.Millisecond, true)
	g.recordSuccess(u, 900*time.Millisecond, false)
	if got := u.PeakTTFT(fc.Now(), g.latencyDecay); got != 40*time.Millisecond {
		t.Errorf("PeakTTFT %v, want the streamed sample", got)
	}
	if got := u.PeakLatency(fc.Now(), g.latencyDecay); got != 900*time.Millisecond {
		t.Errorf("PeakLatency %v, want the complete response's", got)
	}
	for _, tt := range []struct {
		ct   string
		want bool
	}{{"application/x-ndjson", true}, {"text/event-stream; charset=utf-8", true}, {"Text/Event-Stream", true},
		{"application/json", false}, {"", false}, {"text/plain", false}} {
		if got := isStream(&http.Response{Header: http.Header{"Content-Type": {tt.ct}}}); got != tt.want {
			t.Errorf("isStream(%q) = %v", tt.ct, got)
		}
	}
}

func TestErrorRate(t *testing.T) {
	u := newUpstream("a", "p", "127.0.0.1:1", 100, true)
	u.observeOutcome(true)
	if got := u.ErrorRate(); math.Abs(got-errAlpha) > 1e-12 {
		t.Fatalf("after one failure: %v", got)
	}
	for range 300 {
		u.observeOutcome(false)
	}
	if got := u.ErrorRate(); got != 0 {
		t.Fatalf("after many successes: %v, want 0", got)
	}
}

// p2cUps returns upstreams with inflight, a latency sample and metrics.
type p2cSpec struct {
	inflight int64
	latency  time.Duration
	queue    float64
	metrics  int // 0 none, 1 fresh, 2 stale
}

func p2cUps(fc *clocktesting.FakeClock, specs ...p2cSpec) []*Upstream {
	ups := make([]*Upstream, len(specs))
	for i, s := range specs {
		u := newUpstream(fmt.Sprint(i), "p", fmt.Sprintf("127.0.0.1:%d", 1000+i), 100, true)
		u.inflight.Store(s.inflight)
		if s.latency > 0 {
			u.ttft.observe(fc.Now(), s.latency, DefaultLatencyDecay)
		}
		switch s.metrics {
		case 1:
			u.ext.Store(&loadmetrics.BackendMetrics{QueueDepth: s.queue, Has: loadmetrics.FieldQueueDepth, ObservedAt: fc.Now()})
		case 2:
			u.ext.Store(&loadmetrics.BackendMetrics{QueueDepth: s.queue, Has: loadmetrics.FieldQueueDepth, ObservedAt: fc.Now().Add(-time.Minute)})
		}
		ups[i] = u
	}
	return ups
}

func TestP2CPick(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Unix(1000, 0))
	ms := time.Millisecond
	tests := []struct {
		name  string
		specs []p2cSpec
		draws []int // successive results of Rand
		want  int
	}{
		{"single candidate: no draw", []p2cSpec{{}}, nil, 0},
		// Draws: i = 0, then j = 1 of the remaining n-1 (skipping i) = index 2.
		{"second draw skips the first", []p2cSpec{{inflight: 5}, {inflight: 0}, {inflight: 1}}, []int{0, 1}, 2},
		{"the lower score of the pair", []p2cSpec{{inflight: 1}, {inflight: 0}, {inflight: 5}}, []int{2, 0}, 0},
		{"the best overall is not drawn", []p2cSpec{{inflight: 1}, {inflight: 0}, {inflight: 5}}, []int{0, 1}, 0},
		{"latency", []p2cSpec{{inflight: 1, latency: 120 * ms}, {inflight: 1, latency: 40 * ms}}, []int{0, 0}, 1},
		{"fresh queue", []p2cSpec{{inflight: 1, queue: 5, metrics: 1}, {inflight: 2, metrics: 1}}, []int{0, 0}, 1},
		{"stale queue ignored", []p2cSpec{{inflight: 1, queue: 5, metrics: 2}, {inflight: 2, metrics: 1}}, []int{0, 0}, 0},
		{"tie: the first drawn", []p2cSpec{{inflight: 1}, {inflight: 1}}, []int{1, 0}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ups := p2cUps(fc, tt.specs...)
			draws := tt.draws
			p := &P2C{Clock: fc, MaxAge: 2 * time.Second, Rand: func(n int) int {
				if len(draws) == 0 {
					t.Fatalf("unexpected Rand(%d)", n)
				}
				v := draws[0]
				draws = draws[1:]
				if v >= n {
					t.Fatalf("draw %d out of [0,%d)", v, n)
				}
				return v
			}}
			if got := p.Pick(ups, nil); got != ups[tt.want] {
				t.Fatalf("picked %s, want %d", got.ID(), tt.want)
			}
			if len(draws) != 0 {
				t.Fatalf("%d draws unused", len(draws))
			}
		})
	}
}

func TestP2CChooseFreeSlotFilter(t *testing.T) {
	ms := time.Millisecond
	// Fresh metrics, batch of 8: fast ones with a free slot or full.
	fastFree := func(in int64) Load {
		return Load{InFlight: in, Weight: 100, TTFT: 40 * ms, Fresh: true, Concurrency: 8}
	}
	slowIdle := Load{Weight: 100, TTFT: 120 * ms, Fresh: true, Concurrency: 8}
	full := fastFree(8)
	queued := fastFree(3)
	queued.Queue = 2 // other clients' requests wait there
	stale := fastFree(0)
	stale.Fresh, stale.Queue = false, 5
	unknown := fastFree(0)
	unknown.Concurrency = 0
	tests := []struct {
		name  string
		loads []Load
		draws []int
		wantN []int // the n of each draw
		want  int
	}{
		{"all full: p2c over all", []Load{full, full, full, full}, []int{1, 2}, []int{4, 3}, 1},
		{"all free: p2c over all", []Load{fastFree(1), fastFree(2), slowIdle}, []int{2, 0}, []int{3, 2}, 0},
		{"only the slow one has a slot: it, without a draw", []Load{full, full, full, slowIdle}, nil, nil, 3},
		{"a queue is no free slot", []Load{queued, full, slowIdle}, nil, nil, 2},
		{"drawn among the free ones", []Load{full, fastFree(7), full, slowIdle}, []int{1, 0}, []int{2, 1}, 1},
		{"one without a batch size: no filter, a full one may win", []Load{full, full, unknown, slowIdle}, []int{0, 0}, []int{4, 3}, 0},
		{"stale metrics: the batch size and in flight decide", []Load{full, full, stale, slowIdle}, []int{0, 0}, []int{2, 1}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			draws, ns := tt.draws, tt.wantN
			slots := make([]uint8, len(tt.loads))
			for i, l := range tt.loads {
				slots[i] = hasSlot(l)
			}
			got := p2cChoose(slots, func(i int) Load { return tt.loads[i] }, func(n int) int {
				if len(draws) == 0 {
					t.Fatalf("unexpected draw over %d", n)
				}
				if n != ns[0] {
					t.Fatalf("draw over %d, want %d", n, ns[0])
				}
				v := draws[0]
				draws, ns = draws[1:], ns[1:]
				return v
			})
			if got != tt.want {
				t.Fatalf("chose %d, want %d", got, tt.want)
			}
			if len(draws) != 0 {
				t.Fatalf("%d draws unused", len(draws))
			}
		})
	}
}

// TestP2CSharesUnderStaleMetrics places 200 requests (none finishing) on
// four backends whose metrics say: three have 500 queued, the first has
// none. If the first's metrics are fresh it wins every pair it is drawn in
// (half of them with four backends); if they are stale or missing it must
// get about its share, not everything.
func TestP2CSharesUnderStaleMetrics(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Unix(1000, 0))
	for _, tc := range []struct {
		name     string
		metrics  int // of backend 0: 1 fresh, 2 stale, 0 missing
		min, max int // of the 40 picks on backend 0
	}{
		{"fresh: the idle backend wins its pairs", 1, 85, 115},
		{"stale: a fair share", 2, 35, 65},
		{"missing: a fair share", 0, 35, 65},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ups := p2cUps(fc,
				p2cSpec{metrics: tc.metrics, latency: 40 * time.Millisecond},
				p2cSpec{queue: 500, metrics: 1, latency: 40 * time.Millisecond},
				p2cSpec{queue: 500, metrics: 1, latency: 40 * time.Millisecond},
				p2cSpec{queue: 500, metrics: 1, latency: 40 * time.Millisecond},
			)
			p := &P2C{Clock: fc, MaxAge: 2 * time.Second, Rand: rand.New(rand.NewPCG(1, 2)).IntN}
			got := 0
			for range 200 {
				u := p.Pick(ups, nil)
				u.inflight.Add(1)
				if u == ups[0] {
					got++
				}
			}
			if got < tc.min || got > tc.max {
				t.Fatalf("backend 0 got %d of 200 picks, want %d..%d", got, tc.min, tc.max)
			}
		})
	}
}

func TestWeightedPick(t *testing.T) {
	ups := mkUps(upSpec{weight: 10}, upSpec{weight: 30}, upSpec{weight: 60})
	for _, tt := range []struct {
		draw int64
		want int
	}{{0, 0}, {9, 0}, {10, 1}, {39, 1}, {40, 2}, {99, 2}} {
		p := &Weighted{Rand: func(n int64) int64 {
			if n != 100 {
				t.Fatalf("Rand(%d), want 100", n)
			}
			return tt.draw
		}}
		if got := p.Pick(ups, nil); got != ups[tt.want] {
			t.Errorf("draw %d picked %s, want %d", tt.draw, got.ID(), tt.want)
		}
	}
	counts := map[string]int{}
	p := &Weighted{}
	const n = 20000
	for range n {
		counts[p.Pick(ups, nil).ID()]++
	}
	if c := counts["2"]; c < n*56/100 || c > n*64/100 {
		t.Errorf("weight-60 backend got %d of %d, want ~60%%", c, n)
	}
}

func TestChooseVersion(t *testing.T) {
	split := []VersionWeight{{"v1", 90}, {"v2", 10}}
	all := func(string) bool { return true }
	only := func(v string) func(string) bool { return func(x string) bool { return x == v } }
	tests := []struct {
		name   string
		split  []VersionWeight
		has    func(string) bool
		draw   int
		wantN  int // the n Rand must be called with; 0: not called
		want   string
		wantOK bool
	}{
		{"first share", split, all, 0, 100, "v1", true},
		{"end of the first share", split, all, 89, 100, "v1", true},
		{"second share", split, all, 90, 100, "v2", true},
		{"a version without candidates gives its share away", split, only("v1"), 5, 90, "v1", true},
		{"only the small version left", split, only("v2"), 9, 10, "v2", true},
		{"no version has candidates", split, func(string) bool { return false }, 0, 0, "", false},
		{"zero weights are skipped", []VersionWeight{{"v1", 0}, {"v2", 5}}, all, 4, 5, "v2", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := chooseVersion(tt.split, tt.has, func(n int) int {
				if n != tt.wantN {
					t.Fatalf("draw over %d, want %d", n, tt.wantN)
				}
				return tt.draw
			})
			if got != tt.want || ok != tt.wantOK {
				t.Fatalf("got %q %v, want %q %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

// TestLeastCostOnScore: the load-only pick of the default (leastCost over
// Score) on pools like the routing benchmark's. A request goes to a slower
// idle backend only when the fast ones would queue, whatever the slow
// factor (2x, 3x), and the batch size (6, 8); missing signals are neutral.
func TestLeastCostOnScore(t *testing.T) {
	ms := time.Millisecond
	be := func(ttft time.Duration, in int64, b float64) Load {
		return Load{InFlight: in, Weight: 100, TTFT: ttft, Concurrency: b, Fresh: true}
	}
	fast := func(in int64, b float64) Load { return be(40*ms, in, b) }
	tests := []struct {
		name  string
		loads []Load
		want  int
	}{
		{"a fast backend with one in flight beats an idle 2x slower one", []Load{fast(1, 6), be(80*ms, 0, 6)}, 0},
		{"with five of six", []Load{fast(5, 6), be(80*ms, 0, 6)}, 0},
		{"a full batch spills to the 2x slower one", []Load{fast(6, 6), be(80*ms, 0, 6)}, 1},
		{"every fast one full: the 2x slower one", []Load{fast(6, 6), fast(6, 6), fast(7, 6), be(80*ms, 2, 6), be(80*ms, 3, 6)}, 3},
		{"the 2x slower one full too: the fast one queues", []Load{fast(6, 6), be(80*ms, 6, 6)}, 0},
		{"3x slower: seven of eight", []Load{fast(7, 8), fast(7, 8), fast(7, 8), be(120*ms, 0, 8)}, 0},
		{"3x slower: saturation spills", []Load{fast(8, 8), fast(8, 8), fast(8, 8), be(120*ms, 0, 8)}, 3},
		{"equal backends: the fewest in flight", []Load{fast(3, 8), fast(1, 8), fast(2, 8)}, 1},
		// Missing signals: what is not known of all is not used.
		{"no batch size on one: in flight times pace", []Load{be(40*ms, 2, 0), be(80*ms, 0, 6)}, 1},
		{"no latency sample on one: work only, a full batch one unit", []Load{fast(3, 6), be(0, 0, 6)}, 1},
		{"nothing known but in flight", []Load{be(0, 4, 0), be(0, 1, 0)}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			basis := commonBasis(tt.loads)
			costs := make([]float64, len(tt.loads))
			in := make([]int64, len(tt.loads))
			for i, l := range tt.loads {
				costs[i], in[i] = Score(l, basis), l.InFlight
			}
			if got := leastCost(costs, in, func(int) int { return 1 }); got != tt.want { // ties keep the first
				t.Fatalf("picked %d, want %d (costs %v)", got, tt.want, costs)
			}
		})
	}
}

// TestBackendSignalsAge: a backend's signals are as old as the time since
// they were read, and never less than 0 s, even when the read landed after
// the instant the status was taken at (a scrape between Status's clock
// reading and its load of the backend's metrics).
func TestBackendSignalsAge(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	for _, tc := range []struct {
		name     string
		observed time.Time
		want     float64
	}{
		{"read before", now.Add(-1500 * time.Millisecond), 1.5},
		{"read at the instant", now, 0},
		{"read after", now.Add(3 * time.Millisecond), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := New(Options{ProbeInterval: -1, WaitForBackend: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			u := &Upstream{}
			u.ext.Store(&loadmetrics.BackendMetrics{ObservedAt: tc.observed})
			if s := g.backendSignals(u, now); s.Age != tc.want {
				t.Fatalf("Age = %v, want %v", s.Age, tc.want)
			}
		})
	}
}
