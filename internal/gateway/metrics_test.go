package gateway

import (
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
