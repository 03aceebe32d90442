package engine_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testingclock "k8s.io/utils/clock/testing"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/engine"
	"github.com/tidegpu/tidegpu/internal/events"
	"github.com/tidegpu/tidegpu/internal/provider"
	"github.com/tidegpu/tidegpu/internal/provider/spotsim"
	"github.com/tidegpu/tidegpu/internal/registrar"
	"github.com/tidegpu/tidegpu/test/testbin"
)

// A pool with spec.placement.standby on the simulated spot market: it
// fills its warm standby (on-demand instances launched, Ready once, then
// stopped), and when its zone loses all spot capacity the fallback STARTS
// the standby instances instead of launching new ones.
func TestStandbyIsStartedWhenSpotGoes(t *testing.T) {
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) }))
	defer ok.Close()
	// The market runs on its own fake clock, held still until the standby
	// is filled and then moved past the end of spot capacity: the test
	// does not race the fill against a trace played in real time (at 300x
	// and then 150x, a loaded CI machine once found a standby instance not
	// yet stopped when the zone ran dry, and a new one was launched).
	// Spot capacity is 2 for 12 five-minute steps, then none.
	capacity := make([]int, 600)
	for i := range 12 {
		capacity[i] = 2
	}
	tr, err := spotsim.NewTrace([]spotsim.ZoneTrace{{Zone: "us-east-1a", Gap: 5 * time.Minute, Capacity: capacity}})
	if err != nil {
		t.Fatal(err)
	}
	// The market's clock starts at the engine's now and moves only by the
	// second that 12 steps take at 3,600x, so launch times stay within
	// seconds of the engine's clock (it times out launches not ready after
	// a minute).
	t0 := time.Now()
	market := testingclock.NewFakeClock(t0)
	step := 5 * time.Minute / 3600
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	sim, err := spotsim.New(spotsim.Options{Trace: tr, Clock: market, Start: t0, Compression: 3600, Notice: 2 * time.Minute,
		Address: ok.Listener.Addr().String(), Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	rec := events.NewRecorder(1000, nil, discard)
	m, err := engine.NewManager(engine.Options{Provider: sim, Registrar: registrar.Nop{}, Recorder: rec, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	go func() { sim.Run(ctx); done <- struct{}{} }()
	go func() { m.Run(ctx); done <- struct{}{} }()
	defer func() { cancel(); <-done; <-done }()

	zero, two := int32(0), int32(2)
	m.Apply(&tidev1.TidePool{ObjectMeta: metav1.ObjectMeta{Name: "chat", Generation: 1}, Spec: tidev1.TidePoolSpec{
		Provider: tidev1.ProviderSim, InstanceType: "p3.2xlarge", Minimum: 2, Maximum: 2,
		Serving:   tidev1.ServingSpec{ReadinessPath: "/"},
		Placement: &tidev1.PlacementSpec{Standby: &two},
		// The Nop registrar cannot say when a drain is done: end drains at once.
		DrainSeconds: &zero,
	}})
	status := func() tidev1.TidePoolStatus { v, _ := m.Pool("chat"); return v.Status }
	byPhase := func(st tidev1.TidePoolStatus, phase, market string) []string {
		var ids []string
		for _, in := range st.Instances {
			if in.Phase == phase && in.Market == market {
				ids = append(ids, in.ID)
			}
		}
		return ids
	}
	// The engine calls an instance Standby once it decides to stop it; the
	// market must also have it stopped, or the fallback could not start it
	// (a stopping instance cannot be started: it would launch another).
	stopped := func(ids []string) bool {
		ins, err := sim.List(context.Background(), "chat")
		if err != nil {
			return false
		}
		n := 0
		for _, in := range ins {
			if slices.Contains(ids, in.ID) && in.State == provider.StateStopped {
				n++
			}
		}
		return n == len(ids)
	}
	logEvents := func() {
		for _, e := range rec.List(0, "chat") {
			t.Logf("%s %s %s", e.Reason, e.Instance, e.Message)
		}
	}
	var standby []string
	if _, met := testbin.Eventually(30*time.Second, func() bool {
		st := status()
		standby = byPhase(st, tidev1.PhaseStandby, string(provider.MarketOnDemand))
		return len(standby) == 2 && len(byPhase(st, tidev1.PhaseReady, string(provider.MarketSpot))) == 2 && stopped(standby)
	}); !met {
		t.Fatalf("no 2 spot Ready + 2 on-demand Standby before the zone ran dry: %+v", status().Instances)
	}
	// The zone runs dry, and after the two-minute notice the spot
	// instances end: the standby instances serve in place of them, and no
	// other on-demand instance is launched.
	market.SetTime(t0.Add(12 * step))
	sim.Tick()
	market.SetTime(t0.Add(12*step + 2*time.Minute/3600 + time.Millisecond))
	sim.Tick()
	var serving []string
	if _, met := testbin.Eventually(30*time.Second, func() bool {
		serving = byPhase(status(), tidev1.PhaseReady, string(provider.MarketOnDemand))
		return len(serving) == 2
	}); !met {
		t.Fatalf("the standby did not take over: %+v", status().Instances)
	}
	slices.Sort(serving)
	slices.Sort(standby)
	if !slices.Equal(serving, standby) {
		logEvents()
		t.Errorf("on-demand serving %v, want the standby instances %v started", serving, standby)
	}
	launchedOD, started := 0, 0
	for _, e := range rec.List(0, "chat") {
		switch e.Reason {
		case "Launched":
			if slices.Contains(standby, e.Instance) {
				launchedOD++
			}
		case "Started":
			started++
		}
	}
	if started != 2 || launchedOD != 2 {
		logEvents()
		t.Errorf("%d starts and %d on-demand launches, want 2 and 2 (the fill only)", started, launchedOD)
	}
}
