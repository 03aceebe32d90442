package cost

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tidegpu/tidegpu/internal/market"
)

// Query names the offering an instance runs on, for pricing.
type Query struct {
	// Pool selects overrides; the rest name the offering.
	Pool         string
	Provider     string
	Region       string
	Zone         string
	InstanceType string
	Market       market.Market
}

func (q Query) String() string {
	return fmt.Sprintf("%s %s %s/%s %s (pool %s)", q.Provider, q.InstanceType, q.Region, q.Zone, q.Market, q.Pool)
}

// Override is a pool's own price, such as a negotiated rate.
type Override struct {
	// Pool the override applies to.
	Pool string `json:"pool"`
	// InstanceType limits the override to one type; empty means any.
	InstanceType string `json:"instanceType,omitempty"`
	// Market limits the override to one market; empty means any.
	Market market.Market `json:"market,omitempty"`
	// PerHour is the price of one instance-hour in Currency.
	PerHour  float64 `json:"perHour"`
	Currency string  `json:"currency"`
}

// NoPriceError says no price is known for an offering, not even the
// on-demand price a spot instance could fall back to.
type NoPriceError struct {
	// Query is the offering nobody had a price for.
	Query Query
}

func (e *NoPriceError) Error() string {
	return fmt.Sprintf("no price for %s: add a pool price override or a catalog row, or use a provider that reports live prices", e.Query)
}

// IsNoPrice reports whether err is or wraps a NoPriceError.
func IsNoPrice(err error) bool {
	var e *NoPriceError
	return errors.As(err, &e)
}

// DefaultMaxLiveAge is how long a live price is trusted when
// Resolver.MaxLiveAge is zero.
const DefaultMaxLiveAge = time.Hour

// Resolver prices an offering from, in order: the pool's override, a live
// price no older than MaxLiveAge, the catalog; and for spot with none of
// those, the on-demand price found the same way, labelled
// market.PriceFallback with a note saying so (never silently: a spot
// instance priced at on-demand rates is visible as such). It is pure given
// its inputs; Live may be updated concurrently.
type Resolver struct {
	// Catalog is the offline table, usually market.DefaultCatalog().
	Catalog *market.Catalog
	// Live holds the providers' last reported prices; nil for none.
	Live *LivePrices
	// Overrides are the pools' own prices; the first match wins.
	Overrides []Override
	// MaxLiveAge is how old a live price may be; 0 means DefaultMaxLiveAge.
	MaxLiveAge time.Duration
}

// Price returns the effective price of the offering at now.
func (r *Resolver) Price(q Query, now time.Time) (market.Price, error) {
	p, notes, ok := r.find(q, q.Market, now)
	if ok {
		return p, nil
	}
	if q.Market == market.Spot {
		od, odNotes, ok := r.find(q, market.OnDemand, now)
		if ok {
			od.Note = fmt.Sprintf("fallback: no spot price for %s %s in %s%s; the on-demand price (%s) stands in%s",
				q.InstanceType, q.Provider, q.Region, zoneSuffix(q.Zone), od.Source, joinNotes(notes, odNotes))
			od.Source = market.PriceFallback
			return od, nil
		}
	}
	return market.Price{}, &NoPriceError{Query: q}
}

// ListPrice returns the on-demand equivalent of the offering at now: the
// price FOCUS calls list, against which savings are counted.
func (r *Resolver) ListPrice(q Query, now time.Time) (market.Price, error) {
	p, _, ok := r.find(q, market.OnDemand, now)
	if !ok {
		q.Market = market.OnDemand
		return market.Price{}, &NoPriceError{Query: q}
	}
	return p, nil
}

// Prices returns the effective and the list price. A missing list price is
// not an error when the effective price is known: the effective price
// stands in (savings zero) and its note says so.
func (r *Resolver) Prices(q Query, now time.Time) (eff, list market.Price, err error) {
	eff, err = r.Price(q, now)
	if err != nil {
		return market.Price{}, market.Price{}, err
	}
	list, err = r.ListPrice(q, now)
	if err != nil || list.Currency != eff.Currency {
		list = eff
		list.Note = "no on-demand price in " + eff.Currency + " known; the effective price stands in as list price"
	}
	return eff, list, nil
}

func (r *Resolver) find(q Query, m market.Market, now time.Time) (market.Price, []string, bool) {
	var notes []string
	for _, o := range r.Overrides {
		if o.Pool == q.Pool && (o.InstanceType == "" || o.InstanceType == q.InstanceType) && (o.Market == "" || o.Market == m) {
			return market.Price{PerHour: o.PerHour, Currency: o.Currency, Source: market.PriceOverride, Market: m,
				Note: "override: pool " + o.Pool + " sets its own price"}, nil, true
		}
	}
	if r.Live != nil {
		if lp, ok := r.Live.lookup(q.Provider, q.Region, q.Zone, q.InstanceType, m); ok {
			maxAge := r.MaxLiveAge
			if maxAge <= 0 {
				maxAge = DefaultMaxLiveAge
			}
			if age := now.Sub(lp.at); age <= maxAge {
				return market.Price{PerHour: lp.perHour, Currency: lp.currency, Source: market.PriceLive, AsOf: lp.at, Market: m,
					Note: "live: reported by the " + q.Provider + " provider"}, nil, true
			} else {
				notes = append(notes, fmt.Sprintf("the live %s price is %s old, beyond the %s limit", m, age.Round(time.Second), maxAge))
			}
		}
	}
	if p, ok := r.Catalog.Price(q.Provider, q.Region, q.InstanceType, q.Zone, m); ok {
		if len(notes) > 0 {
			p.Note += "; " + notes[0]
		}
		return p, nil, true
	}
	return market.Price{}, notes, false
}

func zoneSuffix(z string) string {
	if z == "" {
		return ""
	}
	return "/" + z
}

func joinNotes(a, b []string) string {
	s := ""
	for _, n := range append(append([]string(nil), a...), b...) {
		s += "; " + n
	}
	return s
}

// LivePrices holds the last prices providers reported through
// provider.OfferingSource, with the time each was read. Safe for
// concurrent use.
type LivePrices struct {
	mu sync.RWMutex
	m  map[liveKey]livePrice
}

// liveKey names an offering of a provider in a region; zone "" is
// region-wide.
type liveKey struct {
	provider, region, zone, instanceType string
	market                               market.Market
}

type livePrice struct {
	perHour  float64
	currency string
	at       time.Time
}

// NewLivePrices returns an empty store.
func NewLivePrices() *LivePrices { return &LivePrices{m: map[liveKey]livePrice{}} }

// Update records offerings read from a provider at time at (the
// providers' provider.Offering is market.Offering). Offerings
// without a price (PricePerHour 0 or no currency), or whose PriceSource says
// the provider itself took the figure from somewhere other than its live
// API, are skipped: only prices labelled live (or unlabelled) are live.
func (lp *LivePrices) Update(providerName, region string, offerings []market.Offering, at time.Time) {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	for _, o := range offerings {
		if o.PricePerHour <= 0 || o.PricePerHour > maxPerHour || !validCurrency(o.Currency) {
			continue
		}
		if o.PriceSource != "" && o.PriceSource != market.PriceLive {
			continue
		}
		k := liveKey{providerName, region, o.Zone, o.InstanceType, o.Market}
		if old, ok := lp.m[k]; ok && old.at.After(at) {
			continue
		}
		lp.m[k] = livePrice{o.PricePerHour, o.Currency, at}
	}
}

// lookup returns the zone's live price, else a region-wide one (zone "").
func (lp *LivePrices) lookup(providerName, region, zone, instanceType string, m market.Market) (livePrice, bool) {
	if lp == nil {
		return livePrice{}, false
	}
	lp.mu.RLock()
	defer lp.mu.RUnlock()
	if p, ok := lp.m[liveKey{providerName, region, zone, instanceType, m}]; ok {
		return p, true
	}
	p, ok := lp.m[liveKey{providerName, region, "", instanceType, m}]
	return p, ok
}
