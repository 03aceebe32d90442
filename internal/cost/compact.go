package cost

import (
	"math"
	"time"

	"github.com/tidegpu/tidegpu/internal/market"
)

// aggKey is what compacted hours are grouped by: everything a FOCUS row
// needs except the instance ID.
type aggKey struct {
	Pool         string        `json:"pool"`
	Provider     string        `json:"provider"`
	Region       string        `json:"region,omitempty"`
	Zone         string        `json:"zone,omitempty"`
	InstanceType string        `json:"instanceType,omitempty"`
	Market       market.Market `json:"market,omitempty"`
	Currency     string        `json:"currency"`
	Source       string        `json:"source"`
	Estimated    bool          `json:"estimated,omitempty"`
	// EffN and ListN are the prices per hour (nano-units) in force.
	EffN  int64 `json:"effNanosPerHour"`
	ListN int64 `json:"listNanosPerHour"`
}

// aggVal is one hour of an aggregate key. The key fixes the prices, so the
// costs are exactly EffN x instNs, ListN x instNs and EffN x busyNs.
type aggVal struct {
	instNs, busyNs int64
}

func (v *aggVal) costs(k aggKey) (eff, list, busy acc) {
	return mulAcc(k.EffN, v.instNs), mulAcc(k.ListN, v.instNs), mulAcc(k.EffN, v.busyNs)
}

type modelKey struct {
	Pool, Currency, Model string
}

type modelVal struct {
	prompt, completion int64
	alloc, usage       float64 // acc units
}

type poolCur struct {
	Pool, Currency string
}

// retiredVal holds the all-time totals of hours older than the aggregate
// retention, so that the exported counters never go down.
type retiredVal struct {
	instNs, busyNs  int64
	eff, list, busy acc
}

// Compact folds lifetimes that ended before now - DetailRetention into
// per-hour aggregates (grouped by pool, provider, region, zone, type,
// market, currency and price) and folds aggregates older than
// AggregateRetention into all-time totals, so that the ledger, and its
// snapshot, stay bounded. Reports over compacted hours stay exact for whole
// hours. Snapshot calls it.
func (l *Ledger) Compact() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.compactLocked(l.clock.Now())
}

func (l *Ledger) compactLocked(now time.Time) {
	n := now.UnixNano()
	l.compactAlertsLocked(n)
	cutoff := n - int64(l.detail)
	old := hourOf(n - int64(l.aggRetain))
	for id, lt := range l.inst {
		if lt.end == 0 || lt.end > cutoff {
			continue
		}
		l.fold(lt, n, old)
		l.foldTenants(lt, n, old)
		l.retiredIDs[id] = lt.end
		delete(l.inst, id)
	}
	for k, hours := range l.aggs {
		for h, v := range hours {
			if h >= old {
				continue
			}
			eff, list, busy := v.costs(k)
			l.retire(k.Pool, k.Currency, v.instNs, v.busyNs, eff, list, busy)
			delete(hours, h)
		}
		if len(hours) == 0 {
			delete(l.aggs, k)
		}
	}
	for k, hours := range l.models {
		for h := range hours {
			if h < old {
				delete(hours, h)
			}
		}
		if len(hours) == 0 {
			delete(l.models, k)
		}
	}
	for k, hours := range l.tenantAggs {
		for h := range hours {
			if h < old {
				delete(hours, h)
			}
		}
		if len(hours) == 0 {
			delete(l.tenantAggs, k)
		}
	}
	for id, end := range l.retiredIDs {
		if end < n-int64(l.aggRetain) {
			delete(l.retiredIDs, id)
		}
	}
}

func (l *Ledger) retire(pool, cur string, instNs, busyNs int64, eff, list, busy acc) {
	pc := poolCur{pool, cur}
	r := l.retired[pc]
	if r == nil {
		r = &retiredVal{}
		l.retired[pc] = r
	}
	r.instNs += instNs
	r.busyNs += busyNs
	r.eff = r.eff.add(eff)
	r.list = r.list.add(list)
	r.busy = r.busy.add(busy)
}

// fold adds an ended lifetime to the hourly aggregates; hours before old
// go straight to the all-time totals.
func (l *Ledger) fold(lt *lifetime, now, old int64) {
	hourCost := map[hourCur]float64{}
	hourBusy := map[hourCur]float64{}
	lt.walk(lt.start, lt.end, now, func(p piece) {
		s := &lt.segs[p.seg]
		if p.hour < old {
			ns := p.b - p.a
			l.retire(lt.info.Pool, s.eff.Currency, ns, p.busy, mulAcc(s.effN, ns), mulAcc(s.listN, ns), mulAcc(s.effN, p.busy))
			return
		}
		k := aggKey{Pool: lt.info.Pool, Provider: lt.info.Provider, Region: lt.info.Region, Zone: lt.info.Zone,
			InstanceType: lt.info.InstanceType, Market: lt.info.Market, Currency: s.eff.Currency, Source: s.eff.Source,
			Estimated: s.eff.Estimated, EffN: s.effN, ListN: s.listN}
		hours := l.aggs[k]
		if hours == nil {
			hours = map[int64]*aggVal{}
			l.aggs[k] = hours
		}
		v := hours[p.hour]
		if v == nil {
			v = &aggVal{}
			hours[p.hour] = v
		}
		ns := p.b - p.a
		eff, busy := mulAcc(s.effN, ns), mulAcc(s.effN, p.busy)
		v.instNs += ns
		v.busyNs += p.busy
		hc := hourCur{s.eff.Currency, p.hour}
		hourCost[hc] += eff.float()
		hourBusy[hc] += busy.float()
	})
	lt.shareModels(math.MinInt64, math.MaxInt64, now, hourCost, hourBusy, func(cur, model string, h int64, prompt, completion, alloc, usage float64) {
		if h < old {
			return
		}
		k := modelKey{lt.info.Pool, cur, model}
		hours := l.models[k]
		if hours == nil {
			hours = map[int64]*modelVal{}
			l.models[k] = hours
		}
		v := hours[h]
		if v == nil {
			v = &modelVal{}
			hours[h] = v
		}
		v.prompt += int64(prompt)
		v.completion += int64(completion)
		v.alloc += alloc
		v.usage += usage
	})
}
