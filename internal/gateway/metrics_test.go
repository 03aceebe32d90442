package gateway

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestRequestMetricsGathersOnlyTheRequestFamilies(t *testing.T) {
	reg := prometheus.NewRegistry()
	b := newBackend(t, "b", echoHandler("b"))
	h := newHarness(t, Options{Registry: reg})
	h.g.SetBackends("p", []Backend{b.backend("p")})
	if code, _ := h.post(t); code != 200 {
		t.Fatalf("status %d", code)
	}
	// The request is counted once its handler returns, which may be just
	// after the client has read the answer.
	poll(t, 5*time.Second, "the request counted", func() bool {
		return strings.Contains(gatherText(t, reg), `tidegpu_gateway_requests_total{backend="b",code="200",pool="p"} 1`)
	})

	g := h.g.RequestMetrics()
	if g == nil {
		t.Fatal("RequestMetrics is nil with a registry")
	}
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, mf := range mfs {
		names = append(names, mf.GetName())
	}
	if want := "tidegpu_gateway_request_duration_seconds tidegpu_gateway_requests_total"; strings.Join(names, " ") != want {
		t.Fatalf("RequestMetrics gathers %v, want %s", names, want)
	}
	// The same collectors as in the registry: the same values, line for line.
	var fromReg []string
	for _, l := range strings.Split(gatherText(t, reg), "\n") {
		if strings.HasPrefix(l, "tidegpu_gateway_requests_total{") || strings.HasPrefix(l, "tidegpu_gateway_request_duration_seconds") {
			fromReg = append(fromReg, l)
		}
	}
	if got, want := strings.TrimSpace(gatherText(t, g)), strings.Join(fromReg, "\n"); got != want {
		t.Fatalf("RequestMetrics:\n%s\nthe registry's:\n%s", got, want)
	}

	// Without a registry there is nothing to gather: a nil interface, so
	// that a sampler given it falls back to the backends' counters.
	if g := newHarness(t, Options{}).g.RequestMetrics(); g != nil {
		t.Fatalf("RequestMetrics without a registry = %#v, want nil", g)
	}
}

// TestRequestCounterCache: requests counted through the cache land in the
// registry's series, and a series forgotten (its backend gone) starts
// again from its next request.
func TestRequestCounterCache(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg, &Gateway{}) // gathered through m.traffic: no gateway state
	if err != nil {
		t.Fatal(err)
	}
	line := func(backend, code string, n int) string {
		return `tidegpu_gateway_requests_total{backend="` + backend + `",code="` + code + `",pool="p"} ` + strconv.Itoa(n)
	}
	for range 3 {
		m.request("p", "a", 200, time.Millisecond)
	}
	m.request("p", "a", 503, time.Millisecond)
	m.request("p", "b", 200, time.Millisecond)
	text := gatherText(t, m.traffic)
	for _, want := range []string{line("a", "200", 3), line("a", "503", 1), line("b", "200", 1)} {
		if !strings.Contains(text, want) {
			t.Errorf("missing %s in\n%s", want, text)
		}
	}
	m.forget("a")
	if text := gatherText(t, m.traffic); strings.Contains(text, `backend="a"`) {
		t.Fatalf("a's series after forget:\n%s", text)
	}
	m.request("p", "a", 200, time.Millisecond)
	text = gatherText(t, m.traffic)
	for _, want := range []string{line("a", "200", 1), line("b", "200", 1)} {
		if !strings.Contains(text, want) {
			t.Errorf("missing %s in\n%s", want, text)
		}
	}
}
