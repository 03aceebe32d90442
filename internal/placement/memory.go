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
	// LossRates is the learnt rate per hour held of loss episodes by
	// size (CapacityMemory.LossRates).
	LossRates(max, priorSize int) []float64
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
	clock clock.PassiveClock
	ttl   time.Duration

	mu sync.Mutex
	m  map[Key]Blocked

	// losses and timing are what the pool learnt of its market
	// (LossRates, Timing); accruedAt is the last Accrue.
	losses       lossBook
	rateHalfLife time.Duration
	accruedAt    time.Time
	timing       Timing
}

// NewCapacityMemory returns an empty memory whose entries last ttl
// (DefaultCapacityTTL when ttl <= 0) on clk (the real clock when nil), and
// whose preemptions count for DefaultPreemptedTTL.
func NewCapacityMemory(clk clock.PassiveClock, ttl time.Duration) *CapacityMemory {
	if clk == nil {
		clk = clock.RealClock{}
	}
	if ttl <= 0 {
		ttl = DefaultCapacityTTL
	}
	return &CapacityMemory{clock: clk, ttl: ttl, m: map[Key]Blocked{}}
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
	m.countLoss(now)
	if until := now.Add(DefaultPreemptedTTL); until.After(b.PreemptedUntil) {
		b.PreemptedUntil = until
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
// there became ready.
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

// DefaultRateHalfLife is how fast what the memory learnt of the pool's
// losses fades: an episode or an hour held counts half as much after it.
// Chosen among 6 h to 96 h on the first half of the aws3 trace only
// (bench/spot TestSpotSelection); the evaluation reports it on aws1 and
// on aws3's second half.
const DefaultRateHalfLife = 12 * time.Hour

// The prior of the pool's loss episodes (LossRates): priorEpisodes over
// priorHours, one a day, worth a quarter of an observed episode, so that a
// day of calm (or one episode) outweighs it.
const (
	priorEpisodes = 0.25
	priorHours    = 6.0
)

// Learning sets how the memory learns; a zero field takes the default.
type Learning struct {
	// HalfLife of what was learnt (DefaultRateHalfLife).
	HalfLife time.Duration `json:"halfLife,omitempty"`
}

// SetLearning sets how the memory learns (see Learning).
func (m *CapacityMemory) SetLearning(l Learning) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rateHalfLife = l.HalfLife
}

// Accrue adds exposure: the pool has held the live spot instances of held
// (by offering) since the last call; at most an hour of a gap counts, so a
// pause of the caller does not add hours nobody watched. Exposure counts
// the time the pool held any spot, not per instance: a loss episode takes
// instances of several offerings at once.
func (m *CapacityMemory) Accrue(held map[Key]int) {
	if m == nil {
		return
	}
	now := m.clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	gap := m.pendingLocked(now, held)
	m.accruedAt = now
	if gap > 0 {
		m.losses.decay(now, m.halfLife())
		m.losses.hours += gap
	}
}

// pendingLocked is the exposure, in hours, that Accrue(held) adds now;
// m.mu is held.
func (m *CapacityMemory) pendingLocked(now time.Time, held map[Key]int) float64 {
	any := false
	for _, n := range held {
		any = any || n > 0
	}
	if !any || m.accruedAt.IsZero() || !now.After(m.accruedAt) {
		return 0
	}
	return min(now.Sub(m.accruedAt), time.Hour).Hours()
}

// Accrued returns a read-only view of m as it will read once Accrue(held)
// is called now, leaving m as it is: a pure decision plans with the
// round's exposure and hands the Accrue back as a command.
func (m *CapacityMemory) Accrued(held map[Key]int) Memory {
	if m == nil {
		return m
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return accrued{m: m, extra: m.pendingLocked(m.clock.Now(), held)}
}

// accrued is a CapacityMemory with exposure not yet accrued (Accrued).
type accrued struct {
	m     *CapacityMemory
	extra float64 // hours
}

func (a accrued) Blocked(k Key) (Blocked, bool) { return a.m.Blocked(k) }
func (a accrued) Preempted(k Key) bool          { return a.m.Preempted(k) }
func (a accrued) Timing() Timing                { return a.m.Timing() }
func (a accrued) LossRates(max, priorSize int) []float64 {
	return a.m.lossRates(max, priorSize, a.extra)
}

func (m *CapacityMemory) halfLife() time.Duration {
	if m.rateHalfLife > 0 {
		return m.rateHalfLife
	}
	return DefaultRateHalfLife
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

// lossBook is what the memory learnt of the pool's losses as a whole:
// decayed counts of loss episodes by size (the spot instances the pool
// lost within one TTL of the episode's first preemption, over every
// offering: zones and regions fail together) and of the hours it held
// spot.
type lossBook struct {
	sizes    map[int]float64
	hours    float64
	at       time.Time
	open     time.Time // start of the latest episode
	openSize int
}

func (b *lossBook) decay(now time.Time, halfLife time.Duration) {
	if !b.at.IsZero() && now.After(b.at) {
		f := math.Exp2(-float64(now.Sub(b.at)) / float64(halfLife))
		for s := range b.sizes {
			b.sizes[s] *= f
		}
		b.hours *= f
	}
	if now.After(b.at) {
		b.at = now
	}
}

// countLoss adds one lost instance to the pool's current loss episode, or
// starts one; m.mu is held.
func (m *CapacityMemory) countLoss(now time.Time) {
	b := &m.losses
	if b.sizes == nil {
		b.sizes = map[int]float64{}
	}
	b.decay(now, m.halfLife())
	if !b.open.IsZero() && now.Sub(b.open) < m.ttl {
		b.sizes[b.openSize]--
		b.openSize++
		b.sizes[b.openSize]++
		return
	}
	b.open, b.openSize = now, 1
	b.sizes[1]++
}

// LossRates returns, for m = 1 .. max, the learnt rate per hour held of
// loss episodes that take exactly m spot instances at once (m = max: max
// or more), with a prior of one episode a day taking priorSize instances,
// worth a quarter of an observed one: a pool expects to lose all its spot
// at once until it has seen otherwise.
func (m *CapacityMemory) LossRates(max, priorSize int) []float64 {
	return m.lossRates(max, priorSize, 0)
}

// lossRates is LossRates with extra hours held added.
func (m *CapacityMemory) lossRates(max, priorSize int, extra float64) []float64 {
	out := make([]float64, max+1)
	if max <= 0 {
		return out
	}
	var sizes map[int]float64
	hours := 0.0
	if m != nil {
		now := m.clock.Now()
		m.mu.Lock()
		f := 1.0
		if !m.losses.at.IsZero() && now.After(m.losses.at) {
			f = math.Exp2(-float64(now.Sub(m.losses.at)) / float64(m.halfLife()))
		}
		sizes = make(map[int]float64, len(m.losses.sizes))
		for s, c := range m.losses.sizes {
			sizes[s] = c * f
		}
		hours = m.losses.hours*f + extra
		m.mu.Unlock()
	}
	keys := make([]int, 0, len(sizes))
	for s := range sizes {
		keys = append(keys, s)
	}
	sort.Ints(keys) // one order of additions: the same rates every run
	for _, s := range keys {
		if c := sizes[s]; c > 0 && s > 0 {
			out[min(s, max)] += c
		}
	}
	out[min(max, priorSize)] += priorEpisodes
	for i := range out {
		out[i] /= hours + priorHours
	}
	return out
}
