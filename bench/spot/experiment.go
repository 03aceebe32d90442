// Package spotbench replays spot-capacity traces (the SpotHedge artifact's
// aws1 and aws3) through the process-less spot market simulator
// (internal/provider/spotsim) and the placement policy
// (internal/placement), to measure, per policy, how often a pool holds its
// wanted number of ready instances and what it costs against all
// on-demand (issues 5 and 7). It also holds the controller-scale benchmark
// of the pool engine on the simulator.
//
// The experiment is discrete-time and never reads the wall clock: a fake
// clock is stepped through the trace, the simulator plays the market
// (capacity, refusals, preemptions with notice) and the real placement
// package decides every step. The loop in Run stands in for the engine's
// observe → decide → apply round, which consults the same placement policy
// (internal/engine/placement.go).
package spotbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/tidegpu/tidegpu/internal/placement"
	"github.com/tidegpu/tidegpu/internal/provider"
	"github.com/tidegpu/tidegpu/internal/provider/spotsim"
)

// Defaults of Config.
const (
	DefaultStep      = 30 * time.Second
	DefaultColdStart = 5 * time.Minute
	DefaultWarmup    = 30 * time.Minute
	// DefaultStandbyPrice is what a stopped instance costs per hour: its
	// disk only. EBS gp3 costs 0.08 USD per GB-month (us-east-1,
	// https://aws.amazon.com/ebs/pricing/, which prorates a GB-month over
	// a 30-day month); a 100 GB volume (OS, vLLM and a 7B model in fp16,
	// about 15 GB) is 8 USD a month, 8 / 720 h = 0.0111 USD/h, 0.36 % of
	// p3.2xlarge on-demand (3.06 USD/h). A stopped EC2 instance is not
	// billed for its instance time.
	DefaultStandbyPrice = 0.0111
	// decideRounds bounds the decide → launch rounds within one step: after
	// a refusal the next round places the launch elsewhere, as the engine's
	// next round would a moment later.
	decideRounds = 4
)

const pool = "bench"

// Config is one experiment.
type Config struct {
	// Trace is the capacity to replay (required).
	Trace *spotsim.Trace
	// Want is N, the ready instances the pool wants.
	Want int
	// Policy decides the placement.
	Policy placement.Policy
	// ColdStart is how long an instance takes from launch to ready.
	ColdStart time.Duration
	// Notice of a preemption; 0 means the simulator's default (2 min).
	Notice time.Duration
	// Step of the simulation; trace gap, notice and cold start should be
	// multiples of it. Default 30 s.
	Step time.Duration
	// Warmup at the start is not scored. Default 30 min.
	Warmup time.Duration
	// Duration simulated; 0 means the whole trace.
	Duration time.Duration
	// MemoryTTL of the placement's capacity memory; 0 means its default.
	MemoryTTL time.Duration
	// Prices per zone for the simulator; nil means its catalog prices.
	Prices map[string]spotsim.ZonePrices
	// RevealCapacity lets the simulator's offerings tell which zones have
	// capacity now (an oracle no cloud offers).
	RevealCapacity bool
	// PreemptedTTL is how long a preempted zone is placed after the others
	// (placement.CapacityMemory.SetPreemptedTTL); 0 means the default,
	// negative turns the preference off.
	PreemptedTTL time.Duration
	// PreemptedMax makes the preempted hold adaptive, from PreemptedTTL up
	// to PreemptedMax over the default window
	// (placement.CapacityMemory.SetPreemptedBackoff); 0: a fixed hold.
	PreemptedMax time.Duration
	// LogDips records every dip of the serving count (Result.DipLog).
	LogDips bool
	// WarmStart is how long a started standby instance
	// (placement.Policy.Standby) takes from its start to ready: the boot
	// and the model loaded from its own disk. 0 means ColdStart.
	WarmStart time.Duration
	// StandbyPrice is what a stopped instance costs per hour (its disk);
	// 0 means DefaultStandbyPrice.
	StandbyPrice float64
}

// Dip describes one time the pool served fewer than Want instances (an
// instance under notice counted as serving until it ends: the engine's
// view), for the analysis in BENCHMARKS.md.
type Dip struct {
	// At is the dip's start, from the start of the trace; Length its length.
	At, Length time.Duration
	// Serving is the serving count at the start (below Want).
	Serving int
	// Lost counts, per zone, the instances that got a notice within a
	// cold start plus a notice before the start (the losses the dip
	// follows).
	Lost map[string]int
	// ServingBefore is the serving count just before the first of those
	// notices: ServingBefore - Want spares were ready.
	ServingBefore int
	// Repeat lists the lost zones that had already lost an instance in the
	// hour before that first notice.
	Repeat []string
	// OnDemandStarting counts on-demand instances starting at the start.
	OnDemandStarting int
}

// Result is what an experiment measured over the scored time.
type Result struct {
	// Scored is the simulated time measured (after the warm-up).
	Scored time.Duration
	// Met is the time with at least Want ready instances, an instance
	// under notice not counted (drained at notice, the older rule).
	Met time.Duration
	// Dips counts the times the pool fell below Want ready; LongestDip is
	// the longest.
	Dips       int
	LongestDip time.Duration
	// MetServing, ServingDips and LongestServingDip measure the same with
	// an instance under notice counted as serving until it ends: the
	// engine's view, since the engine keeps routing to a noticed instance
	// until its replacement is Ready or its deadline comes.
	MetServing        time.Duration
	ServingDips       int
	LongestServingDip time.Duration
	// Cost in USD at the simulator's prices, standby included.
	Cost float64
	// Hours of running instance time per zone and market (launch or
	// start to end or stop).
	Hours map[placement.Key]float64
	// StandbyHours is the time instances spent stopped (standby), and
	// StandbyCost what it cost at Config.StandbyPrice (included in Cost).
	StandbyHours, StandbyCost float64
	// Launches, refused spot launches, and preemptions over the whole run.
	Launches, Refused, Preemptions int
	// Starts of standby instances and Stops (retirements into standby)
	// over the whole run.
	Starts, Stops int
	// DipLog holds every serving dip when Config.LogDips is set.
	DipLog []Dip
}

// Availability is the fraction of scored time with ready >= wanted.
func (r Result) Availability() float64 {
	if r.Scored <= 0 {
		return 0
	}
	return float64(r.Met) / float64(r.Scored)
}

// ServingAvailability is Availability with instances under notice counted
// as serving until they end.
func (r Result) ServingAvailability() float64 {
	if r.Scored <= 0 {
		return 0
	}
	return float64(r.MetServing) / float64(r.Scored)
}

// CostAt prices the result's instance hours at other prices: spot per zone
// (missing zones: the on-demand price) and one on-demand price; the
// standby is priced as in the run (StandbyCost).
func (r Result) CostAt(spot map[string]float64, onDemand float64) float64 {
	c := r.StandbyCost
	for k, h := range r.Hours {
		p := onDemand
		if k.Market != provider.MarketOnDemand {
			if s, ok := spot[k.Zone]; ok {
				p = s
			}
		}
		c += h * p
	}
	return c
}

// MarketHours sums the hours of one market.
func (r Result) MarketHours(m provider.Market) float64 {
	h := 0.0
	for k, v := range r.Hours {
		if (k.Market == provider.MarketOnDemand) == (m == provider.MarketOnDemand) {
			h += v
		}
	}
	return h
}

// ErrConfig is wrapped by Run's errors about its configuration.
var ErrConfig = errors.New("bad experiment config")

// Run replays the trace for one policy.
func Run(cfg Config) (Result, error) {
	if cfg.Trace == nil || cfg.Want <= 0 {
		return Result{}, fmt.Errorf("%w: a trace and Want > 0 are required", ErrConfig)
	}
	if err := cfg.Policy.Validate(); err != nil {
		return Result{}, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if cfg.Step <= 0 {
		cfg.Step = DefaultStep
	}
	if cfg.ColdStart < 0 {
		return Result{}, fmt.Errorf("%w: cold start %v", ErrConfig, cfg.ColdStart)
	}
	if cfg.Warmup <= 0 {
		cfg.Warmup = DefaultWarmup
	}
	if cfg.WarmStart < 0 || cfg.StandbyPrice < 0 {
		return Result{}, fmt.Errorf("%w: warm start %v, standby price %v", ErrConfig, cfg.WarmStart, cfg.StandbyPrice)
	}
	if cfg.WarmStart == 0 {
		cfg.WarmStart = cfg.ColdStart
	}
	if cfg.StandbyPrice == 0 {
		cfg.StandbyPrice = DefaultStandbyPrice
	}
	dur := cfg.Duration
	if dur <= 0 || dur > cfg.Trace.Duration() {
		dur = cfg.Trace.Duration()
	}
	if dur <= cfg.Warmup {
		return Result{}, fmt.Errorf("%w: %v simulated is not longer than the %v warm-up", ErrConfig, dur, cfg.Warmup)
	}
	t0 := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := testingclock.NewFakeClock(t0)
	sim, err := spotsim.New(spotsim.Options{
		Trace: cfg.Trace, Clock: clk, Start: t0, Notice: cfg.Notice, Prices: cfg.Prices,
		RevealCapacity: cfg.RevealCapacity, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return Result{}, err
	}
	defer sim.Close()
	mem := placement.NewCapacityMemory(clk, cfg.MemoryTTL)
	if cfg.PreemptedTTL != 0 {
		mem.SetPreemptedTTL(cfg.PreemptedTTL)
	}
	if cfg.PreemptedMax > 0 {
		mem.SetPreemptedBackoff(cfg.PreemptedMax, 0)
	}
	ctx := context.Background()

	offs, err := sim.Offerings(ctx, nil)
	if err != nil {
		return Result{}, err
	}
	prices := map[placement.Key]float64{}
	for _, o := range offs {
		prices[placement.KeyOf(o)] = o.PricePerHour
	}

	res := Result{Hours: map[placement.Key]float64{}}
	// Instances started from standby: ready a warm start after their
	// (re)start, the others a cold start after their launch.
	st := &startup{cold: cfg.ColdStart, warm: cfg.WarmStart, started: map[string]bool{}}
	noticed := map[string]bool{}
	type notice struct {
		at   time.Time
		zone string
	}
	type sample struct {
		at      time.Time
		serving int
	}
	var notices []notice
	var history []sample
	var dipStart, serveDipStart time.Time
	inDip, inServeDip := false, false
	end := t0.Add(dur)
	scoreFrom := t0.Add(cfg.Warmup)
	acted := true
	var insts []provider.Instance
	for now := t0; now.Before(end); {
		clk.SetTime(now)
		sim.Tick()
		drain(sim.Events())
		if insts, err = sim.List(ctx, pool); err != nil {
			return Result{}, err
		}
		for _, in := range insts {
			if in.InterruptAt != nil && !noticed[in.ID] {
				noticed[in.ID] = true
				if cfg.LogDips {
					notices = append(notices, notice{now, in.Zone})
				}
				mem.RecordPreemption(placement.Key{Zone: in.Zone, InstanceType: in.InstanceType, Market: in.Market})
			}
		}
		acted = true // something may have changed: decide
		for round := 0; round < decideRounds && acted; round++ {
			offs, err := sim.Offerings(ctx, nil)
			if err != nil {
				return Result{}, err
			}
			d := cfg.Policy.Decide(placement.Input{Want: cfg.Want, Instances: views(insts, now, st), Offerings: offs, Memory: mem})
			acted = len(d.Launches)+len(d.Retires)+len(d.Starts) > 0
			refused := false
			for _, l := range d.Launches {
				k := placement.Key{Zone: l.Zone, InstanceType: l.InstanceType, Market: l.Market}
				_, err := sim.Launch(ctx, provider.LaunchRequest{Pool: pool, Zone: l.Zone, InstanceType: l.InstanceType, Market: l.Market})
				switch {
				case mem.Observe(k, err):
					refused = true
					res.Refused++
				case err != nil:
					return Result{}, fmt.Errorf("at %v: %w", now.Sub(t0), err)
				default:
					res.Launches++
				}
			}
			for _, s := range d.Starts {
				if _, err := sim.Start(ctx, s.ID); err != nil {
					return Result{}, fmt.Errorf("at %v: %w", now.Sub(t0), err)
				}
				st.started[s.ID] = true
				res.Starts++
			}
			for _, r := range d.Retires {
				if r.Stop {
					// Out at once: the drain is the engine's (a
					// stop follows only with N ready without it).
					if err := sim.Stop(ctx, r.ID); err != nil {
						return Result{}, fmt.Errorf("at %v: %w", now.Sub(t0), err)
					}
					res.Stops++
					continue
				}
				if err := sim.Terminate(ctx, r.ID); err != nil {
					return Result{}, err
				}
			}
			if acted {
				if insts, err = sim.List(ctx, pool); err != nil {
					return Result{}, err
				}
			}
			if !refused {
				break
			}
		}
		drain(sim.Events())

		// Nothing changes until the next event: a trace step, a notice
		// running out, an instance becoming ready, a memory entry
		// expiring, the end of the warm-up; or the next step when this
		// one acted (the next round looks again, as the engine's would).
		next := nextEvent(now, t0, cfg, st, insts, mem, acted, scoreFrom, end)
		if !now.Before(scoreFrom) {
			span := next.Sub(now)
			hours := span.Hours()
			ready, serving := 0, 0
			for _, in := range insts {
				if isStopped(in) {
					res.StandbyHours += hours
					res.StandbyCost += cfg.StandbyPrice * hours
					res.Cost += cfg.StandbyPrice * hours
					continue
				}
				k := placement.Key{Zone: in.Zone, InstanceType: in.InstanceType, Market: in.Market}
				res.Hours[k] += hours
				res.Cost += prices[k] * hours
				if st.isReady(in, now) {
					ready++
				}
				if !now.Before(st.readyAt(in)) {
					serving++
				}
			}
			res.Scored += span
			if ready >= cfg.Want {
				res.Met += span
				if inDip {
					inDip = false
					res.LongestDip = max(res.LongestDip, now.Sub(dipStart))
				}
			} else if !inDip {
				inDip, dipStart = true, now
				res.Dips++
			}
			if serving >= cfg.Want {
				res.MetServing += span
				if inServeDip {
					inServeDip = false
					res.LongestServingDip = max(res.LongestServingDip, now.Sub(serveDipStart))
					if cfg.LogDips {
						res.DipLog[len(res.DipLog)-1].Length = now.Sub(serveDipStart)
					}
				}
			} else if !inServeDip {
				inServeDip, serveDipStart = true, now
				res.ServingDips++
				if cfg.LogDips {
					res.DipLog = append(res.DipLog, dipAt(now, t0, cfg, st, serving, insts, func(from time.Time) (map[string]int, time.Time) {
						lost, first := map[string]int{}, time.Time{}
						for _, n := range notices {
							if n.at.After(from) && !n.at.After(now) {
								lost[n.zone]++
								if first.IsZero() {
									first = n.at
								}
							}
						}
						return lost, first
					}, func(t time.Time) int {
						s := 0
						for _, h := range history {
							if h.at.Before(t) {
								s = h.serving
							}
						}
						return s
					}, func(zone string, from, to time.Time) bool {
						for _, n := range notices {
							if n.zone == zone && !n.at.Before(from) && n.at.Before(to) {
								return true
							}
						}
						return false
					}))
				}
			}
			if cfg.LogDips {
				history = append(history, sample{now, serving})
			}
		}
		now = next
	}
	if inDip {
		res.LongestDip = max(res.LongestDip, end.Sub(dipStart))
	}
	if inServeDip {
		res.LongestServingDip = max(res.LongestServingDip, end.Sub(serveDipStart))
		if cfg.LogDips {
			res.DipLog[len(res.DipLog)-1].Length = end.Sub(serveDipStart)
		}
	}
	res.Preemptions = int(sim.Stats().Preemptions)
	return res, nil
}

// dipAt describes a dip starting at now: lostSince returns the notices
// after a time (per zone) and the first one's time, servingAt the serving
// count of the last step before a time, hadNotice whether a zone had a
// notice in [from, to).
func dipAt(now, t0 time.Time, cfg Config, st *startup, serving int, insts []provider.Instance,
	lostSince func(time.Time) (map[string]int, time.Time), servingAt func(time.Time) int,
	hadNotice func(zone string, from, to time.Time) bool) Dip {
	notice := cfg.Notice
	if notice <= 0 {
		notice = spotsim.DefaultNotice
	}
	d := Dip{At: now.Sub(t0), Serving: serving}
	var first time.Time
	d.Lost, first = lostSince(now.Add(-cfg.ColdStart - notice))
	if first.IsZero() {
		first = now
	}
	d.ServingBefore = servingAt(first)
	for z := range d.Lost {
		if hadNotice(z, first.Add(-time.Hour), first) {
			d.Repeat = append(d.Repeat, z)
		}
	}
	sort.Strings(d.Repeat)
	for _, in := range insts {
		if in.Market == provider.MarketOnDemand && !isStopped(in) && now.Before(st.readyAt(in)) {
			d.OnDemandStarting++
		}
	}
	return d
}

// nextEvent returns the next time the pool's state or decision can change
// after now, on the step grid: the next trace step, a notice running out,
// an instance becoming ready, a capacity memory entry expiring, the end of
// the warm-up or of the run; the next step when this one acted.
func nextEvent(now, t0 time.Time, cfg Config, st *startup, insts []provider.Instance, mem *placement.CapacityMemory, acted bool, scoreFrom, end time.Time) time.Time {
	next := end
	consider := func(t time.Time) {
		if t.After(now) && t.Before(next) {
			next = t
		}
	}
	if acted {
		consider(now.Add(cfg.Step))
	}
	gap := cfg.Trace.Gap
	consider(t0.Add((now.Sub(t0)/gap + 1) * gap))
	consider(scoreFrom)
	for _, in := range insts {
		if in.InterruptAt != nil {
			consider(*in.InterruptAt)
		}
		if !isStopped(in) {
			consider(st.readyAt(in))
		}
	}
	for _, b := range mem.List() {
		consider(b.Until)
		consider(b.PreemptedUntil)
	}
	// Onto the step grid, rounding up.
	if r := next.Sub(t0) % cfg.Step; r != 0 {
		next = next.Add(cfg.Step - r)
	}
	if next.After(end) {
		next = end
	}
	return next
}

// startup says when an instance is ready: a cold start after its launch,
// or, once it has been started from standby, a warm start after its last
// start (the simulator sets LaunchedAt to the start, as EC2's LaunchTime).
type startup struct {
	cold, warm time.Duration
	started    map[string]bool
}

func (s *startup) readyAt(in provider.Instance) time.Time {
	if s.started[in.ID] {
		return in.LaunchedAt.Add(s.warm)
	}
	return in.LaunchedAt.Add(s.cold)
}

// isReady: running, past its cold (or warm) start and not under a notice
// (the older rule, an instance with a notice drained at once; placement
// also counts it as Leaving, so its replacement is launched at the
// notice).
func (s *startup) isReady(in provider.Instance, now time.Time) bool {
	return !isStopped(in) && in.InterruptAt == nil && !now.Before(s.readyAt(in))
}

// isStopped: stopped or stopping (standby).
func isStopped(in provider.Instance) bool {
	return in.State == provider.StateStopped || in.State == provider.StateStopping
}

// views maps the simulator's instances to placement's.
func views(insts []provider.Instance, now time.Time, st *startup) []placement.Instance {
	out := make([]placement.Instance, 0, len(insts))
	for _, in := range insts {
		out = append(out, placement.Instance{
			ID: in.ID, Zone: in.Zone, InstanceType: in.InstanceType, Market: in.Market,
			Ready: st.isReady(in, now), Leaving: in.InterruptAt != nil || in.State == provider.StateTerminating,
			Stopped: isStopped(in), LaunchedAt: in.LaunchedAt,
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func drain(ch <-chan provider.Event) {
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		default:
			return
		}
	}
}
