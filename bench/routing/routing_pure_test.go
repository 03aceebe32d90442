package routingbench

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func TestBackendLatencyAndCapacity(t *testing.T) {
	ms := time.Millisecond
	fast := Backend{TTFT: 40 * ms, TokenTime: 20 * ms, BatchSlowdown: 0.05, MaxBatch: 8}
	slow := fast
	slow.SlowFactor = 3
	tests := []struct {
		name    string
		b       Backend
		n, k    int
		wantLat time.Duration
	}{
		{"one token is the prefill", fast, 1, 1, 40 * ms},
		{"alone", fast, 16, 1, 40*ms + 15*20*ms},
		{"full batch slows tokens by 35%", fast, 16, 8, 40*ms + time.Duration(15*20*1.35*float64(ms))},
		{"slow factor multiplies all", slow, 16, 8, 3 * (40*ms + time.Duration(15*20*1.35*float64(ms)))},
		{"k below 1 counts as 1", fast, 16, 0, 40*ms + 15*20*ms},
	}
	for _, tt := range tests {
		if got := tt.b.Latency(tt.n, tt.k); got != tt.wantLat {
			t.Errorf("%s: Latency = %v, want %v", tt.name, got, tt.wantLat)
		}
	}
	// 8 / 0.445 s and 8 / 1.335 s.
	if got := fast.Capacity(16); math.Abs(got-8/0.445) > 1e-6 {
		t.Errorf("fast capacity %v", got)
	}
	if got := PoolCapacity([]Backend{fast, fast, fast, slow}, 16); math.Abs(got-(3*8/0.445+8/1.335)) > 1e-6 {
		t.Errorf("pool capacity %v", got)
	}
}

func TestSchedule(t *testing.T) {
	a := Schedule(50, 20*time.Second, 0.5, 7)
	b := Schedule(50, 20*time.Second, 0.5, 7)
	if len(a) != len(b) || a[len(a)/2] != b[len(b)/2] {
		t.Fatal("same seed, different schedules")
	}
	if c := Schedule(50, 20*time.Second, 0.5, 8); len(c) == len(a) && c[0] == a[0] {
		t.Error("different seeds, same schedule")
	}
	// 1000 expected; Poisson sd ~32.
	if len(a) < 880 || len(a) > 1120 {
		t.Errorf("%d arrivals in 20s at 50/s", len(a))
	}
	streams := 0
	for i, x := range a {
		if x.At < 0 || x.At >= 20*time.Second || (i > 0 && x.At < a[i-1].At) {
			t.Fatalf("arrival %d at %v out of order or range", i, x.At)
		}
		if x.Stream {
			streams++
		}
	}
	if streams < len(a)*40/100 || streams > len(a)*60/100 {
		t.Errorf("%d of %d streaming, want about half", streams, len(a))
	}
	if Schedule(0, time.Second, 0.5, 1) != nil || Schedule(1, 0, 0.5, 1) != nil {
		t.Error("empty schedule expected")
	}
}

func TestPercentile(t *testing.T) {
	xs := []time.Duration{5, 1, 4, 2, 3, 6, 7, 8, 9, 10}
	for _, tt := range []struct {
		p    float64
		want time.Duration
	}{{50, 5}, {99, 10}, {10, 1}, {11, 2}, {100, 10}, {0.1, 1}} {
		if got := Percentile(xs, tt.p); got != tt.want {
			t.Errorf("p%v = %v, want %v", tt.p, got, tt.want)
		}
	}
	if xs[0] != 5 {
		t.Error("input sorted in place")
	}
	if Percentile(nil, 50) != 0 {
		t.Error("empty")
	}
}

func TestHAProxyConfig(t *testing.T) {
	c := HAProxyConfig("127.0.0.1:9000", []string{"127.0.0.1:1", "127.0.0.1:2"})
	for _, want := range []string{"bind 127.0.0.1:9000", "balance leastconn", "server s0 127.0.0.1:1\n", "server s1 127.0.0.1:2\n", "mode http", "option http-no-delay"} {
		if !strings.Contains(c, want) {
			t.Errorf("config lacks %q:\n%s", want, c)
		}
	}
}

func TestGoalRatio(t *testing.T) {
	b := func(f float64) Backend { return Backend{SlowFactor: f} }
	tests := []struct {
		name string
		bs   []Backend
		want float64
	}{
		{"the issue's pool: one 3x slower", []Backend{b(1), b(1), b(1), b(3)}, 2},
		{"held-out: two 2x slower, 2x is the best possible", []Backend{b(1), b(2), b(1), b(1), b(2)}, 1.7},
		{"second held-out: the slowest decides", []Backend{b(1), b(1.4), b(1), b(4), b(1), b(1)}, 2},
		{"unset slow factor is 1", []Backend{{}, b(2)}, 1.7},
		{"all equal: no slow backend to avoid", []Backend{b(1), b(1)}, 0.85},
		{"empty", nil, 2},
	}
	for _, tt := range tests {
		if got := GoalRatio(tt.bs); math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("%s: GoalRatio = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestRatioAndMillis(t *testing.T) {
	tests := []struct {
		a, b time.Duration
		want float64
	}{
		{600 * time.Millisecond, 120 * time.Millisecond, 5},
		{time.Second, 0, 0},
		{time.Second, -time.Second, 0},
		{0, time.Second, 0},
	}
	for _, tt := range tests {
		if got := Ratio(tt.a, tt.b); got != tt.want {
			t.Errorf("Ratio(%v, %v) = %v, want %v", tt.a, tt.b, got, tt.want)
		}
	}
	for d, want := range map[time.Duration]string{1499 * time.Microsecond: "1 ms", 1500 * time.Microsecond: "2 ms", 0: "0 ms", 2 * time.Second: "2000 ms"} {
		if got := Millis(d); got != want {
			t.Errorf("Millis(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestGoalRowAndShortSchedule(t *testing.T) {
	tests := []struct {
		name string
		load float64
		want bool
	}{
		{rowRR, 0.3, true},
		{rowDefault, 0.3, true},
		{rowHAProxy, 0.3, true},
		{rowP2C, 0.3, false}, // the p2c goal starts at 70 %
		{rowP2C, 0.7, true},
		{"least-request", 0.7, false},
		{"prefix-aware + Prometheus, killed after warm-up", 0.7, false},
	}
	for _, tt := range tests {
		if got := goalRow(tt.name, tt.load); got != tt.want {
			t.Errorf("goalRow(%q, %v) = %t, want %t", tt.name, tt.load, got, tt.want)
		}
	}
	// The smoke rows' schedule is the start of the full one.
	full := Schedule(42, 23*time.Second, 0.5, 7)
	short := Schedule(42, 8*time.Second, 0.5, 7)
	if len(short) == 0 || len(short) >= len(full) {
		t.Fatalf("short schedule %d arrivals, full %d", len(short), len(full))
	}
	for i, a := range short {
		if a != full[i] {
			t.Fatalf("arrival %d: short %+v, full %+v", i, a, full[i])
		}
	}
}

func TestPercentileRatioInterval(t *testing.T) {
	ms := func(vs ...int) []time.Duration {
		out := make([]time.Duration, len(vs))
		for i, v := range vs {
			out[i] = time.Duration(v) * time.Millisecond
		}
		return out
	}
	// n fast requests and k slow ones whose latencies spread over
	// [base, base+spread): the shape of the routing bench's samples.
	shape := func(n, k int, base, spread int, seed uint64) []time.Duration {
		rng := rand.New(rand.NewPCG(seed, 1))
		out := make([]time.Duration, 0, n+k)
		for range n {
			out = append(out, time.Duration(400+rng.IntN(40))*time.Millisecond)
		}
		for range k {
			out = append(out, time.Duration(base+rng.IntN(spread))*time.Millisecond)
		}
		return out
	}
	same1, same2 := shape(840, 30, 1100, 200, 1), shape(840, 32, 1100, 200, 2)
	worse := shape(840, 30, 1500, 200, 3)
	cases := []struct {
		name         string
		a, b         []time.Duration
		wantLoAbove  float64 // lo > this
		wantLoBelow  float64 // lo < this
		wantHiAbove  float64
		wantZeroOnly bool
	}{
		{name: "empty a", a: nil, b: ms(1, 2), wantZeroOnly: true},
		{name: "empty b", a: ms(1, 2), b: nil, wantZeroOnly: true},
		{name: "identical constant samples", a: ms(5, 5, 5, 5), b: ms(5, 5, 5, 5), wantLoAbove: 0.999, wantLoBelow: 1.001, wantHiAbove: 0.999},
		// Two draws of one distribution: the interval holds 1, and its
		// low end is nowhere near a 5 % goal.
		{name: "same distribution, two draws", a: same1, b: same2, wantLoAbove: 0.8, wantLoBelow: 1.0, wantHiAbove: 1.0},
		// A slow tail 36 % slower is told apart from noise.
		{name: "slow tail clearly worse", a: worse, b: same1, wantLoAbove: 1.05, wantLoBelow: 2, wantHiAbove: 1.2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			lo, hi := PercentileRatioInterval(c.a, c.b, 99, 90, 7)
			t.Logf("p99 ratio interval [%.3f, %.3f]", lo, hi)
			if c.wantZeroOnly {
				if lo != 0 || hi != 0 {
					t.Fatalf("got %v, %v; want 0, 0", lo, hi)
				}
				return
			}
			if lo > hi {
				t.Fatalf("lo %v > hi %v", lo, hi)
			}
			if !(lo > c.wantLoAbove && lo < c.wantLoBelow) || !(hi > c.wantHiAbove) {
				t.Fatalf("interval [%.3f, %.3f]: want lo in (%v, %v), hi > %v", lo, hi, c.wantLoAbove, c.wantLoBelow, c.wantHiAbove)
			}
			// The same samples and seed give the same interval.
			if lo2, hi2 := PercentileRatioInterval(c.a, c.b, 99, 90, 7); lo2 != lo || hi2 != hi {
				t.Fatalf("not reproducible: [%v, %v] then [%v, %v]", lo, hi, lo2, hi2)
			}
		})
	}
}
