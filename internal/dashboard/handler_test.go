package dashboard_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/admin"
	"github.com/tidegpu/tidegpu/internal/dashboard"
	"github.com/tidegpu/tidegpu/internal/engine"
	"github.com/tidegpu/tidegpu/internal/events"
	"github.com/tidegpu/tidegpu/internal/gateway"
	"github.com/tidegpu/tidegpu/internal/provider/local"
	"github.com/tidegpu/tidegpu/internal/registrar"
)

// newAdmin serves the admin API with the dashboard mounted, over a real
// engine Manager (not running: its pool shows its spec) and event log.
func newAdmin(t *testing.T, token string, withDashboard bool) (*httptest.Server, *events.Recorder) {
	t.Helper()
	prov, err := local.New(local.Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = prov.Close(context.Background()) })
	rec := events.NewRecorder(100, nil, nil)
	mgr, err := engine.NewManager(engine.Options{Provider: prov, Registrar: registrar.Nop{}, Recorder: rec})
	if err != nil {
		t.Fatal(err)
	}
	tp := &tidev1.TidePool{Spec: tidev1.TidePoolSpec{Provider: tidev1.ProviderLocal, Minimum: 2, Maximum: 2}}
	tp.Name = "p"
	mgr.Apply(tp)
	rec.Eventf(events.TypeNormal, "Launched", "p", "lp-1", "launched lp-1 at 127.0.0.1:4000 (spot market): 1 of 2 serving")
	rec.Eventf(events.TypeNormal, "Ready", "p", "lp-1", "lp-1 ready")

	gw, err := gateway.New(gateway.Options{ProbeInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.Close)
	o := admin.Options{Pools: mgr, Events: rec, Backends: gw, Token: token}
	if withDashboard {
		clk := clocktesting.NewFakeClock(time.Now())
		s := dashboard.NewSampler(dashboard.SamplerOptions{Backends: gw.Backends, Clock: clk})
		s.Sample()
		clk.Step(dashboard.DefaultInterval)
		s.Sample()
		o.Dashboard = dashboard.Handler(dashboard.Options{Pools: mgr, Events: rec, Sampler: s})
	}
	srv := httptest.NewServer(admin.NewHandler(o))
	t.Cleanup(srv.Close)
	return srv, rec
}

type answer struct {
	code int
	ct   string
	csp  string
	body string
}

func get(t *testing.T, method, url, token string) answer {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Content-Security-Policy"), string(b)}
}

func TestDashboardRoutes(t *testing.T) {
	srv, _ := newAdmin(t, "", true)
	page := get(t, "GET", srv.URL+"/", "")
	if page.code != 200 || !strings.HasPrefix(page.ct, "text/html") || !strings.Contains(page.body, "<title>TideGPU</title>") ||
		!strings.Contains(page.csp, "script-src 'self'") {
		t.Fatalf("GET / = %d %q csp %q: %.200s", page.code, page.ct, page.csp, page.body)
	}
	// Every asset the page names is embedded and served with its type.
	refs := regexp.MustCompile(`(?:src|href)="(/ui/[^"]+)"`).FindAllStringSubmatch(page.body, -1)
	if len(refs) < 3 {
		t.Fatalf("the page names %d assets, want the script, the style sheet and the icon", len(refs))
	}
	types := map[string]string{".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml"}
	for _, r := range refs {
		a := get(t, "GET", srv.URL+r[1], "")
		want := types[r[1][strings.LastIndex(r[1], "."):]]
		if a.code != 200 || !strings.HasPrefix(a.ct, want) || len(a.body) == 0 {
			t.Errorf("GET %s = %d %q (%d bytes), want 200 %s", r[1], a.code, a.ct, len(a.body), want)
		}
	}
	for path, want := range map[string]int{"/ui/nope.js": 404, "/ui/": 301, "/ui/index.html": 301, "/elsewhere": 404} {
		if got := get(t, "GET", srv.URL+path, "").code; got != want {
			t.Errorf("GET %s = %d, want %d", path, got, want)
		}
	}

	var tl dashboard.Timeline
	a := get(t, "GET", srv.URL+"/api/v1/timeline", "")
	if err := json.Unmarshal([]byte(a.body), &tl); err != nil || a.code != 200 {
		t.Fatalf("timeline: %d %v: %s", a.code, err, a.body)
	}
	if len(tl.Pools) != 1 || tl.Pools[0].Name != "p" || tl.Pools[0].Desired != 2 || len(tl.Pools[0].Tracks) != 1 ||
		tl.Pools[0].Tracks[0].Instance != "lp-1" || tl.Pools[0].Tracks[0].Market != "spot" {
		t.Fatalf("timeline = %+v", tl)
	}

	var ser dashboard.Series
	a = get(t, "GET", srv.URL+"/api/v1/timeseries", "")
	if err := json.Unmarshal([]byte(a.body), &ser); err != nil || a.code != 200 {
		t.Fatalf("timeseries: %d %v: %s", a.code, err, a.body)
	}
	if !ser.Available || ser.Source != dashboard.SourceBackends || len(ser.Points) != 1 || ser.WindowSeconds != 900 {
		t.Fatalf("timeseries = %+v", ser)
	}
	// The admin API is still there around the dashboard.
	if got := get(t, "GET", srv.URL+"/api/v1/pools", "").code; got != 200 {
		t.Errorf("GET /api/v1/pools = %d", got)
	}
	if got := get(t, "POST", srv.URL+"/", "").code; got != 405 && got != 404 {
		t.Errorf("POST / = %d, want no handler", got)
	}
}

func TestDashboardPageIsPublicItsDataIsNot(t *testing.T) {
	const token = "s3cret-token"
	srv, _ := newAdmin(t, token, true)
	cases := []struct {
		method, path, token string
		want                int
	}{
		{"GET", "/", "", 200},
		{"GET", "/ui/app.js", "", 200},
		{"GET", "/ui/style.css", "", 200},
		{"GET", "/healthz", "", 200},
		{"GET", "/api/v1/timeline", "", 401},
		{"GET", "/api/v1/timeseries", "", 401},
		{"GET", "/api/v1/pools", "", 401},
		{"GET", "/api/v1/events", "", 401},
		{"POST", "/api/v1/pools/p/instances/x/reclaim", "", 401},
		{"POST", "/", "", 401},
		{"GET", "/api/v1/timeline", "wrong", 401},
		{"GET", "/api/v1/timeline", token, 200},
		{"GET", "/api/v1/timeseries", token, 200},
		{"GET", "/api/v1/pools", token, 200},
	}
	for _, tc := range cases {
		a := get(t, tc.method, srv.URL+tc.path, tc.token)
		if a.code != tc.want {
			t.Errorf("%s %s (token %t) = %d, want %d", tc.method, tc.path, tc.token != "", a.code, tc.want)
		}
		if strings.Contains(a.body, token) {
			t.Errorf("%s %s answers with the token in its body", tc.method, tc.path)
		}
	}
}

func TestAdminWithoutDashboardServesNoPage(t *testing.T) {
	srv, _ := newAdmin(t, "", false)
	for _, path := range []string{"/", "/ui/app.js", "/api/v1/timeline", "/api/v1/timeseries"} {
		if got := get(t, "GET", srv.URL+path, "").code; got != 404 {
			t.Errorf("GET %s = %d without a dashboard, want 404", path, got)
		}
	}
}

func TestTimeseriesWithoutSampler(t *testing.T) {
	h := dashboard.Handler(dashboard.Options{})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/api/v1/timeseries", nil))
	var ser dashboard.Series
	if err := json.Unmarshal(rec.Body.Bytes(), &ser); err != nil || rec.Code != 200 || ser.Available || ser.Points == nil {
		t.Fatalf("GET /api/v1/timeseries with no sampler = %d %s", rec.Code, rec.Body)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/api/v1/timeline", nil))
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"pools": []`) {
		t.Fatalf("GET /api/v1/timeline with nothing = %d %s", rec.Code, rec.Body)
	}
}
