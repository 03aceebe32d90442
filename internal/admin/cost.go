package admin

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/tidegpu/tidegpu/internal/cost"
)

// CostView is one pool's cost over a window, as `tidegpu cost` and the
// dashboard show it. Amounts are in Currency.
type CostView struct {
	Name               string  `json:"name"`
	Currency           string  `json:"currency"`
	Spend              float64 `json:"spend"`
	RunRatePerHour     float64 `json:"runRatePerHour"`
	OnDemandEquivalent float64 `json:"onDemandEquivalent"`
	Savings            float64 `json:"savings"`
	IdleCost           float64 `json:"idleCost"`
	InstanceHours      float64 `json:"instanceHours"`
	BusyHours          float64 `json:"busyHours"`
	// ZeroHours is the time the pool ran no instance (scaled to zero) and
	// ZeroSavings what that saved against keeping one instance.
	ZeroHours     float64            `json:"zeroHours,omitempty"`
	ZeroSavings   float64            `json:"zeroSavings,omitempty"`
	SpendBySource map[string]float64 `json:"spendBySource"`
	// CostPerMillionTokens by model and basis (allocation: all instance
	// cost; usage: cost while serving).
	CostPerMillionTokens []TokenCost `json:"costPerMillionTokens"`
}

// TokenCost is the cost of a million tokens of one model on one basis.
type TokenCost struct {
	Model  string  `json:"model"`
	Basis  string  `json:"basis"`
	Value  float64 `json:"value"`
	Tokens float64 `json:"tokens"`
}

// CostReport is the answer of GET /api/v1/cost.
type CostReport struct {
	From  time.Time  `json:"from"`
	To    time.Time  `json:"to"`
	Pools []CostView `json:"pools"`
	// By is the grouping asked for (?by=tenant, label:team, label:project,
	// label:env); Groups the cost per group on the usage basis, with the
	// idle and unattributed cost as groups of their own.
	By     string      `json:"by,omitempty"`
	Groups []GroupView `json:"groups,omitempty"`
}

// GroupView is one group's cost (a tenant, or a label's value).
type GroupView struct {
	Group            string  `json:"group"`
	Currency         string  `json:"currency"`
	Spend            float64 `json:"spend"`
	PromptTokens     float64 `json:"promptTokens"`
	CompletionTokens float64 `json:"completionTokens"`
	GPUHours         float64 `json:"gpuHours"`
	// PerMillionTokens is absent for a group without tokens.
	PerMillionTokens *float64 `json:"perMillionTokens,omitempty"`
}

// BuildGroups is the cost per group (cost.GroupTenantCosts) over
// [now-window, now).
func BuildGroups(l *cost.Ledger, now time.Time, window time.Duration, by string) []GroupView {
	out := []GroupView{}
	for _, g := range cost.GroupTenantCosts(l.TenantCosts(cost.Window{From: now.Add(-window), To: now}, now), by) {
		v := GroupView{Group: g.Group, Currency: g.Currency, Spend: g.Cost.Float(), PromptTokens: g.PromptTokens,
			CompletionTokens: g.CompletionTokens, GPUHours: g.GPUHours}
		if g.HasTokens {
			pm := g.PerMillion
			v.PerMillionTokens = &pm
		}
		out = append(out, v)
	}
	return out
}

// BuildCostReport summarises the ledger over [now-window, now). Pure given
// the ledger.
func BuildCostReport(l *cost.Ledger, now time.Time, window time.Duration) CostReport {
	w := cost.Window{From: now.Add(-window), To: now}
	out := CostReport{From: w.From, To: w.To, Pools: []CostView{}}
	for _, r := range l.ReportAt("", w, now) {
		v := CostView{Name: r.Pool, Currency: r.Currency, Spend: r.EffectiveCost.Float(),
			OnDemandEquivalent: r.ListCost.Float(), Savings: r.Savings.Float(), IdleCost: r.IdleCost.Float(),
			RunRatePerHour: r.RunRatePerHour.Float(), InstanceHours: r.InstanceHours, BusyHours: r.BusyHours,
			SpendBySource: map[string]float64{}, CostPerMillionTokens: []TokenCost{},
			ZeroHours: r.ZeroHours, ZeroSavings: r.ZeroSavings.Float()}
		// The report's run-rate is of the window's end, which excludes
		// what runs at now; ask for the instant itself.
		for _, m := range l.RunRate(r.Pool, now.Add(-time.Nanosecond)) {
			if m.Currency == r.Currency {
				v.RunRatePerHour = m.Float()
			}
		}
		for s, m := range r.CostBySource {
			v.SpendBySource[s] = m.Float()
		}
		for _, m := range r.Models {
			if !m.HasTokens {
				continue
			}
			tok := m.PromptTokens + m.CompletionTokens
			v.CostPerMillionTokens = append(v.CostPerMillionTokens,
				TokenCost{Model: m.Model, Basis: "allocation", Value: m.PerMillionAllocation, Tokens: tok},
				TokenCost{Model: m.Model, Basis: "usage", Value: m.PerMillionUsage, Tokens: tok})
		}
		out.Pools = append(out.Pools, v)
	}
	sort.Slice(out.Pools, func(i, j int) bool {
		if out.Pools[i].Name != out.Pools[j].Name {
			return out.Pools[i].Name < out.Pools[j].Name
		}
		return out.Pools[i].Currency < out.Pools[j].Currency
	})
	return out
}

// ParseWindow reads ?window= (a Go duration such as 24h or 30m; default 24h,
// at most 400 days).
func ParseWindow(s string) (time.Duration, error) {
	if s == "" {
		return 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 || d > 400*24*time.Hour {
		return 0, fmt.Errorf("window: %q is not a duration between 1s and 9600h: use e.g. 24h or 720h", s)
	}
	return d, nil
}

func costHandler(l *cost.Ledger) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if l == nil {
			writeError(w, http.StatusNotFound, "cost tracking is off in this process")
			return
		}
		window, err := ParseWindow(r.URL.Query().Get("window"))
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		by, err := cost.ParseGroupBy(r.URL.Query().Get("by"))
		if err != nil {
			writeError(w, http.StatusBadRequest, "by: "+strings.TrimPrefix(err.Error(), "--by "))
			return
		}
		now := time.Now()
		switch f := r.URL.Query().Get("format"); f {
		case "", "json":
			rep := BuildCostReport(l, now, window)
			if by != "pool" {
				rep.By, rep.Groups = by, BuildGroups(l, now, window, by)
			}
			writeJSON(w, http.StatusOK, rep)
		case "focus-csv":
			w.Header().Set("Content-Type", "text/csv; charset=utf-8")
			w.Header().Set("Content-Disposition", `attachment; filename="tidegpu-focus.csv"`)
			win := cost.Window{From: now.Add(-window), To: now}
			rows := l.FOCUSRows(win)
			if by != "pool" {
				// The cost allocated to tenants, tagged with tenant and labels.
				rows = l.TenantFOCUSRows(win, now)
			}
			_ = cost.WriteFOCUSCSV(w, rows)
		default:
			writeError(w, http.StatusBadRequest, fmt.Sprintf("format: %q is not supported: use json or focus-csv", f))
		}
	}
}
