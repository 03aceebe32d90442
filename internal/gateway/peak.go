package gateway

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// peakEWMA is a latency estimate after Finagle's and Linkerd's "peak EWMA"
// (https://github.com/twitter/finagle/blob/develop/finagle-core/src/main/scala/com/twitter/finagle/loadbalancer/PeakEwma.scala):
// a sample above the estimate replaces it at once, a sample below pulls it
// down by the weight 1-exp(-Δt/τ) (Δt: time since the previous sample), and
// between samples the estimate decays with exp(-Δt/τ) — toward the plain
// EWMA of the samples (weight ewmaAlpha each), not toward 0 as in Finagle.
// A backend's speed is mostly its GPU and model, not a passing spike: a
// backend three times slower that stops getting requests stays known as
// slower, instead of looking fast again after a few seconds and drawing a
// burst of requests only to relearn it. Writers serialize on mu; readers
// use the atomics alone.
type peakEWMA struct {
	mu    sync.Mutex
	bits  atomic.Uint64 // math.Float64bits of the estimate, seconds
	floor atomic.Uint64 // math.Float64bits of the plain EWMA, seconds
	at    atomic.Int64  // unix ns of the last sample; 0: none yet
}

// value returns the estimate at now; 0 before the first sample.
func (p *peakEWMA) value(now time.Time, tau time.Duration) time.Duration {
	at := p.at.Load()
	if at == 0 {
		return 0
	}
	v := decayed(math.Float64frombits(p.bits.Load()), math.Float64frombits(p.floor.Load()), now.UnixNano()-at, tau)
	return time.Duration(v * float64(time.Second))
}

// observe adds a sample d taken at now.
func (p *peakEWMA) observe(now time.Time, d time.Duration, tau time.Duration) {
	ns := max(now.UnixNano(), 1) // 0 means "no sample"
	rtt := d.Seconds()
	p.mu.Lock()
	defer p.mu.Unlock()
	at := p.at.Load()
	v, floor := rtt, rtt
	if at != 0 {
		floor = ewmaAlpha*rtt + (1-ewmaAlpha)*math.Float64frombits(p.floor.Load())
		v = nextPeak(math.Float64frombits(p.bits.Load()), floor, ns-at, rtt, tau)
	}
	p.floor.Store(math.Float64bits(floor))
	p.bits.Store(math.Float64bits(v))
	p.at.Store(ns)
}

// decayed returns v after dt nanoseconds of exponential decay with time
// constant tau toward floor (a v at or below floor stays). Pure.
func decayed(v, floor float64, dt int64, tau time.Duration) float64 {
	if dt <= 0 || tau <= 0 || v <= floor {
		return v
	}
	return floor + (v-floor)*math.Exp(-float64(dt)/float64(tau))
}

// nextPeak is the peak-EWMA update: prev is the stored estimate (seconds)
// dt nanoseconds before the sample rtt, floor the plain EWMA it decays
// toward. Pure.
func nextPeak(prev, floor float64, dt int64, rtt float64, tau time.Duration) float64 {
	c := decayed(prev, floor, dt, tau)
	if rtt > c {
		return rtt
	}
	w := 1.0
	if tau > 0 && dt > 0 {
		w = math.Exp(-float64(dt) / float64(tau))
	}
	return c*w + rtt*(1-w)
}
