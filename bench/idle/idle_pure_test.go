package idlebench

import (
	"strings"
	"testing"
	"time"
)

func TestCPUPercent(t *testing.T) {
	for _, tt := range []struct {
		ticks int64
		d     time.Duration
		want  float64
	}{
		{0, 30 * time.Second, 0},
		{1, 10 * time.Second, 0.1}, // one tick is 10 ms
		{6, 30 * time.Second, 0.2},
		{100, time.Second, 100},
		{5, 0, 0},
	} {
		if got := CPUPercent(tt.ticks, tt.d); got < tt.want-1e-9 || got > tt.want+1e-9 {
			t.Errorf("CPUPercent(%d, %v) = %v, want %v", tt.ticks, tt.d, got, tt.want)
		}
	}
}

func TestWithChecks(t *testing.T) {
	cfg := "backend be\n    balance leastconn\n    server s0 127.0.0.1:1\n    server s1 127.0.0.1:2\n"
	got := WithChecks(cfg, time.Second)
	for _, want := range []string{"option httpchk GET /", "server s0 127.0.0.1:1 check inter 1000ms", "server s1 127.0.0.1:2 check inter 1000ms"} {
		if !strings.Contains(got, want) {
			t.Errorf("WithChecks lacks %q:\n%s", want, got)
		}
	}
}

func TestSpan(t *testing.T) {
	for _, tt := range []struct {
		vs   []float64
		want string
	}{
		{nil, "—"},
		{[]float64{0.1}, "0.100 (1)"},
		{[]float64{0.3, 0.1, 0.2}, "0.100–0.300 (3)"},
	} {
		if got := Span(tt.vs, "%.3f"); got != tt.want {
			t.Errorf("Span(%v) = %q, want %q", tt.vs, got, tt.want)
		}
	}
}
