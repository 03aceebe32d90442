package cost

import (
	"sync"
	"time"
)

// Meter records what the gateway sees of one instance: when at least one
// request is in flight (busy) and the tokens it answered. It is the hot-path
// half of the Ledger: callers get it once with Ledger.Meter and keep it; its
// methods take only the meter's own lock and do not allocate (a map entry is
// added once per hour and model). A nil *Meter ignores everything, so an
// instance the ledger does not know costs the caller nothing.
//
// Busy time is kept per (hour, price segment) bucket, never as a list of
// intervals, so its size does not grow with traffic. Every busy interval is
// clipped to a cursor (the end of the last interval counted, or the time of
// the snapshot a ledger was restored from), so an interval reported twice,
// or again after a restore, is counted once.
type Meter struct {
	mu      sync.Mutex
	seg     int32 // price segment new busy time belongs to
	busy    bool
	since   int64 // unix ns, while busy
	through int64 // busy time before this is counted (cursor)
	buckets map[bucketKey]int64

	haveBusyTotal bool
	busyTotal     int64 // last cumulative busy ns observed

	tokens     map[tokKey]tokCount
	tokTotals  map[string]tokCount // last cumulative counts per model
	tokThrough int64               // token events before this are in a restored snapshot

	tenants map[tenKey]*tenUse // per tenant, labels and hour (tenant.go); nil until the first use
}

type bucketKey struct {
	hour int64 // unix hour index
	seg  int32
}

type tokKey struct {
	model string
	hour  int64
}

type tokCount struct{ prompt, completion int64 }

func newMeter() *Meter {
	return &Meter{buckets: map[bucketKey]int64{}, tokens: map[tokKey]tokCount{}, tokTotals: map[string]tokCount{}}
}

// BusyStart records the 0 -> 1 transition of requests in flight at time at.
// A second BusyStart while busy is ignored.
func (m *Meter) BusyStart(at time.Time) {
	if m == nil {
		return
	}
	t := at.UnixNano()
	m.mu.Lock()
	if !m.busy {
		m.busy = true
		m.since = t
	}
	m.mu.Unlock()
}

// BusyEnd records the 1 -> 0 transition at time at: the instance was busy
// from the matching BusyStart until at. A BusyEnd while idle is ignored.
func (m *Meter) BusyEnd(at time.Time) {
	if m == nil {
		return
	}
	t := at.UnixNano()
	m.mu.Lock()
	if m.busy {
		m.addBusyLocked(m.since, t)
		m.busy = false
	}
	m.mu.Unlock()
}

// AddBusy records that the instance was busy over [from, to), as measured
// elsewhere (a gateway replica's report). Busy time is kept as one union:
// the part of the interval before the meter's cursor (already counted, by
// this or another reporter) is dropped, so overlapping reports from several
// gateways count their overlap once. An interval arriving after a later
// one was counted loses the part before that one's end.
func (m *Meter) AddBusy(from, to time.Time) {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.addBusyLocked(from.UnixNano(), to.UnixNano())
	m.mu.Unlock()
}

// ObserveBusyTotal records a cumulative busy-time counter read at time at
// (for example a gateway's "seconds with requests in flight" counter). The
// growth since the previous reading is counted as busy time ending at at
// (the first reading counts in full, as a counter that started with the
// backend); a reading equal to the previous one adds nothing, so replaying
// readings is harmless; a smaller reading is taken as a counter reset.
func (m *Meter) ObserveBusyTotal(total time.Duration, at time.Time) {
	if m == nil || total < 0 {
		return
	}
	t := at.UnixNano()
	m.mu.Lock()
	d := int64(total)
	if m.haveBusyTotal && d >= m.busyTotal {
		d -= m.busyTotal
	}
	m.haveBusyTotal = true
	m.busyTotal = int64(total)
	if d > 0 {
		m.addBusyLocked(t-d, t)
	}
	m.mu.Unlock()
}

// AddTokens records prompt and completion tokens of one answer (or a batch)
// of model served at time at. Events stamped before the snapshot a ledger
// was restored from are already in it and are ignored.
func (m *Meter) AddTokens(model string, prompt, completion int64, at time.Time) {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.addTokensLocked(model, prompt, completion, at.UnixNano())
	m.mu.Unlock()
}

// ObserveTokenTotals records cumulative token counters of model read at
// time at; only the growth since the previous reading is added, so the same
// reading twice adds nothing. A smaller reading is a counter reset.
func (m *Meter) ObserveTokenTotals(model string, prompt, completion int64, at time.Time) {
	if m == nil || prompt < 0 || completion < 0 {
		return
	}
	m.mu.Lock()
	last, seen := m.tokTotals[model]
	dp, dc := prompt, completion
	if seen && prompt >= last.prompt && completion >= last.completion {
		dp, dc = prompt-last.prompt, completion-last.completion
	}
	m.tokTotals[model] = tokCount{prompt, completion}
	m.addTokensLocked(model, dp, dc, at.UnixNano())
	m.mu.Unlock()
}

func (m *Meter) addTokensLocked(model string, prompt, completion, t int64) {
	if prompt < 0 || completion < 0 || (prompt == 0 && completion == 0) || t < m.tokThrough {
		return
	}
	k := tokKey{model, hourOf(t)}
	c := m.tokens[k]
	c.prompt += prompt
	c.completion += completion
	m.tokens[k] = c
}

// addBusyLocked counts [a, b) as busy, clipped to the cursor, split at hour
// boundaries into the current segment's buckets.
func (m *Meter) addBusyLocked(a, b int64) {
	if a < m.through {
		a = m.through
	}
	if b <= a {
		return
	}
	for h := hourOf(a); a < b; h++ {
		e := (h + 1) * nsPerHour
		if e > b {
			e = b
		}
		m.buckets[bucketKey{h, m.seg}] += e - a
		a = e
	}
	m.through = b
}

// newSegment makes busy time from at on count toward segment seg.
func (m *Meter) newSegment(at int64, seg int32) {
	m.mu.Lock()
	if m.busy && m.since < at {
		m.addBusyLocked(m.since, at)
		m.since = at
	}
	m.seg = seg
	m.mu.Unlock()
}

// stop ends an open busy interval at the instance's end.
func (m *Meter) stop(at int64) {
	m.mu.Lock()
	if m.busy {
		m.addBusyLocked(m.since, at)
		m.busy = false
	}
	m.mu.Unlock()
}

// hourOf returns the index of the UTC hour holding t (unix ns), rounding
// toward minus infinity.
func hourOf(t int64) int64 {
	h := t / nsPerHour
	if t%nsPerHour < 0 {
		h--
	}
	return h
}
