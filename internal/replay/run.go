package replay

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/engine"
	"github.com/tidegpu/tidegpu/internal/events"
	"github.com/tidegpu/tidegpu/internal/provider"
	"github.com/tidegpu/tidegpu/internal/provider/spotsim"
	"github.com/tidegpu/tidegpu/internal/registrar"
)

// maxRoundsPerHour bounds the engine rounds per hour of trace time: a pool
// that asks for rounds faster than that for long is a bug, not a replay.
const maxRoundsPerHour = 100_000

// Epoch is the clock time of the replayed part's start.
var Epoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// Run replays opts.Pool on opts.Trace through the engine's round.
func Run(ctx context.Context, opts Options) (Result, error) {
	if err := check(&opts); err != nil {
		return Result{}, err
	}
	pool := opts.Pool.DeepCopy()
	spec := &pool.Spec
	dur := opts.Trace.Duration() - opts.From
	if opts.Duration > 0 && opts.Duration < dur {
		dur = opts.Duration
	}
	if dur <= opts.Warmup {
		return Result{}, fmt.Errorf("%w: %v replayed is not longer than the %v warm-up", ErrOptions, dur, opts.Warmup)
	}
	standbyPrice := opts.StandbyPrice
	if standbyPrice == 0 {
		p, err := engine.StandbyPrice(spec)
		if err != nil {
			return Result{}, fmt.Errorf("%w: %w", ErrOptions, err)
		}
		standbyPrice = p.PerHour
	}

	clk := testingclock.NewFakeClock(Epoch)
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	catalogProvider := spec.Provider
	if catalogProvider != tidev1.ProviderAWS && catalogProvider != tidev1.ProviderTencent {
		catalogProvider = tidev1.ProviderAWS
	}
	notice := opts.Notice
	sim, err := spotsim.New(spotsim.Options{
		Trace: opts.Trace, Clock: clk, Start: Epoch.Add(-opts.From), Notice: notice,
		InstanceType: spec.InstanceType, Prices: opts.Prices, CatalogProvider: catalogProvider,
		// No stand-in prices: a zone without its own price is an error.
		DefaultRegion: "-",
		AddressOf:     func(n uint64) string { return fmt.Sprintf("replay-%d:8000", n) },
		Logger:        discard,
		PullEvents:    true,
	})
	if err != nil {
		return Result{}, err
	}
	defer sim.Close()
	prices, odPrice, err := priceTable(ctx, sim, spec)
	if err != nil {
		return Result{}, err
	}

	counted := &counting{sim: sim, clock: clk, started: map[string]time.Time{}}
	reg := &recorder{}
	rec := events.NewRecorder(1024, clk, discard)
	drv, err := engine.NewDriver(engine.Options{
		Provider: counted, Registrar: reg, Recorder: rec,
		Clock: clk, Logger: discard, Learning: opts.Learning,
	}, pool)
	if err != nil {
		return Result{}, err
	}

	res := Result{Strategy: strategyOf(spec)}
	m := newMeter(&res, opts, Epoch.Add(opts.Warmup))
	end := Epoch.Add(dur)
	// deliver hands the pool every event the simulator emitted so far, in
	// order (Options.PullEvents: no pump goroutine, so no scheduler in
	// what a round sees).
	deliver := func() {
		for _, ev := range sim.TakeEvents() {
			drv.Event(ev)
		}
	}
	readyAt := func(in provider.Instance) time.Time {
		if at, ok := counted.started[in.ID]; ok && !at.Before(in.LaunchedAt) {
			return at.Add(opts.WarmStart)
		}
		return in.LaunchedAt.Add(opts.ColdStart)
	}
	limit := int(math.Ceil(dur.Hours()*maxRoundsPerHour)) + 1000
	nextProgress := Epoch
	var seen uint64
	for now := Epoch; now.Before(end); {
		if err := ctx.Err(); err != nil {
			return Result{}, err
		}
		clk.SetTime(now)
		sim.Tick()
		deliver()
		for _, in := range drv.Awaiting() {
			if !now.Before(readyAt(in)) {
				drv.MarkReady(in.ID)
			}
		}
		wait := drv.Round(ctx)
		res.Rounds++
		if opts.Events != nil {
			for _, e := range rec.List(seen, "") {
				opts.Events(e)
				seen = e.Seq
			}
		}
		if res.Rounds > limit {
			return Result{}, fmt.Errorf("replay: more than %d engine rounds by %v of trace time: the pool does not settle", limit, now.Sub(Epoch))
		}
		deliver()
		insts, err := sim.List(ctx, pool.Name)
		if err != nil {
			return Result{}, err
		}
		// The next time anything can change: the pool's own requeue, the
		// next trace step, a notice running out, an instance's server
		// becoming ready.
		next := now.Add(max(wait, time.Millisecond))
		consider := func(t time.Time) {
			if t.After(now) && t.Before(next) {
				next = t
			}
		}
		gap := opts.Trace.Gap
		consider(Epoch.Add(-opts.From).Add((now.Sub(Epoch.Add(-opts.From))/gap + 1) * gap))
		for _, in := range insts {
			if in.InterruptAt != nil {
				consider(*in.InterruptAt)
			}
		}
		for _, in := range drv.Awaiting() {
			consider(readyAt(in))
		}
		if next.After(end) {
			next = end
		}
		m.span(now, next, drv.Status().Desired, reg.targets, insts, prices, standbyPrice)
		if opts.Progress != nil && !now.Before(nextProgress) {
			opts.Progress(now.Sub(Epoch), dur)
			nextProgress = now.Add(dur / 100)
		}
		now = next
	}
	m.finish(end)
	res.Launches, res.Refused, res.Starts, res.Stops = counted.launches, counted.refused, counted.starts, counted.stops
	res.Preemptions = int(sim.Stats().Preemptions)
	res.OnDemandCost = odPrice * m.wantedHours
	if res.OnDemandCost > 0 {
		res.Savings = 1 - res.Cost/res.OnDemandCost
	}
	if opts.Progress != nil {
		opts.Progress(dur, dur)
	}
	return res, nil
}

// check validates opts and fills its defaults.
func check(opts *Options) error {
	switch {
	case opts.Pool == nil || opts.Pool.Name == "":
		return fmt.Errorf("%w: a named pool is required", ErrOptions)
	case opts.Trace == nil:
		return fmt.Errorf("%w: a trace is required", ErrOptions)
	case opts.ColdStart < 0 || opts.WarmStart < 0 || opts.Warmup < 0 || opts.From < 0 || opts.Duration < 0 || opts.Sample < 0 || opts.StandbyPrice < 0:
		return fmt.Errorf("%w: cold start, warm start, warm-up, from, duration, sample and standby price must not be negative", ErrOptions)
	case opts.From >= opts.Trace.Duration():
		return fmt.Errorf("%w: from %v is past the trace's end (%v)", ErrOptions, opts.From, opts.Trace.Duration())
	}
	if opts.ColdStart == 0 {
		opts.ColdStart = DefaultColdStart
	}
	if opts.WarmStart == 0 {
		opts.WarmStart = DefaultWarmStart
	}
	if opts.Warmup == 0 {
		opts.Warmup = DefaultWarmup
	}
	if opts.Sample == 0 {
		opts.Sample = DefaultSample
	}
	if opts.Notice == 0 {
		opts.Notice = DefaultNotice
	}
	if to := engine.StartTimeout(&opts.Pool.Spec); opts.ColdStart >= to {
		return fmt.Errorf("%w: a cold start of %v is not shorter than the pool's start timeout %v (spec.provider %q): the engine would replace every instance before it is ready; replay a cloud pool (aws, tencent) or set spec.local.startTimeoutSeconds",
			ErrOptions, opts.ColdStart, to, opts.Pool.Spec.Provider)
	}
	zones := map[string]bool{}
	for _, z := range opts.Trace.ZoneNames() {
		zones[z] = true
	}
	for _, z := range opts.Pool.Spec.Zones() {
		if !zones[z] {
			return fmt.Errorf("%w: zone %s of the pool has no trace", ErrOptions, z)
		}
	}
	return nil
}

// priceTable returns the price of every offering of the replay and the
// cheapest on-demand price (the all-on-demand baseline); a zone without a
// price of its own is an error naming it.
func priceTable(ctx context.Context, sim *spotsim.Provider, spec *tidev1.TidePoolSpec) (map[offer]float64, float64, error) {
	offs, err := sim.Offerings(ctx, spec)
	if err != nil {
		return nil, 0, err
	}
	out := map[offer]float64{}
	od := 0.0
	for _, o := range offs {
		if o.PricePerHour <= 0 || (o.PriceSource != provider.PriceCatalog && o.PriceSource != provider.PriceOverride) {
			return nil, 0, fmt.Errorf("%w: zone %s: no %s price for %s in the catalog; give one with --prices (zone,market,usd_per_hour)",
				ErrOptions, o.Zone, o.Market, o.InstanceType)
		}
		out[offer{o.Zone, o.InstanceType, o.Market}] = o.PricePerHour
		if o.Market == provider.MarketOnDemand && (od == 0 || o.PricePerHour < od) {
			od = o.PricePerHour
		}
	}
	return out, od, nil
}

// strategyOf names what the pool's placement resolves to.
func strategyOf(spec *tidev1.TidePoolSpec) string {
	s, placed := engine.StrategyOf(spec)
	if !placed {
		return "none (every instance on " + string(provider.MarketFor(spec.InstanceChargeType)) + " in the spec's zone)"
	}
	if spec.Placement.Strategy == "" {
		return string(s) + " (the default)"
	}
	return string(s)
}

type offer struct {
	zone, itype string
	market      provider.Market
}

// recorder is the replay's gateway: it keeps the targets of the last sync.
type recorder struct{ targets []registrar.Target }

func (r *recorder) Sync(_ context.Context, _ string, ts []registrar.Target) error {
	r.targets = append(r.targets[:0], ts...)
	return nil
}

// InFlight: a replay carries no requests, so a drain ends at once.
func (r *recorder) InFlight(string) int { return 0 }
