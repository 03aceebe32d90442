package cost

import (
	"errors"
	"fmt"
	"math"
	"sort"
)

// The tenant parts of a snapshot (tenant.go).

type snapTenantUse struct {
	Tenant     string `json:"tenant,omitempty"`
	Labels     string `json:"labels,omitempty"`
	Hour       int64  `json:"hour"`
	Prompt     int64  `json:"prompt,omitempty"`
	Completion int64  `json:"completion,omitempty"`
	ReqNs      int64  `json:"reqNs,omitempty"`
}

// snapTenantAgg stores one tenant aggregate key's hours column-wise.
type snapTenantAgg struct {
	Pool       string    `json:"pool"`
	Currency   string    `json:"currency"`
	Tenant     string    `json:"tenant,omitempty"`
	Labels     string    `json:"labels,omitempty"`
	Hours      []int64   `json:"hours"`
	Prompt     []int64   `json:"prompt"`
	Completion []int64   `json:"completion"`
	Ns         []float64 `json:"ns"`
	Cost       []float64 `json:"cost"`
}

func (m *Meter) snapshotTenantsLocked() []snapTenantUse {
	out := make([]snapTenantUse, 0, len(m.tenants))
	for k, v := range m.tenants {
		out = append(out, snapTenantUse{Tenant: k.tenant, Labels: k.labels, Hour: k.hour, Prompt: v.prompt, Completion: v.completion, ReqNs: v.reqNs})
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Tenant != b.Tenant {
			return a.Tenant < b.Tenant
		}
		if a.Labels != b.Labels {
			return a.Labels < b.Labels
		}
		return a.Hour < b.Hour
	})
	if len(out) == 0 {
		return nil
	}
	return out
}

func (l *Ledger) snapshotTenantsLocked() []snapTenantAgg {
	var out []snapTenantAgg
	for k, hours := range l.tenantAggs {
		a := snapTenantAgg{Pool: k.Pool, Currency: k.Currency, Tenant: k.Tenant, Labels: k.Labels}
		for _, h := range sortedHours(hours) {
			v := hours[h]
			a.Hours = append(a.Hours, h)
			a.Prompt = append(a.Prompt, v.prompt)
			a.Completion = append(a.Completion, v.completion)
			a.Ns = append(a.Ns, v.ns)
			a.Cost = append(a.Cost, v.cost)
		}
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		return a.Pool+"\x00"+a.Currency+"\x00"+a.Tenant+"\x00"+a.Labels < b.Pool+"\x00"+b.Currency+"\x00"+b.Tenant+"\x00"+b.Labels
	})
	return out
}

func checkLabels(s string) error {
	if err := checkName("tenant labels", s, false); err != nil {
		return err
	}
	if s != "" && canonLabels(parseLabels(s)) != s {
		return errors.New("tenant labels: want k=v pairs sorted by key, comma-separated")
	}
	return nil
}

func (m *Meter) loadTenants(uses []snapTenantUse) error {
	for _, u := range uses {
		if err := checkName("tenant", u.Tenant, false); err != nil {
			return err
		}
		if err := checkLabels(u.Labels); err != nil {
			return err
		}
		if err := checkHour(u.Hour); err != nil {
			return fmt.Errorf("tenant use: %w", err)
		}
		if u.Prompt < 0 || u.Completion < 0 || u.Prompt > maxTokenCount || u.Completion > maxTokenCount || u.ReqNs < 0 || u.ReqNs > maxAggNs {
			return errors.New("tenant use out of range")
		}
		if m.tenants == nil {
			m.tenants = map[tenKey]*tenUse{}
		}
		k := tenKey{u.Tenant, u.Labels, u.Hour}
		if _, dup := m.tenants[k]; dup {
			return fmt.Errorf("tenant use of %q in hour %d appears twice", u.Tenant, u.Hour)
		}
		m.tenants[k] = &tenUse{prompt: u.Prompt, completion: u.Completion, reqNs: u.ReqNs}
	}
	return nil
}

func (l *Ledger) loadTenantAgg(a snapTenantAgg) error {
	if err := checkName("pool", a.Pool, true); err != nil {
		return err
	}
	if err := checkName("tenant", a.Tenant, false); err != nil {
		return err
	}
	if err := checkLabels(a.Labels); err != nil {
		return err
	}
	if !validCurrency(a.Currency) {
		return fmt.Errorf("currency %q", a.Currency)
	}
	n := len(a.Hours)
	if len(a.Prompt) != n || len(a.Completion) != n || len(a.Ns) != n || len(a.Cost) != n {
		return errors.New("columns of different lengths")
	}
	k := tenantAggKey{a.Pool, a.Currency, a.Tenant, a.Labels}
	if _, dup := l.tenantAggs[k]; dup {
		return errors.New("key appears twice")
	}
	hours := make(map[int64]*tenantAggVal, n)
	for i, h := range a.Hours {
		if err := checkHour(h); err != nil {
			return err
		}
		if _, dup := hours[h]; dup {
			return fmt.Errorf("hour %d appears twice", h)
		}
		if a.Prompt[i] < 0 || a.Completion[i] < 0 || a.Prompt[i] > maxTokenCount || a.Completion[i] > maxTokenCount {
			return fmt.Errorf("hour %d: token count out of range", h)
		}
		if f := a.Ns[i]; math.IsNaN(f) || f < 0 || f > float64(maxAggNs) {
			return fmt.Errorf("hour %d: time out of range", h)
		}
		if f := a.Cost[i]; math.IsNaN(f) || math.IsInf(f, 0) || f < 0 || f > maxAccV.float() {
			return fmt.Errorf("hour %d: cost out of range", h)
		}
		hours[h] = &tenantAggVal{prompt: a.Prompt[i], completion: a.Completion[i], ns: a.Ns[i], cost: a.Cost[i]}
	}
	l.tenantAggs[k] = hours
	return nil
}
