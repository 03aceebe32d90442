// Package replay is the what-if tool behind `tidegpu replay`: it replays a
// TidePool spec on a spot-capacity trace through the pool engine's own round
// (engine.Driver) against the process-less spot-market simulator
// (internal/provider/spotsim), on a fake clock, and measures availability,
// cost and what happened. Nothing of the engine's decision is copied here:
// this package only moves the clock, plays readiness (a cold start after a
// launch, a warm start after a start from standby) and measures.
package replay

import (
	"errors"
	"time"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/events"
	"github.com/tidegpu/tidegpu/internal/placement"
	"github.com/tidegpu/tidegpu/internal/provider/spotsim"
)

// Defaults of Options.
const (
	DefaultColdStart = 5 * time.Minute
	DefaultWarmStart = 2 * time.Minute
	DefaultNotice    = 2 * time.Minute
	DefaultWarmup    = 30 * time.Minute
	// DefaultSample is the spacing of Result.Series.
	DefaultSample = 5 * time.Minute
)

// ErrOptions is wrapped by Run's errors about its options.
var ErrOptions = errors.New("invalid replay options")

// Options are one replay.
type Options struct {
	// Pool is the pool to replay (its spec decides everything the engine
	// does); its name is used for the simulator's instances.
	Pool *tidev1.TidePool
	// Trace is the capacity of the zones (required); the pool's zones
	// (spec.placement.availabilityZones) must be in it.
	Trace *spotsim.Trace
	// Prices per zone override the catalog; a zone neither lists is an
	// error naming the zone.
	Prices map[string]spotsim.ZonePrices
	// Notice of a preemption (DefaultNotice when 0; negative: none).
	Notice time.Duration
	// ColdStart is launch → ready; WarmStart is a standby's start → ready.
	ColdStart, WarmStart time.Duration
	// Warmup at the start is not scored (DefaultWarmup when 0).
	Warmup time.Duration
	// From and Duration select the part of the trace replayed (0: all).
	From, Duration time.Duration
	// Sample spaces Result.Series (DefaultSample when 0).
	Sample time.Duration
	// StandbyPrice is a stopped instance's price per hour (its disk);
	// 0 means the pool's spec.pricing.standbyPerHour or its default.
	StandbyPrice float64
	// Learning sets how the pool learns its market (zero: the engine's
	// defaults), for experiments that choose it on one trace.
	Learning placement.Learning
	// Events, when set, receives the engine's events as they are
	// recorded (their Time is the replay's clock: Epoch plus trace time).
	Events func(events.Event)
	// Progress, when set, is called now and then with the trace time done
	// and the total.
	Progress func(done, total time.Duration)
}

// Sample is the pool at one time of the replay (for the chart).
type Sample struct {
	// At is the time from the start of the replayed part.
	At time.Duration `json:"at"`
	// Wanted, Serving (gateway targets) and Ready (targets not under a
	// notice) at that time; Spot, OnDemand and Standby count instances.
	Wanted   int `json:"wanted"`
	Serving  int `json:"serving"`
	Ready    int `json:"ready"`
	Spot     int `json:"spot"`
	OnDemand int `json:"onDemand"`
	Standby  int `json:"standby"`
}

// Hours are instance-hours by market.
type Hours struct {
	Spot     float64 `json:"spot"`
	OnDemand float64 `json:"onDemand"`
	Standby  float64 `json:"standby"`
}

// Result is what a replay measured over the scored time.
type Result struct {
	// Strategy is what the pool's placement strategy resolved to.
	Strategy string `json:"strategy"`
	// Scored is the trace time measured (after the warm-up).
	Scored time.Duration `json:"scored"`
	// Availability is the fraction of scored time with at least the
	// wanted number of instances serving, as the engine serves (an
	// instance under notice serves until it is gone).
	Availability float64 `json:"availability"`
	// AvailabilityDrained is the same with instances under notice not
	// counted (drained at the notice).
	AvailabilityDrained float64 `json:"availabilityDrained"`
	// Dips counts the times serving fell below wanted; LongestDip is the
	// longest.
	Dips       int           `json:"dips"`
	LongestDip time.Duration `json:"longestDip"`
	// DipsDrained counts the dips with instances under notice not
	// counted (as status.ready counts them).
	DipsDrained int `json:"dipsDrained"`
	// Cost of the scored time (standby included) and OnDemandCost, what
	// the wanted instances would have cost all on-demand; Savings is
	// 1 - Cost/OnDemandCost. Currency is USD.
	Cost         float64 `json:"cost"`
	OnDemandCost float64 `json:"onDemandCost"`
	Savings      float64 `json:"savings"`
	Hours        Hours   `json:"hours"`
	// Launches accepted, Refused spot launches, Preemptions (interruption
	// notices), standby Starts and Stops, over the whole replay.
	Launches    int `json:"launches"`
	Refused     int `json:"refused"`
	Preemptions int `json:"preemptions"`
	Starts      int `json:"starts"`
	Stops       int `json:"stops"`
	// Rounds is the number of engine rounds run.
	Rounds int `json:"rounds"`
	// Series samples the pool every Options.Sample.
	Series []Sample `json:"series,omitempty"`
}
