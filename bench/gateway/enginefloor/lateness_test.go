package main

import (
	"testing"
	"time"
)

func TestLatenessSummary(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		d := make([]time.Duration, len(v))
		for i, x := range v {
			d[i] = time.Duration(x) * time.Millisecond
		}
		return d
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = 100 - i // 100 .. 1, unsorted
	}
	for _, tc := range []struct {
		name          string
		in            []time.Duration
		p50, p99, max time.Duration
	}{
		{"none", nil, 0, 0, 0},
		{"one", ms(7), 7 * time.Millisecond, 7 * time.Millisecond, 7 * time.Millisecond},
		{"two", ms(9, 1), 1 * time.Millisecond, 9 * time.Millisecond, 9 * time.Millisecond},
		{"three", ms(3, 1, 2), 2 * time.Millisecond, 3 * time.Millisecond, 3 * time.Millisecond},
		{"a hundred", ms(hundred...), 50 * time.Millisecond, 99 * time.Millisecond, 100 * time.Millisecond},
	} {
		p50, p99, max := latenessSummary(tc.in)
		if p50 != tc.p50 || p99 != tc.p99 || max != tc.max {
			t.Errorf("%s: got %v %v %v, want %v %v %v", tc.name, p50, p99, max, tc.p50, tc.p99, tc.max)
		}
	}
}
