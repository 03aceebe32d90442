package cost

import (
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/tidegpu/tidegpu/internal/market"
)

// Two instances at an override of 1.50 USD/h from 00:00 UTC on March 1:
// 3 USD/h together, so a 30 USD budget is crossed at exactly 10:00.
func budgetLedger(t *testing.T) (*Ledger, *clocktesting.FakeClock) {
	t.Helper()
	month := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(month)
	l := NewLedger(Options{Clock: clk})
	price := market.Price{PerHour: 1.5, Currency: "USD", Source: market.PriceOverride, Market: market.OnDemand}
	for _, id := range []string{"a", "b"} {
		info := InstanceInfo{ID: id, Pool: "chat", Provider: "aws", Region: "us-east-1", InstanceType: "g5.xlarge", Market: market.OnDemand}
		if err := l.Start(info, month, price, price); err != nil {
			t.Fatal(err)
		}
	}
	// Spend of last month does not count.
	old := InstanceInfo{ID: "feb", Pool: "chat", Provider: "aws", Region: "us-east-1", InstanceType: "g5.xlarge"}
	if err := l.Start(old, month.Add(-48*time.Hour), price, price); err != nil {
		t.Fatal(err)
	}
	if err := l.End("feb", month); err != nil {
		t.Fatal(err)
	}
	return l, clk
}

func TestEvaluateBudget(t *testing.T) {
	month := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	next := month.AddDate(0, 1, 0)
	cases := []struct {
		name             string
		budget           Budget
		now              time.Time
		spent            int64 // nanos
		exceeded         bool
		crossedAt        time.Time
		forecastExceeded bool
		decision         BudgetDecision
	}{
		{name: "under budget, forecast over", budget: Budget{"30", "USD", BudgetCapAtMinimum}, now: month.Add(9 * time.Hour),
			spent: 27e9, forecastExceeded: true, decision: DecisionNone},
		{name: "crossed: hold at minimum", budget: Budget{"30", "USD", BudgetCapAtMinimum}, now: month.Add(12 * time.Hour),
			spent: 36e9, exceeded: true, crossedAt: month.Add(10 * time.Hour), forecastExceeded: true, decision: DecisionHoldAtMinimum},
		{name: "crossed: alert", budget: Budget{"30", "USD", BudgetAlert}, now: month.Add(12 * time.Hour),
			spent: 36e9, exceeded: true, crossedAt: month.Add(10 * time.Hour), forecastExceeded: true, decision: DecisionAlert},
		{name: "crossed at an odd time", budget: Budget{"30.000000001", "USD", BudgetAlert}, now: month.Add(12 * time.Hour),
			spent: 36e9, exceeded: true, crossedAt: month.Add(10*time.Hour + 1200*time.Nanosecond), forecastExceeded: true, decision: DecisionAlert},
		{name: "exactly at the limit", budget: Budget{"30", "USD", BudgetAlert}, now: month.Add(10 * time.Hour),
			spent: 30e9, exceeded: true, crossedAt: month.Add(10 * time.Hour), forecastExceeded: true, decision: DecisionAlert},
		{name: "large budget", budget: Budget{"100000", "USD", BudgetCapAtMinimum}, now: month.Add(12 * time.Hour),
			spent: 36e9, decision: DecisionNone},
		{name: "budget in another currency", budget: Budget{"1", "CNY", BudgetCapAtMinimum}, now: month.Add(12 * time.Hour),
			spent: 0, decision: DecisionNone},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l, clk := budgetLedger(t)
			clk.SetTime(tc.now)
			st, err := EvaluateBudget(l, "chat", tc.budget, tc.now)
			if err != nil {
				t.Fatal(err)
			}
			if st.Spent.Nanos() != tc.spent || st.Exceeded != tc.exceeded || st.ForecastExceeded != tc.forecastExceeded || st.Decision != tc.decision {
				t.Errorf("status = spent %s exceeded %v forecast %s (%v) decision %s; want spent %d exceeded %v forecastExceeded %v decision %s",
					st.Spent, st.Exceeded, st.Forecast, st.ForecastExceeded, st.Decision, tc.spent, tc.exceeded, tc.forecastExceeded, tc.decision)
			}
			if tc.exceeded {
				if st.CrossedAt == nil || !st.CrossedAt.Equal(tc.crossedAt) {
					t.Errorf("crossed at %v, want %v", st.CrossedAt, tc.crossedAt)
				}
			} else if st.CrossedAt != nil {
				t.Errorf("crossed at %v, want not crossed", st.CrossedAt)
			}
			if tc.decision == DecisionHoldAtMinimum {
				if st.HoldUntil == nil || !st.HoldUntil.Equal(next) {
					t.Errorf("hold until %v, want %v (the next period)", st.HoldUntil, next)
				}
			} else if st.HoldUntil != nil {
				t.Errorf("hold until %v without a hold", st.HoldUntil)
			}
			if !st.Period.From.Equal(month) || !st.Period.To.Equal(next) {
				t.Errorf("period %v, want the calendar month in UTC", st.Period)
			}
			if tc.budget.Currency == "USD" {
				// Forecast = spent + 3 USD/h x hours left in the month.
				want := float64(tc.spent)/1e9 + 3*next.Sub(tc.now).Hours()
				relClose(t, "forecast", st.Forecast.Float(), want, 1e-12)
				relClose(t, "run rate", st.RunRatePerHour.Float(), 3, 0)
			} else if len(st.OtherCurrencies) != 1 || st.OtherCurrencies[0] != "USD" {
				t.Errorf("other currencies %v, want [USD]", st.OtherCurrencies)
			}
		})
	}
}

// The crossing time stays exact across a price change and after the hours
// before it are compacted (spread evenly within each compacted hour).
func TestBudgetCrossingAcrossSegmentsAndCompaction(t *testing.T) {
	month := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(month)
	l := NewLedger(Options{Clock: clk, DetailRetention: time.Hour})
	p := func(v float64) market.Price {
		return market.Price{PerHour: v, Currency: "USD", Source: market.PriceLive, Market: market.Spot}
	}
	info := InstanceInfo{ID: "x", Pool: "chat", Provider: "aws", Region: "us-east-1", InstanceType: "g5.xlarge", Market: market.Spot}
	if err := l.Start(info, month, p(2), p(4)); err != nil {
		t.Fatal(err)
	}
	if err := l.SetPrice("x", month.Add(2*time.Hour), p(1), p(4)); err != nil {
		t.Fatal(err)
	}
	// 2/h for 2 h = 4, then 1/h: a budget of 5.5 is reached at 3:30.
	now := month.Add(5 * time.Hour)
	st, err := EvaluateBudget(l, "chat", Budget{"5.5", "USD", BudgetAlert}, now)
	if err != nil {
		t.Fatal(err)
	}
	if st.CrossedAt == nil || !st.CrossedAt.Equal(month.Add(3*time.Hour+30*time.Minute)) {
		t.Errorf("crossed at %v, want 03:30", st.CrossedAt)
	}
	// End it at 4:00 and compact: the hour 3 aggregate spreads 1 USD over
	// the hour, so the crossing stays at 3:30.
	if err := l.End("x", month.Add(4*time.Hour)); err != nil {
		t.Fatal(err)
	}
	clk.SetTime(month.Add(6 * time.Hour))
	l.Compact()
	if n := len(l.Lifetimes("")); n != 0 {
		t.Fatalf("%d lifetimes left after compaction", n)
	}
	st, err = EvaluateBudget(l, "chat", Budget{"5.5", "USD", BudgetAlert}, month.Add(6*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if st.CrossedAt == nil || !st.CrossedAt.Equal(month.Add(3*time.Hour+30*time.Minute)) || st.Spent.Nanos() != 6e9 {
		t.Errorf("after compaction: crossed at %v, spent %s", st.CrossedAt, st.Spent)
	}
}

func TestBudgetValidate(t *testing.T) {
	l := NewLedger(Options{})
	for _, tc := range []struct {
		b    Budget
		want string
	}{
		{Budget{"abc", "USD", BudgetAlert}, "monthlyAmount"},
		{Budget{"10", "usd", BudgetAlert}, "currency"},
		{Budget{"10", "USD", "Stop"}, "action"},
	} {
		if _, err := EvaluateBudget(l, "p", tc.b, t0); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err = %v, want %q", tc.b, err, tc.want)
		}
	}
	if _, err := EvaluateBudget(nil, "p", Budget{"1", "USD", BudgetAlert}, t0); err == nil {
		t.Error("nil ledger accepted")
	}
}
