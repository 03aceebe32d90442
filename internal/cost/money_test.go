package cost

import (
	"encoding/json"
	"errors"
	"math"
	"testing"
)

func errorsAs[T any](err error, target *T) bool { return errors.As(err, target) }

func TestParseAmount(t *testing.T) {
	cases := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"2500", 2500_000_000_000, true},
		{"1234.56", 1234_560_000_000, true},
		{"0.000000001", 1, true},
		{"0", 0, true},
		{"007.5", 7_500_000_000, true},
		{"9223372036.854775807", math.MaxInt64, true},
		{"9223372036.854775808", 0, false},
		{"", 0, false},
		{"-1", 0, false},
		{"+1", 0, false},
		{"1e3", 0, false},
		{"1.", 0, false},
		{".5", 0, false},
		{"1.0000000001", 0, false},
		{"1,000", 0, false},
		{" 1", 0, false},
	}
	for _, tc := range cases {
		got, err := ParseAmount(tc.in)
		if tc.ok && (err != nil || got != tc.want) {
			t.Errorf("ParseAmount(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
		var ae *AmountError
		if !tc.ok && (err == nil || !errors.As(err, &ae)) {
			t.Errorf("ParseAmount(%q) = %d, %v; want an AmountError", tc.in, got, err)
		}
	}
}

func TestMoneyExactSums(t *testing.T) {
	// 0.1 USD/h for 1 ns, a billion times, is exactly 1e9 ns at 0.1/h.
	var a acc
	for i := 0; i < 1000; i++ {
		a = a.add(mulAcc(priceNanos(0.1), 1_000_000))
	}
	m := Money{"USD", a}
	want := Money{"USD", mulAcc(priceNanos(0.1), 1_000_000_000)}
	if m.v != want.v {
		t.Fatalf("sum %v != product %v", m, want)
	}
	cases := []struct {
		m     Money
		str   string
		nanos int64
	}{
		{moneyFromNanos("USD", 3_060_000_000), "3.060000000 USD", 3_060_000_000},
		{moneyFromNanos("USD", -1), "-0.000000001 USD", -1},
		{Money{"CNY", mulAcc(priceNanos(3.06), nsPerHour/3)}, "1.020000000 CNY", 1_020_000_000},
		{Money{"USD", mulAcc(1, 1)}, "0.000000000 USD", 0},
		{Money{}, "0.000000000", 0},
	}
	for _, tc := range cases {
		if got := tc.m.String(); got != tc.str {
			t.Errorf("String = %q, want %q", got, tc.str)
		}
		if got := tc.m.Nanos(); got != tc.nanos {
			t.Errorf("Nanos(%s) = %d, want %d", tc.str, got, tc.nanos)
		}
	}
	d := moneyFromNanos("USD", 1).v.sub(moneyFromNanos("USD", 3).v)
	if !d.neg() || (Money{"USD", d}).Float() != -2e-9 {
		t.Errorf("1-3 nanos = %v", Money{"USD", d})
	}
	big := Money{"USD", mulAcc(math.MaxInt64, math.MaxInt64)}
	if big.Nanos() != math.MaxInt64 || math.Abs(big.Float()/(float64(math.MaxInt64)*float64(math.MaxInt64)/3.6e21)-1) > 1e-15 {
		t.Errorf("huge money: %d %v", big.Nanos(), big.Float())
	}
}

func TestAccJSONRoundTrip(t *testing.T) {
	for _, a := range []acc{{}, mulAcc(math.MaxInt64, math.MaxInt64), acc{}.sub(mulAcc(5, 7)), {hi: 1<<63 - 1, lo: math.MaxUint64}} {
		b, err := json.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		var back acc
		if err := json.Unmarshal(b, &back); err != nil || back != a {
			t.Errorf("%s -> %v %v, want %v", b, back, err, a)
		}
	}
	for _, bad := range []string{`"1e3"`, `""`, `12`, `"340282366920938463463374607431768211456"`, `"abc"`} {
		var a acc
		if err := json.Unmarshal([]byte(bad), &a); err == nil {
			t.Errorf("%s accepted as %v", bad, a)
		}
	}
	if f := accFromFloat(12345.0).float(); f != 12345 {
		t.Errorf("accFromFloat round trip %v", f)
	}
	if a := accFromFloat(math.NaN()); !a.isZero() {
		t.Errorf("NaN -> %v", a)
	}
}
