package cost

import (
	"math"
	"sort"
	"time"
)

// Window is the half-open interval [From, To).
type Window struct {
	// From is included, To is not; a zero From means the beginning.
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
}

// HourWindow returns the UTC hour holding t.
func HourWindow(t time.Time) Window {
	f := t.UTC().Truncate(time.Hour)
	return Window{f, f.Add(time.Hour)}
}

// DayWindow returns the UTC day holding t.
func DayWindow(t time.Time) Window {
	y, m, d := t.UTC().Date()
	f := time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	return Window{f, f.AddDate(0, 0, 1)}
}

// MonthWindow returns the UTC calendar month holding t: the period of a
// Budget.
func MonthWindow(t time.Time) Window {
	y, m, _ := t.UTC().Date()
	f := time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
	return Window{f, f.AddDate(0, 1, 0)}
}

func (w Window) ns() (int64, int64) {
	from, to := int64(math.MinInt64), int64(math.MaxInt64)
	if validTime(w.From) {
		from = w.From.UnixNano()
	}
	if validTime(w.To) {
		to = w.To.UnixNano()
	} else if !w.To.IsZero() && w.To.Year() < 1970 {
		to = math.MinInt64
	}
	return from, to
}

// UnattributedModel names the model a cost is allocated to when an instance
// served no tokens and declares no models.
const UnattributedModel = "(none)"

// ModelCost is the cost of one model in a pool over a window.
type ModelCost struct {
	// Model is the model's name as the gateway saw it in answers.
	Model string `json:"model"`
	// PromptTokens and CompletionTokens served; tokens of an hour only partly
	// inside the window count pro rata.
	PromptTokens     float64 `json:"promptTokens"`
	CompletionTokens float64 `json:"completionTokens"`
	// AllocationCost is the model's share of all instance cost: each
	// instance-hour's cost split by the tokens each model took that hour (an
	// hour with no tokens is split evenly among the instance's models).
	AllocationCost Money `json:"allocationCost"`
	// UsageCost is the model's share, split the same way, of the cost of the
	// time with at least one request in flight.
	UsageCost Money `json:"usageCost"`
	// PerMillionAllocation and PerMillionUsage are the costs per million
	// tokens (prompt + completion); valid only when HasTokens.
	PerMillionAllocation float64 `json:"perMillionAllocation"`
	PerMillionUsage      float64 `json:"perMillionUsage"`
	HasTokens            bool    `json:"hasTokens"`
}

// PoolReport is the cost of one pool in one currency over a window.
type PoolReport struct {
	// Pool and Currency the report is for, over Window.
	Pool     string `json:"pool"`
	Currency string `json:"currency"`
	Window   Window `json:"window"`
	// InstanceHours and BusyHours (time with at least one request in
	// flight) summed over instances.
	InstanceHours float64 `json:"instanceHours"`
	BusyHours     float64 `json:"busyHours"`
	// EffectiveCost is the spend: instance time x the price in force.
	EffectiveCost Money `json:"effectiveCost"`
	// ListCost is the on-demand equivalent of the same instance time.
	ListCost Money `json:"listCost"`
	// Savings is ListCost - EffectiveCost (negative if the effective price
	// was above on-demand).
	Savings Money `json:"savings"`
	// BusyCost is the effective cost of busy time; IdleCost the rest.
	BusyCost Money `json:"busyCost"`
	IdleCost Money `json:"idleCost"`
	// RunRatePerHour is the sum of the effective prices of the instances
	// running now, when now lies in [Window.From, Window.To]; zero for a
	// window in the past or the future.
	RunRatePerHour Money `json:"runRatePerHour"`
	// CostBySource splits EffectiveCost by price source (catalog, live,
	// override, fallback), so spend priced by a fallback is visible.
	CostBySource map[string]Money `json:"costBySource"`
	// EstimatedCost is the part of EffectiveCost priced with figures marked
	// estimated.
	EstimatedCost Money `json:"estimatedCost"`
	// Models are sorted by name.
	Models []ModelCost `json:"models,omitempty"`
	// ZeroHours is the time the pool ran no instance (scaled to zero)
	// after having run one, and ZeroSavings what those hours saved against
	// keeping one instance at the price of the pool's last.
	ZeroHours   float64 `json:"zeroHours,omitempty"`
	ZeroSavings Money   `json:"zeroSavings,omitzero"`
}

type tally struct {
	eff, list, busy, estimated acc
	// instNs and busyNs are exact; instFrac and busyFrac hold the pro-rata
	// parts of pieces a window cuts.
	instNs, busyNs     int64
	instFrac, busyFrac float64
	runRate            int64
	zeroNs             int64
	zeroSaved          acc
	bySource           map[string]acc
	models             map[string]*modelTally
}

type modelTally struct {
	prompt, completion float64
	alloc, usage       float64 // acc units
}

type tallies map[poolCur]*tally

func (ts tallies) get(pool, cur string) *tally {
	k := poolCur{pool, cur}
	t := ts[k]
	if t == nil {
		t = &tally{bySource: map[string]acc{}, models: map[string]*modelTally{}}
		ts[k] = t
	}
	return t
}

func (t *tally) model(name string) *modelTally {
	m := t.models[name]
	if m == nil {
		m = &modelTally{}
		t.models[name] = m
	}
	return m
}

// piece is the part of a lifetime in one hour at one price segment.
type piece struct {
	seg    int
	hour   int64
	a, b   int64 // piece bounds
	wa, wb int64 // the part inside the window
	busy   int64 // busy ns in [a, b)
}

func (p piece) full() bool { return p.wa == p.a && p.wb == p.b }

// busyIn returns the busy ns inside the window, pro rata within the piece.
func (p piece) busyIn() float64 {
	if p.full() {
		return float64(p.busy)
	}
	return float64(p.busy) * float64(p.wb-p.wa) / float64(p.b-p.a)
}

// walk calls fn for every piece of lt overlapping [from, to), with now
// closing a running lifetime and an open busy interval.
func (lt *lifetime) walk(from, to, now int64, fn func(piece)) {
	end := lt.endOr(now)
	m := lt.m
	m.mu.Lock()
	defer m.mu.Unlock()
	var openA, openB int64
	if m.busy {
		openA, openB = max(m.since, m.through), min(now, end)
	}
	for k := range lt.segs {
		sa := max(lt.segs[k].from, lt.start)
		sb := end
		if k+1 < len(lt.segs) {
			sb = min(lt.segs[k+1].from, end)
		}
		lo, hi := max(sa, from), min(sb, to)
		if hi <= lo {
			continue
		}
		for h := hourOf(lo); h*nsPerHour < hi; h++ {
			pa, pb := max(sa, h*nsPerHour), min(sb, (h+1)*nsPerHour)
			wa, wb := max(pa, from), min(pb, to)
			if wb <= wa {
				continue
			}
			busy := m.buckets[bucketKey{h, int32(k)}]
			if m.busy && int32(k) == m.seg {
				if oa, ob := max(openA, pa), min(openB, pb); ob > oa {
					busy += ob - oa
				}
			}
			busy = min(max(busy, 0), pb-pa)
			fn(piece{seg: k, hour: h, a: pa, b: pb, wa: wa, wb: wb, busy: busy})
		}
	}
}

// segAt returns the index of the segment in force at t (the first if t is
// before it).
func (lt *lifetime) segAt(t int64) int {
	i := sort.Search(len(lt.segs), func(i int) bool { return lt.segs[i].from > t })
	return max(i-1, 0)
}

type hourCur struct {
	cur  string
	hour int64
}

// tallyLifetime adds lt's part of [from, to) to ts. Its cost is
// O(segments + busy buckets + hours with tokens), not O(hours), so that
// all-time totals of long-running instances stay cheap at every scrape. It
// gives what summing walk's pieces would.
func (lt *lifetime) tallyLifetime(ts tallies, from, to, now int64) {
	end := lt.endOr(now)
	pool := lt.info.Pool
	spans := lt.spans(end)
	costTot := map[string]float64{} // acc units per currency
	busyTot := map[string]float64{}
	for k, sp := range spans {
		a, b := max(sp[0], from), min(sp[1], to)
		if b <= a {
			continue
		}
		s := &lt.segs[k]
		t := ts.get(pool, s.eff.Currency)
		ns := b - a
		eff := mulAcc(s.effN, ns)
		t.eff = t.eff.add(eff)
		t.list = t.list.add(mulAcc(s.listN, ns))
		t.instNs += ns
		t.bySource[s.eff.Source] = t.bySource[s.eff.Source].add(eff)
		if s.eff.Estimated {
			t.estimated = t.estimated.add(eff)
		}
		costTot[s.eff.Currency] += eff.float()
	}

	// Busy time per (hour, segment) piece: the buckets plus an open interval.
	type pk struct {
		hour int64
		seg  int
	}
	busy := map[pk]int64{}
	m := lt.m
	m.mu.Lock()
	for bk, ns := range m.buckets {
		if int(bk.seg) < len(spans) {
			busy[pk{bk.hour, int(bk.seg)}] += ns
		}
	}
	if oa, ob := max(m.since, m.through), min(now, end); m.busy && int(m.seg) < len(spans) && ob > oa {
		oa, ob = max(oa, spans[m.seg][0]), min(ob, spans[m.seg][1])
		// Only the hours the window touches matter (whole hours, for the
		// pro rata share of a cut hour).
		if from > minTimeNs {
			oa = max(oa, hourOf(from)*nsPerHour)
		}
		if to < maxTimeNs {
			ob = min(ob, (hourOf(to-1)+1)*nsPerHour)
		}
		for h := hourOf(oa); h*nsPerHour < ob; h++ {
			busy[pk{h, int(m.seg)}] += min(ob, (h+1)*nsPerHour) - max(oa, h*nsPerHour)
		}
	}
	m.mu.Unlock()
	hourBusy := map[hourCur]float64{}
	for key, ns := range busy {
		sp := spans[key.seg]
		pa, pb := max(sp[0], key.hour*nsPerHour), min(sp[1], (key.hour+1)*nsPerHour)
		wa, wb := max(pa, from), min(pb, to)
		if pb <= pa || wb <= wa {
			continue
		}
		ns = min(max(ns, 0), pb-pa)
		s := &lt.segs[key.seg]
		t := ts.get(pool, s.eff.Currency)
		var c acc
		if wa == pa && wb == pb {
			t.busyNs += ns
			c = mulAcc(s.effN, ns)
		} else {
			bw := float64(ns) * float64(wb-wa) / float64(pb-pa)
			t.busyFrac += bw
			c = accFromFloat(float64(s.effN) * bw)
		}
		t.busy = t.busy.add(c)
		busyTot[s.eff.Currency] += c.float()
		hourBusy[hourCur{s.eff.Currency, key.hour}] += c.float()
	}

	// Hours with tokens are split by token shares; the rest of the cost
	// evenly among the instance's models.
	tok := lt.tokensIn(from, to, now)
	hourCost := map[hourCur]float64{}
	for h := range tok {
		for k, sp := range spans {
			a, b := max(sp[0], h*nsPerHour, from), min(sp[1], (h+1)*nsPerHour, to)
			if b > a {
				hourCost[hourCur{lt.segs[k].eff.Currency, h}] += mulAcc(lt.segs[k].effN, b-a).float()
			}
		}
	}
	emit := func(cur, model string, prompt, completion, alloc, usage float64) {
		mt := ts.get(pool, cur).model(model)
		mt.prompt += prompt
		mt.completion += completion
		mt.alloc += alloc
		mt.usage += usage
	}
	restCost, restBusy := costTot, busyTot
	for _, h := range sortedHours(tok) {
		lt.splitHour(h, tok[h], hourCost, hourBusy, func(cur, model string, prompt, completion, alloc, usage float64) {
			emit(cur, model, prompt, completion, alloc, usage)
		})
		for hc, c := range hourCost {
			if hc.hour == h {
				restCost[hc.cur] -= c
				restBusy[hc.cur] -= hourBusy[hc]
			}
		}
	}
	names := lt.modelNames()
	for cur, c := range restCost {
		b := max(restBusy[cur], 0)
		if c <= 0 && b <= 0 {
			continue
		}
		n := float64(len(names))
		for _, name := range names {
			emit(cur, name, 0, 0, max(c, 0)/n, b/n)
		}
	}

	if from <= now && now <= to && lt.start <= now && now < lt.endOr(math.MaxInt64) {
		s := &lt.segs[lt.segAt(now)]
		ts.get(pool, s.eff.Currency).runRate += s.effN
	}
}

// spans returns each segment's [from, to) within the lifetime ending at end.
func (lt *lifetime) spans(end int64) [][2]int64 {
	out := make([][2]int64, len(lt.segs))
	for k := range lt.segs {
		sa, sb := max(lt.segs[k].from, lt.start), end
		if k+1 < len(lt.segs) {
			sb = min(lt.segs[k+1].from, end)
		}
		out[k] = [2]int64{sa, max(sb, sa)}
	}
	return out
}

func (lt *lifetime) modelNames() []string {
	if len(lt.info.Models) == 0 {
		return []string{UnattributedModel}
	}
	return lt.info.Models
}

type tc struct{ prompt, completion float64 }

// tokensIn returns the tokens per hour and model inside [from, to); an hour
// the window cuts counts pro rata over the part of it the instance lived.
func (lt *lifetime) tokensIn(from, to, now int64) map[int64]map[string]tc {
	tok := map[int64]map[string]tc{}
	end := lt.endOr(now)
	lt.m.mu.Lock()
	defer lt.m.mu.Unlock()
	for k, c := range lt.m.tokens {
		hs, he := k.hour*nsPerHour, (k.hour+1)*nsPerHour
		la, lb := max(hs, lt.start), min(he, end)
		if lb <= la { // tokens outside the lifetime: count by the hour itself
			la, lb = hs, he
		}
		wa, wb := max(la, from), min(lb, to)
		if wb <= wa {
			continue
		}
		frac := 1.0
		if wa != la || wb != lb {
			frac = float64(wb-wa) / float64(lb-la)
		}
		if tok[k.hour] == nil {
			tok[k.hour] = map[string]tc{}
		}
		v := tok[k.hour][k.model]
		v.prompt += float64(c.prompt) * frac
		v.completion += float64(c.completion) * frac
		tok[k.hour][k.model] = v
	}
	return tok
}

// splitHour splits hour h's cost in each currency among the models that
// took tokens in it, by their share of the tokens; the tokens themselves
// count in the currency of the segment at the hour's start.
func (lt *lifetime) splitHour(h int64, models map[string]tc, hourCost, hourBusy map[hourCur]float64,
	emit func(cur, model string, prompt, completion, alloc, usage float64)) {
	var total float64
	for _, v := range models {
		total += v.prompt + v.completion
	}
	if total <= 0 {
		return
	}
	pc := lt.segs[lt.segAt(max(h*nsPerHour, lt.start))].eff.Currency
	names := make([]string, 0, len(models))
	for n := range models {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		v := models[name]
		share := (v.prompt + v.completion) / total
		emit(pc, name, v.prompt, v.completion, hourCost[hourCur{pc, h}]*share, hourBusy[hourCur{pc, h}]*share)
		for hc, c := range hourCost {
			if hc.hour == h && hc.cur != pc {
				emit(hc.cur, name, 0, 0, c*share, hourBusy[hc]*share)
			}
		}
	}
}

// shareModels emits, hour by hour, the tokens and the allocation and usage
// cost (acc units) of each model, given every hour's cost: for compaction
// into hourly model aggregates.
func (lt *lifetime) shareModels(from, to, now int64, hourCost, hourBusy map[hourCur]float64,
	emit func(cur, model string, hour int64, prompt, completion, alloc, usage float64)) {
	tok := lt.tokensIn(from, to, now)
	hours := map[int64]bool{}
	for hc := range hourCost {
		hours[hc.hour] = true
	}
	for h := range tok {
		hours[h] = true
	}
	names := lt.modelNames()
	for _, h := range sortedHours(hours) {
		if models := tok[h]; len(models) > 0 {
			lt.splitHour(h, models, hourCost, hourBusy, func(cur, model string, prompt, completion, alloc, usage float64) {
				emit(cur, model, h, prompt, completion, alloc, usage)
			})
			continue
		}
		for hc, c := range hourCost {
			if hc.hour != h || (c == 0 && hourBusy[hc] == 0) {
				continue
			}
			n := float64(len(names))
			for _, name := range names {
				emit(hc.cur, name, h, 0, 0, c/n, hourBusy[hc]/n)
			}
		}
	}
}

// tallyAggregates adds the compacted hours overlapping [from, to).
func (l *Ledger) tallyAggregates(ts tallies, pool string, from, to int64) {
	for k, hours := range l.aggs {
		if pool != "" && k.Pool != pool {
			continue
		}
		for h, v := range hours {
			frac, ok := hourFrac(h, from, to)
			if !ok {
				continue
			}
			t := ts.get(k.Pool, k.Currency)
			eff, list, busy := v.costs(k)
			if frac < 1 {
				eff, list, busy = accFromFloat(eff.float()*frac), accFromFloat(list.float()*frac), accFromFloat(busy.float()*frac)
			}
			t.eff = t.eff.add(eff)
			t.list = t.list.add(list)
			t.busy = t.busy.add(busy)
			if frac == 1 {
				t.instNs += v.instNs
				t.busyNs += v.busyNs
			} else {
				t.instFrac += float64(v.instNs) * frac
				t.busyFrac += float64(v.busyNs) * frac
			}
			t.bySource[k.Source] = t.bySource[k.Source].add(eff)
			if k.Estimated {
				t.estimated = t.estimated.add(eff)
			}
		}
	}
	for k, hours := range l.models {
		if pool != "" && k.Pool != pool {
			continue
		}
		for h, v := range hours {
			frac, ok := hourFrac(h, from, to)
			if !ok {
				continue
			}
			mt := ts.get(k.Pool, k.Currency).model(k.Model)
			mt.prompt += float64(v.prompt) * frac
			mt.completion += float64(v.completion) * frac
			mt.alloc += v.alloc * frac
			mt.usage += v.usage * frac
		}
	}
}

// hourFrac returns the share of hour h inside [from, to).
func hourFrac(h, from, to int64) (float64, bool) {
	hs, he := h*nsPerHour, (h+1)*nsPerHour
	a, b := max(hs, from), min(he, to)
	if b <= a {
		return 0, false
	}
	if a == hs && b == he {
		return 1, true
	}
	return float64(b-a) / float64(nsPerHour), true
}

// Report returns the cost of pool ("" for every pool) over w, one report
// per pool and currency, sorted. Hours already compacted count pro rata
// when w cuts them; everything else is exact to the nanosecond.
func (l *Ledger) Report(pool string, w Window) []PoolReport {
	return l.reportAt(pool, w, l.clock.Now())
}

// ReportAt is Report as of now instead of the ledger's clock. A window that
// ends at now counts the tokens of running instances' current hour in full;
// Report's own now, read a moment after the caller chose w.To, would see
// the window cut that hour and count it pro rata.
func (l *Ledger) ReportAt(pool string, w Window, now time.Time) []PoolReport {
	return l.reportAt(pool, w, now)
}

func (ts tallies) reports(w Window) []PoolReport {
	out := make([]PoolReport, 0, len(ts))
	for k, t := range ts {
		r := PoolReport{Pool: k.Pool, Currency: k.Currency, Window: w,
			InstanceHours: (float64(t.instNs) + t.instFrac) / float64(nsPerHour),
			BusyHours:     (float64(t.busyNs) + t.busyFrac) / float64(nsPerHour),
			EffectiveCost: Money{k.Currency, t.eff}, ListCost: Money{k.Currency, t.list},
			Savings: Money{k.Currency, t.list.sub(t.eff)}, BusyCost: Money{k.Currency, t.busy},
			IdleCost: Money{k.Currency, t.eff.sub(t.busy)}, RunRatePerHour: moneyFromNanos(k.Currency, t.runRate),
			EstimatedCost: Money{k.Currency, t.estimated}, CostBySource: map[string]Money{}}
		if t.zeroNs > 0 {
			r.ZeroHours, r.ZeroSavings = float64(t.zeroNs)/float64(nsPerHour), Money{k.Currency, t.zeroSaved}
		}
		if r.IdleCost.Negative() {
			r.IdleCost = Money{Currency: k.Currency}
		}
		for s, a := range t.bySource {
			r.CostBySource[s] = Money{k.Currency, a}
		}
		names := make([]string, 0, len(t.models))
		for n := range t.models {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			mt := t.models[n]
			mc := ModelCost{Model: n, PromptTokens: mt.prompt, CompletionTokens: mt.completion,
				AllocationCost: Money{k.Currency, accFromFloat(mt.alloc)}, UsageCost: Money{k.Currency, accFromFloat(mt.usage)}}
			if tok := mt.prompt + mt.completion; tok > 0 {
				mc.HasTokens = true
				mc.PerMillionAllocation = mc.AllocationCost.Float() * (1e6 / tok)
				mc.PerMillionUsage = mc.UsageCost.Float() * (1e6 / tok)
			}
			r.Models = append(r.Models, mc)
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Pool != out[j].Pool {
			return out[i].Pool < out[j].Pool
		}
		return out[i].Currency < out[j].Currency
	})
	return out
}

// RunRate returns, per currency, the sum of the effective prices per hour
// of pool's instances running at at.
func (l *Ledger) RunRate(pool string, at time.Time) []Money {
	t := at.UnixNano()
	rates := map[string]int64{}
	l.mu.RLock()
	for _, lt := range l.inst {
		if lt.info.Pool != pool || t < lt.start || (lt.end != 0 && t >= lt.end) {
			continue
		}
		s := &lt.segs[lt.segAt(t)]
		rates[s.eff.Currency] += s.effN
	}
	l.mu.RUnlock()
	out := make([]Money, 0, len(rates))
	for c, r := range rates {
		out = append(out, moneyFromNanos(c, r))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Currency < out[j].Currency })
	return out
}
