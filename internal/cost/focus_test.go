package cost

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/tidegpu/tidegpu/internal/market"
)

func TestFOCUSCSV(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0.Add(3 * time.Hour))
	l := NewLedger(Options{Clock: clk, DetailRetention: time.Hour})
	spot := p3("s-1", "llama")
	od := p3("o-1", "llama")
	od.Market = market.OnDemand
	for _, info := range []InstanceInfo{spot, od} {
		eff, list := catalogPrices(t, info)
		if err := l.Start(info, t0, eff, list); err != nil {
			t.Fatal(err)
		}
	}
	l.BusyStart("s-1", t0.Add(min_(15)))
	l.BusyEnd("s-1", t0.Add(min_(45)))
	// The on-demand one ends at 0:30 and is compacted: its row has no ID.
	if err := l.End("o-1", t0.Add(min_(30))); err != nil {
		t.Fatal(err)
	}
	l.Compact()

	rows := l.FOCUSRows(HourWindow(t0))
	var buf bytes.Buffer
	if err := WriteFOCUSCSV(&buf, rows); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 {
		t.Fatalf("%d CSV records, want a header and 2 rows:\n%s", len(recs), buf.String())
	}
	header := recs[0]
	if strings.Join(header, ",") != strings.Join(FOCUSColumns, ",") {
		t.Errorf("header %v", header)
	}
	for _, col := range []string{"BilledCost", "EffectiveCost", "ListCost", "ListUnitPrice", "PricingCategory", "ChargePeriodStart",
		"ChargePeriodEnd", "ResourceId", "ResourceType", "RegionId", "AvailabilityZone", "ServiceName", "ChargeCategory",
		"ConsumedQuantity", "ConsumedUnit", "BillingCurrency", "Tags"} {
		if indexOf(header, col) < 0 {
			t.Errorf("header lacks FOCUS column %s", col)
		}
	}
	get := func(rec []string, col string) string { return rec[indexOf(header, col)] }
	// Sorted by charge period, then pool, then resource ID: the compacted
	// row (no ID) first.
	compacted, live := recs[1], recs[2]
	want := map[string]string{
		"ResourceId": "s-1", "ResourceName": "s-1", "ResourceType": "Instance", "BillingCurrency": "USD",
		"ChargePeriodStart": "2026-03-02T00:00:00Z", "ChargePeriodEnd": "2026-03-02T01:00:00Z",
		"BillingPeriodStart": "2026-03-01T00:00:00Z", "BillingPeriodEnd": "2026-04-01T00:00:00Z",
		"ChargeCategory": "Usage", "ChargeFrequency": "Usage-Based", "ChargeClass": "", "PricingCategory": "Dynamic",
		"ConsumedQuantity": "1", "ConsumedUnit": "Hours", "PricingQuantity": "1", "PricingUnit": "Hours",
		"BilledCost": "0.316025000", "EffectiveCost": "0.316025000", "ContractedCost": "0.316025000", "ContractedUnitPrice": "0.316025",
		"ListCost": "3.060000000", "ListUnitPrice": "3.06", "RegionId": "us-east-1", "RegionName": "us-east-1",
		"AvailabilityZone": "us-east-1a", "ProviderName": "AWS", "PublisherName": "AWS", "InvoiceIssuerName": "AWS",
		"ServiceCategory": "Compute", "ServiceName": "Amazon Elastic Compute Cloud", "SkuId": "p3.2xlarge",
		"SkuPriceId": "aws/us-east-1/us-east-1a/p3.2xlarge/spot", "BillingAccountId": "", "CommitmentDiscountId": "",
		"x_PoolName": "chat", "x_PriceSource": "catalog", "x_PriceAsOf": "2025-11-30T00:00:00Z", "x_PriceEstimated": "false",
		"x_BusyQuantity": "0.5", "x_IdleCost": "0.158012500",
	}
	for col, v := range want {
		if got := get(live, col); got != v {
			t.Errorf("live row %s = %q, want %q", col, got, v)
		}
	}
	var tags map[string]string
	if err := json.Unmarshal([]byte(get(live, "Tags")), &tags); err != nil || tags["tidegpu.io/pool"] != "chat" || tags["tidegpu.io/models"] != "llama" {
		t.Errorf("tags %q: %v", get(live, "Tags"), err)
	}
	wantC := map[string]string{
		"ResourceId": "", "PricingCategory": "Standard", "ConsumedQuantity": "0.5", "EffectiveCost": "1.530000000",
		"ListCost": "1.530000000", "ListUnitPrice": "3.06", "x_PriceSource": "catalog", "ChargePeriodStart": "2026-03-02T00:00:00Z",
	}
	for col, v := range wantC {
		if got := get(compacted, col); got != v {
			t.Errorf("compacted row %s = %q, want %q", col, got, v)
		}
	}
	// FOCUS: ListCost = ListUnitPrice x PricingQuantity on every row.
	for _, rec := range recs[1:] {
		lc, _ := strconv.ParseFloat(get(rec, "ListCost"), 64)
		lp, _ := strconv.ParseFloat(get(rec, "ListUnitPrice"), 64)
		q, _ := strconv.ParseFloat(get(rec, "PricingQuantity"), 64)
		relClose(t, "ListUnitPrice x PricingQuantity", lp*q, lc, 1e-9)
	}
	// A window cutting the hour cuts the charge period and the quantity.
	part := l.FOCUSRows(Window{t0.Add(min_(20)), t0.Add(min_(50))})
	for _, r := range part {
		if !r.ChargePeriodStart.Equal(t0.Add(min_(20))) || !r.ChargePeriodEnd.Equal(t0.Add(min_(50))) {
			t.Errorf("cut row period %v..%v", r.ChargePeriodStart, r.ChargePeriodEnd)
		}
		// Busy time is kept per hour: a window cutting the hour gets the
		// hour's 30 busy minutes pro rata, 30 x 30/60 = 15 min.
		if r.ResourceID == "s-1" && (r.ConsumedQuantity != 0.5 || r.BusyQuantity != 15.0/60) {
			t.Errorf("cut live row quantity %v busy %v", r.ConsumedQuantity, r.BusyQuantity)
		}
	}
}

func indexOf(xs []string, x string) int {
	for i, v := range xs {
		if v == x {
			return i
		}
	}
	return -1
}

func TestFOCUSPricingCategory(t *testing.T) {
	cases := []struct {
		m      market.Market
		source string
		want   string
	}{
		{market.Spot, market.PriceLive, FOCUSPricingDynamic},
		{market.Spot, market.PriceCatalog, FOCUSPricingDynamic},
		{market.Spot, market.PriceOverride, FOCUSPricingStandard},
		{market.Spot, market.PriceFallback, FOCUSPricingStandard},
		{market.OnDemand, market.PriceLive, FOCUSPricingStandard},
	}
	for _, tc := range cases {
		if got := pricingCategory(tc.m, tc.source); got != tc.want {
			t.Errorf("%s %s: %s, want %s", tc.m, tc.source, got, tc.want)
		}
	}
}
