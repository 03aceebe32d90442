package tenant

import (
	"context"
	"fmt"
	"math/big"
	"net/http"
	"strconv"
	"time"
)

// Info is the tenant of a request and its key's labels, as the middleware
// puts them on the request's context for the handlers behind it (the cost
// ledger's usage recorder).
type Info struct {
	Tenant string
	Labels map[string]string
}

type infoKey struct{}

// WithInfo returns a copy of ctx carrying i.
func WithInfo(ctx context.Context, i Info) context.Context {
	return context.WithValue(ctx, infoKey{}, i)
}

// InfoFrom returns the tenant a request's context carries, if any.
func InfoFrom(ctx context.Context) (Info, bool) {
	i, ok := ctx.Value(infoKey{}).(Info)
	return i, ok
}

// Spend tells what a tenant spent in the calendar month (UTC) holding now,
// in US dollars (the cost ledger's usage basis: the GPU time its requests
// took, at the price in force). ok is false when it is not known (no
// ledger yet); the middleware then lets the request pass.
type Spend interface {
	MonthSpend(tenant string, now time.Time) (usd *big.Rat, ok bool)
}

// BudgetCheck is the decision on one request of a key with a monthly
// budget. Pure.
type BudgetCheck struct {
	// Exceeded: the tenant's spend this month reached the key's budget.
	Exceeded bool
	// RetryAfter is the time until the month rolls over (UTC).
	RetryAfter time.Duration
}

// CheckBudget decides whether a key's request may pass given its tenant's
// spend this month: it may while spend is below the key's monthlyBudget.
// A key without a budget, or an unknown spend, always passes. Pure.
func CheckBudget(k *Key, spent *big.Rat, known bool, now time.Time) BudgetCheck {
	if k == nil || k.Budget == nil || !known || spent == nil || spent.Cmp(k.Budget) < 0 {
		return BudgetCheck{}
	}
	return BudgetCheck{Exceeded: true, RetryAfter: nextMonth(now).Sub(now)}
}

// nextMonth is 00:00 UTC on the first of the month after now's.
func nextMonth(now time.Time) time.Time {
	y, m, _ := now.UTC().Date()
	return time.Date(y, m, 1, 0, 0, 0, 0, time.UTC).AddDate(0, 1, 0)
}

// Budgets returns each tenant's monthly budget in US dollars (its keys
// share one, see Parse; the smallest is taken all the same); tenants
// without one are absent.
func (ks *Keys) Budgets() map[string]*big.Rat {
	out := map[string]*big.Rat{}
	for _, k := range ks.keys {
		if k.Budget == nil {
			continue
		}
		if b, ok := out[k.Tenant]; !ok || k.Budget.Cmp(b) < 0 {
			out[k.Tenant] = k.Budget
		}
	}
	return out
}

// refuseOverBudget answers 429 (code budget_exceeded, Retry-After until the
// month rolls over) for a key whose tenant has spent its budget, and
// reports whether it did.
func (m *Handler) refuseOverBudget(w http.ResponseWriter, openAI bool, k *Key, now time.Time) bool {
	if m.opts.Spend == nil || k.Budget == nil {
		return false
	}
	spent, ok := m.opts.Spend.MonthSpend(k.Tenant, now)
	c := CheckBudget(k, spent, ok, now)
	if !c.Exceeded {
		return false
	}
	w.Header().Set("Retry-After", strconv.FormatInt(max(1, int64(c.RetryAfter/time.Second)), 10))
	m.refuse(w, openAI, k.Tenant, http.StatusTooManyRequests, "insufficient_quota", "budget_exceeded",
		fmt.Sprintf("the monthly budget of %s (%s USD) is spent for %s: requests resume when the month rolls over (UTC) or the budget is raised",
			k.Tenant, k.Limits.MonthlyBudget, now.UTC().Format("2006-01")))
	return true
}
