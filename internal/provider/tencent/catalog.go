package tencent

// catalog is the embedded fallback price table: on-demand (pay-as-you-go,
// POSTPAID_BY_HOUR) Linux prices per hour in USD for a few GPU instance
// types, used only when InquiryPriceRunInstances gives no live price.
//
// Source: Tencent Cloud CVM pricing, https://www.tencentcloud.com/pricing/cvm
// (GPU Computing instances GN7 = NVIDIA T4, GN10X = V100, GT4 = A100),
// region ap-singapore; table compiled 2026-08 for issue 5. The pricing
// page could not be fetched from the build environment, so these are
// rounded indicative figures, not a quote: they order offerings sensibly
// when the price API is down, nothing more. Refresh them from the page
// above before relying on them. Tencent's spot prices float at roughly 3%
// to 20% of pay-as-you-go (https://www.tencentcloud.com/document/product/213/15373);
// the table holds no spot prices, so a spot offering priced from it is
// labelled PriceFallback.
var catalog = map[string]float64{
	"GN7.2XLARGE32":    1.20,  // 1x T4, 8 vCPU, 32 GiB
	"GN7.5XLARGE80":    1.90,  // 1x T4, 20 vCPU, 80 GiB
	"GN7.10XLARGE160":  3.80,  // 2x T4, 40 vCPU, 160 GiB
	"GN10X.2XLARGE40":  2.90,  // 1x V100, 8 vCPU, 40 GiB
	"GN10X.9XLARGE160": 11.00, // 4x V100, 36 vCPU, 160 GiB
	"GT4.4XLARGE96":    4.10,  // 1x A100 40 GB, 16 vCPU, 96 GiB
}

// catalogPrice returns the catalog's on-demand price of an instance type.
func catalogPrice(instanceType string) (float64, bool) {
	p, ok := catalog[instanceType]
	return p, ok
}
