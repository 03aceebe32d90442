package cost

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/tidegpu/tidegpu/internal/market"
)

// One spot g5.xlarge at a live 0.41 USD/h (list 1.006) for two hours, busy
// 30 min, 1M llama tokens; a 0.50 USD budget.
//
//	spend   = 2 x 0.41              = 0.82
//	savings = 2 x 1.006 - 0.82      = 1.192
//	idle    = 0.82 - 0.5 x 0.41     = 0.615
//	llama   allocation 0.82 / 1 Mtok, usage 0.205 / 1 Mtok
func TestCollector(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	l := NewLedger(Options{Clock: clk})
	info := InstanceInfo{ID: "i-1", Pool: "chat", Provider: "aws", Region: "us-east-1", Zone: "us-east-1a",
		InstanceType: "g5.xlarge", Market: market.Spot, Models: []string{"llama"}}
	lp := NewLivePrices()
	lp.Update("aws", "us-east-1", []market.Offering{{InstanceType: "g5.xlarge", Zone: "us-east-1a", Market: market.Spot,
		PricePerHour: 0.41, Currency: "USD", PriceSource: market.PriceLive}}, t0)
	eff, list, err := (&Resolver{Catalog: market.DefaultCatalog(), Live: lp}).Prices(info.Query(), t0)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Start(info, t0, eff, list); err != nil {
		t.Fatal(err)
	}
	l.BusyStart("i-1", t0.Add(10*time.Minute))
	l.BusyEnd("i-1", t0.Add(40*time.Minute))
	l.AddTokens("i-1", "llama", 400_000, 600_000, t0.Add(20*time.Minute))
	clk.SetTime(t0.Add(2 * time.Hour))
	c := NewCollector(l, CollectorOptions{Budgets: func() map[string]Budget {
		return map[string]Budget{"chat": {"0.50", "USD", BudgetAlert}, "quiet": {"10", "USD", BudgetCapAtMinimum},
			"misconfigured": {"ten", "USD", BudgetAlert}} // skipped, not a failed scrape
	}})
	want := `
# HELP kubecost_node_is_spot Cloud provider info about node preemptibility (OpenCost name): 1 for spot instances.
# TYPE kubecost_node_is_spot gauge
kubecost_node_is_spot{instance="i-1",instance_type="g5.xlarge",node="i-1",provider_id="aws:///us-east-1a/i-1",region="us-east-1"} 1
# HELP node_total_hourly_cost Total node cost per hour (OpenCost name): the effective price of a running instance, in its currency.
# TYPE node_total_hourly_cost gauge
node_total_hourly_cost{capacity_type="spot",currency="USD",instance="i-1",instance_type="g5.xlarge",node="i-1",pool="chat",provider="aws",provider_id="aws:///us-east-1a/i-1",region="us-east-1",zone="us-east-1a"} 0.41
# HELP tidegpu_budget_exceeded 1 when the pool's monthly budget (calendar month, UTC) is spent.
# TYPE tidegpu_budget_exceeded gauge
tidegpu_budget_exceeded{pool="chat"} 1
tidegpu_budget_exceeded{pool="quiet"} 0
# HELP tidegpu_cost_idle_total Cost of instance time with no request in flight since the ledger began, in currency units.
# TYPE tidegpu_cost_idle_total counter
tidegpu_cost_idle_total{currency="USD",pool="chat"} 0.615
# HELP tidegpu_cost_per_million_tokens Cost per million tokens (prompt+completion) of a model in the current UTC month; cost_basis allocation = all instance cost, usage = cost of busy time.
# TYPE tidegpu_cost_per_million_tokens gauge
tidegpu_cost_per_million_tokens{cost_basis="allocation",currency="USD",model="llama",pool="chat"} 0.82
tidegpu_cost_per_million_tokens{cost_basis="usage",currency="USD",model="llama",pool="chat"} 0.205
# HELP tidegpu_cost_run_rate_per_hour Sum of the effective prices per hour of the pool's running instances.
# TYPE tidegpu_cost_run_rate_per_hour gauge
tidegpu_cost_run_rate_per_hour{currency="USD",pool="chat"} 0.41
# HELP tidegpu_cost_savings_total On-demand equivalent minus effective cost of the pool since the ledger began, in currency units.
# TYPE tidegpu_cost_savings_total counter
tidegpu_cost_savings_total{currency="USD",pool="chat"} 1.192
# HELP tidegpu_cost_spend_total Effective cost (spend) of the pool since the ledger began, in currency units.
# TYPE tidegpu_cost_spend_total counter
tidegpu_cost_spend_total{currency="USD",pool="chat"} 0.82
# HELP tidegpu_cost_tenant_spend Cost of the GPU time a tenant's requests used in the current UTC month (tenant "(idle)": time with nothing in flight).
# TYPE tidegpu_cost_tenant_spend gauge
tidegpu_cost_tenant_spend{currency="USD",env="",pool="chat",project="",team="",tenant="(idle)"} 0.615
tidegpu_cost_tenant_spend{currency="USD",env="",pool="chat",project="",team="",tenant="(unattributed)"} 0.205
# HELP tidegpu_price_per_hour Price per hour in force for a running instance, with where it came from (catalog, live, override, fallback).
# TYPE tidegpu_price_per_hour gauge
tidegpu_price_per_hour{capacity_type="spot",currency="USD",instance="i-1",instance_type="g5.xlarge",pool="chat",price_source="live",provider="aws",region="us-east-1",zone="us-east-1a"} 0.41
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Gather(); err != nil {
		t.Errorf("pedantic gather: %v", err)
	}
	// Once the instance ends, its per-instance series go and the totals stay.
	if err := l.End("i-1", t0.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(c, MetricNodeTotalHourlyCost, MetricPricePerHour); n != 0 {
		t.Errorf("%d per-instance series after the end", n)
	}
	if n := testutil.CollectAndCount(c, MetricSpendTotal); n != 1 {
		t.Errorf("%d spend series", n)
	}
}

// An instance ID that is not valid UTF-8 does not fail the scrape.
func TestCollectorRepairsLabels(t *testing.T) {
	l := NewLedger(Options{Clock: clocktesting.NewFakeClock(t0.Add(time.Hour))})
	info := p3("bad\xffid")
	eff, list := catalogPrices(t, info)
	if err := l.Start(info, t0, eff, list); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(NewCollector(l, CollectorOptions{}), MetricNodeTotalHourlyCost); n != 1 {
		t.Errorf("%d series", n)
	}
}
