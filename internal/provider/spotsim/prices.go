package spotsim

import (
	"fmt"

	"github.com/tidegpu/tidegpu/internal/market"
	"github.com/tidegpu/tidegpu/internal/provider"
)

// Currency of every price the simulator reports.
const Currency = "USD"

// ZonePrices are a zone's own prices per instance-hour in USD; 0 means not
// set (the catalog decides).
type ZonePrices struct {
	Spot     float64 `json:"spot,omitempty"`
	OnDemand float64 `json:"onDemand,omitempty"`
}

// price is one resolved price.
type price struct {
	perHour float64
	source  string // provider.Price*; "" when unknown
	note    string
}

// resolvePrice prices an offering of the simulator, in this order:
//  1. Options.Prices[zone] (PriceOverride);
//  2. the catalog for CatalogProvider in the zone's region (PriceCatalog);
//  3. on-demand only: the catalog's on-demand price in DefaultRegion
//     (PriceCatalog, with a note), since on-demand prices of a type differ
//     little between regions and the catalog lists few regions;
//  4. spot only: the on-demand price found by 1-3, labelled PriceFallback,
//     never silently (a regional spot price is not guessed from another
//     region's);
//  5. unknown: 0 with no source.
func (p *Provider) resolvePrice(zone, itype string, m provider.Market) price {
	if zp, ok := p.opts.Prices[zone]; ok {
		v := zp.Spot
		if m == provider.MarketOnDemand {
			v = zp.OnDemand
		}
		if v > 0 {
			return price{v, provider.PriceOverride, "set for zone " + zone}
		}
	}
	region := market.RegionOf(zone)
	if cp, ok := p.opts.Catalog.Price(p.opts.CatalogProvider, region, itype, zone, m); ok && cp.Currency == Currency {
		return price{cp.PerHour, provider.PriceCatalog, cp.Note}
	}
	if m == provider.MarketOnDemand {
		if region != p.opts.DefaultRegion {
			if cp, ok := p.opts.Catalog.Price(p.opts.CatalogProvider, p.opts.DefaultRegion, itype, "", m); ok && cp.Currency == Currency {
				return price{cp.PerHour, provider.PriceCatalog,
					fmt.Sprintf("%s has no on-demand row in the catalog; the %s price stands in (%s)", region, p.opts.DefaultRegion, cp.Note)}
			}
		}
		return price{}
	}
	od := p.resolvePrice(zone, itype, provider.MarketOnDemand)
	if od.source == "" {
		return price{}
	}
	return price{od.perHour, provider.PriceFallback,
		fmt.Sprintf("no spot price for %s in %s; the on-demand price (%s) stands in", itype, zone, od.source)}
}

// priceOf returns the cached price of an offering.
func (p *Provider) priceOfLocked(zone, itype string, m provider.Market) price {
	k := offerKey{zone, itype, m}
	if pr, ok := p.prices[k]; ok {
		return pr
	}
	pr := p.resolvePrice(zone, itype, m)
	p.prices[k] = pr
	return pr
}

// catalogOrDefault returns c, or the embedded catalog.
func catalogOrDefault(c *market.Catalog) *market.Catalog {
	if c != nil {
		return c
	}
	return market.DefaultCatalog()
}
