package agent

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	testclock "k8s.io/utils/clock/testing"

	"github.com/tidegpu/tidegpu/internal/agent/metadatatest"
)

func TestAWSPoll(t *testing.T) {
	ctx := context.Background()
	for _, policy := range []RebalancePolicy{RebalanceIgnore, RebalanceDrain} {
		t.Run(string(policy), func(t *testing.T) {
			imds := metadatatest.NewAWS(t, "i-0123456789abcdef0")
			src, err := NewAWS(AWSOptions{Endpoint: imds.URL, Rebalance: policy})
			if err != nil {
				t.Fatal(err)
			}
			if n, err := src.Poll(ctx); n != nil || err != nil {
				t.Fatalf("Poll with nothing announced = %v, %v; want nil, nil", n, err)
			}

			// A rebalance recommendation: reported only by the drain policy,
			// as a notice at noticeTime + 2 minutes.
			rebalanceAt := t0.Add(-30 * time.Second)
			imds.Rebalance(rebalanceAt)
			n, err := src.Poll(ctx)
			if err != nil {
				t.Fatal(err)
			}
			switch policy {
			case RebalanceIgnore:
				if n != nil {
					t.Fatalf("ignore policy reported %v", n)
				}
				if c := imds.CallCount(metadatatest.RebalancePath); c != 0 {
					t.Errorf("ignore policy read the rebalance item %d times", c)
				}
			case RebalanceDrain:
				want := Notice{Kind: KindRebalance, Action: "rebalance", At: rebalanceAt.Add(2 * time.Minute), Source: SourceAWSRebalance}
				if n == nil || *n != want {
					t.Fatalf("drain policy: Poll = %v, want %v", n, want)
				}
			}

			// The interruption notice, earlier than the rebalance deadline:
			// it wins.
			imds.Schedule("terminate", t0.Add(time.Minute))
			n, err = src.Poll(ctx)
			want := Notice{Kind: KindInterruption, Action: "terminate", At: t0.Add(time.Minute), Source: SourceAWS}
			if err != nil || n == nil || *n != want {
				t.Fatalf("Poll = %v, %v; want %v", n, err, want)
			}
			// A stop notice later than the rebalance deadline: the rebalance
			// deadline wins under the drain policy.
			imds.Schedule("stop", t0.Add(10*time.Minute))
			n, err = src.Poll(ctx)
			if err != nil || n == nil {
				t.Fatalf("Poll = %v, %v", n, err)
			}
			if policy == RebalanceDrain && n.Kind != KindRebalance {
				t.Errorf("drain policy: Poll = %v, want the earlier rebalance deadline", n)
			}
			if policy == RebalanceIgnore && (n.Action != "stop" || !n.At.Equal(t0.Add(10*time.Minute))) {
				t.Errorf("ignore policy: Poll = %v, want the stop notice", n)
			}
			for _, c := range imds.Calls() {
				if c.Method == http.MethodGet && !c.Token {
					t.Errorf("GET %s without a session token", c.Path)
				}
			}
			if got := imds.TokensIssued(); got != 1 {
				t.Errorf("%d session tokens issued for 4 polls, want 1 (cached)", got)
			}
		})
	}
}

func TestAWSTokenRefreshedBeforeExpiry(t *testing.T) {
	ctx := context.Background()
	fc := testclock.NewFakeClock(t0)
	imds := metadatatest.NewAWS(t, "i-1")
	imds.SetClock(fc)
	src, err := NewAWS(AWSOptions{Endpoint: imds.URL, Clock: fc, TokenTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	poll := func() {
		t.Helper()
		if _, err := src.Poll(ctx); err != nil {
			t.Fatal(err)
		}
	}
	poll()
	fc.Step(50 * time.Second)
	poll()
	if got := imds.TokensIssued(); got != 1 {
		t.Fatalf("after 50 s of a 60 s token: %d tokens issued, want 1", got)
	}
	fc.Step(5 * time.Second) // 55 s: within the 6 s refresh margin
	poll()
	if got := imds.TokensIssued(); got != 2 {
		t.Fatalf("after 55 s of a 60 s token: %d tokens issued, want 2 (refreshed before expiry)", got)
	}
	fc.Step(48 * time.Second) // 103 s: the second token, from 55 s, is still fresh
	poll()
	if got, u := imds.TokensIssued(), imds.Unauthorized(); got != 2 || u != 0 {
		t.Fatalf("tokens issued %d (want 2), GETs refused %d (want 0)", got, u)
	}
	for _, c := range imds.Calls() {
		if c.Method == http.MethodPut && c.Path != metadatatest.TokenPath {
			t.Errorf("unexpected PUT %s", c.Path)
		}
	}
}

func TestAWSNewTokenAfter401(t *testing.T) {
	ctx := context.Background()
	imds := metadatatest.NewAWS(t, "i-1")
	src, err := NewAWS(AWSOptions{Endpoint: imds.URL})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	imds.ForgetTokens() // the service restarted
	imds.Schedule("terminate", t0)
	n, err := src.Poll(ctx)
	if err != nil || n == nil {
		t.Fatalf("Poll after the service forgot the token = %v, %v", n, err)
	}
	if got, u := imds.TokensIssued(), imds.Unauthorized(); got != 2 || u != 1 {
		t.Fatalf("tokens issued %d, GETs refused %d; want 2 and 1", got, u)
	}
	// A 401 that persists is an error, not a loop.
	imds.Fail(metadatatest.InstanceActionPath, http.StatusUnauthorized, 2)
	_, err = src.Poll(ctx)
	var me *MetadataError
	if !errors.As(err, &me) || me.Status != http.StatusUnauthorized {
		t.Fatalf("Poll with a persistent 401 = %v, want a MetadataError 401", err)
	}
}

func TestAWSErrors(t *testing.T) {
	ctx := context.Background()
	imds := metadatatest.NewAWS(t, "i-1")
	src, err := NewAWS(AWSOptions{Endpoint: imds.URL, Rebalance: RebalanceDrain})
	if err != nil {
		t.Fatal(err)
	}
	imds.Fail(metadatatest.TokenPath, http.StatusForbidden, 1)
	if _, err := src.Poll(ctx); err == nil || !strings.Contains(err.Error(), "session token") || !strings.Contains(err.Error(), "403") {
		t.Errorf("Poll with IMDS turned off = %v, want an error about the session token and 403", err)
	}
	imds.Fail(metadatatest.InstanceActionPath, http.StatusInternalServerError, 1)
	var me *MetadataError
	if _, err := src.Poll(ctx); !errors.As(err, &me) || me.Status != 500 || me.Path != metadatatest.InstanceActionPath {
		t.Errorf("Poll with a 500 = %v, want a MetadataError for %s", err, metadatatest.InstanceActionPath)
	}
	// The interruption notice is kept when only the rebalance item fails.
	imds.Schedule("terminate", t0)
	imds.Fail(metadatatest.RebalancePath, http.StatusServiceUnavailable, 1)
	n, err := src.Poll(ctx)
	if n == nil || n.Kind != KindInterruption || !errors.As(err, &me) {
		t.Errorf("Poll with a failing rebalance item = %v, %v; want the notice and the error", n, err)
	}
	imds.Close()
	if _, err := src.Poll(ctx); !errors.As(err, &me) || me.Status != 0 {
		t.Errorf("Poll with the service gone = %v, want a MetadataError without status", err)
	}
}

func TestAWSInstanceID(t *testing.T) {
	imds := metadatatest.NewAWS(t, "i-0123456789abcdef0")
	src, err := NewAWS(AWSOptions{Endpoint: imds.URL + "/"})
	if err != nil {
		t.Fatal(err)
	}
	id, err := src.InstanceID(context.Background())
	if err != nil || id != "i-0123456789abcdef0" {
		t.Fatalf("InstanceID = %q, %v", id, err)
	}
	imds.Fail(metadatatest.AWSInstanceIDPath, http.StatusNotFound, 1)
	if _, err := src.InstanceID(context.Background()); !errors.Is(err, ErrNotFound) {
		t.Fatalf("InstanceID on a 404 = %v, want ErrNotFound", err)
	}
}

func TestNewAWSValidation(t *testing.T) {
	tests := []struct {
		o    AWSOptions
		want string
	}{
		{AWSOptions{Endpoint: "169.254.169.254"}, "metadata endpoint"},
		{AWSOptions{Endpoint: "http://169.254.169.254/latest"}, "metadata endpoint"},
		{AWSOptions{Endpoint: "ftp://x"}, "metadata endpoint"},
		{AWSOptions{TokenTTL: 500 * time.Millisecond}, "TTL"},
		{AWSOptions{TokenTTL: 6*time.Hour + time.Second}, "TTL"},
		{AWSOptions{TokenTTL: 1500 * time.Millisecond}, "whole seconds"},
		{AWSOptions{Rebalance: "cordon"}, "rebalance"},
		{AWSOptions{Rebalance: RebalanceDrain, RebalanceDeadline: -time.Second}, "rebalance deadline"},
	}
	for _, tt := range tests {
		if _, err := NewAWS(tt.o); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("NewAWS(%+v) = %v, want an error mentioning %q", tt.o, err, tt.want)
		}
	}
	if a, err := NewAWS(AWSOptions{}); err != nil || a.o.Endpoint != DefaultAWSEndpoint || a.o.TokenTTL != MaxIMDSTokenTTL || a.o.Rebalance != RebalanceIgnore {
		t.Errorf("NewAWS defaults = %+v, %v", a, err)
	}
}

func TestTencent(t *testing.T) {
	ctx := context.Background()
	md := metadatatest.NewTencent(t, "ins-3g445roi")
	src, err := NewTencent(TencentOptions{Endpoint: md.URL})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := src.Poll(ctx); n != nil || err != nil {
		t.Fatalf("Poll before a reclaim = %v, %v; want nil, nil", n, err)
	}
	md.Schedule(t0.Add(2 * time.Minute))
	n, err := src.Poll(ctx)
	want := Notice{Kind: KindInterruption, Action: "terminate", At: t0.Add(2 * time.Minute), Source: SourceTencent}
	if err != nil || n == nil || *n != want {
		t.Fatalf("Poll = %v, %v; want %v", n, err, want)
	}
	if id, err := src.InstanceID(ctx); err != nil || id != "ins-3g445roi" {
		t.Fatalf("InstanceID = %q, %v", id, err)
	}
	md.Fail(metadatatest.TerminationTimePath, http.StatusBadGateway, 1)
	var me *MetadataError
	if _, err := src.Poll(ctx); !errors.As(err, &me) || me.Status != http.StatusBadGateway {
		t.Fatalf("Poll on a 502 = %v, want a MetadataError", err)
	}
	md.Fail(metadatatest.TencentInstanceIDPath, http.StatusNotFound, 1)
	if _, err := src.InstanceID(ctx); !errors.Is(err, ErrNotFound) {
		t.Fatalf("InstanceID on a 404 = %v, want ErrNotFound", err)
	}
	if _, err := NewTencent(TencentOptions{Endpoint: "metadata.tencentyun.com"}); err == nil {
		t.Error("NewTencent accepted an endpoint without scheme")
	}
}

func TestDetect(t *testing.T) {
	ctx := context.Background()
	aws := metadatatest.NewAWS(t, "i-1")
	tc := metadatatest.NewTencent(t, "ins-1")
	gone := metadatatest.NewTencent(t, "x")
	gone.Close()

	if c, err := Detect(ctx, nil, aws.URL, tc.URL); c != CloudAWS || err != nil {
		t.Errorf("Detect(aws, tencent) = %q, %v; want aws", c, err)
	}
	if c, err := Detect(ctx, nil, tc.URL, tc.URL); c != CloudTencent || err != nil {
		t.Errorf("Detect on a Tencent service = %q, %v; want tencent", c, err)
	}
	if c, err := Detect(ctx, nil, gone.URL, tc.URL); c != CloudTencent || err != nil {
		t.Errorf("Detect(nothing, tencent) = %q, %v; want tencent", c, err)
	}
	c, err := Detect(ctx, nil, gone.URL, gone.URL)
	if c != "" || err == nil || !strings.Contains(err.Error(), "no metadata service") {
		t.Errorf("Detect with no service = %q, %v; want an error", c, err)
	}
}
