package cost

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/tidegpu/tidegpu/internal/market"
)

// InstanceInfo describes an instance for the ledger.
type InstanceInfo struct {
	// ID is the provider's instance ID, unique in the ledger.
	ID string `json:"id"`
	// Pool owns the instance.
	Pool string `json:"pool"`
	// Provider, Region, Zone, InstanceType and Market describe the offering
	// (they label reports, FOCUS rows and metrics).
	Provider     string        `json:"provider"`
	Region       string        `json:"region,omitempty"`
	Zone         string        `json:"zone,omitempty"`
	InstanceType string        `json:"instanceType,omitempty"`
	Market       market.Market `json:"market,omitempty"`
	// Models the instance serves; token counts of other models are still
	// recorded.
	Models []string `json:"models,omitempty"`
	// LaunchedAt is used by SyncPool as the start of an instance it has not
	// seen yet; zero means the time of the sync.
	LaunchedAt time.Time `json:"launchedAt,omitempty"`
}

// Query returns the pricing query of the instance.
func (i InstanceInfo) Query() Query {
	return Query{Pool: i.Pool, Provider: i.Provider, Region: i.Region, Zone: i.Zone, InstanceType: i.InstanceType, Market: i.Market}
}

// segment is a stretch of a lifetime at one price.
type segment struct {
	from      int64 // unix ns
	eff, list market.Price
	effN      int64 // eff.PerHour in nano-units
	listN     int64
}

// lifetime is one instance from start to end (0 while running).
type lifetime struct {
	info       InstanceInfo
	start, end int64
	segs       []segment
	m          *Meter
}

func (lt *lifetime) endOr(now int64) int64 {
	if lt.end != 0 {
		return lt.end
	}
	return now
}

// Options configure a Ledger.
type Options struct {
	// Clock gives "now" for running instances; default the real clock.
	Clock clock.PassiveClock
	// DetailRetention is how long an ended lifetime keeps its own record
	// (per-instance FOCUS rows) before Compact folds it into per-hour
	// aggregates. Default 24h.
	DetailRetention time.Duration
	// AggregateRetention is how long hourly aggregates are kept before they
	// are folded into all-time totals. Default 35 days (a calendar month
	// plus margin, for month reports and budgets).
	AggregateRetention time.Duration
}

// Ledger records instance lifetimes with their prices, busy time and
// tokens, and computes costs from them. Safe for concurrent use; the hot
// path (busy transitions, tokens) goes through Meter.
type Ledger struct {
	clock     clock.PassiveClock
	detail    time.Duration
	aggRetain time.Duration

	mu         sync.RWMutex
	inst       map[string]*lifetime
	aggs       map[aggKey]map[int64]*aggVal
	models     map[modelKey]map[int64]*modelVal
	retired    map[poolCur]*retiredVal
	retiredIDs map[string]int64 // compacted instance IDs -> end (unix ns)
	zero       map[string][]zeroStretch
	tenantAggs map[tenantAggKey]map[int64]*tenantAggVal
	alerts     map[string]int64 // delivered alerts' keys -> when (unix ns); alertsent.go
	restoredAt int64            // events before this are in the restored snapshot
}

// NewLedger returns an empty ledger.
func NewLedger(opts Options) *Ledger {
	l := &Ledger{clock: opts.Clock, detail: opts.DetailRetention, aggRetain: opts.AggregateRetention}
	if l.clock == nil {
		l.clock = clock.RealClock{}
	}
	if l.detail <= 0 {
		l.detail = 24 * time.Hour
	}
	if l.aggRetain <= 0 {
		l.aggRetain = 35 * 24 * time.Hour
	}
	l.reset()
	return l
}

func (l *Ledger) reset() {
	l.inst = map[string]*lifetime{}
	l.aggs = map[aggKey]map[int64]*aggVal{}
	l.models = map[modelKey]map[int64]*modelVal{}
	l.retired = map[poolCur]*retiredVal{}
	l.retiredIDs = map[string]int64{}
	l.zero = map[string][]zeroStretch{}
	l.tenantAggs = map[tenantAggKey]map[int64]*tenantAggVal{}
	l.alerts = map[string]int64{}
	l.restoredAt = 0
}

// UnknownInstanceError says the ledger has no instance with that ID.
type UnknownInstanceError struct {
	// ID is the instance asked for.
	ID string
}

func (e *UnknownInstanceError) Error() string {
	return fmt.Sprintf("cost ledger: no instance %q (start it first)", e.ID)
}

// IsUnknownInstance reports whether err is or wraps an UnknownInstanceError.
func IsUnknownInstance(err error) bool {
	var e *UnknownInstanceError
	return errors.As(err, &e)
}

func checkPrices(eff, list market.Price) error {
	if err := eff.Validate(); err != nil {
		return fmt.Errorf("effective price: %w", err)
	}
	if err := list.Validate(); err != nil {
		return fmt.Errorf("list price: %w", err)
	}
	if eff.Currency != list.Currency {
		return fmt.Errorf("effective price in %s but list price in %s: both must be in one currency", eff.Currency, list.Currency)
	}
	return nil
}

// Start records that an instance started at at with these prices.
// Starting a known instance again (or one already compacted) does nothing,
// so replaying a start is harmless.
func (l *Ledger) Start(info InstanceInfo, at time.Time, eff, list market.Price) error {
	if info.ID == "" || info.Pool == "" {
		return errors.New("cost ledger: an instance needs an ID and a pool")
	}
	if !validTime(at) {
		return fmt.Errorf("cost ledger: start of %s at %v: out of range", info.ID, at)
	}
	if err := checkPrices(eff, list); err != nil {
		return fmt.Errorf("cost ledger: starting %s: %w", info.ID, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.inst[info.ID]; ok {
		return nil
	}
	if _, ok := l.retiredIDs[info.ID]; ok {
		return nil
	}
	info.Models = append([]string(nil), info.Models...)
	t := at.UnixNano()
	m := newMeter()
	m.through = l.restoredAt
	m.tokThrough = l.restoredAt
	l.inst[info.ID] = &lifetime{info: info, start: t, m: m,
		segs: []segment{{from: t, eff: eff, list: list, effN: priceNanos(eff.PerHour), listN: priceNanos(list.PerHour)}}}
	return nil
}

// SetPrice records the instance's prices from at on. The same prices again
// (per hour, currency, source) do nothing; a change opens a new price
// segment. A change stamped before the current segment began is stale and
// ignored, as is one after the instance ended.
func (l *Ledger) SetPrice(id string, at time.Time, eff, list market.Price) error {
	if err := checkPrices(eff, list); err != nil {
		return fmt.Errorf("cost ledger: pricing %s: %w", id, err)
	}
	if !validTime(at) {
		return fmt.Errorf("cost ledger: pricing %s at %v: out of range", id, at)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	lt, ok := l.inst[id]
	if !ok {
		if _, gone := l.retiredIDs[id]; gone {
			return nil
		}
		return &UnknownInstanceError{ID: id}
	}
	t := at.UnixNano()
	last := &lt.segs[len(lt.segs)-1]
	if samePrice(last.eff, eff) && samePrice(last.list, list) {
		return nil
	}
	if t < last.from || t < l.restoredAt || (lt.end != 0 && t >= lt.end) {
		return nil
	}
	seg := segment{from: t, eff: eff, list: list, effN: priceNanos(eff.PerHour), listN: priceNanos(list.PerHour)}
	if t == last.from {
		*last = seg
		return nil
	}
	lt.segs = append(lt.segs, seg)
	lt.m.newSegment(t, int32(len(lt.segs)-1))
	return nil
}

func samePrice(a, b market.Price) bool {
	return priceNanos(a.PerHour) == priceNanos(b.PerHour) && a.Currency == b.Currency && a.Source == b.Source && a.Market == b.Market
}

// End records that the instance stopped costing at at (terminated, gone).
// Ending it again keeps the earlier of the two times; ending an instance
// already compacted does nothing.
func (l *Ledger) End(id string, at time.Time) error {
	if !validTime(at) {
		return fmt.Errorf("cost ledger: end of %s at %v: out of range", id, at)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	lt, ok := l.inst[id]
	if !ok {
		if _, gone := l.retiredIDs[id]; gone {
			return nil
		}
		return &UnknownInstanceError{ID: id}
	}
	t := at.UnixNano()
	if t < lt.start {
		t = lt.start
	}
	if lt.end != 0 && lt.end <= t {
		return nil
	}
	lt.end = t
	// Segments that would begin at or after the end never applied.
	for len(lt.segs) > 1 && lt.segs[len(lt.segs)-1].from >= t {
		lt.segs = lt.segs[:len(lt.segs)-1]
	}
	lt.m.stop(t)
	return nil
}

// PriceFunc prices an instance for SyncPool, typically Resolver.Prices.
type PriceFunc func(InstanceInfo) (eff, list market.Price, err error)

// SyncPool makes the ledger's running instances of pool equal to live at
// now: instances not seen before start (at their LaunchedAt, or now), every
// live instance is priced (a new segment where the price changed), and
// running instances of the pool missing from live end at now. Pricing
// errors are returned joined, after the rest is done.
func (l *Ledger) SyncPool(pool string, live []InstanceInfo, now time.Time, prices PriceFunc) error {
	var errs []error
	seen := map[string]bool{}
	for _, info := range live {
		info.Pool = pool
		seen[info.ID] = true
		eff, list, err := prices(info)
		if err != nil {
			errs = append(errs, fmt.Errorf("pricing %s: %w", info.ID, err))
			continue
		}
		start := info.LaunchedAt
		if start.IsZero() || start.After(now) {
			start = now
		}
		if err := l.Start(info, start, eff, list); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := l.SetPrice(info.ID, now, eff, list); err != nil {
			errs = append(errs, err)
		}
	}
	l.mu.RLock()
	var gone []string
	for id, lt := range l.inst {
		if lt.info.Pool == pool && lt.end == 0 && !seen[id] {
			gone = append(gone, id)
		}
	}
	l.mu.RUnlock()
	sort.Strings(gone)
	for _, id := range gone {
		if err := l.End(id, now); err != nil {
			errs = append(errs, err)
		}
	}
	l.noteZero(pool, len(seen), now)
	return errors.Join(errs...)
}

// Meter returns the hot-path meter of an instance, or nil (which ignores
// everything) if the ledger does not know it.
func (l *Ledger) Meter(id string) *Meter {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if lt, ok := l.inst[id]; ok {
		return lt.m
	}
	return nil
}

// BusyStart is Meter(id).BusyStart(at): the backend's requests in flight
// went from 0 to 1.
func (l *Ledger) BusyStart(id string, at time.Time) { l.Meter(id).BusyStart(at) }

// BusyEnd is Meter(id).BusyEnd(at): the backend's requests in flight went
// from 1 to 0.
func (l *Ledger) BusyEnd(id string, at time.Time) { l.Meter(id).BusyEnd(at) }

// AddBusy is Meter(id).AddBusy.
func (l *Ledger) AddBusy(id string, from, to time.Time) { l.Meter(id).AddBusy(from, to) }

// AddTokens is Meter(id).AddTokens.
func (l *Ledger) AddTokens(id, model string, prompt, completion int64, at time.Time) {
	l.Meter(id).AddTokens(model, prompt, completion, at)
}

// Pools returns the pools the ledger has data for, sorted.
func (l *Ledger) Pools() []string {
	l.mu.RLock()
	defer l.mu.RUnlock()
	set := map[string]bool{}
	for _, lt := range l.inst {
		set[lt.info.Pool] = true
	}
	for k := range l.aggs {
		set[k.Pool] = true
	}
	for k := range l.retired {
		set[k.Pool] = true
	}
	out := make([]string, 0, len(set))
	for p := range set {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// Lifetime is a read-only view of one recorded instance.
type Lifetime struct {
	// Info describes the instance.
	Info InstanceInfo
	// Start is when it began to cost.
	Start time.Time
	// End is zero while the instance runs.
	End time.Time
	// Segments are the prices in force, each from its From on.
	Segments []Segment
}

// Segment is a stretch of a lifetime at one price.
type Segment struct {
	// From is when the prices took effect.
	From time.Time
	// Effective is the price paid; List its on-demand equivalent.
	Effective market.Price
	List      market.Price
}

// Lifetimes returns the instances of pool ("" for all) that still have
// their own record (not yet compacted), sorted by start then ID.
func (l *Ledger) Lifetimes(pool string) []Lifetime {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var out []Lifetime
	for _, lt := range l.inst {
		if pool != "" && lt.info.Pool != pool {
			continue
		}
		v := Lifetime{Info: lt.info, Start: time.Unix(0, lt.start).UTC()}
		if lt.end != 0 {
			v.End = time.Unix(0, lt.end).UTC()
		}
		for _, s := range lt.segs {
			v.Segments = append(v.Segments, Segment{From: time.Unix(0, s.from).UTC(), Effective: s.eff, List: s.list})
		}
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Start.Equal(out[j].Start) {
			return out[i].Start.Before(out[j].Start)
		}
		return out[i].Info.ID < out[j].Info.ID
	})
	return out
}

// validTime bounds times to what int64 nanoseconds hold, with margin.
func validTime(t time.Time) bool {
	return t.Year() >= 1970 && t.Year() < 2200
}
