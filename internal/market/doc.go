// Package market is the bottom of TideGPU's package tree: what every
// package that prices or places an instance shares, and nothing else.
//
//   - Markets: Spot and OnDemand, and For, which maps the seed's
//     instanceChargeType to one.
//   - Price sources (PriceCatalog, PriceLive, PriceOverride, PriceFallback),
//     so that every price shown says where it came from, and Offering, one
//     instance type × zone × market with its price.
//   - Geography: RegionOf, the region a zone belongs to, for AWS, GCP, Azure
//     and Tencent Cloud zone names.
//   - The embedded offline price catalog (catalog.csv, every figure with its
//     date and source): Catalog, DefaultCatalog, ParseCatalog, and Price, a
//     price per instance-hour with its source.
//
// It imports nothing of the project, so that the providers, the spot-market
// simulator, placement and cost can all import it without importing one
// another.
package market
