package cost

import (
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	"github.com/tidegpu/tidegpu/internal/market"
)

// Metric names. node_total_hourly_cost and kubecost_node_is_spot are
// OpenCost's (https://opencost.io/docs/integrations/metrics; OpenCost labels
// them instance, node, instance_type, region, provider_id), so dashboards
// and queries written for OpenCost, such as sum(node_total_hourly_cost) *
// 730, work on TideGPU pools; we add zone, capacity_type (spot|on-demand, as
// Karpenter's karpenter.sh/capacity-type), provider and pool. Scrape with
// honor_labels: true, as OpenCost asks, so that the instance label is kept.
const (
	MetricNodeTotalHourlyCost = "node_total_hourly_cost"
	MetricNodeIsSpot          = "kubecost_node_is_spot"
	MetricSpendTotal          = "tidegpu_cost_spend_total"
	MetricSavingsTotal        = "tidegpu_cost_savings_total"
	MetricIdleTotal           = "tidegpu_cost_idle_total"
	MetricPerMillionTokens    = "tidegpu_cost_per_million_tokens"
	MetricRunRatePerHour      = "tidegpu_cost_run_rate_per_hour"
	MetricPricePerHour        = "tidegpu_price_per_hour"
	MetricBudgetExceeded      = "tidegpu_budget_exceeded"
	// The cost per tenant in the current UTC month (usage basis, see
	// tenant.go), labelled like OpenCost's allocation metrics with the
	// owner's labels: tenant and the key's team, project, env.
	MetricTenantSpend      = "tidegpu_cost_tenant_spend"
	MetricTenantTokens     = "tidegpu_cost_tenant_tokens"
	MetricTenantPerMillion = "tidegpu_cost_tenant_per_million_tokens"
)

var (
	openCostLabels = []string{"instance", "node", "instance_type", "region", "provider_id"}
	nodeCostDesc   = prometheus.NewDesc(MetricNodeTotalHourlyCost,
		"Total node cost per hour (OpenCost name): the effective price of a running instance, in its currency.",
		append(append([]string(nil), openCostLabels...), "zone", "capacity_type", "provider", "pool", "currency"), nil)
	nodeSpotDesc = prometheus.NewDesc(MetricNodeIsSpot,
		"Cloud provider info about node preemptibility (OpenCost name): 1 for spot instances.", openCostLabels, nil)
	spendDesc = prometheus.NewDesc(MetricSpendTotal,
		"Effective cost (spend) of the pool since the ledger began, in currency units.", []string{"pool", "currency"}, nil)
	savingsDesc = prometheus.NewDesc(MetricSavingsTotal,
		"On-demand equivalent minus effective cost of the pool since the ledger began, in currency units.", []string{"pool", "currency"}, nil)
	idleDesc = prometheus.NewDesc(MetricIdleTotal,
		"Cost of instance time with no request in flight since the ledger began, in currency units.", []string{"pool", "currency"}, nil)
	perMillionDesc = prometheus.NewDesc(MetricPerMillionTokens,
		"Cost per million tokens (prompt+completion) of a model in the current UTC month; cost_basis allocation = all instance cost, usage = cost of busy time.",
		[]string{"pool", "model", "cost_basis", "currency"}, nil)
	runRateDesc = prometheus.NewDesc(MetricRunRatePerHour,
		"Sum of the effective prices per hour of the pool's running instances.", []string{"pool", "currency"}, nil)
	priceDesc = prometheus.NewDesc(MetricPricePerHour,
		"Price per hour in force for a running instance, with where it came from (catalog, live, override, fallback).",
		[]string{"pool", "instance", "instance_type", "region", "zone", "capacity_type", "provider", "currency", "price_source"}, nil)
	tenantLabels    = []string{"pool", "tenant", "team", "project", "env", "currency"}
	tenantSpendDesc = prometheus.NewDesc(MetricTenantSpend,
		"Cost of the GPU time a tenant's requests used in the current UTC month (tenant \"(idle)\": time with nothing in flight).", tenantLabels, nil)
	tenantTokensDesc = prometheus.NewDesc(MetricTenantTokens,
		"Tokens (prompt+completion) of a tenant's answers in the current UTC month.", tenantLabels, nil)
	tenantPerMillionDesc = prometheus.NewDesc(MetricTenantPerMillion,
		"A tenant's cost per million tokens in the current UTC month (usage basis).", tenantLabels, nil)
	budgetDesc = prometheus.NewDesc(MetricBudgetExceeded,
		"1 when the pool's monthly budget (calendar month, UTC) is spent.", []string{"pool"}, nil)
)

// CollectorOptions configure a Collector.
type CollectorOptions struct {
	// Clock gives "now" at each scrape; default the ledger's clock.
	Clock clock.PassiveClock
	// Budgets returns the pools' budgets at scrape time; nil means none.
	Budgets func() map[string]Budget
}

// Collector is a prometheus.Collector over a Ledger.
type Collector struct {
	l       *Ledger
	clock   clock.PassiveClock
	budgets func() map[string]Budget
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns a collector over l.
func NewCollector(l *Ledger, opts CollectorOptions) *Collector {
	c := &Collector{l: l, clock: opts.Clock, budgets: opts.Budgets}
	if c.clock == nil {
		c.clock = l.clock
	}
	return c
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{nodeCostDesc, nodeSpotDesc, spendDesc, savingsDesc, idleDesc, perMillionDesc,
		runRateDesc, priceDesc, budgetDesc, tenantSpendDesc, tenantTokensDesc, tenantPerMillionDesc} {
		ch <- d
	}
}

// providerID follows the cloud provider's node providerID form, such as
// aws:///us-west-2a/i-1234567890abcdef0.
func providerID(providerName, zone, id string) string { return providerName + ":///" + zone + "/" + id }

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	now := c.clock.Now()
	for _, r := range c.l.running(now) {
		i := r.info
		pid := providerID(i.Provider, i.Zone, i.ID)
		ch <- c.metric(nodeCostDesc, prometheus.GaugeValue, r.eff.PerHour,
			i.ID, i.ID, i.InstanceType, i.Region, pid, i.Zone, string(i.Market), i.Provider, i.Pool, r.eff.Currency)
		spot := 0.0
		if i.Market == market.Spot {
			spot = 1
		}
		ch <- c.metric(nodeSpotDesc, prometheus.GaugeValue, spot, i.ID, i.ID, i.InstanceType, i.Region, pid)
		ch <- c.metric(priceDesc, prometheus.GaugeValue, r.eff.PerHour,
			i.Pool, i.ID, i.InstanceType, i.Region, i.Zone, string(i.Market), i.Provider, r.eff.Currency, r.eff.Source)
	}
	for _, r := range c.l.allTime(now) {
		ch <- c.metric(spendDesc, prometheus.CounterValue, r.EffectiveCost.Float(), r.Pool, r.Currency)
		ch <- c.metric(savingsDesc, prometheus.CounterValue, r.Savings.Float(), r.Pool, r.Currency)
		ch <- c.metric(idleDesc, prometheus.CounterValue, r.IdleCost.Float(), r.Pool, r.Currency)
	}
	month := MonthWindow(now)
	for _, r := range c.l.reportAt("", Window{month.From, now}, now) {
		ch <- c.metric(runRateDesc, prometheus.GaugeValue, r.RunRatePerHour.Float(), r.Pool, r.Currency)
		for _, m := range r.Models {
			if !m.HasTokens {
				continue
			}
			ch <- c.metric(perMillionDesc, prometheus.GaugeValue, m.PerMillionAllocation, r.Pool, m.Model, "allocation", r.Currency)
			ch <- c.metric(perMillionDesc, prometheus.GaugeValue, m.PerMillionUsage, r.Pool, m.Model, "usage", r.Currency)
		}
	}
	// Rows of one tenant with several label sets stay apart (their labels
	// differ); the same labels in two rows cannot happen (one row per key).
	for _, r := range c.l.TenantCosts(Window{month.From, now}, now) {
		lv := []string{r.Pool, r.Tenant, r.Labels["team"], r.Labels["project"], r.Labels["env"], r.Currency}
		ch <- c.metric(tenantSpendDesc, prometheus.GaugeValue, r.Cost.Float(), lv...)
		if r.Tenant == IdleGroup || r.Tenant == UnattributedGroup {
			continue
		}
		tok := r.PromptTokens + r.CompletionTokens
		ch <- c.metric(tenantTokensDesc, prometheus.GaugeValue, tok, append([]string(nil), lv...)...)
		if tok > 0 {
			ch <- c.metric(tenantPerMillionDesc, prometheus.GaugeValue, r.Cost.Float()*1e6/tok, append([]string(nil), lv...)...)
		}
	}
	if c.budgets == nil {
		return
	}
	budgets := c.budgets()
	pools := make([]string, 0, len(budgets))
	for p := range budgets {
		pools = append(pools, p)
	}
	sort.Strings(pools)
	for _, p := range pools {
		st, err := EvaluateBudget(c.l, p, budgets[p], now)
		if err != nil {
			// An invalid budget is a configuration error, reported where the
			// budget is read; it must not fail every other series here.
			continue
		}
		v := 0.0
		if st.Exceeded {
			v = 1
		}
		ch <- c.metric(budgetDesc, prometheus.GaugeValue, v, p)
	}
}

// metric builds a constant metric; label values that are not valid UTF-8
// (an odd instance ID) are repaired rather than failing the whole scrape.
func (c *Collector) metric(d *prometheus.Desc, vt prometheus.ValueType, v float64, labels ...string) prometheus.Metric {
	for i, l := range labels {
		labels[i] = strings.ToValidUTF8(l, "\uFFFD")
	}
	m, err := prometheus.NewConstMetric(d, vt, v, labels...)
	if err != nil {
		return prometheus.NewInvalidMetric(d, err)
	}
	return m
}

type runningInstance struct {
	info InstanceInfo
	eff  market.Price
}

// running returns the instances running at now with the price in force.
func (l *Ledger) running(now time.Time) []runningInstance {
	t := now.UnixNano()
	l.mu.RLock()
	var out []runningInstance
	for _, lt := range l.inst {
		if t < lt.start || (lt.end != 0 && t >= lt.end) {
			continue
		}
		out = append(out, runningInstance{info: lt.info, eff: lt.segs[lt.segAt(t)].eff})
	}
	l.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].info.ID < out[j].info.ID })
	return out
}

// allTime returns the totals of every pool since the ledger began,
// including hours folded into all-time totals.
func (l *Ledger) allTime(now time.Time) []PoolReport {
	n := now.UnixNano()
	ts := tallies{}
	l.mu.RLock()
	for _, lt := range l.inst {
		lt.tallyLifetime(ts, minTimeNs, n, n)
	}
	l.tallyAggregates(ts, "", minTimeNs, n)
	for k, r := range l.retired {
		t := ts.get(k.Pool, k.Currency)
		t.eff = t.eff.add(r.eff)
		t.list = t.list.add(r.list)
		t.busy = t.busy.add(r.busy)
		t.instNs += r.instNs
		t.busyNs += r.busyNs
	}
	l.mu.RUnlock()
	return ts.reports(Window{time.Unix(0, minTimeNs).UTC(), now})
}

var (
	minTimeNs = time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	maxTimeNs = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
)
