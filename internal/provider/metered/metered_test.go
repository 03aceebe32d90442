package metered

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/provider"
)

type bare struct{}

func (bare) Name() string { return "bare" }
func (bare) Launch(context.Context, provider.LaunchRequest) (provider.Instance, error) {
	return provider.Instance{}, nil
}
func (bare) Terminate(context.Context, string) error { return nil }
func (bare) List(context.Context, string) ([]provider.Instance, error) {
	return nil, nil
}

// full has every optional capability.
type full struct{ bare }

func (full) Events() <-chan provider.Event { return nil }
func (full) Reclaim(context.Context, string, time.Duration) error {
	return nil
}
func (full) Offerings(context.Context, *tidev1.TidePoolSpec) ([]provider.Offering, error) {
	return []provider.Offering{{Zone: "a"}}, nil
}
func (full) Stop(context.Context, string) error { return nil }
func (full) Start(context.Context, string) (provider.Instance, error) {
	return provider.Instance{}, nil
}

func has[T any](p provider.Provider) bool {
	_, ok := provider.As[T](p)
	return ok
}

// The decorator has exactly the capabilities of what it wraps.
func TestCapabilitiesAreTheWrappedOnes(t *testing.T) {
	for _, c := range []struct {
		name  string
		inner provider.Provider
		want  bool
	}{
		{"over a provider without any", bare{}, false},
		{"over a provider with all", full{}, true},
		{"over a decorator over a provider without any", Wrap(bare{}, NewMetrics(nil)), false},
		{"over a decorator over a provider with all", Wrap(full{}, NewMetrics(nil)), true},
	} {
		p := Wrap(c.inner, NewMetrics(nil))
		got := map[string]bool{
			"EventSource":    has[provider.EventSource](p),
			"Reclaimer":      has[provider.Reclaimer](p),
			"OfferingSource": has[provider.OfferingSource](p),
			"Stopper":        has[provider.Stopper](p),
		}
		for name, ok := range got {
			if ok != c.want {
				t.Errorf("%s: As[%s] found %v, want %v", c.name, name, ok, c.want)
			}
		}
	}
}

// Offerings, Stop and Start found through the decorator are metered.
func TestOptionalCallsAreMetered(t *testing.T) {
	m := NewMetrics(nil)
	p := Wrap(full{}, m)
	ctx := context.Background()
	o, _ := provider.As[provider.OfferingSource](p)
	if offers, err := o.Offerings(ctx, &tidev1.TidePoolSpec{}); err != nil || len(offers) != 1 {
		t.Fatalf("Offerings = %v, %v; want the wrapped provider's one", offers, err)
	}
	s, _ := provider.As[provider.Stopper](p)
	if err := s.Stop(ctx, "i-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Start(ctx, "i-1"); err != nil {
		t.Fatal(err)
	}
	for _, method := range []string{"Offerings", "Stop", "Start"} {
		if n := testutil.ToFloat64(m.calls.WithLabelValues("bare", method, "ok")); n != 1 {
			t.Errorf("%s calls counted %v, want 1", method, n)
		}
	}
}
