package agent

import (
	"fmt"
	"time"
)

// RebalancePolicy says what the agent does with an AWS rebalance
// recommendation.
type RebalancePolicy string

const (
	// RebalanceIgnore (the default) does not report rebalance
	// recommendations: only the two-minute interruption notice drains the
	// instance. AWS emits the recommendation on elevated risk only, often
	// with no interruption following; acting on it doubles the churn (as
	// aws-node-termination-handler's default and Karpenter, which records
	// but does not act on it, also judge).
	RebalanceIgnore RebalancePolicy = "ignore"
	// RebalanceDrain reports a rebalance recommendation as an early notice
	// whose interruption time is noticeTime + the rebalance deadline
	// (default 2 minutes, the length of a spot notice): the controller
	// launches the replacement at once and drains the instance, which is
	// terminated when idle or at that deadline.
	RebalanceDrain RebalancePolicy = "drain"
)

// DefaultRebalanceDeadline is how long after a rebalance recommendation the
// RebalanceDrain policy tells the controller the instance is gone.
const DefaultRebalanceDeadline = 2 * time.Minute

// ParseRebalancePolicy reads a policy name.
func ParseRebalancePolicy(s string) (RebalancePolicy, error) {
	switch p := RebalancePolicy(s); p {
	case RebalanceIgnore, RebalanceDrain:
		return p, nil
	case "":
		return RebalanceIgnore, nil
	}
	return "", fmt.Errorf("rebalance policy %q: use %s or %s", s, RebalanceIgnore, RebalanceDrain)
}

// rebalanceNotice turns a rebalance recommendation into the notice the
// policy reports, or nil when the policy ignores it.
func rebalanceNotice(p RebalancePolicy, noticeTime time.Time, deadline time.Duration) *Notice {
	if p != RebalanceDrain {
		return nil
	}
	return &Notice{Kind: KindRebalance, Action: "rebalance", At: noticeTime.Add(deadline), Source: SourceAWSRebalance}
}

// earliest returns the notice with the earlier time; nil counts as never.
func earliest(a, b *Notice) *Notice {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	case b.At.Before(a.At):
		return b
	}
	return a
}

// shouldReport says whether a polled notice is news: nothing reported or
// being reported says the instance goes at that time or earlier. handled is
// the earliest interruption time already acknowledged (or given up on) and
// pending the one being reported; nil means none. The controller keeps the
// earliest time it was told, so a later time is never worth a report.
func shouldReport(handled, pending *time.Time, n Notice) bool {
	if handled != nil && !n.At.Before(*handled) {
		return false
	}
	if pending != nil && !n.At.Before(*pending) {
		return false
	}
	return true
}

// Backoff is an exponential backoff with jitter between attempts to report
// a notice.
type Backoff struct {
	// Initial is the wait after the first failure; it doubles after each
	// further failure up to Max.
	Initial, Max time.Duration
}

// DefaultBackoff starts at 250 ms and doubles up to 8 s: a two-minute notice
// leaves room for about twenty attempts.
var DefaultBackoff = Backoff{Initial: 250 * time.Millisecond, Max: 8 * time.Second}

// Delay returns the wait after failed attempt number attempt (1 for the
// first failure), with "equal jitter": half the exponential step plus a
// random part of the other half, r in [0, 1) choosing it. The jitter keeps
// many agents, interrupted together, from retrying in lockstep.
func (b Backoff) Delay(attempt int, r float64) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	d := b.Initial
	for i := 1; i < attempt && d < b.Max; i++ {
		d *= 2
	}
	if d > b.Max {
		d = b.Max
	}
	if d <= 0 {
		return 0
	}
	if r < 0 || r >= 1 || r != r {
		r = 0
	}
	half := d / 2
	return half + time.Duration(r*float64(d-half))
}

// MinReportWindow is how long the agent keeps trying to report a notice
// whose interruption time has already passed, or is about to: the notice
// still helps the controller until the instance is really gone, and then the
// agent is gone too.
const MinReportWindow = 30 * time.Second

// reportDeadline is when the agent stops retrying a notice first seen at
// seen: its interruption time, but no sooner than MinReportWindow after it
// was seen.
func reportDeadline(n Notice, seen time.Time) time.Time {
	if d := seen.Add(MinReportWindow); n.At.Before(d) {
		return d
	}
	return n.At
}

// nextAttempt decides, after failed attempt number attempt at now, when to
// try again: at now + the backoff delay, but not after the deadline; ok is
// false when the deadline has passed and the agent gives up.
func nextAttempt(b Backoff, attempt int, now, deadline time.Time, r float64) (at time.Time, ok bool) {
	if !now.Before(deadline) {
		return time.Time{}, false
	}
	at = now.Add(b.Delay(attempt, r))
	if at.After(deadline) {
		at = deadline
	}
	return at, true
}

// tokenFresh says whether an IMDSv2 session token that expires at expires,
// obtained for ttl, can still be used at now: it is refreshed a margin
// before it expires (a tenth of its TTL, at most one minute) so that no
// request carries a token that expires in flight.
func tokenFresh(now, expires time.Time, ttl time.Duration) bool {
	margin := ttl / 10
	if margin > time.Minute {
		margin = time.Minute
	}
	return now.Before(expires.Add(-margin))
}
