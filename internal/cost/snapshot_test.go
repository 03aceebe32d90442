package cost

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/tidegpu/tidegpu/internal/market"
)

// event is one thing the engine or the gateway tells the ledger.
type event struct {
	at time.Time
	do func(l *Ledger, t *testing.T)
}

func scenario(t *testing.T) []event {
	t.Helper()
	i1, i2 := p3("i1", "llama"), p3("i2", "llama")
	eff, list := catalogPrices(t, i1)
	live := market.Price{PerHour: 0.5, Currency: "USD", Source: market.PriceLive, Market: market.Spot}
	must := func(t *testing.T, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	at := func(m int) time.Time { return t0.Add(min_(m)) }
	return []event{
		{at(0), func(l *Ledger, t *testing.T) { must(t, l.Start(i1, at(0), eff, list)) }},
		{at(0), func(l *Ledger, t *testing.T) { must(t, l.Start(i2, at(0), eff, list)) }},
		{at(10), func(l *Ledger, _ *testing.T) { l.BusyStart("i1", at(10)) }},
		{at(15), func(l *Ledger, _ *testing.T) { l.Meter("i2").ObserveBusyTotal(min_(3), at(15)) }},
		{at(20), func(l *Ledger, _ *testing.T) { l.AddTokens("i1", "llama", 1000, 3000, at(20)) }},
		{at(25), func(l *Ledger, _ *testing.T) { l.Meter("i2").ObserveTokenTotals("llama", 50, 50, at(25)) }},
		{at(28), func(l *Ledger, t *testing.T) { must(t, l.SetPrice("i2", at(28), live, list)) }},
		// the snapshot is taken at 0:30
		{at(40), func(l *Ledger, _ *testing.T) { l.BusyEnd("i1", at(40)) }},
		{at(45), func(l *Ledger, _ *testing.T) { l.Meter("i2").ObserveBusyTotal(min_(7), at(45)) }},
		{at(50), func(l *Ledger, _ *testing.T) { l.AddTokens("i1", "llama", 500, 500, at(50)) }},
		{at(55), func(l *Ledger, _ *testing.T) { l.Meter("i2").ObserveTokenTotals("llama", 80, 90, at(55)) }},
		{at(60), func(l *Ledger, t *testing.T) { must(t, l.End("i2", at(60))) }},
		{at(70), func(l *Ledger, _ *testing.T) { l.BusyStart("i1", at(70)) }},
	}
}

func sameReports(t *testing.T, what string, a, b []PoolReport) {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("%s: %d vs %d reports", what, len(a), len(b))
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.EffectiveCost.v != y.EffectiveCost.v || x.ListCost.v != y.ListCost.v || x.BusyCost.v != y.BusyCost.v ||
			x.InstanceHours != y.InstanceHours || x.BusyHours != y.BusyHours || x.RunRatePerHour.v != y.RunRatePerHour.v ||
			x.Pool != y.Pool || x.Currency != y.Currency {
			t.Errorf("%s: reports differ:\n%+v\n%+v", what, x, y)
		}
		if len(x.Models) != len(y.Models) {
			t.Fatalf("%s: models %+v vs %+v", what, x.Models, y.Models)
		}
		for j := range x.Models {
			mx, my := x.Models[j], y.Models[j]
			if mx.Model != my.Model || mx.PromptTokens != my.PromptTokens || mx.CompletionTokens != my.CompletionTokens {
				t.Errorf("%s: model %+v vs %+v", what, mx, my)
			}
			// Model shares are ratios computed in float64: equal to 1e-12.
			relClose(t, what+" "+mx.Model+" allocation", mx.AllocationCost.Float(), my.AllocationCost.Float(), 1e-12)
			relClose(t, what+" "+mx.Model+" usage", mx.UsageCost.Float(), my.UsageCost.Float(), 1e-12)
		}
	}
}

// Restoring and continuing counts nothing twice: a ledger restored from a
// snapshot at 0:30 that is then fed every event again (those before the
// snapshot included, as a restarted engine and gateway might) reports what
// the ledger that never stopped reports.
func TestSnapshotRestoreContinueNoDoubleCount(t *testing.T) {
	evs := scenario(t)
	clkA := clocktesting.NewFakeClock(t0)
	a := NewLedger(Options{Clock: clkA})
	var snap []byte
	for _, e := range evs {
		if snap == nil && !e.at.Before(t0.Add(min_(30))) {
			clkA.SetTime(t0.Add(min_(30)))
			var err error
			if snap, err = a.Snapshot(); err != nil {
				t.Fatal(err)
			}
		}
		clkA.SetTime(e.at)
		e.do(a, t)
	}
	end := t0.Add(90 * time.Minute)
	clkA.SetTime(end)

	for _, replayAll := range []bool{true, false} {
		clkB := clocktesting.NewFakeClock(t0.Add(min_(30)))
		b := NewLedger(Options{Clock: clkB})
		if err := b.Restore(snap); err != nil {
			t.Fatal(err)
		}
		if !replayAll {
			// Busy intervals open at the snapshot are closed by Restore; a
			// gateway that kept serving re-reports what it has in flight.
			b.BusyStart("i1", t0.Add(min_(30)))
		}
		for _, e := range evs {
			if !replayAll && e.at.Before(t0.Add(min_(30))) {
				continue
			}
			if e.at.After(clkB.Now()) {
				clkB.SetTime(e.at)
			}
			e.do(b, t)
		}
		clkB.SetTime(end)
		what := fmt.Sprintf("replay all=%v", replayAll)
		w := Window{t0, end}
		sameReports(t, what, a.Report("", w), b.Report("", w))
		r := onlyReport(t, b.Report("", w))
		// Hand check: i1 busy [0:10,0:40) + [1:10,1:30) = 50 min; i2 3 + 4 min.
		relClose(t, what+" busy hours", r.BusyHours, 57.0/60, 1e-12)
		if m := model(t, r, "llama"); m.PromptTokens != 1000+500+80 || m.CompletionTokens != 3000+500+90 {
			t.Errorf("%s: tokens %+v", what, m)
		}
		// i1 at catalog spot for 1.5 h; i2 at spot for 28 min then 0.5 for 32 min.
		relClose(t, what+" spend", r.EffectiveCost.Float(), 1.5*p3Spot+28.0/60*p3Spot+32.0/60*0.5, 1e-12)
	}
}

func TestSnapshotDeterministicAndRoundTrip(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	l := NewLedger(Options{Clock: clk})
	for _, e := range scenario(t) {
		clk.SetTime(e.at)
		e.do(l, t)
	}
	clk.SetTime(t0.Add(2 * time.Hour))
	s1, err := l.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	s2, _ := l.Snapshot()
	if !bytes.Equal(s1, s2) {
		t.Error("two snapshots of the same state differ")
	}
	r := NewLedger(Options{Clock: clk})
	if err := r.Restore(s1); err != nil {
		t.Fatal(err)
	}
	s3, _ := r.Snapshot()
	if !bytes.Equal(s1, s3) {
		t.Errorf("restore then snapshot differs:\n%s\n%s", s1, s3)
	}
	sameReports(t, "round trip", l.Report("", DayWindow(t0)), r.Report("", DayWindow(t0)))
}

func TestRestoreRejects(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	l := NewLedger(Options{Clock: clk})
	info := p3("x")
	eff, list := catalogPrices(t, info)
	if err := l.Start(info, t0, eff, list); err != nil {
		t.Fatal(err)
	}
	good, err := l.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]string{
		"version":          strings.Replace(string(good), `"version":1`, `"version":2`, 1),
		"not json":         "{",
		"unknown field":    strings.Replace(string(good), `"version":1`, `"version":1,"bogus":true`, 1),
		"trailing":         string(good) + "{}",
		"bad start":        strings.Replace(string(good), `"start":"2026-03-02T00:00:00Z"`, `"start":"0001-01-01T00:00:00Z"`, 1),
		"segment mismatch": strings.Replace(string(good), `"segments":[{"from":"2026-03-02T00:00:00Z"`, `"segments":[{"from":"2026-03-02T00:00:01Z"`, 1),
		"bad price":        strings.Replace(string(good), `"perHour":0.316025`, `"perHour":-1`, 1),
		"no segments":      strings.Replace(string(good), `"segments":[`, `"segments":[],"x":[`, 1),
		"empty":            "",
	}
	for name, in := range cases {
		if in == string(good) {
			t.Fatalf("%s: the mutation did not apply", name)
		}
		err := l.Restore([]byte(in))
		var se *SnapshotError
		if err == nil || !errorsAs(err, &se) {
			t.Errorf("%s: err = %v, want a SnapshotError", name, err)
		}
	}
	if err := l.Restore([]byte(cases["version"])); err == nil || !strings.Contains(err.Error(), "version 2") {
		t.Errorf("version error = %v", err)
	}
	// The failed restores left the ledger as it was.
	if n := len(l.Lifetimes("")); n != 1 {
		t.Errorf("%d lifetimes after failed restores", n)
	}
}

// A 30-day month of 1000 lifetimes compacts into a snapshot well under the
// 1 MiB a ConfigMap holds, and compaction does not change any whole-hour
// total.
func TestCompactionBoundsSnapshot(t *testing.T) {
	start := time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(start)
	l := NewLedger(Options{Clock: clk})
	res := &Resolver{Catalog: market.DefaultCatalog()}
	zones := []string{"us-east-1a", "us-east-1b"}
	for i := 0; i < 1000; i++ {
		info := InstanceInfo{ID: fmt.Sprintf("i-%04d", i), Pool: "chat", Provider: "aws", Region: "us-east-1",
			Zone: zones[i%2], InstanceType: "g5.xlarge", Market: market.Spot, Models: []string{"llama", "qwen"}}
		if i%5 == 0 {
			info.Market = market.OnDemand
		}
		begin := start.Add(time.Duration(i) * 43 * time.Minute)
		eff, list, err := res.Prices(info.Query(), begin)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Start(info, begin, eff, list); err != nil {
			t.Fatal(err)
		}
		m := l.Meter(info.ID)
		for k := 0; k < 10; k++ { // ten busy stretches and answers per lifetime
			b := begin.Add(time.Duration(k)*time.Hour + 7*time.Minute)
			m.BusyStart(b)
			m.BusyEnd(b.Add(20 * time.Minute))
			m.AddTokens([]string{"llama", "qwen"}[k%2], 1000, 2000, b.Add(time.Minute))
		}
		if err := l.End(info.ID, begin.Add(10*time.Hour+13*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	month := MonthWindow(start)
	clk.SetTime(month.To.Add(-time.Hour))
	before := l.Report("chat", month)
	hourly := l.Report("chat", HourWindow(start.Add(100*time.Hour)))
	l.Compact()
	if n := len(l.Lifetimes("")); n >= 1000 {
		t.Fatalf("%d lifetimes after compaction", n)
	}
	sameReports(t, "month after compaction", before, l.Report("chat", month))
	sameReports(t, "hour after compaction", hourly, l.Report("chat", HourWindow(start.Add(100*time.Hour))))
	snap, err := l.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if len(snap) > 512<<10 {
		t.Errorf("snapshot of a compacted month is %d bytes, want < 512 KiB", len(snap))
	}
	t.Logf("snapshot of 1000 lifetimes in a month: %d bytes", len(snap))
	// Replays of compacted instances are ignored.
	eff, list, _ := res.Prices(Query{Provider: "aws", Region: "us-east-1", InstanceType: "g5.xlarge", Market: market.Spot}, start)
	if err := l.Start(InstanceInfo{ID: "i-0001", Pool: "chat"}, start, eff, list); err != nil {
		t.Fatal(err)
	}
	if err := l.End("i-0001", start); err != nil {
		t.Errorf("ending a compacted instance: %v", err)
	}
	sameReports(t, "month after replays", before, l.Report("chat", month))
	// Restoring the compacted snapshot gives the same month.
	r := NewLedger(Options{Clock: clk})
	if err := r.Restore(snap); err != nil {
		t.Fatal(err)
	}
	sameReports(t, "restored month", before, r.Report("chat", month))
	// Much later, hours beyond the aggregate retention fold into all-time
	// totals: the counters do not go down.
	clk.SetTime(start.Add(32 * 24 * time.Hour)) // every lifetime has ended
	allBefore := l.allTime(clk.Now())
	clk.SetTime(start.Add(200 * 24 * time.Hour))
	l.Compact()
	allAfter := l.allTime(clk.Now())
	if len(allAfter) != 1 || allAfter[0].EffectiveCost.v != allBefore[0].EffectiveCost.v || len(l.aggs) != 0 {
		t.Errorf("all-time spend %v -> %v (aggregates left %d)", allBefore[0].EffectiveCost, allAfter[0].EffectiveCost, len(l.aggs))
	}
}
