package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidegpu/tidegpu/internal/config"
	"github.com/tidegpu/tidegpu/internal/provider/spotsim"
	"github.com/tidegpu/tidegpu/internal/replay"
	"github.com/tidegpu/tidegpu/test/testbin"
)

// The replay does what the engine does: one short capacity trace (the
// SpotHedge artifact's format, ../shared/data/README.md) played by the sim
// provider under `tidegpu up` at 150x (a 5 min step in 2 s, real
// processes) and by `tidegpu replay`'s engine on a fake clock give the
// same launches, preemptions and dips (as status.ready counts them).
//
// Zone us-east-1a holds 2 for 4 steps, then none; us-east-1b holds 2 for
// 8 steps, then none. A pool of 2 on LowestPrice starts with one spot in
// each zone; at step 4 it loses a's and replaces it in b; at step 8 it
// loses both and falls back to 2 on-demand. Without a notice each loss is
// a dip until the replacement is ready.
func TestReplayEqualsTheEngine(t *testing.T) {
	const steps = 14
	a, b := make([]int, steps), make([]int, steps)
	for i := range steps {
		if i < 4 {
			a[i] = 2
		}
		if i < 8 {
			b[i] = 2
		}
	}
	traces := testbin.WriteTrace(t, map[string][]int{"us-east-1a": a, "us-east-1b": b})
	doc := fmt.Sprintf(`apiVersion: tidegpu.eja.dev/v1
kind: TidePool
metadata:
  name: eq
spec:
  provider: sim
  instanceType: p3.2xlarge
  minimum: 2
  maximum: 2
  placement:
    availabilityZones: [us-east-1a, us-east-1b]
    strategy: LowestPrice
  local:
    startTimeoutSeconds: 900
  sim:
    traceDir: %s
    compression: 150
    noticeSeconds: 0
`, traces)
	file := filepath.Join(t.TempDir(), "pool.yaml")
	if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}

	// The engine under `tidegpu up`, sampled every 20 ms (6 s of trace).
	u := startUp(t, "", "-f", file)
	var t0 time.Time
	eventually(t, 20*time.Second, "the first launch", func() bool {
		for _, e := range u.events() {
			if e.Reason == "Launched" && e.Pool == "eq" {
				t0 = e.Time
				return true
			}
		}
		return false
	})
	trace := func(at time.Time) time.Duration { return at.Sub(t0) * 150 }
	dips, inDip := 0, false
	var dipAt []string
	for time.Since(t0) < 25*time.Second {
		if p, ok := u.pool("eq"); ok && trace(time.Now()) > 10*time.Minute {
			short := p.Status.Ready < p.Status.Desired
			if short && !inDip {
				dips++
				dipAt = append(dipAt, trace(time.Now()).Round(time.Second).String())
			}
			inDip = short
		}
		time.Sleep(10 * time.Millisecond)
	}
	launches, preemptions := 0, 0
	for _, e := range u.events() {
		if e.Pool != "eq" {
			continue
		}
		switch e.Reason {
		case "Launched":
			launches++
		case "ReclaimNotice", "InstanceLost":
			preemptions++
		}
	}

	// The replay of the same spec on the same trace.
	pools, err := config.Parse(strings.NewReader(doc), "pool.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tr, err := spotsim.LoadTrace(traces, false)
	if err != nil {
		t.Fatal(err)
	}
	res, err := replay.Run(context.Background(), replay.Options{Pool: &pools[0], Trace: tr, Notice: -1,
		ColdStart: time.Minute, Warmup: 10 * time.Minute, Duration: 12 * 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("tidegpu up: %d launches, %d preemptions, %d dips (at %v of trace time); replay: %d launches, %d preemptions, %d dips",
		launches, preemptions, dips, dipAt, res.Launches, res.Preemptions, res.DipsDrained)
	if launches != res.Launches || preemptions != res.Preemptions || dips != res.DipsDrained {
		t.Errorf("the replay differs from the engine under tidegpu up: launches %d vs %d, preemptions %d vs %d, dips %d vs %d",
			res.Launches, launches, res.Preemptions, preemptions, res.DipsDrained, dips)
	}
	if res.Launches != 5 || res.Preemptions != 3 || res.DipsDrained != 2 {
		t.Errorf("replay: %d launches, %d preemptions, %d dips; want 5, 3 and 2", res.Launches, res.Preemptions, res.DipsDrained)
	}
}
