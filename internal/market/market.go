package market

// Market is the purchasing option of an instance.
type Market string

// Markets.
const (
	Spot     Market = "spot"
	OnDemand Market = "on-demand"
)

// chargeOnDemand is the seed's instanceChargeType for on-demand
// (tidev1.ChargeOnDemand, copied so that this package imports nothing of the
// project; internal/provider's tests check that the two agree).
const chargeOnDemand = "POSTPAID_BY_HOUR"

// For maps the seed's instanceChargeType to a Market (spot unless the
// charge type says on-demand).
func For(chargeType string) Market {
	if chargeType == chargeOnDemand {
		return OnDemand
	}
	return Spot
}

// Price sources, so that every price shown says where it came from.
const (
	PriceCatalog  = "catalog"  // the embedded offline table
	PriceLive     = "live"     // the provider's price API, just now
	PriceOverride = "override" // the pool's own setting
	PriceFallback = "fallback" // no spot price known: the on-demand price stands in
)

// Offering is one way to run an instance: type x zone x market, with its
// price per hour and whether capacity is there now. Spot is data, not a
// method: placement picks among offerings. Providers list them
// (provider.OfferingSource; provider.Offering is this type) and cost records
// their prices (cost.LivePrices).
type Offering struct {
	InstanceType string `json:"instanceType"`
	Zone         string `json:"zone"`
	Market       Market `json:"market"`
	// PricePerHour in Currency; 0 when unknown.
	PricePerHour float64 `json:"pricePerHour"`
	Currency     string  `json:"currency,omitempty"`
	// PriceSource is one of the Price* constants.
	PriceSource string `json:"priceSource,omitempty"`
	// Available is false while the provider reports no capacity.
	Available bool `json:"available"`
}

// MaxPerHour is the sanity bound for a price per instance-hour: a catalog
// row, a live price or a Price above it is refused.
const MaxPerHour = 1_000_000.0

// ValidCurrency reports whether c can be a currency code: 3 to 8 upper-case
// ASCII letters (ISO 4217 codes such as USD and CNY are 3).
func ValidCurrency(c string) bool {
	if len(c) < 3 || len(c) > 8 {
		return false
	}
	for i := 0; i < len(c); i++ {
		if c[i] < 'A' || c[i] > 'Z' {
			return false
		}
	}
	return true
}
