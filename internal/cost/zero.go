package cost

import (
	"slices"
	"time"

	"github.com/tidegpu/tidegpu/internal/market"
)

// Hours at zero: a pool that scales to zero runs no instance while idle.
// The ledger records each stretch without an instance, from the first sync
// that saw none to the first that saw one again, with the price of the
// pool's last instance, so a report says how long the pool was at zero and
// what that saved against keeping one instance (the pool's minimum of 1).
// A pool that has never run an instance has no price to weigh and no
// stretch.

// zeroStretch is one stretch of a pool at zero; to is 0 while open.
type zeroStretch struct {
	from, to int64
	price    market.Price
	priceN   int64 // price.PerHour in nano-units
}

// noteZero opens or closes pool's stretch at zero at now (called by
// SyncPool with the number of live instances). Locks l.
func (l *Ledger) noteZero(pool string, live int, now time.Time) {
	n := now.UnixNano()
	l.mu.Lock()
	defer l.mu.Unlock()
	zs := l.zero[pool]
	open := len(zs) > 0 && zs[len(zs)-1].to == 0
	switch {
	case live > 0 && open:
		zs[len(zs)-1].to = max(n, zs[len(zs)-1].from)
	case live == 0 && !open:
		price, ok := l.lastPriceLocked(pool)
		if !ok {
			return
		}
		zs = append(zs, zeroStretch{from: n, price: price, priceN: priceNanos(price.PerHour)})
	}
	// Stretches older than the aggregates' retention are dropped.
	cut := n - int64(l.aggRetain)
	zs = slices.DeleteFunc(zs, func(z zeroStretch) bool { return z.to != 0 && z.to < cut })
	l.zero[pool] = zs
}

// lastPriceLocked is the effective price of pool's most recently ended
// instance.
func (l *Ledger) lastPriceLocked(pool string) (market.Price, bool) {
	var best *lifetime
	for _, lt := range l.inst {
		if lt.info.Pool == pool && lt.end != 0 && (best == nil || lt.end > best.end) {
			best = lt
		}
	}
	if best == nil || len(best.segs) == 0 {
		return market.Price{}, false
	}
	return best.segs[len(best.segs)-1].eff, true
}

// tallyZero adds the pool's stretches at zero within [from, to) to ts.
func (l *Ledger) tallyZero(ts tallies, pool string, from, to, now int64) {
	for p, zs := range l.zero {
		if pool != "" && p != pool {
			continue
		}
		for _, z := range zs {
			end := z.to
			if end == 0 {
				end = now
			}
			a, b := max(z.from, from), min(end, to)
			if b <= a {
				continue
			}
			t := ts.get(p, z.price.Currency)
			t.zeroNs += b - a
			t.zeroSaved = t.zeroSaved.add(mulAcc(z.priceN, b-a))
		}
	}
}

// snapZero is a stretch at zero in a snapshot.
type snapZero struct {
	Pool  string       `json:"pool"`
	From  time.Time    `json:"from"`
	To    *time.Time   `json:"to,omitempty"`
	Price market.Price `json:"price"`
}

func (l *Ledger) snapshotZeroLocked() []snapZero {
	var out []snapZero
	for _, p := range sortedKeys(l.zero) {
		for _, z := range l.zero[p] {
			s := snapZero{Pool: p, From: time.Unix(0, z.from).UTC(), Price: z.price}
			if z.to != 0 {
				t := time.Unix(0, z.to).UTC()
				s.To = &t
			}
			out = append(out, s)
		}
	}
	return out
}

func (l *Ledger) loadZero(zs []snapZero) error {
	for _, s := range zs {
		if err := checkName("zero stretch pool", s.Pool, true); err != nil {
			return err
		}
		if err := s.Price.Validate(); err != nil {
			return err
		}
		z := zeroStretch{from: s.From.UnixNano(), price: s.Price, priceN: priceNanos(s.Price.PerHour)}
		if s.To != nil {
			z.to = max(s.To.UnixNano(), z.from)
		}
		l.zero[s.Pool] = append(l.zero[s.Pool], z)
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
