package placement

import (
	"math"
	"sort"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/tidegpu/tidegpu/internal/provider"
)

// Defaults of a CapacityMemory.
const (
	// DefaultCapacityTTL is how long an offering is skipped after it
	// answered "insufficient capacity" or lost an instance to a preemption.
	// Karpenter caches unavailable offerings for 3 minutes; the aws
	// provider's DefaultUnavailableTTL is the same.
	DefaultCapacityTTL = 3 * time.Minute
	// DefaultPreemptedTTL is how long a zone that lost a spot instance to a
	// preemption is placed after the zones that did not (SpotHedge's
	// "preempted" set).
	DefaultPreemptedTTL = time.Hour
	// DefaultBackoffWindow is how far back SetPreemptedBackoff counts a
	// zone's preemptions.
	DefaultBackoffWindow = 24 * time.Hour
)

// Key names an offering: zone x instance type x market.
type Key struct {
	Zone         string          `json:"zone"`
	InstanceType string          `json:"instanceType"`
	Market       provider.Market `json:"market"`
}

// KeyOf returns the key of an offering.
func KeyOf(o provider.Offering) Key {
	return Key{Zone: o.Zone, InstanceType: o.InstanceType, Market: o.Market}
}

// Blocked is what the memory holds about one offering.
type Blocked struct {
	Key Key `json:"key"`
	// Until is when the offering may take launches again (zero: it may).
	Until time.Time `json:"until,omitzero"`
	// PreemptedUntil is when a recent preemption stops counting against it
	// (zero: none).
	PreemptedUntil time.Time `json:"preemptedUntil,omitzero"`
	// Why it is held.
	Why string `json:"why"`
}

// Memory is what a placement decision reads of a CapacityMemory, read
// only: a *CapacityMemory (nil remembers nothing) or one of its Accrued
// views.
type Memory interface {
	// Blocked reports whether k may take no launch now.
	Blocked(k Key) (Blocked, bool)
	// Preempted reports whether k lost an instance to a preemption
	// recently.
	Preempted(k Key) bool
	// Rate is the learnt rate of preemption episodes of k per hour held.
	Rate(k Key) float64
	// Timing is what was measured of notices and starts.
	Timing() Timing
}

var (
	_ Memory = (*CapacityMemory)(nil)
	_ Memory = accrued{}
)

// CapacityMemory remembers offerings that lacked capacity recently:
// refused launches and preemptions make an offering unusable for the TTL,
// and a preemption also puts it after the offerings that had none for the
// PreemptedTTL. Time comes from its injected clock. It is safe for
// concurrent use; a nil *CapacityMemory remembers nothing.
type CapacityMemory struct {
	clock        clock.PassiveClock
	ttl          time.Duration
	preemptedTTL time.Duration
	// backoffMax > preemptedTTL turns on the adaptive hold (see
	// SetPreemptedBackoff); backoffWindow is how far back it counts.
	backoffMax, backoffWindow time.Duration

	mu sync.Mutex
	m  map[Key]Blocked
	// episodes holds, per key, the start of each preemption episode within
	// backoffWindow (only with the adaptive hold).
	episodes map[Key][]time.Time

	// rates and timing are what the pool learnt of its market (Rate,
	// Timing); accruedAt is the last Accrue.
	rates        map[Key]*rate
	rateHalfLife time.Duration
	accruedAt    time.Time
	timing       Timing
}

// NewCapacityMemory returns an empty memory whose entries last ttl
// (DefaultCapacityTTL when ttl <= 0) on clk (the real clock when nil), and
// whose preemptions count for DefaultPreemptedTTL (see SetPreemptedTTL).
func NewCapacityMemory(clk clock.PassiveClock, ttl time.Duration) *CapacityMemory {
	if clk == nil {
		clk = clock.RealClock{}
	}
	if ttl <= 0 {
		ttl = DefaultCapacityTTL
	}
	return &CapacityMemory{clock: clk, ttl: ttl, preemptedTTL: DefaultPreemptedTTL, m: map[Key]Blocked{}, episodes: map[Key][]time.Time{}}
}

// SetPreemptedBackoff makes the preempted hold adaptive, as SpotHedge's
// preempted set is meant to be: an offering that keeps losing instances
// stays preempted (at risk) longer, one that lost a single instance does
// not hold the pool's cover for hours. A preemption recorded at least the
// TTL after the start of the offering's latest episode starts an episode
// (the instances a zone loses at once are one episode); the episode holds
// the offering preempted for
//
//	hold = min(max, PreemptedTTL x 2^(k-1))
//
// where k counts the offering's episodes within window (DefaultBackoffWindow
// when window <= 0) up to and including this one. A preemption within an
// episode extends the hold by the same amount from its own time. Episodes
// older than window stop counting, so the hold shrinks back to
// PreemptedTTL once an offering has been stable for a window. max <= the
// PreemptedTTL turns the adaptive hold off (every preemption holds for the
// PreemptedTTL). It applies to preemptions recorded from now on.
func (m *CapacityMemory) SetPreemptedBackoff(max, window time.Duration) {
	if m == nil {
		return
	}
	if window <= 0 {
		window = DefaultBackoffWindow
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.backoffMax, m.backoffWindow = max, window
}

// holdFor returns how long a preemption of k recorded at now holds it
// preempted, recording the episode; m.mu is held.
func (m *CapacityMemory) holdFor(k Key, now time.Time) time.Duration {
	if m.preemptedTTL <= 0 {
		return 0
	}
	if m.backoffMax <= m.preemptedTTL {
		return m.preemptedTTL
	}
	eps := m.episodes[k]
	keep := eps[:0]
	for _, t := range eps {
		if now.Sub(t) < m.backoffWindow {
			keep = append(keep, t)
		}
	}
	if len(keep) == 0 || now.Sub(keep[len(keep)-1]) >= m.ttl {
		keep = append(keep, now)
	}
	m.episodes[k] = keep
	return backoffHold(m.preemptedTTL, m.backoffMax, len(keep))
}

// backoffHold is min(max, base x 2^(k-1)) for k >= 1.
func backoffHold(base, max time.Duration, k int) time.Duration {
	h := base
	for i := 1; i < k && h < max; i++ {
		h *= 2
	}
	return min(h, max)
}

// SetPreemptedTTL sets how long a preemption puts its offering after the
// others; 0 or less turns that off (a preemption then only blocks for the
// TTL). It applies to preemptions recorded from now on.
func (m *CapacityMemory) SetPreemptedTTL(d time.Duration) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.preemptedTTL = max(d, 0)
}

// TTL is how long a refusal or preemption blocks an offering.
func (m *CapacityMemory) TTL() time.Duration {
	if m == nil {
		return 0
	}
	return m.ttl
}

// Record marks k unusable from now for the TTL (extending an earlier
// entry); why is kept for the decision's notes.
func (m *CapacityMemory) Record(k Key, why string) {
	if m == nil {
		return
	}
	now := m.clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	b := m.m[k]
	b.Key, b.Until, b.Why = k, now.Add(m.ttl), why
	m.m[k] = b
}

// RecordPreemption marks k unusable for the TTL, as Record does, and
// preempted for the PreemptedTTL: placement then prefers offerings without
// a recent preemption.
func (m *CapacityMemory) RecordPreemption(k Key) {
	if m == nil {
		return
	}
	now := m.clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	b := m.m[k]
	b.Key, b.Until, b.Why = k, now.Add(m.ttl), "preempted"
	m.countEpisode(k, now)
	if hold := m.holdFor(k, now); hold > 0 && now.Add(hold).After(b.PreemptedUntil) {
		b.PreemptedUntil = now.Add(hold)
	}
	m.m[k] = b
}

// Observe records k when err is or wraps a *provider.InsufficientCapacityError
// and reports whether it did. Other errors (throttling, bad requests) say
// nothing about capacity and are not remembered.
func (m *CapacityMemory) Observe(k Key, err error) bool {
	if err == nil || !provider.IsInsufficientCapacity(err) {
		return false
	}
	m.Record(k, "insufficient capacity")
	return true
}

// Forget drops what is known of k, for example once an instance launched
// there became ready; the episodes counted by the adaptive hold are kept.
func (m *CapacityMemory) Forget(k Key) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.m, k)
}

// lookup returns the entry of k in force at now, pruning it when spent.
func (m *CapacityMemory) lookup(k Key) (Blocked, time.Time, bool) {
	if m == nil {
		return Blocked{}, time.Time{}, false
	}
	now := m.clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.m[k]
	if !ok {
		return Blocked{}, now, false
	}
	if !now.Before(b.Until) && !now.Before(b.PreemptedUntil) {
		delete(m.m, k)
		return Blocked{}, now, false
	}
	return b, now, true
}

// Blocked reports whether k may take no launch now, and the entry if so.
func (m *CapacityMemory) Blocked(k Key) (Blocked, bool) {
	b, now, ok := m.lookup(k)
	if !ok || !now.Before(b.Until) {
		return Blocked{}, false
	}
	return b, true
}

// Preempted reports whether k lost an instance to a preemption within the
// PreemptedTTL.
func (m *CapacityMemory) Preempted(k Key) bool {
	b, now, ok := m.lookup(k)
	return ok && now.Before(b.PreemptedUntil)
}

// List returns the entries in force now, sorted by key.
func (m *CapacityMemory) List() []Blocked {
	if m == nil {
		return nil
	}
	now := m.clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Blocked, 0, len(m.m))
	for k, b := range m.m {
		if !now.Before(b.Until) && !now.Before(b.PreemptedUntil) {
			delete(m.m, k)
			continue
		}
		out = append(out, b)
	}
	sort.Slice(out, func(i, j int) bool { return keyLess(out[i].Key, out[j].Key) })
	return out
}

func keyLess(a, b Key) bool {
	if a.Zone != b.Zone {
		return a.Zone < b.Zone
	}
	if a.InstanceType != b.InstanceType {
		return a.InstanceType < b.InstanceType
	}
	return a.Market < b.Market
}

// DefaultRateHalfLife is how fast what the memory learnt of an offering's
// preemptions fades: an episode or an hour of exposure counts half as much
// after it. A day: the traces' zones change their behaviour within days
// (BENCHMARKS.md, "dips"), and a pool must forget a bad morning by the
// next one.
const DefaultRateHalfLife = 24 * time.Hour

// What an offering's rate is shrunk toward: the pool's market-wide rate
// (every offering it held pooled), itself starting from a prior of one
// episode per day worth a quarter of an episode. An offering's own
// history counts against priorZoneHours of the market-wide rate, so a zone
// the pool has barely held is taken to behave like the market until it
// shows otherwise (empirical-Bayes shrinkage of a Poisson rate).
const (
	priorEpisodes  = 0.25
	priorHours     = 6.0
	priorZoneHours = 24.0
)

// rate is what the memory learnt of one offering: decayed counts of
// preemption episodes and of the hours the pool held it (exposure).
type rate struct {
	episodes, hours float64
	at              time.Time // when both were last decayed
	lastEpisode     time.Time // start of the latest episode
}

func (r *rate) decay(now time.Time, halfLife time.Duration) {
	if !r.at.IsZero() && now.After(r.at) {
		f := math.Exp2(-float64(now.Sub(r.at)) / float64(halfLife))
		r.episodes *= f
		r.hours *= f
	}
	if now.After(r.at) {
		r.at = now
	}
}

// Accrue adds exposure: the pool has held n live spot instances on each
// offering since the last call (at most one call's gap counts, so a pause
// of the caller does not add hours nobody watched). Exposure counts per
// offering held, not per instance: a zone's instances are lost together.
func (m *CapacityMemory) Accrue(held map[Key]int) {
	if m == nil {
		return
	}
	now := m.clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.rates == nil {
		m.rates = map[Key]*rate{}
	}
	m.accruedAt = accrue(m.rates, m.accruedAt, now, held, m.halfLife())
}

// accrue adds the exposure held since at to rates and returns now, the
// time of this accrual.
func accrue(rates map[Key]*rate, at, now time.Time, held map[Key]int, halfLife time.Duration) time.Time {
	gap := 0.0
	if !at.IsZero() && now.After(at) {
		gap = min(now.Sub(at), time.Hour).Hours()
	}
	for k, n := range held {
		if n <= 0 {
			continue
		}
		r := rates[k]
		if r == nil {
			r = &rate{}
			rates[k] = r
		}
		r.decay(now, halfLife)
		r.hours += gap
	}
	return now
}

// Accrued returns a read-only view of m as it will read once Accrue(held)
// is called now, leaving m as it is: a pure decision plans with the
// round's exposure and hands the Accrue back as a command.
func (m *CapacityMemory) Accrued(held map[Key]int) Memory {
	if m == nil {
		return m
	}
	now := m.clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	rates := make(map[Key]*rate, len(m.rates)+len(held))
	for k, r := range m.rates {
		c := *r
		rates[k] = &c
	}
	accrue(rates, m.accruedAt, now, held, m.halfLife())
	return accrued{m: m, rates: rates}
}

// accrued is a CapacityMemory with exposure not yet accrued (Accrued).
type accrued struct {
	m     *CapacityMemory
	rates map[Key]*rate
}

func (a accrued) Blocked(k Key) (Blocked, bool) { return a.m.Blocked(k) }
func (a accrued) Preempted(k Key) bool          { return a.m.Preempted(k) }
func (a accrued) Timing() Timing                { return a.m.Timing() }

func (a accrued) Rate(k Key) float64 {
	now := a.m.clock.Now()
	a.m.mu.Lock()
	defer a.m.mu.Unlock()
	return rateOf(a.rates, now, a.m.halfLife(), k)
}

// countEpisode counts a preemption of k as a new episode unless it comes
// within the TTL of the latest one (the instances a zone loses at once are
// one episode); m.mu is held.
func (m *CapacityMemory) countEpisode(k Key, now time.Time) {
	if m.rates == nil {
		m.rates = map[Key]*rate{}
	}
	r := m.rates[k]
	if r == nil {
		r = &rate{}
		m.rates[k] = r
	}
	r.decay(now, m.halfLife())
	if r.lastEpisode.IsZero() || now.Sub(r.lastEpisode) >= m.ttl {
		r.episodes++
		r.lastEpisode = now
	}
}

func (m *CapacityMemory) halfLife() time.Duration {
	if m.rateHalfLife > 0 {
		return m.rateHalfLife
	}
	return DefaultRateHalfLife
}

// Rate is the learnt rate of preemption episodes of k per hour held:
//
//	market = (all episodes + priorEpisodes) / (all hours + priorHours)
//	rate   = (episodes of k + market x priorZoneHours) / (hours of k + priorZoneHours)
//
// every count decayed with the half-life.
func (m *CapacityMemory) Rate(k Key) float64 {
	if m == nil {
		return priorEpisodes / priorHours
	}
	now := m.clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	return rateOf(m.rates, now, m.halfLife(), k)
}

func rateOf(rates map[Key]*rate, now time.Time, halfLife time.Duration, k Key) float64 {
	var e, h, te, th float64
	for key, r := range rates {
		f := 1.0
		if now.After(r.at) {
			f = math.Exp2(-float64(now.Sub(r.at)) / float64(halfLife))
		}
		te += r.episodes * f
		th += r.hours * f
		if key == k {
			e, h = r.episodes*f, r.hours*f
		}
	}
	market := (te + priorEpisodes) / (th + priorHours)
	return (e + market*priorZoneHours) / (h + priorZoneHours)
}

// Timing is what a pool has measured of its market and its servers: the
// notice the provider gives before a reclaim, and how long an instance
// takes from launch (cold) or from a start out of standby (warm) to ready.
// A zero field is not known yet.
type Timing struct {
	Notice, ColdStart, WarmStart time.Duration
}

// timingWeight is the weight of a new measurement in the running means.
const timingWeight = 0.3

// ObserveNotice records the notice of one reclaim (its deadline minus
// when it was seen).
func (m *CapacityMemory) ObserveNotice(d time.Duration) {
	if m == nil {
		return
	}
	m.observe(&m.timing.Notice, d)
}

// ObserveStart records how long one instance took to be ready, from its
// launch (warm false) or its start out of standby (warm true).
func (m *CapacityMemory) ObserveStart(d time.Duration, warm bool) {
	if m == nil {
		return
	}
	if warm {
		m.observe(&m.timing.WarmStart, d)
	} else {
		m.observe(&m.timing.ColdStart, d)
	}
}

func (m *CapacityMemory) observe(f *time.Duration, d time.Duration) {
	if m == nil || d < 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if *f == 0 {
		*f = d
		return
	}
	*f = time.Duration((1-timingWeight)*float64(*f) + timingWeight*float64(d))
}

// Timing returns what was measured so far.
func (m *CapacityMemory) Timing() Timing {
	if m == nil {
		return Timing{}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.timing
}
