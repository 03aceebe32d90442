package gateway

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// wakeFunc adapts a function to Waker: the test plays the pool engine,
// which wakes the pool and later publishes its first ready instance.
type wakeFunc func(pool string) bool

func (f wakeFunc) Wake(pool string) bool { return f(pool) }

// ndjsonBackend streams three Ollama chat chunks, then the final one.
func ndjsonBackend(t *testing.T, first *atomic.Int64) *testBackend {
	return newBackend(t, "b1", func(w http.ResponseWriter, r *http.Request) {
		first.CompareAndSwap(0, time.Now().UnixNano())
		var req struct{ Stream *bool }
		_ = json.NewDecoder(r.Body).Decode(&req)
		if req.Stream != nil && !*req.Stream {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"model":"m","message":{"role":"assistant","content":"hi"},"done":true}`)
			return
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		for i := range 3 {
			fmt.Fprintf(w, `{"model":"m","message":{"role":"assistant","content":"t%d"},"done":false}`+"\n", i)
		}
		fmt.Fprint(w, `{"model":"m","message":{"role":"assistant","content":""},"done":true,"eval_count":3}`+"\n")
	})
}

func TestActivatorHoldsUntilTheFirstInstance(t *testing.T) {
	var first atomic.Int64
	b := ndjsonBackend(t, &first)
	var h *harness
	var wakes atomic.Int64
	var published, keptAlive atomic.Int64
	var once sync.Once
	h = newHarness(t, Options{KeepAliveEvery: 30 * time.Millisecond, Waker: wakeFunc(func(pool string) bool {
		wakes.Add(1)
		once.Do(func() {
			go func() {
				// The cold start: publish once every request is held and
				// every streaming client has had a keep-alive.
				for h.g.Held("p") < 20 || keptAlive.Load() < 10 {
					time.Sleep(5 * time.Millisecond) // polling the condition
				}
				published.Store(time.Now().UnixNano())
				h.g.SetBackends("p", []Backend{b.backend("p")})
			}()
		})
		return pool == "p"
	})})
	h.g.SetBackends("p", nil)

	type result struct {
		code      int
		keepAlive bool
		stream    bool
		chunks    int
		err       error
	}
	results := make(chan result, 20)
	for i := range 20 {
		stream := i%2 == 0
		go func() {
			body := fmt.Sprintf(`{"model":"m","stream":%t,"messages":[]}`, stream)
			resp, err := h.client.Post(h.srv.URL+"/api/chat", "application/json", strings.NewReader(body))
			if err != nil {
				results <- result{err: err}
				return
			}
			defer resp.Body.Close()
			r := result{code: resp.StatusCode, stream: stream}
			sc := bufio.NewScanner(resp.Body)
			for n := 0; sc.Scan(); n++ {
				var c struct {
					Message struct{ Content string }
					Done    bool
				}
				if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
					r.err = fmt.Errorf("line %q is not a chunk: %v", sc.Text(), err)
					break
				}
				if n == 0 && c.Message.Content == "" && !c.Done {
					r.keepAlive = true
					keptAlive.Add(1)
				}
				r.chunks++
			}
			results <- r
		}()
	}
	for i := range 20 {
		r := within(t, results, 10*time.Second, "a held request")
		if r.err != nil || r.code != http.StatusOK || (r.stream && (!r.keepAlive || r.chunks < 5)) || (!r.stream && r.chunks != 1) {
			t.Fatalf("request %d: %d %d chunks %v", i, r.code, r.chunks, r.err)
		}
	}
	if first.Load() < published.Load() {
		t.Fatal("a request reached the backend before it was published")
	}
	if wakes.Load() == 0 || h.g.Held("p") != 0 {
		t.Fatalf("wakes %d, held after the drain %d", wakes.Load(), h.g.Held("p"))
	}
	if b.hits.Load() != 20 {
		t.Fatalf("backend served %d requests, want 20", b.hits.Load())
	}
}

func TestActivatorKeepAliveFormats(t *testing.T) {
	// Ollama streams NDJSON by default; OpenAI streams SSE only with
	// "stream": true (https://github.com/ollama/ollama/blob/main/docs/api.md,
	// https://platform.openai.com/docs/api-reference/chat/create).
	tests := []struct {
		path, body string
		want       keepKind
	}{
		{"/api/chat", `{"model":"m"}`, keepOllamaChat},
		{"/api/chat", `{"model":"m","stream":false}`, keepNone},
		{"/api/generate", `{"model":"m","stream":true}`, keepOllamaGenerate},
		{"/v1/chat/completions", `{"model":"m","stream":true}`, keepSSE},
		{"/v1/chat/completions", `{"model":"m"}`, keepNone},
		{"/v1/responses", `{"model":"m","stream":true}`, keepSSE},
		{"/v1/embeddings", `{"model":"m","stream":true}`, keepNone},
		{"/api/chat", `not json`, keepNone},
	}
	for _, tc := range tests {
		r, _ := http.NewRequest(http.MethodPost, "http://x"+tc.path, nil)
		e := &exchange{r: r, path: tc.path, body: []byte(tc.body)}
		if got := e.keepAliveKind(); got != tc.want {
			t.Errorf("%s %s: %v, want %v", tc.path, tc.body, got, tc.want)
		}
	}
}

func TestActivatorLimits(t *testing.T) {
	h := newHarness(t, Options{ActivatorQueue: 2, ActivatorWait: 300 * time.Millisecond, KeepAliveEvery: 20 * time.Millisecond,
		Waker: wakeFunc(func(string) bool { return true })})
	h.g.SetBackends("p", nil)

	done := make(chan *http.Response, 2)
	for range 2 {
		go func() {
			resp, err := h.client.Post(h.srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","stream":true}`))
			if err != nil {
				t.Error(err)
				done <- nil
				return
			}
			done <- resp
		}()
	}
	for h.g.Held("p") < 2 {
		time.Sleep(5 * time.Millisecond) // polling the condition
	}
	// The queue is full: the third request is refused at once.
	resp, body := h.do(t, http.MethodPost, "/v1/chat/completions", `{"model":"m"}`)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("third request: %d Retry-After %q %s, want 429 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	// The held streams got keep-alive comments, then an error event when
	// the wait ran out.
	for range 2 {
		resp := within(t, done, 5*time.Second, "a held stream to end")
		if resp == nil {
			t.FailNow()
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(string(b), ": ") || !strings.Contains(string(b), `data: {"error"`) {
			t.Fatalf("held stream: %d %q, want keep-alive comments then an error event", resp.StatusCode, b)
		}
	}
	// A non-streaming request past the wait limit: 503 with Retry-After.
	resp, _ = h.do(t, http.MethodPost, "/v1/chat/completions", `{"model":"m"}`)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "10" {
		t.Fatalf("after the wait: %d Retry-After %q, want 503 with Retry-After 10", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}

func TestActivatorOnlyForPoolsThatCanGrow(t *testing.T) {
	h := newHarness(t, Options{Waker: wakeFunc(func(string) bool { return false })})
	h.g.SetBackends("p", nil)
	start := time.Now()
	resp, _ := h.do(t, http.MethodPost, "/api/chat", `{"model":"m"}`)
	if resp.StatusCode != http.StatusServiceUnavailable || time.Since(start) > 2*time.Second {
		t.Fatalf("%d after %s, want a prompt 503", resp.StatusCode, time.Since(start))
	}
}
