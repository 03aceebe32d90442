package tencent

import (
	"context"
	"errors"
	"fmt"
	"time"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/provider"
)

// offerKey names an offering.
type offerKey struct {
	Zone, InstanceType string
	Market             provider.Market
}

// priceKey names a live price.
type priceKey = offerKey

// priceEntry is a cached InquiryPriceRunInstances result.
type priceEntry struct {
	price    float64
	noCap    bool // the API said the offering has no capacity
	err      error
	until    time.Time
	hasPrice bool
}

// priceErrTTL is how long a failed price inquiry (other than no capacity)
// is remembered, so that a failing price API is not asked every round.
const priceErrTTL = 30 * time.Second

// markNoCapacity remembers that an offering had no capacity.
func (p *Provider) markNoCapacity(k offerKey) {
	p.mu.Lock()
	p.noCap[k] = p.clock.Now().Add(p.opts.CapacityTTL)
	p.mu.Unlock()
}

// Offerings implements provider.OfferingSource: each of the spec's
// instance types (spec.instanceType, then spec.placement.instanceTypes) in
// each of its zones (spec.placement.availabilityZones, else
// spec.availabilityZone), on the spot and on-demand markets, priced by
// InquiryPriceRunInstances (PriceLive; cached per offering). Without a
// live price the embedded table stands in (PriceCatalog, on-demand); a
// spot offering without a live spot price carries the on-demand price
// (PriceFallback). An offering the API reported without capacity (at
// launch or price inquiry) is not Available for CapacityTTL.
func (p *Provider) Offerings(ctx context.Context, spec *tidev1.TidePoolSpec) ([]provider.Offering, error) {
	if spec == nil {
		return nil, errors.New("tencent: offerings: no spec")
	}
	types, zones := spec.InstanceTypes(), spec.Zones()
	if len(types) == 0 || len(zones) == 0 {
		return nil, errors.New("tencent: offerings: spec.instanceType and spec.availabilityZone (or spec.placement.availabilityZones) are required")
	}
	out := make([]provider.Offering, 0, 2*len(types)*len(zones))
	for _, typ := range types {
		cat, inCatalog := catalogPrice(typ)
		for _, zone := range zones {
			od := p.price(ctx, spec.ImageID, offerKey{Zone: zone, InstanceType: typ, Market: provider.MarketOnDemand})
			sp := p.price(ctx, spec.ImageID, offerKey{Zone: zone, InstanceType: typ, Market: provider.MarketSpot})
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("tencent: offerings: %w", err)
			}
			out = append(out,
				p.offering(zone, typ, provider.MarketSpot, sp, od, cat, inCatalog),
				p.offering(zone, typ, provider.MarketOnDemand, od, od, cat, inCatalog))
		}
	}
	return out, nil
}

// offering composes one offering from the live prices and the catalog.
func (p *Provider) offering(zone, typ string, m provider.Market, live, onDemand priceEntry, cat float64, inCatalog bool) provider.Offering {
	o := provider.Offering{InstanceType: typ, Zone: zone, Market: m, Currency: p.opts.Currency, Available: !live.noCap}
	o.PricePerHour, o.PriceSource = pickPrice(m, live, onDemand, cat, inCatalog)
	p.mu.Lock()
	if until, ok := p.noCap[offerKey{Zone: zone, InstanceType: typ, Market: m}]; ok {
		if p.clock.Now().Before(until) {
			o.Available = false
		} else {
			delete(p.noCap, offerKey{Zone: zone, InstanceType: typ, Market: m})
		}
	}
	p.mu.Unlock()
	return o
}

// pickPrice chooses a price and says where it came from: the market's live
// price; for spot without one, the on-demand price (live, else catalog)
// labelled PriceFallback; for on-demand without one, the catalog; else 0
// with no source.
func pickPrice(m provider.Market, live, onDemand priceEntry, cat float64, inCatalog bool) (float64, string) {
	switch {
	case live.hasPrice:
		return live.price, provider.PriceLive
	case m == provider.MarketSpot && onDemand.hasPrice:
		return onDemand.price, provider.PriceFallback
	case m == provider.MarketSpot && inCatalog:
		return cat, provider.PriceFallback
	case inCatalog:
		return cat, provider.PriceCatalog
	default:
		return 0, ""
	}
}

// price returns the (cached) live price of an offering.
func (p *Provider) price(ctx context.Context, imageID string, k priceKey) priceEntry {
	now := p.clock.Now()
	p.mu.Lock()
	e, ok := p.prices[k]
	p.mu.Unlock()
	if ok && now.Before(e.until) {
		return e
	}
	if imageID == "" {
		// InquiryPriceRunInstances requires ImageId.
		return priceEntry{err: errors.New("no imageId to ask a price with")}
	}
	params := inquiryPriceParams{
		InstanceChargeType: tidev1.ChargeOnDemand,
		Placement:          placement{Zone: k.Zone},
		InstanceType:       k.InstanceType,
		ImageId:            imageID,
		InstanceCount:      1,
	}
	if k.Market == provider.MarketSpot {
		params.InstanceChargeType = tidev1.ChargeSpot
		params.InstanceMarketOptions = spotOptions(p.opts.SpotMaxPrice)
	}
	body, err := p.api.call(ctx, "InquiryPriceRunInstances", params)
	if err == nil {
		var v float64
		if v, err = parseInquiryPrice(body); err == nil {
			e = priceEntry{price: v, hasPrice: true, until: now.Add(p.opts.PriceCacheTTL)}
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			return priceEntry{err: err}
		}
		e = priceEntry{err: err, until: now.Add(priceErrTTL)}
		if classify(apiCode(err)) == kindCapacity {
			e.noCap = true
			e.until = now.Add(p.opts.CapacityTTL)
		}
	}
	p.mu.Lock()
	p.prices[k] = e
	p.mu.Unlock()
	return e
}
