package market

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestDefaultCatalogKnownFigures(t *testing.T) {
	c := DefaultCatalog()
	cases := []struct {
		provider, region, typ, zone string
		market                      Market
		want                        float64
		currency                    string
	}{
		// AWS Price List figures the issue quotes.
		{"aws", "us-east-1", "p3.2xlarge", "", OnDemand, 3.06, "USD"},
		{"aws", "us-east-1", "g5.48xlarge", "", OnDemand, 16.288, "USD"},
		{"aws", "us-west-2", "g5.48xlarge", "us-west-2b", OnDemand, 16.288, "USD"},
		{"aws", "us-east-1", "g4dn.xlarge", "us-east-1a", OnDemand, 0.526, "USD"},
		{"aws", "us-east-1", "p5.48xlarge", "", OnDemand, 55.04, "USD"},
		{"aws", "us-east-1", "p3.2xlarge", "", Spot, 0.316025, "USD"},
		// The zones of the SpotHedge traces (bench/spot): us-east-1, us-east-2, us-west-2.
		{"aws", "us-east-2", "p3.2xlarge", "us-east-2a", Spot, 0.38785, "USD"},
		{"aws", "us-east-2", "p3.2xlarge", "us-east-2b", OnDemand, 3.06, "USD"},
		{"aws", "us-west-2", "p3.2xlarge", "us-west-2c", Spot, 1.012733, "USD"},
		{"tencent", "ap-guangzhou", "GN7.2XLARGE32", "ap-guangzhou-3", OnDemand, 1.26, "USD"},
		{"tencent", "ap-guangzhou", "GN10X.2XLARGE40", "", OnDemand, 2.68, "USD"},
		{"local", "anywhere", "whatever", "", Spot, 0, "USD"},
	}
	for _, tc := range cases {
		p, ok := c.Price(tc.provider, tc.region, tc.typ, tc.zone, tc.market)
		if !ok {
			t.Errorf("%s %s %s %s: not in the catalog", tc.provider, tc.region, tc.typ, tc.market)
			continue
		}
		if p.PerHour != tc.want || p.Currency != tc.currency || p.Source != PriceCatalog || p.Market != tc.market {
			t.Errorf("%s %s %s %s = %+v, want %v %s from the catalog", tc.provider, tc.region, tc.typ, tc.market, p, tc.want, tc.currency)
		}
	}
	for _, miss := range []struct {
		provider, region, typ string
		market                Market
	}{
		{"aws", "us-east-1", "p5.4xlarge", Spot}, // not found in any source
		{"tencent", "ap-shanghai", "GN7.2XLARGE32", OnDemand},
		{"tencent", "ap-guangzhou", "GN7.2XLARGE32", Spot},
		{"aws", "eu-west-1", "p3.2xlarge", OnDemand},
	} {
		if p, ok := c.Price(miss.provider, miss.region, miss.typ, "", miss.market); ok {
			t.Errorf("%v: got %+v, want no catalog price", miss, p)
		}
	}
}

func TestDefaultCatalogRowsAreSourcedAndDated(t *testing.T) {
	entries := DefaultCatalog().Entries()
	if len(entries) < 100 {
		t.Fatalf("%d catalog rows, want the AWS and Tencent tables", len(entries))
	}
	families := map[string]bool{}
	for _, e := range entries {
		if e.Source == "" || strings.HasPrefix(e.Source, "aws-") || strings.HasPrefix(e.Source, "tencent-") {
			t.Errorf("%+v: source not cited (an undefined @source key?)", e)
		}
		if e.AsOf.Before(time.Date(2023, 1, 1, 0, 0, 0, 0, time.UTC)) {
			t.Errorf("%+v: no date", e)
		}
		if e.Estimated {
			t.Errorf("%+v: estimated figure in the embedded catalog; the header says there are none", e)
		}
		if e.Market == Spot && e.Provider == "aws" {
			od, ok := DefaultCatalog().Price(e.Provider, e.Region, e.InstanceType, "", OnDemand)
			if !ok || e.PerHour >= od.PerHour {
				t.Errorf("%+v: spot not below on-demand %+v", e, od)
			}
		}
		families[e.Provider+" "+strings.Split(e.InstanceType, ".")[0]+" "+e.Region] = true
	}
	for _, f := range []string{"aws g4dn us-east-1", "aws g5 us-east-1", "aws g6 us-east-1", "aws p3 us-east-1", "aws p4d us-east-1",
		"aws p5 us-east-1", "aws g4dn us-west-2", "aws p5 us-west-2", "tencent GN7 ap-guangzhou", "tencent GN10X ap-guangzhou"} {
		if !families[f] {
			t.Errorf("catalog lacks %s", f)
		}
	}
}

func TestCatalogLookupOrder(t *testing.T) {
	c, err := ParseCatalog(strings.NewReader(`# test
@source,s,a test source
x,r1,r1a,t1,spot,1,USD,2026-01-01,false,s
x,r1,,t1,spot,2,USD,2026-01-01,false,s
x,r1,,*,spot,3,USD,2026-01-01,false,s
x,*,,t1,spot,4,USD,2026-01-01,true,s
x,*,,*,spot,5,USD,2026-01-01,false,other
`))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		region, zone, typ string
		want              float64
	}{
		{"r1", "r1a", "t1", 1},
		{"r1", "r1b", "t1", 2},
		{"r1", "", "t1", 2},
		{"r1", "r1a", "t2", 3},
		{"r2", "r2a", "t1", 4},
		{"r2", "", "t9", 5},
	}
	for _, tc := range cases {
		p, ok := c.Price("x", tc.region, tc.typ, tc.zone, Spot)
		if !ok || p.PerHour != tc.want {
			t.Errorf("%s/%s %s = %v %v, want %v", tc.region, tc.zone, tc.typ, p.PerHour, ok, tc.want)
		}
	}
	if p, _ := c.Price("x", "r2", "t1", "", Spot); !p.Estimated || p.Note != "catalog: a test source" {
		t.Errorf("estimated row = %+v, want Estimated and the cited source", p)
	}
	if _, ok := c.Price("x", "r1", "t1", "", OnDemand); ok {
		t.Error("a spot row answered for on-demand")
	}
	merged := c.Merge(mustCatalog(t, "x,r1,,t1,spot,9,USD,2026-02-01,false,newer\n"))
	if p, _ := merged.Price("x", "r1", "t1", "", Spot); p.PerHour != 9 {
		t.Errorf("merged = %v, want the second catalog's row", p.PerHour)
	}
	if p, _ := c.Price("x", "r1", "t1", "", Spot); p.PerHour != 2 {
		t.Errorf("Merge changed its receiver: %v", p.PerHour)
	}
}

func mustCatalog(t *testing.T, s string) *Catalog {
	t.Helper()
	c, err := ParseCatalog(strings.NewReader(s))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestParseCatalogErrors(t *testing.T) {
	cases := map[string]string{
		"fields":     "x,r,,t,spot,1,USD,2026-01-01,false\n",
		"market":     "x,r,,t,reserved,1,USD,2026-01-01,false,s\n",
		"price":      "x,r,,t,spot,-1,USD,2026-01-01,false,s\n",
		"nan":        "x,r,,t,spot,NaN,USD,2026-01-01,false,s\n",
		"currency":   "x,r,,t,spot,1,usd,2026-01-01,false,s\n",
		"date":       "x,r,,t,spot,1,USD,01/02/2026,false,s\n",
		"estimated":  "x,r,,t,spot,1,USD,2026-01-01,maybe,s\n",
		"source":     "x,r,,t,spot,1,USD,2026-01-01,false,\n",
		"provider":   ",r,,t,spot,1,USD,2026-01-01,false,s\n",
		"duplicate":  "x,r,,t,spot,1,USD,2026-01-01,false,s\nx,r,,t,spot,2,USD,2026-01-01,false,s\n",
		"source row": "@source,k\n",
		"quote":      "x,r,,t,spot,1,USD,2026-01-01,false,\"s\n",
	}
	for name, in := range cases {
		_, err := ParseCatalog(strings.NewReader(in))
		var ce *CatalogError
		if err == nil || !errors.As(err, &ce) || ce.Line < 1 {
			t.Errorf("%s: err = %v, want a CatalogError with a line", name, err)
		}
	}
}
