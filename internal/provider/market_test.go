package provider_test

import (
	"testing"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/market"
	"github.com/tidegpu/tidegpu/internal/provider"
)

// TestMarketForChargeTypes: market.For copies the seed's on-demand charge
// type instead of importing api/v1; the two must agree.
func TestMarketForChargeTypes(t *testing.T) {
	for ct, want := range map[string]provider.Market{
		tidev1.ChargeOnDemand: provider.MarketOnDemand,
		tidev1.ChargeSpot:     provider.MarketSpot,
		"":                    provider.MarketSpot,
	} {
		if got := provider.MarketFor(ct); got != want {
			t.Errorf("MarketFor(%q) = %q, want %q", ct, got, want)
		}
		if got := market.For(ct); got != want {
			t.Errorf("market.For(%q) = %q, want %q", ct, got, want)
		}
	}
	if provider.MarketSpot != "spot" || provider.MarketOnDemand != "on-demand" {
		t.Errorf("markets %q and %q, want spot and on-demand", provider.MarketSpot, provider.MarketOnDemand)
	}
}
