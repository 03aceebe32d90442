package autoscale

import (
	"time"
)

// The predictive recommender keeps, for each slot of the day or week (on
// the profile zone's wall clock), the peak load observed in that slot in
// each of the last History seasons. The forecast for a slot folds the
// completed past seasons (Max or EWMA); the recommendation covers every
// slot from now to now + lead time, so an instance launched now is ready
// for the load that usually arrives by the time it has started, and the
// pool is not shrunk below what the coming slots usually need.

// SeasonPeak is the peak load seen in one slot during one season.
type SeasonPeak struct {
	// Season numbers days (Daily) or weeks (Weekly) since 1970 on the
	// profile's wall clock.
	Season int64 `json:"season"`
	// Peak is the largest observation in the slot that season.
	Peak float64 `json:"peak"`
}

// Profile is the predictive recommender's learned state.
type Profile struct {
	// Season and SlotSeconds identify the layout; a profile saved under
	// another layout is discarded on import.
	Season      Season `json:"season"`
	SlotSeconds int64  `json:"slotSeconds"`
	// Slots maps a slot index (0 = Monday 00:00 for Weekly, 00:00 for Daily)
	// to its recent seasons, oldest first.
	Slots map[int][]SeasonPeak `json:"slots,omitempty"`
}

// slotOf returns the slot index and season number of instant t.
func (p *predictive) slotOf(t time.Time) (int, int64) {
	w := wallClock(t, time.UTC)
	if p.loc != time.UTC {
		w = wallClock(t, p.loc)
	}
	day := w.Unix() / 86400 // days since 1970-01-01 (a Thursday) on the wall clock
	secOfDay := w.Unix() - day*86400
	slotOfDay := int(secOfDay / int64(p.slot/time.Second))
	if p.season == SeasonDaily {
		return slotOfDay, day
	}
	// Weeks start on Monday: 1970-01-01 was a Thursday, so shift by 3 days.
	dow := (day + 3) % 7 // 0 = Monday
	week := (day + 3) / 7
	return int(dow)*p.slotsPerDay + slotOfDay, week
}

// observe folds one observation of the load into the profile.
func (p *predictive) observe(prof *Profile, at time.Time, value float64) {
	slot, season := p.slotOf(at)
	peaks := prof.Slots[slot]
	if n := len(peaks); n > 0 && peaks[n-1].Season == season {
		peaks[n-1].Peak = max(peaks[n-1].Peak, value)
		return
	}
	if n := len(peaks); n > 0 && peaks[n-1].Season > season {
		return // out-of-order observation from an older season
	}
	peaks = append(peaks, SeasonPeak{Season: season, Peak: value})
	// Keep History completed seasons plus the current one.
	if len(peaks) > p.history+1 {
		peaks = append(peaks[:0], peaks[len(peaks)-p.history-1:]...)
	}
	prof.Slots[slot] = peaks
}

// forecastSlot folds the seasons of one slot that ended before season.
func (p *predictive) forecastSlot(peaks []SeasonPeak, season int64) (float64, bool) {
	var past []SeasonPeak
	for _, sp := range peaks {
		if sp.Season < season {
			past = append(past, sp)
		}
	}
	if len(past) > p.history {
		past = past[len(past)-p.history:]
	}
	if len(past) < p.minSeasons {
		return 0, false
	}
	switch p.agg {
	case AggregateEWMA:
		e := past[0].Peak
		for _, sp := range past[1:] {
			e = p.ewmaWeight*sp.Peak + (1-p.ewmaWeight)*e
		}
		return e, true
	default:
		m := 0.0
		for _, sp := range past {
			m = max(m, sp.Peak)
		}
		return m, true
	}
}

// forecast returns the largest forecast load over the slots from now to
// now + lead, and whether any slot had enough history.
func (p *predictive) forecast(prof *Profile, now time.Time) (float64, bool) {
	best, ok := 0.0, false
	end := now.Add(p.lead)
	// Visit each slot touched by [now, end]: step by the slot length and
	// always include end itself.
	for t := now; ; t = t.Add(p.slot) {
		if t.After(end) {
			t = end
		}
		slot, season := p.slotOf(t)
		if v, has := p.forecastSlot(prof.Slots[slot], season); has {
			best, ok = max(best, v), true
		}
		if !t.Before(end) {
			break
		}
	}
	return best, ok
}
