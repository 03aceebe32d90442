package replay

import (
	"time"

	"github.com/tidegpu/tidegpu/internal/provider"
	"github.com/tidegpu/tidegpu/internal/registrar"
)

// meter integrates what the pool serves and costs over scored time.
type meter struct {
	res       *Result
	scoreFrom time.Time
	sample    time.Duration

	inDip, inDrain bool
	dipStart       time.Time
	wantedHours    float64
	met, metDrain  time.Duration
	cur            *Sample
	curEnd         time.Time
}

func newMeter(res *Result, opts Options, scoreFrom time.Time) *meter {
	return &meter{res: res, scoreFrom: scoreFrom, sample: opts.Sample}
}

// span accounts [from, to), during which the pool is as given.
func (m *meter) span(from, to time.Time, wanted int32, targets []registrar.Target, insts []provider.Instance,
	prices map[offer]float64, standbyPrice float64) {
	if !to.After(m.scoreFrom) {
		return
	}
	if from.Before(m.scoreFrom) {
		from = m.scoreFrom
	}
	d := to.Sub(from)
	h := d.Hours()
	noticed := map[string]bool{}
	s := Sample{Wanted: int(wanted), Serving: len(targets)}
	for _, in := range insts {
		if in.InterruptAt != nil {
			noticed[in.ID] = true
		}
		switch {
		case in.State == provider.StateStopped || in.State == provider.StateStopping:
			s.Standby++
			m.res.Hours.Standby += h
			m.res.Cost += standbyPrice * h
			continue
		case in.Market == provider.MarketOnDemand:
			s.OnDemand++
			m.res.Hours.OnDemand += h
		default:
			s.Spot++
			m.res.Hours.Spot += h
		}
		m.res.Cost += prices[offer{in.Zone, in.InstanceType, in.Market}] * h
	}
	for _, t := range targets {
		if !noticed[t.ID] {
			s.Ready++
		}
	}
	m.res.Scored += d
	m.wantedHours += float64(wanted) * h
	if s.Serving >= s.Wanted {
		m.met += d
		if m.inDip {
			m.inDip = false
			m.res.LongestDip = max(m.res.LongestDip, from.Sub(m.dipStart))
		}
	} else if !m.inDip {
		m.inDip, m.dipStart = true, from
		m.res.Dips++
	}
	if s.Ready >= s.Wanted {
		m.metDrain += d
		m.inDrain = false
	} else if !m.inDrain {
		m.inDrain = true
		m.res.DipsDrained++
	}
	m.sampleSpan(from, to, s)
}

// sampleSpan folds the pool's state over [from, to) into the series: each
// sample holds the least served (and ready) and the most wanted in its
// period, so that a short dip shows.
func (m *meter) sampleSpan(from, to time.Time, s Sample) {
	for from.Before(to) {
		if m.cur == nil || !from.Before(m.curEnd) {
			if m.cur != nil {
				m.res.Series = append(m.res.Series, *m.cur)
			}
			k := from.Sub(m.scoreFrom) / m.sample
			start := m.scoreFrom.Add(k * m.sample)
			c := s
			c.At = start.Sub(Epoch)
			m.cur, m.curEnd = &c, start.Add(m.sample)
		} else {
			m.cur.Wanted = max(m.cur.Wanted, s.Wanted)
			m.cur.Serving = min(m.cur.Serving, s.Serving)
			m.cur.Ready = min(m.cur.Ready, s.Ready)
			m.cur.Spot, m.cur.OnDemand, m.cur.Standby = max(m.cur.Spot, s.Spot), max(m.cur.OnDemand, s.OnDemand), max(m.cur.Standby, s.Standby)
		}
		from = m.curEnd
	}
}

func (m *meter) finish(end time.Time) {
	if m.inDip {
		m.res.LongestDip = max(m.res.LongestDip, end.Sub(m.dipStart))
	}
	if m.cur != nil {
		m.res.Series = append(m.res.Series, *m.cur)
	}
	if m.res.Scored > 0 {
		m.res.Availability = float64(m.met) / float64(m.res.Scored)
		m.res.AvailabilityDrained = float64(m.metDrain) / float64(m.res.Scored)
	}
}
