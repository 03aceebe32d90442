package agent

import (
	"math"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) *time.Time {
	x := t0.Add(d)
	return &x
}

func TestShouldReport(t *testing.T) {
	n := func(d time.Duration) Notice { return Notice{Kind: KindInterruption, At: t0.Add(d)} }
	tests := []struct {
		name             string
		handled, pending *time.Time
		notice           Notice
		want             bool
	}{
		{"first notice", nil, nil, n(2 * time.Minute), true},
		{"same time already acknowledged", at(2 * time.Minute), nil, n(2 * time.Minute), false},
		{"later time already covered", at(2 * time.Minute), nil, n(3 * time.Minute), false},
		{"earlier time than acknowledged", at(2 * time.Minute), nil, n(time.Minute), true},
		{"same as pending", nil, at(2 * time.Minute), n(2 * time.Minute), false},
		{"later than pending", nil, at(2 * time.Minute), n(5 * time.Minute), false},
		{"earlier than pending", nil, at(2 * time.Minute), n(time.Minute), true},
		{"earlier than pending, later than handled", at(30 * time.Second), at(2 * time.Minute), n(time.Minute), false},
		{"earlier than both", at(2 * time.Minute), at(90 * time.Second), n(time.Minute), true},
	}
	for _, tt := range tests {
		if got := shouldReport(tt.handled, tt.pending, tt.notice); got != tt.want {
			t.Errorf("%s: shouldReport = %t, want %t", tt.name, got, tt.want)
		}
	}
}

func TestBackoffDelay(t *testing.T) {
	b := Backoff{Initial: 250 * time.Millisecond, Max: 8 * time.Second}
	tests := []struct {
		attempt int
		r       float64
		want    time.Duration
	}{
		{1, 0, 125 * time.Millisecond},
		{1, 0.5, 187500 * time.Microsecond},
		{1, 0.999999, 250*time.Millisecond - 125*time.Nanosecond},
		{2, 0, 250 * time.Millisecond},
		{3, 0, 500 * time.Millisecond},
		{6, 0, 4 * time.Second},
		{7, 0, 4 * time.Second}, // capped at Max = 8 s, half of it fixed
		{7, 0.5, 6 * time.Second},
		{1000, 0, 4 * time.Second},
		{0, 0, 125 * time.Millisecond},  // attempt < 1 counts as the first
		{-3, 0, 125 * time.Millisecond}, //
		{1, 1, 125 * time.Millisecond},  // out-of-range jitter counts as 0
		{1, -0.5, 125 * time.Millisecond},
		{1, math.NaN(), 125 * time.Millisecond},
	}
	for _, tt := range tests {
		if got := b.Delay(tt.attempt, tt.r); got != tt.want {
			t.Errorf("Delay(%d, %v) = %v, want %v", tt.attempt, tt.r, got, tt.want)
		}
	}
	if got := (Backoff{Initial: 5 * time.Second, Max: time.Second}).Delay(1, 0); got != 500*time.Millisecond {
		t.Errorf("Initial above Max: Delay = %v, want half of Max", got)
	}
	if got := (Backoff{}).Delay(3, 0.5); got != 0 {
		t.Errorf("zero backoff: Delay = %v, want 0", got)
	}
}

func TestNextAttempt(t *testing.T) {
	b := Backoff{Initial: time.Second, Max: 8 * time.Second}
	tests := []struct {
		name     string
		attempt  int
		now      time.Duration
		deadline time.Duration
		want     time.Duration
		wantOK   bool
	}{
		{"well before the deadline", 1, 0, 2 * time.Minute, 500 * time.Millisecond, true},
		{"third failure", 3, 10 * time.Second, 2 * time.Minute, 12 * time.Second, true},
		{"capped at the deadline", 5, 119 * time.Second, 2 * time.Minute, 2 * time.Minute, true},
		{"at the deadline", 2, 2 * time.Minute, 2 * time.Minute, 0, false},
		{"past the deadline", 2, 3 * time.Minute, 2 * time.Minute, 0, false},
	}
	for _, tt := range tests {
		got, ok := nextAttempt(b, tt.attempt, t0.Add(tt.now), t0.Add(tt.deadline), 0)
		if ok != tt.wantOK || (ok && !got.Equal(t0.Add(tt.want))) {
			t.Errorf("%s: nextAttempt = %v, %t; want %v, %t", tt.name, got.Sub(t0), ok, tt.want, tt.wantOK)
		}
	}
}

func TestReportDeadline(t *testing.T) {
	tests := []struct {
		name     string
		at, seen time.Duration
		want     time.Duration
	}{
		{"two-minute notice", 2 * time.Minute, 0, 2 * time.Minute},
		{"notice already past", -time.Minute, 0, MinReportWindow},
		{"notice due now", 0, 0, MinReportWindow},
		{"just above the window", MinReportWindow + time.Second, 0, MinReportWindow + time.Second},
	}
	for _, tt := range tests {
		got := reportDeadline(Notice{At: t0.Add(tt.at)}, t0.Add(tt.seen))
		if !got.Equal(t0.Add(tt.want)) {
			t.Errorf("%s: reportDeadline = %v, want %v", tt.name, got.Sub(t0), tt.want)
		}
	}
}

func TestTokenFresh(t *testing.T) {
	tests := []struct {
		name string
		now  time.Duration
		ttl  time.Duration
		want bool
	}{
		// Expires at t0 + ttl; refreshed min(ttl/10, 1m) before.
		{"six-hour token, new", 0, 6 * time.Hour, true},
		{"six-hour token, 61 s left", 6*time.Hour - 61*time.Second, 6 * time.Hour, true},
		{"six-hour token, 60 s left", 6*time.Hour - 60*time.Second, 6 * time.Hour, false},
		{"60 s token, 7 s left", 53 * time.Second, time.Minute, true},
		{"60 s token, 6 s left", 54 * time.Second, time.Minute, false},
		{"expired", 2 * time.Minute, time.Minute, false},
		{"one-second token, new", 0, time.Second, true},
		{"one-second token, 100 ms left", 900 * time.Millisecond, time.Second, false},
	}
	for _, tt := range tests {
		if got := tokenFresh(t0.Add(tt.now), t0.Add(tt.ttl), tt.ttl); got != tt.want {
			t.Errorf("%s: tokenFresh = %t, want %t", tt.name, got, tt.want)
		}
	}
}

func TestRebalanceNotice(t *testing.T) {
	if n := rebalanceNotice(RebalanceIgnore, t0, 2*time.Minute); n != nil {
		t.Errorf("ignore policy: %v, want nil", n)
	}
	n := rebalanceNotice(RebalanceDrain, t0, 2*time.Minute)
	if n == nil || n.Kind != KindRebalance || !n.At.Equal(t0.Add(2*time.Minute)) || n.Source != SourceAWSRebalance {
		t.Errorf("drain policy: %+v, want a rebalance notice at +2m from %s", n, SourceAWSRebalance)
	}
}

func TestEarliest(t *testing.T) {
	a := &Notice{At: t0}
	b := &Notice{At: t0.Add(time.Second)}
	tests := []struct {
		x, y, want *Notice
	}{
		{nil, nil, nil},
		{a, nil, a},
		{nil, b, b},
		{a, b, a},
		{b, a, a},
		{a, &Notice{At: t0}, a}, // a tie keeps the first
	}
	for i, tt := range tests {
		if got := earliest(tt.x, tt.y); got != tt.want {
			t.Errorf("%d: earliest = %v, want %v", i, got, tt.want)
		}
	}
}

func TestParseRebalancePolicy(t *testing.T) {
	tests := []struct {
		in      string
		want    RebalancePolicy
		wantErr bool
	}{
		{"ignore", RebalanceIgnore, false},
		{"drain", RebalanceDrain, false},
		{"", RebalanceIgnore, false},
		{"Drain", "", true},
		{"cordon", "", true},
	}
	for _, tt := range tests {
		got, err := ParseRebalancePolicy(tt.in)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("ParseRebalancePolicy(%q) = %q, %v; want %q (error %t)", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}
