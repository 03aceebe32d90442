package cost

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/tidegpu/tidegpu/internal/market"
)

// SnapshotVersion is the version of the format Snapshot writes and
// Restore reads.
const SnapshotVersion = 1

type snapshotV1 struct {
	Version    int             `json:"version"`
	TakenAt    time.Time       `json:"takenAt"`
	Instances  []snapInstance  `json:"instances,omitempty"`
	Aggregates []snapAgg       `json:"aggregates,omitempty"`
	Models     []snapModel     `json:"models,omitempty"`
	Retired    []snapRetired   `json:"retired,omitempty"`
	RetiredIDs []snapRetiredID `json:"retiredIds,omitempty"`
	Zero       []snapZero      `json:"zero,omitempty"`
	Tenants    []snapTenantAgg `json:"tenants,omitempty"`
	Alerts     []snapAlert     `json:"alerts,omitempty"`
}

type snapInstance struct {
	Info     InstanceInfo  `json:"info"`
	Start    time.Time     `json:"start"`
	End      *time.Time    `json:"end,omitempty"`
	Segments []snapSegment `json:"segments"`
	// Busy holds [hour index, segment, busy ns] buckets.
	Busy [][3]int64 `json:"busy,omitempty"`
	// BusyThrough is the busy cursor (unix ns).
	BusyThrough int64            `json:"busyThrough,omitempty"`
	BusyTotal   *int64           `json:"busyTotal,omitempty"`
	Tokens      []snapTokens     `json:"tokens,omitempty"`
	TokenTotals []snapTokenTotal `json:"tokenTotals,omitempty"`
	TenantUse   []snapTenantUse  `json:"tenantUse,omitempty"`
}

type snapSegment struct {
	From      time.Time    `json:"from"`
	Effective market.Price `json:"effective"`
	List      market.Price `json:"list"`
}

type snapTokens struct {
	Model      string `json:"model"`
	Hour       int64  `json:"hour"`
	Prompt     int64  `json:"prompt"`
	Completion int64  `json:"completion"`
}

type snapTokenTotal struct {
	Model      string `json:"model"`
	Prompt     int64  `json:"prompt"`
	Completion int64  `json:"completion"`
}

// snapAgg stores one aggregate key's hours column-wise, to keep it small.
type snapAgg struct {
	Key    aggKey  `json:"key"`
	Hours  []int64 `json:"hours"`
	InstNs []int64 `json:"instNs"`
	BusyNs []int64 `json:"busyNs"`
}

type snapModel struct {
	Pool       string    `json:"pool"`
	Currency   string    `json:"currency"`
	Model      string    `json:"model"`
	Hours      []int64   `json:"hours"`
	Prompt     []int64   `json:"prompt"`
	Completion []int64   `json:"completion"`
	Alloc      []float64 `json:"alloc"`
	Usage      []float64 `json:"usage"`
}

type snapRetired struct {
	Pool     string `json:"pool"`
	Currency string `json:"currency"`
	InstNs   int64  `json:"instNs"`
	BusyNs   int64  `json:"busyNs"`
	Eff      acc    `json:"eff"`
	List     acc    `json:"list"`
	Busy     acc    `json:"busy"`
}

type snapRetiredID struct {
	ID  string `json:"id"`
	End int64  `json:"end"`
}

// Snapshot compacts the ledger and returns its state as versioned JSON, for
// the state file of `tidegpu up` or a ConfigMap of the operator. Busy time
// in progress is counted up to now; the output is deterministic.
func (l *Ledger) Snapshot() ([]byte, error) {
	now := l.clock.Now()
	n := now.UnixNano()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.compactLocked(now)
	s := snapshotV1{Version: SnapshotVersion, TakenAt: now.UTC()}
	for _, lt := range l.inst {
		s.Instances = append(s.Instances, lt.snapshot(n))
	}
	sort.Slice(s.Instances, func(i, j int) bool { return s.Instances[i].Info.ID < s.Instances[j].Info.ID })
	for k, hours := range l.aggs {
		a := snapAgg{Key: k}
		for _, h := range sortedHours(hours) {
			v := hours[h]
			a.Hours = append(a.Hours, h)
			a.InstNs = append(a.InstNs, v.instNs)
			a.BusyNs = append(a.BusyNs, v.busyNs)
		}
		s.Aggregates = append(s.Aggregates, a)
	}
	sort.Slice(s.Aggregates, func(i, j int) bool { return aggLess(s.Aggregates[i].Key, s.Aggregates[j].Key) })
	for k, hours := range l.models {
		m := snapModel{Pool: k.Pool, Currency: k.Currency, Model: k.Model}
		for _, h := range sortedHours(hours) {
			v := hours[h]
			m.Hours = append(m.Hours, h)
			m.Prompt = append(m.Prompt, v.prompt)
			m.Completion = append(m.Completion, v.completion)
			m.Alloc = append(m.Alloc, v.alloc)
			m.Usage = append(m.Usage, v.usage)
		}
		s.Models = append(s.Models, m)
	}
	sort.Slice(s.Models, func(i, j int) bool {
		a, b := s.Models[i], s.Models[j]
		return a.Pool+"\x00"+a.Currency+"\x00"+a.Model < b.Pool+"\x00"+b.Currency+"\x00"+b.Model
	})
	for k, v := range l.retired {
		s.Retired = append(s.Retired, snapRetired{Pool: k.Pool, Currency: k.Currency, InstNs: v.instNs, BusyNs: v.busyNs,
			Eff: v.eff, List: v.list, Busy: v.busy})
	}
	sort.Slice(s.Retired, func(i, j int) bool {
		return s.Retired[i].Pool+"\x00"+s.Retired[i].Currency < s.Retired[j].Pool+"\x00"+s.Retired[j].Currency
	})
	for id, end := range l.retiredIDs {
		s.RetiredIDs = append(s.RetiredIDs, snapRetiredID{id, end})
	}
	sort.Slice(s.RetiredIDs, func(i, j int) bool { return s.RetiredIDs[i].ID < s.RetiredIDs[j].ID })
	s.Zero = l.snapshotZeroLocked()
	s.Tenants = l.snapshotTenantsLocked()
	s.Alerts = l.snapshotAlertsLocked()
	b, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("cost ledger snapshot: %w", err)
	}
	return b, nil
}

func sortedHours[V any](m map[int64]V) []int64 {
	hs := make([]int64, 0, len(m))
	for h := range m {
		hs = append(hs, h)
	}
	sort.Slice(hs, func(i, j int) bool { return hs[i] < hs[j] })
	return hs
}

func aggLess(a, b aggKey) bool {
	ka := fmt.Sprintf("%s\x00%s\x00%s\x00%s\x00%s\x00%s\x00%s\x00%s\x00%t\x00%020d\x00%020d", a.Pool, a.Provider, a.Region, a.Zone,
		a.InstanceType, a.Market, a.Currency, a.Source, a.Estimated, a.EffN, a.ListN)
	kb := fmt.Sprintf("%s\x00%s\x00%s\x00%s\x00%s\x00%s\x00%s\x00%s\x00%t\x00%020d\x00%020d", b.Pool, b.Provider, b.Region, b.Zone,
		b.InstanceType, b.Market, b.Currency, b.Source, b.Estimated, b.EffN, b.ListN)
	return ka < kb
}

func (lt *lifetime) snapshot(now int64) snapInstance {
	si := snapInstance{Info: lt.info, Start: time.Unix(0, lt.start).UTC()}
	if lt.end != 0 {
		e := time.Unix(0, lt.end).UTC()
		si.End = &e
	}
	for _, s := range lt.segs {
		si.Segments = append(si.Segments, snapSegment{From: time.Unix(0, s.from).UTC(), Effective: s.eff, List: s.list})
	}
	m := lt.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.busy && m.since < now {
		m.addBusyLocked(m.since, now)
		m.since = now
	}
	for k, ns := range m.buckets {
		si.Busy = append(si.Busy, [3]int64{k.hour, int64(k.seg), ns})
	}
	sort.Slice(si.Busy, func(i, j int) bool {
		if si.Busy[i][0] != si.Busy[j][0] {
			return si.Busy[i][0] < si.Busy[j][0]
		}
		return si.Busy[i][1] < si.Busy[j][1]
	})
	si.BusyThrough = max(m.through, now)
	if m.haveBusyTotal {
		t := m.busyTotal
		si.BusyTotal = &t
	}
	for k, c := range m.tokens {
		si.Tokens = append(si.Tokens, snapTokens{Model: k.model, Hour: k.hour, Prompt: c.prompt, Completion: c.completion})
	}
	sort.Slice(si.Tokens, func(i, j int) bool {
		if si.Tokens[i].Model != si.Tokens[j].Model {
			return si.Tokens[i].Model < si.Tokens[j].Model
		}
		return si.Tokens[i].Hour < si.Tokens[j].Hour
	})
	for model, c := range m.tokTotals {
		si.TokenTotals = append(si.TokenTotals, snapTokenTotal{Model: model, Prompt: c.prompt, Completion: c.completion})
	}
	sort.Slice(si.TokenTotals, func(i, j int) bool { return si.TokenTotals[i].Model < si.TokenTotals[j].Model })
	si.TenantUse = m.snapshotTenantsLocked()
	return si
}

// SnapshotError says a snapshot could not be restored.
type SnapshotError struct {
	// Version is the version found, when that is the problem.
	Version int
	// Err says what is wrong.
	Err error
}

func (e *SnapshotError) Error() string {
	if e.Version != 0 && e.Version != SnapshotVersion {
		return fmt.Sprintf("cost ledger snapshot version %d: this build reads version %d", e.Version, SnapshotVersion)
	}
	return fmt.Sprintf("cost ledger snapshot: %v", e.Err)
}

func (e *SnapshotError) Unwrap() error { return e.Err }

// Limits on what a snapshot may hold, so that outside input cannot make a
// ledger that overflows or exhausts memory beyond its own size.
const (
	maxName       = 256
	maxTokenCount = int64(1) << 50
	maxAggNs      = int64(1_000_000) * nsPerHour // a million instance-hours in one hour
)

var (
	minHour = hourOf(time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	maxHour = hourOf(time.Date(2199, 12, 31, 0, 0, 0, 0, time.UTC).UnixNano())
	maxAccV = acc{hi: 1 << 40} // 2^104 acc units: ~8e9 currency-unit-hours... far above any real total
)

// Restore replaces the ledger's state with a snapshot. Call it before
// feeding the ledger: Meters handed out before are detached from it. Events stamped before
// the snapshot was taken are in it, so after Restore they are ignored when
// replayed: starting a known instance does nothing, busy time and tokens
// before the snapshot's time are not counted again, and cumulative
// counters continue from the readings saved. Busy intervals open at the
// snapshot are counted up to its time and then closed (the gateway that
// reported them has restarted with the process). On error the ledger is
// unchanged.
func (l *Ledger) Restore(data []byte) error {
	var probe struct {
		Version int `json:"version"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return &SnapshotError{Err: err}
	}
	if probe.Version != SnapshotVersion {
		return &SnapshotError{Version: probe.Version, Err: errors.New("unsupported version")}
	}
	var s snapshotV1
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return &SnapshotError{Err: err}
	}
	if dec.More() {
		return &SnapshotError{Err: errors.New("trailing data after the snapshot")}
	}
	nl := &Ledger{}
	nl.reset()
	if err := nl.load(&s); err != nil {
		return &SnapshotError{Err: err}
	}
	l.mu.Lock()
	l.inst, l.aggs, l.models, l.retired, l.retiredIDs, l.restoredAt = nl.inst, nl.aggs, nl.models, nl.retired, nl.retiredIDs, nl.restoredAt
	l.zero = nl.zero
	l.tenantAggs = nl.tenantAggs
	// Alerts delivered since the start stay marked: the union.
	for k, at := range nl.alerts {
		if _, ok := l.alerts[k]; !ok {
			l.alerts[k] = at
		}
	}
	l.mu.Unlock()
	return nil
}

func checkName(what, s string, required bool) error {
	if required && s == "" {
		return fmt.Errorf("%s is empty", what)
	}
	if len(s) > maxName {
		return fmt.Errorf("%s longer than %d bytes", what, maxName)
	}
	return nil
}

func checkHour(h int64) error {
	if h < minHour || h > maxHour {
		return fmt.Errorf("hour index %d out of range", h)
	}
	return nil
}

func checkAcc(what string, a acc) error {
	if a.neg() || a.hi > maxAccV.hi {
		return fmt.Errorf("%s out of range", what)
	}
	return nil
}

func (l *Ledger) load(s *snapshotV1) error {
	if !validTime(s.TakenAt) {
		return fmt.Errorf("takenAt %v out of range", s.TakenAt)
	}
	taken := s.TakenAt.UnixNano()
	l.restoredAt = taken
	for i := range s.Instances {
		si := &s.Instances[i]
		lt, err := loadInstance(si, taken)
		if err != nil {
			return fmt.Errorf("instance %d (%q): %w", i, si.Info.ID, err)
		}
		if _, dup := l.inst[lt.info.ID]; dup {
			return fmt.Errorf("instance %q appears twice", lt.info.ID)
		}
		l.inst[lt.info.ID] = lt
	}
	for i, a := range s.Aggregates {
		if err := l.loadAgg(a); err != nil {
			return fmt.Errorf("aggregate %d: %w", i, err)
		}
	}
	for i, m := range s.Models {
		if err := l.loadModel(m); err != nil {
			return fmt.Errorf("model aggregate %d: %w", i, err)
		}
	}
	for i, r := range s.Retired {
		if err := checkName("retired pool", r.Pool, true); err != nil {
			return err
		}
		if !validCurrency(r.Currency) {
			return fmt.Errorf("retired total %d: currency %q", i, r.Currency)
		}
		if r.InstNs < 0 || r.BusyNs < 0 || r.BusyNs > r.InstNs || r.InstNs > math.MaxInt64/4 {
			return fmt.Errorf("retired total %d: durations out of range", i)
		}
		for _, a := range []acc{r.Eff, r.List, r.Busy} {
			if err := checkAcc("retired total", a); err != nil {
				return err
			}
		}
		k := poolCur{r.Pool, r.Currency}
		if _, dup := l.retired[k]; dup {
			return fmt.Errorf("retired total for %s %s appears twice", r.Pool, r.Currency)
		}
		l.retired[k] = &retiredVal{instNs: r.InstNs, busyNs: r.BusyNs, eff: r.Eff, list: r.List, busy: r.Busy}
	}
	if err := l.loadZero(s.Zero); err != nil {
		return err
	}
	for i, t := range s.Tenants {
		if err := l.loadTenantAgg(t); err != nil {
			return fmt.Errorf("tenant aggregate %d: %w", i, err)
		}
	}
	if err := l.loadAlerts(s.Alerts); err != nil {
		return err
	}
	for _, r := range s.RetiredIDs {
		if err := checkName("retired instance ID", r.ID, true); err != nil {
			return err
		}
		if err := checkHour(hourOf(r.End)); err != nil {
			return fmt.Errorf("retired instance %q: %w", r.ID, err)
		}
		if _, live := l.inst[r.ID]; live {
			return fmt.Errorf("instance %q is both live and retired", r.ID)
		}
		l.retiredIDs[r.ID] = r.End
	}
	return nil
}

func loadInstance(si *snapInstance, taken int64) (*lifetime, error) {
	info := si.Info
	if err := checkName("ID", info.ID, true); err != nil {
		return nil, err
	}
	if err := checkName("pool", info.Pool, true); err != nil {
		return nil, err
	}
	for _, f := range []string{info.Provider, info.Region, info.Zone, info.InstanceType, string(info.Market)} {
		if err := checkName("instance field", f, false); err != nil {
			return nil, err
		}
	}
	if len(info.Models) > 64 {
		return nil, errors.New("more than 64 models")
	}
	for _, m := range info.Models {
		if err := checkName("model", m, false); err != nil {
			return nil, err
		}
	}
	if !info.LaunchedAt.IsZero() && !validTime(info.LaunchedAt) {
		return nil, errors.New("launchedAt out of range")
	}
	if !validTime(si.Start) {
		return nil, errors.New("start out of range")
	}
	lt := &lifetime{info: info, start: si.Start.UnixNano(), m: newMeter()}
	if si.End != nil {
		if !validTime(*si.End) || si.End.UnixNano() < lt.start {
			return nil, errors.New("end out of range or before start")
		}
		lt.end = si.End.UnixNano()
	}
	if len(si.Segments) == 0 || len(si.Segments) > 100_000 {
		return nil, errors.New("want at least one price segment")
	}
	for i, sg := range si.Segments {
		if !validTime(sg.From) {
			return nil, fmt.Errorf("segment %d: from out of range", i)
		}
		from := sg.From.UnixNano()
		if i == 0 && from != lt.start {
			return nil, errors.New("the first segment must begin at the start")
		}
		if i > 0 && from <= lt.segs[i-1].from {
			return nil, fmt.Errorf("segment %d: not after the one before", i)
		}
		if i > 0 && lt.end != 0 && from >= lt.end {
			return nil, fmt.Errorf("segment %d: begins after the end", i)
		}
		if err := checkPrices(sg.Effective, sg.List); err != nil {
			return nil, fmt.Errorf("segment %d: %w", i, err)
		}
		lt.segs = append(lt.segs, segment{from: from, eff: sg.Effective, list: sg.List,
			effN: priceNanos(sg.Effective.PerHour), listN: priceNanos(sg.List.PerHour)})
	}
	m := lt.m
	m.seg = int32(len(lt.segs) - 1)
	for _, b := range si.Busy {
		if err := checkHour(b[0]); err != nil {
			return nil, fmt.Errorf("busy bucket: %w", err)
		}
		if b[1] < 0 || b[1] >= int64(len(lt.segs)) {
			return nil, fmt.Errorf("busy bucket: segment %d out of range", b[1])
		}
		if b[2] < 0 || b[2] > nsPerHour {
			return nil, fmt.Errorf("busy bucket: %d ns in one hour", b[2])
		}
		k := bucketKey{b[0], int32(b[1])}
		if _, dup := m.buckets[k]; dup {
			return nil, fmt.Errorf("busy bucket for hour %d segment %d appears twice", b[0], b[1])
		}
		m.buckets[k] = b[2]
	}
	if err := checkHour(hourOf(si.BusyThrough)); si.BusyThrough != 0 && err != nil {
		return nil, fmt.Errorf("busyThrough: %w", err)
	}
	m.through = max(si.BusyThrough, taken)
	if si.BusyTotal != nil {
		if *si.BusyTotal < 0 {
			return nil, errors.New("busyTotal below zero")
		}
		m.haveBusyTotal, m.busyTotal = true, *si.BusyTotal
	}
	for _, t := range si.Tokens {
		if err := checkName("token model", t.Model, false); err != nil {
			return nil, err
		}
		if err := checkHour(t.Hour); err != nil {
			return nil, fmt.Errorf("tokens: %w", err)
		}
		if t.Prompt < 0 || t.Completion < 0 || t.Prompt > maxTokenCount || t.Completion > maxTokenCount {
			return nil, errors.New("token count out of range")
		}
		k := tokKey{t.Model, t.Hour}
		if _, dup := m.tokens[k]; dup {
			return nil, fmt.Errorf("tokens of %q in hour %d appear twice", t.Model, t.Hour)
		}
		m.tokens[k] = tokCount{t.Prompt, t.Completion}
	}
	for _, t := range si.TokenTotals {
		if err := checkName("token model", t.Model, false); err != nil {
			return nil, err
		}
		if t.Prompt < 0 || t.Completion < 0 {
			return nil, errors.New("token total below zero")
		}
		if _, dup := m.tokTotals[t.Model]; dup {
			return nil, fmt.Errorf("token totals of %q appear twice", t.Model)
		}
		m.tokTotals[t.Model] = tokCount{t.Prompt, t.Completion}
	}
	if err := m.loadTenants(si.TenantUse); err != nil {
		return nil, err
	}
	m.tokThrough = taken
	return lt, nil
}

func (l *Ledger) loadAgg(a snapAgg) error {
	k := a.Key
	if err := checkName("pool", k.Pool, true); err != nil {
		return err
	}
	for _, f := range []string{k.Provider, k.Region, k.Zone, k.InstanceType, string(k.Market), k.Source} {
		if err := checkName("aggregate field", f, false); err != nil {
			return err
		}
	}
	if !validCurrency(k.Currency) {
		return fmt.Errorf("currency %q", k.Currency)
	}
	if k.EffN < 0 || k.ListN < 0 || k.EffN > priceNanos(maxPerHour) || k.ListN > priceNanos(maxPerHour) {
		return errors.New("price out of range")
	}
	n := len(a.Hours)
	if len(a.InstNs) != n || len(a.BusyNs) != n {
		return errors.New("columns of different lengths")
	}
	if _, dup := l.aggs[k]; dup {
		return errors.New("key appears twice")
	}
	hours := make(map[int64]*aggVal, n)
	for i, h := range a.Hours {
		if err := checkHour(h); err != nil {
			return err
		}
		if _, dup := hours[h]; dup {
			return fmt.Errorf("hour %d appears twice", h)
		}
		if a.InstNs[i] < 0 || a.InstNs[i] > maxAggNs || a.BusyNs[i] < 0 || a.BusyNs[i] > a.InstNs[i] {
			return fmt.Errorf("hour %d: durations out of range", h)
		}
		hours[h] = &aggVal{instNs: a.InstNs[i], busyNs: a.BusyNs[i]}
	}
	l.aggs[k] = hours
	return nil
}

func (l *Ledger) loadModel(m snapModel) error {
	if err := checkName("pool", m.Pool, true); err != nil {
		return err
	}
	if err := checkName("model", m.Model, false); err != nil {
		return err
	}
	if !validCurrency(m.Currency) {
		return fmt.Errorf("currency %q", m.Currency)
	}
	n := len(m.Hours)
	if len(m.Prompt) != n || len(m.Completion) != n || len(m.Alloc) != n || len(m.Usage) != n {
		return errors.New("columns of different lengths")
	}
	k := modelKey{m.Pool, m.Currency, m.Model}
	if _, dup := l.models[k]; dup {
		return errors.New("key appears twice")
	}
	hours := make(map[int64]*modelVal, n)
	for i, h := range m.Hours {
		if err := checkHour(h); err != nil {
			return err
		}
		if _, dup := hours[h]; dup {
			return fmt.Errorf("hour %d appears twice", h)
		}
		if m.Prompt[i] < 0 || m.Completion[i] < 0 || m.Prompt[i] > maxTokenCount || m.Completion[i] > maxTokenCount {
			return fmt.Errorf("hour %d: token count out of range", h)
		}
		for _, f := range []float64{m.Alloc[i], m.Usage[i]} {
			if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 || f > maxAccV.float() {
				return fmt.Errorf("hour %d: cost out of range", h)
			}
		}
		hours[h] = &modelVal{prompt: m.Prompt[i], completion: m.Completion[i], alloc: m.Alloc[i], usage: m.Usage[i]}
	}
	l.models[k] = hours
	return nil
}
