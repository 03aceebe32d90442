package costreport

import (
	"context"
	"encoding/json"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/tidegpu/tidegpu/internal/cost"
	"github.com/tidegpu/tidegpu/internal/events"
	"github.com/tidegpu/tidegpu/internal/market"
	"github.com/tidegpu/tidegpu/internal/notify"
)

// Wednesday 4 March 2026, 15:00 UTC.
var wed = time.Date(2026, 3, 4, 15, 0, 0, 0, time.UTC)

func day(y int, m time.Month, d int) time.Time { return time.Date(y, m, d, 0, 0, 0, 0, time.UTC) }

func TestPeriod(t *testing.T) {
	for _, c := range []struct {
		s        Schedule
		at       time.Time
		from, to time.Time
	}{
		{Daily, wed, day(2026, 3, 4), day(2026, 3, 5)},
		{Weekly, wed, day(2026, 3, 2), day(2026, 3, 9)},
		{Weekly, day(2026, 3, 2), day(2026, 3, 2), day(2026, 3, 9)},                                                 // Monday 00:00
		{Weekly, day(2026, 3, 2).Add(-time.Nanosecond), day(2026, 2, 23), day(2026, 3, 2)},                          // Sunday night
		{Weekly, day(2026, 12, 31), day(2026, 12, 28), day(2027, 1, 4)},                                             // across a year
		{Daily, time.Date(2026, 3, 4, 23, 0, 0, 0, time.FixedZone("x", -5*3600)), day(2026, 3, 5), day(2026, 3, 6)}, // UTC
	} {
		w := Period(c.s, c.at)
		if !w.From.Equal(c.from) || !w.To.Equal(c.to) {
			t.Errorf("Period(%s, %v) = %v..%v, want %v..%v", c.s, c.at, w.From, w.To, c.from, c.to)
		}
	}
}

func TestDecide(t *testing.T) {
	for _, c := range []struct {
		name      string
		s         Schedule
		last, now time.Time
		due       bool
		from      time.Time
		wake      time.Time
	}{
		{"nothing reported yet: wait for the day's end", Daily, time.Time{}, wed, false, time.Time{}, day(2026, 3, 5)},
		{"the day ended", Daily, day(2026, 3, 4), day(2026, 3, 5), true, day(2026, 3, 4), time.Time{}},
		{"reported: wait for the next", Daily, day(2026, 3, 5), day(2026, 3, 5).Add(time.Second), false, time.Time{}, day(2026, 3, 6)},
		{"down three days: only the last day", Daily, day(2026, 3, 2), wed, true, day(2026, 3, 3), time.Time{}},
		{"weekly, mid-week", Weekly, day(2026, 3, 2), wed, false, time.Time{}, day(2026, 3, 9)},
		{"weekly, Monday", Weekly, day(2026, 3, 2), day(2026, 3, 9), true, day(2026, 3, 2), time.Time{}},
	} {
		w, due, wake := Decide(c.s, c.last, c.now)
		if due != c.due || !w.From.Equal(c.from) || !wake.Equal(c.wake) {
			t.Errorf("%s: due %v from %v wake %v; want %v %v %v", c.name, due, w.From, wake, c.due, c.from, c.wake)
		}
	}
}

func TestParseSchedule(t *testing.T) {
	for in, want := range map[string]Schedule{"daily": Daily, "weekly": Weekly, "off": Off, "": Off} {
		if got, err := ParseSchedule(in); err != nil || got != want {
			t.Errorf("%q: %v %v", in, got, err)
		}
	}
	if _, err := ParseSchedule("hourly"); err == nil || !strings.Contains(err.Error(), "--cost-report") {
		t.Errorf("hourly: %v", err)
	}
}

var usd36 = market.Price{PerHour: 3.6, Currency: "USD", Source: market.PriceOverride, Market: market.OnDemand}

// receiver is a local webhook that keeps what it got.
type receiver struct {
	mu     sync.Mutex
	bodies []notify.Body
	ids    []string
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	b, _ := io.ReadAll(req.Body)
	var body notify.Body
	_ = json.Unmarshal(b, &body)
	r.mu.Lock()
	r.bodies = append(r.bodies, body)
	r.ids = append(r.ids, req.Header.Get(notify.HeaderDelivery))
	r.mu.Unlock()
}

func (r *receiver) got() []notify.Body {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]notify.Body(nil), r.bodies...)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond) // polling the condition
	}
}

// The daily report reaches a local webhook at each day's end on a fake
// clock, once per day, with each tenant's spend and tokens; tenants'
// budget alerts reach it once each.
func TestReportAndAlertsDelivered(t *testing.T) {
	clk := clocktesting.NewFakeClock(wed.Add(200 * time.Second))
	l := cost.NewLedger(cost.Options{Clock: clk})
	if err := l.Start(cost.InstanceInfo{ID: "i1", Pool: "chat", Provider: "local"}, wed.Add(-time.Hour), usd36, usd36); err != nil {
		t.Fatal(err)
	}
	// 200 s busy (0.20 USD): a in flight all of it, b half: a pays 2/3.
	l.AddBusy("i1", wed, wed.Add(200*time.Second))
	l.AddUse("i1", cost.Use{Tenant: "a", Prompt: 100, Completion: 900, Start: wed, End: wed.Add(200 * time.Second)})
	l.AddUse("i1", cost.Use{Tenant: "b", Prompt: 10, Completion: 90, Start: wed.Add(100 * time.Second), End: wed.Add(200 * time.Second)})

	recv := &receiver{}
	srv := httptest.NewServer(recv)
	defer srv.Close()
	rec := events.NewRecorder(100, clk, nil)
	n, err := notify.New(notify.Options{Sinks: []notify.Sink{{URL: srv.URL, Format: notify.FormatJSON, Secret: []byte("s")}},
		Reasons: []string{ReasonReport, ReasonTenantAlert}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, unsub := rec.Subscribe(16)
	defer unsub()
	go n.Run(ctx, ch)
	emit := func(reason, msg string) { rec.Eventf(events.TypeNormal, reason, "", "", "%s", msg) }
	done := make(chan struct{})
	go func() { defer close(done); Run(ctx, clk, Daily, l, emit) }()
	budgets := func() map[string]*big.Rat { return map[string]*big.Rat{"a": big.NewRat(1, 5), "b": big.NewRat(100, 1)} }
	go WatchBudgets(ctx, clk, time.Minute, budgets, l, emit)

	// a spent 0.1333 of 0.20: its 50 % alert (not yet 80 %).
	waitFor(t, "the 50 % alert", func() bool { return len(recv.got()) == 1 })
	if g := recv.got()[0]; g.Reason != ReasonTenantAlert || !strings.Contains(g.Message, "tenant a crossed 50 %") {
		t.Fatalf("first delivery %+v", g)
	}
	// Midnight: the day's report.
	waitFor(t, "the report loop to wait", func() bool { return clk.HasWaiters() })
	clk.SetTime(day(2026, 3, 5).Add(time.Second))
	waitFor(t, "the report", func() bool { return len(recv.got()) == 2 })
	r := recv.got()[1]
	if r.Type != "tidegpu.report" || r.Reason != ReasonReport {
		t.Fatalf("report delivery %+v", r)
	}
	for _, want := range []string{"daily cost report per tenant for 2026-03-04 00:00 to 2026-03-05 00:00",
		"\na: 0.133333 USD, 1000 tokens", "133.3333 USD/Mtok", "\nb: 0.066667 USD, 100 tokens", "666.6667 USD/Mtok", "(idle): 35.800000 USD", "total: 36.000000 USD"} {
		if !strings.Contains(r.Message, want) {
			t.Errorf("report lacks %q:\n%s", want, r.Message)
		}
	}
	// More use by a the next day crosses 100 %: one alert; the next
	// midnight one more report, and nothing twice.
	l.AddBusy("i1", day(2026, 3, 5).Add(time.Minute), day(2026, 3, 5).Add(3*time.Minute))
	l.AddUse("i1", cost.Use{Tenant: "a", Prompt: 1, Start: day(2026, 3, 5).Add(time.Minute), End: day(2026, 3, 5).Add(3 * time.Minute)})
	clk.SetTime(day(2026, 3, 5).Add(3 * time.Minute))
	waitFor(t, "the 100 % alert", func() bool { return len(recv.got()) == 3 })
	if g := recv.got()[2]; !strings.Contains(g.Message, "tenant a crossed 100 %") {
		t.Errorf("third delivery %+v", g)
	}
	clk.SetTime(day(2026, 3, 6).Add(time.Second))
	waitFor(t, "the second report", func() bool { return len(recv.got()) == 4 })
	clk.SetTime(day(2026, 3, 6).Add(time.Hour))
	cancel()
	<-done
	recv.mu.Lock()
	seen := map[string]bool{}
	for _, id := range recv.ids {
		if seen[id] {
			t.Errorf("delivery %s twice", id)
		}
		seen[id] = true
	}
	recv.mu.Unlock()
	if n := len(recv.got()); n != 4 {
		t.Errorf("%d deliveries, want 4", n)
	}
}

// A restart that restores the ledger's snapshot does not say an alert of
// the month again; the next level still comes, once.
func TestBudgetAlertsOnceAcrossARestart(t *testing.T) {
	clk := clocktesting.NewFakeClock(wed.Add(200 * time.Second))
	l := cost.NewLedger(cost.Options{Clock: clk})
	if err := l.Start(cost.InstanceInfo{ID: "i1", Pool: "chat", Provider: "local"}, wed.Add(-time.Hour), usd36, usd36); err != nil {
		t.Fatal(err)
	}
	l.AddBusy("i1", wed, wed.Add(100*time.Second)) // 0.10 USD, all a's: 50 % of 0.20
	l.AddUse("i1", cost.Use{Tenant: "a", Prompt: 1, Start: wed, End: wed.Add(100 * time.Second)})
	budgets := func() map[string]*big.Rat { return map[string]*big.Rat{"a": big.NewRat(1, 5)} }

	watch := func(l BudgetLedger) (got func() []string, stop func()) {
		var mu sync.Mutex
		var msgs []string
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			WatchBudgets(ctx, clk, time.Minute, budgets, l, func(_, msg string) { mu.Lock(); msgs = append(msgs, msg); mu.Unlock() })
		}()
		return func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), msgs...) },
			func() { cancel(); <-done }
	}
	got, stop := watch(l)
	waitFor(t, "the 50 % alert", func() bool { return len(got()) == 1 })
	stop()
	snap, err := l.Snapshot()
	if err != nil {
		t.Fatal(err)
	}

	// The restarted process restores the snapshot and watches for three
	// rounds: nothing is said again.
	r := cost.NewLedger(cost.Options{Clock: clk})
	if err := r.Restore(snap); err != nil {
		t.Fatal(err)
	}
	got, stop = watch(r)
	defer stop()
	for range 3 {
		waitFor(t, "the watch to wait", func() bool { return clk.HasWaiters() })
		clk.Step(time.Minute)
	}
	waitFor(t, "the watch to wait", func() bool { return clk.HasWaiters() })
	if g := got(); len(g) != 0 {
		t.Fatalf("said again after the restart: %q", g)
	}
	// More use (after the snapshot: the restored ledger has what came
	// before) crosses 100 %: said once.
	now := clk.Now()
	r.AddBusy("i1", now.Add(-100*time.Second), now)
	r.AddUse("i1", cost.Use{Tenant: "a", Prompt: 1, Start: now.Add(-100 * time.Second), End: now})
	clk.Step(time.Minute)
	waitFor(t, "the 100 % alert", func() bool { return len(got()) == 1 })
	if g := got(); !strings.Contains(g[0], "tenant a crossed 100 %") {
		t.Errorf("after the restart: %q", g)
	}
}
