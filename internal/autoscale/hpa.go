package autoscale

import (
	"math"
	"time"
)

// This file reproduces the HPA controller's arithmetic (kubernetes
// pkg/controller/podautoscaler: replica_calculator.go and horizontal.go,
// autoscaling/v2 with behaviors), written anew as pure functions over the
// state the controller keeps per HPA. Float expressions are kept in the same
// form as the controller's so that roundings agree (for example a 10 %
// scale-up limit from 50 replicas is ceil(50 × 1.1) = ceil(55.00000000000001)
// = 56 there, and here).

// Recommendation is one unstabilised recommendation the HPA remembers for
// its stabilisation windows.
type Recommendation struct {
	Replicas int32     `json:"replicas"`
	At       time.Time `json:"at"`
}

// ScaleEvent is one change of size the HPA remembers for its rate policies.
type ScaleEvent struct {
	Change   int32     `json:"change"`
	At       time.Time `json:"at"`
	Outdated bool      `json:"outdated,omitempty"`
}

// within reports whether ratio is inside the tolerance band
// [1 - down, 1 + up] (the HPA's Tolerances.isWithin).
func within(ratio, up, down float64) bool {
	return (1.0-down) <= ratio && ratio <= (1.0+up)
}

// ceilReplicas converts a non-negative float replica count, saturating
// instead of overflowing int32 (the HPA would overflow).
func ceilReplicas(x float64) int32 {
	c := math.Ceil(x)
	switch {
	case math.IsNaN(c) || c <= 0:
		return 0
	case c >= math.MaxInt32:
		return math.MaxInt32
	}
	return int32(c)
}

// additiveReplicas is the HPA's GetExternalPerPodMetricReplicas: total is
// the pool-wide sum, target the per-instance target. It returns the
// proposal and the usage ratio total / (target × current).
func additiveReplicas(current int32, total, target, tolUp, tolDown float64) (int32, float64) {
	ratio := total / (target * float64(current))
	if within(ratio, tolUp, tolDown) {
		return current, ratio
	}
	return ceilReplicas(total / target), ratio
}

// valueReplicas is the HPA's getUsageRatioReplicaCount for a Value target:
// ratio = value / target; within tolerance keeps current; otherwise
// ceil(ratio × ready); from zero replicas ceil(ratio).
func valueReplicas(current, ready int32, value, target, tolUp, tolDown float64) (int32, float64) {
	ratio := value / target
	if current == 0 {
		return ceilReplicas(ratio), ratio
	}
	if within(ratio, tolUp, tolDown) {
		return current, ratio
	}
	return ceilReplicas(ratio * float64(ready)), ratio
}

// stabilize is the HPA's stabilizeRecommendationWithBehaviors: the lowest
// recommendation of the scale-up window bounds scale-up, the highest of the
// scale-down window bounds scale-down, both including desired; current is
// moved into [upRec, downRec]. desired is then recorded, reusing the slot of
// a sample older than both windows if there is one.
func stabilize(recs []Recommendation, now time.Time, up, down rules, current, desired int32) (int32, []Recommendation) {
	upRec, downRec := desired, desired
	upCutoff := now.Add(-up.window)
	downCutoff := now.Add(-down.window)
	old := -1
	for i, r := range recs {
		if r.At.After(upCutoff) {
			upRec = min(r.Replicas, upRec)
		}
		if r.At.After(downCutoff) {
			downRec = max(r.Replicas, downRec)
		}
		if r.At.Before(upCutoff) && r.At.Before(downCutoff) {
			old = i
		}
	}
	rec := current
	if rec < upRec {
		rec = upRec
	}
	if rec > downRec {
		rec = downRec
	}
	if old >= 0 {
		recs[old] = Recommendation{Replicas: desired, At: now}
	} else {
		recs = append(recs, Recommendation{Replicas: desired, At: now})
	}
	return rec, recs
}

// changeInPeriod is the HPA's getReplicasChangePerPeriod.
func changeInPeriod(periodSeconds int32, events []ScaleEvent, now time.Time) int32 {
	cutoff := now.Add(-time.Duration(periodSeconds) * time.Second)
	var n int32
	for _, e := range events {
		if e.At.After(cutoff) {
			n += e.Change
		}
	}
	return n
}

// scaleUpLimit is the HPA's calculateScaleUpLimitWithScalingRules.
func scaleUpLimit(current int32, upEvents, downEvents []ScaleEvent, r rules, now time.Time) int32 {
	var result int32
	var pick func(a, b int32) int32
	switch r.selectPol {
	case SelectDisabled:
		return current
	case SelectMin:
		result, pick = math.MaxInt32, func(a, b int32) int32 { return min(a, b) }
	default:
		result, pick = math.MinInt32, func(a, b int32) int32 { return max(a, b) }
	}
	for _, p := range r.policies {
		start := current - changeInPeriod(p.PeriodSeconds, upEvents, now) + changeInPeriod(p.PeriodSeconds, downEvents, now)
		var proposed int32
		if p.Type == PolicyPods {
			proposed = start + p.Value
		} else {
			proposed = int32(math.Ceil(float64(start) * (1 + float64(p.Value)/100)))
		}
		result = pick(result, proposed)
	}
	return result
}

// scaleDownLimit is the HPA's calculateScaleDownLimitWithBehaviors.
func scaleDownLimit(current int32, upEvents, downEvents []ScaleEvent, r rules, now time.Time) int32 {
	var result int32
	var pick func(a, b int32) int32
	switch r.selectPol {
	case SelectDisabled:
		return current
	case SelectMin:
		result, pick = math.MinInt32, func(a, b int32) int32 { return max(a, b) }
	default:
		result, pick = math.MaxInt32, func(a, b int32) int32 { return min(a, b) }
	}
	for _, p := range r.policies {
		start := current - changeInPeriod(p.PeriodSeconds, upEvents, now) + changeInPeriod(p.PeriodSeconds, downEvents, now)
		var proposed int32
		if p.Type == PolicyPods {
			proposed = start - p.Value
		} else {
			proposed = int32(float64(start) * (1 - float64(p.Value)/100))
		}
		result = pick(result, proposed)
	}
	return result
}

// Limiting conditions, as the HPA names them in its ScalingLimited condition.
const (
	limitNone          = "DesiredWithinRange"
	limitScaleUp       = "ScaleUpLimit"
	limitTooMany       = "TooManyReplicas"
	limitScaleDown     = "ScaleDownLimit"
	limitTooFew        = "TooFewReplicas"
	stabilizedUp       = "ScaleUpStabilized"
	stabilizedDown     = "ScaleDownStabilized"
	stabilizedNone     = "ReadyForNewScale"
	reasonAboveMax     = "Current number of replicas above maxReplicas"
	reasonBelowMin     = "Current number of replicas below minReplicas"
	reasonBelowSchedMn = "Current number of replicas below the scheduled minimum"
)

// limitRate is the HPA's convertDesiredReplicasWithBehaviorRate: the rate
// policies and [minReplicas, maxReplicas] applied to the stabilised
// recommendation.
func limitRate(current, desired, minR, maxR int32, upEvents, downEvents []ScaleEvent, up, down rules, now time.Time) (int32, string) {
	switch {
	case desired > current:
		limit := scaleUpLimit(current, upEvents, downEvents, up, now)
		if limit < current {
			limit = current
		}
		allowed, cond := maxR, limitTooMany
		if allowed > limit {
			allowed, cond = limit, limitScaleUp
		}
		if desired > allowed {
			return allowed, cond
		}
	case desired < current:
		limit := scaleDownLimit(current, upEvents, downEvents, down, now)
		if limit > current {
			limit = current
		}
		allowed, cond := minR, limitTooFew
		if allowed < limit {
			allowed, cond = limit, limitScaleDown
		}
		if desired < allowed {
			return allowed, cond
		}
	}
	return desired, limitNone
}

// storeScaleEvent is the HPA's storeScaleEvent for one direction: events
// older than the direction's longest policy period are marked outdated and
// the last outdated one is reused for the new event.
func storeScaleEvent(events []ScaleEvent, longestPeriod, change int32, now time.Time) []ScaleEvent {
	cutoff := now.Add(-time.Duration(longestPeriod) * time.Second)
	old := -1
	for i := range events {
		if events[i].At.Before(cutoff) {
			events[i].Outdated = true
		}
		if events[i].Outdated {
			old = i
		}
	}
	e := ScaleEvent{Change: change, At: now}
	if old >= 0 {
		events[old] = e
		return events
	}
	return append(events, e)
}
