package aws

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/engine"
	"github.com/tidegpu/tidegpu/internal/events"
	"github.com/tidegpu/tidegpu/internal/provider/aws/ec2test"
	"github.com/tidegpu/tidegpu/internal/registrar"
	"github.com/tidegpu/tidegpu/test/testbin"
)

// The warm standby end to end on the EC2 wire protocol: the engine fills
// the standby (RunInstances on-demand, Ready, StopInstances), and a reclaim
// notice on a spot instance makes it call StartInstances on that standby
// instance, which serves again, instead of launching a new on-demand one.
func TestStandbyThroughEC2(t *testing.T) {
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) }))
	defer ok.Close()
	_, portS, _ := net.SplitHostPort(ok.Listener.Addr().String())
	port, _ := strconv.Atoi(portS)
	e := newEnvOn(t, ec2test.Options{Region: "us-east-1", PrivateIP: func(int) string { return "127.0.0.1" }},
		func(o *Options) { o.ListCacheTTL = -1 })

	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	rec := events.NewRecorder(1000, nil, discard)
	m, err := engine.NewManager(engine.Options{Provider: e.p, Registrar: registrar.Nop{}, Recorder: rec, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	spec := testSpec()
	spec.Minimum, spec.Maximum = 2, 2
	spec.Serving = tidev1.ServingSpec{Port: int32(port), UsePrivateIP: true, ReadinessPath: "/"}
	zero, one := int32(0), int32(1)
	spec.DrainSeconds = &zero // the Nop registrar cannot tell when a drain is done
	spec.Placement = &tidev1.PlacementSpec{Standby: &one}
	m.Apply(&tidev1.TidePool{ObjectMeta: metav1.ObjectMeta{Name: "chat", Generation: 1}, Spec: *spec})

	state := func() (spot []string, stopped []string) {
		for _, in := range e.srv.Instances() {
			switch {
			case in.Market == ec2test.MarketSpot && in.State == "running":
				spot = append(spot, in.ID)
			case in.Market == ec2test.MarketOnDemand && (in.State == "stopped" || in.State == "stopping"):
				stopped = append(stopped, in.ID)
			}
		}
		return spot, stopped
	}
	var spot, stopped []string
	await(t, rec, 20*time.Second, "2 spot running and 1 on-demand stopped as standby", func() bool {
		spot, stopped = state()
		v, _ := m.Pool("chat")
		return len(spot) == 2 && len(stopped) == 1 && v.Status.Ready == 2 && v.Status.Standby == 1
	})
	if e.srv.CallCount("StopInstances") == 0 {
		t.Fatal("the standby was never stopped through StopInstances")
	}
	runsBefore := e.srv.CallCount("RunInstances")

	var noticeSeq uint64
	if evs := rec.List(0, "chat"); len(evs) > 0 {
		noticeSeq = evs[len(evs)-1].Seq
	}
	// A two-minute notice on one spot instance (as the agent reports it).
	if err := m.Notice("chat", spot[0], time.Now().Add(2*time.Minute), "test"); err != nil {
		t.Fatal(err)
	}
	standby := stopped[0]
	// The standby is started (StartInstances) and serves after its warm
	// start; no on-demand stand-in is launched from cold.
	await(t, rec, 20*time.Second, "the standby instance started and Ready after its warm start", func() bool {
		for _, ev := range rec.List(0, "chat") {
			if ev.Reason == "Ready" && ev.Instance == standby && strings.Contains(ev.Message, "after its warm start") {
				return true
			}
		}
		return false
	})
	if n := e.srv.CallCount("StartInstances"); n < 1 {
		t.Errorf("%d StartInstances calls", n)
	}
	coldOD := 0
	for _, ev := range rec.List(0, "chat") {
		if ev.Reason == "Launched" && strings.Contains(ev.Message, "on-demand market") && strings.Contains(ev.Message, "on-demand fallback") && ev.Seq > noticeSeq {
			coldOD++
		}
	}
	if coldOD > 0 {
		t.Errorf("%d on-demand stand-ins launched from cold after the notice, want the standby started instead", coldOD)
	}
	t.Logf("RunInstances %d before the notice, %d after; StartInstances %d; StopInstances %d",
		runsBefore, e.srv.CallCount("RunInstances"), e.srv.CallCount("StartInstances"), e.srv.CallCount("StopInstances"))
}

// await waits for cond (a bounded poll of the fake's and the engine's
// state); on a timeout it fails and prints the pool's events.
func await(t *testing.T, rec *events.Recorder, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if _, ok := testbin.Eventually(timeout, cond); ok {
		return
	}
	for _, ev := range rec.List(0, "") {
		t.Logf("%s %s %s %s", ev.Time.Format("05.000"), ev.Reason, ev.Instance, ev.Message)
	}
	t.Fatalf("timed out after %s waiting for %s", timeout, what)
}
