package sim

import (
	"math"
	"reflect"
	"testing"
	"time"
)

func TestTimePerOutputToken(t *testing.T) {
	base := Config{TokenTime: 10 * time.Millisecond, BatchSlowdown: 0.1, SlowFactor: 1}
	tests := []struct {
		name    string
		cfg     Config
		running int
		want    time.Duration
	}{
		{"one sequence", base, 1, 10 * time.Millisecond},
		{"zero running counts as one", base, 0, 10 * time.Millisecond},
		{"negative running counts as one", base, -5, 10 * time.Millisecond},
		{"two sequences", base, 2, 11 * time.Millisecond},
		{"eight sequences", base, 8, 17 * time.Millisecond},
		{"slow factor", Config{TokenTime: 10 * time.Millisecond, BatchSlowdown: 0.1, SlowFactor: 2}, 3, 24 * time.Millisecond},
		{"no slowdown", Config{TokenTime: 5 * time.Millisecond, BatchSlowdown: 0, SlowFactor: 1}, 100, 5 * time.Millisecond},
		{"zero token time", Config{TokenTime: 0, BatchSlowdown: 1, SlowFactor: 1}, 4, 0},
		{"defaults", Config{}.withDefaults(), 8, time.Duration(float64(5*time.Millisecond) * 1.35)},
		{"saturates", Config{TokenTime: time.Hour, BatchSlowdown: 1e300, SlowFactor: 1}, 1000, math.MaxInt64},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := timePerOutputToken(tt.cfg, tt.running); got != tt.want {
				t.Errorf("timePerOutputToken(running=%d) = %v, want %v", tt.running, got, tt.want)
			}
		})
	}
}

func TestTimePerOutputTokenMonotonic(t *testing.T) {
	cfg := Config{}.withDefaults()
	prev := time.Duration(0)
	for running := 1; running <= 64; running++ {
		got := timePerOutputToken(cfg, running)
		if got < prev {
			t.Fatalf("tpot(%d) = %v < tpot(%d) = %v", running, got, running-1, prev)
		}
		prev = got
	}
}

func TestTimeToFirstToken(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want time.Duration
	}{
		{"base", Config{TTFT: 20 * time.Millisecond, SlowFactor: 1}, 20 * time.Millisecond},
		{"slow factor", Config{TTFT: 20 * time.Millisecond, SlowFactor: 2.5}, 50 * time.Millisecond},
		{"zero", Config{TTFT: 0, SlowFactor: 3}, 0},
		{"defaults", Config{}.withDefaults(), DefaultTTFT},
		{"explicit zero", Config{TTFT: -1}.withDefaults(), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := timeToFirstToken(tt.cfg); got != tt.want {
				t.Errorf("timeToFirstToken = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestExpectedLatency(t *testing.T) {
	cfg := Config{TTFT: 20 * time.Millisecond, TokenTime: 5 * time.Millisecond, BatchSlowdown: 0.2, SlowFactor: 1}
	tests := []struct {
		running, n int
		want       time.Duration
	}{
		{1, 0, 20 * time.Millisecond},
		{1, 1, 20 * time.Millisecond},
		{1, 2, 25 * time.Millisecond},
		{1, 11, 70 * time.Millisecond},
		{3, 11, 90 * time.Millisecond}, // tpot 7ms
	}
	for _, tt := range tests {
		if got := expectedLatency(cfg, tt.running, tt.n); got != tt.want {
			t.Errorf("expectedLatency(running=%d, n=%d) = %v, want %v", tt.running, tt.n, got, tt.want)
		}
	}
}

func TestSmooth(t *testing.T) {
	tau := time.Second
	tests := []struct {
		name            string
		prev, target    float64
		elapsed, tau    time.Duration
		want, tolerance float64
	}{
		{"no time passed", 0.2, 1, 0, tau, 0.2, 0},
		{"one time constant", 0, 1, tau, tau, 1 - math.Exp(-1), 1e-12},
		{"long after", 0, 1, 100 * tau, tau, 1, 1e-12},
		{"decays", 1, 0, tau, tau, math.Exp(-1), 1e-12},
		{"steady", 0.5, 0.5, tau, tau, 0.5, 0},
		{"no smoothing", 0.1, 0.7, time.Millisecond, 0, 0.7, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := smooth(tt.prev, tt.target, tt.elapsed, tt.tau)
			if math.Abs(got-tt.want) > tt.tolerance {
				t.Errorf("smooth = %v, want %v", got, tt.want)
			}
		})
	}
	// Two half steps equal one full step: the average is exact for
	// piecewise-constant input.
	a := smooth(smooth(0, 1, tau/2, tau), 1, tau/2, tau)
	b := smooth(0, 1, tau, tau)
	if math.Abs(a-b) > 1e-12 {
		t.Errorf("two half steps = %v, one step = %v", a, b)
	}
}

func TestPromptTokenEstimate(t *testing.T) {
	for _, tt := range []struct{ bytes, want int }{
		{-1, 1}, {0, 1}, {1, 1}, {4, 1}, {5, 2}, {8, 2}, {400, 100}, {401, 101},
	} {
		if got := promptTokenEstimate(tt.bytes); got != tt.want {
			t.Errorf("promptTokenEstimate(%d) = %d, want %d", tt.bytes, got, tt.want)
		}
	}
}

func TestConfigDefaults(t *testing.T) {
	got := Config{}.withDefaults()
	want := Config{
		Models: []string{DefaultModel}, TTFT: DefaultTTFT, TokenTime: DefaultTokenTime,
		BatchSlowdown: DefaultBatchSlowdown, MaxBatch: DefaultMaxBatch, MaxQueue: 0,
		OutputTokens: DefaultOutputTokens, SlowFactor: DefaultSlowFactor,
	}
	if !equalConfig(got, want) {
		t.Errorf("defaults = %+v, want %+v", got, want)
	}

	got = Config{
		Models: []string{" a ", "", "b", "a"}, TTFT: -1, TokenTime: -1, BatchSlowdown: -1,
		MaxBatch: -3, MaxQueue: -2, OutputTokens: MaxOutputTokens + 1, SlowFactor: math.NaN(),
		InstanceID: "i",
	}.withDefaults()
	want = Config{
		Models: []string{"a", "b"}, TTFT: 0, TokenTime: 0, BatchSlowdown: 0,
		MaxBatch: DefaultMaxBatch, MaxQueue: 0, OutputTokens: MaxOutputTokens, SlowFactor: 1,
		InstanceID: "i",
	}
	if !equalConfig(got, want) {
		t.Errorf("normalized = %+v, want %+v", got, want)
	}
}

func equalConfig(a, b Config) bool {
	return reflect.DeepEqual(a, b)
}
