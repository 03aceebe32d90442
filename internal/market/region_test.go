package market

import (
	"strings"
	"testing"
)

// Zone names as each cloud documents them:
//   - AWS: "Regions and Zones" in the Amazon EC2 User Guide
//     (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/using-regions-availability-zones.html),
//     "Available Local Zones" in the AWS Local Zones User Guide
//     (https://docs.aws.amazon.com/local-zones/latest/ug/available-local-zones.html),
//     "Available Wavelength Zones" in the AWS Wavelength Developer Guide
//     (https://docs.aws.amazon.com/wavelength/latest/developerguide/available-wavelength-zones.html)
//     and "AZ IDs" in the AWS RAM User Guide
//     (https://docs.aws.amazon.com/ram/latest/userguide/working-with-az-ids.html).
//   - GCP: "Regions and zones" in the Compute Engine documentation
//     (https://cloud.google.com/compute/docs/regions-zones).
//   - Azure: "What are availability zones?"
//     (https://learn.microsoft.com/azure/reliability/availability-zones-overview):
//     zones are numbered 1 to 3 within a region; AKS labels nodes with
//     region-number (https://learn.microsoft.com/azure/aks/availability-zones).
//   - Tencent Cloud: CVM "Regions and Availability Zones"
//     (https://www.tencentcloud.com/document/product/213/6091) and the zone
//     list of DescribeZones' ZoneInfo
//     (https://www.tencentcloud.com/document/api/1271/71927).
var regionCases = []struct{ zone, want string }{
	// AWS Availability Zones: the region and a letter.
	{"us-east-1a", "us-east-1"},
	{"us-east-1f", "us-east-1"},
	{"us-east-2b", "us-east-2"},
	{"us-west-1c", "us-west-1"},
	{"us-west-2d", "us-west-2"},
	{"af-south-1a", "af-south-1"},
	{"ap-east-1b", "ap-east-1"},
	{"ap-south-1a", "ap-south-1"},
	{"ap-south-2c", "ap-south-2"},
	{"ap-northeast-1a", "ap-northeast-1"},
	{"ap-northeast-3c", "ap-northeast-3"},
	{"ap-southeast-3a", "ap-southeast-3"},
	{"ca-central-1d", "ca-central-1"},
	{"ca-west-1a", "ca-west-1"},
	{"eu-central-1a", "eu-central-1"},
	{"eu-central-2b", "eu-central-2"},
	{"eu-west-3c", "eu-west-3"},
	{"eu-south-2a", "eu-south-2"},
	{"eu-north-1b", "eu-north-1"},
	{"il-central-1a", "il-central-1"},
	{"me-south-1a", "me-south-1"},
	{"me-central-1b", "me-central-1"},
	{"mx-central-1a", "mx-central-1"},
	{"sa-east-1c", "sa-east-1"},
	{"cn-north-1a", "cn-north-1"},
	{"cn-northwest-1b", "cn-northwest-1"},
	{"us-gov-west-1a", "us-gov-west-1"},
	{"us-gov-east-1c", "us-gov-east-1"},
	// AWS Local Zones and Wavelength Zones: the parent region, a dash, more.
	{"us-west-2-lax-1a", "us-west-2"},
	{"us-west-2-lax-1b", "us-west-2"},
	{"us-east-1-bos-1a", "us-east-1"},
	{"us-east-1-mia-1a", "us-east-1"},
	{"us-west-2-den-1a", "us-west-2"},
	{"ap-northeast-1-tpe-1a", "ap-northeast-1"},
	{"us-east-1-wl1-bos-wlz-1", "us-east-1"},
	{"ap-northeast-1-wl1-kix-wlz-1", "ap-northeast-1"},
	// An AWS region is its own region.
	{"us-east-1", "us-east-1"},
	{"us-gov-west-1", "us-gov-west-1"},
	// AWS zone IDs say nothing of the region by name.
	{"use1-az1", "use1-az1"},
	{"usw2-lax1-az1", "usw2-lax1-az1"},

	// GCP: the region, a dash and a letter.
	{"us-central1-a", "us-central1"},
	{"us-central1-b", "us-central1"},
	{"us-central1-c", "us-central1"},
	{"us-central1-f", "us-central1"},
	{"us-east1-b", "us-east1"},
	{"us-east4-c", "us-east4"},
	{"us-west1-a", "us-west1"},
	{"europe-west1-d", "europe-west1"},
	{"europe-west4-a", "europe-west4"},
	{"europe-west4-b", "europe-west4"},
	{"europe-north1-c", "europe-north1"},
	{"asia-east1-a", "asia-east1"},
	{"asia-northeast1-b", "asia-northeast1"},
	{"asia-south1-c", "asia-south1"},
	{"asia-southeast1-a", "asia-southeast1"},
	{"australia-southeast1-b", "australia-southeast1"},
	{"northamerica-northeast1-a", "northamerica-northeast1"},
	{"southamerica-east1-c", "southamerica-east1"},
	{"me-central2-a", "me-central2"},
	{"africa-south1-b", "africa-south1"},
	// A GCP region is its own region.
	{"us-central1", "us-central1"},
	{"europe-west4", "europe-west4"},

	// Azure: zones are numbers, and say nothing of their region.
	{"1", "1"},
	{"2", "2"},
	{"3", "3"},
	// AKS's node labels: region-number.
	{"eastus-1", "eastus"},
	{"eastus2-1", "eastus2"},
	{"westeurope-3", "westeurope"},

	// Tencent Cloud: the region, a dash and a number.
	{"ap-guangzhou-3", "ap-guangzhou"},
	{"ap-guangzhou-7", "ap-guangzhou"},
	{"ap-shanghai-2", "ap-shanghai"},
	{"ap-shanghai-8", "ap-shanghai"},
	{"ap-nanjing-1", "ap-nanjing"},
	{"ap-beijing-7", "ap-beijing"},
	{"ap-chengdu-2", "ap-chengdu"},
	{"ap-chongqing-1", "ap-chongqing"},
	{"ap-hongkong-2", "ap-hongkong"},
	{"ap-singapore-1", "ap-singapore"},
	{"ap-seoul-2", "ap-seoul"},
	{"ap-tokyo-1", "ap-tokyo"},
	{"ap-bangkok-1", "ap-bangkok"},
	{"na-siliconvalley-1", "na-siliconvalley"},
	{"na-siliconvalley-2", "na-siliconvalley"},
	{"na-ashburn-2", "na-ashburn"},
	{"eu-frankfurt-1", "eu-frankfurt"},
	{"ap-shenzhen-fsi-3", "ap-shenzhen-fsi"},
	{"ap-shanghai-fsi-1", "ap-shanghai-fsi"},
	{"ap-shanghai-10", "ap-shanghai"},
	// A Tencent region is its own region.
	{"ap-guangzhou", "ap-guangzhou"},
	{"na-siliconvalley", "na-siliconvalley"},

	// Anything else is its own region.
	{"", ""},
	{"a", "a"},
	{"local", "local"},
	{"zone-a", "zone-a"},
	{"sim-1a", "sim-1a"},
	{"US-EAST-1A", "US-EAST-1A"},
	{"us-east-", "us-east-"},
	{"-1", "-1"},
}

func TestRegionOf(t *testing.T) {
	for _, tc := range regionCases {
		if got := RegionOf(tc.zone); got != tc.want {
			t.Errorf("RegionOf(%q) = %q, want %q", tc.zone, got, tc.want)
		}
	}
}

func TestRegionOfZonesOfARegionAgree(t *testing.T) {
	for _, zones := range [][]string{
		{"us-west-2a", "us-west-2b", "us-west-2-lax-1a", "us-west-2-den-1a", "us-west-2"},
		{"us-central1-a", "us-central1-f", "us-central1"},
		{"ap-guangzhou-3", "ap-guangzhou-6", "ap-guangzhou"},
	} {
		for _, z := range zones {
			if RegionOf(z) != RegionOf(zones[0]) {
				t.Errorf("RegionOf(%q) = %q, RegionOf(%q) = %q: want one region", z, RegionOf(z), zones[0], RegionOf(zones[0]))
			}
		}
	}
	if RegionOf("us-east1-b") == RegionOf("us-east-1b") {
		t.Error("GCP us-east1 and AWS us-east-1 are different regions")
	}
}

func BenchmarkRegionOf(b *testing.B) {
	zones := []string{"us-east-1f", "us-west-2-lax-1a", "us-central1-a", "ap-guangzhou-3", "1"}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		_ = RegionOf(zones[i%len(zones)])
	}
}

// FuzzRegionOf: RegionOf never panics; it returns a prefix of the zone
// (the zone itself when it knows no region), empty only for "", cut at a
// dash or before an Availability Zone's letters, never ending in a dash it
// cut at; and its answer is a region: RegionOf(RegionOf(z)) == RegionOf(z).
func FuzzRegionOf(f *testing.F) {
	for _, tc := range regionCases {
		f.Add(tc.zone)
	}
	f.Add("us-east-1a-3")
	f.Add("us-central1-a-1")
	f.Add("x-y1-z2-a")
	f.Fuzz(func(t *testing.T, zone string) {
		r := RegionOf(zone)
		if !strings.HasPrefix(zone, r) {
			t.Fatalf("RegionOf(%q) = %q: not a prefix", zone, r)
		}
		if zone != "" && r == "" {
			t.Fatalf("RegionOf(%q) is empty", zone)
		}
		if r != zone && strings.HasSuffix(r, "-") {
			t.Fatalf("RegionOf(%q) = %q ends in a dash", zone, r)
		}
		if rest := zone[len(r):]; rest != "" && rest[0] != '-' && (rest[0] < 'a' || rest[0] > 'z') {
			t.Fatalf("RegionOf(%q) = %q cuts a word: %q left", zone, r, rest)
		}
		if again := RegionOf(r); again != r {
			t.Fatalf("RegionOf(%q) = %q, but RegionOf(%q) = %q", zone, r, r, again)
		}
	})
}
