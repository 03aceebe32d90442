package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"time"

	"k8s.io/utils/clock"
)

// DefaultInterval is how often the metadata service is polled: "We
// recommend that you check for these interruption notices every 5 seconds"
// (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html).
const DefaultInterval = 5 * time.Second

// Config configures an Agent.
type Config struct {
	// Source is the cloud's metadata service (required).
	Source Source
	// Reporter tells the controller (required).
	Reporter *Reporter
	// Interval between polls (DefaultInterval when zero).
	Interval time.Duration
	// Backoff between attempts to report (DefaultBackoff when zero).
	Backoff Backoff
	// Clock drives polls and retries (the real clock when nil).
	Clock clock.Clock
	// Logger gets structured logs (none when nil).
	Logger *slog.Logger
	// Rand returns jitter in [0, 1) (math/rand/v2 when nil).
	Rand func() float64
}

// Agent polls a metadata service and reports each new notice to the
// controller once, retrying until it is acknowledged or its deadline has
// passed.
type Agent struct {
	cfg Config

	// handled is the earliest interruption time acknowledged by the
	// controller or given up on; nil before the first.
	handled *time.Time
	// pending is the notice being reported, seen when it was first polled,
	// attempts how many POSTs failed, retryAt when the next one is due.
	pending  *Notice
	seen     time.Time
	attempts int
	retryAt  time.Time
	nextPoll time.Time
	// pollErr is the last poll error's text, to log changes only.
	pollErr string
}

// New checks cfg and returns an Agent.
func New(cfg Config) (*Agent, error) {
	if cfg.Source == nil {
		return nil, errors.New("agent: no metadata source")
	}
	if cfg.Reporter == nil {
		return nil, errors.New("agent: no reporter")
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Interval < 0 {
		return nil, fmt.Errorf("agent: interval %v: must be positive", cfg.Interval)
	}
	if cfg.Backoff == (Backoff{}) {
		cfg.Backoff = DefaultBackoff
	}
	if cfg.Backoff.Initial <= 0 || cfg.Backoff.Max < cfg.Backoff.Initial {
		return nil, fmt.Errorf("agent: backoff %+v: want 0 < Initial <= Max", cfg.Backoff)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Float64
	}
	return &Agent{cfg: cfg}, nil
}

// Run polls at once and then every interval until ctx ends; it returns nil
// then. Errors reading the metadata service or reaching the controller are
// logged and retried, never returned.
func (a *Agent) Run(ctx context.Context) error {
	a.cfg.Logger.Info("agent watching for interruption notices", "interval", a.cfg.Interval, "controller", a.cfg.Reporter.URL())
	for {
		wake := a.step(ctx, a.cfg.Clock.Now())
		if ctx.Err() != nil {
			return nil
		}
		d := wake.Sub(a.cfg.Clock.Now())
		if d <= 0 {
			continue
		}
		t := a.cfg.Clock.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C():
		}
	}
}

// step does what is due at now — a poll, an attempt to report — and returns
// when the next thing is due.
func (a *Agent) step(ctx context.Context, now time.Time) time.Time {
	if !now.Before(a.nextPoll) {
		a.nextPoll = now.Add(a.cfg.Interval)
		n, err := a.cfg.Source.Poll(ctx)
		a.logPollError(err)
		if n != nil {
			a.observe(*n, now)
		}
	}
	if a.pending != nil && !now.Before(a.retryAt) && ctx.Err() == nil {
		a.attempt(ctx)
	}
	wake := a.nextPoll
	if a.pending != nil && a.retryAt.Before(wake) {
		wake = a.retryAt
	}
	return wake
}

// observe takes a polled notice: if it is news it becomes the one to report
// now.
func (a *Agent) observe(n Notice, now time.Time) {
	var pendingAt *time.Time
	if a.pending != nil {
		pendingAt = &a.pending.At
	}
	if !shouldReport(a.handled, pendingAt, n) {
		return
	}
	if a.pending != nil {
		a.cfg.Logger.Warn("an earlier interruption time supersedes the notice being reported", "was", a.pending.At.UTC().Format(time.RFC3339))
	}
	a.pending, a.seen, a.attempts, a.retryAt = &n, now, 0, now
	a.cfg.Logger.Warn("interruption notice", noticeAttrs(n, now)...)
}

// attempt POSTs the pending notice once and decides what follows.
func (a *Agent) attempt(ctx context.Context) {
	n := *a.pending
	err := a.cfg.Reporter.Report(ctx, n)
	now := a.cfg.Clock.Now()
	if err == nil {
		a.cfg.Logger.Info("notice acknowledged by the controller", "interruptAt", n.At.UTC().Format(time.RFC3339), "source", n.Source, "attempts", a.attempts+1)
		a.settle(n)
		return
	}
	if ctx.Err() != nil {
		return // shutting down; the next agent reports it again
	}
	a.attempts++
	var re *ReportError
	if errors.As(err, &re) && re.Permanent() {
		a.cfg.Logger.Error("controller refused the notice: giving up", "interruptAt", n.At.UTC().Format(time.RFC3339), "attempts", a.attempts, "err", err)
		a.settle(n)
		return
	}
	next, ok := nextAttempt(a.cfg.Backoff, a.attempts, now, reportDeadline(n, a.seen), a.cfg.Rand())
	if !ok {
		a.cfg.Logger.Error("notice not acknowledged before its deadline: giving up", "interruptAt", n.At.UTC().Format(time.RFC3339), "attempts", a.attempts, "err", err)
		a.settle(n)
		return
	}
	a.retryAt = next
	a.cfg.Logger.Warn("notice not acknowledged: will retry", "interruptAt", n.At.UTC().Format(time.RFC3339), "attempt", a.attempts, "retryIn", next.Sub(now).Round(time.Millisecond), "err", err)
}

// settle records n as handled: no later notice is reported again.
func (a *Agent) settle(n Notice) {
	if a.handled == nil || n.At.Before(*a.handled) {
		at := n.At
		a.handled = &at
	}
	a.pending, a.attempts = nil, 0
}

func (a *Agent) logPollError(err error) {
	switch {
	case err == nil && a.pollErr != "":
		a.cfg.Logger.Info("metadata service answers again")
		a.pollErr = ""
	case err != nil && err.Error() != a.pollErr:
		a.cfg.Logger.Warn("polling the metadata service", "err", err)
		a.pollErr = err.Error()
	}
}

func noticeAttrs(n Notice, now time.Time) []any {
	return []any{
		"kind", string(n.Kind),
		"action", n.Action,
		"interruptAt", n.At.UTC().Format(time.RFC3339),
		"in", n.At.Sub(now).Round(time.Second),
		"source", n.Source,
	}
}
