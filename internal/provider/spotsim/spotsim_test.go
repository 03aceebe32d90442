package spotsim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/market"
	"github.com/tidegpu/tidegpu/internal/provider"
	"github.com/tidegpu/tidegpu/internal/provider/local"
)

const (
	gap         = 300 * time.Second
	waitTimeout = 10 * time.Second
	childEnv    = "TIDEGPU_SPOTSIM_TEST_CHILD"
)

// The test binary doubles as an instance program for the process mode:
// with childEnv=1 it serves /healthz on $TIDEGPU_HOST:$TIDEGPU_PORT.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		mux := http.NewServeMux()
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })
		_ = http.ListenAndServe(os.Getenv("TIDEGPU_HOST")+":"+os.Getenv("TIDEGPU_PORT"), mux)
		os.Exit(3)
	}
	os.Exit(m.Run())
}

var t0 = time.Date(2024, 5, 7, 0, 0, 0, 0, time.UTC)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// mkTrace builds a trace with a 300 s gap from zone → capacities.
func mkTrace(t *testing.T, zones map[string][]int) *Trace {
	t.Helper()
	var zts []ZoneTrace
	for z, c := range zones {
		zts = append(zts, ZoneTrace{Zone: z, Gap: gap, Capacity: c})
	}
	tr, err := NewTrace(zts)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func newSim(t *testing.T, opts Options) (*Provider, *testingclock.FakeClock) {
	t.Helper()
	clk, _ := opts.Clock.(*testingclock.FakeClock)
	if clk == nil {
		clk = testingclock.NewFakeClock(t0)
		opts.Clock = clk
	}
	opts.Logger = quiet()
	p, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p, clk
}

func launch(t *testing.T, p *Provider, pool, zone string, m provider.Market) (provider.Instance, error) {
	t.Helper()
	return p.Launch(context.Background(), provider.LaunchRequest{Pool: pool, Zone: zone, Market: m})
}

func mustLaunch(t *testing.T, p *Provider, pool, zone string, m provider.Market) provider.Instance {
	t.Helper()
	in, err := launch(t, p, pool, zone, m)
	if err != nil {
		t.Fatalf("launch %s in %s: %v", m, zone, err)
	}
	return in
}

func list(t *testing.T, p *Provider, pool string) []provider.Instance {
	t.Helper()
	l, err := p.List(context.Background(), pool)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// nextEvent waits for the next event (bounded).
func nextEvent(t *testing.T, p *Provider) provider.Event {
	t.Helper()
	select {
	case ev, ok := <-p.Events():
		if !ok {
			t.Fatal("events channel closed")
		}
		return ev
	case <-time.After(waitTimeout):
		t.Fatal("no event")
	}
	return provider.Event{}
}

func noEvent(t *testing.T, p *Provider) {
	t.Helper()
	select {
	case ev := <-p.Events():
		t.Fatalf("unexpected event %s %s: %s", ev.Type, ev.Instance.ID, ev.Message)
	case <-time.After(50 * time.Millisecond):
	}
}

func TestInsufficientCapacity(t *testing.T) {
	p, clk := newSim(t, Options{Trace: mkTrace(t, map[string][]int{"us-east-1f": {2}, "us-west-2c": {0}})})
	mustLaunch(t, p, "pool", "us-east-1f", provider.MarketSpot)
	mustLaunch(t, p, "pool", "us-east-1f", provider.MarketSpot)

	tests := []struct {
		name   string
		zone   string
		market provider.Market
		ice    bool
		other  error
	}{
		{"zone full", "us-east-1f", provider.MarketSpot, true, nil},
		{"zone at zero", "us-west-2c", provider.MarketSpot, true, nil},
		{"on-demand always available", "us-west-2c", provider.MarketOnDemand, false, nil},
		{"unknown zone is not capacity", "eu-west-1a", provider.MarketSpot, false, ErrUnknownZone},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := launch(t, p, "pool", tc.zone, tc.market)
			var ice *provider.InsufficientCapacityError
			switch {
			case tc.ice:
				if !errors.As(err, &ice) || ice.Zone != tc.zone || ice.Market != provider.MarketSpot ||
					ice.InstanceType != DefaultInstanceType || !errors.Is(err, ErrNoCapacity) {
					t.Fatalf("err = %v, want an InsufficientCapacityError for %s", err, tc.zone)
				}
			case tc.other != nil:
				if !errors.Is(err, tc.other) || provider.IsInsufficientCapacity(err) {
					t.Fatalf("err = %v, want %v", err, tc.other)
				}
			default:
				if err != nil {
					t.Fatal(err)
				}
			}
		})
	}
	if s := p.Stats(); s.InsufficientCapacity != 2 || s.Launches != 6 || s.Live != 3 {
		t.Errorf("stats = %+v", s)
	}

	// The refused offerings are unavailable for the TTL, then offered again.
	avail := func() map[string]bool {
		offs, err := p.Offerings(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]bool{}
		for _, o := range offs {
			m[o.Zone+"/"+string(o.Market)] = o.Available
		}
		return m
	}
	if a := avail(); a["us-east-1f/spot"] || a["us-west-2c/spot"] || !a["us-west-2c/on-demand"] {
		t.Errorf("after refusals: %v", a)
	}
	clk.Step(DefaultUnavailableTTL)
	if a := avail(); !a["us-east-1f/spot"] || !a["us-west-2c/spot"] {
		t.Errorf("after the TTL: %v", a)
	}
}

func TestLaunchWithoutZone(t *testing.T) {
	p, _ := newSim(t, Options{Trace: mkTrace(t, map[string][]int{"a": {1}, "b": {3}, "c": {2}})})
	var zones []string
	for range 6 {
		zones = append(zones, mustLaunch(t, p, "pool", "", provider.MarketSpot).Zone)
	}
	if got := strings.Join(zones, ","); got != "b,b,c,a,b,c" {
		t.Errorf("spot zones = %s, want the zone with the most capacity left each time", got)
	}
	if _, err := launch(t, p, "pool", "", provider.MarketSpot); !provider.IsInsufficientCapacity(err) {
		t.Errorf("7th spot launch: %v, want insufficient capacity", err)
	}
	q, _ := newSim(t, Options{Trace: mkTrace(t, map[string][]int{"a": {0}, "b": {0}})})
	var od []string
	for range 3 {
		od = append(od, mustLaunch(t, q, "pool", "", provider.MarketOnDemand).Zone)
	}
	if got := strings.Join(od, ","); got != "a,b,a" {
		t.Errorf("on-demand zones = %s, want a spread", got)
	}
	// The spec's zone and charge type are used when the request names none.
	in, err := q.Launch(context.Background(), provider.LaunchRequest{Pool: "p2",
		Spec: &tidev1.TidePoolSpec{AvailabilityZone: "b", InstanceChargeType: tidev1.ChargeOnDemand, InstanceType: "g5.xlarge"}})
	if err != nil || in.Zone != "b" || in.Market != provider.MarketOnDemand || in.InstanceType != "g5.xlarge" {
		t.Errorf("launch from spec = %+v, %v", in, err)
	}
}

func TestPreemptionWithNotice(t *testing.T) {
	// Zone a: 3 instances fit, then 1, then 0; a notice of 2 minutes.
	p, clk := newSim(t, Options{Trace: mkTrace(t, map[string][]int{"a": {3, 1, 0, 0}, "b": {5, 5, 5, 5}})})
	old := mustLaunch(t, p, "pool", "a", provider.MarketSpot)
	clk.Step(time.Second)
	mid := mustLaunch(t, p, "pool", "a", provider.MarketSpot)
	clk.Step(time.Second)
	newest := mustLaunch(t, p, "pool", "a", provider.MarketSpot)
	odIn := mustLaunch(t, p, "pool", "a", provider.MarketOnDemand)
	other := mustLaunch(t, p, "pool", "b", provider.MarketSpot)
	noEvent(t, p)

	// Step 1: capacity 1 < 3 → the two newest get a notice.
	clk.SetTime(t0.Add(gap))
	p.Tick()
	deadline := t0.Add(gap + DefaultNotice)
	got := map[string]bool{}
	for range 2 {
		ev := nextEvent(t, p)
		if ev.Type != provider.EventInterruption || ev.Instance.InterruptAt == nil || !ev.Instance.InterruptAt.Equal(deadline) || ev.Instance.Zone != "a" {
			t.Fatalf("event %+v, want an interruption at %v", ev, deadline)
		}
		got[ev.Instance.ID] = true
	}
	if !got[mid.ID] || !got[newest.ID] {
		t.Fatalf("noticed %v, want the newest two (%s, %s)", got, mid.ID, newest.ID)
	}
	noEvent(t, p)
	// A launch into the zone is refused while the noticed ones still hold it.
	if _, err := launch(t, p, "pool", "a", provider.MarketSpot); !provider.IsInsufficientCapacity(err) {
		t.Fatalf("launch during notice: %v", err)
	}
	// Just before the deadline they live, with InterruptAt in List.
	clk.SetTime(deadline.Add(-time.Nanosecond))
	l := list(t, p, "pool")
	if len(l) != 5 {
		t.Fatalf("%d live before the deadline, want 5", len(l))
	}
	for _, in := range l {
		if (in.InterruptAt != nil) != got[in.ID] {
			t.Errorf("%s InterruptAt = %v", in.ID, in.InterruptAt)
		}
	}
	// At the deadline they are gone.
	clk.SetTime(deadline)
	p.Tick()
	for range 2 {
		if ev := nextEvent(t, p); ev.Type != provider.EventGone || !got[ev.Instance.ID] {
			t.Fatalf("event %+v, want gone of a noticed instance", ev)
		}
	}
	ids := []string{}
	for _, in := range list(t, p, "pool") {
		ids = append(ids, in.ID)
	}
	sort.Strings(ids)
	want := []string{old.ID, odIn.ID, other.ID}
	sort.Strings(want)
	if strings.Join(ids, ",") != strings.Join(want, ",") {
		t.Fatalf("live = %v, want %v (on-demand and other zones untouched)", ids, want)
	}
	// Step 2: capacity 0 → the last spot in a goes too.
	clk.SetTime(t0.Add(2 * gap))
	p.Tick()
	if ev := nextEvent(t, p); ev.Type != provider.EventInterruption || ev.Instance.ID != old.ID {
		t.Fatalf("event %+v, want a notice for %s", ev, old.ID)
	}
	if s := p.Stats(); s.Preemptions != 3 {
		t.Errorf("preemptions = %d, want 3", s.Preemptions)
	}
}

func TestRunPlaysTheMarket(t *testing.T) {
	p, clk := newSim(t, Options{Trace: mkTrace(t, map[string][]int{"a": {1, 0}}), Notice: 30 * time.Second})
	in := mustLaunch(t, p, "pool", "a", provider.MarketSpot)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitWaiters(t, clk)
	clk.Step(gap)
	if ev := nextEvent(t, p); ev.Type != provider.EventInterruption || ev.Instance.ID != in.ID {
		t.Fatalf("event %+v", ev)
	}
	waitWaiters(t, clk)
	clk.Step(30 * time.Second)
	if ev := nextEvent(t, p); ev.Type != provider.EventGone || ev.Instance.ID != in.ID {
		t.Fatalf("event %+v", ev)
	}
}

func waitWaiters(t *testing.T, clk *testingclock.FakeClock) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !clk.HasWaiters() {
		if time.Now().After(deadline) {
			t.Fatal("nobody waits on the clock")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestNoNoticeEndsAtOnce(t *testing.T) {
	p, clk := newSim(t, Options{Trace: mkTrace(t, map[string][]int{"a": {1, 0}}), Notice: -1})
	in := mustLaunch(t, p, "pool", "a", provider.MarketSpot)
	clk.Step(gap)
	if l := list(t, p, "pool"); len(l) != 0 {
		t.Fatalf("live %v", l)
	}
	if ev := nextEvent(t, p); ev.Type != provider.EventGone || ev.Instance.ID != in.ID {
		t.Fatalf("event %+v", ev)
	}
}

func TestTraceLoops(t *testing.T) {
	p, clk := newSim(t, Options{Trace: mkTrace(t, map[string][]int{"a": {1, 0}})})
	clk.SetTime(t0.Add(2 * gap)) // step 2 = step 0 again
	mustLaunch(t, p, "pool", "a", provider.MarketSpot)
	if c := p.Capacity(t0.Add(3 * gap)); c["a"] != 0 {
		t.Fatalf("capacity at step 3 = %v", c)
	}
}

func TestCompression(t *testing.T) {
	p, clk := newSim(t, Options{Trace: mkTrace(t, map[string][]int{"a": {1, 0, 1}}), Compression: 300})
	in := mustLaunch(t, p, "pool", "a", provider.MarketSpot)
	clk.Step(999 * time.Millisecond)
	if l := list(t, p, "pool"); len(l) != 1 || l[0].InterruptAt != nil {
		t.Fatalf("before one second: %+v", l)
	}
	clk.Step(time.Millisecond) // 300 s of trace
	if l := list(t, p, "pool"); len(l) != 1 || l[0].InterruptAt == nil || l[0].ID != in.ID {
		t.Fatalf("after one second: %+v", l)
	}
}

func TestCapacityPerPool(t *testing.T) {
	tr := map[string][]int{"a": {1}}
	shared, _ := newSim(t, Options{Trace: mkTrace(t, tr)})
	mustLaunch(t, shared, "p1", "a", provider.MarketSpot)
	if _, err := launch(t, shared, "p2", "a", provider.MarketSpot); !provider.IsInsufficientCapacity(err) {
		t.Fatalf("shared capacity: second pool got %v", err)
	}
	per, _ := newSim(t, Options{Trace: mkTrace(t, tr), CapacityPerPool: true})
	mustLaunch(t, per, "p1", "a", provider.MarketSpot)
	mustLaunch(t, per, "p2", "a", provider.MarketSpot)
	if _, err := launch(t, per, "p2", "a", provider.MarketSpot); !provider.IsInsufficientCapacity(err) {
		t.Fatalf("per-pool capacity: %v", err)
	}
}

func TestThrottling(t *testing.T) {
	tests := []struct {
		fraction float64
		lo, hi   int
	}{
		{0, 0, 0},
		{0.5, 400, 600},
		{1, 1000, 1000},
	}
	for _, tc := range tests {
		p, _ := newSim(t, Options{Trace: mkTrace(t, map[string][]int{"a": {Unlimited}}), ThrottleFraction: tc.fraction, Seed: 7})
		throttled := 0
		for range 1000 {
			_, err := p.List(context.Background(), "pool")
			if err == nil {
				continue
			}
			var te *provider.ThrottledError
			if !errors.As(err, &te) || !errors.Is(err, ErrRequestLimitExceeded) {
				t.Fatalf("fraction %v: err = %v, want a ThrottledError", tc.fraction, err)
			}
			throttled++
		}
		if throttled < tc.lo || throttled > tc.hi {
			t.Errorf("fraction %v: %d of 1000 throttled, want %d..%d", tc.fraction, throttled, tc.lo, tc.hi)
		}
		if s := p.Stats(); s.Throttled != int64(throttled) || s.Lists != 1000 {
			t.Errorf("stats %+v", s)
		}
	}
	// A throttled launch creates nothing; Reclaim (the market) is never throttled.
	p, _ := newSim(t, Options{Trace: mkTrace(t, map[string][]int{"a": {Unlimited}}), ThrottleFraction: 1})
	if _, err := launch(t, p, "pool", "a", provider.MarketSpot); !provider.IsThrottled(err) {
		t.Fatalf("launch: %v", err)
	}
	if s := p.Stats(); s.Live != 0 {
		t.Fatalf("a throttled launch made an instance")
	}
	if err := p.Reclaim(context.Background(), "sim-404", time.Second); !errors.Is(err, ErrNotFound) {
		t.Fatalf("reclaim: %v", err)
	}
	if _, err := New(Options{Trace: mkTrace(t, map[string][]int{"a": {1}}), ThrottleFraction: 1.5}); err == nil {
		t.Fatal("a fraction above 1 was accepted")
	}
}

func TestLatency(t *testing.T) {
	p, clk := newSim(t, Options{Trace: mkTrace(t, map[string][]int{"a": {1}}), Latency: 2 * time.Second})
	done := make(chan error, 1)
	go func() {
		_, err := p.Launch(context.Background(), provider.LaunchRequest{Pool: "pool", Zone: "a"})
		done <- err
	}()
	waitWaiters(t, clk)
	clk.Step(time.Second)
	select {
	case err := <-done:
		t.Fatalf("launch returned after 1 s of 2 s latency: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	clk.Step(time.Second)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("launch did not return after its latency")
	}
	// A cancelled context ends the wait.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.List(ctx, ""); !errors.Is(err, context.Canceled) {
		t.Fatalf("list with a cancelled context: %v", err)
	}
}

func TestOfferings(t *testing.T) {
	tr := mkTrace(t, map[string][]int{"us-east-1f": {1}, "eu-west-1a": {0}, "us-west-2c": {2}})
	find := func(offs []provider.Offering, zone string, m provider.Market) provider.Offering {
		for _, o := range offs {
			if o.Zone == zone && o.Market == m {
				return o
			}
		}
		t.Fatalf("no %s offering in %s", m, zone)
		return provider.Offering{}
	}
	p, _ := newSim(t, Options{Trace: tr})
	offs, err := p.Offerings(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(offs) != 6 {
		t.Fatalf("%d offerings, want 3 zones x 2 markets", len(offs))
	}
	tests := []struct {
		zone   string
		market provider.Market
		price  float64
		source string
	}{
		// Figures of internal/market's catalog.csv (p3.2xlarge).
		{"us-east-1f", provider.MarketSpot, 0.316025, provider.PriceCatalog},
		{"us-east-1f", provider.MarketOnDemand, 3.06, provider.PriceCatalog},
		{"us-west-2c", provider.MarketSpot, 1.012733, provider.PriceCatalog},
		// eu-west-1 is not in the catalog: us-east-1's on-demand price
		// stands in, and spot falls back to it, labelled.
		{"eu-west-1a", provider.MarketOnDemand, 3.06, provider.PriceCatalog},
		{"eu-west-1a", provider.MarketSpot, 3.06, provider.PriceFallback},
	}
	for _, tc := range tests {
		o := find(offs, tc.zone, tc.market)
		if math.Abs(o.PricePerHour-tc.price) > 1e-9 || o.PriceSource != tc.source || o.Currency != Currency || o.InstanceType != DefaultInstanceType {
			t.Errorf("%s %s = %+v, want %v (%s)", tc.zone, tc.market, o, tc.price, tc.source)
		}
	}
	if n := p.PriceNote("eu-west-1a", "", provider.MarketSpot); !strings.Contains(n, "no spot price") {
		t.Errorf("price note %q", n)
	}
	// Without RevealCapacity a zone at zero is offered (a cloud does not
	// say); with it, it is not.
	if !find(offs, "eu-west-1a", provider.MarketSpot).Available {
		t.Error("eu-west-1a spot unavailable without a refusal")
	}
	r, _ := newSim(t, Options{Trace: tr, RevealCapacity: true})
	mustLaunch(t, r, "pool", "us-east-1f", provider.MarketSpot)
	offs, _ = r.Offerings(context.Background(), nil)
	if find(offs, "eu-west-1a", provider.MarketSpot).Available || find(offs, "us-east-1f", provider.MarketSpot).Available ||
		!find(offs, "us-west-2c", provider.MarketSpot).Available || !find(offs, "eu-west-1a", provider.MarketOnDemand).Available {
		t.Errorf("reveal capacity: %+v", offs)
	}
	// A per-zone table overrides; the spec's zone and type narrow the list.
	o, _ := newSim(t, Options{Trace: tr, Prices: map[string]ZonePrices{"eu-west-1a": {Spot: 1.285}}})
	offs, err = o.Offerings(context.Background(), &tidev1.TidePoolSpec{AvailabilityZone: "eu-west-1a"})
	if err != nil || len(offs) != 2 {
		t.Fatalf("offerings in one zone: %v %v", offs, err)
	}
	if s := find(offs, "eu-west-1a", provider.MarketSpot); s.PricePerHour != 1.285 || s.PriceSource != provider.PriceOverride {
		t.Errorf("override: %+v", s)
	}
	offs, _ = o.Offerings(context.Background(), &tidev1.TidePoolSpec{InstanceType: "nosuch.type"})
	if s := find(offs, "us-west-2c", provider.MarketSpot); s.PricePerHour != 0 || s.PriceSource != "" || s.Currency != "" {
		t.Errorf("unknown type priced: %+v", s)
	}
	if _, err := o.Offerings(context.Background(), &tidev1.TidePoolSpec{AvailabilityZone: "mars-1a"}); !errors.Is(err, ErrUnknownZone) {
		t.Errorf("unknown zone: %v", err)
	}
}

func TestTokenTerminateReclaim(t *testing.T) {
	p, clk := newSim(t, Options{Trace: mkTrace(t, map[string][]int{"a": {1}}), Address: "127.0.0.1:9"})
	req := provider.LaunchRequest{Pool: "pool", Zone: "a", Token: "tok-1"}
	a, err := p.Launch(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	// The zone is full, but a retried token gets the same instance.
	b, err := p.Launch(context.Background(), req)
	if err != nil || b.ID != a.ID || a.Address != "127.0.0.1:9" || a.PrivateIP != "127.0.0.1" || a.State != provider.StateRunning {
		t.Fatalf("retry = %+v, %v; first %+v", b, err, a)
	}
	if err := p.Terminate(context.Background(), a.ID); err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, p); ev.Type != provider.EventGone || ev.Instance.State != provider.StateTerminating {
		t.Fatalf("event %+v", ev)
	}
	if err := p.Terminate(context.Background(), a.ID); err != nil {
		t.Fatalf("terminating a gone instance: %v", err)
	}
	q, _ := newSim(t, Options{Trace: mkTrace(t, map[string][]int{"a": {Unlimited}}), AddressOf: func(n uint64) string { return fmt.Sprintf("127.0.0.%d:80", n) }})
	for want := 1; want <= 2; want++ {
		if in := mustLaunch(t, q, "pool", "a", provider.MarketSpot); in.Address != fmt.Sprintf("127.0.0.%d:80", want) || in.PrivateIP != fmt.Sprintf("127.0.0.%d", want) {
			t.Fatalf("AddressOf: %+v", in)
		}
	}
	// Reclaim with notice, then without.
	c := mustLaunch(t, p, "pool", "a", provider.MarketSpot)
	d := mustLaunch(t, p, "pool", "a", provider.MarketOnDemand)
	if err := p.Reclaim(context.Background(), c.ID, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, p); ev.Type != provider.EventInterruption || !ev.Instance.InterruptAt.Equal(clk.Now().Add(10*time.Second)) {
		t.Fatalf("event %+v", ev)
	}
	if err := p.Reclaim(context.Background(), d.ID, 0); err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, p); ev.Type != provider.EventGone || ev.Instance.ID != d.ID {
		t.Fatalf("event %+v", ev)
	}
	clk.Step(10 * time.Second)
	p.Tick()
	if ev := nextEvent(t, p); ev.Type != provider.EventGone || ev.Instance.ID != c.ID {
		t.Fatalf("event %+v", ev)
	}
	p.Close()
	if _, err := p.List(context.Background(), ""); !errors.Is(err, ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
	if _, ok := <-p.Events(); ok {
		t.Fatal("events channel open after Close")
	}
}

// TestProcesses runs the simulator over the local provider: instances are
// processes that answer HTTP, carry the simulator's zones, and are killed
// by the market after their notice.
func TestProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	clk := testingclock.NewFakeClock(t0)
	lp, err := local.New(local.Options{StateDir: t.TempDir(), Clock: clk, Logger: quiet(), StopGrace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		_ = lp.Close(ctx)
	}()
	p, _ := newSim(t, Options{Trace: mkTrace(t, map[string][]int{"us-west-2c": {1, 0}}), Local: lp, Clock: clk, Notice: 5 * time.Second})
	spec := &tidev1.TidePoolSpec{Provider: tidev1.ProviderSim, Local: &tidev1.LocalSpec{Command: []string{exe}, Env: []string{childEnv + "=1"}}}
	in, err := p.Launch(context.Background(), provider.LaunchRequest{Pool: "pool", Spec: spec, Zone: "us-west-2c", Market: provider.MarketSpot})
	if err != nil {
		t.Fatal(err)
	}
	if in.Zone != "us-west-2c" || in.Market != provider.MarketSpot || in.InstanceType != DefaultInstanceType || in.Address == "" {
		t.Fatalf("instance %+v", in)
	}
	if _, err := p.Launch(context.Background(), provider.LaunchRequest{Pool: "pool", Spec: spec, Zone: "us-west-2c", Market: provider.MarketSpot}); !provider.IsInsufficientCapacity(err) {
		t.Fatalf("second spot launch: %v", err)
	}
	// It serves HTTP.
	deadline := time.Now().Add(waitTimeout)
	for {
		resp, err := http.Get("http://" + in.Address + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("instance never answered: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if l := list(t, p, "pool"); len(l) != 1 || l[0].Zone != "us-west-2c" {
		t.Fatalf("list %+v", l)
	}
	// The market takes it back: a notice with the simulator's zone, then
	// the process is killed at the deadline.
	clk.Step(gap)
	p.Tick()
	ev := nextEvent(t, p)
	if ev.Type != provider.EventInterruption || ev.Instance.ID != in.ID || ev.Instance.Zone != "us-west-2c" || ev.Instance.InterruptAt == nil {
		t.Fatalf("event %+v", ev)
	}
	clk.Step(5 * time.Second)
	ev = nextEvent(t, p)
	if ev.Type != provider.EventGone || ev.Instance.ID != in.ID || ev.Instance.Zone != "us-west-2c" {
		t.Fatalf("event %+v", ev)
	}
	if l := list(t, p, "pool"); len(l) != 0 {
		t.Fatalf("still listed: %+v", l)
	}
	if s := p.Stats(); s.Live != 0 || s.Preemptions != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// An on-demand instance stops into a warm standby and starts again; spot
// and unknown instances refuse, and the process mode says it cannot.
func TestStopStart(t *testing.T) {
	tr := mkTrace(t, map[string][]int{"us-east-1a": {4}})
	p, _ := newSim(t, Options{Trace: tr, Address: "127.0.0.1:1"})
	ctx := context.Background()
	od := mustLaunch(t, p, "pool", "us-east-1a", provider.MarketOnDemand)
	sp := mustLaunch(t, p, "pool", "us-east-1a", provider.MarketSpot)
	if err := p.Stop(ctx, od.ID); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(ctx, od.ID); err != nil {
		t.Errorf("second stop: %v", err)
	}
	state := func(id string) provider.State {
		insts, err := p.List(ctx, "pool")
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range insts {
			if in.ID == id {
				return in.State
			}
		}
		return ""
	}
	if s := state(od.ID); s != provider.StateStopped {
		t.Fatalf("after Stop: %s, want Stopped", s)
	}
	if err := p.Stop(ctx, sp.ID); !errors.Is(err, ErrNotStoppable) {
		t.Errorf("stopping spot: %v, want ErrNotStoppable", err)
	}
	if err := p.Stop(ctx, "sim-nosuch"); !errors.Is(err, ErrNotFound) {
		t.Errorf("stopping an unknown instance: %v", err)
	}
	in, err := p.Start(ctx, od.ID)
	if err != nil || in.State != provider.StateRunning || in.Address != "127.0.0.1:1" {
		t.Fatalf("Start: %+v, %v", in, err)
	}
	if s := state(od.ID); s != provider.StateRunning {
		t.Errorf("after Start: %s", s)
	}
	if _, err := p.Start(ctx, od.ID); err != nil {
		t.Errorf("starting a running instance: %v", err)
	}
	if st := p.Stats(); st.Stops != 4 || st.Starts != 2 || st.Launches != 2 || st.Terminates != 0 {
		t.Errorf("stats %+v: want 4 stops, 2 starts, 2 launches, no terminations", st)
	}
}

// TestOfferingsPricedByRegion: a zone is priced by the catalog rows of its
// region (market.RegionOf), whatever the cloud's zone names look like: an
// AWS Local Zone by its parent region, a GCP zone by its region.
func TestOfferingsPricedByRegion(t *testing.T) {
	cat, err := market.ParseCatalog(strings.NewReader("aws,us-central1,," + DefaultInstanceType + ",spot,0.5,USD,2026-01-01,false,test\n"))
	if err != nil {
		t.Fatal(err)
	}
	tr := mkTrace(t, map[string][]int{"us-west-2-lax-1a": {1}, "us-central1-a": {1}})
	p, _ := newSim(t, Options{Trace: tr, Catalog: market.DefaultCatalog().Merge(cat)})
	offs, err := p.Offerings(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"us-west-2-lax-1a": 1.012733, "us-central1-a": 0.5} // us-west-2's catalog row; the test row
	for _, o := range offs {
		if o.Market != provider.MarketSpot {
			continue
		}
		if w, ok := want[o.Zone]; !ok || math.Abs(o.PricePerHour-w) > 1e-9 || o.PriceSource != provider.PriceCatalog {
			t.Errorf("%s spot = %v (%s), want %v from the catalog", o.Zone, o.PricePerHour, o.PriceSource, w)
		}
		delete(want, o.Zone)
	}
	if len(want) != 0 {
		t.Errorf("no spot offering in %v", want)
	}
}
