package embedded

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/tidegpu/tidegpu/internal/gateway"
	"github.com/tidegpu/tidegpu/internal/metrics"
)

func TestGatewaySignals(t *testing.T) {
	s := &gatewaySignals{last: map[string]counterAt{}}
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		at       time.Duration
		inFlight int
		requests uint64
		wantQPS  float64 // -1: no qps observation
	}{
		{0, 3, 100, -1},               // first look: no rate yet
		{2 * time.Second, 5, 120, 10}, // 20 requests in 2 s
		{4 * time.Second, 0, 120, 0},  // idle
		{5 * time.Second, 1, 10, -1},  // counter went back (backends replaced): skip
	}
	for _, tc := range cases {
		obs := s.observe("p", tc.inFlight, tc.requests, t0.Add(tc.at))
		if obs[0].Metric != "concurrency" || obs[0].Value != float64(tc.inFlight) {
			t.Errorf("at %s: concurrency %+v, want %d", tc.at, obs[0], tc.inFlight)
		}
		switch {
		case tc.wantQPS < 0 && len(obs) != 1:
			t.Errorf("at %s: unexpected qps %+v", tc.at, obs[1:])
		case tc.wantQPS >= 0 && (len(obs) != 2 || obs[1].Metric != "qps" || obs[1].Value != tc.wantQPS):
			t.Errorf("at %s: qps %+v, want %v", tc.at, obs, tc.wantQPS)
		}
	}
}

// TestGatewaySignalsGPU: with dcgm-exporter's GPU utilisation in the
// gateway's metrics (a test server speaking its exposition:
// DCGM_FI_DEV_GPU_UTIL, percent per GPU, from NVIDIA/dcgm-exporter's
// etc/default-counters.csv), the pool's observations carry
// gpu-utilization, the mean over its backends in percent.
func TestGatewaySignalsGPU(t *testing.T) {
	backend := func() *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write([]byte("# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 0\n"))
		}))
	}
	a, b := backend(), backend()
	defer a.Close()
	defer b.Close()
	util := map[string]int{"a": 90, "b": 30}
	exporter := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.URL.Query().Get("id")
		fmt.Fprintf(w, "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\nDCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-%s\",device=\"nvidia0\",modelName=\"NVIDIA L4\",Hostname=%q} %d\n", id, id, util[id])
	}))
	defer exporter.Close()
	src, err := metrics.NewDCGM(metrics.NewScrape(metrics.ScrapeOptions{}), metrics.DCGMOptions{URL: exporter.URL + "/metrics?id={{.ID}}"})
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.New(gateway.Options{Metrics: src, MetricsInterval: 20 * time.Millisecond, ProbeInterval: -1, WaitForBackend: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	gw.SetBackends("p", []gateway.Backend{{ID: "a", Pool: "p", Address: a.Listener.Addr().String()}, {ID: "b", Pool: "p", Address: b.Listener.Addr().String()}})
	s := newGatewaySignals(gw)
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, o := range s.Observe("p", time.Now()) {
			if o.Metric == "gpu-utilization" && o.Value == 60 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no gpu-utilization 60 (mean of 90 and 30) within 10s: %+v", s.Observe("p", time.Now()))
		}
		time.Sleep(10 * time.Millisecond)
	}
}
