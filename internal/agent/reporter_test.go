package agent

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestNewReporterValidation(t *testing.T) {
	tests := []struct {
		o    ReporterOptions
		want string
	}{
		{ReporterOptions{Controller: "127.0.0.1:9090", Pool: "p", InstanceID: "i"}, "controller URL"},
		{ReporterOptions{Controller: "ftp://h", Pool: "p", InstanceID: "i"}, "controller URL"},
		{ReporterOptions{Controller: "http://user:pw@h", Pool: "p", InstanceID: "i"}, "controller URL"},
		{ReporterOptions{Controller: "http://h?x=1", Pool: "p", InstanceID: "i"}, "controller URL"},
		{ReporterOptions{Controller: "http://h", InstanceID: "i"}, "pool"},
		{ReporterOptions{Controller: "http://h", Pool: "a/b", InstanceID: "i"}, "pool"},
		{ReporterOptions{Controller: "http://h", Pool: "p"}, "instance id"},
		{ReporterOptions{Controller: "http://h", Pool: "p", InstanceID: "../x"}, "instance id"},
		{ReporterOptions{Controller: "http://h", Namespace: "a/b", Pool: "p", InstanceID: "i"}, "namespace"},
	}
	for _, tt := range tests {
		if _, err := NewReporter(tt.o); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("NewReporter(%+v) = %v, want an error mentioning %q", tt.o, err, tt.want)
		}
	}
	r, err := NewReporter(ReporterOptions{Controller: "https://ctl.example:9090/", Pool: "chat", InstanceID: "i-1"})
	if err != nil || r.URL() != "https://ctl.example:9090/api/v1/pools/chat/instances/i-1/notice" {
		t.Errorf("URL() = %q, %v", r.URL(), err)
	}
	r, err = NewReporter(ReporterOptions{Controller: "https://notice:9443", Namespace: "llm", Pool: "chat", InstanceID: "i-1"})
	if err != nil || r.URL() != "https://notice:9443/api/v1/namespaces/llm/pools/chat/instances/i-1/notice" {
		t.Errorf("URL() with a namespace = %q, %v", r.URL(), err)
	}
	r, err = NewReporter(ReporterOptions{Controller: "http://h/prefix", Pool: "chat", InstanceID: "i%1"})
	if err != nil || r.URL() != "http://h/prefix/api/v1/pools/chat/instances/i%251/notice" {
		t.Errorf("URL() = %q, %v", r.URL(), err)
	}
}

func TestReport(t *testing.T) {
	ctx := context.Background()
	now := func() time.Time { return t0 }
	ctl := newController(t, now, http.StatusServiceUnavailable, http.StatusBadRequest, http.StatusUnauthorized)
	n := Notice{Kind: KindInterruption, Action: "terminate", At: t0.Add(2 * time.Minute), Source: SourceTencent}

	noToken, err := NewReporter(ReporterOptions{Controller: ctl.URL, Pool: "default", InstanceID: "i-0abc"})
	if err != nil {
		t.Fatal(err)
	}
	var re *ReportError
	err = noToken.Report(ctx, n)
	if !errors.As(err, &re) || re.Status != 503 || re.Permanent() || !strings.Contains(err.Error(), "scripted failure") {
		t.Errorf("Report on a 503 = %v, want a retryable ReportError with the controller's message", err)
	}
	err = noToken.Report(ctx, n)
	if !errors.As(err, &re) || re.Status != 400 || !re.Permanent() {
		t.Errorf("Report on a 400 = %v, want a permanent ReportError", err)
	}
	err = noToken.Report(ctx, n)
	if !errors.As(err, &re) || re.Status != 401 || re.Permanent() {
		t.Errorf("Report on a 401 = %v, want a retryable ReportError (the token may be rotated)", err)
	}
	if err := noToken.Report(ctx, n); err != nil {
		t.Errorf("Report on a 202 = %v", err)
	}
	posts := ctl.Posts()
	if len(posts) != 4 || posts[3].Authorization != "" || posts[3].Path != noticePath || !posts[3].Notice.At.Equal(n.At) || posts[3].Notice.Source != SourceTencent {
		t.Fatalf("posts = %+v", posts)
	}

	// The token function is called for every attempt; its error stops the
	// attempt and does not leak anything.
	calls := 0
	failing, _ := NewReporter(ReporterOptions{Controller: ctl.URL, Pool: "default", InstanceID: "i-0abc", Token: func() (string, error) {
		calls++
		return "", errors.New("open /etc/tidegpu/token: permission denied")
	}})
	if err := failing.Report(ctx, n); !errors.As(err, &re) || re.Status != 0 || !strings.Contains(err.Error(), "admin token") {
		t.Errorf("Report with an unreadable token = %v", err)
	}
	if calls != 1 || len(ctl.Posts()) != 4 {
		t.Errorf("token read %d times, %d posts; want 1 and no new post", calls, len(ctl.Posts()))
	}

	ctl.Close()
	if err := noToken.Report(ctx, n); !errors.As(err, &re) || re.Status != 0 || re.Err == nil {
		t.Errorf("Report to a closed controller = %v, want a ReportError without status", err)
	}
}
