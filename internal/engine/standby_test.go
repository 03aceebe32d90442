package engine

import (
	"testing"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/provider"
)

func TestStandbyPrice(t *testing.T) {
	cases := []struct {
		name    string
		pricing *tidev1.PricingSpec
		per     float64
		cur     string
		source  string
		wantErr bool
	}{
		{"default: a 100 GB gp3 disk", nil, 100 * 0.08 / 730, "USD", provider.PriceCatalog, false},
		{"override", &tidev1.PricingSpec{StandbyPerHour: "0.02"}, 0.02, "USD", provider.PriceOverride, false},
		{"override in the pool's currency", &tidev1.PricingSpec{StandbyPerHour: "0.15", Currency: "CNY"}, 0.15, "CNY", provider.PriceOverride, false},
		{"bad override", &tidev1.PricingSpec{StandbyPerHour: "cheap"}, 0, "", "", true},
	}
	for _, c := range cases {
		p, err := StandbyPrice(&tidev1.TidePoolSpec{Pricing: c.pricing})
		if c.wantErr {
			if err == nil {
				t.Errorf("%s: no error", c.name)
			}
			continue
		}
		if err != nil || p.PerHour != c.per || p.Currency != c.cur || p.Source != c.source {
			t.Errorf("%s: %+v, %v; want %v %s (%s)", c.name, p, err, c.per, c.cur, c.source)
		}
	}
}
