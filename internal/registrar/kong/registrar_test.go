package kong

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clocktesting "k8s.io/utils/clock/testing"

	kongapi "github.com/tidegpu/tidegpu/internal/kong"
	"github.com/tidegpu/tidegpu/internal/kong/kongtest"
	"github.com/tidegpu/tidegpu/internal/registrar"
)

const testPool = "default/llama"

type env struct {
	srv  *kongtest.Server
	reg  *Registrar
	clk  *clocktesting.FakeClock
	api  *kongapi.Client // makes changes behind the registrar's back
	tags []string
}

func newEnv(t *testing.T, mutate func(*Config)) *env {
	t.Helper()
	srv := kongtest.New(t)
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	cfg := Config{AdminURL: srv.URL, Clock: clk, Registry: prometheus.NewRegistry()}
	if mutate != nil {
		mutate(&cfg)
	}
	reg, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	api, err := kongapi.New(srv.URL, kongapi.WithToken(cfg.Token))
	if err != nil {
		t.Fatal(err)
	}
	return &env{srv: srv, reg: reg, clk: clk, api: api, tags: reg.tagsFor(testPool)}
}

func (e *env) sync(t *testing.T, targets []registrar.Target) {
	t.Helper()
	if err := e.reg.Sync(context.Background(), testPool, targets); err != nil {
		t.Fatalf("Sync: %v", err)
	}
}

// instances returns n pool targets numbered from first.
func instances(first, n int) []registrar.Target {
	out := make([]registrar.Target, 0, n)
	for i := first; i < first+n; i++ {
		out = append(out, registrar.Target{ID: fmt.Sprintf("i-%04d", i), Address: fmt.Sprintf("10.0.%d.%d:11434", i/250, i%250+1)})
	}
	return out
}

// ours returns the upstream's targets carrying tags as address → weight.
func ours(t *testing.T, srv *kongtest.Server, upstream string, tags []string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, tg := range srv.Targets(upstream) {
		if kongapi.HasTags(tg.Tags, tags) {
			if _, dup := out[tg.Target]; dup {
				t.Fatalf("target %s twice in Kong", tg.Target)
			}
			out[tg.Target] = tg.Weight
		}
	}
	return out
}

func wantMap(targets []registrar.Target) map[string]int {
	out := map[string]int{}
	for _, tg := range targets {
		out[tg.Address] = targetWeight(tg.Weight)
	}
	return out
}

func assertTargets(t *testing.T, e *env, want []registrar.Target) {
	t.Helper()
	got := ours(t, e.srv, DefaultUpstream, e.tags)
	w := wantMap(want)
	if len(got) != len(w) {
		t.Fatalf("Kong has %d of our targets, want %d", len(got), len(w))
	}
	for a, wt := range w {
		if got[a] != wt {
			t.Fatalf("target %s: weight %d in Kong, want %d (present: %v)", a, got[a], wt, got[a] != 0)
		}
	}
}

// targetCalls returns the indexes of target-changing calls by method.
func targetCalls(calls []kongtest.Call) map[string][]int {
	out := map[string][]int{}
	for i, c := range calls {
		if strings.Contains(c.Path, "/targets") && c.Method != "GET" {
			out[c.Method] = append(out[c.Method], i)
		}
	}
	return out
}

func TestSyncFromEmptyKong(t *testing.T) {
	e := newEnv(t, nil)
	want := instances(0, 3)
	e.sync(t, want)

	up := e.srv.Upstream(DefaultUpstream)
	if up == nil {
		t.Fatalf("upstream %s not created", DefaultUpstream)
	}
	passive := up["healthchecks"].(map[string]any)["passive"].(map[string]any)["unhealthy"].(map[string]any)
	if fmt.Sprint(passive["tcp_failures"]) != "2" || fmt.Sprint(passive["timeouts"]) != "2" || fmt.Sprint(passive["http_failures"]) != "3" {
		t.Errorf("passive health checks not on: %v", passive)
	}
	active := up["healthchecks"].(map[string]any)["active"].(map[string]any)
	if fmt.Sprint(active["unhealthy"].(map[string]any)["interval"]) != "5" || fmt.Sprint(active["healthy"].(map[string]any)["interval"]) != "0" {
		t.Errorf("active checks should probe unhealthy targets only: %v", active)
	}
	svc := e.srv.Service(DefaultService)
	if svc == nil || svc["host"] != DefaultUpstream || svc["protocol"] != "http" || svc["path"] != DefaultServicePath {
		t.Fatalf("service %s: %v", DefaultService, svc)
	}
	if fmt.Sprint(svc["connect_timeout"]) != "5000" {
		t.Errorf("service connect_timeout %v, want 5000", svc["connect_timeout"])
	}
	rt := e.srv.Route(DefaultRoute)
	if rt == nil || fmt.Sprint(rt["paths"]) != "[~/ollama-chat$]" || rt["service"].(map[string]any)["id"] != svc["id"] {
		t.Fatalf("route %s: %v", DefaultRoute, rt)
	}
	assertTargets(t, e, want)
	for _, tg := range e.srv.Targets(DefaultUpstream) {
		if !slices.Contains(tg.Tags, ManagedTag) || !slices.Contains(tg.Tags, "tidegpu-pool~default~llama") {
			t.Errorf("target %s tags %v", tg.Target, tg.Tags)
		}
	}
	if got := testutil.ToFloat64(e.reg.metrics.targets.WithLabelValues(DefaultUpstream)); got != 3 {
		t.Errorf("tidegpu_kong_targets = %v, want 3", got)
	}
}

func TestSyncFollowsPoolChanges(t *testing.T) {
	e := newEnv(t, nil)
	base := instances(0, 4)
	e.sync(t, base)

	replaced := append(slices.Clone(base[1:]), instances(10, 1)...) // i-0000 reclaimed, i-0010 its replacement
	reweighted := slices.Clone(replaced)
	reweighted[0].Weight = 40
	steps := []struct {
		name    string
		targets []registrar.Target
	}{
		{"replace one", replaced},
		{"weight change", reweighted},
		{"scale up", append(slices.Clone(reweighted), instances(20, 6)...)},
		{"scale down", instances(20, 2)},
		{"same again", instances(20, 2)},
		{"all gone", nil},
		{"back", instances(30, 3)},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			e.srv.ResetCalls()
			e.sync(t, st.targets)
			assertTargets(t, e, st.targets)
			calls := e.srv.Calls()
			tc := targetCalls(calls)
			if len(tc["DELETE"]) > 0 && len(tc["POST"]) > 0 && slices.Max(tc["DELETE"]) > slices.Min(tc["POST"]) {
				t.Errorf("an addition ran before a removal finished: deletes at %v, posts at %v", tc["DELETE"], tc["POST"])
			}
			if len(tc["PUT"]) > 0 {
				t.Errorf("PUT used on targets; Kong 3 updates with PATCH")
			}
			for _, c := range calls {
				if c.Method == "GET" && !strings.Contains(c.Path, "/targets") {
					t.Errorf("sync re-read %s before EnsureInterval", c.Path)
				}
			}
		})
	}
	// The weight change went through PATCH.
	e.srv.ResetCalls()
	w := instances(30, 3)
	w[1].Weight = 7
	e.sync(t, w)
	tc := targetCalls(e.srv.Calls())
	if len(tc["PATCH"]) != 1 || len(tc["POST"])+len(tc["DELETE"]) != 0 {
		t.Errorf("weight change: want one PATCH, got %v", tc)
	}
}

func TestSyncLeavesForeignTargetsAlone(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	if _, err := e.api.CreateUpstream(ctx, kongapi.Upstream{Name: DefaultUpstream}); err != nil {
		t.Fatal(err)
	}
	foreign := []kongapi.Target{
		{Target: "192.168.1.10:11434", Weight: 100},                                                 // hand-made, no tags
		{Target: "192.168.1.11:11434", Weight: 5, Tags: []string{"team-x"}},                         // someone else's tags
		{Target: "192.168.1.12:11434", Weight: 9, Tags: []string{ManagedTag, "tidegpu-pool~other"}}, // another pool
	}
	for _, f := range foreign {
		if _, err := e.api.CreateTarget(ctx, DefaultUpstream, f); err != nil {
			t.Fatal(err)
		}
	}
	before := e.srv.Targets(DefaultUpstream)

	for _, targets := range [][]registrar.Target{instances(0, 3), instances(1, 2), nil} {
		e.sync(t, targets)
		assertTargets(t, e, targets)
	}
	after := map[string]kongtest.Target{}
	for _, tg := range e.srv.Targets(DefaultUpstream) {
		after[tg.ID] = tg
	}
	for _, b := range before {
		a, ok := after[b.ID]
		if !ok || a.Weight != b.Weight || a.Target != b.Target || !slices.Equal(a.Tags, b.Tags) {
			t.Errorf("foreign target %s changed: before %+v, after %+v (present %v)", b.Target, b, a, ok)
		}
	}

	// A wanted address held by a foreign target: the others still converge,
	// the foreign one is left alone and the error says what to do.
	want := append(instances(5, 2), registrar.Target{ID: "i-x", Address: "192.168.1.10:11434", Weight: 50})
	err := e.reg.Sync(ctx, testPool, want)
	var fe *ForeignTargetError
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), "without TideGPU's tags") {
		t.Fatalf("want ForeignTargetError, got %v", err)
	}
	got := ours(t, e.srv, DefaultUpstream, e.tags)
	if len(got) != 2 || got["10.0.0.6:11434"] != 100 || got["10.0.0.7:11434"] != 100 {
		t.Errorf("other targets did not converge: %v", got)
	}
	for _, tg := range e.srv.Targets(DefaultUpstream) {
		if tg.Target == "192.168.1.10:11434" && (tg.Weight != 100 || len(tg.Tags) != 0) {
			t.Errorf("foreign target touched: %+v", tg)
		}
	}
	if got := testutil.ToFloat64(e.reg.metrics.errors.WithLabelValues("conflict")); got != 1 {
		t.Errorf("errors{reason=conflict} = %v", got)
	}
}

func TestSyncMoreTargetsThanOnePage(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.PageSize = 100 })
	e.srv.SetPageLimit(100)
	ctx := context.Background()
	if _, err := e.api.CreateUpstream(ctx, kongapi.Upstream{Name: DefaultUpstream}); err != nil {
		t.Fatal(err)
	}
	for i := range 30 { // foreign targets spread among the pages
		if _, err := e.api.CreateTarget(ctx, DefaultUpstream, kongapi.Target{Target: fmt.Sprintf("172.16.0.%d:80", i+1), Weight: 100}); err != nil {
			t.Fatal(err)
		}
	}
	big := instances(0, 250)
	e.sync(t, big)
	assertTargets(t, e, big)

	e.srv.ResetCalls()
	next := append(slices.Clone(big[70:]), instances(400, 20)...) // 180 kept, 70 gone, 20 new
	e.sync(t, next)
	assertTargets(t, e, next)
	gets := 0
	for _, c := range e.srv.Calls() {
		if c.Method == "GET" && strings.HasSuffix(c.Path, "/targets") {
			gets++
		}
	}
	if gets < 3 {
		t.Errorf("280 targets at 100 a page need 3 list pages, saw %d", gets)
	}
	if n := len(e.srv.Targets(DefaultUpstream)); n != 200+30 {
		t.Errorf("Kong holds %d targets, want 230", n)
	}
}

func TestSyncWhileKongDown(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	first := instances(0, 3)
	e.sync(t, first)
	if _, err := e.api.CreateTarget(ctx, DefaultUpstream, kongapi.Target{Target: "192.168.9.9:80", Weight: 3}); err != nil {
		t.Fatal(err)
	}

	e.srv.Down(true)
	second := append(slices.Clone(first[1:]), instances(3, 2)...)
	for range 2 {
		err := e.reg.Sync(ctx, testPool, second)
		if !kongapi.IsUnreachable(err) || !strings.Contains(err.Error(), "connection refused") || !strings.Contains(err.Error(), "kong registrar:") {
			t.Fatalf("Sync while down: want a clear unreachable error, got %v", err)
		}
	}
	if got := testutil.ToFloat64(e.reg.metrics.errors.WithLabelValues("unreachable")); got != 2 {
		t.Errorf("errors{reason=unreachable} = %v, want 2", got)
	}

	e.srv.Down(false)
	e.srv.Unavailable(true)
	err := e.reg.Sync(ctx, testPool, second)
	if kongapi.StatusOf(err) != 503 || !strings.Contains(err.Error(), "HTTP 503") {
		t.Fatalf("Sync while 503: %v", err)
	}
	e.srv.Unavailable(false)

	// A failure in the middle of the changes: Kong answers 500 to one POST.
	e.srv.Inject(kongtest.Fault{Method: "POST", PathPrefix: "/upstreams/" + DefaultUpstream + "/targets", Status: 500, Times: 1})
	err = e.reg.Sync(ctx, testPool, second)
	if kongapi.StatusOf(err) != 500 || !strings.Contains(err.Error(), "POST /upstreams/"+DefaultUpstream+"/targets") {
		t.Fatalf("Sync with a failing POST: %v", err)
	}

	e.srv.ResetCalls()
	e.sync(t, second) // back: converges with no manual step
	assertTargets(t, e, second)
	ensured := false
	for _, c := range e.srv.Calls() {
		if c.Method == "GET" && c.Path == "/services/"+DefaultService {
			ensured = true
		}
	}
	if !ensured {
		t.Errorf("the sync after an error should check the service and route again")
	}
	if e.srv.Service(DefaultService) == nil || e.srv.Route(DefaultRoute) == nil {
		t.Errorf("service or route lost")
	}
	found := false
	for _, tg := range e.srv.Targets(DefaultUpstream) {
		found = found || (tg.Target == "192.168.9.9:80" && tg.Weight == 3)
	}
	if !found {
		t.Errorf("foreign target lost")
	}
}

func TestSyncWrongToken(t *testing.T) {
	const right, wrong = "right-token-123", "wrong-token-456"
	e := newEnv(t, func(c *Config) { c.Token = wrong })
	e.srv.SetToken(right)
	err := e.reg.Sync(context.Background(), testPool, instances(0, 1))
	if !kongapi.IsUnauthorized(err) {
		t.Fatalf("want 401, got %v", err)
	}
	for _, s := range []string{"authentication failed", "check the Kong admin token", "HTTP 401"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q lacks %q", err, s)
		}
	}
	for _, s := range []string{err.Error(), e.reg.String(), fmt.Sprintf("%v %+v %#v", e.reg.cfg, e.reg.cfg, e.reg.cfg)} {
		if strings.Contains(s, wrong) {
			t.Errorf("token leaked: %q", s)
		}
	}
	if got := testutil.ToFloat64(e.reg.metrics.errors.WithLabelValues("auth")); got != 1 {
		t.Errorf("errors{reason=auth} = %v", got)
	}

	good, err := New(Config{AdminURL: e.srv.URL, Token: right, Clock: e.clk})
	if err != nil {
		t.Fatal(err)
	}
	if err := good.Sync(context.Background(), testPool, instances(0, 1)); err != nil {
		t.Fatalf("right token: %v", err)
	}
}

func TestSyncCorrectsDrift(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	want := instances(0, 2)
	e.sync(t, want)

	// Behind our back: service path, route paths and health checks change.
	if _, err := e.api.UpdateService(ctx, DefaultService, kongapi.Service{Path: "/api/generate", Host: "elsewhere"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.api.UpdateRoute(ctx, DefaultRoute, kongapi.Route{Paths: []string{"/chat"}}); err != nil {
		t.Fatal(err)
	}
	up, err := e.api.GetUpstream(ctx, DefaultUpstream)
	if err != nil {
		t.Fatal(err)
	}
	up.Healthchecks.Passive.Unhealthy.TCPFailures = 0
	if _, err := e.api.UpdateUpstream(ctx, DefaultUpstream, kongapi.Upstream{Healthchecks: up.Healthchecks}); err != nil {
		t.Fatal(err)
	}

	e.sync(t, want) // within EnsureInterval: targets only, the drift stays
	if e.srv.Service(DefaultService)["path"] != "/api/generate" {
		t.Fatalf("drift corrected before EnsureInterval: sync should stay fast")
	}
	e.clk.Step(DefaultEnsureInterval)
	e.sync(t, want)
	svc := e.srv.Service(DefaultService)
	if svc["path"] != DefaultServicePath || svc["host"] != DefaultUpstream {
		t.Errorf("service not corrected: path %v host %v", svc["path"], svc["host"])
	}
	if rt := e.srv.Route(DefaultRoute); fmt.Sprint(rt["paths"]) != "[~/ollama-chat$]" {
		t.Errorf("route not corrected: %v", rt["paths"])
	}
	hc := e.srv.Upstream(DefaultUpstream)["healthchecks"].(map[string]any)["passive"].(map[string]any)["unhealthy"].(map[string]any)
	if fmt.Sprint(hc["tcp_failures"]) != "2" {
		t.Errorf("health checks not corrected: %v", hc)
	}
	assertTargets(t, e, want)

	// The upstream deleted behind our back (taking its targets along) comes
	// back on the next sync, without waiting for EnsureInterval.
	if err := e.api.DeleteUpstream(ctx, DefaultUpstream); err != nil {
		t.Fatal(err)
	}
	e.sync(t, want)
	assertTargets(t, e, want)
}

func TestSyncCustomNames(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		c.Upstream, c.Service, c.ServicePath, c.Route = "pool-b-upstream", "pool-b", "/v1/chat/completions", "pool-b-chat"
		c.RoutePaths = []string{"/pool-b", "~/pool-b/v1$"}
		c.PoolTag = "tidegpu-pool:ns/pool-b"
		c.Passive = HealthCheckConfig{Disabled: true}
	})
	e.sync(t, instances(0, 2))
	if e.srv.Upstream("pool-b-upstream") == nil || e.srv.Service("pool-b")["host"] != "pool-b-upstream" {
		t.Fatalf("custom upstream/service not created")
	}
	if rt := e.srv.Route("pool-b-chat"); fmt.Sprint(rt["paths"]) != "[/pool-b ~/pool-b/v1$]" {
		t.Fatalf("custom route: %v", rt)
	}
	for _, tg := range e.srv.Targets("pool-b-upstream") {
		if !slices.Contains(tg.Tags, "tidegpu-pool~ns~pool-b") {
			t.Errorf("pool tag not sanitized: %v", tg.Tags)
		}
	}
	p := e.srv.Upstream("pool-b-upstream")["healthchecks"].(map[string]any)["passive"].(map[string]any)["unhealthy"].(map[string]any)
	if fmt.Sprintf("%v %v %v", p["tcp_failures"], p["timeouts"], p["http_failures"]) != "0 0 0" {
		t.Errorf("disabled passive checks still on: %v", p)
	}
}

func TestSyncConcurrentCallsAreSerialized(t *testing.T) {
	e := newEnv(t, nil)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = e.reg.Sync(context.Background(), testPool, instances(i, 3))
		}()
	}
	wg.Wait()
	e.sync(t, instances(0, 3))
	assertTargets(t, e, instances(0, 3))
}

func TestSyncInvalidAddress(t *testing.T) {
	e := newEnv(t, nil)
	want := append(instances(0, 2), registrar.Target{ID: "i-bad", Address: "10.0.0.99"})
	err := e.reg.Sync(context.Background(), testPool, want)
	var it *InvalidTargetsError
	if !errors.As(err, &it) || !strings.Contains(err.Error(), "i-bad") {
		t.Fatalf("want InvalidTargetsError naming i-bad, got %v", err)
	}
	assertTargets(t, e, instances(0, 2))
}
