package sim

import (
	"bytes"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
)

func TestSettled(t *testing.T) {
	for _, tc := range []struct {
		name           string
		v, target, tol float64
		want           float64
	}{
		{"far: the smoothed value", 0.3, 0, 0.005, 0.3},
		{"a tail under the tolerance reads the target", 1e-9, 0, 0.005, 0},
		{"from below too", 0.4999, 0.5, 0.005, 0.5},
		{"at the tolerance: not yet", 0.005, 0, 0.005, 0.005},
		{"on target", 0.125, 0.125, 0.005, 0.125},
		{"no tolerance: the smoothed value", 1e-12, 0, 0, 1e-12},
	} {
		if got := settled(tc.v, tc.target, tc.tol); got != tc.want {
			t.Errorf("%s: settled(%v, %v, %v) = %v, want %v", tc.name, tc.v, tc.target, tc.tol, got, tc.want)
		}
	}
}

// exposition is the text a scrape of m's registry gets.
func exposition(t *testing.T, m *metrics) string {
	t.Helper()
	mfs, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

func TestIdleExpositionDoesNotChange(t *testing.T) {
	// After the last request the utilization decays, and then reads 0
	// exactly, as an idle GPU's meter does: the exposition of an idle
	// simulator is the same at every scrape, so a scraper that skips an
	// unchanged answer can skip it (a vLLM at rest repeats its
	// exposition too: its gauges are counts and cache fractions).
	now := time.Date(2026, 12, 2, 11, 0, 0, 0, time.UTC)
	cfg := Config{}.withDefaults()
	m := newMetrics(cfg, func() time.Time { return now })
	model := cfg.Models[0]
	m.loadChanged(model, load{running: 4}, load{running: 4})
	now = now.Add(10 * time.Second)
	if u := m.utilization(); u != 0.5 {
		t.Fatalf("utilization after 10 s at 4 of 8 slots = %v, want 0.5 exactly", u)
	}
	m.loadChanged(model, load{}, load{})
	now = now.Add(time.Second)
	if u := m.utilization(); !(u > 0.1 && u < 0.5) {
		t.Fatalf("utilization 1 s after the last request = %v, want decaying from 0.5", u)
	}
	now = now.Add(5 * time.Second) // 6 time constants: 0.5·e⁻⁶ ≈ 0.0012
	if u := m.utilization(); u != 0 {
		t.Fatalf("utilization 6 s after the last request = %v, want 0", u)
	}
	first := exposition(t, m)
	for range 3 {
		now = now.Add(5 * time.Second)
		if got := exposition(t, m); got != first {
			t.Fatalf("the idle exposition changed after %v:\n%s\nwas:\n%s", now, got, first)
		}
	}
}
