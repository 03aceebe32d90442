package cost

import (
	"fmt"
	"math/rand"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/tidegpu/tidegpu/internal/market"
)

// Reports (computed per segment and bucket) and FOCUS rows (computed hour
// by hour) must agree for any history and window, and the model split must
// cover all the cost: allocation sums to spend, usage to busy cost.
func TestReportAgreesWithFOCUSRows(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	for round := 0; round < 40; round++ {
		start := t0.Add(time.Duration(rng.Intn(3600)) * time.Second)
		clk := clocktesting.NewFakeClock(start)
		l := NewLedger(Options{Clock: clk})
		now := start.Add(time.Duration(2+rng.Intn(30)) * time.Hour)
		for i := 0; i < 1+rng.Intn(4); i++ {
			info := InstanceInfo{ID: fmt.Sprintf("i%d", i), Pool: []string{"a", "b"}[rng.Intn(2)], Provider: "aws", Region: "us-east-1",
				Zone: "us-east-1a", InstanceType: "g5.xlarge", Market: market.Spot}
			if rng.Intn(2) == 0 {
				info.Models = []string{"m1", "m2"}[:1+rng.Intn(2)]
			}
			price := func() market.Price {
				return market.Price{PerHour: float64(1+rng.Intn(5000)) / 1000, Currency: "USD", Source: market.PriceLive, Market: market.Spot}
			}
			begin := start.Add(time.Duration(rng.Int63n(int64(2 * time.Hour))))
			list := market.Price{PerHour: 9, Currency: "USD", Source: market.PriceCatalog, Market: market.OnDemand}
			if err := l.Start(info, begin, price(), list); err != nil {
				t.Fatal(err)
			}
			m := l.Meter(info.ID)
			at := begin
			for at.Before(now) {
				at = at.Add(time.Duration(rng.Int63n(int64(90 * time.Minute))))
				switch rng.Intn(5) {
				case 0:
					_ = l.SetPrice(info.ID, at, price(), list)
				case 1, 2:
					m.BusyStart(at)
					if rng.Intn(4) > 0 {
						m.BusyEnd(at.Add(time.Duration(rng.Int63n(int64(2 * time.Hour)))))
					}
				case 3:
					m.AddTokens([]string{"m1", "m2", "m3"}[rng.Intn(3)], rng.Int63n(5000), rng.Int63n(5000), at)
				}
			}
			if rng.Intn(2) == 0 {
				_ = l.End(info.ID, begin.Add(time.Duration(rng.Int63n(int64(now.Sub(begin))))))
			}
		}
		clk.SetTime(now)
		windows := []Window{{start.Add(-time.Hour), now.Add(time.Hour)}, HourWindow(start.Add(90 * time.Minute)),
			{start.Add(17 * time.Minute), now.Add(-23 * time.Minute)}, {time.Time{}, now}}
		for _, w := range windows {
			rows := l.FOCUSRows(w)
			for _, r := range l.Report("", w) {
				var eff, list, idle acc
				var hours, busy float64
				for _, row := range rows {
					if row.PoolName == r.Pool && row.BillingCurrency == r.Currency {
						eff, list, idle = eff.add(row.EffectiveCost.v), list.add(row.ListCost.v), idle.add(row.IdleCost.v)
						hours += row.ConsumedQuantity
						busy += row.BusyQuantity
					}
				}
				what := fmt.Sprintf("round %d pool %s window %v", round, r.Pool, w)
				if eff != r.EffectiveCost.v || list != r.ListCost.v {
					t.Errorf("%s: FOCUS %v/%v, report %s/%s", what, Money{"USD", eff}, Money{"USD", list}, r.EffectiveCost, r.ListCost)
				}
				relClose(t, what+" idle", Money{"USD", idle}.Float(), r.IdleCost.Float(), 1e-9)
				relClose(t, what+" hours", hours, r.InstanceHours, 1e-12)
				relClose(t, what+" busy", busy, r.BusyHours, 1e-9)
				var alloc, usage float64
				for _, m := range r.Models {
					alloc += m.AllocationCost.Float()
					usage += m.UsageCost.Float()
				}
				relClose(t, what+" allocation covers spend", alloc, r.EffectiveCost.Float(), 1e-9)
				relClose(t, what+" usage covers busy cost", usage, r.BusyCost.Float(), 1e-9)
			}
		}
	}
}
