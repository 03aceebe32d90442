package replay

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/tidegpu/tidegpu/internal/provider/spotsim"
)

// Limits of a prices file.
const (
	// MaxPricesBytes bounds a prices file: one line per zone and market
	// needs far less.
	MaxPricesBytes = 1 << 20
	// MaxPrice bounds a price per instance-hour (USD); the dearest GPU
	// instances cost about 100 USD/h.
	MaxPrice = 100_000
	// maxZoneName bounds a zone name.
	maxZoneName = 128
)

// Markets of a prices file.
const (
	MarketSpot     = "spot"
	MarketOnDemand = "on-demand"
)

// pricesHeader is the optional first line of a prices file.
var pricesHeader = []string{"zone", "market", "usd_per_hour"}

// ErrPrices is wrapped by every error of ParsePrices.
var ErrPrices = errors.New("invalid prices")

// ParsePrices reads a prices file: CSV lines zone,market,usd_per_hour, with
// market spot or on-demand and a price in USD per instance-hour (a decimal
// number greater than 0, such as 0.918), for example
//
//	# p3.2xlarge, 7 May 2024
//	zone,market,usd_per_hour
//	us-east-1a,spot,0.918
//	us-east-1a,on-demand,3.06
//
// The header line is optional (first line only); blank lines and comments
// (from a '#' to the end of the line) are skipped; spaces around fields are
// trimmed. A zone+market given twice, a bad market, zone or price, a line
// without exactly three fields, no price at all and an input over
// MaxPricesBytes are errors naming the line and the field.
func ParsePrices(r io.Reader) (map[string]spotsim.ZonePrices, error) {
	b, err := io.ReadAll(io.LimitReader(r, MaxPricesBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: reading: %v", ErrPrices, err)
	}
	if len(b) > MaxPricesBytes {
		return nil, fmt.Errorf("%w: the input is over %d KiB: a prices file has one line per zone and market", ErrPrices, MaxPricesBytes>>10)
	}
	b = bytes.TrimPrefix(b, []byte("\ufeff")) // a spreadsheet's byte-order mark
	out := map[string]spotsim.ZonePrices{}
	seen := map[[2]string]int{} // zone, market → line
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), MaxPricesBytes+1)
	first := true
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		fields := strings.Split(line, ",")
		for i := range fields {
			fields[i] = strings.TrimSpace(fields[i])
		}
		isFirst := first
		first = false
		if isFirst && strings.EqualFold(fields[0], pricesHeader[0]) {
			if len(fields) != len(pricesHeader) || !strings.EqualFold(fields[1], pricesHeader[1]) || !strings.EqualFold(fields[2], pricesHeader[2]) {
				return nil, fmt.Errorf("%w: line %d: header %q: want %s (or no header)", ErrPrices, n, line, strings.Join(pricesHeader, ","))
			}
			continue
		}
		if len(fields) != 3 {
			return nil, fmt.Errorf("%w: line %d: %d fields, want 3: zone,market,usd_per_hour (e.g. us-east-1a,spot,0.918)", ErrPrices, n, len(fields))
		}
		zone, market, priceText := fields[0], strings.ToLower(fields[1]), fields[2]
		if err := checkZoneName(zone); err != nil {
			return nil, fmt.Errorf("%w: line %d: zone %q: %v", ErrPrices, n, fields[0], err)
		}
		if market != MarketSpot && market != MarketOnDemand {
			return nil, fmt.Errorf("%w: line %d: market %q: use %s or %s", ErrPrices, n, fields[1], MarketSpot, MarketOnDemand)
		}
		price, err := parsePrice(priceText)
		if err != nil {
			return nil, fmt.Errorf("%w: line %d: usd_per_hour %q: %v", ErrPrices, n, priceText, err)
		}
		key := [2]string{zone, market}
		if prev, dup := seen[key]; dup {
			return nil, fmt.Errorf("%w: line %d: zone %s market %s is already priced on line %d: keep one of the two lines", ErrPrices, n, zone, market, prev)
		}
		seen[key] = n
		zp := out[zone]
		if market == MarketSpot {
			zp.Spot = price
		} else {
			zp.OnDemand = price
		}
		out[zone] = zp
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: reading: %v", ErrPrices, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no prices found: want lines zone,market,usd_per_hour such as us-east-1a,spot,0.918", ErrPrices)
	}
	return out, nil
}

// checkZoneName accepts cloud zone names: letters, digits, '-', '_', '.'.
func checkZoneName(z string) error {
	if z == "" {
		return errors.New("empty: name the zone, such as us-east-1a")
	}
	if len(z) > maxZoneName {
		return fmt.Errorf("longer than %d characters", maxZoneName)
	}
	for _, c := range z {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.':
		case c == '"' || c == '\'':
			return errors.New("no quotes needed: write the zone name bare, such as us-east-1a")
		default:
			return fmt.Errorf("%q is not allowed: use letters, digits, '-', '_' or '.' (a zone name such as us-east-1a)", c)
		}
	}
	return nil
}

// parsePrice reads a plain decimal number in (0, MaxPrice]: digits with at
// most one '.', no sign, exponent, currency symbol or digit separators.
func parsePrice(s string) (float64, error) {
	const want = "want USD per instance-hour as a decimal number such as 0.918"
	if s == "" {
		return 0, errors.New("empty: " + want)
	}
	if strings.HasPrefix(s, "-") {
		return 0, errors.New("negative: a price is greater than 0")
	}
	digits, dots := 0, 0
	for _, c := range s {
		switch {
		case c >= '0' && c <= '9':
			digits++
		case c == '.':
			dots++
		default:
			return 0, errors.New("not a number: " + want)
		}
	}
	if digits == 0 || dots > 1 {
		return 0, errors.New("not a number: " + want)
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, errors.New("not a number: " + want)
	}
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0) || v > MaxPrice:
		return 0, fmt.Errorf("too large: at most %d USD per instance-hour", MaxPrice)
	case v <= 0:
		return 0, errors.New("must be greater than 0: leave the line out to use the price catalog's price")
	}
	return v, nil
}
