package tenant

import (
	"math"
	"time"
)

// Bucket is a token bucket of capacity Limit refilled at Limit per minute;
// it limits requests per minute (one per request) and tokens per minute.
//
// Why a token bucket and not a sliding window: it holds two numbers per key
// whatever the rate (a sliding log holds one entry per request), it has no
// window edge at which twice the limit can pass (fixed windows do), and it
// can be credited back, which the token limit needs: a request takes its
// estimate when admitted, and the difference to its actual count is settled
// after the answer (golang.org/x/time/rate has no way to give tokens back).
// It also maps onto OpenAI's headers: remaining is the bucket's level, and
// reset is the time until the bucket is full again.
//
// The level may go below zero when an answer used more tokens than its
// estimate: the debt is paid by the refill before the next request passes.
// Bucket is not safe for concurrent use; the limiter's lock guards it.
type Bucket struct {
	Limit int64 // per minute; > 0
	level float64
	at    time.Time // of level; zero: full
}

// refill brings the level up to now.
func (b *Bucket) refill(now time.Time) {
	if b.at.IsZero() {
		b.level, b.at = float64(b.Limit), now
		return
	}
	if dt := now.Sub(b.at); dt > 0 {
		b.level = math.Min(float64(b.Limit), b.level+float64(b.Limit)*dt.Minutes())
		b.at = now
	}
}

// Take takes n if the level allows it: the level must be at least n, or
// full when n is more than the whole bucket (a request larger than the
// limit passes alone, on a full bucket, rather than never). If not, it takes
// nothing and returns how long until it would pass.
func (b *Bucket) Take(n int64, now time.Time) (ok bool, retry time.Duration) {
	b.refill(now)
	need := float64(min(n, b.Limit))
	if b.level >= need {
		b.level -= float64(n)
		return true, 0
	}
	return false, b.until(need)
}

// Give returns n to the bucket (n < 0 takes -n, possibly into debt).
func (b *Bucket) Give(n int64, now time.Time) {
	b.refill(now)
	b.level = math.Min(float64(b.Limit), b.level+float64(n))
}

// Remaining is the whole number left at now, at least 0.
func (b *Bucket) Remaining(now time.Time) int64 {
	b.refill(now)
	return max(0, int64(math.Floor(b.level)))
}

// Reset is how long until the bucket is full again.
func (b *Bucket) Reset(now time.Time) time.Duration {
	b.refill(now)
	return b.until(float64(b.Limit))
}

// until is how long the refill takes from the current level to want.
func (b *Bucket) until(want float64) time.Duration {
	if b.level >= want {
		return 0
	}
	// In whole milliseconds, rounded up (less a hair of float error).
	ms := (want - b.level) / float64(b.Limit) * float64(time.Minute/time.Millisecond)
	return time.Duration(math.Ceil(ms-1e-6)) * time.Millisecond
}

// SetLimit changes the limit to n (> 0) at now, as a reload of the keys file
// does, keeping what was used: the level is brought up to now at the old
// rate, and what the old limit had used of its bucket is used of the new
// one (10 used of 10, raised to 60: 50 left; 4 used of 10, lowered to 5: 1
// left). A limit lowered below what was used leaves the bucket empty, not
// in debt, unless it already was.
func (b *Bucket) SetLimit(n int64, now time.Time) {
	if !b.at.IsZero() {
		b.refill(now)
		b.level = math.Max(b.level+float64(n-b.Limit), math.Min(b.level, 0))
	}
	b.Limit = n
}
