package sim

import (
	"math"
	"time"
)

// The functions in this file are the latency model. They are pure: they
// depend only on their arguments, so they are table-tested and reused by
// the serving code, which supplies wall-clock time and the live batch size.

// scaleDuration returns d*f, saturating at the largest duration instead of
// overflowing. Negative or NaN results are 0.
func scaleDuration(d time.Duration, f float64) time.Duration {
	v := float64(d) * f
	switch {
	case math.IsNaN(v) || v <= 0:
		return 0
	case v >= math.MaxInt64:
		return math.MaxInt64
	}
	return time.Duration(v)
}

// timeToFirstToken is the prefill time of one request: TTFT*SlowFactor.
// cfg must have its defaults applied.
func timeToFirstToken(cfg Config) time.Duration {
	return scaleDuration(cfg.TTFT, cfg.SlowFactor)
}

// prefillTime is the time to first token of a request once admitted, of
// which uncached prompt tokens are not in the prefix cache:
//
//	SlowFactor × (TTFT + uncached / PrefillTokensPerSecond)
//
// the second term only when PrefillTokensPerSecond is set. cfg must have
// its defaults applied.
func prefillTime(cfg Config, uncached int) time.Duration {
	base := timeToFirstToken(cfg)
	if !(cfg.PrefillTokensPerSecond > 0) || uncached <= 0 {
		return base
	}
	extra := scaleDuration(time.Second, cfg.SlowFactor*float64(uncached)/cfg.PrefillTokensPerSecond)
	if base > math.MaxInt64-extra {
		return math.MaxInt64
	}
	return base + extra
}

// timePerOutputToken is the time to produce one more token of a sequence
// while running sequences decode together (running counts the sequence
// itself, values below 1 count as 1):
//
//	TokenTime * SlowFactor * (1 + BatchSlowdown*(running-1))
//
// cfg must have its defaults applied.
func timePerOutputToken(cfg Config, running int) time.Duration {
	if running < 1 {
		running = 1
	}
	mult := cfg.SlowFactor * (1 + cfg.BatchSlowdown*float64(running-1))
	return scaleDuration(cfg.TokenTime, mult)
}

// expectedLatency is the end-to-end latency of a request that generates n
// tokens while running sequences decode throughout, without queueing:
// the first token arrives after the prefill, each further one after one
// timePerOutputToken.
func expectedLatency(cfg Config, running, n int) time.Duration {
	if n <= 0 {
		return timeToFirstToken(cfg)
	}
	ttft := timeToFirstToken(cfg)
	tpot := timePerOutputToken(cfg, running)
	decode := scaleDuration(tpot, float64(n-1))
	if ttft > math.MaxInt64-decode {
		return math.MaxInt64
	}
	return ttft + decode
}

// smooth advances an exponentially weighted moving average whose input held
// the constant value target for elapsed time: the exact solution of
// dv/dt = (target-v)/tau. A non-positive tau returns target.
func smooth(prev, target float64, elapsed, tau time.Duration) float64 {
	if tau <= 0 {
		return target
	}
	if elapsed <= 0 {
		return prev
	}
	return target + (prev-target)*math.Exp(-float64(elapsed)/float64(tau))
}

// promptTokenEstimate is the deterministic prompt token count for a prompt
// of the given size in bytes: about one token per four bytes, at least 1.
func promptTokenEstimate(bytes int) int {
	if bytes <= 0 {
		return 1
	}
	return (bytes + 3) / 4
}
