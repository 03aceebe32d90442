package cost

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tidegpu/tidegpu/internal/market"
)

// FOCUS 1.0 (FinOps Open Cost and Usage Specification) export. Column names
// and allowed values follow the specification's column definitions
// (github.com/FinOps-Open-Cost-and-Usage-Spec/FOCUS_Spec, specification/
// columns): PricingCategory "Dynamic" for prices the provider may change
// without notice (spot), "Standard" otherwise; ChargeCategory "Usage";
// ChargeFrequency "Usage-Based"; ConsumedUnit and PricingUnit "Hours";
// ListCost = ListUnitPrice x PricingQuantity; date/times in UTC as
// YYYY-MM-DDTHH:mm:ssZ; our own columns carry the x_ prefix. These rows are
// the ledger's estimate of cost, not the provider's invoice, so the billing
// account and invoice columns are null.

// FOCUSColumns are the CSV header, FOCUS 1.0 columns in the specification's
// alphabetical order followed by custom x_ columns.
var FOCUSColumns = []string{
	"AvailabilityZone", "BilledCost", "BillingAccountId", "BillingAccountName", "BillingCurrency",
	"BillingPeriodEnd", "BillingPeriodStart", "ChargeCategory", "ChargeClass", "ChargeDescription",
	"ChargeFrequency", "ChargePeriodEnd", "ChargePeriodStart", "CommitmentDiscountCategory",
	"CommitmentDiscountId", "CommitmentDiscountName", "CommitmentDiscountStatus", "CommitmentDiscountType",
	"ConsumedQuantity", "ConsumedUnit", "ContractedCost", "ContractedUnitPrice", "EffectiveCost",
	"InvoiceIssuerName", "ListCost", "ListUnitPrice", "PricingCategory", "PricingQuantity", "PricingUnit",
	"ProviderName", "PublisherName", "RegionId", "RegionName", "ResourceId", "ResourceName", "ResourceType",
	"ServiceCategory", "ServiceName", "SkuId", "SkuPriceId", "SubAccountId", "SubAccountName", "Tags",
	"x_PoolName", "x_PriceSource", "x_PriceAsOf", "x_PriceEstimated", "x_BusyQuantity", "x_IdleCost",
}

// FOCUS values used in rows.
const (
	FOCUSChargeUsage      = "Usage"
	FOCUSUsageBased       = "Usage-Based"
	FOCUSPricingStandard  = "Standard"
	FOCUSPricingDynamic   = "Dynamic"
	FOCUSUnitHours        = "Hours"
	FOCUSServiceCompute   = "Compute"
	FOCUSResourceInstance = "Instance"
)

// FOCUSRow is one charge: an instance (or, for compacted hours, a group of
// instances of one pool, offering and price) during one hour, or the part
// of it inside the window. Each field is the FOCUS 1.0 column of the same
// name (ID spelled Id in the column), the last six the x_ columns; empty
// strings and zero times are nulls.
type FOCUSRow struct {
	AvailabilityZone    string
	BilledCost          Money
	BillingCurrency     string
	BillingPeriodStart  time.Time
	BillingPeriodEnd    time.Time
	ChargeCategory      string
	ChargeDescription   string
	ChargeFrequency     string
	ChargePeriodStart   time.Time
	ChargePeriodEnd     time.Time
	ConsumedQuantity    float64
	ConsumedUnit        string
	ContractedCost      Money
	ContractedUnitPrice float64
	EffectiveCost       Money
	InvoiceIssuerName   string
	ListCost            Money
	ListUnitPrice       float64
	PricingCategory     string
	PricingQuantity     float64
	PricingUnit         string
	ProviderName        string
	PublisherName       string
	RegionID            string
	RegionName          string
	// ResourceID is the instance ID; empty for compacted hours.
	ResourceID      string
	ResourceName    string
	ResourceType    string
	ServiceCategory string
	ServiceName     string
	SkuID           string
	SkuPriceID      string
	Tags            map[string]string
	// Custom columns.
	PoolName       string
	PriceSource    string
	PriceAsOf      time.Time
	PriceEstimated bool
	BusyQuantity   float64
	IdleCost       Money
}

// providerNames maps our provider names to the provider (and publisher, and
// invoice issuer) and service names FOCUS rows carry.
func providerNames(p string) (providerName, service string) {
	switch p {
	case "aws":
		return "AWS", "Amazon Elastic Compute Cloud"
	case "tencent":
		return "Tencent Cloud", "Cloud GPU Service"
	case "local":
		return "TideGPU", "TideGPU local processes"
	case "sim":
		return "TideGPU", "TideGPU spot market simulator"
	}
	return p, p
}

func pricingCategory(m market.Market, source string) string {
	if m == market.Spot && source != market.PriceOverride && source != market.PriceFallback {
		return FOCUSPricingDynamic
	}
	return FOCUSPricingStandard
}

type rowMeta struct {
	pool, providerName, region, zone, instanceType, id string
	market                                             market.Market
	models                                             []string
}

func newRow(m rowMeta, cur string, eff market.Price, effN, listN int64, hs, he int64, ns, busyNs float64, effA, listA, busyA acc) FOCUSRow {
	pn, svc := providerNames(m.providerName)
	start, end := time.Unix(0, hs).UTC(), time.Unix(0, he).UTC()
	bp := MonthWindow(start)
	hours := ns / float64(nsPerHour)
	r := FOCUSRow{
		AvailabilityZone: m.zone, BillingCurrency: cur, BillingPeriodStart: bp.From, BillingPeriodEnd: bp.To,
		ChargeCategory: FOCUSChargeUsage, ChargeFrequency: FOCUSUsageBased,
		ChargePeriodStart: start, ChargePeriodEnd: end,
		ConsumedQuantity: hours, ConsumedUnit: FOCUSUnitHours, PricingQuantity: hours, PricingUnit: FOCUSUnitHours,
		ContractedUnitPrice: float64(effN) / nanosPerUnit, ListUnitPrice: float64(listN) / nanosPerUnit,
		InvoiceIssuerName: pn, ProviderName: pn, PublisherName: pn, RegionID: m.region, RegionName: m.region,
		ResourceID: m.id, ResourceName: m.id, ResourceType: FOCUSResourceInstance,
		ServiceCategory: FOCUSServiceCompute, ServiceName: svc, SkuID: m.instanceType,
		SkuPriceID:      strings.Join([]string{m.providerName, m.region, m.zone, m.instanceType, string(m.market)}, "/"),
		PricingCategory: pricingCategory(m.market, eff.Source),
		PoolName:        m.pool, PriceSource: eff.Source, PriceAsOf: eff.AsOf, PriceEstimated: eff.Estimated,
		BusyQuantity: busyNs / float64(nsPerHour),
	}
	r.EffectiveCost, r.ListCost = Money{cur, effA}, Money{cur, listA}
	r.BilledCost, r.ContractedCost = r.EffectiveCost, r.EffectiveCost
	idle := effA.sub(busyA)
	if idle.neg() {
		idle = acc{}
	}
	r.IdleCost = Money{cur, idle}
	what := "instance-hours"
	if m.id == "" {
		what = "instance-hours (compacted, several instances)"
	}
	r.ChargeDescription = fmt.Sprintf("%s %s %s in %s%s for pool %s (%s price)", m.instanceType, m.market, what,
		m.region, zoneSuffix(m.zone), m.pool, eff.Source)
	r.Tags = map[string]string{"tidegpu.io/pool": m.pool}
	if len(m.models) > 0 {
		r.Tags["tidegpu.io/models"] = strings.Join(m.models, ",")
	}
	return r
}

// FOCUSRows returns the FOCUS rows of every pool for w, sorted by charge
// period, resource and SKU price.
func (l *Ledger) FOCUSRows(w Window) []FOCUSRow {
	now := l.clock.Now().UnixNano()
	from, to := w.ns()
	var rows []FOCUSRow
	l.mu.RLock()
	for _, lt := range l.inst {
		meta := rowMeta{pool: lt.info.Pool, providerName: lt.info.Provider, region: lt.info.Region, zone: lt.info.Zone,
			instanceType: lt.info.InstanceType, id: lt.info.ID, market: lt.info.Market, models: lt.info.Models}
		lt.walk(from, to, now, func(p piece) {
			s := &lt.segs[p.seg]
			ns := p.wb - p.wa
			bw := p.busyIn()
			busyA := mulAcc(s.effN, p.busy)
			if !p.full() {
				busyA = accFromFloat(float64(s.effN) * bw)
			}
			hs, he := max(p.hour*nsPerHour, from), min((p.hour+1)*nsPerHour, to)
			rows = append(rows, newRow(meta, s.eff.Currency, s.eff, s.effN, s.listN, hs, he, float64(ns), bw,
				mulAcc(s.effN, ns), mulAcc(s.listN, ns), busyA))
		})
	}
	for k, hours := range l.aggs {
		meta := rowMeta{pool: k.Pool, providerName: k.Provider, region: k.Region, zone: k.Zone,
			instanceType: k.InstanceType, market: k.Market}
		eff := market.Price{Currency: k.Currency, Source: k.Source, Estimated: k.Estimated, Market: k.Market}
		for h, v := range hours {
			frac, ok := hourFrac(h, from, to)
			if !ok {
				continue
			}
			effA, listA, busyA := v.costs(k)
			if frac < 1 {
				effA, listA, busyA = accFromFloat(effA.float()*frac), accFromFloat(listA.float()*frac), accFromFloat(busyA.float()*frac)
			}
			hs, he := max(h*nsPerHour, from), min((h+1)*nsPerHour, to)
			rows = append(rows, newRow(meta, k.Currency, eff, k.EffN, k.ListN, hs, he, float64(v.instNs)*frac,
				float64(v.busyNs)*frac, effA, listA, busyA))
		}
	}
	l.mu.RUnlock()
	sort.Slice(rows, func(i, j int) bool {
		a, b := rows[i], rows[j]
		if !a.ChargePeriodStart.Equal(b.ChargePeriodStart) {
			return a.ChargePeriodStart.Before(b.ChargePeriodStart)
		}
		if a.PoolName != b.PoolName {
			return a.PoolName < b.PoolName
		}
		if a.ResourceID != b.ResourceID {
			return a.ResourceID < b.ResourceID
		}
		if a.SkuPriceID != b.SkuPriceID {
			return a.SkuPriceID < b.SkuPriceID
		}
		return a.ContractedUnitPrice < b.ContractedUnitPrice
	})
	return rows
}

// WriteFOCUSCSV writes rows as CSV with the FOCUSColumns header.
func WriteFOCUSCSV(w io.Writer, rows []FOCUSRow) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(FOCUSColumns); err != nil {
		return fmt.Errorf("writing FOCUS header: %w", err)
	}
	for i, r := range rows {
		if err := cw.Write(r.record()); err != nil {
			return fmt.Errorf("writing FOCUS row %d: %w", i, err)
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("writing FOCUS CSV: %w", err)
	}
	return nil
}

func focusTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02T15:04:05Z")
}

func focusDecimal(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

func focusMoney(m Money) string {
	s := m.String()
	if i := strings.IndexByte(s, ' '); i >= 0 {
		s = s[:i]
	}
	return s
}

// record returns the row's fields in FOCUSColumns order.
func (r FOCUSRow) record() []string {
	tags := ""
	if len(r.Tags) > 0 {
		b, _ := json.Marshal(r.Tags) // map[string]string always marshals
		tags = string(b)
	}
	asOf := ""
	if !r.PriceAsOf.IsZero() {
		asOf = focusTime(r.PriceAsOf)
	}
	return []string{
		r.AvailabilityZone, focusMoney(r.BilledCost), "", "", r.BillingCurrency,
		focusTime(r.BillingPeriodEnd), focusTime(r.BillingPeriodStart), r.ChargeCategory, "", r.ChargeDescription,
		r.ChargeFrequency, focusTime(r.ChargePeriodEnd), focusTime(r.ChargePeriodStart), "",
		"", "", "", "",
		focusDecimal(r.ConsumedQuantity), r.ConsumedUnit, focusMoney(r.ContractedCost), focusDecimal(r.ContractedUnitPrice), focusMoney(r.EffectiveCost),
		r.InvoiceIssuerName, focusMoney(r.ListCost), focusDecimal(r.ListUnitPrice), r.PricingCategory, focusDecimal(r.PricingQuantity), r.PricingUnit,
		r.ProviderName, r.PublisherName, r.RegionID, r.RegionName, r.ResourceID, r.ResourceName, r.ResourceType,
		r.ServiceCategory, r.ServiceName, r.SkuID, r.SkuPriceID, "", "", tags,
		r.PoolName, r.PriceSource, asOf, strconv.FormatBool(r.PriceEstimated), focusDecimal(r.BusyQuantity), focusMoney(r.IdleCost),
	}
}
