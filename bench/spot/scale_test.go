package spotbench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/engine"
	"github.com/tidegpu/tidegpu/internal/events"
	"github.com/tidegpu/tidegpu/internal/provider/spotsim"
	"github.com/tidegpu/tidegpu/internal/registrar"
)

const scaleInstances = 10

// scaleRun sizes the scale benchmark. The synthetic market is quiet (every
// zone unlimited) for quiet, so that the pools converge undisturbed; then,
// each trace step of gap, one zone in turn holds only 2 instances per pool,
// and the market preempts the rest with notice. The steady window is
// measured from the end of the quiet time.
type scaleRun struct {
	pools              int
	quiet, steady, gap time.Duration
	notice             time.Duration
}

// TestControllerScale runs the real engine (Manager, one loop per pool,
// readiness probes over HTTP, registrar.Nop) over the process-less sim
// provider: N pools of 10 instances converge, then, one zone at a time,
// the market preempts every instance beyond 2 per pool. It reports cloud
// calls per round, round latency (the engine's own histogram), CPU and
// memory. With TIDEGPU_BENCH_SCALE=1 it runs 1,000 pools (issue 5, item
// 7), else 20. The pools use spec.placement (spot + fallback) unless
// TIDEGPU_BENCH_SCALE_PLACEMENT=off.
func TestControllerScale(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the engine in real time: not with -short")
	}
	run := scaleRun{pools: 20, quiet: 2 * time.Second, steady: 4 * time.Second, gap: time.Second, notice: 500 * time.Millisecond}
	if os.Getenv("TIDEGPU_BENCH_SCALE") == "1" {
		run = scaleRun{pools: 1000, quiet: time.Minute, steady: 30 * time.Second, gap: 2 * time.Second, notice: time.Second}
	}
	pools := run.pools
	// TIDEGPU_BENCH_SCALE_PLACEMENT=off runs the plan's own zone-less
	// launches instead of spec.placement.
	var pl *tidev1.PlacementSpec
	mode := "with spec.placement (spot + fallback)"
	if os.Getenv("TIDEGPU_BENCH_SCALE_PLACEMENT") != "off" {
		pl = &tidev1.PlacementSpec{}
	} else {
		mode = "without spec.placement (the plan's own zone-less launches)"
	}

	// Process-less instances answer readiness probes on these servers,
	// one per loopback address: the engine opens a connection per probe,
	// and a single address would run out of ephemeral ports (TIME_WAIT)
	// long before cloud instances, each with its own address, would.
	var addrs []string
	for i := 1; i <= 16; i++ {
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.%d:0", i))
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
		srv.Listener.Close()
		srv.Listener = l
		srv.Start()
		defer srv.Close()
		addrs = append(addrs, l.Addr().String())
	}

	zones := []string{"us-east-1a", "us-east-1b", "us-east-1c"}
	steps := int(time.Hour / run.gap) // longer than the run: no wrap-around
	var zts []spotsim.ZoneTrace
	for zi, z := range zones {
		c := make([]int, steps)
		for i := range c {
			c[i] = spotsim.Unlimited
			if i >= int(run.quiet/run.gap) && i%len(zones) == zi {
				c[i] = 2
			}
		}
		zts = append(zts, spotsim.ZoneTrace{Zone: z, Gap: run.gap, Capacity: c})
	}
	tr, err := spotsim.NewTrace(zts)
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	simStart := time.Now()
	sim, err := spotsim.New(spotsim.Options{Trace: tr, CapacityPerPool: true, Notice: run.notice, Start: simStart,
		AddressOf: func(n uint64) string { return addrs[n%uint64(len(addrs))] }, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	simDone := make(chan struct{})
	go func() { defer close(simDone); sim.Run(ctx) }()

	reg := prometheus.NewRegistry()
	mgr, err := engine.NewManager(engine.Options{Provider: sim, Registrar: registrar.Nop{},
		Recorder: events.NewRecorder(10_000, nil, nil), Registry: reg, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	mgrDone := make(chan struct{})
	go func() { defer close(mgrDone); mgr.Run(ctx) }()
	defer func() { cancel(); <-mgrDone; <-simDone }()

	start := time.Now()
	for i := range pools {
		mgr.Apply(&tidev1.TidePool{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pool-%04d", i), Generation: 1},
			Spec: tidev1.TidePoolSpec{Provider: tidev1.ProviderSim, InstanceType: spotsim.DefaultInstanceType,
				InstanceChargeType: tidev1.ChargeSpot, Minimum: scaleInstances, Maximum: scaleInstances,
				Serving:   tidev1.ServingSpec{ReadinessPath: "/healthz"},
				Placement: pl},
		})
	}
	cpuStart := cpuTime(t)
	converged := waitAllReady(t, mgr, pools, 10*time.Minute)
	convergeCPU := cpuTime(t) - cpuStart
	convergeCalls := sim.Stats()
	convergeHist := gatherRounds(t, reg)
	convergeRounds := convergeHist.count
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)

	if converged > run.quiet {
		t.Fatalf("converged after %v, beyond the quiet %v: raise it", converged, run.quiet)
	}

	// Steady state with preemptions: the measured window itself, not a
	// wait for a condition. It starts a quarter step before the first
	// preemptions and ends a quarter step before a trace step, away from
	// the bursts of rounds each step and each notice deadline bring, so
	// that the simulator's and the engine's counters cover the same events.
	time.Sleep(time.Until(simStart.Add(run.quiet - run.gap/4)))
	steadyFrom := sim.Stats()
	steadyHistFrom := gatherRounds(t, reg)
	marketsFrom := launchesByMarket(t, reg)
	cpuFrom := cpuTime(t)
	time.Sleep(run.steady)
	cpu := cpuTime(t) - cpuFrom
	st := sim.Stats()
	steadyHist := gatherRounds(t, reg).since(steadyHistFrom)
	markets := launchesByMarket(t, reg)
	for m, n := range marketsFrom {
		markets[m] -= n
	}
	recovered := waitAllReady(t, mgr, pools, 5*time.Minute)

	perPoolHeap := float64(after.HeapInuse-min(after.HeapInuse, before.HeapInuse)) / float64(pools)
	steadyRounds := steadyHist.count
	steadyCalls := st.Calls() - steadyFrom.Calls()
	steadyPreempted := st.Preemptions - steadyFrom.Preemptions
	var b strings.Builder
	fmt.Fprintf(&b, "\n%d pools x %d instances on the process-less sim provider, real engine %s, registrar.Nop, GOMAXPROCS %d\n", pools, scaleInstances, mode, runtime.GOMAXPROCS(0))
	fmt.Fprintf(&b, "converged (all %d instances ready) in %v: %d rounds, %d cloud calls (%.2f per round: %d List, %d Launch, %d Terminate, %d Offerings)\n",
		pools*scaleInstances, converged.Round(time.Millisecond), convergeRounds, convergeCalls.Calls(),
		float64(convergeCalls.Calls())/float64(convergeRounds), convergeCalls.Lists, convergeCalls.Launches, convergeCalls.Terminates, convergeCalls.Offerings)
	fmt.Fprintf(&b, "steady %v, one zone in turn down to 2 per pool every %v: %d preemptions (%v notice), %d rounds, %d cloud calls (%.2f per round: %d List, %d Launch, %d Terminate, %d Offerings; %d refused), all ready again %v after the window\n",
		run.steady, run.gap, steadyPreempted, run.notice, steadyRounds, steadyCalls, float64(steadyCalls)/math.Max(1, float64(steadyRounds)),
		st.Lists-steadyFrom.Lists, st.Launches-steadyFrom.Launches, st.Terminates-steadyFrom.Terminates, st.Offerings-steadyFrom.Offerings,
		st.InsufficientCapacity-steadyFrom.InsufficientCapacity, recovered.Round(time.Millisecond))
	fmt.Fprintf(&b, "steady launches by market (tidegpu_instance_launches_total): %d spot, %d on-demand\n", markets["spot"], markets["on-demand"])
	fmt.Fprintf(&b, "process CPU (user+sys, this test process): %.1f s converging (%.2f ms per round), %.1f s in the steady window (%.2f ms per round, %.0f %% of one core)\n",
		convergeCPU.Seconds(), 1000*convergeCPU.Seconds()/math.Max(1, float64(convergeRounds)),
		cpu.Seconds(), 1000*cpu.Seconds()/math.Max(1, float64(steadyRounds)), 100*cpu.Seconds()/run.steady.Seconds())
	fmt.Fprintf(&b, "round duration p99 (tidegpu_pool_round_duration_seconds, interpolated in its buckets): %.1f ms while converging, %.1f ms in the steady window\n",
		1000*convergeHist.p99(), 1000*steadyHist.p99())
	fmt.Fprintf(&b, "heap in use after convergence: %.1f MiB (%.1f KiB per pool of %d; %.1f MiB before the pools)\n",
		float64(after.HeapInuse)/(1<<20), perPoolHeap/1024, scaleInstances, float64(before.HeapInuse)/(1<<20))
	fmt.Fprintf(&b, "wall time %v\n", time.Since(start).Round(time.Second))
	t.Log(b.String())

	if steadyPreempted < int64(pools) {
		t.Errorf("%d preemptions, want at least one per pool", st.Preemptions)
	}
	if p := steadyHist.p99(); p <= 0 || math.IsInf(p, 0) {
		t.Errorf("steady round p99 %v", p)
	}
}

// cpuTime is the CPU time (user + system) this process used so far.
func cpuTime(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// waitAllReady polls until every pool reports scaleInstances ready (a
// bounded loop on a condition) and returns how long it took.
func waitAllReady(t *testing.T, mgr *engine.Manager, pools int, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		ready := 0
		for _, p := range mgr.Pools() {
			if p.Status.Ready == scaleInstances && p.Status.Desired == scaleInstances {
				ready++
			}
		}
		if ready == pools {
			return time.Since(start)
		}
		if time.Since(start) > limit {
			t.Fatalf("%d of %d pools ready after %v", ready, pools, limit)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// roundHist is tidegpu_pool_round_duration_seconds summed over pools:
// the number of rounds and the cumulative count per bucket upper bound.
type roundHist struct {
	count   uint64
	buckets map[float64]uint64
}

func gatherRounds(t *testing.T, reg *prometheus.Registry) roundHist {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	h := roundHist{buckets: map[float64]uint64{}}
	for _, mf := range mfs {
		if mf.GetName() != "tidegpu_pool_round_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			mh := m.GetHistogram()
			h.count += mh.GetSampleCount()
			for _, bk := range mh.GetBucket() {
				h.buckets[bk.GetUpperBound()] += bk.GetCumulativeCount()
			}
		}
	}
	return h
}

// launchesByMarket sums tidegpu_instance_launches_total over pools.
func launchesByMarket(t *testing.T, reg *prometheus.Registry) map[string]int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, mf := range mfs {
		if mf.GetName() != "tidegpu_instance_launches_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "market" {
					out[l.GetValue()] += int(m.GetCounter().GetValue())
				}
			}
		}
	}
	return out
}

// since returns the rounds observed after earlier.
func (h roundHist) since(earlier roundHist) roundHist {
	out := roundHist{count: h.count - earlier.count, buckets: map[float64]uint64{}}
	for ub, c := range h.buckets {
		out.buckets[ub] = c - earlier.buckets[ub]
	}
	return out
}

// p99 interpolates the 0.99 quantile linearly within its bucket, as
// Prometheus' histogram_quantile does.
func (h roundHist) p99() float64 { return quantile(0.99, h.count, h.buckets) }

func quantile(q float64, count uint64, buckets map[float64]uint64) float64 {
	if count == 0 {
		return 0
	}
	bounds := make([]float64, 0, len(buckets))
	for ub := range buckets {
		bounds = append(bounds, ub)
	}
	sort.Float64s(bounds)
	rank := q * float64(count)
	prevBound, prevCount := 0.0, uint64(0)
	for _, ub := range bounds {
		c := buckets[ub]
		if float64(c) >= rank {
			if c == prevCount {
				return ub
			}
			return prevBound + (ub-prevBound)*(rank-float64(prevCount))/float64(c-prevCount)
		}
		prevBound, prevCount = ub, c
	}
	return math.Inf(1) // in the +Inf bucket
}

func TestQuantile(t *testing.T) {
	b := map[float64]uint64{0.001: 50, 0.004: 90, 0.016: 100}
	tests := []struct {
		q     float64
		count uint64
		want  float64
	}{
		{0.5, 100, 0.001},               // rank 50: the top of the first bucket
		{0.25, 100, 0.0005},             // halfway into the first bucket
		{0.7, 100, 0.001 + 0.003*20/40}, // inside the second
		{0.99, 100, 0.004 + 0.012*9/10}, // inside the third
		{0.99, 0, 0},                    // no rounds
		{0.99, 200, math.Inf(1)},        // beyond the last bound
	}
	for _, tc := range tests {
		if got := quantile(tc.q, tc.count, b); math.Abs(got-tc.want) > 1e-12 && !(math.IsInf(got, 1) && math.IsInf(tc.want, 1)) {
			t.Errorf("quantile(%v, %d) = %v, want %v", tc.q, tc.count, got, tc.want)
		}
	}
}
