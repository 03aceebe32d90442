package cost

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

// Cost per tenant (usage basis).
//
// Attribution rule: an instance's busy time (at least one request in
// flight) in each UTC hour, and its cost at the price in force, is split
// among the tenants whose requests it served that hour in proportion to the
// time those requests were in flight (their request-seconds). Two requests
// of equal length served at once each pay half of the busy time they
// shared; a request alone pays all of it. An hour whose answers carry no
// request time (usage reported without it) is split by tokens instead. Busy
// time with no recorded request (an answer without usage, a probe) is
// "unattributed"; time with nothing in flight is "idle"; both are shown
// apart, so that tenants + unattributed + idle = the pools' spend. Tokens
// are the counts the answers carried, the ones the clients were told.

// Group names of the rows that are no tenant's.
const (
	// NoTenant is the tenant of requests served without an API key.
	NoTenant = "(no key)"
	// IdleGroup is the cost of instance time with nothing in flight.
	IdleGroup = "(idle)"
	// UnattributedGroup is busy time no recorded request accounts for.
	UnattributedGroup = "(unattributed)"
	// NoLabel groups tenants without the label asked for.
	NoLabel = "(none)"
)

// Use is what one answer (or a batch of them) of one tenant took of an
// instance: its tokens and its time in flight.
type Use struct {
	// Tenant is the API key's tenant; "" for a request without a key.
	Tenant string
	// Labels are the key's labels (team, project, env).
	Labels map[string]string
	// Prompt and Completion are the answer's token counts.
	Prompt, Completion int64
	// Start and End bound the request's time in flight; End is when the
	// answer ended. A zero Start gives the use no request time (it is then
	// weighed by its tokens).
	Start, End time.Time
}

type tenKey struct {
	tenant, labels string
	hour           int64
}

type tenUse struct {
	prompt, completion int64
	reqNs              int64
}

// canonLabels renders labels as "k=v,k=v" sorted by key.
func canonLabels(l map[string]string) string {
	if len(l) == 0 {
		return ""
	}
	ks := make([]string, 0, len(l))
	for k := range l {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	var b strings.Builder
	for i, k := range ks {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(l[k])
	}
	return b.String()
}

// parseLabels reads canonLabels' form back.
func parseLabels(s string) map[string]string {
	if s == "" {
		return nil
	}
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, _ := strings.Cut(kv, "=")
		out[k] = v
	}
	return out
}

// AddUse records one tenant's use of the instance: its tokens in the hour
// the answer ended, its request time split over the hours it spans. Uses
// ending before the snapshot a ledger was restored from are in it and are
// ignored. It records no tokens for the pool reports: call AddTokens too.
func (m *Meter) AddUse(u Use) {
	if m == nil || u.Prompt < 0 || u.Completion < 0 {
		return
	}
	end := u.End.UnixNano()
	labels := canonLabels(u.Labels)
	m.mu.Lock()
	defer m.mu.Unlock()
	if end < m.tokThrough {
		return
	}
	if m.tenants == nil {
		m.tenants = map[tenKey]*tenUse{}
	}
	get := func(h int64) *tenUse {
		k := tenKey{u.Tenant, labels, h}
		v := m.tenants[k]
		if v == nil {
			v = &tenUse{}
			m.tenants[k] = v
		}
		return v
	}
	v := get(hourOf(end))
	v.prompt += u.Prompt
	v.completion += u.Completion
	if u.Start.IsZero() {
		return
	}
	a := max(u.Start.UnixNano(), end-nsPerHour*24) // a day at most
	for a < end {
		h := hourOf(a)
		e := min((h+1)*nsPerHour, end)
		get(h).reqNs += e - a
		a = e
	}
}

// AddUse is Meter(id).AddUse.
func (l *Ledger) AddUse(id string, u Use) { l.Meter(id).AddUse(u) }

// TenantCost is what one tenant (with one set of labels) spent in one pool
// and currency over a window, on the usage basis.
type TenantCost struct {
	// Tenant is the tenant's name, NoTenant, IdleGroup or
	// UnattributedGroup.
	Tenant   string            `json:"tenant"`
	Labels   map[string]string `json:"labels,omitempty"`
	Pool     string            `json:"pool"`
	Currency string            `json:"currency"`
	// PromptTokens and CompletionTokens the tenant's answers carried.
	PromptTokens     float64 `json:"promptTokens"`
	CompletionTokens float64 `json:"completionTokens"`
	// GPUHours is the instance time attributed (busy time for tenants,
	// idle time for IdleGroup).
	GPUHours float64 `json:"gpuHours"`
	// Cost is that time at the price in force.
	Cost Money `json:"cost"`
}

type tenRowKey struct {
	tenant, labels, pool, cur string
}

type tenRow struct {
	prompt, completion float64
	ns                 float64
	cost               float64 // acc units
}

// tenantAggKey groups compacted tenant hours.
type tenantAggKey struct {
	Pool, Currency, Tenant, Labels string
}

type tenantAggVal struct {
	prompt, completion int64
	ns, cost           float64 // attributed ns and acc units
}

// TenantCosts returns the cost of every tenant over w as of now, one row
// per tenant, labels, pool and currency, plus the idle and unattributed
// rows of each pool, sorted. The rows of a pool and currency sum to its
// EffectiveCost (within float rounding of the shares).
func (l *Ledger) TenantCosts(w Window, now time.Time) []TenantCost {
	from, to := w.ns()
	n := now.UnixNano()
	rows := map[tenRowKey]*tenRow{}
	get := func(k tenRowKey) *tenRow {
		r := rows[k]
		if r == nil {
			r = &tenRow{}
			rows[k] = r
		}
		return r
	}
	l.mu.RLock()
	for _, lt := range l.inst {
		lt.tallyTenants(from, to, n, func(k tenRowKey, prompt, completion, ns, cost float64) {
			r := get(k)
			r.prompt += prompt
			r.completion += completion
			r.ns += ns
			r.cost += cost
		})
	}
	for k, hours := range l.tenantAggs {
		for h, v := range hours {
			frac, ok := hourFrac(h, from, to)
			if !ok {
				continue
			}
			r := get(tenRowKey{k.Tenant, k.Labels, k.Pool, k.Currency})
			r.prompt += float64(v.prompt) * frac
			r.completion += float64(v.completion) * frac
			r.ns += v.ns * frac
			r.cost += v.cost * frac
		}
	}
	// Idle time of compacted hours: the aggregates' instance time less
	// their busy time.
	for k, hours := range l.aggs {
		for h, v := range hours {
			frac, ok := hourFrac(h, from, to)
			if !ok {
				continue
			}
			r := get(tenRowKey{IdleGroup, "", k.Pool, k.Currency})
			idle := v.instNs - v.busyNs
			r.ns += float64(idle) * frac
			r.cost += mulAcc(k.EffN, idle).float() * frac
		}
	}
	l.mu.RUnlock()
	out := make([]TenantCost, 0, len(rows))
	for k, r := range rows {
		if k.tenant == "" {
			k.tenant = NoTenant
		}
		out = append(out, TenantCost{Tenant: k.tenant, Labels: parseLabels(k.labels), Pool: k.pool, Currency: k.cur,
			PromptTokens: r.prompt, CompletionTokens: r.completion, GPUHours: r.ns / float64(nsPerHour),
			Cost: Money{k.cur, accFromFloat(max(r.cost, 0))}})
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Pool != b.Pool {
			return a.Pool < b.Pool
		}
		if a.Currency != b.Currency {
			return a.Currency < b.Currency
		}
		if a.Tenant != b.Tenant {
			return a.Tenant < b.Tenant
		}
		return canonLabels(a.Labels) < canonLabels(b.Labels)
	})
	return out
}

// tallyTenants emits lt's tenant, idle and unattributed rows over
// [from, to) as of now (ns and cost in acc units).
func (lt *lifetime) tallyTenants(from, to, now int64, emit func(k tenRowKey, prompt, completion, ns, cost float64)) {
	pool := lt.info.Pool
	type hc struct {
		cur  string
		hour int64
	}
	busyNs := map[hc]float64{}
	busyCost := map[hc]float64{}
	var hoursCur []hc
	lt.walk(from, to, now, func(p piece) {
		s := &lt.segs[p.seg]
		k := hc{s.eff.Currency, p.hour}
		b := p.busyIn()
		var all, busy float64
		if p.full() {
			all, busy = mulAcc(s.effN, p.b-p.a).float(), mulAcc(s.effN, p.busy).float()
		} else {
			all, busy = float64(s.effN)*float64(p.wb-p.wa), float64(s.effN)*b
		}
		emit(tenRowKey{IdleGroup, "", pool, s.eff.Currency}, 0, 0, float64(p.wb-p.wa)-b, all-busy)
		if _, ok := busyNs[k]; !ok {
			hoursCur = append(hoursCur, k)
		}
		busyNs[k] += b
		busyCost[k] += busy
	})
	// The tenants' use per hour, tokens pro rata in a cut hour as tokensIn.
	end := lt.endOr(now)
	type tw struct {
		tenant, labels     string
		prompt, completion float64
		reqNs              float64
	}
	perHour := map[int64][]tw{}
	lt.m.mu.Lock()
	for k, v := range lt.m.tenants {
		hs, he := k.hour*nsPerHour, (k.hour+1)*nsPerHour
		la, lb := max(hs, lt.start), min(he, end)
		if lb <= la {
			la, lb = hs, he
		}
		wa, wb := max(la, from), min(lb, to)
		if wb <= wa {
			continue
		}
		frac := 1.0
		if wa != la || wb != lb {
			frac = float64(wb-wa) / float64(lb-la)
		}
		perHour[k.hour] = append(perHour[k.hour], tw{k.tenant, k.labels, float64(v.prompt) * frac, float64(v.completion) * frac, float64(v.reqNs)})
	}
	lt.m.mu.Unlock()
	for _, h := range sortedHours(perHour) {
		uses := perHour[h]
		sort.Slice(uses, func(i, j int) bool {
			return uses[i].tenant+"\x00"+uses[i].labels < uses[j].tenant+"\x00"+uses[j].labels
		})
		var req, tok float64
		for _, u := range uses {
			req += u.reqNs
			tok += u.prompt + u.completion
		}
		// Tokens count in the currency of the segment at the hour's start.
		pc := lt.segs[lt.segAt(max(h*nsPerHour, lt.start))].eff.Currency
		for _, u := range uses {
			emit(tenRowKey{u.tenant, u.labels, pool, pc}, u.prompt, u.completion, 0, 0)
		}
		if req <= 0 && tok <= 0 {
			continue
		}
		for i, k := range hoursCur {
			if k.hour != h {
				continue
			}
			for _, u := range uses {
				share := u.reqNs / req
				if req <= 0 {
					share = (u.prompt + u.completion) / tok
				}
				emit(tenRowKey{u.tenant, u.labels, pool, k.cur}, 0, 0, busyNs[k]*share, busyCost[k]*share)
			}
			busyNs[k], busyCost[k] = 0, 0
			hoursCur[i].hour = math.MinInt64 // attributed
		}
	}
	for _, k := range hoursCur {
		if k.hour == math.MinInt64 {
			continue
		}
		if busyNs[k] > 0 || busyCost[k] > 0 {
			emit(tenRowKey{UnattributedGroup, "", pool, k.cur}, 0, 0, busyNs[k], busyCost[k])
		}
	}
}

// foldTenants adds an ended lifetime's tenant rows to the hourly tenant
// aggregates (hours before old are dropped, as the model aggregates').
func (l *Ledger) foldTenants(lt *lifetime, now, old int64) {
	if l.tenantAggs == nil {
		l.tenantAggs = map[tenantAggKey]map[int64]*tenantAggVal{}
	}
	for h := hourOf(lt.start); h*nsPerHour < lt.end; h++ {
		if h < old {
			continue
		}
		lt.tallyTenants(h*nsPerHour, (h+1)*nsPerHour, now, func(k tenRowKey, prompt, completion, ns, cost float64) {
			if k.tenant == IdleGroup {
				return // the instance aggregates keep idle time
			}
			ak := tenantAggKey{k.pool, k.cur, k.tenant, k.labels}
			hours := l.tenantAggs[ak]
			if hours == nil {
				hours = map[int64]*tenantAggVal{}
				l.tenantAggs[ak] = hours
			}
			v := hours[h]
			if v == nil {
				v = &tenantAggVal{}
				hours[h] = v
			}
			v.prompt += int64(math.Round(prompt))
			v.completion += int64(math.Round(completion))
			v.ns += ns
			v.cost += cost
		})
	}
}

// GroupCost is the cost of one group of tenants (by tenant or by a label's
// value) in one currency.
type GroupCost struct {
	// Group is the tenant, the label's value, NoLabel, or IdleGroup and
	// UnattributedGroup.
	Group            string  `json:"group"`
	Currency         string  `json:"currency"`
	PromptTokens     float64 `json:"promptTokens"`
	CompletionTokens float64 `json:"completionTokens"`
	GPUHours         float64 `json:"gpuHours"`
	Cost             Money   `json:"cost"`
	// PerMillion is Cost per million tokens (prompt + completion); valid
	// only when HasTokens.
	PerMillion float64 `json:"perMillion"`
	HasTokens  bool    `json:"hasTokens"`
}

// ParseGroupBy checks a grouping: "tenant", or "label:NAME" with NAME one
// of team, project, env.
func ParseGroupBy(by string) (string, error) {
	switch by {
	case "tenant", "label:team", "label:project", "label:env":
		return by, nil
	case "", "pool":
		return "pool", nil
	}
	return "", fmt.Errorf("--by %q: want pool, tenant, label:team, label:project or label:env", by)
}

// GroupTenantCosts sums rows by by ("tenant" or "label:NAME"); idle and
// unattributed rows keep their own groups. Sorted by currency, then group
// with the idle and unattributed ones last. Pure.
func GroupTenantCosts(rows []TenantCost, by string) []GroupCost {
	label, byLabel := strings.CutPrefix(by, "label:")
	type gk struct{ group, cur string }
	sums := map[gk]*GroupCost{}
	for _, r := range rows {
		g := r.Tenant
		if byLabel && g != IdleGroup && g != UnattributedGroup {
			g = r.Labels[label]
			if g == "" {
				g = NoLabel
			}
		}
		k := gk{g, r.Currency}
		s := sums[k]
		if s == nil {
			s = &GroupCost{Group: g, Currency: r.Currency, Cost: Money{Currency: r.Currency}}
			sums[k] = s
		}
		s.PromptTokens += r.PromptTokens
		s.CompletionTokens += r.CompletionTokens
		s.GPUHours += r.GPUHours
		s.Cost = Money{r.Currency, s.Cost.v.add(r.Cost.v)}
	}
	out := make([]GroupCost, 0, len(sums))
	for _, s := range sums {
		if tok := s.PromptTokens + s.CompletionTokens; tok > 0 {
			s.HasTokens = true
			s.PerMillion = s.Cost.Float() * 1e6 / tok
		}
		out = append(out, *s)
	}
	rank := func(g string) int {
		switch g {
		case UnattributedGroup:
			return 1
		case IdleGroup:
			return 2
		}
		return 0
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Currency != b.Currency {
			return a.Currency < b.Currency
		}
		if rank(a.Group) != rank(b.Group) {
			return rank(a.Group) < rank(b.Group)
		}
		return a.Group < b.Group
	})
	return out
}

// TenantSpend returns what tenant spent (usage basis) in currency over w as
// of now.
func (l *Ledger) TenantSpend(w Window, now time.Time) map[string]map[string]Money {
	out := map[string]map[string]Money{}
	for _, r := range l.TenantCosts(w, now) {
		if r.Tenant == IdleGroup || r.Tenant == UnattributedGroup {
			continue
		}
		m := out[r.Tenant]
		if m == nil {
			m = map[string]Money{}
			out[r.Tenant] = m
		}
		s := m[r.Currency]
		m[r.Currency] = Money{r.Currency, s.v.add(r.Cost.v)}
	}
	return out
}

// TenantFOCUSRows returns one FOCUS row per tenant row of TenantCosts over
// w (the cost allocated to a tenant in a pool, and each pool's idle and
// unattributed cost), the tenant and its key's labels in Tags
// (tidegpu.io/tenant, tidegpu.io/team, tidegpu.io/project, tidegpu.io/env):
// the rows of a pool sum to its spend, so they replace the instance rows,
// not add to them.
func (l *Ledger) TenantFOCUSRows(w Window, now time.Time) []FOCUSRow {
	var out []FOCUSRow
	for _, r := range l.TenantCosts(w, now) {
		start, end := w.From.UTC(), w.To.UTC()
		bp := MonthWindow(start)
		row := FOCUSRow{BillingCurrency: r.Currency, BillingPeriodStart: bp.From, BillingPeriodEnd: bp.To,
			ChargeCategory: FOCUSChargeUsage, ChargeFrequency: FOCUSUsageBased, ChargePeriodStart: start, ChargePeriodEnd: end,
			ConsumedQuantity: r.GPUHours, ConsumedUnit: FOCUSUnitHours, PricingQuantity: r.GPUHours, PricingUnit: FOCUSUnitHours,
			EffectiveCost: r.Cost, BilledCost: r.Cost, ContractedCost: r.Cost, ListCost: r.Cost,
			ProviderName: "TideGPU", PublisherName: "TideGPU", InvoiceIssuerName: "TideGPU",
			ServiceCategory: FOCUSServiceCompute, ServiceName: "TideGPU pool " + r.Pool, PoolName: r.Pool,
			Tags: map[string]string{"tidegpu.io/pool": r.Pool, "tidegpu.io/tenant": r.Tenant}}
		switch r.Tenant {
		case IdleGroup:
			row.ChargeDescription = fmt.Sprintf("idle instance-hours of pool %s (nothing in flight)", r.Pool)
			row.IdleCost = r.Cost
		case UnattributedGroup:
			row.ChargeDescription = fmt.Sprintf("busy instance-hours of pool %s no recorded request accounts for", r.Pool)
		default:
			row.ChargeDescription = fmt.Sprintf("GPU-hours of pool %s used by tenant %s (%.0f tokens)", r.Pool, r.Tenant, r.PromptTokens+r.CompletionTokens)
			row.BusyQuantity = r.GPUHours
		}
		for k, v := range r.Labels {
			row.Tags["tidegpu.io/"+k] = v
		}
		out = append(out, row)
	}
	return out
}
