package metrics

import (
	"fmt"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
)

// SpecQueries returns a pool's own PromQL queries
// (spec.serving.metrics.promql); the zero Queries if none. Pure.
func SpecQueries(m *tidev1.ServingMetrics) Queries {
	if m == nil || m.PromQL == nil {
		return Queries{}
	}
	q := m.PromQL
	return Queries{QueueDepth: q.Queue, Running: q.Running, KVCacheUsage: q.KVCache, GPUUtil: q.GPUUtil, TTFTP50: q.TTFTP50, TTFTP99: q.TTFTP99}
}

// SpecFamily returns the family a pool's spec.serving.metrics names, its
// names overriding the family's signal by signal; off is true for family
// none (no backend metrics). A nil spec, or family auto without names, is
// the zero Family (detection). Pure.
func SpecFamily(m *tidev1.ServingMetrics) (f Family, off bool, err error) {
	if m == nil {
		return Family{}, false, nil
	}
	if m.Family == tidev1.MetricsFamilyNone {
		if m.Names != nil {
			return Family{}, true, fmt.Errorf("spec.serving.metrics.names: family none reads no metrics: remove names or set a family")
		}
		return Family{}, true, nil
	}
	f, err = LookupFamily(string(m.Family))
	if err != nil {
		return Family{}, false, fmt.Errorf("spec.serving.metrics.family: %w", err)
	}
	n := m.Names
	if n == nil {
		return f, false, nil
	}
	if f.Queue == "" {
		if n.Queue == "" {
			return Family{}, false, fmt.Errorf("spec.serving.metrics.names.queue: required with family auto: give the queue gauge's name, or a family")
		}
		f = Family{Name: "custom", Server: "custom names", KVCacheScale: 1, TTFTScale: 1}
	}
	if n.Queue != "" {
		f.Queue = n.Queue
	}
	if n.Running != "" {
		f.Running = n.Running
	}
	if n.KVCache != "" {
		f.KVCache = []string{n.KVCache}
		f.KVCacheScale = 1
	}
	switch n.KVCacheUnit {
	case "", "Fraction":
	case "Percent":
		f.KVCacheScale = 0.01
	default:
		return Family{}, false, fmt.Errorf("spec.serving.metrics.names.kvCacheUnit: %q: want Fraction or Percent", n.KVCacheUnit)
	}
	if n.TTFT != "" {
		f.TTFT, f.TTFTScale = n.TTFT, 1
	}
	return f, false, nil
}
