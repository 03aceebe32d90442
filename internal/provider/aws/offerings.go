package aws

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/provider"
)

// Currency of every price this provider reports.
const Currency = "USD"

// productLinux is the spot price product description for Linux instances
// in a VPC (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeSpotPriceHistory.html).
const productLinux = "Linux/UNIX"

// offeringKey names an offering.
type offeringKey struct {
	Zone         string
	InstanceType string
	Market       provider.Market
}

// priceEntry is the spot prices of one instance type by zone, as fetched at.
type priceEntry struct {
	at     time.Time
	byZone map[string]float64
}

// Offerings lists each of the spec's instance types (spec.instanceType,
// then spec.placement.instanceTypes) in each zone (spec.placement.
// availabilityZones, else the spec's zone, else Options.Zones, else the
// zones with a spot price for any of the types), spot and on-demand. Spot
// prices are live (one DescribeSpotPriceHistory for all the types, the
// latest price per type and zone, cached for PriceCacheTTL); a zone
// without one is priced at the on-demand price and labelled PriceFallback.
// On-demand prices come from a small embedded table (PriceCatalog).
// Offerings EC2 refused for capacity in the last UnavailableTTL are not
// Available. When the price API fails, spot offerings fall back and a
// warning is logged.
func (p *Provider) Offerings(ctx context.Context, spec *tidev1.TidePoolSpec) ([]provider.Offering, error) {
	var itypes []string
	if spec != nil {
		itypes = spec.InstanceTypes()
	}
	if len(itypes) == 0 {
		return nil, fmt.Errorf("listing offerings: %w: spec.instanceType is required on aws", ErrInvalidRequest)
	}
	spot, err := p.spotPrices(ctx, itypes)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("listing offerings for %s: %w", strings.Join(itypes, ", "), err)
		}
		p.log.Warn("spot prices unavailable; spot offerings use the on-demand price", "instanceTypes", itypes, "region", p.opts.Region, "err", err)
		spot = nil
	}
	zones := offeringZones(spec.Zones(), p.opts.Zones, spot)
	now := p.clock.Now()
	var out []provider.Offering
	p.mu.Lock()
	unavailable := func(k offeringKey) bool { return now.Before(p.unavailable[k]) }
	for _, itype := range itypes {
		od, odKnown := onDemandPrice(p.opts.Region, itype)
		out = append(out, buildOfferings(itype, zones, spot[itype], od, odKnown, unavailable)...)
	}
	p.mu.Unlock()
	return out, nil
}

// offeringZones: the spec's zones, else the configured zones, else the
// zones with a spot price for any type (sorted), else one zone-less
// offering ("").
func offeringZones(specZones, configured []string, spot map[string]map[string]float64) []string {
	switch {
	case len(specZones) > 0:
		return specZones
	case len(configured) > 0:
		return configured
	}
	seen := map[string]bool{}
	var zs []string
	for _, byZone := range spot {
		for z := range byZone {
			if !seen[z] {
				seen[z] = true
				zs = append(zs, z)
			}
		}
	}
	if len(zs) == 0 {
		return []string{""}
	}
	sort.Strings(zs)
	return zs
}

// buildOfferings is the pure part of Offerings: spot then on-demand for
// each zone, with prices and their sources.
func buildOfferings(itype string, zones []string, spot map[string]float64, od float64, odKnown bool, unavailable func(offeringKey) bool) []provider.Offering {
	out := make([]provider.Offering, 0, 2*len(zones))
	for _, z := range zones {
		s := provider.Offering{InstanceType: itype, Zone: z, Market: provider.MarketSpot, Currency: Currency}
		if price, ok := spot[z]; ok {
			s.PricePerHour, s.PriceSource = price, provider.PriceLive
		} else if odKnown {
			s.PricePerHour, s.PriceSource = od, provider.PriceFallback
		}
		d := provider.Offering{InstanceType: itype, Zone: z, Market: provider.MarketOnDemand, Currency: Currency}
		if odKnown {
			d.PricePerHour, d.PriceSource = od, provider.PriceCatalog
		}
		for _, o := range []*provider.Offering{&s, &d} {
			o.Available = !unavailable(offeringKey{Zone: o.Zone, InstanceType: o.InstanceType, Market: o.Market})
			out = append(out, *o)
		}
	}
	return out
}

// spotPrices returns the current spot price of each type in each zone that
// has one (type -> zone -> price). Types whose cached prices are fresh are
// not asked again; the others are asked in one paginated call.
func (p *Provider) spotPrices(ctx context.Context, itypes []string) (map[string]map[string]float64, error) {
	now := p.clock.Now()
	out := make(map[string]map[string]float64, len(itypes))
	var stale []string
	p.mu.Lock()
	for _, t := range itypes {
		if e, ok := p.prices[t]; ok && now.Sub(e.at) < p.opts.PriceCacheTTL {
			out[t] = e.byZone
		} else {
			stale = append(stale, t)
		}
	}
	p.mu.Unlock()
	if len(stale) == 0 {
		return out, nil
	}

	// With a StartTime, EC2 also returns the last change before it: the
	// price in effect now.
	in := &ec2.DescribeSpotPriceHistoryInput{
		ProductDescriptions: []string{productLinux},
		StartTime:           aws.Time(now),
	}
	for _, t := range stale {
		in.InstanceTypes = append(in.InstanceTypes, types.InstanceType(t))
	}
	var history []types.SpotPrice
	pages := ec2.NewDescribeSpotPriceHistoryPaginator(p.client, in, func(o *ec2.DescribeSpotPriceHistoryPaginatorOptions) {
		o.StopOnDuplicateToken = true
	})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, classify(err, "", strings.Join(stale, ","), provider.MarketSpot)
		}
		history = append(history, page.SpotPriceHistory...)
	}
	p.mu.Lock()
	for _, t := range stale {
		byZone := latestSpotPrices(history, t)
		p.prices[t] = priceEntry{at: now, byZone: byZone}
		out[t] = byZone
	}
	p.mu.Unlock()
	return out, nil
}

// latestSpotPrices keeps, for each zone, the most recent parsable price of
// the type for Linux/UNIX.
func latestSpotPrices(history []types.SpotPrice, itype string) map[string]float64 {
	type point struct {
		at    time.Time
		price float64
	}
	latest := map[string]point{}
	for _, h := range history {
		if string(h.InstanceType) != itype || (h.ProductDescription != "" && h.ProductDescription != types.RIProductDescription(productLinux)) {
			continue
		}
		zone := aws.ToString(h.AvailabilityZone)
		price, ok := parsePrice(aws.ToString(h.SpotPrice))
		if zone == "" || !ok {
			continue
		}
		at := aws.ToTime(h.Timestamp)
		if cur, seen := latest[zone]; !seen || at.After(cur.at) {
			latest[zone] = point{at: at, price: price}
		}
	}
	out := make(map[string]float64, len(latest))
	for z, pt := range latest {
		out[z] = pt.price
	}
	return out
}

// parsePrice reads a price as EC2 writes it ("0.401200"): a finite,
// non-negative decimal.
func parsePrice(s string) (float64, bool) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, false
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return 0, false
	}
	return v, true
}

// markUnavailable records that EC2 refused an offering for capacity.
func (p *Provider) markUnavailable(k offeringKey) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.unavailable[k] = p.clock.Now().Add(p.opts.UnavailableTTL)
	for key, until := range p.unavailable {
		if !p.clock.Now().Before(until) {
			delete(p.unavailable, key)
		}
	}
}
