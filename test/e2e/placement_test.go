package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tidegpu/tidegpu/test/testbin"
)

// A ZoneResilient sim pool, through `tidegpu up`: at
// most maxPerZone spot instances in a zone, none where the zone has no
// capacity, and on-demand cover so that losing the fullest zone still
// leaves the wanted count.
func TestSimPoolCapsZonesAndCoversZoneLoss(t *testing.T) {
	// Capacity per zone, constant: two zones of us-east-1 with room for 4,
	// us-west-2a with none.
	traces := testbin.ConstantTrace(t, 100, map[string]int{"us-east-1a": 4, "us-east-1b": 4, "us-west-2a": 0})
	file := filepath.Join(t.TempDir(), "pool.yaml")
	pool := fmt.Sprintf(`apiVersion: tidegpu.eja.dev/v1
kind: TidePool
metadata:
  name: hedged
spec:
  provider: sim
  instanceType: p3.2xlarge
  minimum: 4
  maximum: 4
  placement:
    strategy: ZoneResilient
  sim:
    traceDir: %s
    compression: 1
`, traces)
	if err := os.WriteFile(file, []byte(pool), 0o644); err != nil {
		t.Fatal(err)
	}
	u := startUp(t, "", "-f", file)
	// 4 spot (2 per us-east zone; us-west-2a has none to give) and 2
	// on-demand: losing either us-east zone leaves 2 spot + 2 on-demand.
	want := map[string]int{"us-east-1a/spot": 2, "us-east-1b/spot": 2, "on-demand": 2}
	var got map[string]int
	eventually(t, 30*time.Second, "2+2 spot and 2 on-demand, all Ready", func() bool {
		p, ok := u.pool("hedged")
		if !ok {
			return false
		}
		got = map[string]int{}
		for _, in := range p.Status.Instances {
			if in.Phase != "Ready" {
				continue
			}
			key := in.Zone + "/" + in.Market
			if in.Market == "on-demand" {
				key = "on-demand"
			}
			got[key]++
		}
		return fmt.Sprint(got) == fmt.Sprint(want)
	})
	// Nothing else runs: no spot in the empty zone, nothing starting.
	p, _ := u.pool("hedged")
	if len(p.Status.Instances) != 6 {
		t.Errorf("%d instances, want 6 (%v)", len(p.Status.Instances), got)
	}
}
