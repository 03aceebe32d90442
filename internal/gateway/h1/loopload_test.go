package h1

import (
	"testing"
	"time"
)

func TestPickLoop(t *testing.T) {
	for _, tc := range []struct {
		name  string
		loads []float64
		max   int
		want  int
	}{
		{"none running: start the first", nil, 4, 0},
		{"none running, one core: start it", nil, 1, 0},
		{"the first has room", []float64{0.2}, 4, 0},
		{"the first is busy, the second has room", []float64{0.7, 0.3}, 4, 1},
		{"the first has room again: packed back onto it", []float64{0.49, 0.1}, 4, 0},
		{"at the bound is busy", []float64{loopBusy}, 4, 1},
		{"all busy, room for another", []float64{0.9, 0.6}, 4, 2},
		{"all busy, one per core: the least busy", []float64{0.9, 0.6, 0.95}, 3, 1},
		{"one core, busy: stays on it", []float64{1}, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := pickLoop(tc.loads, tc.max); got != tc.want {
				t.Fatalf("pickLoop(%v, %d) = %d, want %d", tc.loads, tc.max, got, tc.want)
			}
		})
	}
}

func TestLoopMeter(t *testing.T) {
	ms := int64(time.Millisecond)
	type turn struct{ t0, t1 int64 }
	for _, tc := range []struct {
		name   string
		turns  []turn
		share  float64 // of the last window closed
		closed int     // windows closed
	}{
		{"no turn", nil, 0, 0},
		{"a window not yet full", []turn{{1, 10 * ms}, {50 * ms, 60 * ms}}, 0, 0},
		{"30 ms busy of 101", []turn{{1, 10 * ms}, {50 * ms, 60 * ms}, {90 * ms, 95 * ms}, {96 * ms, 101 * ms}}, float64(30*ms-1) / float64(101*ms-1), 1},
		{"a turn longer than the window", []turn{{1, 250 * ms}}, 1, 1},
		{"two windows: the second's share", []turn{{1, 100*ms + 1}, {150 * ms, 160 * ms}, {190 * ms, 201 * ms}}, float64(21*ms) / float64(101*ms-1), 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m loopMeter
			var share float64
			closed := 0
			for _, x := range tc.turns {
				if s, ok := m.record(x.t0, x.t1); ok {
					share, closed = s, closed+1
				}
			}
			if closed != tc.closed || diff(share, tc.share) > 0.001 {
				t.Fatalf("%d windows closed, last share %.4f; want %d, %.4f", closed, share, tc.closed, tc.share)
			}
		})
	}
}

func diff(a, b float64) float64 {
	if a > b {
		return a - b
	}
	return b - a
}

func TestShareAt(t *testing.T) {
	w := int64(loopWindow)
	for _, tc := range []struct {
		name    string
		share   float64
		at, now int64
		want    float64
	}{
		{"no window closed yet", 0.8, 0, 5 * w, 0},
		{"just closed", 0.8, 10 * w, 10 * w, 0.8},
		{"closed within two windows", 0.8, 10 * w, 12 * w, 0.8},
		{"none closed for more than two windows: idle", 0.8, 10 * w, 12*w + 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := shareAt(tc.share, tc.at, tc.now); got != tc.want {
				t.Fatalf("shareAt(%v, %d, %d) = %v, want %v", tc.share, tc.at, tc.now, got, tc.want)
			}
		})
	}
}
