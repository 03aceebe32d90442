package aws

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/smithy-go/middleware"
)

// newRetryer is the SDK's standard retryer (throttling codes such as
// RequestLimitExceeded, 5xx statuses and connection errors are retried)
// with three changes:
//
//   - capacity errors are never retried: EC2 sends InsufficientInstanceCapacity
//     with HTTP 500, which the standard retryer would retry, but the same
//     offering will not have capacity a second later; the caller should pick
//     another offering instead;
//   - the attempt count is ours (MaxAttempts);
//   - the delay is exponential with full jitter (see jitterBackoff).
//
// EC2's advice is to retry throttled calls with exponential backoff
// (https://docs.aws.amazon.com/ec2/latest/devguide/ec2-api-throttling.html).
// The SDK's retry quota (a token bucket that stops retry storms) is kept.
func newRetryer(maxAttempts int, base, maxBackoff time.Duration) aws.Retryer {
	return retry.NewStandard(func(o *retry.StandardOptions) {
		o.MaxAttempts = maxAttempts
		o.MaxBackoff = maxBackoff
		o.Backoff = jitterBackoff{base: base, max: maxBackoff, rand: rand.Float64}
		o.Retryables = append([]retry.IsErrorRetryable{retry.IsErrorRetryableFunc(noRetryForCapacity)}, o.Retryables...)
	})
}

// noRetryForCapacity vetoes retries of capacity errors; it has no opinion
// on anything else.
func noRetryForCapacity(err error) aws.Ternary {
	if isCapacityCode(errorCode(err)) {
		return aws.FalseTernary
	}
	return aws.UnknownTernary
}

// jitterBackoff is exponential backoff with full jitter: the delay before
// retry n (attempt n failed, n ≥ 1) is uniform in
// [0, min(max, base·2ⁿ⁻¹)). See
// https://aws.amazon.com/builders-library/timeouts-retries-and-backoff-with-jitter/.
type jitterBackoff struct {
	base, max time.Duration
	rand      func() float64
}

// BackoffDelay implements retry.BackoffDelayer.
func (b jitterBackoff) BackoffDelay(attempt int, _ error) (time.Duration, error) {
	return time.Duration(b.rand() * float64(backoffCeiling(attempt, b.base, b.max))), nil
}

// backoffCeiling is min(max, base·2ⁿ⁻¹) without overflow.
func backoffCeiling(attempt int, base, maxBackoff time.Duration) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	d := base
	for i := 1; i < attempt; i++ {
		if d >= maxBackoff/2 {
			return maxBackoff
		}
		d *= 2
	}
	return min(d, maxBackoff)
}

// rateLimitMiddleware waits for the client-side rate limiter before every
// attempt: it sits after the SDK's retry middleware, so retries are paced
// too.
type rateLimitMiddleware struct{ p *Provider }

func (rateLimitMiddleware) ID() string { return "TideGPURateLimit" }

func (m rateLimitMiddleware) HandleFinalize(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
	if err := m.p.wait(ctx); err != nil {
		return middleware.FinalizeOutput{}, middleware.Metadata{}, err
	}
	return next.HandleFinalize(ctx, in)
}

func (p *Provider) addRateLimit(stack *middleware.Stack) error {
	if p.limiter == nil {
		return nil
	}
	return stack.Finalize.Insert(rateLimitMiddleware{p: p}, "Retry", middleware.After)
}

// wait blocks until the limiter grants one call, timed by the provider's
// clock so that tests can step it.
func (p *Provider) wait(ctx context.Context) error {
	now := p.clock.Now()
	r := p.limiter.ReserveN(now, 1)
	if !r.OK() {
		return fmt.Errorf("client-side rate limit: burst %d cannot grant a call", p.limiter.Burst())
	}
	d := r.DelayFrom(now)
	if d <= 0 {
		return nil
	}
	t := p.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		r.CancelAt(p.clock.Now())
		return fmt.Errorf("waiting for the client-side rate limit: %w", ctx.Err())
	}
}
