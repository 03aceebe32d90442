package agent

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	testclock "k8s.io/utils/clock/testing"

	"github.com/tidegpu/tidegpu/internal/agent/metadatatest"
)

const (
	testToken    = "s3cret-admin-token"
	testInterval = 5 * time.Second
	noticePath   = "/api/v1/pools/default/instances/i-0abc/notice"
)

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// loop runs an Agent on a fake clock against a fake IMDS and a recording
// controller.
type loop struct {
	t    *testing.T
	fc   *testclock.FakeClock
	imds *metadatatest.AWS
	ctl  *controller
	logs *syncBuffer
}

type loopOptions struct {
	script    []int
	always    int // the controller's answer after the script (202 when 0)
	tokenTTL  time.Duration
	rebalance RebalancePolicy
	before    func(*metadatatest.AWS) // before the agent starts
}

func startLoop(t *testing.T, o loopOptions) *loop {
	t.Helper()
	fc := testclock.NewFakeClock(t0)
	imds := metadatatest.NewAWS(t, "i-0abc")
	imds.SetClock(fc)
	ctl := newController(t, fc.Now, o.script...)
	ctl.setAlways(o.always)
	if o.before != nil {
		o.before(imds)
	}
	src, err := NewAWS(AWSOptions{Endpoint: imds.URL, Clock: fc, TokenTTL: o.tokenTTL, Rebalance: o.rebalance})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := NewReporter(ReporterOptions{Controller: ctl.URL, Pool: "default", InstanceID: "i-0abc", Token: func() (string, error) { return testToken, nil }})
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	a, err := New(Config{Source: src, Reporter: rep, Interval: testInterval, Clock: fc,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Rand:   func() float64 { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v, want nil after cancel", err)
		}
		if strings.Contains(logs.String(), testToken) {
			t.Errorf("the admin token is in the logs:\n%s", logs)
		}
		if t.Failed() {
			t.Logf("agent logs:\n%s", logs)
		}
	})
	l := &loop{t: t, fc: fc, imds: imds, ctl: ctl, logs: logs}
	waitFor(t, "the agent's first poll", fc.HasWaiters)
	return l
}

// advance steps the fake clock by d once the agent waits on its timer, and
// returns when the agent waits again (it has done what was due).
func (l *loop) advance(d time.Duration) {
	l.t.Helper()
	waitFor(l.t, "the agent to wait", l.fc.HasWaiters)
	l.fc.Step(d)
	waitFor(l.t, "the agent to wait again", l.fc.HasWaiters)
}

// advanceFor steps the clock by step until total has passed.
func (l *loop) advanceFor(total, step time.Duration) {
	l.t.Helper()
	for passed := time.Duration(0); passed < total; passed += step {
		l.advance(step)
	}
}

func TestAgentNothingPostedWithoutNotice(t *testing.T) {
	l := startLoop(t, loopOptions{})
	l.advanceFor(10*testInterval, testInterval)
	if n := l.ctl.count(); n != 0 {
		t.Fatalf("%d notices posted without any interruption notice", n)
	}
	if got := l.imds.CallCount(metadatatest.InstanceActionPath); got != 11 {
		t.Fatalf("instance-action polled %d times over 10 intervals, want 11", got)
	}
}

func TestAgentReportsNoticeOnce(t *testing.T) {
	l := startLoop(t, loopOptions{})
	l.advance(testInterval)
	at := l.fc.Now().Add(2 * time.Minute)
	l.imds.Schedule("terminate", at)
	l.advance(testInterval)
	posts := l.ctl.Posts()
	if len(posts) != 1 {
		t.Fatalf("%d posts after the notice appeared, want 1", len(posts))
	}
	p := posts[0]
	if p.Path != noticePath || p.Authorization != "Bearer "+testToken || !p.Notice.At.Equal(at) || p.Notice.Source != SourceAWS {
		t.Fatalf("post = %+v, want %s with the bearer token, interruptAt %v, source %s", p, noticePath, at, SourceAWS)
	}
	// The notice stays in the metadata until the end: never reported again.
	l.advanceFor(20*testInterval, testInterval)
	if n := l.ctl.count(); n != 1 {
		t.Fatalf("%d posts of one notice, want 1", n)
	}
	if !strings.Contains(l.logs.String(), "notice acknowledged") {
		t.Errorf("no log of the acknowledgement:\n%s", l.logs)
	}
}

func TestAgentRetriesUntilAcknowledged(t *testing.T) {
	l := startLoop(t, loopOptions{
		script: []int{http.StatusServiceUnavailable, http.StatusServiceUnavailable, http.StatusServiceUnavailable},
		before: func(imds *metadatatest.AWS) { imds.Schedule("terminate", t0.Add(2*time.Minute)) },
	})
	for i := 0; l.ctl.count() < 4 && i < 100; i++ {
		l.advance(25 * time.Millisecond)
	}
	posts := l.ctl.Posts()
	if len(posts) != 4 {
		t.Fatalf("%d posts, want 3 failures then the acknowledgement", len(posts))
	}
	// Backoff with zero jitter: 125 ms, 250 ms, 500 ms (half steps of
	// 250 ms doubling), rounded up to the 25 ms steps of the clock.
	wantGaps := []time.Duration{125 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond}
	for i, want := range wantGaps {
		if gap := posts[i+1].At.Sub(posts[i].At); gap != want {
			t.Errorf("gap before attempt %d = %v, want %v", i+2, gap, want)
		}
	}
	for i, p := range posts {
		if p.Authorization != "Bearer "+testToken || !p.Notice.At.Equal(t0.Add(2*time.Minute)) {
			t.Errorf("post %d = %+v", i, p)
		}
	}
	l.advanceFor(10*testInterval, testInterval)
	if n := l.ctl.count(); n != 4 {
		t.Fatalf("%d posts after the acknowledgement, want still 4", n)
	}
}

func TestAgentGivesUpAtTheDeadline(t *testing.T) {
	at := t0.Add(40 * time.Second)
	l := startLoop(t, loopOptions{always: http.StatusServiceUnavailable, before: func(imds *metadatatest.AWS) { imds.Schedule("terminate", at) }})
	l.advanceFor(time.Minute, 250*time.Millisecond)
	posts := l.ctl.Posts()
	if len(posts) < 5 {
		t.Fatalf("only %d attempts in 40 s", len(posts))
	}
	if last := posts[len(posts)-1].At; last.After(at) || last.Before(at.Add(-5*time.Second)) {
		t.Errorf("last attempt at %v, want within 5 s before the interruption time %v", last.Sub(t0), at.Sub(t0))
	}
	if len(posts) > 40 {
		t.Errorf("%d attempts in 40 s: the backoff does not grow", len(posts))
	}
	n := len(posts)
	l.advanceFor(5*testInterval, testInterval)
	if got := l.ctl.count(); got != n {
		t.Errorf("%d more attempts after giving up", got-n)
	}
	if !strings.Contains(l.logs.String(), "giving up") {
		t.Errorf("no log of giving up:\n%s", l.logs)
	}
}

func TestAgentStopsOnARefusal(t *testing.T) {
	l := startLoop(t, loopOptions{
		script: []int{http.StatusBadRequest},
		before: func(imds *metadatatest.AWS) { imds.Schedule("terminate", t0.Add(2*time.Minute)) },
	})
	l.advanceFor(10*testInterval, testInterval)
	if n := l.ctl.count(); n != 1 {
		t.Fatalf("%d posts after a 400, want 1", n)
	}
}

func TestAgentReportsAnEarlierNoticeAgain(t *testing.T) {
	l := startLoop(t, loopOptions{rebalance: RebalanceDrain})
	l.imds.Rebalance(t0)
	l.advance(testInterval)
	l.imds.Schedule("terminate", t0.Add(time.Minute)) // earlier than t0 + 2m
	l.advance(testInterval)
	l.imds.Schedule("terminate", t0.Add(3*time.Minute)) // later: nothing new
	l.advanceFor(3*testInterval, testInterval)
	posts := l.ctl.Posts()
	if len(posts) != 2 {
		t.Fatalf("%d posts, want the rebalance notice then the earlier interruption", len(posts))
	}
	if p := posts[0].Notice; !p.At.Equal(t0.Add(2*time.Minute)) || p.Source != SourceAWSRebalance {
		t.Errorf("first post = %+v, want the rebalance deadline t0+2m from %s", p, SourceAWSRebalance)
	}
	if p := posts[1].Notice; !p.At.Equal(t0.Add(time.Minute)) || p.Source != SourceAWS {
		t.Errorf("second post = %+v, want the interruption at t0+1m from %s", p, SourceAWS)
	}
}

func TestAgentRefreshesTheIMDSToken(t *testing.T) {
	l := startLoop(t, loopOptions{tokenTTL: time.Minute})
	l.advanceFor(3*time.Minute, testInterval)
	if got := l.imds.TokensIssued(); got < 3 || got > 5 {
		t.Errorf("%d session tokens over 3 minutes of 60 s tokens, want 3 to 5", got)
	}
	if u := l.imds.Unauthorized(); u != 0 {
		t.Errorf("%d polls refused with 401: the token was not refreshed before it expired", u)
	}
	// And the loop still works.
	l.imds.Schedule("terminate", l.fc.Now().Add(2*time.Minute))
	l.advance(testInterval)
	if n := l.ctl.count(); n != 1 {
		t.Fatalf("%d posts, want 1", n)
	}
}

func TestAgentSurvivesPollErrors(t *testing.T) {
	l := startLoop(t, loopOptions{before: func(imds *metadatatest.AWS) {
		imds.Fail(metadatatest.InstanceActionPath, http.StatusInternalServerError, 3)
	}})
	l.imds.Schedule("terminate", t0.Add(2*time.Minute))
	l.advanceFor(3*testInterval, testInterval)
	if n := l.ctl.count(); n != 1 {
		t.Fatalf("%d posts after 3 failed polls and a good one, want 1", n)
	}
	if c := strings.Count(l.logs.String(), "polling the metadata service"); c != 1 {
		t.Errorf("the same poll error logged %d times, want once", c)
	}
	if !strings.Contains(l.logs.String(), "answers again") {
		t.Errorf("no log of the recovery:\n%s", l.logs)
	}
}

func TestNewValidation(t *testing.T) {
	src, _ := NewTencent(TencentOptions{Endpoint: "http://127.0.0.1:1"})
	rep, _ := NewReporter(ReporterOptions{Controller: "http://127.0.0.1:1", Pool: "p", InstanceID: "i"})
	tests := []struct {
		cfg  Config
		want string
	}{
		{Config{Reporter: rep}, "source"},
		{Config{Source: src}, "reporter"},
		{Config{Source: src, Reporter: rep, Interval: -time.Second}, "interval"},
		{Config{Source: src, Reporter: rep, Backoff: Backoff{Initial: time.Second}}, "backoff"},
	}
	for _, tt := range tests {
		if _, err := New(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New(%+v) = %v, want an error mentioning %q", tt.cfg, err, tt.want)
		}
	}
	a, err := New(Config{Source: src, Reporter: rep})
	if err != nil || a.cfg.Interval != DefaultInterval || a.cfg.Backoff != DefaultBackoff {
		t.Errorf("New defaults = %+v, %v", a.cfg, err)
	}
}
