package cost

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/tidegpu/tidegpu/internal/market"
)

// FuzzRestore feeds outside input (a state file, a ConfigMap) to Restore: it
// must never panic, and a snapshot it accepts must survive reports, FOCUS
// rows, budgets and a snapshot/restore round trip.
func FuzzRestore(f *testing.F) {
	clk := clocktesting.NewFakeClock(t0)
	l := NewLedger(Options{Clock: clk, DetailRetention: time.Hour})
	for _, e := range scenarioForFuzz() {
		clk.SetTime(e.at)
		e.do(l)
	}
	clk.SetTime(t0.Add(90 * time.Minute))
	live, err := l.Snapshot()
	if err != nil {
		f.Fatal(err)
	}
	clk.SetTime(t0.Add(5 * time.Hour))
	compacted, err := l.Snapshot()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(live)
	f.Add(compacted)
	f.Add([]byte(`{"version":1,"takenAt":"2026-03-02T00:00:00Z"}`))
	f.Add([]byte(`{"version":1,"takenAt":"2026-03-02T00:00:00Z","aggregates":[{"key":{"pool":"p","provider":"aws","currency":"USD","source":"live","effNanosPerHour":1,"listNanosPerHour":1},"hours":[493896],"instNs":[1],"busyNs":[1]}]}`))
	f.Add([]byte(`{"version":1,"takenAt":"2026-03-02T00:00:00Z","alerts":[{"key":"tenant/a/2026-03/50","at":"2026-03-01T10:00:00Z"},{"key":"tenant/b/2025-12/100","at":"2025-12-01T10:00:00Z"}]}`))
	f.Add([]byte(`{"version":0}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		clk := clocktesting.NewFakeClock(t0.Add(2 * time.Hour))
		l := NewLedger(Options{Clock: clk})
		if err := l.Restore(data); err != nil {
			return
		}
		w := MonthWindow(t0)
		_ = l.Report("", w)
		_ = l.Report("", Window{t0.Add(17 * time.Minute), t0.Add(77 * time.Minute)})
		_ = l.FOCUSRows(w)
		for _, p := range l.Pools() {
			if _, err := EvaluateBudget(l, p, Budget{"1", "USD", BudgetAlert}, clk.Now()); err != nil {
				t.Fatal(err)
			}
		}
		if err := testCollect(l); err != nil {
			t.Fatalf("gathering metrics of an accepted state: %v", err)
		}
		snap, err := l.Snapshot()
		if err != nil {
			t.Fatalf("snapshot of an accepted state: %v", err)
		}
		r := NewLedger(Options{Clock: clk})
		if err := r.Restore(snap); err != nil {
			t.Fatalf("restoring our own snapshot: %v\n%s", err, snap)
		}
		again, err := r.Snapshot()
		if err != nil || !bytes.Equal(snap, again) {
			t.Fatalf("snapshot round trip differs: %v\n%s\n%s", err, snap, again)
		}
	})
}

// FuzzParseAmount feeds budget amounts (from a TidePool spec) to
// ParseAmount: accepted amounts print back to the same value.
func FuzzParseAmount(f *testing.F) {
	for _, s := range []string{"2500", "1234.56", "0.000000001", "9223372036.854775807", "1e3", "-1", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseAmount(s)
		if err != nil {
			return
		}
		back, err := ParseAmount(strings.TrimSuffix(moneyFromNanos("USD", n).String(), " USD"))
		if err != nil || back != n {
			t.Fatalf("%q -> %d -> %d, %v", s, n, back, err)
		}
	})
}

type fuzzEvent struct {
	at time.Time
	do func(l *Ledger)
}

// scenarioForFuzz is a small history without *testing.T, for seeds.
func scenarioForFuzz() []fuzzEvent {
	i1, i2 := p3("i1", "llama"), p3("i2", "qwen")
	eff, list, _ := (&Resolver{Catalog: market.DefaultCatalog()}).Prices(i1.Query(), t0)
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	return []fuzzEvent{
		{at(0), func(l *Ledger) { _ = l.Start(i1, at(0), eff, list); _ = l.Start(i2, at(0), eff, list) }},
		{at(10), func(l *Ledger) { l.BusyStart("i1", at(10)) }},
		{at(20), func(l *Ledger) { l.AddTokens("i1", "llama", 10, 30, at(20)) }},
		{at(25), func(l *Ledger) { l.Meter("i2").ObserveBusyTotal(3*time.Minute, at(25)) }},
		{at(26), func(l *Ledger) { l.Meter("i2").ObserveTokenTotals("qwen", 5, 7, at(26)) }},
		{at(30), func(l *Ledger) {
			_ = l.SetPrice("i2", at(30), market.Price{PerHour: 0.5, Currency: "USD", Source: "live"}, list)
		}},
		{at(60), func(l *Ledger) { _ = l.End("i2", at(60)) }},
	}
}

func testCollect(l *Ledger) error {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector(l, CollectorOptions{Budgets: func() map[string]Budget {
		return map[string]Budget{"chat": {"1", "USD", BudgetCapAtMinimum}}
	}}))
	_, err := reg.Gather()
	return err
}
