package aws

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sort"
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

// multiTypeSpec is a pool that may run on g5.xlarge or g6.xlarge in two
// zones.
func multiTypeSpec() *tidev1.TidePoolSpec {
	s := testSpecNoZone()
	s.InstanceType = "g5.xlarge"
	s.Placement = &tidev1.PlacementSpec{
		AvailabilityZones: []string{"us-east-1a", "us-east-1b"},
		InstanceTypes:     []string{"g6.xlarge", "g5.xlarge"},
		Strategy:          tidev1.StrategyLowestPrice,
	}
	return s
}

// Every type x zone x market is offered, priced from one
// DescribeSpotPriceHistory that names both types.
func TestOfferingsCoverEveryInstanceType(t *testing.T) {
	e := newEnv(t, nil)
	ctx := ctxT(t)
	e.srv.AddSpotPrice(ec2test.SpotPrice{InstanceType: "g5.xlarge", Zone: "us-east-1a", Price: "0.40", Timestamp: t0.Add(-time.Hour)})
	e.srv.AddSpotPrice(ec2test.SpotPrice{InstanceType: "g6.xlarge", Zone: "us-east-1b", Price: "0.30", Timestamp: t0.Add(-time.Hour)})
	e.srv.AddSpotPrice(ec2test.SpotPrice{InstanceType: "p3.2xlarge", Zone: "us-east-1b", Price: "0.90", Timestamp: t0.Add(-time.Hour)})

	offs, err := e.p.Offerings(ctx, multiTypeSpec())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range offs {
		got = append(got, fmt.Sprintf("%s/%s/%s=%g(%s)", o.InstanceType, o.Zone, o.Market, o.PricePerHour, o.PriceSource))
	}
	want := []string{
		"g5.xlarge/us-east-1a/spot=0.4(live)", "g5.xlarge/us-east-1a/on-demand=1.006(catalog)",
		"g5.xlarge/us-east-1b/spot=1.006(fallback)", "g5.xlarge/us-east-1b/on-demand=1.006(catalog)",
		"g6.xlarge/us-east-1a/spot=0.8048(fallback)", "g6.xlarge/us-east-1a/on-demand=0.8048(catalog)",
		"g6.xlarge/us-east-1b/spot=0.3(live)", "g6.xlarge/us-east-1b/on-demand=0.8048(catalog)",
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("offerings\n got  %v\n want %v", got, want)
	}
	if n := e.srv.CallCount("DescribeSpotPriceHistory"); n != 1 {
		t.Fatalf("%d price calls, want one for both types", n)
	}
	q := e.srv.Calls()[0].Params
	if q.Get("InstanceType.1") != "g5.xlarge" || q.Get("InstanceType.2") != "g6.xlarge" || q.Get("InstanceType.3") != "" {
		t.Errorf("price query names %q %q %q, want g5.xlarge and g6.xlarge once each", q.Get("InstanceType.1"), q.Get("InstanceType.2"), q.Get("InstanceType.3"))
	}
}

// A pool of several instance types fills from the type EC2 has capacity
// for when the first refuses (InsufficientInstanceCapacity), spreads over
// its zones, and never falls back to on-demand while spot of another type
// is there.
func TestPoolFillsFromAnotherInstanceType(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.ListCacheTTL = -1 })
	e.srv.AddSpotPrice(ec2test.SpotPrice{InstanceType: "g5.xlarge", Zone: "us-east-1a", Price: "0.30", Timestamp: t0.Add(-time.Hour)})
	e.srv.AddSpotPrice(ec2test.SpotPrice{InstanceType: "g5.xlarge", Zone: "us-east-1b", Price: "0.30", Timestamp: t0.Add(-time.Hour)})
	e.srv.AddSpotPrice(ec2test.SpotPrice{InstanceType: "g6.xlarge", Zone: "us-east-1a", Price: "0.35", Timestamp: t0.Add(-time.Hour)})
	e.srv.AddSpotPrice(ec2test.SpotPrice{InstanceType: "g6.xlarge", Zone: "us-east-1b", Price: "0.35", Timestamp: t0.Add(-time.Hour)})
	// g5.xlarge is cheaper, but EC2 has none of it on spot.
	e.srv.SetICE("", "g5.xlarge", ec2test.MarketSpot, "")

	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	m, err := engine.NewManager(engine.Options{Provider: e.p, Registrar: registrar.Nop{},
		Recorder: events.NewRecorder(100, nil, discard), Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	spec := multiTypeSpec()
	spec.Minimum, spec.Maximum = 4, 4
	m.Apply(&tidev1.TidePool{ObjectMeta: metav1.ObjectMeta{Name: "chat", Generation: 1}, Spec: *spec})

	var placed []string
	testbin.Eventually(20*time.Second, func() bool {
		placed = placed[:0]
		for _, in := range e.srv.Instances() {
			if in.State == "pending" || in.State == "running" {
				placed = append(placed, in.InstanceType+"/"+in.Zone+"/"+in.Market)
			}
		}
		return len(placed) >= 4
	})
	sort.Strings(placed)
	want := []string{"g6.xlarge/us-east-1a/spot", "g6.xlarge/us-east-1a/spot", "g6.xlarge/us-east-1b/spot", "g6.xlarge/us-east-1b/spot"}
	if strings.Join(placed, " ") != strings.Join(want, " ") {
		t.Fatalf("live instances %v, want %v (g5.xlarge refused, g6.xlarge spread over both zones)", placed, want)
	}
	// The refusals were g5.xlarge spot only; nothing asked for on-demand.
	for _, c := range runCalls(e.srv) {
		if c.Code != "" && c.Params.Get("InstanceType") != "g5.xlarge" {
			t.Errorf("refused launch of %s", c.Params.Get("InstanceType"))
		}
		if c.Params.Get("InstanceMarketOptions.MarketType") != "spot" {
			t.Errorf("launch without spot options: %v", c.Params)
		}
	}
}
