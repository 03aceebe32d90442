package market

import (
	_ "embed"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Price is a price per instance-hour and where it came from.
type Price struct {
	// PerHour is the price of one instance-hour in Currency.
	PerHour float64 `json:"perHour"`
	// Currency is an ISO 4217 code such as USD or CNY.
	Currency string `json:"currency"`
	// Source is one of PriceCatalog, PriceLive, PriceOverride or
	// PriceFallback.
	Source string `json:"source"`
	// AsOf is when the figure was true: the catalog row's date, the time a
	// live price was read, or zero for an override.
	AsOf time.Time `json:"asOf,omitempty"`
	// Market is the market the figure is a price of. For a fallback it is
	// on-demand although the instance runs on spot.
	Market Market `json:"market,omitempty"`
	// Estimated marks a figure that is not a published or live price.
	Estimated bool `json:"estimated,omitempty"`
	// Note says where the figure comes from and, for a fallback or a stale
	// live price, why it was chosen.
	Note string `json:"note,omitempty"`
}

// Validate checks that the price can be accounted.
func (p Price) Validate() error {
	if math.IsNaN(p.PerHour) || p.PerHour < 0 || p.PerHour > MaxPerHour {
		return fmt.Errorf("price per hour %v: want a number between 0 and %v", p.PerHour, MaxPerHour)
	}
	if !ValidCurrency(p.Currency) {
		return fmt.Errorf("currency %q: want a 3-letter code such as USD", p.Currency)
	}
	switch p.Source {
	case PriceCatalog, PriceLive, PriceOverride, PriceFallback:
	default:
		return fmt.Errorf("price source %q: want catalog, live, override or fallback", p.Source)
	}
	if !p.AsOf.IsZero() && !validTime(p.AsOf) {
		return fmt.Errorf("price date %v: out of range", p.AsOf)
	}
	return nil
}

// CatalogEntry is one row of a price catalog.
type CatalogEntry struct {
	// Provider is a TidePoolSpec.Provider value such as aws or tencent.
	Provider string `json:"provider"`
	// Region "*" matches any region.
	Region string `json:"region"`
	// Zone "" is the region-wide price.
	Zone string `json:"zone,omitempty"`
	// InstanceType "*" matches any type.
	InstanceType string `json:"instanceType"`
	Market       Market `json:"market"`
	// PerHour in Currency, true on AsOf; Estimated marks a figure that is
	// not a published price.
	PerHour   float64   `json:"perHour"`
	Currency  string    `json:"currency"`
	AsOf      time.Time `json:"asOf"`
	Estimated bool      `json:"estimated,omitempty"`
	// Source cites where the figure was read.
	Source string `json:"source"`
}

type catKey struct {
	provider, region, zone, instanceType string
	market                               Market
}

// Catalog is an offline table of prices, looked up by provider, region,
// zone, instance type and market. It is immutable once built.
type Catalog struct {
	entries map[catKey]CatalogEntry
}

// Price returns the catalog price for an offering: the zone's own row, else
// the region-wide row, else a row for any instance type, else one for any
// region. The Source is always PriceCatalog.
func (c *Catalog) Price(providerName, region, instanceType, zone string, market Market) (Price, bool) {
	if c == nil {
		return Price{}, false
	}
	for _, k := range []catKey{
		{providerName, region, zone, instanceType, market},
		{providerName, region, "", instanceType, market},
		{providerName, region, "", "*", market},
		{providerName, "*", "", instanceType, market},
		{providerName, "*", "", "*", market},
	} {
		if e, ok := c.entries[k]; ok {
			return Price{PerHour: e.PerHour, Currency: e.Currency, Source: PriceCatalog, AsOf: e.AsOf,
				Market: e.Market, Estimated: e.Estimated, Note: "catalog: " + e.Source}, true
		}
	}
	return Price{}, false
}

// Entries returns every row, sorted.
func (c *Catalog) Entries() []CatalogEntry {
	if c == nil {
		return nil
	}
	out := make([]CatalogEntry, 0, len(c.entries))
	for _, e := range c.entries {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Provider != b.Provider {
			return a.Provider < b.Provider
		}
		if a.Region != b.Region {
			return a.Region < b.Region
		}
		if a.Zone != b.Zone {
			return a.Zone < b.Zone
		}
		if a.InstanceType != b.InstanceType {
			return a.InstanceType < b.InstanceType
		}
		return a.Market < b.Market
	})
	return out
}

// Merge returns a catalog with the rows of c and then of other, a row of
// other replacing the row of c for the same offering.
func (c *Catalog) Merge(other *Catalog) *Catalog {
	out := &Catalog{entries: map[catKey]CatalogEntry{}}
	for _, src := range []*Catalog{c, other} {
		if src == nil {
			continue
		}
		for k, e := range src.entries {
			out.entries[k] = e
		}
	}
	return out
}

//go:embed catalog.csv
var catalogCSV string

var defaultCatalog = sync.OnceValues(func() (*Catalog, error) { return ParseCatalog(strings.NewReader(catalogCSV)) })

// DefaultCatalog returns the embedded catalog (catalog.csv in this package:
// AWS g4dn, g5, g6, p3, p4d and p5 in us-east-1 and us-west-2, Tencent GN7,
// GN10X and GN10Xp in ap-guangzhou, local at zero). It panics if the
// embedded file is broken, which the package's tests rule out.
func DefaultCatalog() *Catalog {
	c, err := defaultCatalog()
	if err != nil {
		panic(fmt.Sprintf("market: embedded catalog.csv: %v", err))
	}
	return c
}

// CatalogError says a catalog file could not be read.
type CatalogError struct {
	// Line is the 1-based line of the file (0 when unknown).
	Line int
	// Err says what is wrong.
	Err error
}

func (e *CatalogError) Error() string { return fmt.Sprintf("price catalog line %d: %v", e.Line, e.Err) }

func (e *CatalogError) Unwrap() error { return e.Err }

const maxCatalogRows = 100_000

// ParseCatalog reads a catalog in the CSV format of catalog.csv: '#' starts
// a comment line; "@source,<key>,<citation>" defines a source key; data rows
// are provider,region,zone,instance_type,market,price_per_hour,currency,
// as_of (YYYY-MM-DD),estimated (true|false),source. A duplicate offering is
// an error.
func ParseCatalog(r io.Reader) (*Catalog, error) {
	cr := csv.NewReader(r)
	cr.Comment = '#'
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = false
	c := &Catalog{entries: map[catKey]CatalogEntry{}}
	sources := map[string]string{}
	for n := 0; ; n++ {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			var pe *csv.ParseError
			line := 0
			if errors.As(err, &pe) {
				line = pe.StartLine
			}
			return nil, &CatalogError{Line: line, Err: err}
		}
		line, _ := cr.FieldPos(0)
		if n > maxCatalogRows {
			return nil, &CatalogError{Line: line, Err: fmt.Errorf("more than %d rows", maxCatalogRows)}
		}
		if len(rec) > 0 && rec[0] == "@source" {
			if len(rec) != 3 || rec[1] == "" || rec[2] == "" {
				return nil, &CatalogError{Line: line, Err: errors.New("a source row is @source,<key>,<citation>")}
			}
			sources[rec[1]] = rec[2]
			continue
		}
		e, err := parseCatalogRow(rec, sources)
		if err != nil {
			return nil, &CatalogError{Line: line, Err: err}
		}
		k := catKey{e.Provider, e.Region, e.Zone, e.InstanceType, e.Market}
		if _, dup := c.entries[k]; dup {
			return nil, &CatalogError{Line: line, Err: fmt.Errorf("second row for %s %s %s %s %s",
				e.Provider, e.Region, e.Zone, e.InstanceType, e.Market)}
		}
		c.entries[k] = e
	}
	return c, nil
}

func parseCatalogRow(rec []string, sources map[string]string) (CatalogEntry, error) {
	if len(rec) != 10 {
		return CatalogEntry{}, fmt.Errorf("%d fields, want 10: provider,region,zone,instance_type,market,price_per_hour,currency,as_of,estimated,source", len(rec))
	}
	for i, f := range rec {
		if len(f) > 1024 {
			return CatalogEntry{}, fmt.Errorf("field %d longer than 1024 bytes", i+1)
		}
	}
	e := CatalogEntry{Provider: rec[0], Region: rec[1], Zone: rec[2], InstanceType: rec[3],
		Market: Market(rec[4]), Currency: rec[6], Source: rec[9]}
	if e.Provider == "" || e.Region == "" || e.InstanceType == "" {
		return e, errors.New("provider, region and instance_type are required")
	}
	if e.Market != Spot && e.Market != OnDemand {
		return e, fmt.Errorf("market %q: want spot or on-demand", rec[4])
	}
	p, err := strconv.ParseFloat(rec[5], 64)
	if err != nil || math.IsNaN(p) || p < 0 || p > MaxPerHour {
		return e, fmt.Errorf("price_per_hour %q: want a number between 0 and %v", rec[5], MaxPerHour)
	}
	e.PerHour = p
	if !ValidCurrency(e.Currency) {
		return e, fmt.Errorf("currency %q: want a code such as USD", e.Currency)
	}
	d, err := time.Parse("2006-01-02", rec[7])
	if err != nil || !validTime(d) {
		return e, fmt.Errorf("as_of %q: want a date YYYY-MM-DD", rec[7])
	}
	e.AsOf = d
	switch rec[8] {
	case "true":
		e.Estimated = true
	case "false":
	default:
		return e, fmt.Errorf("estimated %q: want true or false", rec[8])
	}
	if e.Source == "" {
		return e, errors.New("source is required: say where the figure was read")
	}
	if s, ok := sources[e.Source]; ok {
		e.Source = s
	}
	return e, nil
}

// validTime bounds dates to what int64 nanoseconds hold, with margin (the
// cost ledger's bound).
func validTime(t time.Time) bool {
	return t.Year() >= 1970 && t.Year() < 2200
}
