package awsqueue

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/tidegpu/tidegpu/internal/notice"
	"github.com/tidegpu/tidegpu/internal/provider/aws/sqstest"
)

// sink stands in for the engines at the notice.Sink seam.
type sink struct {
	mu    sync.Mutex
	calls []string
}

func (s *sink) Notice(pool, id string, at time.Time, source string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, fmt.Sprintf("%s %s %s %s", pool, id, at.UTC().Format(time.RFC3339), source))
	return nil
}

func (s *sink) list() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.calls...)
}

type env struct {
	srv    *sqstest.Server
	q      *Queue
	sink   *sink
	router *notice.Router
	rounds []string
	locErr error
}

func newEnv(t *testing.T, clk *clocktesting.FakePassiveClock) *env {
	t.Helper()
	e := &env{srv: sqstest.NewServer(sqstest.Options{}), sink: &sink{}}
	t.Cleanup(e.srv.Close)
	e.router = notice.NewRouter(e.sink, clk)
	pools := map[string]string{"i-1234567890abcdef0": "llm/chat"}
	q, err := New(context.Background(), Options{QueueURL: e.srv.QueueURL, Region: "us-east-1", Router: e.router, Clock: clk, WaitSeconds: 1,
		Locate: func(_ context.Context, id string) (string, bool, error) {
			if e.locErr != nil {
				return "", false, e.locErr
			}
			p, ok := pools[id]
			return p, ok, nil
		},
		Round: func(pool string) error { e.rounds = append(e.rounds, pool); return nil },
		SQSOptions: []func(*sqs.Options){func(o *sqs.Options) {
			o.Credentials = credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "not-a-real-secret", "")
			o.HTTPClient = &http.Client{Timeout: 30 * time.Second}
		}}})
	if err != nil {
		t.Fatal(err)
	}
	e.q = q
	return e
}

func TestQueueHandlesEachKindAndDeletes(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 30, 0, time.UTC)
	e := newEnv(t, clocktesting.NewFakePassiveClock(t0))
	ctx := context.Background()
	e.srv.Send(interruptionEvent)
	e.srv.Send(strings.Replace(interruptionEvent, "i-1234567890abcdef0", "i-0000000000000000f", -1)) // not ours
	e.srv.Send(`{"source":"aws.s3"}`)
	e.srv.Send(`garbage`)
	e.srv.Send(stateEvent)
	if err := e.q.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	want := []string{"llm/chat i-1234567890abcdef0 2026-03-01T12:02:00Z " + SourceInterruption}
	if got := e.sink.list(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("notices %v, want %v", got, want)
	}
	if fmt.Sprint(e.rounds) != "[llm/chat]" {
		t.Errorf("rounds %v, want one for llm/chat (shutting-down)", e.rounds)
	}
	for _, m := range e.srv.Messages() {
		if !m.Deleted {
			t.Errorf("message %s (%.40s) not deleted", m.ID, m.Body)
		}
	}
	// The same warning again (SQS delivers at least once) and the agent's
	// copy: handled once.
	e.srv.Send(interruptionEvent)
	if err := e.q.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, _ := e.router.Deliver("llm/chat", "i-1234567890abcdef0", t0.Add(89*time.Second), "aws-imds"); ok {
		t.Error("the agent's notice after the queue's was handed on again")
	}
	if n := len(e.sink.list()); n != 1 {
		t.Errorf("%d notices reached the engine, want 1: %v", n, e.sink.list())
	}
	var got []string
	for _, a := range e.srv.Actions() {
		got = append(got, "sqs:"+a)
	}
	slices.Sort(got)
	if fmt.Sprint(got) != fmt.Sprint(IAMActions) {
		t.Errorf("SQS actions called %v, IAMActions %v: keep them and deploy/iam/aws-policy.json in step", got, IAMActions)
	}
}

// A rebalance recommendation is a notice due RebalanceDeadline after it;
// the interruption warning that follows it, no earlier, is not handled
// again.
func TestQueueRebalanceThenWarning(t *testing.T) {
	e := newEnv(t, clocktesting.NewFakePassiveClock(time.Date(2026, 3, 1, 12, 0, 10, 0, time.UTC)))
	e.srv.Send(rebalanceEvent)
	e.srv.Send(strings.Replace(interruptionEvent, "2026-03-01T12:00:00Z", "2026-03-01T12:00:05Z", 1))
	if err := e.q.Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := []string{"llm/chat i-1234567890abcdef0 2026-03-01T12:02:00Z " + SourceRebalance}
	if got := e.sink.list(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("notices %v, want %v", got, want)
	}
}

// A message whose pool cannot be looked up is kept: it comes back after
// its visibility timeout and is handled then.
func TestQueueKeepsAMessageItCouldNotHandle(t *testing.T) {
	e := newEnv(t, clocktesting.NewFakePassiveClock(time.Date(2026, 3, 1, 12, 0, 30, 0, time.UTC)))
	e.locErr = fmt.Errorf("DescribeInstances throttled")
	e.srv.Send(interruptionEvent)
	if err := e.q.Poll(context.Background()); err == nil || !strings.Contains(err.Error(), "throttled") {
		t.Fatalf("Poll = %v, want the lookup error", err)
	}
	if m := e.srv.Messages()[0]; m.Deleted || m.Receives != 1 {
		t.Fatalf("message after a failed lookup: %+v", m)
	}
	if len(e.sink.list()) != 0 {
		t.Fatal("a notice went out without its pool")
	}
}

func TestNewRefusesBadQueueURL(t *testing.T) {
	for _, u := range []string{"", "sqs.us-east-1.amazonaws.com/1/q", "https://sqs.us-east-1.amazonaws.com", "ftp://x/1/q"} {
		_, err := New(context.Background(), Options{QueueURL: u, Router: notice.NewRouter(&sink{}, nil),
			Locate: func(context.Context, string) (string, bool, error) { return "", false, nil }, Round: func(string) error { return nil }})
		if err == nil || !strings.Contains(err.Error(), "queue URL") {
			t.Errorf("New(%q) = %v, want a queue URL error", u, err)
		}
	}
	_ = aws.String
}
