package provider_test

import (
	"context"
	"strings"
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

// trace records which layers a Stop went through, outermost first.
type trace struct{ calls []string }

// stopping is a bottom provider that can stop.
type stopping struct {
	plain
	t *trace
}

func (s stopping) Stop(context.Context, string) error {
	s.t.calls = append(s.t.calls, "bottom")
	return nil
}
func (stopping) Start(context.Context, string) (provider.Instance, error) {
	return provider.Instance{}, nil
}

// passing is a decorator that adds nothing (like the replay's counting
// provider for offerings).
type passing struct {
	plain
	inner provider.Provider
}

func (p passing) Unwrap() provider.Provider { return p.inner }

// intercepting is a decorator that meters Stop, like metered: an adapter
// from its As method, only when the provider inside can stop.
type intercepting struct {
	plain
	name  string
	inner provider.Provider
	t     *trace
}

func (i intercepting) Unwrap() provider.Provider { return i.inner }

func (i intercepting) As(target any) bool {
	t, ok := target.(*provider.Stopper)
	if !ok {
		return false
	}
	s, ok := provider.As[provider.Stopper](i.inner)
	if ok {
		*t = interceptedStop{Stopper: s, name: i.name, t: i.t}
	}
	return ok
}

type interceptedStop struct {
	provider.Stopper
	name string
	t    *trace
}

func (s interceptedStop) Stop(ctx context.Context, id string) error {
	s.t.calls = append(s.t.calls, s.name)
	return s.Stopper.Stop(ctx, id)
}

// adding is a decorator that adds stops the provider inside lacks.
type adding struct {
	passing
	t *trace
}

func (a adding) Stop(context.Context, string) error {
	a.t.calls = append(a.t.calls, "adding")
	return nil
}
func (adding) Start(context.Context, string) (provider.Instance, error) {
	return provider.Instance{}, nil
}

func TestAs(t *testing.T) {
	tr := &trace{}
	bottom := stopping{t: tr}
	meter := func(name string, inner provider.Provider) provider.Provider {
		return intercepting{name: name, inner: inner, t: tr}
	}
	cases := []struct {
		name string
		p    provider.Provider
		// want is the Stop's path through the layers; "" for no Stopper.
		want string
	}{
		{"bare, without", plain{}, ""},
		{"bare, with", bottom, "bottom"},
		{"one passing decorator, with at the bottom", passing{inner: bottom}, "bottom"},
		{"one passing decorator, absent at the bottom", passing{inner: plain{}}, ""},
		{"one intercepting decorator, with at the bottom", meter("m", bottom), "m>bottom"},
		{"one intercepting decorator, absent at the bottom", meter("m", plain{}), ""},
		{"two decorators, with at the bottom", passing{inner: meter("m", bottom)}, "m>bottom"},
		{"two intercepting decorators, with at the bottom", meter("outer", meter("inner", bottom)), "outer>inner>bottom"},
		{"two decorators, absent at the bottom", meter("outer", passing{inner: plain{}}), ""},
		{"a decorator that adds it, absent at the bottom", meter("m", adding{passing: passing{inner: plain{}}, t: tr}), "m>adding"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr.calls = nil
			s, ok := provider.As[provider.Stopper](c.p)
			if ok != (c.want != "") {
				t.Fatalf("As[Stopper] found %v, want %v", ok, c.want != "")
			}
			if !ok {
				if s != nil {
					t.Errorf("As[Stopper] = %v with false, want nil", s)
				}
				return
			}
			if err := s.Stop(context.Background(), "i-1"); err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(tr.calls, ">"); got != c.want {
				t.Errorf("Stop went through %q, want %q", got, c.want)
			}
		})
	}
}

func TestAsConcreteType(t *testing.T) {
	tr := &trace{}
	p := passing{inner: intercepting{inner: stopping{t: tr}, t: tr}}
	if _, ok := provider.As[stopping](p); !ok {
		t.Error("As[stopping] through two decorators: not found")
	}
	if _, ok := provider.As[adding](p); ok {
		t.Error("As[adding]: found a type that is not in the chain")
	}
	if _, ok := provider.As[provider.EventSource](nil); ok {
		t.Error("As on a nil provider: found")
	}
}
