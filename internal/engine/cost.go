package engine

import (
	"fmt"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/cost"
	"github.com/tidegpu/tidegpu/internal/events"
	"github.com/tidegpu/tidegpu/internal/market"
	"github.com/tidegpu/tidegpu/internal/provider"
)

// Costing connects the engine to the cost ledger: every round records the
// pool's live instances and their prices, and evaluates the pool's budget.
type Costing struct {
	Ledger *cost.Ledger
	// Catalog and Live feed the price resolver; Catalog defaults to
	// market.DefaultCatalog().
	Catalog *market.Catalog
	Live    *cost.LivePrices
	// BudgetEvery paces budget evaluation; default 2 s.
	BudgetEvery time.Duration
}

// Overrides turns a pool's spec.pricing into resolver overrides.
func Overrides(pool string, spec *tidev1.TidePoolSpec) ([]cost.Override, error) {
	pr := spec.Pricing
	if pr == nil {
		return nil, nil
	}
	cur := pr.Currency
	if cur == "" {
		cur = "USD"
	}
	var out []cost.Override
	for _, e := range []struct {
		field, v string
		market   provider.Market
	}{{"spec.pricing.spotPerHour", pr.SpotPerHour, provider.MarketSpot}, {"spec.pricing.onDemandPerHour", pr.OnDemandPerHour, provider.MarketOnDemand}} {
		if e.v == "" {
			continue
		}
		f, err := strconv.ParseFloat(e.v, 64)
		if err != nil || f < 0 {
			return nil, fmt.Errorf("%s: %q is not a price: use a decimal such as 3.06", e.field, e.v)
		}
		out = append(out, cost.Override{Pool: pool, Market: e.market, PerHour: f, Currency: cur})
	}
	// With only a spot price given, the on-demand price is unknown: take
	// the spot price as the list price, so savings read 0 rather than
	// a made-up difference.
	if pr.OnDemandPerHour == "" && len(out) == 1 {
		out = append(out, cost.Override{Pool: pool, Market: provider.MarketOnDemand, PerHour: out[0].PerHour, Currency: cur})
	}
	return out, nil
}

// DefaultStandbyPerHour prices a stopped standby instance when the pool's
// spec.pricing.standbyPerHour is unset: its disk, taken as a 100 GB EBS gp3
// volume at 0.08 USD per GB-month (https://aws.amazon.com/ebs/pricing/,
// us-east-1), 730 hours a month.
const DefaultStandbyPerHour = 100 * 0.08 / 730

// StandbyPrice is what a stopped instance of the pool costs per hour, and
// where the figure comes from.
func StandbyPrice(spec *tidev1.TidePoolSpec) (market.Price, error) {
	p := market.Price{PerHour: DefaultStandbyPerHour, Currency: "USD", Source: provider.PriceCatalog,
		AsOf: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)}
	if pr := spec.Pricing; pr != nil && pr.StandbyPerHour != "" {
		f, err := strconv.ParseFloat(pr.StandbyPerHour, 64)
		if err != nil || f < 0 {
			return p, fmt.Errorf("spec.pricing.standbyPerHour: %q is not a price: use a decimal such as 0.0111", pr.StandbyPerHour)
		}
		p = market.Price{PerHour: f, Currency: "USD", Source: provider.PriceOverride}
		if pr.Currency != "" {
			p.Currency = pr.Currency
		}
	}
	return p, nil
}

// costInfo describes an instance for the ledger. The spot-market simulator
// replays AWS capacity traces, so its instances are priced as AWS's in the
// region their zone belongs to.
func costInfo(in provider.Instance, providerName string, spec *tidev1.TidePoolSpec) cost.InstanceInfo {
	region := spec.Region
	if providerName == tidev1.ProviderSim {
		providerName = tidev1.ProviderAWS
		if in.Zone != "" {
			region = market.RegionOf(in.Zone)
		}
	}
	return cost.InstanceInfo{ID: in.ID, Pool: in.Pool, Provider: providerName, Region: region, Zone: in.Zone,
		InstanceType: in.InstanceType, Market: in.Market, Models: append([]string(nil), spec.Serving.Models...),
		LaunchedAt: in.LaunchedAt}
}

// BudgetFor turns spec.budget into the cost package's budget.
func BudgetFor(spec *tidev1.TidePoolSpec) (cost.Budget, bool) {
	b := spec.Budget
	if b == nil {
		return cost.Budget{}, false
	}
	cur, action := b.Currency, b.Action
	if cur == "" {
		cur = "USD"
	}
	if action == "" {
		action = tidev1.BudgetAlert
	}
	return cost.Budget{MonthlyAmount: b.Monthly, Currency: cur, Action: cost.BudgetAction(action)}, true
}

// recordCost feeds the ledger with the round's instances and evaluates the
// budget. It returns the time until which the pool must be held at its
// minimum (zero for none).
func (p *Pool) recordCost(spec *tidev1.TidePoolSpec, insts []provider.Instance, now time.Time) time.Time {
	c := p.deps.costing
	if c == nil || c.Ledger == nil {
		return time.Time{}
	}
	p.syncLedger(c, spec, insts, now)
	return p.budgetHold(c, spec, now)
}

// syncLedger records the pool's instances and their prices in the ledger.
func (p *Pool) syncLedger(c *Costing, spec *tidev1.TidePoolSpec, insts []provider.Instance, now time.Time) {
	overrides, err := Overrides(p.name, spec)
	if err != nil {
		p.deps.logger.Warn("pricing", "pool", p.name, "err", err)
	}
	res := &cost.Resolver{Catalog: c.Catalog, Live: c.Live, Overrides: overrides}
	if res.Catalog == nil {
		res.Catalog = market.DefaultCatalog()
	}
	// Live prices come from the pool's one cache of offerings (observe
	// refreshes it), at most once a minute.
	p.mu.Lock()
	offs, offsAt := p.offers, p.offersAt
	p.mu.Unlock()
	if c.Live != nil && offs != nil && p.offeringsDue(now) {
		c.Live.Update(p.deps.provider.Name(), spec.Region, offs, offsAt)
	}
	infos := make([]cost.InstanceInfo, 0, len(insts))
	stopped := map[string]bool{}
	for _, in := range insts {
		infos = append(infos, costInfo(in, p.deps.provider.Name(), spec))
		if in.State == provider.StateStopped {
			stopped[in.ID] = true
		}
	}
	// A stopped standby instance is billed for its disk only, at the same
	// list and effective price (a stopped disk saves nothing).
	if err := c.Ledger.SyncPool(p.name, infos, now, func(i cost.InstanceInfo) (market.Price, market.Price, error) {
		if stopped[i.ID] {
			sp, err := StandbyPrice(spec)
			sp.Market = i.Market
			return sp, sp, err
		}
		return res.Prices(i.Query(), now)
	}); err != nil {
		p.noteCostError(err)
	}
}

// budgetHold evaluates the pool's budget when due (every BudgetEvery) and
// returns until when the pool is held at its minimum.
func (p *Pool) budgetHold(c *Costing, spec *tidev1.TidePoolSpec, now time.Time) time.Time {
	b, ok := BudgetFor(spec)
	if !ok {
		p.setCondition(tidev1.ConditionBudgetExceeded, metav1.ConditionFalse, "NoBudget", "the pool has no budget")
		return time.Time{}
	}
	every := c.BudgetEvery
	if every <= 0 {
		every = 2 * time.Second
	}
	p.mu.Lock()
	due := now.Sub(p.budgetAt) >= every
	hold := p.holdUntil
	p.mu.Unlock()
	if !due {
		return hold
	}
	st, err := cost.EvaluateBudget(c.Ledger, p.name, b, now)
	if err != nil {
		p.setCondition(tidev1.ConditionBudgetExceeded, metav1.ConditionUnknown, "InvalidBudget", err.Error())
		return time.Time{}
	}
	p.mu.Lock()
	p.budgetAt = now
	was := p.budgetExceeded
	p.budgetExceeded = st.Exceeded
	p.holdUntil = time.Time{}
	if st.Decision == cost.DecisionHoldAtMinimum && st.HoldUntil != nil {
		p.holdUntil = *st.HoldUntil
	}
	hold = p.holdUntil
	p.mu.Unlock()
	p.noteBudget(b, st, hold, was)
	return hold
}

// noteBudget sets the BudgetExceeded condition and metric, and records
// the event when the budget is first exceeded.
func (p *Pool) noteBudget(b cost.Budget, st cost.BudgetStatus, hold time.Time, was bool) {
	p.deps.metrics.budgetExceeded.WithLabelValues(p.name).Set(boolFloat(st.Exceeded))
	p.noteBudgetAlerts(st)
	if !st.Exceeded {
		p.setCondition(tidev1.ConditionBudgetExceeded, metav1.ConditionFalse, "WithinBudget",
			fmt.Sprintf("spent %.2f of %s %s; forecast %.2f", st.Spent.Float(), b.MonthlyAmount, b.Currency, st.Forecast.Float()))
		return
	}
	msg := fmt.Sprintf("spent %.2f %s of the %s %s monthly budget", st.Spent.Float(), st.Spent.Currency, b.MonthlyAmount, b.Currency)
	if !hold.IsZero() {
		msg += fmt.Sprintf("; holding the pool at its minimum until %s", hold.Format(time.RFC3339))
	}
	p.setCondition(tidev1.ConditionBudgetExceeded, metav1.ConditionTrue, "Exceeded", msg)
	if !was {
		p.deps.recorder.Eventf(events.TypeWarning, "BudgetExceeded", p.name, "", "%s", msg)
	}
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// offeringsDue paces live price updates to one a minute per pool.
func (p *Pool) offeringsDue(now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if now.Sub(p.livePricesAt) < time.Minute {
		return false
	}
	p.livePricesAt = now
	return true
}

func (p *Pool) noteCostError(err error) {
	p.mu.Lock()
	first := p.costErr == ""
	p.costErr = err.Error()
	p.mu.Unlock()
	if first {
		p.deps.recorder.Eventf(events.TypeWarning, "PriceUnknown", p.name, "", "cost: %v", err)
	}
}

// AlertBudget is the reason of a budget alert event (a threshold of the
// month's budget crossed, or the forecast overrun), each once per period;
// notifiers deliver them to people.
const AlertBudget = "BudgetAlert"

// noteBudgetAlerts records the budget alerts st raises that were not said
// yet this period.
func (p *Pool) noteBudgetAlerts(st cost.BudgetStatus) {
	p.mu.Lock()
	if p.alertsSent == nil {
		p.alertsSent = map[string]bool{}
	}
	alerts := cost.Alerts(st, p.alertsSent)
	for _, a := range alerts {
		p.alertsSent[a.Key] = true
	}
	p.mu.Unlock()
	for _, a := range alerts {
		p.deps.recorder.Eventf(events.TypeWarning, AlertBudget, p.name, "", "%s", a.Message)
	}
}
