package provider_test

import (
	"context"
	"testing"

	"github.com/tidegpu/tidegpu/internal/provider"
)

type plain struct{}

func (plain) Name() string { return "plain" }
func (plain) Launch(context.Context, provider.LaunchRequest) (provider.Instance, error) {
	return provider.Instance{}, nil
}
func (plain) Terminate(context.Context, string) error { return nil }
func (plain) List(context.Context, string) ([]provider.Instance, error) {
	return nil, nil
}

type stopping struct{ plain }

func (stopping) Stop(context.Context, string) error { return nil }
func (stopping) Start(context.Context, string) (provider.Instance, error) {
	return provider.Instance{}, nil
}

// wrapper is a decorator that always offers Stop/Start, like the metered
// provider, and passes them on.
type wrapper struct {
	plain
	inner provider.Provider
}

func (w wrapper) Unwrap() provider.Provider          { return w.inner }
func (w wrapper) Stop(context.Context, string) error { return nil }
func (w wrapper) Start(context.Context, string) (provider.Instance, error) {
	return provider.Instance{}, nil
}

func TestAsStopper(t *testing.T) {
	cases := []struct {
		name string
		p    provider.Provider
		want bool
	}{
		{"without stops", plain{}, false},
		{"with stops", stopping{}, true},
		{"decorator over one without", wrapper{inner: plain{}}, false},
		{"decorator over one with", wrapper{inner: stopping{}}, true},
		{"decorator over a decorator over one with", wrapper{inner: wrapper{inner: stopping{}}}, true},
		{"decorator over a decorator over one without", wrapper{inner: wrapper{inner: plain{}}}, false},
	}
	for _, c := range cases {
		if _, got := provider.AsStopper(c.p); got != c.want {
			t.Errorf("%s: AsStopper = %v, want %v", c.name, got, c.want)
		}
	}
}
