package kong

import (
	"context"
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	kongapi "github.com/tidegpu/tidegpu/internal/kong"
)

// metrics are the registrar's Prometheus series. Registrars of several
// pools share one Registry: a collector registered already is reused.
type metrics struct {
	duration prometheus.Histogram
	errors   *prometheus.CounterVec
	targets  *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tidegpu_kong_sync_duration_seconds",
			Help:    "Duration of one sync of a pool's targets with Kong's Admin API.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
		}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidegpu_kong_sync_errors_total",
			Help: "Syncs with Kong that failed, by reason (auth, unreachable, bad_answer, throttled, conflict, server, client, invalid_target, canceled, other).",
		}, []string{"reason"}),
		targets: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tidegpu_kong_targets",
			Help: "Targets TideGPU keeps in the Kong upstream after the last successful sync.",
		}, []string{"upstream"}),
	}
	if reg != nil {
		m.duration = register(reg, m.duration)
		m.errors = register(reg, m.errors)
		m.targets = register(reg, m.targets)
	}
	return m
}

// register registers c, or returns the collector registered before it.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic(err) // a different collector under our name: a programming error
	}
	return c
}

// reasonOf classifies a sync error for the errors metric.
func reasonOf(err error) string {
	var it *InvalidTargetsError
	var ft *ForeignTargetError
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "canceled"
	case kongapi.IsUnauthorized(err):
		return "auth"
	case kongapi.IsUnreachable(err):
		return "unreachable"
	case kongapi.IsBadAnswer(err):
		return "bad_answer"
	case kongapi.IsThrottled(err):
		return "throttled"
	case errors.As(err, &ft), kongapi.IsConflict(err):
		return "conflict"
	case kongapi.StatusOf(err) >= 500:
		return "server"
	case kongapi.StatusOf(err) >= 400:
		return "client"
	case errors.As(err, &it):
		return "invalid_target"
	}
	return "other"
}
