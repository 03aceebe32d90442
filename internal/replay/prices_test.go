package replay

// Prices files are this package's own CSV (zone,market,usd_per_hour); the
// zones they price are those of the SpotHedge artifact's traces
// (/work/shared/data/README.md), whose paper priced g5.48xlarge at
// 16.288 USD/h on-demand and 2.71 to 6.84 USD/h spot.

import (
	"errors"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/tidegpu/tidegpu/internal/provider/spotsim"
)

func TestParsePrices(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want map[string]spotsim.ZonePrices
	}{
		{"header, comments, blank lines, spaces, CRLF",
			"# g5.48xlarge, 7 May 2024\r\nzone,market,usd_per_hour\r\n\r\n us-east-1a , spot , 2.71 # cheapest\r\nus-east-1a,on-demand,16.288\r\nus-west-2c,SPOT,6.84\r\n",
			map[string]spotsim.ZonePrices{"us-east-1a": {Spot: 2.71, OnDemand: 16.288}, "us-west-2c": {Spot: 6.84}}},
		{"no header, no final newline", "z1,on-demand,3.06", map[string]spotsim.ZonePrices{"z1": {OnDemand: 3.06}}},
		{"byte-order mark and a header in capitals", "\ufeffZone,Market,USD_per_hour\nz,spot,.5\nz,on-demand,3.\n",
			map[string]spotsim.ZonePrices{"z": {Spot: 0.5, OnDemand: 3}}},
		{"zone names of several clouds", "ap-guangzhou-3,spot,1\nus-central1-a,spot,2\nzone_x.1,spot,3\n",
			map[string]spotsim.ZonePrices{"ap-guangzhou-3": {Spot: 1}, "us-central1-a": {Spot: 2}, "zone_x.1": {Spot: 3}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParsePrices(strings.NewReader(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestParsePricesErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string // all in the message
	}{
		{"bad market", "zone,market,usd_per_hour\nus-east-1a,ondemand,3.06\n", []string{"line 2", `market "ondemand"`, "spot or on-demand"}},
		{"negative", "us-east-1a,spot,-1\n", []string{"line 1", "usd_per_hour", "negative"}},
		{"NaN", "us-east-1a,spot,NaN\n", []string{"line 1", "usd_per_hour", "not a number", "0.918"}},
		{"Inf", "us-east-1a,spot,Inf\n", []string{"line 1", "not a number"}},
		{"not numeric", "# c\nus-east-1a,spot,$0.9\n", []string{"line 2", `usd_per_hour "$0.9"`, "not a number"}},
		{"exponent", "us-east-1a,spot,1e3\n", []string{"line 1", "not a number"}},
		{"two dots", "us-east-1a,spot,1.2.3\n", []string{"line 1", "not a number"}},
		{"empty price", "us-east-1a,spot,\n", []string{"line 1", "usd_per_hour", "empty"}},
		{"zero", "us-east-1a,spot,0.000\n", []string{"line 1", "greater than 0", "catalog"}},
		{"too large", "us-east-1a,spot,1000000\n", []string{"line 1", "too large"}},
		{"duplicate", "a,spot,1\na,on-demand,2\n\na,spot,1.5\n", []string{"line 4", "zone a market spot", "line 1", "keep one"}},
		{"duplicate in other case", "a,spot,1\na,Spot,1\n", []string{"line 2", "already priced on line 1"}},
		{"two columns", "us-east-1a,3.06\n", []string{"line 1", "2 fields, want 3", "zone,market,usd_per_hour"}},
		{"four columns", "us-east-1a,spot,1,USD\n", []string{"line 1", "4 fields"}},
		{"bad header", "zone,price\nz,spot,1\n", []string{"line 1", "header", "zone,market,usd_per_hour"}},
		{"header later is data", "z,spot,1\nzone,market,usd_per_hour\n", []string{"line 2", `market "market"`}},
		{"empty zone", ",spot,1\n", []string{"line 1", "zone", "empty"}},
		{"quoted zone", "\"us-east-1a\",spot,1\n", []string{"line 1", "no quotes"}},
		{"zone with a space", "us east,spot,1\n", []string{"line 1", `zone "us east"`, "letters, digits"}},
		{"nothing", "# only a comment\n\n", []string{"no prices found"}},
		{"empty", "", []string{"no prices found"}},
		{"too large input", strings.Repeat("#", MaxPricesBytes+1), []string{"over 1024 KiB"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParsePrices(strings.NewReader(tt.in))
			if err == nil {
				t.Fatal("no error")
			}
			if !errors.Is(err, ErrPrices) {
				t.Errorf("error %v does not wrap ErrPrices", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
	// The largest input accepted is MaxPricesBytes.
	in := "z,spot,1\n" + strings.Repeat("#", MaxPricesBytes-len("z,spot,1\n"))
	if _, err := ParsePrices(strings.NewReader(in)); err != nil {
		t.Errorf("an input of exactly MaxPricesBytes: %v", err)
	}
}

// formatPrices writes prices as ParsePrices reads them, zones sorted.
func formatPrices(m map[string]spotsim.ZonePrices) string {
	zones := make([]string, 0, len(m))
	for z := range m {
		zones = append(zones, z)
	}
	sort.Strings(zones)
	var b strings.Builder
	b.WriteString("zone,market,usd_per_hour\n")
	for _, z := range zones {
		if v := m[z].Spot; v != 0 {
			b.WriteString(z + ",spot," + strconv.FormatFloat(v, 'f', -1, 64) + "\n")
		}
		if v := m[z].OnDemand; v != 0 {
			b.WriteString(z + ",on-demand," + strconv.FormatFloat(v, 'f', -1, 64) + "\n")
		}
	}
	return b.String()
}

func FuzzParsePrices(f *testing.F) {
	for _, s := range []string{
		"zone,market,usd_per_hour\nus-east-1a,spot,0.918\nus-east-1a,on-demand,3.06\n",
		"# comment\r\nz,SPOT,.5 # trailing\r\n",
		"\ufeffa,spot,1\nb,on-demand,100000\n",
		"a,spot,1\na,spot,2\n",
		"a,spot,-1\n", "a,spot,NaN\n", "a,1\n", "zone,price\n", ",,\n", "a,spot,0\n",
		"a,spot,0.0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000001\n",
		"a,spot,99999.99999999999999999\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, err := ParsePrices(strings.NewReader(in))
		if err != nil {
			if got != nil {
				t.Fatalf("an error (%v) with a result %v", err, got)
			}
			if !errors.Is(err, ErrPrices) {
				t.Fatalf("error %v does not wrap ErrPrices", err)
			}
			return
		}
		if len(got) == 0 {
			t.Fatal("accepted with no prices")
		}
		for z, zp := range got {
			if checkZoneName(z) != nil {
				t.Fatalf("accepted zone %q", z)
			}
			if zp.Spot == 0 && zp.OnDemand == 0 {
				t.Fatalf("zone %s accepted with no price", z)
			}
			for _, v := range []float64{zp.Spot, zp.OnDemand} {
				if v != 0 && (math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 || v > MaxPrice) {
					t.Fatalf("zone %s: accepted price %v", z, v)
				}
			}
			if !strings.Contains(in, z) {
				t.Fatalf("zone %q is not in the input", z)
			}
		}
		// What was accepted reads back the same, written out plainly.
		again, err := ParsePrices(strings.NewReader(formatPrices(got)))
		if err != nil {
			t.Fatalf("re-reading %q: %v", formatPrices(got), err)
		}
		if !reflect.DeepEqual(again, got) {
			t.Fatalf("round trip: %v, then %v", got, again)
		}
	})
}
