package streamingbench

import (
	"fmt"
	"github.com/tidegpu/tidegpu/bench/internal/peer"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidegpu/tidegpu/internal/gateway"
)

// profileEnv names a directory: TestStreamingProfile runs the gateway in
// this process under N streams (profileNEnv, default 1,000) onto two real
// simulators and writes cpu.pprof, heap.pprof (at the peak, after a GC) and
// goroutine.pprof there. The clients share the process but not the code:
// they speak HTTP over raw connections (http.ReadResponse), so every
// net/http server and Transport frame in the profiles is the gateway's.
const (
	profileEnv  = "TIDEGPU_STREAMS_PROFILE"
	profileNEnv = "TIDEGPU_STREAMS_PROFILE_N"
)

func TestStreamingProfile(t *testing.T) {
	dir := os.Getenv(profileEnv)
	if dir == "" {
		t.Skipf("set %s=dir to profile the gateway under many streams", profileEnv)
	}
	n := 1000
	if v := os.Getenv(profileNEnv); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 || n > 5000 {
			t.Fatalf("%s=%q: want 1..5000", profileNEnv, v)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := params{ttft: 50 * time.Millisecond, tokenTime: 100 * time.Millisecond, tokens: 120, stagger: time.Millisecond}
	bin := peer.TidegpuBinary(t)
	tmp := t.TempDir()
	var backends []gateway.Backend
	for i := range 2 {
		addr := peer.FreeAddr(t)
		pr := peer.Start(t, filepath.Join(tmp, fmt.Sprintf("sim%d.log", i)), bin, "sim", "--addr", addr,
			"--ttft", p.ttft.String(), "--token-time", p.tokenTime.String(), "--output-tokens", strconv.Itoa(p.tokens),
			"--batch-slowdown", "0", "--max-batch", "100000", "--instance-id", fmt.Sprintf("sim-%d", i))
		peer.WaitHTTP(t, pr, "http://"+addr+"/healthz")
		backends = append(backends, gateway.Backend{ID: fmt.Sprintf("sim-%d", i), Pool: "p", Address: addr})
	}
	var usages atomic.Int64
	g, err := gateway.New(gateway.Options{
		Registry: prometheus.NewRegistry(), MetricsInterval: 250 * time.Millisecond,
		// As `tidegpu up` and a reporting gateway: OpenAI streams are asked
		// for their usage, which the gateway strips.
		OnUsage: func(string, string, int64, int64) { usages.Add(1) },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	g.SetBackends("p", backends)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := gateway.Tuning{}.Server(g) // the product's server, as `tidegpu gateway` runs it
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	addr := ln.Addr().String()

	_ = run(10, p, func(int) string { return addr }) // warm up
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	g0 := runtime.NumGoroutine()

	cpu, err := os.Create(filepath.Join(dir, "cpu.pprof"))
	if err != nil {
		t.Fatal(err)
	}
	defer cpu.Close()
	if err := pprof.StartCPUProfile(cpu); err != nil {
		t.Fatal(err)
	}
	done := make(chan []Stream)
	go func() { done <- run(n, p, func(int) string { return addr }) }()
	// All streams are open from the last start until the first ends.
	open := time.Duration(n)*p.stagger + 2*time.Second
	time.Sleep(open) // the point of the run to sample, not a wait for a condition
	var live, peak runtime.MemStats
	runtime.ReadMemStats(&live) // as it is: garbage not yet collected included
	runtime.GC()
	runtime.ReadMemStats(&peak)
	gPeak := runtime.NumGoroutine()
	for _, name := range []string{"heap", "goroutine"} {
		f, err := os.Create(filepath.Join(dir, name+".pprof"))
		if err != nil {
			t.Fatal(err)
		}
		if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	streams := <-done
	pprof.StopCPUProfile()
	s := Summarize(streams, p.tokens)
	if s.Failures > 0 {
		t.Errorf("%d failed streams; first: %v", s.Failures, s.FirstErr)
	}
	per := func(a, b uint64) float64 { return (float64(a) - float64(b)) / 1024 / float64(n) }
	t.Logf("N=%d: TTFB p50 %v p99 %v gap p99 %v; usage chunks %d", n, s.TTFB50, s.TTFB99, s.Gap99, usages.Load())
	t.Logf("per open stream, gateway and clients together (after a GC): heap in use %.1f KB, stacks %.1f KB, goroutines %.2f",
		per(peak.HeapInuse, before.HeapInuse), per(peak.StackInuse, before.StackInuse), float64(gPeak-g0)/float64(n))
	t.Logf("per open stream before that GC: heap in use %.1f KB, heap held from the OS %.1f KB, stacks %.1f KB; GCs %d, GC CPU fraction %.4f",
		per(live.HeapInuse, before.HeapInuse), per(live.HeapSys-live.HeapReleased, before.HeapSys-before.HeapReleased), per(live.StackInuse, before.StackInuse),
		peak.NumGC-before.NumGC, peak.GCCPUFraction)
	t.Logf("profiles in %s: go tool pprof -sample_index=inuse_space -top %s", dir, filepath.Join(dir, "heap.pprof"))
}
