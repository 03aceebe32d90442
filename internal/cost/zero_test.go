package cost

import (
	"math"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/tidegpu/tidegpu/internal/market"
)

// A pool that scales to zero: the hours without an instance count as
// zero hours, priced at its last instance, and survive a snapshot.
func TestZeroHours(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	l := NewLedger(Options{Clock: clk})
	price := market.Price{PerHour: 2, Currency: "USD", Source: market.PriceLive, Market: market.OnDemand}
	prices := func(InstanceInfo) (market.Price, market.Price, error) { return price, price, nil }
	sync := func(at time.Duration, live ...InstanceInfo) {
		t.Helper()
		clk.SetTime(t0.Add(at))
		if err := l.SyncPool("chat", live, clk.Now(), prices); err != nil {
			t.Fatal(err)
		}
	}
	// Never ran: no stretch at zero.
	sync(0)
	if r := l.Report("chat", Window{t0, t0.Add(time.Hour)}); len(r) != 0 {
		t.Fatalf("a pool that never ran reports %+v", r)
	}
	a := p3("a")
	a.LaunchedAt = t0
	sync(0, a)
	sync(time.Hour)        // a gone: at zero from 1 h
	sync(90 * time.Minute) // still at zero
	b := p3("b")
	b.LaunchedAt = t0.Add(3 * time.Hour)
	sync(3*time.Hour, b) // back: 2 h at zero
	sync(4 * time.Hour)  // at zero again, open
	clk.SetTime(t0.Add(5 * time.Hour))
	check := func(l *Ledger, what string) {
		t.Helper()
		r := l.Report("chat", Window{t0, t0.Add(6 * time.Hour)})
		if len(r) != 1 {
			t.Fatalf("%s: %d reports", what, len(r))
		}
		if math.Abs(r[0].ZeroHours-3) > 1e-9 || math.Abs(r[0].ZeroSavings.Float()-6) > 1e-9 || math.Abs(r[0].InstanceHours-2) > 1e-9 {
			t.Fatalf("%s: zero hours %v saving %v, instance hours %v; want 3 h at zero saving $6 beside 2 instance hours",
				what, r[0].ZeroHours, r[0].ZeroSavings, r[0].InstanceHours)
		}
		// A window that cuts the stretches.
		r = l.Report("chat", Window{t0.Add(2 * time.Hour), t0.Add(4*time.Hour + 30*time.Minute)})
		if math.Abs(r[0].ZeroHours-1.5) > 1e-9 {
			t.Fatalf("%s: %v zero hours in the cut window, want 1.5", what, r[0].ZeroHours)
		}
	}
	check(l, "live")
	snap, err := l.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	restored := NewLedger(Options{Clock: clk})
	if err := restored.Restore(snap); err != nil {
		t.Fatal(err)
	}
	check(restored, "restored")
}
