package tenant

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tidegpu/tidegpu/internal/gateway"
	"github.com/tidegpu/tidegpu/internal/sim"
)

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }
func newClock() *fakeClock               { return &fakeClock{t: time.Unix(1_700_000_000, 0)} }
func hdr(kv ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

const testKeys = `keys:
- name: open
  sha256: %OPEN%
  tenant: team-open
- name: small
  sha256: %SMALL%
  tenant: team-small
  labels: {team: small, env: test}
  models: [qwen2:0.5b]
  pools: [chat]
  limits: {requestsPerMinute: 3, concurrent: 4}
- name: tokens
  sha256: %TOKENS%
  tenant: team-tokens
  limits: {tokensPerMinute: 200}
`

// stack is the middleware in front of a real gateway in front of a real
// simulator, as `tidegpu up` runs them.
func stack(t *testing.T, clock *fakeClock) (*httptest.Server, *prometheus.Registry) {
	t.Helper()
	gw := simGateway(t)
	src := strings.NewReplacer("%OPEN%", Hash("sk-open"), "%SMALL%", Hash("sk-small"), "%TOKENS%", Hash("sk-tokens")).Replace(testKeys)
	ks, err := Parse([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	srv, _, reg := serve(t, gw, ks, clock)
	return srv, reg
}

// serve is the middleware with ks in front of next.
func serve(t *testing.T, next http.Handler, ks *Keys, clock *fakeClock) (*httptest.Server, *Handler, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	h, err := Middleware(next, ks, Options{Registerer: reg, Now: clock.now, ParseUsage: func([]byte) (string, int64, int64, bool) { return "", 0, 0, false }})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, h, reg
}

// simGateway is a real gateway in front of a real simulator, with the
// pools chat and other.
func simGateway(t *testing.T) *gateway.Gateway {
	t.Helper()
	s := sim.New(sim.Config{TTFT: -1, TokenTime: -1})
	backend := httptest.NewServer(s)
	t.Cleanup(func() { backend.CloseClientConnections(); backend.Close(); s.Close() })
	gw, err := gateway.New(gateway.Options{OnUsage: func(string, string, int64, int64) {}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.Close)
	addr := strings.TrimPrefix(backend.URL, "http://")
	gw.SetBackends("chat", []gateway.Backend{{ID: "chat-0", Pool: "chat", Address: addr}})
	gw.SetBackends("other", []gateway.Backend{{ID: "other-0", Pool: "other", Address: addr}})
	return gw
}

func do(t *testing.T, srv *httptest.Server, path, body string, headers map[string]string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

const chat = `{"model":"qwen2:0.5b","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`

func TestMiddlewareRefusals(t *testing.T) {
	srv, _ := stack(t, newClock())
	for _, tc := range []struct {
		name, path, body string
		headers          map[string]string
		code             int
		errCode          string // OpenAI error.code; "" on Ollama paths
		errText          string
	}{
		{"no key, OpenAI", "/v1/chat/completions", chat, nil, 401, "missing_api_key", "no API key"},
		{"no key, Ollama", "/api/chat", `{"model":"qwen2:0.5b"}`, nil, 401, "", "no API key"},
		{"unknown key", "/v1/chat/completions", chat, hdr("Authorization", "Bearer sk-nope"), 401, "invalid_api_key", "invalid API key"},
		{"basic auth is no key", "/v1/chat/completions", chat, hdr("Authorization", "Basic c2stb3Blbg=="), 401, "missing_api_key", ""},
		{"model not allowed", "/v1/chat/completions", `{"model":"llama3","messages":[]}`, hdr("Authorization", "Bearer sk-small"), 403, "model_not_allowed", `"llama3"`},
		{"pool not allowed, Ollama", "/api/chat", `{"model":"qwen2:0.5b"}`, hdr("x-api-key", "sk-small", gateway.PoolHeader, "other"), 403, "", `pool "other"`},
		{"bearer answered", "/v1/chat/completions", chat, hdr("Authorization", "Bearer sk-open"), 200, "", ""},
		{"x-api-key answered", "/api/generate", `{"model":"qwen2:0.5b","prompt":"x","stream":false}`, hdr("X-Api-Key", "sk-small"), 200, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := do(t, srv, tc.path, tc.body, tc.headers)
			if resp.StatusCode != tc.code {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.code, body)
			}
			if tc.code == 200 {
				return
			}
			if strings.HasPrefix(tc.path, "/v1/") {
				var e struct {
					Error struct{ Message, Type, Code string }
				}
				if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Code != tc.errCode || e.Error.Type == "" || !strings.Contains(e.Error.Message, tc.errText) {
					t.Fatalf("OpenAI error body %s (%v), want code %s and %q", body, err, tc.errCode, tc.errText)
				}
			} else {
				var e struct{ Error string }
				if err := json.Unmarshal([]byte(body), &e); err != nil || !strings.Contains(e.Error, tc.errText) {
					t.Fatalf("Ollama error body %s (%v), want %q", body, err, tc.errText)
				}
			}
			if strings.Contains(body, "sk-") {
				t.Fatalf("error body quotes a key: %s", body)
			}
		})
	}
}

func TestMiddlewareRequestsPerMinute(t *testing.T) {
	clock := newClock()
	srv, reg := stack(t, clock)
	key := hdr("Authorization", "Bearer sk-small")
	for i := range 3 {
		resp, body := do(t, srv, "/v1/chat/completions", chat, key)
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
		if got := resp.Header.Get("X-Ratelimit-Remaining-Requests"); got != []string{"2", "1", "0"}[i] {
			t.Fatalf("request %d: remaining %q", i, got)
		}
	}
	resp, body := do(t, srv, "/v1/chat/completions", chat, key)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "20" ||
		resp.Header.Get("X-Ratelimit-Limit-Requests") != "3" || resp.Header.Get("X-Ratelimit-Reset-Requests") != "1m0s" ||
		!strings.Contains(body, `"code":"rate_limit_exceeded"`) || !strings.Contains(body, `"type":"requests"`) {
		t.Fatalf("4th request: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	clock.add(20 * time.Second)
	if resp, body := do(t, srv, "/v1/chat/completions", chat, key); resp.StatusCode != 200 {
		t.Fatalf("after Retry-After: %d %s", resp.StatusCode, body)
	}
	if got := testutil.ToFloat64(mustCounter(t, reg, "tidegpu_gateway_tenant_requests_total", "team-small", "429")); got != 1 {
		t.Fatalf("429s counted %v", got)
	}
	if got := testutil.ToFloat64(mustCounter(t, reg, "tidegpu_gateway_tenant_requests_total", "team-small", "200")); got != 4 {
		t.Fatalf("200s counted %v", got)
	}
}

// A stream whose client did not ask for usage: the gateway strips the usage
// chunk, the hook settles the tenant's tokens with the real counts.
func TestMiddlewareSettlesStreamTokens(t *testing.T) {
	clock := newClock()
	srv, reg := stack(t, clock)
	key := hdr("Authorization", "Bearer sk-tokens")
	stream := `{"model":"qwen2:0.5b","messages":[{"role":"user","content":"hi"}],"max_tokens":100,"stream":true}`
	resp, body := do(t, srv, "/v1/chat/completions", stream, key)
	if resp.StatusCode != 200 || strings.Contains(body, `"usage":{`) {
		t.Fatalf("stream: %d %s", resp.StatusCode, body)
	}
	// The estimate (body/4 + 100) was taken; the answer used 100 completion
	// tokens plus a few prompt tokens, so the bucket is far below 200.
	completion := testutil.ToFloat64(mustCounter(t, reg, "tidegpu_gateway_tenant_tokens_total", "team-tokens", "completion"))
	prompt := testutil.ToFloat64(mustCounter(t, reg, "tidegpu_gateway_tenant_tokens_total", "team-tokens", "prompt"))
	if completion != 100 || prompt <= 0 {
		t.Fatalf("tokens counted: prompt %v completion %v, want completion 100", prompt, completion)
	}
	// 200 - (100 + prompt) left: a second request estimated at ≥ 100+ is refused.
	resp, body = do(t, srv, "/v1/chat/completions", stream, key)
	if resp.StatusCode != 429 || !strings.Contains(body, `"type":"tokens"`) || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("over the token limit: %d %s", resp.StatusCode, body)
	}
	clock.add(time.Minute)
	if resp, body := do(t, srv, "/v1/chat/completions", stream, key); resp.StatusCode != 200 {
		t.Fatalf("after a minute: %d %s", resp.StatusCode, body)
	}
}

// The key headers do not reach the backend unless ForwardKey.
func TestMiddlewareStripsKey(t *testing.T) {
	ks, err := Parse([]byte("keys:\n- {name: a, sha256: " + Hash("sk-a") + ", tenant: t}\n"))
	if err != nil {
		t.Fatal(err)
	}
	fwd, err := Parse([]byte("forwardKey: true\nkeys:\n- {name: a, sha256: " + Hash("sk-a") + ", tenant: t}\n"))
	if err != nil {
		t.Fatal(err)
	}
	for i, forward := range []bool{false, true, true} {
		var seen http.Header
		sink := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen = r.Header.Clone() })
		keys, o := ks, Options{ForwardKey: forward}
		if i == 2 {
			keys, o = fwd, Options{}
		}
		h, err := Middleware(sink, keys, o)
		if err != nil {
			t.Fatal(err)
		}
		req := httptest.NewRequest(http.MethodPost, "/api/generate", strings.NewReader(`{}`))
		req.Header.Set("Authorization", "Bearer sk-a")
		req.Header.Set("X-Api-Key", "sk-a")
		h.ServeHTTP(httptest.NewRecorder(), req)
		if got := seen.Get("Authorization") != "" || seen.Get("X-Api-Key") != ""; got != forward {
			t.Fatalf("ForwardKey %v: backend saw %v", forward, seen)
		}
	}
}

func mustCounter(t *testing.T, reg *prometheus.Registry, name string, labels ...string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var values []string
			for _, l := range m.GetLabel() {
				values = append(values, l.GetValue())
			}
			if len(values) == len(labels) && !slices.ContainsFunc(labels, func(v string) bool { return !slices.Contains(values, v) }) {
				return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "x"}, func() float64 { return m.GetCounter().GetValue() })
			}
		}
	}
	t.Fatalf("no %s%v", name, labels)
	return nil
}

func TestParseRequest(t *testing.T) {
	for _, tc := range []struct {
		body     string
		whole    bool
		model    string
		estimate int64
	}{
		{`{"model":"m","max_tokens":10}`, true, "m", 8 + 10},
		{`{"model":"m","options":{"num_predict":100}}`, true, "m", 11 + 100},
		{`{"model":"m","max_completion_tokens":5,"max_tokens":7}`, true, "m", 14 + 7},
		{`{"model":"m","max_tokens":-5}`, true, "m", 8},
		{`not json`, true, "", 2},
		{`{"model":"m"}`, false, "", 4},
		{``, true, "", 0},
	} {
		q := parseRequest([]byte(tc.body), tc.whole)
		if q.model != tc.model || q.estimate != tc.estimate {
			t.Errorf("parseRequest(%s, %v) = %+v, want model %q estimate %d", tc.body, tc.whole, q, tc.model, tc.estimate)
		}
	}
}

func FuzzParseRequest(f *testing.F) {
	f.Add([]byte(`{"model":"m","max_tokens":10,"options":{"num_predict":9}}`))
	f.Add([]byte(`{"max_output_tokens":99999999999999999}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		q := parseRequest(b, true)
		if q.estimate < int64(len(b)/4) || q.estimate > int64(len(b))+1<<40 {
			t.Fatalf("estimate %d for %d bytes", q.estimate, len(b))
		}
	})
}

func FuzzPresentedKey(f *testing.F) {
	f.Add("Bearer sk-a", "")
	f.Add("Basic x", "sk-b")
	f.Add("bearer  ", " ")
	f.Fuzz(func(t *testing.T, auth, apiKey string) {
		h := http.Header{}
		h.Set("Authorization", auth)
		h.Set("X-Api-Key", apiKey)
		k, ok := presentedKey(h)
		if ok != (k != "") || (ok && strings.TrimSpace(k) != k) {
			t.Fatalf("presentedKey(%q, %q) = %q, %v", auth, apiKey, k, ok)
		}
	})
}

// A key at its concurrent limit gets 429 until a request ends; a stream
// holds its slot until its end.
func TestMiddlewareConcurrent(t *testing.T) {
	ks, err := Parse([]byte("keys:\n- {name: a, sha256: " + Hash("sk-a") + ", tenant: t, limits: {concurrent: 1}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	release, started := make(chan struct{}), make(chan struct{})
	sink := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/generate" {
			w.WriteHeader(200)
			w.(http.Flusher).Flush()
			close(started)
			<-release
		}
	})
	h, err := Middleware(sink, ks, Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	first := make(chan int)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/api/generate", strings.NewReader(`{"model":"m"}`))
		req.Header.Set("X-Api-Key", "sk-a")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			first <- 0
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		first <- resp.StatusCode
	}()
	<-started
	resp, body := do(t, srv, "/v1/models", ``, hdr("x-api-key", "sk-a"))
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "1" || !strings.Contains(body, `"type":"concurrent"`) {
		t.Fatalf("second request: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	close(release)
	if code := <-first; code != 200 {
		t.Fatalf("first request: %d", code)
	}
	if resp, body := do(t, srv, "/v1/models", ``, hdr("x-api-key", "sk-a")); resp.StatusCode != 200 {
		t.Fatalf("after the first ended: %d %s", resp.StatusCode, body)
	}
}
