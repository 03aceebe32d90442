// Package spotbench evaluates the placement strategies on the SpotHedge
// artifact's spot-capacity traces (../shared/data/spot-traces, see its
// README) through internal/replay, which drives the engine's own round
// against the process-less spot market on a fake clock: nothing of the
// decision is copied here. It also holds the controller-scale benchmark
// of the engine on the simulator (scale_test.go).
//
// The protocol (BENCHMARKS.md, "Spot placement: the protocol") is fixed
// before the numbers: every setting is chosen on the first half of aws3
// only (TestSpotSelection) and reported on aws1 and on the second half of
// aws3 (TestSpotEvaluation), the worst trace next to the average.
package spotbench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/placement"
	"github.com/tidegpu/tidegpu/internal/provider/spotsim"
	"github.com/tidegpu/tidegpu/internal/replay"
)

// The goal of the issue, and the pool it is measured on.
const (
	goalAvailable = 0.999
	goalSavings   = 0.50
	benchWant     = 4
)

func traceDir(name string) string {
	if p := os.Getenv("TIDEGPU_SPOT_TRACES"); p != "" {
		return filepath.Join(p, name)
	}
	return filepath.Join("..", "..", "..", "shared", "data", "spot-traces", name)
}

// part is a stretch of one trace.
type part struct {
	name           string
	trace          *spotsim.Trace
	from, duration time.Duration
}

// loadParts returns aws1 and aws3 whole and in halves, or skips.
func loadParts(t *testing.T) map[string]part {
	t.Helper()
	out := map[string]part{}
	for _, tc := range []struct {
		name   string
		binary bool
	}{{"aws1", false}, {"aws3", true}} {
		tr, err := spotsim.LoadTrace(traceDir(tc.name), tc.binary)
		if err != nil {
			t.Skipf("spot traces not found (../shared/data/spot-traces; TIDEGPU_SPOT_TRACES=dir): %v", err)
		}
		half := (tr.Duration() / 2).Truncate(tr.Gap)
		out[tc.name] = part{tc.name, tr, 0, 0}
		out[tc.name+"/1"] = part{tc.name + " first half", tr, 0, half}
		out[tc.name+"/2"] = part{tc.name + " second half", tr, half, 0}
	}
	return out
}

// run is one replay of a pool of benchWant over the trace's zones.
type run struct {
	part                         part
	strategy, target             string
	onDemandBase                 int32
	notice, coldStart, warmStart time.Duration
	learning                     placement.Learning
}

func (r run) options() replay.Options {
	zero := int32(0)
	pool := &tidev1.TidePool{ObjectMeta: metav1.ObjectMeta{Name: "bench"}, Spec: tidev1.TidePoolSpec{
		Provider: tidev1.ProviderAWS, InstanceType: "p3.2xlarge", Minimum: benchWant, Maximum: benchWant, DrainSeconds: &zero,
		Placement: &tidev1.PlacementSpec{AvailabilityZones: r.part.trace.ZoneNames(), Strategy: r.strategy, AvailabilityTarget: r.target,
			OnDemandBase: r.onDemandBase},
	}}
	return replay.Options{Pool: pool, Trace: r.part.trace, From: r.part.from, Duration: r.part.duration,
		Notice: r.notice, ColdStart: r.coldStart, WarmStart: r.warmStart, Learning: r.learning}
}

// replayAll runs every replay, two at a time (the machine's cores).
func replayAll(t *testing.T, runs []run) []replay.Result {
	t.Helper()
	out := make([]replay.Result, len(runs))
	errs := make([]error, len(runs))
	sem := make(chan struct{}, max(1, runtime.NumCPU()))
	var wg sync.WaitGroup
	for i, r := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			out[i], errs[i] = replay.Run(context.Background(), r.options())
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("%+v: %v", runs[i], err)
		}
	}
	return out
}

func heavy(t *testing.T) {
	t.Helper()
	if testing.Short() || raceEnabled {
		t.Skip("trace replays: not under -short or -race")
	}
	if os.Getenv("TIDEGPU_BENCH_SPOT") == "" {
		t.Skip("set TIDEGPU_BENCH_SPOT=1 to run the full spot evaluation (several minutes)")
	}
}

func pct(f float64) string { return fmt.Sprintf("%.3f %%", 100*f) }
