package cost

import (
	"strings"
	"testing"
	"time"

	"github.com/tidegpu/tidegpu/internal/market"
)

var t0 = time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)

func TestResolverOrder(t *testing.T) {
	q := Query{Pool: "chat", Provider: "aws", Region: "us-east-1", Zone: "us-east-1a", InstanceType: "g5.xlarge", Market: market.Spot}
	spot := market.Offering{InstanceType: "g5.xlarge", Zone: "us-east-1a", Market: market.Spot, PricePerHour: 0.41,
		Currency: "USD", PriceSource: market.PriceLive, Available: true}
	od := market.Offering{InstanceType: "g5.xlarge", Zone: "us-east-1a", Market: market.OnDemand, PricePerHour: 1.0,
		Currency: "USD", PriceSource: market.PriceLive, Available: true}
	noSpot := mustCatalog(t, "aws,us-east-1,,g5.xlarge,on-demand,1.006,USD,2026-07-20,false,cat\n")
	cases := []struct {
		name      string
		q         Query
		catalog   *market.Catalog
		overrides []Override
		live      []market.Offering
		liveAge   time.Duration
		want      float64
		source    string
		market    market.Market
		note      string
		wantErr   bool
	}{
		{name: "override beats live and catalog", q: q, catalog: market.DefaultCatalog(), live: []market.Offering{spot},
			overrides: []Override{{Pool: "chat", PerHour: 0.2, Currency: "USD"}}, want: 0.2, source: market.PriceOverride, market: market.Spot},
		{name: "override of another pool ignored", q: q, catalog: market.DefaultCatalog(), live: []market.Offering{spot},
			overrides: []Override{{Pool: "other", PerHour: 0.2, Currency: "USD"}}, want: 0.41, source: market.PriceLive, market: market.Spot},
		{name: "override for another market ignored", q: q, catalog: market.DefaultCatalog(),
			overrides: []Override{{Pool: "chat", Market: market.OnDemand, PerHour: 0.9, Currency: "USD"}},
			want:      0.39388, source: market.PriceCatalog, market: market.Spot},
		{name: "override for another type ignored", q: q, catalog: market.DefaultCatalog(),
			overrides: []Override{{Pool: "chat", InstanceType: "g5.2xlarge", PerHour: 0.9, Currency: "USD"}},
			want:      0.39388, source: market.PriceCatalog, market: market.Spot},
		{name: "fresh live beats catalog", q: q, catalog: market.DefaultCatalog(), live: []market.Offering{spot}, liveAge: 14 * time.Minute,
			want: 0.41, source: market.PriceLive, market: market.Spot},
		{name: "stale live loses to catalog, with a note", q: q, catalog: market.DefaultCatalog(), live: []market.Offering{spot}, liveAge: 16 * time.Minute,
			want: 0.39388, source: market.PriceCatalog, market: market.Spot, note: "16m0s old"},
		{name: "catalog spot", q: q, catalog: market.DefaultCatalog(), want: 0.39388, source: market.PriceCatalog, market: market.Spot},
		{name: "no spot anywhere: on-demand labelled fallback", q: q, catalog: noSpot,
			want: 1.006, source: market.PriceFallback, market: market.OnDemand, note: "fallback: no spot price"},
		{name: "stale spot, fresh on-demand: live on-demand as fallback", q: q, catalog: noSpot, live: []market.Offering{spot, od}, liveAge: time.Hour,
			want: 1.006, source: market.PriceFallback, market: market.OnDemand, note: "1h0m0s old"},
		{name: "on-demand query never falls back", q: Query{Pool: "chat", Provider: "aws", Region: "eu-west-1", InstanceType: "g5.xlarge", Market: market.OnDemand},
			catalog: market.DefaultCatalog(), wantErr: true},
		{name: "nothing at all", q: Query{Pool: "chat", Provider: "tencent", Region: "ap-singapore", InstanceType: "GT4.4XLARGE96", Market: market.Spot},
			catalog: market.DefaultCatalog(), wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			lp := NewLivePrices()
			lp.Update("aws", "us-east-1", tc.live, t0.Add(-tc.liveAge))
			r := &Resolver{Catalog: tc.catalog, Live: lp, Overrides: tc.overrides, MaxLiveAge: 15 * time.Minute}
			p, err := r.Price(tc.q, t0)
			if tc.wantErr {
				if !IsNoPrice(err) {
					t.Fatalf("Price = %+v, %v; want a NoPriceError", p, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.PerHour != tc.want || p.Source != tc.source || p.Market != tc.market || p.Currency != "USD" {
				t.Errorf("Price = %v %s %s, want %v %s %s", p.PerHour, p.Source, p.Market, tc.want, tc.source, tc.market)
			}
			if !strings.Contains(p.Note, tc.note) {
				t.Errorf("note %q lacks %q", p.Note, tc.note)
			}
			if p.Source == market.PriceLive && !p.AsOf.Equal(t0.Add(-tc.liveAge)) {
				t.Errorf("live AsOf %v, want the time it was read", p.AsOf)
			}
		})
	}
}

func TestResolverPricesList(t *testing.T) {
	r := &Resolver{Catalog: market.DefaultCatalog()}
	q := Query{Pool: "p", Provider: "aws", Region: "us-east-1", InstanceType: "p3.2xlarge", Market: market.Spot}
	eff, list, err := r.Prices(q, t0)
	if err != nil {
		t.Fatal(err)
	}
	if eff.PerHour != 0.316025 || list.PerHour != 3.06 || list.Market != market.OnDemand {
		t.Errorf("Prices = %+v / %+v", eff, list)
	}
	// With only an override in CNY and a USD catalog, the list price falls
	// back to the effective one (no invented savings).
	r.Overrides = []Override{{Pool: "p", Market: market.Spot, PerHour: 2, Currency: "CNY"}}
	eff, list, err = r.Prices(q, t0)
	if err != nil || eff.Currency != "CNY" || list.PerHour != 2 || list.Currency != "CNY" || !strings.Contains(list.Note, "stands in") {
		t.Errorf("Prices = %+v / %+v, %v", eff, list, err)
	}
	if _, err := r.ListPrice(Query{Provider: "aws", Region: "mars-1", InstanceType: "x"}, t0); !IsNoPrice(err) {
		t.Errorf("ListPrice of nothing: %v", err)
	}
}

func TestLivePricesUpdate(t *testing.T) {
	lp := NewLivePrices()
	lp.Update("aws", "r", []market.Offering{
		{InstanceType: "a", Zone: "z", Market: market.Spot, PricePerHour: 0, Currency: "USD"},                                   // no price
		{InstanceType: "b", Zone: "z", Market: market.Spot, PricePerHour: 1, Currency: "USD", PriceSource: market.PriceCatalog}, // not live
		{InstanceType: "c", Zone: "z", Market: market.Spot, PricePerHour: 1, Currency: ""},                                      // no currency
		{InstanceType: "d", Zone: "", Market: market.Spot, PricePerHour: 2, Currency: "USD"},                                    // region-wide, unlabelled
		{InstanceType: "e", Zone: "z", Market: market.Spot, PricePerHour: 3, Currency: "USD", PriceSource: market.PriceLive},
	}, t0)
	lp.Update("aws", "r", []market.Offering{
		{InstanceType: "e", Zone: "z", Market: market.Spot, PricePerHour: 9, Currency: "USD"}, // older than what we have
	}, t0.Add(-time.Minute))
	for _, tc := range []struct {
		typ  string
		want float64
		ok   bool
	}{{"a", 0, false}, {"b", 0, false}, {"c", 0, false}, {"d", 2, true}, {"e", 3, true}} {
		p, ok := lp.lookup("aws", "r", "z", tc.typ, market.Spot)
		if ok != tc.ok || p.perHour != tc.want {
			t.Errorf("%s: %v %v, want %v %v", tc.typ, p.perHour, ok, tc.want, tc.ok)
		}
	}
}

func mustCatalog(t *testing.T, s string) *market.Catalog {
	t.Helper()
	c, err := market.ParseCatalog(strings.NewReader(s))
	if err != nil {
		t.Fatal(err)
	}
	return c
}
