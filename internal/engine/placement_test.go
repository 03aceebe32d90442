package engine

import (
	"reflect"
	"testing"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/placement"
)

func TestPolicyFor(t *testing.T) {
	off := false
	cases := []struct {
		name   string
		spec   *tidev1.PlacementSpec
		want   placement.Policy
		placed bool
	}{
		{"no placement: the spec's own offering", nil, placement.Policy{}, false},
		{"empty placement: spread with fallback", &tidev1.PlacementSpec{}, placement.Policy{SpotFallback: true}, true},
		{"eager needs fallback", &tidev1.PlacementSpec{SpotFallback: &off, EagerFallback: true}, placement.Policy{}, true},
		{"every knob", &tidev1.PlacementSpec{AvailabilityZones: []string{"a", "b"}, Overprovision: 2, OnDemandBase: 1,
			EagerFallback: true, MaxPerZone: 2, SpreadRegions: true, CoverLoss: "Zone", CoverPreemptedOnly: true,
			MaxPerPreemptedZone: 1, CheapFirst: true},
			placement.Policy{Zones: []string{"a", "b"}, Overprovision: 2, OnDemandBase: 1, SpotFallback: true, EagerFallback: true,
				MaxPerZone: 2, SpreadRegions: true, CoverLoss: placement.DomainZone, CoverPreemptedOnly: true,
				MaxPerPreemptedZone: 1, CheapFirst: true}, true},
	}
	for _, c := range cases {
		got, placed := PolicyFor(&tidev1.TidePoolSpec{Placement: c.spec})
		if placed != c.placed || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: PolicyFor = %+v, %v; want %+v, %v", c.name, got, placed, c.want, c.placed)
		}
		if err := got.Validate(); err != nil {
			t.Errorf("%s: the policy from a valid spec is invalid: %v", c.name, err)
		}
	}
}
