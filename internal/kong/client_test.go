package kong_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidegpu/tidegpu/internal/kong"
	"github.com/tidegpu/tidegpu/internal/kong/kongtest"
)

func newClient(t *testing.T, url string, opts ...kong.Option) *kong.Client {
	t.Helper()
	c, err := kong.New(url, opts...)
	if err != nil {
		t.Fatalf("kong.New: %v", err)
	}
	return c
}

func TestUpstreamCRUD(t *testing.T) {
	ctx := context.Background()
	srv := kongtest.New(t)
	c := newClient(t, srv.URL)

	if _, err := c.GetUpstream(ctx, "up-a"); !kong.IsNotFound(err) {
		t.Fatalf("get missing: want 404, got %v", err)
	}
	u, err := c.CreateUpstream(ctx, kong.Upstream{Name: "up-a", Tags: []string{"t1"}})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if u.ID == "" || u.Name != "up-a" {
		t.Fatalf("create answered %+v", u)
	}
	if u.Healthchecks == nil || u.Healthchecks.Passive == nil || u.Healthchecks.Active.HTTPPath != "/" {
		t.Fatalf("defaults not decoded: %+v", u.Healthchecks)
	}
	byID, err := c.GetUpstream(ctx, u.ID)
	if err != nil || byID.Name != "up-a" {
		t.Fatalf("get by id: %+v %v", byID, err)
	}
	_, err = c.CreateUpstream(ctx, kong.Upstream{Name: "up-a"})
	if !kong.IsConflict(err) {
		t.Fatalf("duplicate name: want 409, got %v", err)
	}
	var ae *kong.APIError
	if !errors.As(err, &ae) || ae.Name != "unique constraint violation" || ae.Method != "POST" || ae.Path != "/upstreams" {
		t.Fatalf("409 error fields: %+v", ae)
	}
	_, err = c.CreateUpstream(ctx, kong.Upstream{Name: "10.0.0.1"})
	if kong.StatusOf(err) != http.StatusBadRequest {
		t.Fatalf("ip as upstream name: want 400, got %v", err)
	}
	hc := u.Healthchecks
	hc.Passive.Unhealthy.TCPFailures = 3
	up, err := c.UpdateUpstream(ctx, "up-a", kong.Upstream{Healthchecks: hc})
	if err != nil || up.Healthchecks.Passive.Unhealthy.TCPFailures != 3 {
		t.Fatalf("update: %+v %v", up, err)
	}
	if err := c.DeleteUpstream(ctx, "up-a"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := c.GetUpstream(ctx, u.ID); !kong.IsNotFound(err) {
		t.Fatalf("after delete: want 404, got %v", err)
	}
}

func TestServiceAndRoute(t *testing.T) {
	ctx := context.Background()
	srv := kongtest.New(t)
	c := newClient(t, srv.URL)
	svc, err := c.CreateService(ctx, kong.Service{Name: "svc", Host: "up-a", Protocol: "http", Path: "/api/chat"})
	if err != nil {
		t.Fatalf("create service: %v", err)
	}
	if svc.Port != 80 || svc.ConnectTimeout != 60000 {
		t.Fatalf("service defaults: %+v", svc)
	}
	rt, err := c.CreateRoute(ctx, kong.Route{Name: "r", Paths: []string{"~/ollama-chat$"}, Service: &kong.Ref{ID: svc.ID}})
	if err != nil {
		t.Fatalf("create route: %v", err)
	}
	if rt.Service == nil || rt.Service.ID != svc.ID {
		t.Fatalf("route service: %+v", rt.Service)
	}
	if _, err := c.CreateRoute(ctx, kong.Route{Name: "r2", Paths: []string{"/x"}, Service: &kong.Ref{ID: "00000000-0000-4000-8000-000000000000"}}); kong.StatusOf(err) != 400 {
		t.Fatalf("route to missing service: want 400, got %v", err)
	}
	if err := c.DeleteService(ctx, "svc"); kong.StatusOf(err) != 400 {
		t.Fatalf("delete referenced service: want 400, got %v", err)
	}
	got, err := c.UpdateService(ctx, "svc", kong.Service{Path: "/v2"})
	if err != nil || got.Path != "/v2" || got.Host != "up-a" {
		t.Fatalf("patch service: %+v %v", got, err)
	}
	if err := c.DeleteRoute(ctx, "r"); err != nil {
		t.Fatalf("delete route: %v", err)
	}
	if err := c.DeleteService(ctx, "svc"); err != nil {
		t.Fatalf("delete service: %v", err)
	}
}

func TestTargets(t *testing.T) {
	ctx := context.Background()
	srv := kongtest.New(t)
	c := newClient(t, srv.URL)
	if _, err := c.CreateUpstream(ctx, kong.Upstream{Name: "up"}); err != nil {
		t.Fatal(err)
	}
	tg, err := c.CreateTarget(ctx, "up", kong.Target{Target: "10.0.0.1:8080", Weight: 100, Tags: []string{"mine"}})
	if err != nil {
		t.Fatalf("create target: %v", err)
	}
	if _, err := c.CreateTarget(ctx, "up", kong.Target{Target: "10.0.0.1:8080", Weight: 50}); !kong.IsConflict(err) {
		t.Fatalf("POST of an existing target: want 409 (Kong 3.x), got %v", err)
	}
	upd, err := c.UpdateTarget(ctx, "up", "10.0.0.1:8080", kong.Target{Weight: 7})
	if err != nil || upd.Weight != 7 || upd.ID != tg.ID {
		t.Fatalf("PATCH by host:port: %+v %v", upd, err)
	}
	got, err := c.GetTarget(ctx, "up", tg.ID)
	if err != nil || got.Weight != 7 || !kong.HasTags(got.Tags, []string{"mine"}) {
		t.Fatalf("get by id: %+v %v", got, err)
	}
	if _, err := c.UpdateTarget(ctx, "up", "10.9.9.9:1", kong.Target{Weight: 1}); !kong.IsNotFound(err) {
		t.Fatalf("PATCH of a missing target: want 404, got %v", err)
	}
	if _, err := c.CreateTarget(ctx, "nope", kong.Target{Target: "10.0.0.2:1", Weight: 1}); !kong.IsNotFound(err) {
		t.Fatalf("target of a missing upstream: want 404, got %v", err)
	}
	if err := c.DeleteTarget(ctx, "up", "10.0.0.1:8080"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if err := c.DeleteTarget(ctx, "up", tg.ID); !kong.IsNotFound(err) {
		t.Fatalf("delete again: want 404, got %v", err)
	}
}

// Kong's "next" link for /upstreams/{u}/targets carries neither size nor
// tags, and Kong ignores tags there: the client must page with its own
// query and filter itself.
func TestListTargetsPaginatesAndFilters(t *testing.T) {
	ctx := context.Background()
	srv := kongtest.New(t)
	srv.SetPageLimit(100)
	c := newClient(t, srv.URL, kong.WithPageSize(1000))
	if _, err := c.CreateUpstream(ctx, kong.Upstream{Name: "up"}); err != nil {
		t.Fatal(err)
	}
	for i := range 250 {
		tags := []string{"mine"}
		if i%10 == 0 {
			tags = []string{"other"}
		}
		if _, err := c.CreateTarget(ctx, "up", kong.Target{Target: fmt.Sprintf("10.1.%d.%d:80", i/200, i%200), Weight: 100, Tags: tags}); err != nil {
			t.Fatal(err)
		}
	}
	srv.ResetCalls()
	all, err := c.ListTargets(ctx, "up", kong.ListOptions{})
	if err != nil || len(all) != 250 {
		t.Fatalf("list all: %d targets, %v", len(all), err)
	}
	mine, err := c.ListTargets(ctx, "up", kong.ListOptions{Tags: []string{"mine"}})
	if err != nil || len(mine) != 225 {
		t.Fatalf("list mine: %d targets, want 225, %v", len(mine), err)
	}
	seen := map[string]bool{}
	for _, tg := range mine {
		if seen[tg.Target] {
			t.Fatalf("target %s listed twice", tg.Target)
		}
		seen[tg.Target] = true
	}
	gets := 0
	for _, call := range srv.Calls() {
		if call.Method == "GET" {
			gets++
			if call.Query.Get("size") != "1000" {
				t.Errorf("page call %s?%s lost its size", call.Path, call.Query.Encode())
			}
		}
	}
	if gets != 6 {
		t.Errorf("want 3 pages per list (6 GETs), got %d", gets)
	}
}

func TestListServicesWithTags(t *testing.T) {
	ctx := context.Background()
	srv := kongtest.New(t)
	c := newClient(t, srv.URL, kong.WithPageSize(20))
	for i := range 90 {
		s := kong.Service{Name: fmt.Sprintf("s%02d", i), Host: "h"}
		if i%3 == 0 {
			s.Tags = []string{"tidegpu", "pool-a"}
		}
		if _, err := c.CreateService(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	srv.ResetCalls()
	got, err := c.ListServices(ctx, kong.ListOptions{Tags: []string{"tidegpu", "pool-a"}})
	if err != nil || len(got) != 30 {
		t.Fatalf("tagged services: %d, %v", len(got), err)
	}
	for _, call := range srv.Calls() {
		if call.Query.Get("tags") != "tidegpu,pool-a" {
			t.Errorf("call %s?%s: tags filter not sent", call.Path, call.Query.Encode())
		}
	}
	if n := len(srv.Calls()); n != 2 {
		t.Errorf("30 matches at 20 a page: want 2 calls, got %d", n)
	}
	// A tag outside the filter syntax is checked client-side only.
	if _, err := c.ListServices(ctx, kong.ListOptions{Tags: []string{"a:b"}}); err != nil {
		t.Fatalf("unfilterable tag: %v", err)
	}
}

func TestAuthentication(t *testing.T) {
	ctx := context.Background()
	srv := kongtest.New(t)
	const secret = "s3cret-token-value"
	srv.SetToken(secret)

	bad := newClient(t, srv.URL, kong.WithToken("wrong-token"))
	_, err := bad.GetUpstream(ctx, "x")
	if !kong.IsUnauthorized(err) {
		t.Fatalf("wrong token: want 401, got %v", err)
	}
	for _, want := range []string{"authentication failed", "check the Kong admin token", "GET /upstreams/x"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "wrong-token") {
		t.Errorf("error leaks the token: %q", err)
	}

	good := newClient(t, srv.URL+"/", kong.WithToken(secret), kong.WithUserAgent("tidegpu-test"))
	if _, err := good.GetUpstream(ctx, "x"); !kong.IsNotFound(err) {
		t.Fatalf("right token: want 404, got %v", err)
	}
	if s := good.String(); strings.Contains(s, secret) {
		t.Errorf("String leaks the token: %q", s)
	}
	calls := srv.Calls()
	if !calls[len(calls)-1].Token {
		t.Errorf("token header not sent")
	}

	withUser := newClient(t, "http://admin:hunter2@127.0.0.1:1")
	if s := withUser.String(); strings.Contains(s, "hunter2") {
		t.Errorf("String leaks URL password: %q", s)
	}
}

func TestFaults(t *testing.T) {
	ctx := context.Background()
	srv := kongtest.New(t)
	c := newClient(t, srv.URL)

	srv.Down(true)
	_, err := c.GetUpstream(ctx, "x")
	if !kong.IsUnreachable(err) || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("down: want connection refused, got %v", err)
	}
	srv.Down(false)
	if _, err := c.GetUpstream(ctx, "x"); !kong.IsNotFound(err) {
		t.Fatalf("back up: want 404, got %v", err)
	}

	srv.Unavailable(true)
	if _, err := c.GetUpstream(ctx, "x"); kong.StatusOf(err) != 503 {
		t.Fatalf("unavailable: want 503, got %v", err)
	}
	srv.Unavailable(false)

	srv.Throttle(1)
	if _, err := c.GetUpstream(ctx, "x"); !kong.IsThrottled(err) {
		t.Fatalf("throttled: want 429, got %v", err)
	}
	if _, err := c.GetUpstream(ctx, "x"); !kong.IsNotFound(err) {
		t.Fatalf("after throttle: want 404, got %v", err)
	}

	srv.Inject(kongtest.Fault{Method: "POST", PathPrefix: "/upstreams", Status: 500, Message: "An unexpected error occurred", Times: 1})
	_, err = c.CreateUpstream(ctx, kong.Upstream{Name: "u"})
	if kong.StatusOf(err) != 500 || !strings.Contains(err.Error(), "An unexpected error occurred") {
		t.Fatalf("injected 500: %v", err)
	}
	if _, err := c.CreateUpstream(ctx, kong.Upstream{Name: "u"}); err != nil {
		t.Fatalf("fault used up: %v", err)
	}
}

func TestTLSAndTimeout(t *testing.T) {
	ctx := context.Background()
	var ua atomic.Value
	release := make(chan struct{})
	ts := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ua.Store(r.Header.Get("User-Agent"))
		if r.URL.Path == "/slow/upstreams/x" {
			<-release // answers only after the client gave up
			return
		}
		if r.URL.Path == "/html/upstreams/x" {
			fmt.Fprint(w, "<html>login</html>")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"u1","name":"x"}`)
	}))
	defer ts.Close()
	defer close(release)
	ts.Config.ErrorLog = log.New(io.Discard, "", 0) // the unknown-CA handshake below fails on purpose

	if _, err := newClient(t, ts.URL).GetUpstream(ctx, "x"); !kong.IsUnreachable(err) {
		t.Fatalf("unknown CA: want transport error, got %v", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ts.Certificate())
	c := newClient(t, ts.URL, kong.WithTLSConfig(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}), kong.WithUserAgent("tidegpu/test"))
	u, err := c.GetUpstream(ctx, "x")
	if err != nil || u.ID != "u1" {
		t.Fatalf("trusted CA: %+v %v", u, err)
	}
	if got := ua.Load(); got != "tidegpu/test" {
		t.Errorf("user agent %q", got)
	}
	html := newClient(t, ts.URL+"/html", kong.WithTLSConfig(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}))
	if _, err := html.GetUpstream(ctx, "x"); !kong.IsBadAnswer(err) {
		t.Fatalf("HTML answer: want bad answer, got %v", err)
	}
	slow := newClient(t, ts.URL+"/slow", kong.WithTLSConfig(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}), kong.WithTimeout(50*time.Millisecond))
	if _, err := slow.GetUpstream(ctx, "x"); !kong.IsUnreachable(err) {
		t.Fatalf("timeout: want transport error, got %v", err)
	}
}

func TestNewValidates(t *testing.T) {
	for _, tc := range []struct {
		url  string
		opts []kong.Option
		want string
	}{
		{"ftp://x", nil, "scheme"},
		{"http://", nil, "no host"},
		{"http://x?y=1", nil, "query"},
		{"http://x", []kong.Option{kong.WithPageSize(0)}, "page size"},
		{"http://x", []kong.Option{kong.WithPageSize(1001)}, "page size"},
		{"http://x", []kong.Option{kong.WithToken("a\nb")}, "line breaks"},
	} {
		_, err := kong.New(tc.url, tc.opts...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%q): want error with %q, got %v", tc.url, tc.want, err)
		}
	}
}
