package cost

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"time"
)

// BudgetAction is what a pool does once its budget is spent.
type BudgetAction string

// Budget actions.
const (
	// BudgetAlert only reports (status, metric, event).
	BudgetAlert BudgetAction = "Alert"
	// BudgetCapAtMinimum holds the pool at its minimum until the next
	// period begins.
	BudgetCapAtMinimum BudgetAction = "CapAtMinimum"
)

// Budget is a monthly spending limit of a pool. The period is the calendar
// month in UTC: from 00:00 UTC on the 1st to 00:00 UTC on the 1st of the
// next month.
type Budget struct {
	// MonthlyAmount is a plain decimal such as "2500" or "1234.56".
	MonthlyAmount string `json:"monthlyAmount"`
	// Currency of the amount; only spend in this currency counts.
	Currency string `json:"currency"`
	// Action is what to do once the amount is spent.
	Action BudgetAction `json:"action"`
}

// Validate checks the budget and returns its amount in nano-units.
func (b Budget) Validate() (int64, error) {
	n, err := ParseAmount(b.MonthlyAmount)
	if err != nil {
		return 0, fmt.Errorf("budget monthlyAmount: %w", err)
	}
	if !validCurrency(b.Currency) {
		return 0, fmt.Errorf("budget currency %q: want a code such as USD", b.Currency)
	}
	switch b.Action {
	case BudgetAlert, BudgetCapAtMinimum:
	default:
		return 0, fmt.Errorf("budget action %q: want Alert or CapAtMinimum", b.Action)
	}
	return n, nil
}

// BudgetDecision is what the engine should do about a budget now.
type BudgetDecision string

// Budget decisions.
const (
	// DecisionNone: within budget.
	DecisionNone BudgetDecision = "None"
	// DecisionAlert: over budget, report it.
	DecisionAlert BudgetDecision = "Alert"
	// DecisionHoldAtMinimum: over budget, keep the pool at its minimum
	// until HoldUntil (the next period).
	DecisionHoldAtMinimum BudgetDecision = "HoldAtMinimum"
)

// BudgetStatus is the state of a pool's budget at a moment.
type BudgetStatus struct {
	// Pool evaluated, in Period (the calendar month in UTC holding now),
	// against Limit (the budget's amount).
	Pool   string `json:"pool"`
	Period Window `json:"period"`
	Limit  Money  `json:"limit"`
	// Spent is the effective cost in the budget's currency from the start
	// of the period to now.
	Spent Money `json:"spent"`
	// RunRatePerHour is the pool's run rate now.
	RunRatePerHour Money `json:"runRatePerHour"`
	// Forecast is Spent + RunRatePerHour x the hours left in the period.
	Forecast Money `json:"forecast"`
	// Exceeded is Spent >= Limit; CrossedAt is when spend reached the limit.
	Exceeded  bool       `json:"exceeded"`
	CrossedAt *time.Time `json:"crossedAt,omitempty"`
	// ForecastExceeded is Forecast >= Limit: it will be exceeded at the
	// current rate.
	ForecastExceeded bool `json:"forecastExceeded"`
	// Action is the budget's.
	Action BudgetAction `json:"action"`
	// Decision is what to do now; HoldUntil is set with
	// DecisionHoldAtMinimum.
	Decision  BudgetDecision `json:"decision"`
	HoldUntil *time.Time     `json:"holdUntil,omitempty"`
	// OtherCurrencies lists currencies the pool also spent in this period,
	// which the budget does not count.
	OtherCurrencies []string `json:"otherCurrencies,omitempty"`
}

// EvaluateBudget returns the status of pool's budget at now. It is pure
// over the ledger's recorded state; the lead wires the decision (for
// DecisionHoldAtMinimum: hold the pool's desired size at its minimum until
// HoldUntil).
func EvaluateBudget(l *Ledger, pool string, b Budget, now time.Time) (BudgetStatus, error) {
	limit, err := b.Validate()
	if err != nil {
		return BudgetStatus{}, err
	}
	if l == nil {
		return BudgetStatus{}, errors.New("budget: no ledger")
	}
	period := MonthWindow(now)
	st := BudgetStatus{Pool: pool, Period: period, Limit: moneyFromNanos(b.Currency, limit), Action: b.Action,
		Decision: DecisionNone, Spent: Money{Currency: b.Currency}, RunRatePerHour: Money{Currency: b.Currency}}
	for _, r := range l.reportAt(pool, Window{period.From, now}, now) {
		if r.Currency == b.Currency {
			st.Spent = r.EffectiveCost
		} else if !r.EffectiveCost.IsZero() {
			st.OtherCurrencies = append(st.OtherCurrencies, r.Currency)
		}
	}
	for _, rr := range l.RunRate(pool, now) {
		if rr.Currency == b.Currency {
			st.RunRatePerHour = rr
		}
	}
	left := period.To.Sub(now)
	if left < 0 {
		left = 0
	}
	st.Forecast = Money{b.Currency, st.Spent.v.add(mulAcc(st.RunRatePerHour.Nanos(), int64(left)))}
	limitAcc := st.Limit.v
	st.Exceeded = !st.Spent.v.sub(limitAcc).neg()
	st.ForecastExceeded = !st.Forecast.v.sub(limitAcc).neg()
	if st.Exceeded {
		if t, ok := l.crossing(pool, b.Currency, period.From, now, limitAcc); ok {
			st.CrossedAt = &t
		}
		switch b.Action {
		case BudgetCapAtMinimum:
			st.Decision = DecisionHoldAtMinimum
			until := period.To
			st.HoldUntil = &until
		default:
			st.Decision = DecisionAlert
		}
	}
	return st, nil
}

// reportAt is Report with an explicit now.
func (l *Ledger) reportAt(pool string, w Window, now time.Time) []PoolReport {
	from, to := w.ns()
	n := now.UnixNano()
	ts := tallies{}
	l.mu.RLock()
	for _, lt := range l.inst {
		if pool == "" || lt.info.Pool == pool {
			lt.tallyLifetime(ts, from, to, n)
		}
	}
	l.tallyAggregates(ts, pool, from, to)
	l.tallyZero(ts, pool, from, to, n)
	l.mu.RUnlock()
	return ts.reports(w)
}

// crossing returns when the pool's spend in currency since from first
// reached limit (acc units), sweeping the spend rate over time: exact
// within recorded lifetimes, spread evenly over the hour for compacted
// hours.
func (l *Ledger) crossing(pool, currency string, from, to time.Time, limit acc) (time.Time, bool) {
	type ev struct {
		t    int64
		rate float64 // acc units per ns, change at t
	}
	f, e := from.UnixNano(), to.UnixNano()
	var evs []ev
	addSpan := func(a, b int64, rate float64) {
		a, b = max(a, f), min(b, e)
		if b > a && rate != 0 {
			evs = append(evs, ev{a, rate}, ev{b, -rate})
		}
	}
	l.mu.RLock()
	for _, lt := range l.inst {
		if lt.info.Pool != pool {
			continue
		}
		end := lt.endOr(e)
		for k, s := range lt.segs {
			if s.eff.Currency != currency {
				continue
			}
			sb := end
			if k+1 < len(lt.segs) {
				sb = min(lt.segs[k+1].from, end)
			}
			addSpan(max(s.from, lt.start), sb, float64(s.effN)) // effN acc units per ns
		}
	}
	for k, hours := range l.aggs {
		if k.Pool != pool || k.Currency != currency {
			continue
		}
		for h, v := range hours {
			eff, _, _ := v.costs(k)
			addSpan(h*nsPerHour, (h+1)*nsPerHour, eff.float()/float64(nsPerHour))
		}
	}
	l.mu.RUnlock()
	sort.Slice(evs, func(i, j int) bool { return evs[i].t < evs[j].t })
	target := limit.float()
	var spent, rate float64
	last := f
	for _, x := range evs {
		if x.t > last && rate > 0 {
			next := spent + rate*float64(x.t-last)
			if next >= target {
				dt := math.Round((target - spent) / rate)
				return time.Unix(0, last+int64(dt)).UTC(), true
			}
			spent = next
		}
		last = max(last, x.t)
		rate += x.rate
	}
	if rate > 0 && last < e {
		if next := spent + rate*float64(e-last); next >= target {
			dt := math.Round((target - spent) / rate)
			return time.Unix(0, last+int64(dt)).UTC(), true
		}
	}
	if target <= 0 {
		return from.UTC(), true
	}
	return time.Time{}, false
}
