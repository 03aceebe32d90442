package cost

import (
	"math/big"
	"testing"
)

func TestRatNanos(t *testing.T) {
	for in, want := range map[string]int64{"250": 250e9, "99.50": 99_500_000_000, "0.000001": 1000, "0.0000000019": 1, "1e30": 1<<63 - 1} {
		r, _ := new(big.Rat).SetString(in)
		if got := RatNanos(r); got != want {
			t.Errorf("%s: %d, want %d", in, got, want)
		}
	}
}
