package engine

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/tidegpu/tidegpu/internal/autoscale"
)

// fixedSignals is a signal source with a fixed answer.
type fixedSignals struct {
	source, reason string
	fallback, ok   bool
	gaps           []string
}

func (f fixedSignals) Observe(string, time.Time) []autoscale.Observation { return nil }
func (f fixedSignals) SignalHealth(string) (string, bool, string, bool) {
	return f.source, f.fallback, f.reason, f.ok
}
func (f fixedSignals) SignalGaps(string) []string { return f.gaps }

func TestBalancingSignalsCondition(t *testing.T) {
	for _, tc := range []struct {
		name   string
		sig    fixedSignals
		status metav1.ConditionStatus
		reason string
		msg    []string
	}{
		{"unknown: no condition", fixedSignals{}, "", "", nil},
		{"all fresh", fixedSignals{source: "scrape", reason: "2 of 2 backends with fresh metrics", ok: true},
			metav1.ConditionTrue, "BackendMetrics", []string{"scrape", "2 of 2"}},
		{"one backend missing, named", fixedSignals{source: "prometheus", reason: "1 of 2", ok: true, gaps: []string{"i-2"}},
			metav1.ConditionFalse, "MissingBackendMetrics", []string{"i-2", "prometheus"}},
		{"all missing: the gateway's own", fixedSignals{source: "gateway", fallback: true, reason: "0 of 2; source error: x", ok: true},
			metav1.ConditionFalse, "GatewayFallback", []string{"source error: x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPool("ns/p", &deps{signals: tc.sig, clock: clocktesting.NewFakeClock(time.Unix(0, 0))})
			p.noteSignals()
			c := meta.FindStatusCondition(p.status.Conditions, ConditionBalancingSignals)
			if tc.status == "" {
				if c != nil {
					t.Fatalf("condition %+v; want none", c)
				}
				return
			}
			if c == nil || c.Status != tc.status || c.Reason != tc.reason {
				t.Fatalf("condition %+v; want %s %s", c, tc.status, tc.reason)
			}
			for _, w := range tc.msg {
				if !strings.Contains(c.Message, w) {
					t.Errorf("message %q lacks %q", c.Message, w)
				}
			}
		})
	}
}
