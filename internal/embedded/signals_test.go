package embedded

import (
	"testing"
	"time"
)

func TestGatewaySignals(t *testing.T) {
	s := &gatewaySignals{last: map[string]counterAt{}}
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		at       time.Duration
		inFlight int
		requests uint64
		wantQPS  float64 // -1: no qps observation
	}{
		{0, 3, 100, -1},               // first look: no rate yet
		{2 * time.Second, 5, 120, 10}, // 20 requests in 2 s
		{4 * time.Second, 0, 120, 0},  // idle
		{5 * time.Second, 1, 10, -1},  // counter went back (backends replaced): skip
	}
	for _, tc := range cases {
		obs := s.observe("p", tc.inFlight, tc.requests, t0.Add(tc.at))
		if obs[0].Metric != "concurrency" || obs[0].Value != float64(tc.inFlight) {
			t.Errorf("at %s: concurrency %+v, want %d", tc.at, obs[0], tc.inFlight)
		}
		switch {
		case tc.wantQPS < 0 && len(obs) != 1:
			t.Errorf("at %s: unexpected qps %+v", tc.at, obs[1:])
		case tc.wantQPS >= 0 && (len(obs) != 2 || obs[1].Metric != "qps" || obs[1].Value != tc.wantQPS):
			t.Errorf("at %s: qps %+v, want %v", tc.at, obs, tc.wantQPS)
		}
	}
}
