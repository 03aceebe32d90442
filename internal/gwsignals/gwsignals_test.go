package gwsignals

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/tidegpu/tidegpu/internal/autoscale"
	"github.com/tidegpu/tidegpu/internal/gateway"
	loadmetrics "github.com/tidegpu/tidegpu/internal/metrics"
)

// until polls cond, bounded by 10 s.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func TestObserve(t *testing.T) {
	rep := func(in, req float64) Replica {
		return Replica{InFlight: map[string]float64{"ns/p": in}, Requests: map[string]float64{"ns/p": req}}
	}
	for _, tc := range []struct {
		name     string
		replicas map[string]Replica
		prev     map[string]counterAt
		want     []autoscale.Observation
	}{
		{"first look: concurrency only", map[string]Replica{"a": rep(3, 100), "b": rep(2, 50)}, nil,
			[]autoscale.Observation{{Metric: "concurrency", Value: 5, At: t0}}},
		{"rate summed over replicas", map[string]Replica{"a": rep(3, 100), "b": rep(2, 50)},
			map[string]counterAt{"a": {80, t0.Add(-2 * time.Second)}, "b": {40, t0.Add(-2 * time.Second)}},
			[]autoscale.Observation{{Metric: "concurrency", Value: 5, At: t0}, {Metric: "qps", Value: 15, At: t0}}},
		{"a restarted replica counts from zero", map[string]Replica{"a": rep(0, 6)},
			map[string]counterAt{"a": {1000, t0.Add(-2 * time.Second)}},
			[]autoscale.Observation{{Metric: "concurrency", Value: 0, At: t0}, {Metric: "qps", Value: 3, At: t0}}},
		{"a new replica has no rate yet", map[string]Replica{"a": rep(1, 10), "new": rep(1, 500)},
			map[string]counterAt{"a": {0, t0.Add(-time.Second)}},
			[]autoscale.Observation{{Metric: "concurrency", Value: 2, At: t0}, {Metric: "qps", Value: 10, At: t0}}},
		{"another pool", map[string]Replica{"a": {InFlight: map[string]float64{"ns/q": 9}}}, nil,
			[]autoscale.Observation{{Metric: "concurrency", Value: 0, At: t0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, next := observe("ns/p", &Reading{At: t0, Replicas: tc.replicas}, tc.prev, t0)
			if len(got) != len(tc.want) {
				t.Fatalf("got %+v; want %+v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("[%d] %+v; want %+v", i, got[i], tc.want[i])
				}
			}
			if len(next) != len(tc.replicas) {
				t.Errorf("kept %v", next)
			}
		})
	}
}

func TestHealth(t *testing.T) {
	fresh := func(source string, be map[string]bool) Replica {
		return Replica{Source: source, Fresh: map[string]map[string]bool{"ns/p": be}}
	}
	for _, tc := range []struct {
		name         string
		rd           Reading
		source       string
		fallback, ok bool
		reason       []string
	}{
		{"nothing known", Reading{}, "", false, false, nil},
		{"all fresh", Reading{Replicas: map[string]Replica{"a": fresh("scrape", map[string]bool{"i-1": true, "i-2": true})}},
			"scrape", false, true, []string{"2 of 2 backends"}},
		{"one missing, named", Reading{Replicas: map[string]Replica{
			"a": fresh("prometheus", map[string]bool{"i-1": true, "i-2": false}),
			"b": fresh("prometheus", map[string]bool{"i-1": false, "i-2": false})}},
			"prometheus", false, true, []string{"1 of 2 backends", "no fresh metrics for i-2", "2 gateway replicas"}},
		{"none fresh: the gateway's own", Reading{Replicas: map[string]Replica{"a": fresh("gateway", map[string]bool{"i-1": false})}},
			"gateway", true, true, []string{"0 of 1", "i-1"}},
		{"replica down named", Reading{Replicas: map[string]Replica{"a": fresh("scrape", map[string]bool{"i-1": true})},
			Failed: map[string]error{"http://10.0.0.2:9091/metrics": errors.New("connection refused")}},
			"scrape", false, true, []string{"10.0.0.2", "connection refused"}},
		{"every replica down", Reading{Failed: map[string]error{"http://10.0.0.2:9091/metrics": errors.New("refused")}},
			"gateway", true, true, []string{"unreadable", "10.0.0.2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			source, fallback, reason, ok := health("ns/p", &tc.rd)
			if source != tc.source || fallback != tc.fallback || ok != tc.ok {
				t.Errorf("(%q, %v, %v); want (%q, %v, %v)", source, fallback, ok, tc.source, tc.fallback, tc.ok)
			}
			for _, w := range tc.reason {
				if !strings.Contains(reason, w) {
					t.Errorf("reason %q lacks %q", reason, w)
				}
			}
		})
	}
}

func TestGaps(t *testing.T) {
	rep := func(be map[string]bool) Replica { return Replica{Fresh: map[string]map[string]bool{"ns/p": be}} }
	for _, tc := range []struct {
		name string
		rd   Reading
		want string
	}{
		{"none known", Reading{}, ""},
		{"all fresh", Reading{Replicas: map[string]Replica{"a": rep(map[string]bool{"i-1": true})}}, ""},
		{"fresh in one replica is fresh", Reading{Replicas: map[string]Replica{
			"a": rep(map[string]bool{"i-1": true, "i-2": false}), "b": rep(map[string]bool{"i-2": true, "i-3": false})}}, "i-3"},
		{"none fresh: a fallback, not gaps", Reading{Replicas: map[string]Replica{"a": rep(map[string]bool{"i-1": false})}}, ""},
		{"sorted", Reading{Replicas: map[string]Replica{"a": rep(map[string]bool{"i-9": false, "i-1": true, "i-3": false})}}, "i-3,i-9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := strings.Join(gaps("ns/p", &tc.rd), ","); got != tc.want {
				t.Errorf("gaps %q; want %q", got, tc.want)
			}
		})
	}
}

func TestParseRefusesOtherExpositions(t *testing.T) {
	if _, err := Parse([]byte("# TYPE go_goroutines gauge\ngo_goroutines 3\n"), expfmt.NewFormat(expfmt.TypeTextPlain)); err == nil ||
		!strings.Contains(err.Error(), metricDuration) {
		t.Errorf("err %v; want it to name %s", err, metricDuration)
	}
	if _, err := Parse([]byte("bad{"), expfmt.NewFormat(expfmt.TypeTextPlain)); err == nil {
		t.Error("malformed input accepted")
	}
}

func TestNewValidates(t *testing.T) {
	for _, urls := range [][]string{nil, {"ftp://x/metrics"}, {"127.0.0.1:9091"}, {"http://"}} {
		if _, err := New(Options{URLs: urls}); err == nil {
			t.Errorf("New(%q) accepted", urls)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("# TYPE tidegpu_gateway_request_duration_seconds histogram\ntidegpu_gateway_request_duration_seconds_count 1\n" +
		"# TYPE tidegpu_gateway_backend_in_flight gauge\ntidegpu_gateway_backend_in_flight{pool=\"p\",backend=\"a\"} 2\n"))
	f.Add([]byte("tidegpu_gateway_requests_total{pool=\"p\"} NaN\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		rep, err := Parse(b, expfmt.NewFormat(expfmt.TypeTextPlain))
		if err != nil {
			return
		}
		for _, v := range rep.InFlight {
			if !(v > 0) {
				t.Fatalf("in flight %v kept", v)
			}
		}
	})
}

// TestReaderSumsRealGatewayReplicas runs two real gateways (one with the
// gateway's own signals only, one scraping its backend's /metrics) serving
// their metrics as `tidegpu gateway --admin-addr` does, holds requests in
// flight through both, and reads them through one headless-style host name
// and an IP URL.
func TestReaderSumsRealGatewayReplicas(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free)
	var started sync.WaitGroup
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			_, _ = w.Write([]byte("# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 0\n"))
			return
		}
		started.Done()
		<-release
	}))
	t.Cleanup(backend.Close)

	replica := func(withMetrics bool) (data, admin *httptest.Server) {
		reg := prometheus.NewRegistry()
		opts := gateway.Options{Registry: reg, ProbeInterval: -1, WaitForBackend: -1, MetricsInterval: 20 * time.Millisecond}
		if withMetrics {
			src := loadmetrics.NewScrape(loadmetrics.ScrapeOptions{})
			t.Cleanup(src.Close)
			opts.Metrics = src
		}
		g, err := gateway.New(opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(g.Close)
		g.SetBackends("ns/p", []gateway.Backend{{ID: "i-1", Pool: "ns/p", Address: backend.Listener.Addr().String()}})
		data = httptest.NewServer(g)
		t.Cleanup(data.Close)
		admin = httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		t.Cleanup(admin.Close)
		return data, admin
	}
	dataA, adminA := replica(false)
	dataB, adminB := replica(true)
	// Replica A by host name, as a headless Service's would be given, if
	// localhost is only 127.0.0.1 here (the servers listen there only).
	urlA := adminA.URL + "/metrics"
	if addrs, err := net.DefaultResolver.LookupHost(context.Background(), "localhost"); err == nil && len(addrs) == 1 && addrs[0] == "127.0.0.1" {
		urlA = "http://localhost:" + adminA.URL[strings.LastIndex(adminA.URL, ":")+1:] + "/metrics"
	}
	urlB := adminB.URL + "/metrics"

	// 2 requests held through replica A, 1 through B.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { free(); cancel(); wg.Wait() })
	started.Add(3)
	for _, u := range []string{dataA.URL, dataA.URL, dataB.URL} {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, u+"/v1/completions", strings.NewReader(`{"model":"m"}`))
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		})
	}
	started.Wait()

	fc := clocktesting.NewFakeClock(t0)
	r, err := New(Options{URLs: []string{urlA, urlB}, Clock: fc})
	if err != nil {
		t.Fatal(err)
	}
	until(t, "B's fresh backend metrics", func() bool {
		fc.Step(2 * time.Second)
		source, fallback, _, ok := r.SignalHealth("ns/p")
		return ok && !fallback && source == "scrape"
	})
	obs := r.Observe("ns/p", fc.Now())
	if len(obs) == 0 || obs[0].Metric != "concurrency" || obs[0].Value != 3 {
		t.Fatalf("observations %+v; want concurrency 3 (2 through A, 1 through B)", obs)
	}
	if n := r.InFlight("i-1"); n != 3 {
		t.Errorf("InFlight(i-1) = %d; want 3", n)
	}
	free()
	wg.Wait()
	fc.Step(2 * time.Second)
	obs = r.Observe("ns/p", fc.Now())
	if len(obs) != 2 || obs[0].Value != 0 || obs[1].Metric != "qps" || obs[1].Value != 1.5 {
		t.Fatalf("after the 3 answers, 2 s later: %+v; want concurrency 0, qps 1.5", obs)
	}
	if n := r.InFlight("i-1"); n != 0 {
		t.Errorf("InFlight(i-1) = %d after the answers; want 0", n)
	}

	// A replica gone: nothing observed (a partial sum would look like less
	// load), and the health names it.
	adminB.Close()
	fc.Step(2 * time.Second)
	if obs := r.Observe("ns/p", fc.Now()); obs != nil {
		t.Errorf("with a replica unreadable: %+v; want nothing", obs)
	}
	if n := r.InFlight("i-1"); n != -1 {
		t.Errorf("InFlight with a replica unreadable = %d; want -1 (unknown)", n)
	}
	if _, _, reason, _ := r.SignalHealth("ns/p"); !strings.Contains(reason, urlB) {
		t.Errorf("reason %q does not name the unreadable replica %s", reason, urlB)
	}
}

// Requests the activator holds for a pool at zero, and those waiting in a
// saturated pool's fair queue, count as its in-flight load
// (tidegpu_gateway_activator_held and tidegpu_gateway_queued_requests,
// internal/gateway/metrics.go).
func TestParseCountsHeldRequests(t *testing.T) {
	body := `# TYPE tidegpu_gateway_request_duration_seconds histogram
tidegpu_gateway_request_duration_seconds_bucket{le="+Inf"} 0
tidegpu_gateway_request_duration_seconds_sum 0
tidegpu_gateway_request_duration_seconds_count 0
# TYPE tidegpu_gateway_activator_held gauge
tidegpu_gateway_activator_held{pool="ns/zero"} 7
# TYPE tidegpu_gateway_queued_requests gauge
tidegpu_gateway_queued_requests{pool="ns/busy",tenant="team-a"} 5
tidegpu_gateway_queued_requests{pool="ns/busy",tenant="team-b"} 2
tidegpu_gateway_queued_requests{pool="any",tenant=""} 9
`
	rep, err := Parse([]byte(body), expfmt.NewFormat(expfmt.TypeTextPlain))
	if err != nil {
		t.Fatal(err)
	}
	if rep.InFlight["ns/zero"] != 7 {
		t.Fatalf("in flight %v, want the 7 held requests", rep.InFlight)
	}
	if rep.InFlight["ns/busy"] != 7 || rep.InFlight["any"] != 0 {
		t.Fatalf("in flight %v, want the 7 queued of ns/busy (every tenant) and none for \"any\"", rep.InFlight)
	}
}
