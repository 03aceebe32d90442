// Package costreport tells people what tenants spend: a scheduled cost
// report (daily or weekly, per tenant: spend, tokens, $/Mtok, with idle
// and unattributed cost apart) and the alerts of tenants' monthly budgets
// (50, 80, 100 %, each once), both as events that package notify delivers
// to the budget alerts' webhooks. The decisions (when a report is due,
// which alert is new) are pure and take the time as an argument; Run and
// WatchBudgets are the loops around them, on an injected clock.
package costreport

import (
	"context"
	"fmt"
	"math/big"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/tidegpu/tidegpu/internal/cost"
)

// Event reasons.
const (
	ReasonReport      = "CostReport"
	ReasonTenantAlert = "TenantBudgetAlert"
)

// Schedule is how often the report goes out.
type Schedule string

// Schedules.
const (
	Off    Schedule = "off"
	Daily  Schedule = "daily"
	Weekly Schedule = "weekly"
)

// ParseSchedule reads --cost-report.
func ParseSchedule(s string) (Schedule, error) {
	switch Schedule(s) {
	case Off, "":
		return Off, nil
	case Daily, Weekly:
		return Schedule(s), nil
	}
	return "", fmt.Errorf("--cost-report %q: want daily, weekly or off", s)
}

// Period returns the period of s holding t: the UTC day, or the week from
// Monday 00:00 UTC.
func Period(s Schedule, t time.Time) cost.Window {
	d := cost.DayWindow(t)
	if s != Weekly {
		return d
	}
	back := (int(d.From.Weekday()) + 6) % 7 // days since Monday
	from := d.From.AddDate(0, 0, -back)
	return cost.Window{From: from, To: from.AddDate(0, 0, 7)}
}

// Decide says, at now, whether a report is due and of which period, given
// the end of the last period reported (zero: none yet, which makes the
// first report the one of the period running now, at its end). When
// nothing is due, wake is when to ask again. A report missed (the process
// was down) is sent once, for the last whole period; older ones are
// skipped. Pure.
func Decide(s Schedule, lastEnd, now time.Time) (w cost.Window, due bool, wake time.Time) {
	cur := Period(s, now)
	if lastEnd.IsZero() {
		return cost.Window{}, false, cur.To
	}
	if lastEnd.Before(cur.From) {
		return Period(s, cur.From.Add(-time.Nanosecond)), true, time.Time{}
	}
	return cost.Window{}, false, cur.To
}

// Render is the report's text: per tenant (cost.GroupTenantCosts by
// tenant) spend, tokens and $/Mtok, then idle and unattributed cost and
// the total. Pure.
func Render(s Schedule, w cost.Window, groups []cost.GroupCost) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s cost report per tenant for %s to %s (UTC; usage basis: each tenant pays for the GPU time its requests used)",
		s, w.From.UTC().Format("2006-01-02 15:04"), w.To.UTC().Format("2006-01-02 15:04"))
	if len(groups) == 0 {
		b.WriteString("\nno cost in this period")
		return b.String()
	}
	totals := map[string]float64{}
	for _, g := range groups {
		fmt.Fprintf(&b, "\n%s: %.6f %s", g.Group, g.Cost.Float(), g.Currency)
		if g.HasTokens {
			fmt.Fprintf(&b, ", %.0f tokens (%.0f prompt, %.0f completion), %.4f %s/Mtok", g.PromptTokens+g.CompletionTokens,
				g.PromptTokens, g.CompletionTokens, g.PerMillion, g.Currency)
		}
		fmt.Fprintf(&b, ", %.4f GPU-h", g.GPUHours)
		totals[g.Currency] += g.Cost.Float()
	}
	curs := make([]string, 0, len(totals))
	for c := range totals {
		curs = append(curs, c)
	}
	sort.Strings(curs)
	for _, c := range curs {
		fmt.Fprintf(&b, "\ntotal: %.6f %s", totals[c], c)
	}
	return b.String()
}

// Ledger is what the loops read: the cost ledger.
type Ledger interface {
	TenantCosts(w cost.Window, now time.Time) []cost.TenantCost
}

// Emit records an event for people (events.Recorder.Eventf's shape).
type Emit func(reason, message string)

// Run sends the report of each period of s as it ends, until ctx ends.
// The first is of the period running at the start.
func Run(ctx context.Context, clk clock.Clock, s Schedule, l Ledger, emit Emit) {
	if s == Off || s == "" {
		return
	}
	last := time.Time{}
	for {
		now := clk.Now()
		if last.IsZero() {
			last = Period(s, now).From
		}
		w, due, wake := Decide(s, last, now)
		if due {
			emit(ReasonReport, Render(s, w, cost.GroupTenantCosts(l.TenantCosts(w, w.To), "tenant")))
			last = w.To
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-clk.After(wake.Sub(now)):
		}
	}
}

// Budgets gives each tenant's monthly budget in US dollars.
type Budgets func() map[string]*big.Rat

// BudgetLedger is what WatchBudgets reads and marks: the cost ledger,
// whose snapshot keeps the alerts said (cost.Ledger.MarkAlert).
type BudgetLedger interface {
	Ledger
	SentAlerts() map[string]bool
	MarkAlert(key string, at time.Time)
}

// WatchBudgets checks every interval each tenant's spend this month
// against its budget and emits each alert of cost.TenantAlerts once. The
// ledger keeps which were said, so that a restart restoring its snapshot
// (or a new operator leader) does not say them again; one that stops
// before the next save may say the last ones once more.
func WatchBudgets(ctx context.Context, clk clock.Clock, every time.Duration, budgets Budgets, l BudgetLedger, emit Emit) {
	for {
		now := clk.Now()
		for _, a := range BudgetAlerts(budgets(), l, now, l.SentAlerts()) {
			l.MarkAlert(a.Key, now)
			emit(ReasonTenantAlert, a.Message)
		}
		select {
		case <-ctx.Done():
			return
		case <-clk.After(every):
		}
	}
}

// BudgetAlerts returns the alerts due at now that are not in sent, by
// tenant name.
func BudgetAlerts(budgets map[string]*big.Rat, l Ledger, now time.Time, sent map[string]bool) []cost.Alert {
	if len(budgets) == 0 {
		return nil
	}
	month := cost.MonthWindow(now)
	spent := SpendUSD(l.TenantCosts(cost.Window{From: month.From, To: now}, now))
	names := make([]string, 0, len(budgets))
	for t := range budgets {
		names = append(names, t)
	}
	sort.Strings(names)
	var out []cost.Alert
	for _, t := range names {
		out = append(out, cost.TenantAlerts(t, month, cost.RatNanos(budgets[t]), spent[t], "USD", sent)...)
	}
	return out
}

// SpendUSD sums the rows' cost in US dollars per tenant, in nano-dollars.
func SpendUSD(rows []cost.TenantCost) map[string]int64 {
	out := map[string]int64{}
	for _, r := range rows {
		if r.Currency == "USD" && r.Tenant != cost.IdleGroup && r.Tenant != cost.UnattributedGroup {
			out[r.Tenant] += r.Cost.Nanos()
		}
	}
	return out
}

// SpendCache answers the tenant middleware's Spend (tenant.Spend) from the
// ledger: every tenant's spend this month, computed at most once per TTL
// (the ledger's report walks every instance-hour of the month; a request
// must not). A tenant without use has spent nothing.
type SpendCache struct {
	Ledger Ledger
	// TTL is how long a computation serves (0: one second): a tenant may
	// overrun its budget by what it spends in that time.
	TTL time.Duration

	mu    sync.Mutex
	at    time.Time
	spent map[string]int64
}

// MonthSpend implements tenant.Spend.
func (c *SpendCache) MonthSpend(tenant string, now time.Time) (*big.Rat, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refreshLocked(now)
	return big.NewRat(c.spent[tenant], 1e9), true
}

// All returns every tenant's spend this month in nano-dollars (a copy), as
// the operator hands it to the gateway replicas (usage.Ingest.ShareSpend).
func (c *SpendCache) All(now time.Time) map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refreshLocked(now)
	out := make(map[string]int64, len(c.spent))
	for t, v := range c.spent {
		out[t] = v
	}
	return out
}

func (c *SpendCache) refreshLocked(now time.Time) {
	ttl := c.TTL
	if ttl <= 0 {
		ttl = time.Second
	}
	if c.spent == nil || now.Sub(c.at) >= ttl || now.Before(c.at) || !cost.MonthWindow(now).From.Equal(cost.MonthWindow(c.at).From) {
		month := cost.MonthWindow(now)
		c.spent = SpendUSD(c.Ledger.TenantCosts(cost.Window{From: month.From, To: now}, now))
		c.at = now
	}
}
