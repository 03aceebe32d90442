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

// Offerings lists the spec's instance type in each zone (the spec's zone,
// else Options.Zones, else the zones with a spot price), spot and
// on-demand. Spot prices are live (DescribeSpotPriceHistory, the latest
// price per zone, cached for PriceCacheTTL); a zone without one is priced
// at the on-demand price and labelled PriceFallback. On-demand prices come
// from a small embedded table (PriceCatalog). Offerings EC2 refused for
// capacity in the last UnavailableTTL are not Available. When the price
// API fails, spot offerings fall back and a warning is logged.
func (p *Provider) Offerings(ctx context.Context, spec *tidev1.TidePoolSpec) ([]provider.Offering, error) {
	if spec == nil || spec.InstanceType == "" {
		return nil, fmt.Errorf("listing offerings: %w: spec.instanceType is required on aws", ErrInvalidRequest)
	}
	itype := spec.InstanceType
	spot, err := p.spotPrices(ctx, itype)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("listing offerings for %s: %w", itype, err)
		}
		p.log.Warn("spot prices unavailable; spot offerings use the on-demand price", "instanceType", itype, "region", p.opts.Region, "err", err)
		spot = nil
	}
	zones := offeringZones(spec.AvailabilityZone, p.opts.Zones, spot)
	od, odKnown := onDemandPrice(p.opts.Region, itype)
	now := p.clock.Now()
	p.mu.Lock()
	unavailable := func(k offeringKey) bool { return now.Before(p.unavailable[k]) }
	out := buildOfferings(itype, zones, spot, od, odKnown, unavailable)
	p.mu.Unlock()
	return out, nil
}

// offeringZones: the spec's zone, else the configured zones, else the
// zones with a spot price (sorted), else one zone-less offering ("").
func offeringZones(specZone string, configured []string, spot map[string]float64) []string {
	switch {
	case specZone != "":
		return []string{specZone}
	case len(configured) > 0:
		return configured
	case len(spot) > 0:
		zs := make([]string, 0, len(spot))
		for z := range spot {
			zs = append(zs, z)
		}
		sort.Strings(zs)
		return zs
	}
	return []string{""}
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

// spotPrices returns the current spot price of the type in each zone that
// has one.
func (p *Provider) spotPrices(ctx context.Context, itype string) (map[string]float64, error) {
	now := p.clock.Now()
	p.mu.Lock()
	if e, ok := p.prices[itype]; ok && now.Sub(e.at) < p.opts.PriceCacheTTL {
		p.mu.Unlock()
		return e.byZone, nil
	}
	p.mu.Unlock()

	// With a StartTime, EC2 also returns the last change before it: the
	// price in effect now.
	in := &ec2.DescribeSpotPriceHistoryInput{
		InstanceTypes:       []types.InstanceType{types.InstanceType(itype)},
		ProductDescriptions: []string{productLinux},
		StartTime:           aws.Time(now),
	}
	var history []types.SpotPrice
	pages := ec2.NewDescribeSpotPriceHistoryPaginator(p.client, in, func(o *ec2.DescribeSpotPriceHistoryPaginatorOptions) {
		o.StopOnDuplicateToken = true
	})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, classify(err, "", itype, provider.MarketSpot)
		}
		history = append(history, page.SpotPriceHistory...)
	}
	byZone := latestSpotPrices(history, itype)
	p.mu.Lock()
	p.prices[itype] = priceEntry{at: now, byZone: byZone}
	p.mu.Unlock()
	return byZone, nil
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
