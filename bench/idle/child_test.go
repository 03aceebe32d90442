package idlebench

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tidegpu/tidegpu/internal/dashboard"
	"github.com/tidegpu/tidegpu/internal/gateway"
	"github.com/tidegpu/tidegpu/internal/metrics"
	"github.com/tidegpu/tidegpu/internal/sim"
)

// With inprocEnv=1 the bench runs its gateways and simulators as this test
// binary in a child role (childEnv) instead of `tidegpu gateway` and
// `tidegpu sim`: the same packages wired as `tidegpu gateway` wires them
// with its defaults (a scrape of each backend's /metrics wrapped for
// Ollama's /api/ps every 250 ms, the probe, the admin server's registry
// with the Go and process collectors and the dashboard sampler), for a
// machine where building the whole binary is out of reach, or to measure
// an older tree the same way (copy this directory into it).
const (
	inprocEnv = "TIDEGPU_IDLE_INPROC"
	childEnv  = "TIDEGPU_IDLE_CHILD" // "sim ADDR" or "gateway ADDR ADMIN BACKEND..."
	// profileEnv names a directory for a CPU profile of each in-process
	// gateway (idle-cpu-N.pprof, N backends), from profileFromEnv after its
	// start (default 0: from the start) for profileForEnv (default 60s).
	// Skipping the settle (40s) profiles what the long variant measures.
	profileEnv     = "TIDEGPU_IDLE_PROFILE"
	profileFromEnv = "TIDEGPU_IDLE_PROFILE_FROM"
	profileForEnv  = "TIDEGPU_IDLE_PROFILE_FOR"
	profileFor     = 60 * time.Second
)

// envDuration reads a duration from the environment, def if unset.
func envDuration(name string, def time.Duration) (time.Duration, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%s=%q: want a duration such as 40s", name, v)
	}
	return d, nil
}

func TestMain(m *testing.M) {
	if role := os.Getenv(childEnv); role != "" {
		if err := runChild(strings.Fields(role)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func runChild(args []string) error {
	switch {
	case len(args) == 2 && args[0] == "sim":
		s := sim.New(sim.Config{TTFT: 5 * time.Millisecond, TokenTime: time.Millisecond, OutputTokens: 3, InstanceID: args[1]})
		return http.ListenAndServe(args[1], s)
	case len(args) >= 3 && args[0] == "gateway":
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		src := metrics.NewOllama(metrics.NewScrape(metrics.ScrapeOptions{}), metrics.OllamaOptions{})
		g, err := gateway.New(gateway.Options{Registry: reg, MetricsInterval: 250 * time.Millisecond, Metrics: src})
		if err != nil {
			return err
		}
		var bs []gateway.Backend
		for i, a := range args[3:] {
			bs = append(bs, gateway.Backend{ID: fmt.Sprintf("static-%d", i), Pool: "default", Address: a})
		}
		g.SetBackends("default", bs)
		if dir := os.Getenv(profileEnv); dir != "" {
			// A CPU profile of the idle gateway.
			from, err := envDuration(profileFromEnv, 0)
			if err != nil {
				return err
			}
			length, err := envDuration(profileForEnv, profileFor)
			if err != nil {
				return err
			}
			f, err := os.Create(filepath.Join(dir, fmt.Sprintf("idle-cpu-%d.pprof", len(bs))))
			if err != nil {
				return err
			}
			go func() {
				time.Sleep(from) // the profile's start: a time, not a condition
				if err := pprof.StartCPUProfile(f); err != nil {
					fmt.Fprintln(os.Stderr, err)
					return
				}
				time.Sleep(length) // the profile's length
				pprof.StopCPUProfile()
				f.Close()
			}()
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
		sampler := dashboard.NewSampler(dashboard.SamplerOptions{Gatherer: g.RequestMetrics(), Backends: g.Backends})
		go sampler.Run(context.Background())
		// Both listening before the admin server answers /healthz.
		ln, err := net.Listen("tcp", args[1])
		if err != nil {
			return err
		}
		aln, err := net.Listen("tcp", args[2])
		if err != nil {
			return err
		}
		go func() { _ = http.Serve(aln, mux) }()
		srv := &http.Server{Handler: g, ReadHeaderTimeout: gateway.DefaultReadHeaderTimeout}
		return srv.Serve(ln)
	}
	return fmt.Errorf("%s: bad role %q", childEnv, args)
}
