package placement

import (
	"fmt"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

// TestStrategiesResolveToValidPolicies: the internal Policy a strategy
// builds is never one Policy.Validate refuses (for example eagerFallback
// without spotFallback), whatever the pool's numbers. User input is
// checked by internal/validation; this guards the strategies themselves.
func TestStrategiesResolveToValidPolicies(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	timing := Timing{Notice: 2 * time.Minute, ColdStart: 5 * time.Minute, WarmStart: 2 * time.Minute}
	for _, s := range Strategies {
		for _, want := range []int{0, 1, 4, 9} {
			for _, base := range []int{0, 2, 20} {
				for _, standby := range []int{0, 3} {
					for _, target := range []float64{0.5, 0.999, 1} {
						env := Env{Want: want, OnDemandBase: base, Standby: standby, Target: target, Timing: timing, Zones: []string{"a", "b"}}
						in := Input{Want: want, Offerings: offers(threeZones), Memory: NewCapacityMemory(clk, time.Minute)}
						pol, why := s.Resolve(env, in)
						if err := pol.Validate(); err != nil {
							t.Errorf("%s with %s resolves to an invalid policy (%s): %v", s, fmt.Sprintf("%+v", env), why, err)
						}
					}
				}
			}
		}
	}
}
