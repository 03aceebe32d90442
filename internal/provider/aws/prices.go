package aws

// onDemandUSD is a small offline table of on-demand prices (USD per hour,
// Linux, shared tenancy) for the GPU types pools commonly use, in the two
// regions most used for them. It stands in until the cost package owns a
// full catalog; every price taken from it is labelled PriceCatalog.
//
// Source: the Amazon EC2 On-Demand pricing page,
// https://aws.amazon.com/ec2/pricing/on-demand/ (Linux, us-east-1 and
// us-west-2, which list the same prices for these families), as of
// 2026-06; g5.xlarge at $1.006/h cross-checked with
// https://www.factualminds.com/blog/amazon-ec2-on-demand-pricing-instance-families-2026/
// (2026-06-17). p4d and p5 are the prices after AWS's June 2025 reduction
// for P4/P5 instances (previously $32.7726 and $98.32). Prices change:
// treat these as estimates.
var onDemandUSD = map[string]map[string]float64{
	"us-east-1": gpuOnDemand,
	"us-west-2": gpuOnDemand,
}

var gpuOnDemand = map[string]float64{
	// G4dn: NVIDIA T4.
	"g4dn.xlarge":   0.526,
	"g4dn.2xlarge":  0.752,
	"g4dn.4xlarge":  1.204,
	"g4dn.8xlarge":  2.176,
	"g4dn.12xlarge": 3.912,
	"g4dn.16xlarge": 4.352,
	// G5: NVIDIA A10G.
	"g5.xlarge":   1.006,
	"g5.2xlarge":  1.212,
	"g5.4xlarge":  1.624,
	"g5.8xlarge":  2.448,
	"g5.12xlarge": 5.672,
	"g5.16xlarge": 4.096,
	"g5.24xlarge": 8.144,
	"g5.48xlarge": 16.288,
	// G6: NVIDIA L4.
	"g6.xlarge":   0.8048,
	"g6.2xlarge":  0.9776,
	"g6.4xlarge":  1.3232,
	"g6.8xlarge":  2.0144,
	"g6.12xlarge": 4.6016,
	"g6.16xlarge": 3.3968,
	"g6.24xlarge": 6.6752,
	"g6.48xlarge": 13.3504,
	// P3: NVIDIA V100.
	"p3.2xlarge":  3.06,
	"p3.8xlarge":  12.24,
	"p3.16xlarge": 24.48,
	// P4d: NVIDIA A100.
	"p4d.24xlarge": 21.96,
	// P5: NVIDIA H100.
	"p5.48xlarge": 55.04,
}

// onDemandPrice is the table's price for the type in the region.
func onDemandPrice(region, instanceType string) (float64, bool) {
	p, ok := onDemandUSD[region][instanceType]
	return p, ok
}
