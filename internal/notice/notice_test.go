package notice

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/tidegpu/tidegpu/internal/engine"
)

func TestFresh(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		name    string
		handled *time.Time
		at      time.Time
		want    bool
	}{
		{"first", nil, t0, true},
		{"same time", &t0, t0, false},
		{"later", &t0, t0.Add(time.Minute), false},
		{"skew of 2 s earlier", &t0, t0.Add(-2 * time.Second), false},
		{"5 s earlier", &t0, t0.Add(-Supersede), true},
		{"a minute earlier (warning after a rebalance deadline)", &t0, t0.Add(-time.Minute), true},
	}
	for _, c := range cases {
		if got := Fresh(c.handled, c.at); got != c.want {
			t.Errorf("%s: Fresh = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestTokensVerify(t *testing.T) {
	tk := NewTokens()
	a, b := NewToken(), NewToken()
	if a == b || len(a) < 40 {
		t.Fatalf("tokens %q and %q: want distinct, 256-bit", a, b)
	}
	tk.Set("ns/chat", a)
	cases := []struct {
		pool, tok string
		want      bool
	}{
		{"ns/chat", a, true},
		{"ns/chat", b, false},
		{"ns/chat", "", false},
		{"ns/chat", a[:len(a)-1], false},
		{"ns/other", a, false},
		{"ns/other", "", false},
	}
	for _, c := range cases {
		if got := tk.Verify(c.pool, c.tok); got != c.want {
			t.Errorf("Verify(%s, %.6s…) = %v, want %v", c.pool, c.tok, got, c.want)
		}
	}
	tk.Delete("ns/chat")
	if tk.Verify("ns/chat", a) {
		t.Error("a deleted pool's token still verifies")
	}
}

// recordingSink stands in for the engines (an interface at the seam).
type recordingSink struct {
	mu    sync.Mutex
	calls []string
	err   error
}

func (s *recordingSink) Notice(pool, id string, at time.Time, source string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	s.calls = append(s.calls, fmt.Sprintf("%s %s %s %s", pool, id, at.Format(time.RFC3339), source))
	return nil
}

func TestRouterHandsEachInstanceOnce(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakePassiveClock(t0)
	sink := &recordingSink{}
	r := NewRouter(sink, clk)
	at := t0.Add(2 * time.Minute)
	if ok, err := r.Deliver("ns/chat", "i-1", at, "aws-sqs"); !ok || err != nil {
		t.Fatalf("first delivery: %v, %v", ok, err)
	}
	if ok, _ := r.Deliver("ns/chat", "i-1", at.Add(-time.Second), "aws-imds"); ok {
		t.Error("the agent's copy of the same notice was handed on again")
	}
	if ok, _ := r.Deliver("ns/chat", "i-2", at, "aws-imds"); !ok {
		t.Error("another instance's notice was dropped")
	}
	if len(sink.calls) != 2 {
		t.Errorf("sink calls %v, want 2", sink.calls)
	}
	// A failing sink remembers nothing: the retry is delivered.
	sink.err = engine.ErrNotFound
	if ok, err := r.Deliver("ns/chat", "i-3", at, "aws-imds"); ok || err == nil {
		t.Fatalf("failing sink: %v, %v", ok, err)
	}
	sink.err = nil
	if ok, _ := r.Deliver("ns/chat", "i-3", at, "aws-imds"); !ok {
		t.Error("a notice that failed once is never delivered")
	}
	// Long after, the memory is gone.
	clk.SetTime(at.Add(Forget + time.Minute))
	if ok, _ := r.Deliver("ns/chat", "i-1", at, "aws-sqs"); !ok {
		t.Error("the memory of a notice is kept forever")
	}
}

func TestHandlerRefusesWrongTokenAndNeverLogsIt(t *testing.T) {
	var logs bytes.Buffer
	tk := NewTokens()
	good := NewToken()
	tk.Set("llm/chat", good)
	sink := &recordingSink{}
	srv := httptest.NewServer(Handler(tk, NewRouter(sink, nil), slog.New(slog.NewTextHandler(&logs, nil))))
	defer srv.Close()
	post := func(path, tok string) int {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(`{"source":"aws-imds"}`))
		req.Header.Set("Content-Type", "application/json")
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	p := "/api/v1/namespaces/llm/pools/chat/instances/i-1/notice"
	wrong := NewToken()
	for _, c := range []struct {
		name, path, tok string
		want            int
	}{
		{"no token", p, "", 401},
		{"wrong token", p, wrong, 401},
		{"another pool's path", "/api/v1/namespaces/llm/pools/other/instances/i-1/notice", good, 401},
		{"the admin API's route is not here", "/api/v1/pools/chat/instances/i-1/reclaim", good, 404},
	} {
		if got := post(c.path, c.tok); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
	if len(sink.calls) != 0 {
		t.Fatalf("refused notices reached the engine: %v", sink.calls)
	}
	if got := post(p, good); got != http.StatusAccepted {
		t.Fatalf("good token: %d, want 202", got)
	}
	if got := post(p, good); got != http.StatusAccepted || len(sink.calls) != 1 {
		t.Errorf("repeat: %d and %d sink calls, want 202 and 1", got, len(sink.calls))
	}
	for _, tok := range []string{good, wrong} {
		if strings.Contains(logs.String(), tok) {
			t.Fatalf("a token is in the logs:\n%s", logs.String())
		}
	}
}
