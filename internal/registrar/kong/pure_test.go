package kong

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	kongapi "github.com/tidegpu/tidegpu/internal/kong"
	"github.com/tidegpu/tidegpu/internal/registrar"
)

var testTags = []string{ManagedTag, "tidegpu-pool~p"}

func kt(id, addr string, w int, tags ...string) kongapi.Target {
	return kongapi.Target{ID: id, Target: addr, Weight: w, Tags: tags}
}

func rt(addr string, w int) registrar.Target {
	return registrar.Target{ID: "i-" + addr, Address: addr, Weight: w}
}

// summary renders a plan compactly: -addr for deletes, +addr/w for
// creates, ~id/w for updates, !addr for invalid.
func summary(p Plan) string {
	var parts []string
	for _, t := range p.Deletes {
		parts = append(parts, "-"+t.Target)
	}
	for _, t := range p.Creates {
		parts = append(parts, fmt.Sprintf("+%s/%d", t.Target, t.Weight))
	}
	for _, t := range p.Updates {
		parts = append(parts, fmt.Sprintf("~%s/%d", t.ID, t.Weight))
	}
	for _, t := range p.Invalid {
		parts = append(parts, "!"+t.Address)
	}
	return strings.Join(parts, " ")
}

func TestPlanTargets(t *testing.T) {
	mine := func(id, addr string, w int) kongapi.Target { return kt(id, addr, w, testTags...) }
	for _, tc := range []struct {
		name    string
		current []kongapi.Target
		wanted  []registrar.Target
		want    string
		n       int
	}{
		{name: "empty both", want: "", n: 0},
		{name: "create from empty", wanted: []registrar.Target{rt("10.0.0.2:80", 0), rt("10.0.0.1:80", 5)},
			want: "+10.0.0.1:80/5 +10.0.0.2:80/100", n: 2},
		{name: "in sync", current: []kongapi.Target{mine("a", "10.0.0.1:80", 100)}, wanted: []registrar.Target{rt("10.0.0.1:80", 0)},
			want: "", n: 1},
		{name: "remove vanished", current: []kongapi.Target{mine("a", "10.0.0.1:80", 100), mine("b", "10.0.0.2:80", 100)},
			wanted: []registrar.Target{rt("10.0.0.2:80", 100)}, want: "-10.0.0.1:80", n: 1},
		{name: "replace", current: []kongapi.Target{mine("a", "10.0.0.1:80", 100)}, wanted: []registrar.Target{rt("10.0.0.3:80", 0)},
			want: "-10.0.0.1:80 +10.0.0.3:80/100", n: 1},
		{name: "weight change", current: []kongapi.Target{mine("a", "10.0.0.1:80", 100)}, wanted: []registrar.Target{rt("10.0.0.1:80", 30)},
			want: "~a/30", n: 1},
		{name: "weight capped", wanted: []registrar.Target{rt("10.0.0.1:80", 70000)}, want: "+10.0.0.1:80/65535", n: 1},
		{name: "negative weight is default", wanted: []registrar.Target{rt("10.0.0.1:80", -3)}, want: "+10.0.0.1:80/100", n: 1},
		{name: "empty wanted removes all ours", current: []kongapi.Target{mine("a", "10.0.0.1:80", 100), mine("b", "h:1", 1)},
			want: "-10.0.0.1:80 -h:1", n: 0},
		{name: "foreign untouched", current: []kongapi.Target{
			kt("f1", "10.0.0.9:80", 100),                   // no tags
			kt("f2", "10.0.0.8:80", 100, ManagedTag),       // managed, other pool (no pool tag)
			kt("f3", "10.0.0.7:80", 100, "tidegpu-pool~p"), // pool tag only
			kt("f4", "10.0.0.6:80", 100, ManagedTag, "tidegpu-pool~q"),
		}, wanted: nil, want: "", n: 0},
		{name: "foreign at a wanted address: create anyway (the 409 is handled when applying)",
			current: []kongapi.Target{kt("f1", "10.0.0.9:80", 100)}, wanted: []registrar.Target{rt("10.0.0.9:80", 0)},
			want: "+10.0.0.9:80/100", n: 1},
		{name: "duplicate wanted: first wins", wanted: []registrar.Target{rt("10.0.0.1:80", 10), rt("10.0.0.1:80", 20)},
			want: "+10.0.0.1:80/10", n: 1},
		{name: "duplicate current: extra deleted", current: []kongapi.Target{mine("b", "10.0.0.1:80", 100), mine("a", "10.0.0.1:80", 100)},
			wanted: []registrar.Target{rt("10.0.0.1:80", 0)}, want: "-10.0.0.1:80", n: 1},
		{name: "ipv6 expanded by Kong matches", current: []kongapi.Target{mine("a", "[0000:0000:0000:0000:0000:0000:0000:0001]:80", 100)},
			wanted: []registrar.Target{rt("[::1]:80", 0)}, want: "", n: 1},
		{name: "host name case-insensitive", current: []kongapi.Target{mine("a", "Node-1.example:80", 100)},
			wanted: []registrar.Target{rt("node-1.EXAMPLE:80", 0)}, want: "", n: 1},
		{name: "Kong target without port is :8000", current: []kongapi.Target{mine("a", "node-1", 100)},
			wanted: []registrar.Target{rt("node-1:8000", 0)}, want: "", n: 1},
		{name: "invalid wanted skipped, rest planned", current: []kongapi.Target{mine("a", "10.0.0.1:80", 100)},
			wanted: []registrar.Target{rt("10.0.0.5", 0), rt("", 0), rt("bad host:80", 0), rt("10.0.0.6:0", 0), rt("10.0.0.1:80", 0)},
			want:   "!10.0.0.5 ! !bad host:80 !10.0.0.6:0", n: 1},
		{name: "ours with unusable address removed", current: []kongapi.Target{mine("a", "bad host:80", 100)}, want: "-bad host:80", n: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := PlanTargets(tc.current, tc.wanted, testTags)
			if got := summary(p); got != tc.want {
				t.Errorf("plan %q, want %q", got, tc.want)
			}
			if p.Want != tc.n {
				t.Errorf("Want %d, want %d", p.Want, tc.n)
			}
			if p.Empty() != (len(p.Deletes)+len(p.Creates)+len(p.Updates) == 0) {
				t.Errorf("Empty inconsistent")
			}
			for _, c := range p.Creates {
				if !kongapi.HasTags(c.Tags, testTags) {
					t.Errorf("create %s without our tags: %v", c.Target, c.Tags)
				}
			}
		})
	}
}

func TestCanonicalAddress(t *testing.T) {
	for _, tc := range []struct {
		in, def, want string
		err           bool
	}{
		{in: "10.0.0.1:80", want: "10.0.0.1:80"},
		{in: " 10.0.0.1:80 ", want: "10.0.0.1:80"},
		{in: "[::1]:8080", want: "[::1]:8080"},
		{in: "[0000:0000:0000:0000:0000:0000:0000:0001]:8080", want: "[::1]:8080"},
		{in: "Example.COM:443", want: "example.com:443"},
		{in: "10.0.0.1:080", want: "10.0.0.1:80"},
		{in: "10.0.0.1", err: true},
		{in: "10.0.0.1", def: "8000", want: "10.0.0.1:8000"},
		{in: "::1", def: "8000", want: "[::1]:8000"},
		{in: "10.0.0.1:0", err: true},
		{in: "10.0.0.1:65536", err: true},
		{in: "10.0.0.1:http", err: true},
		{in: ":80", err: true},
		{in: "", err: true},
		{in: "a b:80", err: true},
	} {
		got, err := canonicalAddress(tc.in, tc.def)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("canonicalAddress(%q, %q) = %q, %v; want %q, error %v", tc.in, tc.def, got, err, tc.want, tc.err)
		}
	}
}

func TestTagFor(t *testing.T) {
	for in, want := range map[string]string{
		"tidegpu-pool:ns/name": "tidegpu-pool~ns~name",
		"plain-1.2_x~":         "plain-1.2_x~",
		"a,b c":                "a~b~c",
		"ünï":                  "~n~",
	} {
		if got := TagFor(in); got != want || !kongapi.Filterable([]string{got}) {
			t.Errorf("TagFor(%q) = %q, want %q (filterable)", in, got, want)
		}
	}
}

func TestConfigDefaultsAndValidation(t *testing.T) {
	ok := Config{AdminURL: "http://10.0.0.5:8001"}
	c := ok.withDefaults()
	if c.Upstream != DefaultUpstream || c.Service != DefaultService || c.ServicePath != DefaultServicePath ||
		c.Route != DefaultRoute || len(c.RoutePaths) != 1 || c.RoutePaths[0] != DefaultRoutePath {
		t.Fatalf("seed defaults not applied: %+v", c)
	}
	if c.Passive.TCPFailures == 0 || c.Active.UnhealthyInterval == 0 || c.EnsureInterval != DefaultEnsureInterval || c.Clock == nil {
		t.Fatalf("defaults missing: %v", c)
	}
	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		field  string
	}{
		{"no admin URL", func(c *Config) { c.AdminURL = " " }, "Config.AdminURL"},
		{"bad admin URL", func(c *Config) { c.AdminURL = "10.0.0.5:8001" }, "Config.AdminURL"},
		{"upstream is an IP", func(c *Config) { c.Upstream = "10.0.0.1" }, "Config.Upstream"},
		{"upstream with port", func(c *Config) { c.Upstream = "up:80" }, "Config.Upstream"},
		{"service name", func(c *Config) { c.Service = "a b" }, "Config.Service"},
		{"route name", func(c *Config) { c.Route = "r/1" }, "Config.Route"},
		{"service path", func(c *Config) { c.ServicePath = "api" }, "Config.ServicePath"},
		{"route path", func(c *Config) { c.RoutePaths = []string{"/ok", "nope"} }, "Config.RoutePaths[1]"},
		{"connect timeout", func(c *Config) { c.ConnectTimeout = -time.Second }, "Config.ConnectTimeout"},
		{"ensure interval", func(c *Config) { c.EnsureInterval = -1 }, "Config.EnsureInterval"},
		{"page size", func(c *Config) { c.PageSize = 5000 }, "Config.PageSize"},
		{"parallelism", func(c *Config) { c.Parallelism = -1 }, "Config.Parallelism"},
		{"token", func(c *Config) { c.Token = "a\r\nX-Evil: 1" }, "Config.Token"},
		{"passive interval", func(c *Config) { c.Passive = HealthCheckConfig{Interval: time.Second} }, "Config.Passive"},
		{"passive threshold", func(c *Config) { c.Passive = HealthCheckConfig{TCPFailures: 300} }, "Config.Passive"},
		{"active path", func(c *Config) { c.Active = HealthCheckConfig{HTTPPath: "healthz"} }, "Config.Active"},
		{"active status", func(c *Config) { c.Active = HealthCheckConfig{HealthyStatuses: []int{99}} }, "Config.Active"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ok
			tc.mutate(&cfg)
			_, err := New(cfg)
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("want error naming %s, got %v", tc.field, err)
			}
		})
	}
	if _, err := New(ok); err != nil {
		t.Fatalf("valid config: %v", err)
	}
}

func TestConfigStringRedacts(t *testing.T) {
	c := Config{AdminURL: "https://admin:pw-secret@kong:8444", Token: "tok-secret"}
	for _, s := range []string{c.String(), fmt.Sprintf("%v|%+v|%#v", c, c, c)} {
		if strings.Contains(s, "tok-secret") || strings.Contains(s, "pw-secret") {
			t.Errorf("secret in %q", s)
		}
	}
	if !strings.Contains(c.String(), "token=[redacted]") {
		t.Errorf("String should say a token is set: %q", c.String())
	}
}

func TestHealthchecksRender(t *testing.T) {
	for _, tc := range []struct {
		name            string
		passive, active HealthCheckConfig
		check           func(*kongapi.Healthchecks) string
	}{
		{"defaults", DefaultPassiveHealthCheck(), DefaultActiveHealthCheck(), func(h *kongapi.Healthchecks) string {
			p, a := h.Passive, h.Active
			if p.Unhealthy.TCPFailures != 2 || p.Unhealthy.Timeouts != 2 || p.Unhealthy.HTTPFailures != 3 || p.Healthy.Successes != 1 {
				return fmt.Sprintf("passive %+v", p)
			}
			if a.Healthy.Interval != 0 || a.Unhealthy.Interval != 5 || a.Healthy.Successes != 2 || a.HTTPPath != "/" || a.Timeout != 2 {
				return fmt.Sprintf("active %+v", a)
			}
			if len(a.Healthy.HTTPStatuses) == 0 || len(p.Healthy.HTTPStatuses) == 0 {
				return "status lists must default to Kong's"
			}
			return ""
		}},
		{"disabled", HealthCheckConfig{Disabled: true, TCPFailures: 5}, HealthCheckConfig{Disabled: true, Interval: time.Second, HTTPPath: "/h"}, func(h *kongapi.Healthchecks) string {
			if u := h.Passive.Unhealthy; u.TCPFailures+u.Timeouts+u.HTTPFailures+h.Passive.Healthy.Successes != 0 {
				return fmt.Sprintf("passive thresholds not zero: %+v", h.Passive.Unhealthy)
			}
			if h.Active.Healthy.Interval != 0 || h.Active.Unhealthy.Interval != 0 {
				return "active intervals not zero"
			}
			return ""
		}},
		{"active probing", HealthCheckConfig{}, HealthCheckConfig{HTTPPath: "/healthz", Interval: 10 * time.Second, UnhealthyInterval: 2500 * time.Millisecond,
			Timeout: 0, Successes: 1, HTTPFailures: 2, UnhealthyStatuses: []int{503}}, func(h *kongapi.Healthchecks) string {
			a := h.Active
			if a.HTTPPath != "/healthz" || a.Healthy.Interval != 10 || a.Unhealthy.Interval != 2.5 || a.Timeout != 1 ||
				a.Unhealthy.HTTPFailures != 2 || fmt.Sprint(a.Unhealthy.HTTPStatuses) != "[503]" {
				return fmt.Sprintf("active %+v", a)
			}
			return ""
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if msg := tc.check(healthchecks(tc.passive, tc.active)); msg != "" {
				t.Error(msg)
			}
		})
	}
}

func TestDrift(t *testing.T) {
	want := healthchecks(DefaultPassiveHealthCheck(), DefaultActiveHealthCheck())
	same := healthchecks(DefaultPassiveHealthCheck(), DefaultActiveHealthCheck())
	same.Active.Unhealthy.HTTPStatuses = []int{505, 504, 503, 502, 501, 500, 404, 429} // order does not matter
	changed := healthchecks(DefaultPassiveHealthCheck(), DefaultActiveHealthCheck())
	changed.Passive.Unhealthy.Timeouts = 0
	for _, tc := range []struct {
		name string
		have *kongapi.Healthchecks
		want bool
	}{
		{"same", same, false},
		{"changed threshold", changed, true},
		{"missing", nil, true},
		{"no passive", &kongapi.Healthchecks{Active: want.Active}, true},
	} {
		if got := healthchecksDrift(want, tc.have); got != tc.want {
			t.Errorf("healthchecks %s: drift %v, want %v", tc.name, got, tc.want)
		}
	}

	svc := kongapi.Service{Protocol: "http", Host: "up", Path: "/api/chat", ConnectTimeout: 5000}
	for _, tc := range []struct {
		name string
		have kongapi.Service
		want bool
	}{
		{"same", kongapi.Service{ID: "x", Name: "n", Protocol: "http", Host: "up", Path: "/api/chat", ConnectTimeout: 5000, Port: 80}, false},
		{"path", kongapi.Service{Protocol: "http", Host: "up", Path: "/other", ConnectTimeout: 5000}, true},
		{"host", kongapi.Service{Protocol: "http", Host: "x", Path: "/api/chat", ConnectTimeout: 5000}, true},
		{"protocol", kongapi.Service{Protocol: "https", Host: "up", Path: "/api/chat", ConnectTimeout: 5000}, true},
		{"timeout", kongapi.Service{Protocol: "http", Host: "up", Path: "/api/chat", ConnectTimeout: 60000}, true},
	} {
		if got := serviceDrift(svc, tc.have); got != tc.want {
			t.Errorf("service %s: drift %v, want %v", tc.name, got, tc.want)
		}
	}

	route := kongapi.Route{Paths: []string{"/a", "~/b$"}, Service: &kongapi.Ref{ID: "s1"}}
	for _, tc := range []struct {
		name string
		have kongapi.Route
		want bool
	}{
		{"same", kongapi.Route{Paths: []string{"~/b$", "/a"}, Service: &kongapi.Ref{ID: "s1"}}, false},
		{"paths", kongapi.Route{Paths: []string{"/a"}, Service: &kongapi.Ref{ID: "s1"}}, true},
		{"service", kongapi.Route{Paths: []string{"/a", "~/b$"}, Service: &kongapi.Ref{ID: "s2"}}, true},
		{"no service", kongapi.Route{Paths: []string{"/a", "~/b$"}}, true},
	} {
		if got := routeDrift(route, tc.have); got != tc.want {
			t.Errorf("route %s: drift %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestReasonOf(t *testing.T) {
	api := func(status int) error { return fmt.Errorf("x: %w", &kongapi.APIError{Status: status}) }
	for _, tc := range []struct {
		err  error
		want string
	}{
		{api(401), "auth"},
		{api(403), "auth"},
		{&kongapi.TransportError{Err: errors.New("refused")}, "unreachable"},
		{&kongapi.TransportError{Err: errors.New("html"), BadAnswer: true}, "bad_answer"},
		{api(429), "throttled"},
		{api(409), "conflict"},
		{&ForeignTargetError{}, "conflict"},
		{api(503), "server"},
		{api(400), "client"},
		{&InvalidTargetsError{}, "invalid_target"},
		{context.Canceled, "canceled"},
		{errors.New("?"), "other"},
		{multiError{api(500), api(401)}, "auth"},
	} {
		if got := reasonOf(tc.err); got != tc.want {
			t.Errorf("reasonOf(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

func TestMultiError(t *testing.T) {
	e := multiError{errors.New("a"), &kongapi.APIError{Status: 401}, errors.New("c"), errors.New("d"), errors.New("e")}
	if s := e.Error(); !strings.HasPrefix(s, "a; ") || !strings.HasSuffix(s, "; and 2 more") || strings.Contains(s, "\n") {
		t.Errorf("multiError text %q", s)
	}
	if !kongapi.IsUnauthorized(e) {
		t.Errorf("multiError must unwrap to its errors")
	}
	if joinErrors(nil) != nil || joinErrors([]error{e[0]}) != e[0] {
		t.Errorf("joinErrors of 0 or 1")
	}
}

func TestRunAll(t *testing.T) {
	items := make([]int, 50)
	for i := range items {
		items[i] = i
	}
	var calls, inFlight, peak atomic.Int32
	errs := runAll(context.Background(), 4, items, func(_ context.Context, i int) error {
		calls.Add(1)
		n := inFlight.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		defer inFlight.Add(-1)
		if i%10 == 3 {
			return &kongapi.APIError{Status: 404}
		}
		return nil
	})
	if calls.Load() != 50 || len(errs) != 5 || peak.Load() > 4 {
		t.Fatalf("calls %d errs %d peak %d", calls.Load(), len(errs), peak.Load())
	}

	calls.Store(0)
	errs = runAll(context.Background(), 1, items, func(_ context.Context, i int) error {
		calls.Add(1)
		if i == 2 {
			return &kongapi.TransportError{Err: errors.New("refused")}
		}
		return nil
	})
	if calls.Load() != 3 || len(errs) != 1 {
		t.Fatalf("after a fatal error no new call should start: calls %d errs %v", calls.Load(), errs)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	errs = runAll(ctx, 2, items, func(context.Context, int) error { return nil })
	if len(errs) != 1 || !errors.Is(errs[0], context.Canceled) {
		t.Fatalf("canceled context: %v", errs)
	}
}

func TestAdminURLFor(t *testing.T) {
	for in, want := range map[string]string{
		"10.0.0.5":                "http://10.0.0.5:8001",
		"fd00::1":                 "http://[fd00::1]:8001",
		"[fd00::1]":               "http://[fd00::1]:8001",
		"kong.kong.svc":           "http://kong.kong.svc:8001",
		"10.0.0.5:8444":           "http://10.0.0.5:8444",
		"https://kong:8444/admin": "https://kong:8444/admin",
		" 10.0.0.5 ":              "http://10.0.0.5:8001",
	} {
		if got := AdminURLFor(in); got != want {
			t.Errorf("AdminURLFor(%q) = %q, want %q", in, got, want)
		}
	}
}

func BenchmarkPlanTargets(b *testing.B) {
	var current []kongapi.Target
	var wanted []registrar.Target
	for i := range 1000 {
		addr := fmt.Sprintf("10.0.%d.%d:11434", i/250, i%250+1)
		current = append(current, kt(fmt.Sprint(i), addr, 100, testTags...))
		if i%10 != 0 {
			wanted = append(wanted, rt(addr, 100))
		}
	}
	b.ResetTimer()
	for range b.N {
		PlanTargets(current, wanted, testTags)
	}
}
