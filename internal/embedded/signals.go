package embedded

import (
	"fmt"
	"sync"
	"time"

	"github.com/tidegpu/tidegpu/internal/autoscale"
	"github.com/tidegpu/tidegpu/internal/gateway"
)

// gatewaySignals derives a pool's autoscaling signals from the embedded
// gateway's own measurements: concurrency (requests in flight, and those
// its activator holds for a pool at zero) and QPS (requests started per
// second since the last look), and GPU utilisation (percent, the mean over
// the backends read within gpuMaxAge) where the gateway's metrics have it
// (dcgm-exporter, --dcgm-url).
type gatewaySignals struct {
	gw *gateway.Gateway

	mu   sync.Mutex
	last map[string]counterAt
}

type counterAt struct {
	requests uint64
	at       time.Time
}

func newGatewaySignals(gw *gateway.Gateway) *gatewaySignals {
	return &gatewaySignals{gw: gw, last: map[string]counterAt{}}
}

// Observe implements engine.Signals.
func (s *gatewaySignals) Observe(pool string, now time.Time) []autoscale.Observation {
	var inFlight int
	var requests uint64
	var gpu float64
	nGPU := 0
	for _, b := range s.gw.Backends() {
		if b.Pool != pool {
			continue
		}
		inFlight += b.InFlight
		requests += b.Requests
		if sig := b.Signals; sig != nil && sig.GPUUtil != nil && !b.Removed && sig.Age <= gpuMaxAge.Seconds() {
			gpu += *sig.GPUUtil
			nGPU++
		}
	}
	// Requests the activator holds for a pool at zero are load it has to
	// serve: they count as in flight.
	inFlight += s.gw.Held(pool)
	obs := s.observe(pool, inFlight, requests, now)
	if nGPU > 0 {
		obs = append(obs, autoscale.Observation{Metric: "gpu-utilization", Value: 100 * gpu / float64(nGPU), At: now})
	}
	return obs
}

// gpuMaxAge is how old a backend's GPU utilisation may be to count.
const gpuMaxAge = 5 * time.Second

// observe is the pure part: it turns totals into observations.
func (s *gatewaySignals) observe(pool string, inFlight int, requests uint64, now time.Time) []autoscale.Observation {
	obs := []autoscale.Observation{{Metric: "concurrency", Value: float64(inFlight), At: now}}
	s.mu.Lock()
	prev, ok := s.last[pool]
	s.last[pool] = counterAt{requests: requests, at: now}
	s.mu.Unlock()
	if ok && now.After(prev.at) && requests >= prev.requests {
		qps := float64(requests-prev.requests) / now.Sub(prev.at).Seconds()
		obs = append(obs, autoscale.Observation{Metric: "qps", Value: qps, At: now})
	}
	return obs
}

// SignalHealth implements engine.SignalHealth from the gateway's view of
// the pool's balancing signals.
func (s *gatewaySignals) SignalHealth(pool string) (source string, fallback bool, reason string, ok bool) {
	st, ok := s.gw.SignalStatus()[pool]
	if !ok || st.Backends == 0 {
		return "", false, "", false
	}
	reason = fmt.Sprintf("%d of %d backends with fresh metrics", st.Fresh, st.Backends)
	if st.Err != "" {
		reason += "; source error: " + st.Err
	}
	return st.Source, st.Source == gateway.SignalGateway, reason, true
}

// SignalGaps implements engine.SignalGaps: the pool's backends without
// fresh metrics from the gateway's metrics source while others have them.
func (s *gatewaySignals) SignalGaps(pool string) []string {
	var missing []string
	someFresh := false
	for _, b := range s.gw.Backends() {
		if b.Pool != pool || b.Removed || b.Signals == nil || b.Signals.Source == gateway.SignalGateway {
			continue
		}
		if b.Signals.Fresh {
			someFresh = true
		} else {
			missing = append(missing, b.ID)
		}
	}
	if !someFresh {
		return nil
	}
	return missing
}
