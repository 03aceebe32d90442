package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// The gateway's own errors in each API's shape: OpenAI's error object on
// /v1 (OpenAI API reference, "Error codes": {"error": {"message", "type",
// "param", "code"}}, as openai-go decodes it into *openai.Error), Ollama's
// {"error": "message"} (Ollama docs/api.md, "Errors") elsewhere.
func TestOwnErrorsInTheAPIsShape(t *testing.T) {
	reset := newBackend(t, "reset", resetHandler)
	cases := []struct {
		name   string
		opts   Options
		pool   []Backend
		method string
		path   string
		body   string
		status int
		code   string
	}{
		{"no backend", Options{}, nil, "POST", "/v1/chat/completions", `{}`, 503, "no_backend"},
		{"no backend", Options{}, nil, "POST", "/api/chat", `{}`, 503, "no_backend"},
		{"too large", Options{MaxBodyBytes: 16}, nil, "POST", "/v1/embeddings", strings.Repeat("x", 17), 413, "request_too_large"},
		{"too large", Options{MaxBodyBytes: 16}, nil, "POST", "/api/embed", strings.Repeat("x", 17), 413, "request_too_large"},
		{"all failed", Options{EjectAfter: -1}, []Backend{reset.backend("p")}, "POST", "/v1/completions", `{}`, 502, "all_backends_failed"},
		{"all failed", Options{EjectAfter: -1}, []Backend{reset.backend("p")}, "POST", "/ollama-chat", `{}`, 502, "all_backends_failed"},
		{"no route", Options{}, nil, "GET", "/v1x", "", 404, "no_route"},
		{"connect", Options{}, nil, "CONNECT", "/v1/models", "", 405, "method_not_allowed"},
	}
	for _, tc := range cases {
		t.Run(tc.name+" "+tc.path, func(t *testing.T) {
			h := newHarness(t, tc.opts)
			if tc.pool != nil {
				h.g.SetBackends("p", tc.pool)
			}
			resp, body := h.do(t, tc.method, tc.path, tc.body)
			if resp.StatusCode != tc.status || resp.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("%d %q %v; want %d", resp.StatusCode, body, resp.Header, tc.status)
			}
			var top map[string]json.RawMessage
			if err := json.Unmarshal([]byte(body), &top); err != nil || len(top) != 1 {
				t.Fatalf("body %q is not {\"error\": ...}", body)
			}
			if !isOpenAIPath(tc.path) {
				var msg string
				if err := json.Unmarshal(top["error"], &msg); err != nil || msg == "" {
					t.Fatalf("Ollama shape wanted, got %s", body)
				}
				return
			}
			var e map[string]any
			if err := json.Unmarshal(top["error"], &e); err != nil {
				t.Fatalf("OpenAI shape wanted, got %s", body)
			}
			wantType := "invalid_request_error"
			if tc.status >= 500 {
				wantType = "server_error"
			}
			if e["message"] == "" || e["type"] != wantType || e["code"] != tc.code || e["param"] != nil || len(e) != 4 {
				t.Fatalf("error object %v; want type %s code %s", e, wantType, tc.code)
			}
		})
	}
}

// The official SDK decodes the gateway's own error as an API error with its
// status, type and code.
func TestOpenAISDKDecodesTheGatewaysError(t *testing.T) {
	h := newHarness(t, Options{})
	c := openai.NewClient(option.WithBaseURL(h.srv.URL+"/v1/"), option.WithAPIKey("k"), option.WithMaxRetries(0))
	_, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 503 || apiErr.Type != "server_error" || apiErr.Code != "no_backend" || apiErr.Message != "no ready backend" {
		t.Fatalf("err %v (%+v)", err, apiErr)
	}
}

// Preflight answered by the gateway (204, the configured headers, no
// backend reached); actual requests carry the allowed origin and exposed
// headers, not the backend's own CORS headers.
func TestCORSAtTheGateway(t *testing.T) {
	b := newBackend(t, "b", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Access-Control-Allow-Origin", "*") // the backend's own policy
		w.Header().Set("Vary", "Accept-Encoding")
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{}`)
	})
	h := newHarness(t, Options{CORS: &CORS{
		AllowedOrigins: []string{"http://app.example"},
		AllowedHeaders: []string{"Authorization", "Content-Type"},
		MaxAge:         10 * time.Minute,
	}})
	h.g.SetBackends("p", []Backend{b.backend("p")})

	resp, body := h.do(t, http.MethodOptions, "/v1/chat/completions", "",
		"Origin", "http://app.example", "Access-Control-Request-Method", "POST",
		"Access-Control-Request-Headers", "authorization,content-type")
	if resp.StatusCode != http.StatusNoContent || body != "" ||
		resp.Header.Get("Access-Control-Allow-Origin") != "http://app.example" ||
		resp.Header.Get("Access-Control-Allow-Methods") != "POST" ||
		resp.Header.Get("Access-Control-Allow-Headers") != "authorization,content-type" ||
		resp.Header.Get("Access-Control-Max-Age") != "600" {
		t.Fatalf("preflight: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	// Not allowed: an unknown origin, a header not listed.
	for _, hdr := range [][]string{
		{"Origin", "http://evil.example", "Access-Control-Request-Method", "POST"},
		{"Origin", "http://app.example", "Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", "x-other"},
	} {
		resp, _ := h.do(t, http.MethodOptions, "/v1/chat/completions", "", hdr...)
		if resp.Header.Get("Access-Control-Allow-Origin") != "" {
			t.Fatalf("preflight %v allowed: %v", hdr, resp.Header)
		}
	}
	if n := b.hits.Load(); n != 0 {
		t.Fatalf("preflights reached the backend %d times", n)
	}
	resp, _ = h.do(t, http.MethodPost, "/v1/chat/completions", `{}`, "Origin", "http://app.example")
	if resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != "http://app.example" ||
		len(resp.Header.Values("Access-Control-Allow-Origin")) != 1 ||
		resp.Header.Get("Access-Control-Expose-Headers") != BackendHeader ||
		!strings.Contains(strings.Join(resp.Header.Values("Vary"), ","), "Origin") ||
		!strings.Contains(strings.Join(resp.Header.Values("Vary"), ","), "Accept-Encoding") {
		t.Fatalf("actual request: %d %v", resp.StatusCode, resp.Header)
	}
	// The gateway's own errors carry them too, so a page can read them.
	h.g.SetBackends("p", nil)
	resp, _ = h.do(t, http.MethodPost, "/v1/chat/completions", `{}`, "Origin", "http://app.example")
	if resp.StatusCode != 503 || resp.Header.Get("Access-Control-Allow-Origin") != "http://app.example" {
		t.Fatalf("own error: %d %v", resp.StatusCode, resp.Header)
	}
}

// Without Options.CORS a preflight is the backend's to answer.
func TestCORSPassesThroughWhenNotConfigured(t *testing.T) {
	b := newBackend(t, "b", func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodOptions {
			w.Header().Set("Access-Control-Allow-Origin", "http://backend-says")
			w.WriteHeader(http.StatusOK)
			return
		}
		w.WriteHeader(http.StatusMethodNotAllowed)
	})
	h := newHarness(t, Options{})
	h.g.SetBackends("p", []Backend{b.backend("p")})
	resp, _ := h.do(t, http.MethodOptions, "/v1/chat/completions", "",
		"Origin", "http://app.example", "Access-Control-Request-Method", "POST")
	if resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != "http://backend-says" || b.hits.Load() != 1 {
		t.Fatalf("%d %v, %d backend hits", resp.StatusCode, resp.Header, b.hits.Load())
	}
}

func TestCORSOptionsChecked(t *testing.T) {
	for _, tc := range []struct {
		c    CORS
		want string
	}{
		{CORS{}, "AllowedOrigins: required"},
		{CORS{AllowedOrigins: []string{"app.example"}}, `"app.example" is not an origin`},
		{CORS{AllowedOrigins: []string{"https://a.example/path"}}, "is not an origin"},
		{CORS{AllowedOrigins: []string{"*"}, AllowCredentials: true}, "AllowCredentials: not with the origin *"},
		{CORS{AllowedOrigins: []string{"*"}, AllowedMethods: []string{"post"}}, "AllowedMethods"},
		{CORS{AllowedOrigins: []string{"*"}, AllowedHeaders: []string{"a b"}}, "is not a header name"},
		{CORS{AllowedOrigins: []string{"*"}, MaxAge: -time.Second}, "MaxAge"},
	} {
		_, err := New(Options{ProbeInterval: -1, CORS: &tc.c})
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "Options.CORS.") {
			t.Errorf("%+v: err %v, want %q", tc.c, err, tc.want)
		}
	}
	if _, err := New(Options{ProbeInterval: -1, CORS: &CORS{AllowedOrigins: []string{"https://*.example.com", "http://127.0.0.1:3000"}}}); err != nil {
		t.Fatal(err)
	}
}

// A backend silent mid-stream for StreamIdleTimeout: the client connection
// is aborted (no truncated body taken for whole) and the backend marked
// failed; a backend that keeps talking is not cut.
func TestStreamIdleTimeout(t *testing.T) {
	release := make(chan struct{})
	hang := newBackend(t, "hang", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		_, _ = io.WriteString(w, "{\"n\":1}\n")
		w.(http.Flusher).Flush()
		if r.URL.Path == "/api/steady" {
			for range 6 {
				time.Sleep(100 * time.Millisecond) // the backend's pace: a token each 100 ms, under the timeout
				_, _ = io.WriteString(w, "{}\n")
				w.(http.Flusher).Flush()
			}
			return
		}
		<-release
	})
	t.Cleanup(func() { close(release) }) // before the backend's Close, which waits for the handler
	h := newHarness(t, Options{StreamIdleTimeout: 300 * time.Millisecond, EjectAfter: -1})
	h.g.SetBackends("p", []Backend{hang.backend("p")})
	start := time.Now()
	resp, err := h.client.Post(h.srv.URL+"/api/chat", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil || string(b) != "{\"n\":1}\n" {
		t.Fatalf("body %q, err %v: want the first line then an aborted connection", b, err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("aborted after %v", took)
	}
	if s := status(t, h.g, "hang"); !strings.Contains(s.LastError, "stream idle timeout") {
		t.Fatalf("last error %q", s.LastError)
	}
	resp2, body := h.do(t, http.MethodPost, "/api/steady", `{}`)
	if resp2.StatusCode != 200 || strings.Count(body, "\n") != 7 {
		t.Fatalf("steady stream: %d %q", resp2.StatusCode, body)
	}
}

func TestListenLocalhostBothLoopbacks(t *testing.T) {
	lns, err := Listen("localhost:0")
	if err != nil {
		t.Fatal(err)
	}
	for _, ln := range lns {
		t.Cleanup(func() { ln.Close() })
		go func() {
			_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
		}()
	}
	port := lns[0].Addr().(*net.TCPAddr).Port
	get := func(host string) error {
		resp, err := http.Get("http://" + net.JoinHostPort(host, strconv.Itoa(port)) + "/")
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	}
	if err := get("127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	probe, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		if len(lns) != 1 {
			t.Fatalf("no IPv6 loopback here, yet %d listeners", len(lns))
		}
		t.Skipf("no IPv6 loopback on this machine (%v): the [::1] half is not tested", err)
	}
	probe.Close()
	if len(lns) != 2 || lns[1].Addr().(*net.TCPAddr).Port != port {
		t.Fatalf("listeners %v: want 127.0.0.1 and [::1] on port %d", lns, port)
	}
	if err := get("::1"); err != nil {
		t.Fatal(err)
	}
	// Other hosts: one listener, as given.
	one, err := Listen("127.0.0.1:0")
	if err != nil || len(one) != 1 {
		t.Fatalf("%v %v", one, err)
	}
	one[0].Close()
}
