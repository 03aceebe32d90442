package stall

import (
	"testing"
	"time"
)

func TestLate(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, c := range []struct {
		name   string
		gap    time.Duration
		period time.Duration
		want   time.Duration
	}{
		{"on time", 10 * time.Millisecond, 10 * time.Millisecond, 0},
		{"early (a ticker's jitter)", 9 * time.Millisecond, 10 * time.Millisecond, 0},
		{"a little late", 13 * time.Millisecond, 10 * time.Millisecond, 3 * time.Millisecond},
		{"a host stall", 1210 * time.Millisecond, 10 * time.Millisecond, 1200 * time.Millisecond},
		{"clock went back", -time.Second, 10 * time.Millisecond, 0},
	} {
		if got := Late(t0, t0.Add(c.gap), c.period); got != c.want {
			t.Errorf("%s: Late = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestWatchKeepsTheWorst feeds wake-up times to a watch (its goroutine
// stopped first, so only these count).
func TestWatchKeepsTheWorst(t *testing.T) {
	w := Start(time.Hour)
	w.Stop()
	t0 := time.Unix(1000, 0)
	w.worst, w.last = 0, t0
	for _, gap := range []time.Duration{time.Hour, time.Hour + 300*time.Millisecond, time.Hour + 5*time.Millisecond, time.Hour} {
		t0 = t0.Add(gap)
		w.tick(t0)
	}
	if got := w.Worst(); got != 300*time.Millisecond {
		t.Fatalf("Worst = %v, want 300ms", got)
	}
}

// TestWatchRuns checks the real goroutine: a watch stopped at once saw no
// stall of a second.
func TestWatchRuns(t *testing.T) {
	w := Start(time.Millisecond)
	if got := w.Stop(); got >= time.Second {
		t.Fatalf("an idle watch saw a stall of %v", got)
	}
}
