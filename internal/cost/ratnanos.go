package cost

import "math/big"

// RatNanos is r in nano-units (an amount as the ledger counts it),
// rounded toward zero; past int64 it is the largest int64 (a budget that
// large never binds). nil is 0.
func RatNanos(r *big.Rat) int64 {
	if r == nil {
		return 0
	}
	n := new(big.Int).Mul(r.Num(), big.NewInt(1e9))
	n.Quo(n, r.Denom())
	if !n.IsInt64() {
		return 1<<63 - 1
	}
	return n.Int64()
}
