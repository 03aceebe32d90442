// Package metered decorates any provider.Provider with Prometheus metrics —
// calls, errors by kind, latency — so providers stay free of metrics code.
// The decorator passes the optional interfaces (EventSource, Reclaimer,
// OfferingSource) through when the wrapped provider has them.
package metered

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/provider"
)

// Metrics are the decorator's series; share one per registry.
type Metrics struct {
	calls    *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// NewMetrics registers the series with reg (nil for none).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tidegpu_provider_calls_total",
			Help: "Provider API calls by method and outcome (ok, capacity, throttled, error)."},
			[]string{"provider", "method", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "tidegpu_provider_call_duration_seconds",
			Help: "Provider API call latency.", Buckets: prometheus.ExponentialBuckets(0.001, 4, 9)},
			[]string{"provider", "method"}),
	}
	if reg != nil {
		reg.MustRegister(m.calls, m.duration)
	}
	return m
}

// Outcome classifies an error for the outcome label.
func Outcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case provider.IsInsufficientCapacity(err):
		return "capacity"
	case provider.IsThrottled(err):
		return "throttled"
	default:
		return "error"
	}
}

// Provider is a metered provider.
type Provider struct {
	inner provider.Provider
	m     *Metrics
}

var (
	_ provider.Provider       = (*Provider)(nil)
	_ provider.EventSource    = (*Provider)(nil)
	_ provider.OfferingSource = (*Provider)(nil)
	_ provider.Reclaimer      = (*Provider)(nil)
)

// Wrap decorates p.
func Wrap(p provider.Provider, m *Metrics) *Provider { return &Provider{inner: p, m: m} }

// Unwrap returns the decorated provider.
func (p *Provider) Unwrap() provider.Provider { return p.inner }

func (p *Provider) observe(method string, start time.Time, err error) {
	name := p.inner.Name()
	p.m.calls.WithLabelValues(name, method, Outcome(err)).Inc()
	p.m.duration.WithLabelValues(name, method).Observe(time.Since(start).Seconds())
}

// Name is the wrapped provider's name.
func (p *Provider) Name() string { return p.inner.Name() }

// Launch is metered.
func (p *Provider) Launch(ctx context.Context, req provider.LaunchRequest) (provider.Instance, error) {
	start := time.Now()
	in, err := p.inner.Launch(ctx, req)
	p.observe("Launch", start, err)
	return in, err
}

// Terminate is metered.
func (p *Provider) Terminate(ctx context.Context, id string) error {
	start := time.Now()
	err := p.inner.Terminate(ctx, id)
	p.observe("Terminate", start, err)
	return err
}

// List is metered.
func (p *Provider) List(ctx context.Context, pool string) ([]provider.Instance, error) {
	start := time.Now()
	out, err := p.inner.List(ctx, pool)
	p.observe("List", start, err)
	return out, err
}

// Events passes the wrapped provider's events through (nil when it has none,
// which never delivers).
func (p *Provider) Events() <-chan provider.Event {
	if s, ok := p.inner.(provider.EventSource); ok {
		return s.Events()
	}
	return nil
}

// Offerings is metered; providers without offerings return none.
func (p *Provider) Offerings(ctx context.Context, spec *tidev1.TidePoolSpec) ([]provider.Offering, error) {
	s, ok := p.inner.(provider.OfferingSource)
	if !ok {
		return nil, nil
	}
	start := time.Now()
	out, err := s.Offerings(ctx, spec)
	p.observe("Offerings", start, err)
	return out, err
}

// Reclaim passes a simulated reclaim to the wrapped provider, or fails with
// provider.ErrNotSupported.
func (p *Provider) Reclaim(ctx context.Context, id string, notice time.Duration) error {
	r, ok := p.inner.(provider.Reclaimer)
	if !ok {
		return fmt.Errorf("reclaim on provider %s: %w", p.inner.Name(), provider.ErrNotSupported)
	}
	return r.Reclaim(ctx, id, notice)
}

// Stop passes a stop to the wrapped provider, metered, or fails with
// provider.ErrNotSupported.
func (p *Provider) Stop(ctx context.Context, id string) error {
	s, ok := p.inner.(provider.Stopper)
	if !ok {
		return fmt.Errorf("stop on provider %s: %w", p.inner.Name(), provider.ErrNotSupported)
	}
	start := time.Now()
	err := s.Stop(ctx, id)
	p.observe("Stop", start, err)
	return err
}

// Start passes a start to the wrapped provider, metered, or fails with
// provider.ErrNotSupported.
func (p *Provider) Start(ctx context.Context, id string) (provider.Instance, error) {
	s, ok := p.inner.(provider.Stopper)
	if !ok {
		return provider.Instance{}, fmt.Errorf("start on provider %s: %w", p.inner.Name(), provider.ErrNotSupported)
	}
	start := time.Now()
	in, err := s.Start(ctx, id)
	p.observe("Start", start, err)
	return in, err
}
