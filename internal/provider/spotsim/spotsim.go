// Package spotsim is the "sim" provider: a spot market simulator that
// replays real spot-capacity traces (the SpotHedge artifact's per-zone
// files, see LoadTrace) so that placement, fallback and reclaims can be
// exercised without a cloud.
//
// The market. Each zone of the trace holds, during each step of trace time,
// the number of spot instances the trace gives (Unlimited for a binary
// trace's 1). Clock time maps to trace time through Options.Compression
// (trace seconds per clock second) from Options.Start; past its end the
// trace starts over. At every step the simulator compares each zone's
// capacity with the spot instances living there (those not yet under a
// notice) and preempts the difference, the most recently launched first:
// an interruption notice (EventInterruption, InterruptAt = now + Notice;
// AWS gives two minutes, https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html)
// and the end of the instance when the notice runs out. A spot launch into
// a zone whose capacity is used up (0 included) fails with a
// *provider.InsufficientCapacityError, as EC2's InsufficientInstanceCapacity
// does. On-demand capacity is unlimited. Capacity is shared by every pool of
// the provider unless Options.CapacityPerPool gives each pool its own copy
// of the trace.
//
// Prices come from the price catalog (market.Catalog: AWS rows, by the
// zone's region, market.RegionOf) or a per-zone table, each labelled with
// its source; see resolvePrice. The API can be made slow (Options.Latency,
// waited on the injected clock) and flaky: a fraction of calls fail with
// *provider.ThrottledError, like EC2's RequestLimitExceeded
// (https://docs.aws.amazon.com/ec2/latest/devguide/ec2-api-throttling.html).
//
// Instances. With Options.Local set, every instance is a real process of
// that local provider (the built-in inference simulator by default), so the
// gateway serves real requests; the simulator adds zones, markets and the
// market's reclaims (through the local provider's Reclaim). Without it the
// simulator is process-less: instances exist only in memory, are Running at
// once and report Options.Address as their address. The process-less mode is
// for benchmarks and tests only (thousands of instances, a fake clock).
//
// Time is an injected clock. Every API call first brings the market up to
// the clock's now (Tick); Run does so at each step boundary and notice
// deadline for callers that do not drive the clock themselves.
package spotsim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/market"
	"github.com/tidegpu/tidegpu/internal/provider"
	"github.com/tidegpu/tidegpu/internal/provider/eventq"
	"github.com/tidegpu/tidegpu/internal/provider/local"
)

// Defaults of Options.
const (
	DefaultInstanceType    = "p3.2xlarge"
	DefaultNotice          = 2 * time.Minute
	DefaultCatalogProvider = tidev1.ProviderAWS
	DefaultRegion          = "us-east-1"
	DefaultUnavailableTTL  = 3 * time.Minute
)

var (
	// ErrNotFound is wrapped by Reclaim for an unknown instance.
	ErrNotFound = errors.New("no such instance")
	// ErrUnknownZone is wrapped by Launch for a zone the trace lacks.
	ErrUnknownZone = errors.New("unknown zone")
	// ErrNoCapacity is the cause inside the simulator's
	// InsufficientCapacityErrors.
	ErrNoCapacity = errors.New("InsufficientInstanceCapacity: the zone's spot capacity is used up")
	// ErrRequestLimitExceeded is the cause inside its ThrottledErrors.
	ErrRequestLimitExceeded = errors.New("RequestLimitExceeded: request limit exceeded")
	// ErrClosed is wrapped by calls after Close.
	ErrClosed = errors.New("spot simulator closed")
)

var (
	_ provider.Provider       = (*Provider)(nil)
	_ provider.EventSource    = (*Provider)(nil)
	_ provider.Reclaimer      = (*Provider)(nil)
	_ provider.OfferingSource = (*Provider)(nil)
	_ provider.Stopper        = (*Provider)(nil)
)

// Options configure a Provider.
type Options struct {
	// Trace is the capacity to replay (required).
	Trace *Trace
	// Compression is trace time per clock time: 300 plays a 300 s trace
	// step in one second. Default 1 (real time).
	Compression float64
	// Start is the clock time of the trace's first step. Default: the
	// clock's now when New is called.
	Start time.Time
	// Notice is how long before a preemption the interruption notice comes.
	// 0 means DefaultNotice (two minutes, as AWS); negative means none (the
	// instance ends at once).
	Notice time.Duration
	// InstanceType the trace describes, used when neither request nor spec
	// names one. Default p3.2xlarge.
	InstanceType string
	// CapacityPerPool gives each pool the whole trace capacity of each zone
	// (as if it were alone in the market) instead of sharing it.
	CapacityPerPool bool
	// Local runs every instance as a process of this local provider; nil
	// means process-less (benchmarks and tests only). It must use the same
	// Clock. The caller still owns it (Close it after the simulator).
	Local *local.Provider
	// Address is the address process-less instances report (for example a
	// test server that answers readiness probes); empty means none.
	Address string
	// AddressOf, if set, gives the address of the n-th process-less
	// instance (n from 1) instead of Address, so that many instances can
	// spread over several test servers.
	AddressOf func(n uint64) string
	// Prices overrides prices per zone (labelled PriceOverride).
	Prices map[string]ZonePrices
	// Catalog prices the rest (default market.DefaultCatalog()), looked up
	// as CatalogProvider (default aws) in the zone's region
	// (market.RegionOf); DefaultRegion's on-demand price (default us-east-1)
	// stands in for regions the catalog lacks.
	Catalog         *market.Catalog
	CatalogProvider string
	DefaultRegion   string
	// RevealCapacity makes Offerings report a spot offering Available only
	// while its zone has capacity left (an oracle no cloud offers). Without
	// it, like a cloud, a spot offering is unavailable only for
	// UnavailableTTL after it refused a launch.
	RevealCapacity bool
	// UnavailableTTL defaults to 3 minutes.
	UnavailableTTL time.Duration
	// Latency delays every API call on the injected clock.
	Latency time.Duration
	// ThrottleFraction of API calls (Launch, Terminate, List, Offerings)
	// fail with a *provider.ThrottledError, drawn from a generator seeded
	// with Seed.
	ThrottleFraction float64
	Seed             uint64
	// Clock is the time of the market; default real.
	Clock clock.WithTicker
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Stats counts what the simulator did.
type Stats struct {
	// API calls, throttled ones included.
	Launches, Terminates, Lists, Offerings, Reclaims, Stops, Starts int64
	// Throttled calls among them.
	Throttled int64
	// InsufficientCapacity counts refused spot launches.
	InsufficientCapacity int64
	// Preemptions counts instances the market took back.
	Preemptions int64
	// Live instances now.
	Live int
}

// Calls is the number of API calls.
func (s Stats) Calls() int64 {
	return s.Launches + s.Terminates + s.Lists + s.Offerings + s.Stops + s.Starts
}

type offerKey struct {
	zone, itype string
	market      provider.Market
}

// inst is an instance as the simulator knows it.
type inst struct {
	provider.Instance
	token string
}

// Provider is the spot market simulator. Create it with New; call Close at
// the end.
type Provider struct {
	opts   Options
	clock  clock.WithTicker
	start  time.Time
	zones  map[string]int // zone → index in the trace
	log    *slog.Logger
	events *eventq.Queue
	wake   chan struct{}
	quit   chan struct{}
	fwd    chan struct{} // closed when the forwarder of local's events ends

	mu        sync.Mutex
	insts     map[string]*inst
	byPool    map[string]map[string]*inst
	tokens    map[string]string
	reserved  map[string]int // capacity key → spot launches in flight (process mode)
	spotCount map[string]int // capacity key → live spot instances
	// nextKill is the earliest notice deadline of a process-less instance
	// (zero: none), so that ticks need not scan every instance.
	nextKill    time.Time
	step        int64 // last trace step the market was evaluated at
	rng         *rand.Rand
	nextID      uint64
	unavailable map[offerKey]time.Time
	prices      map[offerKey]price
	stats       Stats
	closed      bool
}

// New checks opts and returns a simulator. With Options.Local it starts
// forwarding the local provider's events.
func New(opts Options) (*Provider, error) {
	if opts.Trace == nil || len(opts.Trace.Zones) == 0 || opts.Trace.Steps == 0 || opts.Trace.Gap <= 0 {
		return nil, errors.New("spotsim: Options.Trace is required (LoadTrace)")
	}
	if opts.Compression == 0 {
		opts.Compression = 1
	}
	if math.IsNaN(opts.Compression) || math.IsInf(opts.Compression, 0) || opts.Compression < 0 {
		return nil, fmt.Errorf("spotsim: Options.Compression %v: want a positive factor", opts.Compression)
	}
	if math.IsNaN(opts.ThrottleFraction) || opts.ThrottleFraction < 0 || opts.ThrottleFraction > 1 {
		return nil, fmt.Errorf("spotsim: Options.ThrottleFraction %v: want a fraction in [0, 1]", opts.ThrottleFraction)
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Notice == 0 {
		opts.Notice = DefaultNotice
	}
	if opts.InstanceType == "" {
		opts.InstanceType = DefaultInstanceType
	}
	opts.Catalog = catalogOrDefault(opts.Catalog)
	if opts.CatalogProvider == "" {
		opts.CatalogProvider = DefaultCatalogProvider
	}
	if opts.DefaultRegion == "" {
		opts.DefaultRegion = DefaultRegion
	}
	if opts.UnavailableTTL <= 0 {
		opts.UnavailableTTL = DefaultUnavailableTTL
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Start.IsZero() {
		opts.Start = opts.Clock.Now()
	}
	p := &Provider{
		opts:        opts,
		clock:       opts.Clock,
		start:       opts.Start,
		zones:       map[string]int{},
		log:         opts.Logger.With("provider", tidev1.ProviderSim),
		events:      eventq.New(256, opts.Logger),
		wake:        make(chan struct{}, 1),
		quit:        make(chan struct{}),
		insts:       map[string]*inst{},
		byPool:      map[string]map[string]*inst{},
		tokens:      map[string]string{},
		reserved:    map[string]int{},
		spotCount:   map[string]int{},
		step:        -1,
		rng:         rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x9e3779b97f4a7c15)),
		unavailable: map[offerKey]time.Time{},
		prices:      map[offerKey]price{},
	}
	for i, z := range opts.Trace.Zones {
		p.zones[z.Zone] = i
	}
	if opts.Local != nil {
		p.fwd = make(chan struct{})
		go p.forward(opts.Local.Events())
	}
	return p, nil
}

// Name returns "sim".
func (p *Provider) Name() string { return tidev1.ProviderSim }

// Events delivers Changed, Interruption and Gone events until Close.
func (p *Provider) Events() <-chan provider.Event { return p.events.C() }

// PendingEvents is the number of events emitted that are not yet on the
// Events channel (see eventq.Queue.Pending).
func (p *Provider) PendingEvents() int { return p.events.Pending() }

// Zones returns the trace's zones in name order.
func (p *Provider) Zones() []string { return p.opts.Trace.ZoneNames() }

// Stats returns the counters.
func (p *Provider) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.Live = len(p.insts)
	return s
}

// stepAt returns the absolute trace step at clock time t.
func (p *Provider) stepAt(t time.Time) int64 {
	el := t.Sub(p.start)
	if el < 0 {
		return 0
	}
	return int64(math.Floor(float64(el) * p.opts.Compression / float64(p.opts.Trace.Gap)))
}

// boundary returns the clock time at which absolute step k begins.
func (p *Provider) boundary(k int64) time.Time {
	return p.start.Add(time.Duration(math.Ceil(float64(k) * float64(p.opts.Trace.Gap) / p.opts.Compression)))
}

// Capacity returns each zone's spot capacity at clock time t (Unlimited for
// a binary trace's available steps).
func (p *Provider) Capacity(t time.Time) map[string]int {
	i := int(p.stepAt(t) % int64(p.opts.Trace.Steps))
	out := make(map[string]int, len(p.opts.Trace.Zones))
	for _, z := range p.opts.Trace.Zones {
		out[z.Zone] = z.Capacity[i]
	}
	return out
}

func (p *Provider) capacityLocked(zone string, step int64) int {
	zi, ok := p.zones[zone]
	if !ok {
		return 0
	}
	return p.opts.Trace.Zones[zi].Capacity[int(step%int64(p.opts.Trace.Steps))]
}

// capKey is what capacity is counted per: the zone, or pool and zone.
func (p *Provider) capKey(pool, zone string) string {
	if p.opts.CapacityPerPool {
		return pool + "\x00" + zone
	}
	return zone
}

// usedLocked counts the live spot instances (notice or not) and the spot
// launches in flight under a capacity key.
func (p *Provider) usedLocked(pool, zone string) int {
	k := p.capKey(pool, zone)
	return p.reserved[k] + p.spotCount[k]
}

// Tick brings the market up to the clock's now: it ends process-less
// instances whose notice ran out and, on a new trace step, preempts spot
// instances beyond each zone's capacity. API calls tick on their own; call
// Tick when driving the clock by hand, or run Run.
func (p *Provider) Tick() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tickLocked()
}

func (p *Provider) tickLocked() {
	if p.closed {
		return
	}
	now := p.clock.Now()
	if p.opts.Local == nil && !p.nextKill.IsZero() && !now.Before(p.nextKill) {
		var due []*inst
		p.nextKill = time.Time{}
		for _, in := range p.insts {
			switch {
			case in.InterruptAt == nil:
			case !now.Before(*in.InterruptAt):
				due = append(due, in)
			case p.nextKill.IsZero() || in.InterruptAt.Before(p.nextKill):
				p.nextKill = *in.InterruptAt
			}
		}
		sortInsts(due)
		for _, in := range due {
			p.removeLocked(in)
			p.events.Push(provider.Event{Type: provider.EventGone, Instance: cloneInstance(in.Instance), Message: "reclaimed: the spot market took the instance back"})
		}
	}
	step := p.stepAt(now)
	if step == p.step {
		return
	}
	p.step = step
	p.preemptLocked(now, step)
}

// preemptLocked gives notice to the spot instances beyond each capacity
// key's capacity at step, the most recently launched first.
func (p *Provider) preemptLocked(now time.Time, step int64) {
	groups := map[string][]*inst{}
	for _, in := range p.insts {
		if in.Market != provider.MarketSpot || in.InterruptAt != nil {
			continue
		}
		k := p.capKey(in.Pool, in.Zone)
		groups[k] = append(groups[k], in)
	}
	keys := make([]string, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		g := groups[k]
		capacity := p.capacityLocked(g[0].Zone, step)
		excess := len(g) - capacity
		if excess <= 0 {
			continue
		}
		// Newest first.
		sort.Slice(g, func(i, j int) bool {
			if !g[i].LaunchedAt.Equal(g[j].LaunchedAt) {
				return g[i].LaunchedAt.After(g[j].LaunchedAt)
			}
			return g[i].ID > g[j].ID
		})
		for _, in := range g[:excess] {
			p.reclaimLocked(in, p.opts.Notice, now,
				fmt.Sprintf("spot capacity in %s fell to %d at trace step %d", in.Zone, capacity, step%int64(p.opts.Trace.Steps)))
			p.stats.Preemptions++
		}
	}
}

// reclaimLocked gives in a notice (notice > 0) or ends it now.
func (p *Provider) reclaimLocked(in *inst, notice time.Duration, now time.Time, why string) {
	if p.opts.Local != nil {
		if notice > 0 {
			at := now.Add(notice)
			in.InterruptAt = &at
		}
		if err := p.opts.Local.Reclaim(context.Background(), in.ID, max(notice, 0)); err != nil {
			p.log.Warn("reclaiming a local instance", "id", in.ID, "err", err)
		}
		return
	}
	if notice <= 0 {
		p.removeLocked(in)
		p.events.Push(provider.Event{Type: provider.EventGone, Instance: cloneInstance(in.Instance), Message: "reclaimed without notice: " + why})
		return
	}
	if in.InterruptAt != nil {
		return
	}
	at := now.Add(notice)
	in.InterruptAt = &at
	if p.nextKill.IsZero() || at.Before(p.nextKill) {
		p.nextKill = at
	}
	p.events.Push(provider.Event{Type: provider.EventInterruption, Instance: cloneInstance(in.Instance),
		Message: fmt.Sprintf("spot interruption notice: reclaimed in %v (%s)", notice, why)})
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func (p *Provider) removeLocked(in *inst) {
	if _, ok := p.insts[in.ID]; ok && in.Market == provider.MarketSpot {
		k := p.capKey(in.Pool, in.Zone)
		if p.spotCount[k]--; p.spotCount[k] <= 0 {
			delete(p.spotCount, k)
		}
	}
	delete(p.insts, in.ID)
	if m := p.byPool[in.Pool]; m != nil {
		delete(m, in.ID)
		if len(m) == 0 {
			delete(p.byPool, in.Pool)
		}
	}
	if in.token != "" && p.tokens[in.token] == in.ID {
		delete(p.tokens, in.token)
	}
}

func (p *Provider) addLocked(in *inst) {
	if in.Market == provider.MarketSpot {
		p.spotCount[p.capKey(in.Pool, in.Zone)]++
	}
	p.insts[in.ID] = in
	m := p.byPool[in.Pool]
	if m == nil {
		m = map[string]*inst{}
		p.byPool[in.Pool] = m
	}
	m[in.ID] = in
	if in.token != "" {
		p.tokens[in.token] = in.ID
	}
}

// Run plays the market on the clock until ctx ends or Close: it ticks at
// every trace step boundary and notice deadline.
func (p *Provider) Run(ctx context.Context) {
	for {
		p.mu.Lock()
		p.tickLocked()
		if p.closed {
			p.mu.Unlock()
			return
		}
		// Wakes so far are accounted for by the deadlines read below.
		select {
		case <-p.wake:
		default:
		}
		now := p.clock.Now()
		next := p.boundary(p.step + 1)
		if !p.nextKill.IsZero() && p.nextKill.Before(next) {
			next = p.nextKill
		}
		p.mu.Unlock()
		d := next.Sub(now)
		if d <= 0 {
			d = time.Nanosecond
		}
		t := p.clock.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-p.quit:
			t.Stop()
			return
		case <-p.wake:
			t.Stop()
		case <-t.C():
		}
	}
}

// call is the common prologue of an API call: latency on the clock, then,
// under the lock, the closed check, a tick and the throttling draw. It
// returns with p.mu held when err is nil.
func (p *Provider) call(ctx context.Context, op string, counter *int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if p.opts.Latency > 0 {
		t := p.clock.NewTimer(p.opts.Latency)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("sim %s: %w", op, ctx.Err())
		case <-t.C():
		}
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return fmt.Errorf("sim %s: %w", op, ErrClosed)
	}
	*counter++
	p.tickLocked()
	if p.opts.ThrottleFraction > 0 && p.rng.Float64() < p.opts.ThrottleFraction {
		p.stats.Throttled++
		p.mu.Unlock()
		return fmt.Errorf("sim %s: %w", op, &provider.ThrottledError{Err: ErrRequestLimitExceeded})
	}
	return nil
}

// Launch starts one instance. The zone is the request's, else the spec's
// AvailabilityZone, else (spot) the zone with the most capacity left or
// (on-demand) the zone holding the fewest of the pool's instances. A spot
// launch beyond the zone's capacity fails with an
// InsufficientCapacityError; the same non-empty token returns the same
// live instance.
func (p *Provider) Launch(ctx context.Context, req provider.LaunchRequest) (provider.Instance, error) {
	if err := p.call(ctx, "launch", &p.stats.Launches); err != nil {
		return provider.Instance{}, err
	}
	// p.mu is held.
	if req.Token != "" {
		if in := p.insts[p.tokens[req.Token]]; in != nil {
			out := cloneInstance(in.Instance)
			p.mu.Unlock()
			return out, nil
		}
	}
	spec := req.Spec
	if spec == nil {
		spec = &tidev1.TidePoolSpec{}
	}
	market := req.Market
	if market == "" {
		market = provider.MarketFor(spec.InstanceChargeType)
	}
	if market != provider.MarketSpot && market != provider.MarketOnDemand {
		p.mu.Unlock()
		return provider.Instance{}, fmt.Errorf("sim launch for %s: unknown market %q", req.Pool, market)
	}
	itype := firstNonEmpty(req.InstanceType, spec.InstanceType, p.opts.InstanceType)
	zone := firstNonEmpty(req.Zone, spec.AvailabilityZone)
	if zone == "" {
		zone = p.pickZoneLocked(req.Pool, market)
	}
	if _, ok := p.zones[zone]; !ok {
		p.mu.Unlock()
		return provider.Instance{}, fmt.Errorf("sim launch for %s in %q: %w (the trace has %s)", req.Pool, zone, ErrUnknownZone, strings.Join(p.Zones(), ", "))
	}
	now := p.clock.Now()
	if market == provider.MarketSpot {
		capacity := p.capacityLocked(zone, p.step)
		if used := p.usedLocked(req.Pool, zone); used >= capacity {
			p.stats.InsufficientCapacity++
			p.unavailable[offerKey{zone, itype, market}] = now.Add(p.opts.UnavailableTTL)
			p.mu.Unlock()
			return provider.Instance{}, fmt.Errorf("sim launch for %s: %w", req.Pool, &provider.InsufficientCapacityError{
				Zone: zone, InstanceType: itype, Market: market,
				Err: fmt.Errorf("%w (%d of %d in use)", ErrNoCapacity, used, capacity)})
		}
	}
	if p.opts.Local == nil {
		p.nextID++
		addr := p.opts.Address
		if p.opts.AddressOf != nil {
			addr = p.opts.AddressOf(p.nextID)
		}
		in := &inst{Instance: provider.Instance{
			ID: fmt.Sprintf("sim-%08x", p.nextID), Pool: req.Pool, Zone: zone, InstanceType: itype, Market: market,
			State: provider.StateRunning, Address: addr, LaunchedAt: now,
		}, token: req.Token}
		if host, _, err := net.SplitHostPort(addr); err == nil {
			in.PrivateIP, in.PublicIP = host, host
		}
		p.addLocked(in)
		out := cloneInstance(in.Instance)
		p.mu.Unlock()
		return out, nil
	}

	// Process mode: hold the capacity while the process starts.
	ck := p.capKey(req.Pool, zone)
	if market == provider.MarketSpot {
		p.reserved[ck]++
	}
	p.mu.Unlock()
	lreq := req
	lreq.Market, lreq.InstanceType, lreq.Zone = market, itype, zone
	linst, err := p.opts.Local.Launch(ctx, lreq)
	p.mu.Lock()
	defer p.mu.Unlock()
	if market == provider.MarketSpot {
		if p.reserved[ck]--; p.reserved[ck] <= 0 {
			delete(p.reserved, ck)
		}
	}
	if err != nil {
		return provider.Instance{}, fmt.Errorf("sim launch for %s in %s: %w", req.Pool, zone, err)
	}
	if old := p.insts[linst.ID]; old != nil {
		// The local provider answered a retried token.
		return overlay(linst, old), nil
	}
	in := &inst{Instance: linst, token: req.Token}
	in.Zone, in.InstanceType, in.Market = zone, itype, market
	p.addLocked(in)
	return cloneInstance(in.Instance), nil
}

// pickZoneLocked chooses a zone for a launch that names none.
func (p *Provider) pickZoneLocked(pool string, m provider.Market) string {
	best, bestScore := "", math.MinInt
	for _, z := range p.Zones() {
		var score int
		if m == provider.MarketSpot {
			score = p.capacityLocked(z, p.step) - p.usedLocked(pool, z)
		} else {
			score = -len(filterPool(p.byPool[pool], z))
		}
		if score > bestScore {
			best, bestScore = z, score
		}
	}
	return best
}

func filterPool(m map[string]*inst, zone string) []*inst {
	var out []*inst
	for _, in := range m {
		if in.Zone == zone {
			out = append(out, in)
		}
	}
	return out
}

// Terminate ends an instance: process-less at once (EventGone), with
// processes through the local provider. Unknown ids are not an error.
func (p *Provider) Terminate(ctx context.Context, id string) error {
	if err := p.call(ctx, "terminate", &p.stats.Terminates); err != nil {
		return err
	}
	in := p.insts[id]
	if p.opts.Local != nil {
		p.mu.Unlock()
		if err := p.opts.Local.Terminate(ctx, id); err != nil {
			return fmt.Errorf("sim terminate %s: %w", id, err)
		}
		return nil
	}
	defer p.mu.Unlock()
	if in == nil {
		return nil
	}
	p.removeLocked(in)
	gone := cloneInstance(in.Instance)
	gone.State = provider.StateTerminating
	p.events.Push(provider.Event{Type: provider.EventGone, Instance: gone, Message: "terminated"})
	return nil
}

// List returns the live instances of pool ("" for every pool), oldest first.
func (p *Provider) List(ctx context.Context, pool string) ([]provider.Instance, error) {
	if err := p.call(ctx, "list", &p.stats.Lists); err != nil {
		return nil, err
	}
	if p.opts.Local == nil {
		src := p.insts
		if pool != "" {
			src = p.byPool[pool]
		}
		out := make([]provider.Instance, 0, len(src))
		for _, in := range src {
			out = append(out, cloneInstance(in.Instance))
		}
		p.mu.Unlock()
		sortInstances(out)
		return out, nil
	}
	p.mu.Unlock()
	linsts, err := p.opts.Local.List(ctx, pool)
	if err != nil {
		return nil, fmt.Errorf("sim list: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, li := range linsts {
		if in := p.insts[li.ID]; in != nil {
			linsts[i] = overlay(li, in)
		}
	}
	return linsts, nil
}

// ErrNotStoppable is returned by Stop for an instance the simulator cannot
// stop: a spot instance (as on EC2, a one-time spot instance cannot be
// stopped), or any instance in process mode.
var ErrNotStoppable = errors.New("instance cannot be stopped")

// Stop stops an on-demand instance of the process-less market, keeping it
// as a warm standby (provider.Stopper): it is listed as StateStopped and
// serves nothing until Start. Stopping a stopped instance is not an error.
// In process mode stops are not supported.
func (p *Provider) Stop(ctx context.Context, id string) error {
	if err := p.call(ctx, "stop", &p.stats.Stops); err != nil {
		return err
	}
	defer p.mu.Unlock()
	if p.opts.Local != nil {
		return fmt.Errorf("sim stop %s: %w (process mode)", id, provider.ErrNotSupported)
	}
	in := p.insts[id]
	switch {
	case in == nil:
		return fmt.Errorf("sim stop %s: %w", id, ErrNotFound)
	case in.Market != provider.MarketOnDemand:
		return fmt.Errorf("sim stop %s: %w: a %s instance", id, ErrNotStoppable, in.Market)
	case in.State == provider.StateStopped:
		return nil
	}
	in.State = provider.StateStopped
	p.events.Push(provider.Event{Type: provider.EventChanged, Instance: cloneInstance(in.Instance), Message: "stopped"})
	return nil
}

// Start starts a stopped instance again (provider.Stopper); it is Running
// at once with its address, and its LaunchedAt is the time of the start (as
// EC2's LaunchTime). Starting a running instance is not an error.
func (p *Provider) Start(ctx context.Context, id string) (provider.Instance, error) {
	if err := p.call(ctx, "start", &p.stats.Starts); err != nil {
		return provider.Instance{}, err
	}
	defer p.mu.Unlock()
	if p.opts.Local != nil {
		return provider.Instance{}, fmt.Errorf("sim start %s: %w (process mode)", id, provider.ErrNotSupported)
	}
	in := p.insts[id]
	if in == nil {
		return provider.Instance{}, fmt.Errorf("sim start %s: %w", id, ErrNotFound)
	}
	if in.State == provider.StateStopped {
		// As EC2's LaunchTime, LaunchedAt becomes the time of this start.
		in.State, in.LaunchedAt = provider.StateRunning, p.clock.Now()
		p.events.Push(provider.Event{Type: provider.EventChanged, Instance: cloneInstance(in.Instance), Message: "started"})
	}
	return cloneInstance(in.Instance), nil
}

// Reclaim plays a reclaim of one instance, as provider.Reclaimer says.
// It is the market's own action: never throttled or delayed.
func (p *Provider) Reclaim(ctx context.Context, id string, notice time.Duration) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("sim reclaim %s: %w", id, ErrClosed)
	}
	p.stats.Reclaims++
	p.tickLocked()
	in := p.insts[id]
	if in == nil {
		if p.opts.Local != nil {
			// Not one of ours (adopted by the local provider): let it
			// play the reclaim.
			return p.opts.Local.Reclaim(ctx, id, notice)
		}
		return fmt.Errorf("sim reclaim %s: %w", id, ErrNotFound)
	}
	if in.InterruptAt != nil && notice > 0 {
		return nil
	}
	p.reclaimLocked(in, notice, p.clock.Now(), "reclaim requested")
	return nil
}

// Offerings lists the spec's instance type (else Options.InstanceType) in
// the spec's zone (else every zone of the trace), spot and on-demand, with
// prices and their sources. On-demand is always available; spot is
// unavailable for UnavailableTTL after it refused a launch, or, with
// RevealCapacity, while its zone has no capacity left.
func (p *Provider) Offerings(ctx context.Context, spec *tidev1.TidePoolSpec) ([]provider.Offering, error) {
	if err := p.call(ctx, "offerings", &p.stats.Offerings); err != nil {
		return nil, err
	}
	defer p.mu.Unlock()
	itype := p.opts.InstanceType
	zones := p.Zones()
	if spec != nil {
		itype = firstNonEmpty(spec.InstanceType, itype)
		if spec.AvailabilityZone != "" {
			if _, ok := p.zones[spec.AvailabilityZone]; !ok {
				return nil, fmt.Errorf("sim offerings in %q: %w", spec.AvailabilityZone, ErrUnknownZone)
			}
			zones = []string{spec.AvailabilityZone}
		}
	}
	now := p.clock.Now()
	out := make([]provider.Offering, 0, 2*len(zones))
	for _, z := range zones {
		for _, m := range []provider.Market{provider.MarketSpot, provider.MarketOnDemand} {
			pr := p.priceOfLocked(z, itype, m)
			o := provider.Offering{InstanceType: itype, Zone: z, Market: m, PricePerHour: pr.perHour, PriceSource: pr.source, Available: true}
			if pr.source != "" {
				o.Currency = Currency
			}
			if m == provider.MarketSpot {
				if p.opts.RevealCapacity {
					// Per-pool capacity cannot say how much of it a
					// pool uses here: Offerings is not per pool.
					left := p.capacityLocked(z, p.step)
					if !p.opts.CapacityPerPool {
						left -= p.usedLocked("", z)
					}
					o.Available = left > 0
				} else {
					o.Available = !now.Before(p.unavailable[offerKey{z, itype, m}])
				}
			}
			out = append(out, o)
		}
	}
	return out, nil
}

// PriceNote says where an offering's price came from, in words.
func (p *Provider) PriceNote(zone, instanceType string, m provider.Market) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.priceOfLocked(zone, firstNonEmpty(instanceType, p.opts.InstanceType), m).note
}

// Close stops Run and the event forwarding and closes the Events channel.
// Process-less instances are forgotten; with Options.Local the processes
// stay with the local provider, which the caller closes. Close is
// idempotent.
func (p *Provider) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	close(p.quit)
	p.mu.Unlock()
	if p.fwd != nil {
		<-p.fwd
	}
	p.events.Close()
}

// forward relays the local provider's events with the simulator's zone,
// type and market, and forgets instances that are gone.
func (p *Provider) forward(evs <-chan provider.Event) {
	defer close(p.fwd)
	for {
		select {
		case <-p.quit:
			return
		case ev, ok := <-evs:
			if !ok {
				return
			}
			p.mu.Lock()
			if in := p.insts[ev.Instance.ID]; in != nil {
				ev.Instance = overlay(ev.Instance, in)
				if ev.Type == provider.EventGone {
					p.removeLocked(in)
				}
			}
			p.mu.Unlock()
			p.events.Push(ev)
		}
	}
}

// overlay puts the simulator's view (zone, type, market, notice) on an
// instance the local provider reports.
func overlay(li provider.Instance, in *inst) provider.Instance {
	li = cloneInstance(li)
	li.Zone, li.InstanceType, li.Market = in.Zone, in.InstanceType, in.Market
	if li.InterruptAt == nil && in.InterruptAt != nil {
		at := *in.InterruptAt
		li.InterruptAt = &at
	}
	return li
}

func cloneInstance(in provider.Instance) provider.Instance {
	if in.InterruptAt != nil {
		at := *in.InterruptAt
		in.InterruptAt = &at
	}
	return in
}

func sortInstances(xs []provider.Instance) {
	slices.SortFunc(xs, func(a, b provider.Instance) int {
		if c := a.LaunchedAt.Compare(b.LaunchedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
}

func sortInsts(xs []*inst) {
	slices.SortFunc(xs, func(a, b *inst) int { return strings.Compare(a.ID, b.ID) })
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}
