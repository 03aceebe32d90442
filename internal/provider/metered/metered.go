// Package metered decorates any provider.Provider with Prometheus metrics —
// calls, errors by kind, latency — so providers stay free of metrics code.
//
// The decorator implements only Provider itself (Launch, Terminate and List
// metered) and provider.Unwrapper. Its optional capabilities are those of
// the provider it wraps, found with provider.As, and no others:
//
//   - OfferingSource and Stopper are metered: the decorator's As method
//     looks the capability up in the wrapped provider and, only when that
//     has it, returns a small adapter that meters each call and passes it
//     on. Over a provider without offerings, provider.As finds no
//     OfferingSource, as it would without the decorator.
//   - EventSource and Reclaimer are not metered: provider.As finds them in
//     the wrapped provider, through Unwrap.
package metered

import (
	"context"
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
	_ provider.Provider                = (*Provider)(nil)
	_ provider.Unwrapper               = (*Provider)(nil)
	_ interface{ As(target any) bool } = (*Provider)(nil)
	_ provider.OfferingSource          = offerings{}
	_ provider.Stopper                 = stopper{}
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

// As gives provider.As the metered OfferingSource and Stopper of the
// wrapped provider, when it has them; any other capability is looked up
// in the wrapped provider itself.
func (p *Provider) As(target any) bool {
	switch t := target.(type) {
	case *provider.OfferingSource:
		s, ok := provider.As[provider.OfferingSource](p.inner)
		if ok {
			*t = offerings{p: p, inner: s}
		}
		return ok
	case *provider.Stopper:
		s, ok := provider.As[provider.Stopper](p.inner)
		if ok {
			*t = stopper{p: p, inner: s}
		}
		return ok
	}
	return false
}

// offerings is the wrapped provider's OfferingSource, metered.
type offerings struct {
	p     *Provider
	inner provider.OfferingSource
}

// Offerings is metered.
func (o offerings) Offerings(ctx context.Context, spec *tidev1.TidePoolSpec) ([]provider.Offering, error) {
	start := time.Now()
	out, err := o.inner.Offerings(ctx, spec)
	o.p.observe("Offerings", start, err)
	return out, err
}

// stopper is the wrapped provider's Stopper, metered.
type stopper struct {
	p     *Provider
	inner provider.Stopper
}

// Stop is metered.
func (s stopper) Stop(ctx context.Context, id string) error {
	start := time.Now()
	err := s.inner.Stop(ctx, id)
	s.p.observe("Stop", start, err)
	return err
}

// Start is metered.
func (s stopper) Start(ctx context.Context, id string) (provider.Instance, error) {
	start := time.Now()
	in, err := s.inner.Start(ctx, id)
	s.p.observe("Start", start, err)
	return in, err
}
