package cost

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/bits"
	"strings"

	"github.com/tidegpu/tidegpu/internal/market"
)

// Units. Prices are held as integer nano-units of currency per hour (a
// published price has at most 6 decimals, so the conversion is exact), time
// as integer nanoseconds, and a cost as the exact product of the two summed
// in 128 bits: an acc is "nano-units x nanoseconds per hour". Nothing is
// rounded until a figure is shown, so summing millions of intervals, or
// compacting and restoring them, cannot drift. A 30-day month of 1000 p5
// instances is about 2^91 in these units, far from the 2^127 limit.
const (
	nanosPerUnit = 1_000_000_000            // nano-units per currency unit
	nsPerHour    = int64(3_600_000_000_000) // nanoseconds per hour
	maxPerHour   = market.MaxPerHour        // sanity bound for a price per hour
)

// validCurrency reports whether c can be a currency code.
func validCurrency(c string) bool { return market.ValidCurrency(c) }

// acc is a signed 128-bit two's-complement integer in nano-units x ns / hour.
type acc struct{ hi, lo uint64 }

// mulAcc returns priceNanos x ns exactly; both must be >= 0.
func mulAcc(priceNanos, ns int64) acc {
	if priceNanos <= 0 || ns <= 0 {
		return acc{}
	}
	hi, lo := bits.Mul64(uint64(priceNanos), uint64(ns))
	return acc{hi, lo}
}

func (a acc) add(b acc) acc {
	lo, c := bits.Add64(a.lo, b.lo, 0)
	hi, _ := bits.Add64(a.hi, b.hi, c)
	return acc{hi, lo}
}

func (a acc) sub(b acc) acc {
	lo, br := bits.Sub64(a.lo, b.lo, 0)
	hi, _ := bits.Sub64(a.hi, b.hi, br)
	return acc{hi, lo}
}

func (a acc) neg() bool { return a.hi>>63 == 1 }

func (a acc) isZero() bool { return a.hi == 0 && a.lo == 0 }

// float returns the value as float64 in acc units (relative error <= 2^-52).
func (a acc) float() float64 {
	if a.neg() {
		return -acc{}.sub(a).float()
	}
	return float64(a.hi)*0x1p64 + float64(a.lo)
}

// accFromFloat converts a non-negative float64 in acc units (rounded).
func accFromFloat(f float64) acc {
	if !(f > 0) || math.IsInf(f, 0) {
		return acc{}
	}
	if f >= 0x1p127 {
		return acc{hi: 1<<63 - 1, lo: math.MaxUint64}
	}
	hi := math.Floor(f / 0x1p64)
	lo := math.Round(f - hi*0x1p64)
	if lo >= 0x1p64 {
		hi++
		lo = 0
	}
	return acc{uint64(hi), uint64(lo)}
}

func (a acc) big() *big.Int {
	b := new(big.Int).SetUint64(a.hi)
	b.Lsh(b, 64)
	b.Or(b, new(big.Int).SetUint64(a.lo))
	if a.neg() {
		b.Sub(b, new(big.Int).Lsh(big.NewInt(1), 128))
	}
	return b
}

var (
	bigHour = big.NewInt(nsPerHour)
	maxAcc  = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 127), big.NewInt(1))
	minAcc  = new(big.Int).Neg(new(big.Int).Lsh(big.NewInt(1), 127))
)

func accFromBig(b *big.Int) (acc, error) {
	if b.Cmp(maxAcc) > 0 || b.Cmp(minAcc) < 0 {
		return acc{}, errors.New("out of the 128-bit range")
	}
	v := new(big.Int).Set(b)
	if v.Sign() < 0 {
		v.Add(v, new(big.Int).Lsh(big.NewInt(1), 128))
	}
	lo := new(big.Int).And(v, new(big.Int).SetUint64(math.MaxUint64)).Uint64()
	hi := new(big.Int).Rsh(v, 64).Uint64()
	return acc{hi, lo}, nil
}

// MarshalJSON writes the exact value as a decimal string.
func (a acc) MarshalJSON() ([]byte, error) { return json.Marshal(a.big().String()) }

// UnmarshalJSON reads a decimal string (at most 40 digits).
func (a *acc) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	if len(s) == 0 || len(s) > 41 {
		return fmt.Errorf("cost accumulator %q: want a decimal integer of at most 40 digits", s)
	}
	v, ok := new(big.Int).SetString(s, 10)
	if !ok {
		return fmt.Errorf("cost accumulator %q: not a decimal integer", s)
	}
	r, err := accFromBig(v)
	if err != nil {
		return fmt.Errorf("cost accumulator %q: %w", s, err)
	}
	*a = r
	return nil
}

// Money is an amount in one currency, held exactly (see the Units comment);
// the zero value is zero in no currency.
type Money struct {
	// Currency is an ISO 4217 code.
	Currency string
	v        acc
}

// Float returns the amount in currency units as float64, for metrics and
// ratios: the nearest float64 when the amount is a whole number of
// nano-units, else within a relative 1e-15.
func (m Money) Float() float64 {
	a := m.v
	sign := 1.0
	if a.neg() {
		a, sign = acc{}.sub(a), -1
	}
	const d = uint64(nsPerHour)
	if a.hi >= d { // beyond 6e22 currency units
		return sign * a.float() / float64(nsPerHour) / nanosPerUnit
	}
	q, r := bits.Div64(a.hi, a.lo, d)
	return sign * (float64(q) + float64(r)/float64(d)) / nanosPerUnit
}

// Nanos returns the amount in nano-units of currency, rounded half away
// from zero and saturated to the int64 range.
func (m Money) Nanos() int64 {
	q := roundDiv(m.v.big(), bigHour)
	if !q.IsInt64() {
		if q.Sign() < 0 {
			return math.MinInt64
		}
		return math.MaxInt64
	}
	return q.Int64()
}

// IsZero reports whether the amount is exactly zero.
func (m Money) IsZero() bool { return m.v.isZero() }

// Negative reports whether the amount is below zero.
func (m Money) Negative() bool { return m.v.neg() }

// String formats the amount with nine decimals and its currency, such as
// "3.060000000 USD".
func (m Money) String() string {
	q := roundDiv(m.v.big(), bigHour)
	sign := ""
	if q.Sign() < 0 {
		sign = "-"
		q.Neg(q)
	}
	ip, fp := new(big.Int).QuoRem(q, big.NewInt(nanosPerUnit), new(big.Int))
	s := fmt.Sprintf("%s%s.%09d", sign, ip.String(), fp.Int64())
	if m.Currency != "" {
		s += " " + m.Currency
	}
	return s
}

// MarshalJSON writes {"amount":"3.060000000","currency":"USD"}.
func (m Money) MarshalJSON() ([]byte, error) {
	s := m.String()
	if i := strings.IndexByte(s, ' '); i >= 0 {
		s = s[:i]
	}
	return json.Marshal(struct {
		Amount   string `json:"amount"`
		Currency string `json:"currency,omitempty"`
	}{s, m.Currency})
}

func moneyFromNanos(currency string, nanos int64) Money {
	if nanos >= 0 {
		return Money{Currency: currency, v: mulAcc(nanos, nsPerHour)}
	}
	return Money{Currency: currency, v: acc{}.sub(mulAcc(-nanos, nsPerHour))}
}

func roundDiv(a, b *big.Int) *big.Int {
	q, r := new(big.Int).QuoRem(a, b, new(big.Int))
	r2 := new(big.Int).Abs(r)
	r2.Lsh(r2, 1)
	if r2.Cmp(b) >= 0 {
		if a.Sign() < 0 {
			q.Sub(q, big.NewInt(1))
		} else {
			q.Add(q, big.NewInt(1))
		}
	}
	return q
}

// priceNanos converts a price per hour to nano-units per hour.
func priceNanos(perHour float64) int64 { return int64(math.Round(perHour * nanosPerUnit)) }

// AmountError says a decimal amount could not be read.
type AmountError struct {
	// Input is the text read (cut when long); Reason what is wrong with it.
	Input  string
	Reason string
}

func (e *AmountError) Error() string {
	return fmt.Sprintf("amount %q: %s (write a plain decimal such as 2500 or 1234.56)", e.Input, e.Reason)
}

// ParseAmount reads a non-negative plain decimal ("2500", "1234.56", at most
// nine decimals, no sign, exponent or separators) into nano-units.
func ParseAmount(s string) (int64, error) {
	if s == "" {
		return 0, &AmountError{s, "empty"}
	}
	if len(s) > 40 {
		return 0, &AmountError{s[:40] + "...", "too long"}
	}
	ip, fp, dot := strings.Cut(s, ".")
	if ip == "" || (dot && fp == "") {
		return 0, &AmountError{s, "digits are needed on both sides of the decimal point"}
	}
	if len(fp) > 9 {
		return 0, &AmountError{s, "more than nine decimals"}
	}
	for _, part := range []string{ip, fp} {
		for i := 0; i < len(part); i++ {
			if part[i] < '0' || part[i] > '9' {
				return 0, &AmountError{s, fmt.Sprintf("unexpected character %q", part[i])}
			}
		}
	}
	digits := ip + fp + strings.Repeat("0", 9-len(fp))
	v, ok := new(big.Int).SetString(digits, 10)
	if !ok || !v.IsInt64() {
		return 0, &AmountError{s, "too large"}
	}
	return v.Int64(), nil
}
