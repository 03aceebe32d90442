package cost

import (
	"math"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/tidegpu/tidegpu/internal/market"
)

const (
	p3Spot = 0.316025 // catalog: aws us-east-1 p3.2xlarge spot (vantage spot_avg, 2025-11-30)
	p3OD   = 3.06     // catalog: aws us-east-1 p3.2xlarge on-demand
)

func min_(m int) time.Duration { return time.Duration(m) * time.Minute }

func relClose(t *testing.T, what string, got, want, rel float64) {
	t.Helper()
	if want == 0 {
		if math.Abs(got) > rel {
			t.Errorf("%s = %.12g, want 0", what, got)
		}
		return
	}
	if math.Abs(got-want)/math.Abs(want) > rel {
		t.Errorf("%s = %.12g, want %.12g (relative error %.3g > %g)", what, got, want, math.Abs(got-want)/math.Abs(want), rel)
	}
}

func p3(id string, models ...string) InstanceInfo {
	return InstanceInfo{ID: id, Pool: "chat", Provider: "aws", Region: "us-east-1", Zone: "us-east-1a",
		InstanceType: "p3.2xlarge", Market: market.Spot, Models: models}
}

func catalogPrices(t *testing.T, info InstanceInfo) (market.Price, market.Price) {
	t.Helper()
	eff, list, err := (&Resolver{Catalog: market.DefaultCatalog()}).Prices(info.Query(), t0)
	if err != nil {
		t.Fatal(err)
	}
	return eff, list
}

func onlyReport(t *testing.T, rs []PoolReport) PoolReport {
	t.Helper()
	if len(rs) != 1 {
		t.Fatalf("%d reports, want 1: %+v", len(rs), rs)
	}
	return rs[0]
}

func model(t *testing.T, r PoolReport, name string) ModelCost {
	t.Helper()
	for _, m := range r.Models {
		if m.Model == name {
			return m
		}
	}
	t.Fatalf("no model %q in %+v", name, r.Models)
	return ModelCost{}
}

// Two spot p3.2xlarge for T = 2h30m, with busy intervals and tokens.
//
// Hand computation (prices from the catalog: spot 0.316025, on-demand 3.06):
//
//	spend    = 2 x 0.316025 x 2.5 h                         = 1.580125
//	list     = 2 x 3.06 x 2.5 h                             = 15.3
//	savings  = 15.3 - 1.580125                              = 13.719875
//	busy     a: [0:10,0:40) + [1:10,1:40) = 60 min; b: [0:00,0:15) = 15 min
//	busy cost = 1.25 h x 0.316025                           = 0.39503125
//	idle cost = 1.580125 - 0.39503125                       = 1.18509375
//	llama (only a, 1M tokens in hour 0, a declares llama):
//	  allocation = all of a's cost = 0.316025 x 2.5         = 0.7900625 -> 0.7900625 per Mtok
//	  usage      = a's busy cost   = 0.316025 x 1 h         = 0.316025  -> 0.316025 per Mtok
//	qwen (only b, 250k tokens):
//	  allocation = 0.7900625 / 0.25 Mtok                    = 3.16025 per Mtok
//	  usage      = 0.25 h x 0.316025 = 0.07900625 / 0.25    = 0.316025 per Mtok
func TestLedgerTwoSpotInstances(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	l := NewLedger(Options{Clock: clk})
	a, b := p3("a", "llama"), p3("b", "qwen")
	eff, list := catalogPrices(t, a)
	for _, info := range []InstanceInfo{a, b} {
		if err := l.Start(info, t0, eff, list); err != nil {
			t.Fatal(err)
		}
	}
	ma, mb := l.Meter("a"), l.Meter("b")
	ma.BusyStart(t0.Add(min_(10)))
	ma.BusyEnd(t0.Add(min_(40)))
	ma.BusyStart(t0.Add(min_(70)))
	ma.BusyEnd(t0.Add(min_(100)))
	mb.BusyStart(t0)
	mb.BusyEnd(t0.Add(min_(15)))
	ma.AddTokens("llama", 300_000, 700_000, t0.Add(min_(20)))
	mb.AddTokens("qwen", 100_000, 150_000, t0.Add(min_(5)))
	T := 150 * time.Minute
	for _, id := range []string{"a", "b"} {
		if err := l.End(id, t0.Add(T)); err != nil {
			t.Fatal(err)
		}
	}
	clk.SetTime(t0.Add(5 * time.Hour))

	r := onlyReport(t, l.Report("chat", DayWindow(t0)))
	hours := T.Hours()
	relClose(t, "spend", r.EffectiveCost.Float(), 2*p3Spot*hours, 1e-9)
	relClose(t, "list", r.ListCost.Float(), 2*p3OD*hours, 1e-9)
	relClose(t, "savings", r.Savings.Float(), 2*(p3OD-p3Spot)*hours, 1e-9)
	relClose(t, "busy cost", r.BusyCost.Float(), 1.25*p3Spot, 1e-9)
	relClose(t, "idle cost", r.IdleCost.Float(), 2*p3Spot*hours-1.25*p3Spot, 1e-9)
	relClose(t, "instance hours", r.InstanceHours, 5, 1e-12)
	relClose(t, "busy hours", r.BusyHours, 1.25, 1e-12)
	if r.EffectiveCost.Nanos() != 1_580_125_000 || r.Currency != "USD" {
		t.Errorf("spend = %s, want exactly 1.580125000 USD", r.EffectiveCost)
	}
	if got := r.CostBySource[market.PriceCatalog]; got.Nanos() != 1_580_125_000 || len(r.CostBySource) != 1 {
		t.Errorf("cost by source = %v", r.CostBySource)
	}
	if !r.RunRatePerHour.IsZero() {
		t.Errorf("run rate after both ended = %s", r.RunRatePerHour)
	}
	llama, qwen := model(t, r, "llama"), model(t, r, "qwen")
	relClose(t, "llama allocation $/Mtok", llama.PerMillionAllocation, 0.7900625, 1e-9)
	relClose(t, "llama usage $/Mtok", llama.PerMillionUsage, 0.316025, 1e-9)
	relClose(t, "qwen allocation $/Mtok", qwen.PerMillionAllocation, 3.16025, 1e-9)
	relClose(t, "qwen usage $/Mtok", qwen.PerMillionUsage, 0.316025, 1e-9)
	if llama.PromptTokens != 300_000 || llama.CompletionTokens != 700_000 || !llama.HasTokens {
		t.Errorf("llama tokens = %+v", llama)
	}

	// The same, seen hour by hour: hour 1 holds a's second busy stretch and
	// both instances for a full hour.
	h1 := onlyReport(t, l.Report("chat", HourWindow(t0.Add(time.Hour))))
	relClose(t, "hour 1 spend", h1.EffectiveCost.Float(), 2*p3Spot, 1e-12)
	relClose(t, "hour 1 busy", h1.BusyHours, 0.5, 1e-12)
	// Busy time is kept per hour, so a window cutting an hour gets the
	// hour's busy time pro rata: [0:30, 0:50) is 1/3 of hour 0, whose busy
	// time is a's 30 min + b's 15 min, so 15 min.
	cut := onlyReport(t, l.Report("chat", Window{t0.Add(min_(30)), t0.Add(min_(50))}))
	relClose(t, "cut window busy hours", cut.BusyHours, 15.0/60, 1e-12)
	relClose(t, "cut window spend", cut.EffectiveCost.Float(), 2*p3Spot/3, 1e-12)
	if rs := l.Report("chat", HourWindow(t0.Add(4*time.Hour))); len(rs) != 0 && !rs[0].EffectiveCost.IsZero() {
		t.Errorf("hour after the end: %+v", rs)
	}
}

// Token shares split an hour between the models of one instance.
//
// One on-demand p3.2xlarge (3.06/h) for exactly one hour serving m1 (3000
// tokens) and m2 (1000 tokens): m1 gets 3/4 of 3.06 = 2.295 (765 per Mtok),
// m2 1/4 = 0.765 (765 per Mtok). No busy time, so usage cost is zero.
func TestLedgerModelShares(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0.Add(2 * time.Hour))
	l := NewLedger(Options{Clock: clk})
	info := p3("c", "m1", "m2")
	info.Market = market.OnDemand
	eff, list := catalogPrices(t, info)
	if err := l.Start(info, t0, eff, list); err != nil {
		t.Fatal(err)
	}
	l.AddTokens("c", "m1", 1000, 2000, t0.Add(time.Minute))
	l.AddTokens("c", "m2", 400, 600, t0.Add(2*time.Minute))
	l.AddTokens("c", "m2", -1, 5, t0.Add(2*time.Minute)) // ignored: negative
	if err := l.End("c", t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	r := onlyReport(t, l.Report("chat", DayWindow(t0)))
	m1, m2 := model(t, r, "m1"), model(t, r, "m2")
	relClose(t, "m1 allocation", m1.AllocationCost.Float(), 2.295, 1e-12)
	relClose(t, "m2 allocation", m2.AllocationCost.Float(), 0.765, 1e-12)
	relClose(t, "m1 $/Mtok", m1.PerMillionAllocation, 765, 1e-12)
	relClose(t, "m2 $/Mtok", m2.PerMillionAllocation, 765, 1e-12)
	if !m1.UsageCost.IsZero() || r.Savings.Float() != 0 {
		t.Errorf("usage %s, savings %s; want zero", m1.UsageCost, r.Savings)
	}
}

// A price change mid-lifetime opens a segment; busy time crossing it is
// priced on each side.
//
// Hand computation: live spot 0.30 for [0:00, 1:00), then 0.40 until 2:00.
// spend = 0.30 + 0.40 = 0.70; busy [0:50, 1:10) = 10 min at 0.30 + 10 min at
// 0.40 = 0.05 + 0.0666... = 0.11666...; list = 2 x 3.06 = 6.12.
func TestLedgerPriceChange(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	l := NewLedger(Options{Clock: clk})
	info := p3("d", "llama")
	_, list := catalogPrices(t, info)
	live := func(v float64) market.Price {
		return market.Price{PerHour: v, Currency: "USD", Source: market.PriceLive, Market: market.Spot}
	}
	if err := l.Start(info, t0, live(0.30), list); err != nil {
		t.Fatal(err)
	}
	m := l.Meter("d")
	m.BusyStart(t0.Add(min_(50)))
	clk.SetTime(t0.Add(time.Hour))
	if err := l.SetPrice("d", t0.Add(time.Hour), live(0.40), list); err != nil {
		t.Fatal(err)
	}
	// Same price again: no new segment; a stale change: ignored.
	if err := l.SetPrice("d", t0.Add(min_(90)), live(0.40), list); err != nil {
		t.Fatal(err)
	}
	if err := l.SetPrice("d", t0.Add(min_(30)), live(0.99), list); err != nil {
		t.Fatal(err)
	}
	m.BusyEnd(t0.Add(min_(70)))
	clk.SetTime(t0.Add(2 * time.Hour))
	r := onlyReport(t, l.Report("chat", Window{t0, t0.Add(2 * time.Hour)}))
	relClose(t, "spend", r.EffectiveCost.Float(), 0.70, 1e-12)
	relClose(t, "busy cost", r.BusyCost.Float(), 10.0/60*0.30+10.0/60*0.40, 1e-12)
	relClose(t, "list", r.ListCost.Float(), 6.12, 1e-12)
	relClose(t, "run rate", r.RunRatePerHour.Float(), 0.40, 1e-12)
	lts := l.Lifetimes("chat")
	if len(lts) != 1 || len(lts[0].Segments) != 2 || lts[0].Segments[1].Effective.PerHour != 0.40 ||
		!lts[0].Segments[1].From.Equal(t0.Add(time.Hour)) || !lts[0].End.IsZero() {
		t.Errorf("lifetimes = %+v", lts)
	}
	if rr := l.RunRate("chat", t0.Add(min_(30))); len(rr) != 1 || rr[0].Float() != 0.30 {
		t.Errorf("run rate at 0:30 = %v", rr)
	}
	// Ending before a later segment drops that segment.
	if err := l.End("d", t0.Add(min_(45))); err != nil {
		t.Fatal(err)
	}
	r = onlyReport(t, l.Report("chat", Window{t0, t0.Add(2 * time.Hour)}))
	relClose(t, "spend after an earlier end", r.EffectiveCost.Float(), 0.75*0.30, 1e-12)
	if n := len(l.Lifetimes("")[0].Segments); n != 1 {
		t.Errorf("%d segments after ending before the change", n)
	}
}

func TestLedgerIdempotentAndErrors(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0.Add(time.Hour))
	l := NewLedger(Options{Clock: clk})
	info := p3("e")
	eff, list := catalogPrices(t, info)
	for i := 0; i < 3; i++ { // replayed starts do nothing
		if err := l.Start(info, t0.Add(time.Duration(i)*time.Minute), eff, list); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.End("e", t0.Add(min_(40))); err != nil {
		t.Fatal(err)
	}
	if err := l.End("e", t0.Add(min_(50))); err != nil { // later end: the earlier stands
		t.Fatal(err)
	}
	r := onlyReport(t, l.Report("", HourWindow(t0)))
	relClose(t, "spend", r.EffectiveCost.Float(), p3Spot*40/60, 1e-12)
	if err := l.End("nope", t0); !IsUnknownInstance(err) {
		t.Errorf("End unknown: %v", err)
	}
	if err := l.SetPrice("nope", t0, eff, list); !IsUnknownInstance(err) {
		t.Errorf("SetPrice unknown: %v", err)
	}
	bad := []struct {
		name      string
		info      InstanceInfo
		at        time.Time
		eff, list market.Price
		want      string
	}{
		{"no id", InstanceInfo{Pool: "p"}, t0, eff, list, "ID"},
		{"no pool", InstanceInfo{ID: "x"}, t0, eff, list, "pool"},
		{"zero time", p3("x"), time.Time{}, eff, list, "out of range"},
		{"negative price", p3("x"), t0, market.Price{PerHour: -1, Currency: "USD", Source: market.PriceLive}, list, "price per hour"},
		{"bad source", p3("x"), t0, market.Price{PerHour: 1, Currency: "USD", Source: "guess"}, list, "source"},
		{"bad currency", p3("x"), t0, market.Price{PerHour: 1, Currency: "$", Source: market.PriceLive}, list, "currency"},
		{"two currencies", p3("x"), t0, market.Price{PerHour: 1, Currency: "CNY", Source: market.PriceLive}, list, "one currency"},
	}
	for _, tc := range bad {
		if err := l.Start(tc.info, tc.at, tc.eff, tc.list); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
	// Unknown meters ignore everything.
	var nilMeter *Meter
	nilMeter.BusyStart(t0)
	nilMeter.BusyEnd(t0)
	nilMeter.AddTokens("m", 1, 1, t0)
	nilMeter.ObserveBusyTotal(time.Second, t0)
	nilMeter.ObserveTokenTotals("m", 1, 1, t0)
	l.BusyStart("nope", t0)
}

func TestMeterCumulativeAndTransitions(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0.Add(2 * time.Hour))
	l := NewLedger(Options{Clock: clk})
	info := p3("f", "llama")
	eff, list := catalogPrices(t, info)
	if err := l.Start(info, t0, eff, list); err != nil {
		t.Fatal(err)
	}
	m := l.Meter("f")
	m.BusyEnd(t0.Add(time.Minute)) // idle: ignored
	m.BusyStart(t0.Add(min_(2)))
	m.BusyStart(t0.Add(min_(5))) // already busy: ignored
	m.BusyEnd(t0.Add(min_(12)))
	// A cumulative busy counter: 0 -> 5 min -> 5 min (replay) -> 8 min.
	m.ObserveBusyTotal(0, t0.Add(min_(20)))
	m.ObserveBusyTotal(min_(5), t0.Add(min_(30)))
	m.ObserveBusyTotal(min_(5), t0.Add(min_(31)))
	m.ObserveBusyTotal(min_(8), t0.Add(min_(40)))
	// Overlapping report of an interval already counted adds nothing.
	m.BusyStart(t0.Add(min_(3)))
	m.BusyEnd(t0.Add(min_(11)))
	// Cumulative tokens: replays add nothing; a smaller reading is a reset.
	m.ObserveTokenTotals("llama", 100, 200, t0.Add(min_(10)))
	m.ObserveTokenTotals("llama", 100, 200, t0.Add(min_(11)))
	m.ObserveTokenTotals("llama", 150, 260, t0.Add(min_(12)))
	m.ObserveTokenTotals("llama", 10, 20, t0.Add(min_(13)))
	r := onlyReport(t, l.Report("chat", HourWindow(t0)))
	// busy = 10 (2..12) + 5 (25..30) + 3 (37..40) = 18 min
	relClose(t, "busy hours", r.BusyHours, 18.0/60, 1e-12)
	ll := model(t, r, "llama")
	if ll.PromptTokens != 160 || ll.CompletionTokens != 280 {
		t.Errorf("llama tokens %v/%v, want 160/280", ll.PromptTokens, ll.CompletionTokens)
	}
	// Open busy interval counts up to now.
	m.BusyStart(t0.Add(min_(90)))
	r = onlyReport(t, l.Report("chat", HourWindow(t0.Add(time.Hour))))
	relClose(t, "open busy hours", r.BusyHours, 0.5, 1e-12)
}

func TestSyncPool(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	l := NewLedger(Options{Clock: clk})
	res := &Resolver{Catalog: market.DefaultCatalog()}
	prices := func(i InstanceInfo) (market.Price, market.Price, error) { return res.Prices(i.Query(), clk.Now()) }
	a, b := p3("a"), p3("b")
	a.LaunchedAt = t0.Add(-10 * time.Minute)
	if err := l.SyncPool("chat", []InstanceInfo{a, b}, t0, prices); err != nil {
		t.Fatal(err)
	}
	clk.SetTime(t0.Add(time.Hour))
	unknown := InstanceInfo{ID: "u", Provider: "aws", Region: "mars-1", InstanceType: "x", Market: market.OnDemand}
	err := l.SyncPool("chat", []InstanceInfo{b, unknown}, t0.Add(time.Hour), prices)
	if !IsNoPrice(err) {
		t.Errorf("sync with an unpriceable instance: %v", err)
	}
	lts := l.Lifetimes("chat")
	if len(lts) != 2 || lts[0].Info.ID != "a" || !lts[0].Start.Equal(t0.Add(-10*time.Minute)) || !lts[0].End.Equal(t0.Add(time.Hour)) ||
		lts[1].Info.ID != "b" || !lts[1].End.IsZero() {
		t.Errorf("lifetimes = %+v", lts)
	}
	if got := l.Pools(); len(got) != 1 || got[0] != "chat" {
		t.Errorf("pools = %v", got)
	}
}

func TestWindows(t *testing.T) {
	at := time.Date(2026, 12, 31, 23, 30, 0, 0, time.FixedZone("X", 3600))
	cases := []struct {
		w        Window
		from, to string
	}{
		{HourWindow(at), "2026-12-31T22:00:00Z", "2026-12-31T23:00:00Z"},
		{DayWindow(at), "2026-12-31T00:00:00Z", "2027-01-01T00:00:00Z"},
		{MonthWindow(at), "2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z"},
		{MonthWindow(time.Date(2028, 2, 29, 12, 0, 0, 0, time.UTC)), "2028-02-01T00:00:00Z", "2028-03-01T00:00:00Z"},
	}
	for _, tc := range cases {
		if f, to := tc.w.From.Format(time.RFC3339), tc.w.To.Format(time.RFC3339); f != tc.from || to != tc.to {
			t.Errorf("window %s..%s, want %s..%s", f, to, tc.from, tc.to)
		}
	}
}
