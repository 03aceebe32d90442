package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tidegpu/tidegpu/internal/gateway/h1"
	testingclock "k8s.io/utils/clock/testing"
)

// waitUntil spins until cond holds, failing after a generous real-time
// bound. It waits for a condition; it does not stand in for one.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		runtime.Gosched()
	}
}

func TestRetryOnFailedAttemptsClientSees200(t *testing.T) {
	reset := newBackend(t, "reset", resetHandler)
	unavailable := newBackend(t, "unavailable", statusHandler(http.StatusServiceUnavailable))
	good := newBackend(t, "good", echoHandler("good"))
	reg := prometheus.NewRegistry()
	// No ejection, so that every request meets the failing backends again.
	h := newHarness(t, Options{Policy: PolicyRoundRobin, EjectAfter: -1, Registry: reg})
	h.g.SetBackends("p", []Backend{
		{ID: "refused", Pool: "p", Address: refusedAddr(t)},
		reset.backend("p"),
		unavailable.backend("p"),
		good.backend("p"),
	})
	for i := range 8 {
		resp, body := h.do(t, http.MethodPost, "/api/chat", `{"model":"m","i":`+fmt.Sprint(i)+`}`)
		if resp.StatusCode != http.StatusOK || resp.Header.Get(BackendHeader) != "good" {
			t.Fatalf("request %d: %d from %q: %s", i, resp.StatusCode, resp.Header.Get(BackendHeader), body)
		}
		var echo echoReply
		if err := json.Unmarshal([]byte(body), &echo); err != nil || echo.Body != `{"model":"m","i":`+fmt.Sprint(i)+`}` {
			t.Fatalf("request %d: body not replayed intact: %q (%v)", i, echo.Body, err)
		}
	}
	if reset.hits.Load() == 0 || unavailable.hits.Load() == 0 {
		t.Fatalf("failing backends not exercised: reset %d, 503 %d", reset.hits.Load(), unavailable.hits.Load())
	}
	for _, reason := range []string{"connect", "transport", "status"} {
		if n := testutil.ToFloat64(h.g.metrics.retries.WithLabelValues(reason)); n == 0 {
			t.Errorf("no retry counted for reason %s", reason)
		}
	}
	if s := status(t, h.g, "refused"); s.Failures == 0 || s.LastError == "" {
		t.Errorf("refused backend: %+v", s)
	}
}

func TestRetriesAreBoundedAndLastAnswerForwarded(t *testing.T) {
	var bs []Backend
	var backends []*testBackend
	for i := range 5 {
		b := newBackend(t, fmt.Sprint("b", i), statusHandler(http.StatusServiceUnavailable))
		backends = append(backends, b)
		bs = append(bs, b.backend("p"))
	}
	h := newHarness(t, Options{MaxRetries: 2, EjectAfter: -1})
	h.g.SetBackends("p", bs)
	resp, body := h.do(t, http.MethodPost, "/api/chat", `{}`)
	if resp.StatusCode != http.StatusServiceUnavailable || body != `{"error":"status 503"}` || resp.Header.Get(BackendHeader) == "" {
		t.Fatalf("got %d %q from %q; want the last backend's own 503", resp.StatusCode, body, resp.Header.Get(BackendHeader))
	}
	var hits int64
	for _, b := range backends {
		hits += b.hits.Load()
	}
	if hits != 3 {
		t.Fatalf("%d attempts, want 1+MaxRetries = 3", hits)
	}
}

func TestAllAttemptsFailWith502(t *testing.T) {
	reset := newBackend(t, "reset", resetHandler)
	h := newHarness(t, Options{EjectAfter: -1})
	h.g.SetBackends("p", []Backend{reset.backend("p"), {ID: "refused", Pool: "p", Address: refusedAddr(t)}})
	resp, body := h.do(t, http.MethodPost, "/api/chat", `{}`)
	if resp.StatusCode != http.StatusBadGateway || body != `{"error":"all backends failed"}` {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
}

func TestStreamForwardedChunkByChunk(t *testing.T) {
	next := make(chan struct{})
	be := newBackend(t, "s", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		for i := range 3 {
			if i > 0 {
				select {
				case <-next:
				case <-r.Context().Done():
					return
				}
			}
			fmt.Fprintf(w, "{\"i\":%d}\n", i)
			w.(http.Flusher).Flush()
		}
	})
	h := newHarness(t, Options{})
	h.g.SetBackends("p", []Backend{be.backend("p")})

	resp, err := h.client.Post(h.srv.URL+"/ollama-chat", "application/json", strings.NewReader(`{"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get(BackendHeader) != "s" {
		t.Fatalf("status %d backend %q", resp.StatusCode, resp.Header.Get(BackendHeader))
	}
	br := bufio.NewReader(resp.Body)
	for i := range 3 {
		// The backend sends line i+1 only after the client has line i.
		lines := make(chan string, 1)
		go func() {
			l, _ := br.ReadString('\n')
			lines <- l
		}()
		if got, want := within(t, lines, 5*time.Second, fmt.Sprint("line ", i)), fmt.Sprintf("{\"i\":%d}\n", i); got != want {
			t.Fatalf("line %d = %q, want %q", i, got, want)
		}
		if i < 2 {
			within(t, sendOn(next), 5*time.Second, "backend to take the next step")
		}
	}
	if rest, err := io.ReadAll(br); err != nil || len(rest) != 0 {
		t.Fatalf("after the stream: %q, %v", rest, err)
	}
}

// sendOn sends on ch in a goroutine and reports when the send happened.
func sendOn(ch chan<- struct{}) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		ch <- struct{}{}
		close(done)
	}()
	return done
}

// holdingBackend answers with one NDJSON line, then holds the stream open
// until release is closed, then sends a last line.
func holdingBackend(t *testing.T, id string) (b *testBackend, entered <-chan struct{}, release chan struct{}) {
	in := make(chan struct{}, 16)
	release = make(chan struct{})
	b = newBackend(t, id, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-ndjson")
		fmt.Fprintln(w, `{"done":false}`)
		w.(http.Flusher).Flush()
		in <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		fmt.Fprintln(w, `{"done":true}`)
	})
	return b, in, release
}

// startStream starts a request that reads the first line of a held stream;
// the returned channel delivers the rest of the body once it ends.
func (h *harness) startStream(t *testing.T, hdr ...string) <-chan string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, h.srv.URL+"/api/chat", strings.NewReader(`{"stream":true}`))
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := h.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	if l, err := br.ReadString('\n'); err != nil || l != "{\"done\":false}\n" {
		t.Fatalf("first line %q, %v", l, err)
	}
	rest := make(chan string, 1)
	go func() {
		defer resp.Body.Close()
		b, err := io.ReadAll(br)
		if err != nil {
			rest <- "error: " + err.Error()
			return
		}
		rest <- string(b)
	}()
	return rest
}

func TestDrainingGetsNoNewRequestsButInFlightStreamCompletes(t *testing.T) {
	a, entered, release := holdingBackend(t, "a")
	b := newBackend(t, "b", echoHandler("b"))
	h := newHarness(t, Options{})
	h.g.SetBackends("pa", []Backend{a.backend("pa")})
	h.g.SetBackends("pb", []Backend{b.backend("pb")})

	rest := h.startStream(t, PoolHeader, "pa")
	within(t, entered, 5*time.Second, "stream on a")

	drained := a.backend("pa")
	drained.Draining = true
	h.g.SetBackends("pa", []Backend{drained})
	if n := h.g.InFlight("a"); n != 1 {
		t.Fatalf("InFlight(a) = %d, want 1", n)
	}
	if s := status(t, h.g, "a"); !s.Draining || s.Eligible || s.InFlight != 1 {
		t.Fatalf("status of a: %+v", s)
	}
	for range 10 {
		if code, be := h.post(t); code != http.StatusOK || be != "b" {
			t.Fatalf("got %d from %q, want 200 from b", code, be)
		}
	}
	if code, _ := h.post(t, PoolHeader, "pa"); code != http.StatusServiceUnavailable {
		t.Fatalf("request for the draining pool: %d, want 503", code)
	}
	if n := a.hits.Load(); n != 1 {
		t.Fatalf("draining backend got %d requests, want only the first", n)
	}

	close(release)
	if got := within(t, rest, 5*time.Second, "end of stream"); got != "{\"done\":true}\n" {
		t.Fatalf("rest of stream = %q", got)
	}
	// The chunked stream ends after the handler returned, so the count is
	// already down.
	if n := h.g.InFlight("a"); n != 0 {
		t.Fatalf("InFlight(a) after the stream = %d", n)
	}
}

func TestSetBackendsTakesEffectOnNextRequest(t *testing.T) {
	a := newBackend(t, "a", echoHandler("a"))
	b := newBackend(t, "b", echoHandler("b"))
	h := newHarness(t, Options{})
	h.g.SetBackends("p", []Backend{a.backend("p")})
	if _, be := h.post(t); be != "a" {
		t.Fatalf("got %q, want a", be)
	}
	h.g.SetBackends("p", []Backend{b.backend("p")})
	for range 5 {
		if _, be := h.post(t); be != "b" {
			t.Fatalf("got %q after switching to b", be)
		}
	}
	if got := h.g.Backends(); len(got) != 1 || got[0].ID != "b" {
		t.Fatalf("Backends() = %+v, want only b", got)
	}
	h.g.SetBackends("p", nil)
	if code, _ := h.post(t); code != http.StatusServiceUnavailable {
		t.Fatalf("after removing the pool: %d", code)
	}
}

func TestInFlightCountsRemovedBackendUntilDone(t *testing.T) {
	a, entered, release := holdingBackend(t, "a")
	b := newBackend(t, "b", echoHandler("b"))
	reg := prometheus.NewRegistry()
	h := newHarness(t, Options{Registry: reg})
	h.g.SetBackends("p", []Backend{a.backend("p")})
	rest := h.startStream(t)
	within(t, entered, 5*time.Second, "stream on a")

	h.g.SetBackends("p", []Backend{b.backend("p")})
	if n := h.g.InFlight("a"); n != 1 {
		t.Fatalf("InFlight(a) after removal = %d, want 1", n)
	}
	var removed bool
	for _, s := range h.g.Backends() {
		removed = removed || (s.ID == "a" && s.Removed && s.InFlight == 1)
	}
	if !removed {
		t.Fatalf("Backends() does not show a as removed and busy: %+v", h.g.Backends())
	}
	if _, be := h.post(t); be != "b" {
		t.Fatalf("new request went to %q", be)
	}
	close(release)
	if got := within(t, rest, 5*time.Second, "end of stream"); got != "{\"done\":true}\n" {
		t.Fatalf("rest of stream = %q", got)
	}
	if n := h.g.InFlight("a"); n != 0 {
		t.Fatalf("InFlight(a) = %d", n)
	}
	for _, s := range h.g.Backends() {
		if s.ID == "a" {
			t.Fatalf("a still listed after its last request: %+v", s)
		}
	}
	// Its metric series are gone too.
	if n := testutil.CollectAndCount(reg, "tidegpu_gateway_requests_total"); n != 1 {
		t.Fatalf("%d requests_total series, want only b's", n)
	}
	if strings.Contains(gatherText(t, reg), `backend="a"`) {
		t.Fatalf("series of removed backend a remain:\n%s", gatherText(t, reg))
	}
}

func TestLeastRequestPrefersIdleBackend(t *testing.T) {
	a, entered, release := holdingBackend(t, "a")
	b := newBackend(t, "b", echoHandler("b"))
	h := newHarness(t, Options{Policy: PolicyLeastRequest})
	h.g.SetBackends("pa", []Backend{a.backend("pa")})
	h.g.SetBackends("pb", []Backend{b.backend("pb")})
	rest := h.startStream(t, PoolHeader, "pa")
	within(t, entered, 5*time.Second, "stream on a")
	for range 20 {
		if _, be := h.post(t); be != "b" {
			t.Fatalf("request went to busy %q", be)
		}
	}
	close(release)
	within(t, rest, 5*time.Second, "end of stream")
}

func TestRoundRobinDistributesEvenly(t *testing.T) {
	var bes []*testBackend
	var set []Backend
	for i := range 3 {
		b := newBackend(t, fmt.Sprint("b", i), echoHandler(fmt.Sprint("b", i)))
		bes = append(bes, b)
		bb := b.backend("p")
		bb.Weight = 100 * (i + 1)
		set = append(set, bb)
	}
	h := newHarness(t, Options{Policy: PolicyRoundRobin})

	h.g.SetBackends("p", set)
	for range 600 {
		if code, _ := h.post(t); code != http.StatusOK {
			t.Fatalf("status %d", code)
		}
	}
	for i, b := range bes {
		if got, want := b.hits.Load(), int64(100*(i+1)); got != want {
			t.Errorf("weighted: %s got %d, want %d", b.id, got, want)
		}
		b.hits.Store(0)
	}

	for i := range set {
		set[i].Weight = 0 // default: equal
	}
	h.g.SetBackends("p", set)
	for range 300 {
		h.post(t)
	}
	for _, b := range bes {
		if got := b.hits.Load(); got != 100 {
			t.Errorf("equal: %s got %d, want 100", b.id, got)
		}
	}
}

func TestPassiveEjectionAndRecovery(t *testing.T) {
	fc := testingclock.NewFakeClock(time.Unix(1_000_000, 0))
	var failing atomic.Bool
	failing.Store(true)
	bad := newBackend(t, "bad", func(w http.ResponseWriter, r *http.Request) {
		if failing.Load() {
			statusHandler(http.StatusServiceUnavailable)(w, r)
			return
		}
		echoHandler("bad")(w, r)
	})
	good := newBackend(t, "good", echoHandler("good"))
	h := newHarness(t, Options{
		Clock: fc, Policy: PolicyRoundRobin,
		EjectAfter: 3, EjectFor: 10 * time.Second, MaxEjectFor: 15 * time.Second,
	})
	h.g.SetBackends("pbad", []Backend{bad.backend("pbad")})
	h.g.SetBackends("pgood", []Backend{good.backend("pgood")})

	// Requests for the bad pool alone: its 503 is the only answer there is,
	// so it is forwarded; three in a row eject it.
	for i := range 3 {
		if s := status(t, h.g, "bad"); s.Ejected {
			t.Fatalf("ejected after %d failures", i)
		}
		if code, be := h.post(t, PoolHeader, "pbad"); code != http.StatusServiceUnavailable || be != "bad" {
			t.Fatalf("got %d from %q", code, be)
		}
	}
	s := status(t, h.g, "bad")
	if !s.Ejected || !s.EjectedUntil.Equal(fc.Now().Add(10*time.Second)) || s.ConsecutiveFailures != 3 || s.Eligible {
		t.Fatalf("after 3 failures: %+v", s)
	}

	// Ejected: all traffic that may go elsewhere does.
	for range 10 {
		if code, be := h.post(t); code != http.StatusOK || be != "good" {
			t.Fatalf("got %d from %q", code, be)
		}
	}
	if n := bad.hits.Load(); n != 3 {
		t.Fatalf("ejected backend got %d requests", n)
	}
	// Panic routing: when the ejected backend is all there is, it is still
	// tried rather than answering "no ready backend"; the ejection is not
	// extended.
	if code, be := h.post(t, PoolHeader, "pbad"); code != http.StatusServiceUnavailable || be != "bad" {
		t.Fatalf("panic routing: got %d from %q", code, be)
	}
	if s2 := status(t, h.g, "bad"); !s2.EjectedUntil.Equal(s.EjectedUntil) {
		t.Fatalf("ejection extended to %v", s2.EjectedUntil)
	}

	// The ejection ends with time; the backend is on probation: its next
	// failure ejects it again, for twice as long (capped at MaxEjectFor).
	fc.Step(10 * time.Second)
	if s := status(t, h.g, "bad"); s.Ejected || !s.Eligible {
		t.Fatalf("after EjectFor: %+v", s)
	}
	h.post(t, PoolHeader, "pbad")
	if s := status(t, h.g, "bad"); !s.Ejected || !s.EjectedUntil.Equal(fc.Now().Add(15*time.Second)) {
		t.Fatalf("re-ejection: %+v, want until now+15s", s)
	}

	// Recovered: a success forgets the failures.
	fc.Step(15 * time.Second)
	failing.Store(false)
	if code, be := h.post(t, PoolHeader, "pbad"); code != http.StatusOK || be != "bad" {
		t.Fatalf("got %d from %q", code, be)
	}
	if s := status(t, h.g, "bad"); s.Ejected || s.ConsecutiveFailures != 0 {
		t.Fatalf("after success: %+v", s)
	}
	failing.Store(true)
	h.post(t, PoolHeader, "pbad")
	if s := status(t, h.g, "bad"); s.Ejected || s.ConsecutiveFailures != 1 {
		t.Fatalf("one failure after recovery: %+v", s)
	}
	// Both take traffic again.
	failing.Store(false)
	seen := map[string]bool{}
	for range 4 {
		_, be := h.post(t)
		seen[be] = true
	}
	if !seen["bad"] || !seen["good"] {
		t.Fatalf("after recovery traffic went to %v", seen)
	}
}

func TestConnectFailureEjectsAtOnce(t *testing.T) {
	fc := testingclock.NewFakeClock(time.Unix(1_000_000, 0))
	good := newBackend(t, "good", echoHandler("good"))
	h := newHarness(t, Options{Clock: fc, Policy: PolicyRoundRobin, EjectAfter: 3})
	h.g.SetBackends("p", []Backend{{ID: "dead", Pool: "p", Address: refusedAddr(t)}, good.backend("p")})
	for range 5 {
		if code, be := h.post(t); code != http.StatusOK || be != "good" {
			t.Fatalf("got %d from %q", code, be)
		}
	}
	if s := status(t, h.g, "dead"); !s.Ejected || s.Requests != 1 || s.ConsecutiveFailures != 1 {
		t.Fatalf("dead backend: %+v; want ejected after its first refused connection", s)
	}
}

func TestNoBackend503(t *testing.T) {
	h := newHarness(t, Options{})
	check := func(what string, hdr ...string) {
		t.Helper()
		resp, body := h.do(t, http.MethodPost, "/api/chat", `{}`, hdr...)
		if resp.StatusCode != http.StatusServiceUnavailable || body != `{"error":"no ready backend"}` ||
			resp.Header.Get("Content-Type") != "application/json" || resp.Header.Get(BackendHeader) != "" {
			t.Fatalf("%s: %d %q %v", what, resp.StatusCode, body, resp.Header)
		}
	}
	check("no backends at all")
	a := newBackend(t, "a", echoHandler("a"))
	drained := a.backend("p")
	drained.Draining = true
	h.g.SetBackends("p", []Backend{drained})
	check("only a draining backend")
	h.g.SetBackends("p", []Backend{a.backend("p")})
	check("unknown pool", PoolHeader, "other")
	if code, _ := h.post(t); code != http.StatusOK {
		t.Fatalf("with a ready backend: %d", code)
	}
}

func TestWaitForBackend(t *testing.T) {
	fc := testingclock.NewFakeClock(time.Unix(1_000_000, 0))
	a := newBackend(t, "a", echoHandler("a"))
	h := newHarness(t, Options{Clock: fc, WaitForBackend: 2 * time.Second})

	type result struct {
		code    int
		backend string
	}
	send := func(hdr ...string) <-chan result {
		ch := make(chan result, 1)
		go func() {
			req, _ := http.NewRequest(http.MethodPost, h.srv.URL+"/api/chat", strings.NewReader("{}"))
			for i := 0; i+1 < len(hdr); i += 2 {
				req.Header.Set(hdr[i], hdr[i+1])
			}
			resp, err := h.client.Do(req)
			if err != nil {
				ch <- result{code: -1, backend: err.Error()}
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			ch <- result{resp.StatusCode, resp.Header.Get(BackendHeader)}
		}()
		return ch
	}

	// A backend published while the request waits serves it.
	res := send()
	waitUntil(t, "the request waits", fc.HasWaiters)
	h.g.SetBackends("p", []Backend{a.backend("p")})
	if r := within(t, res, 5*time.Second, "the waiting request"); r.code != http.StatusOK || r.backend != "a" {
		t.Fatalf("got %+v", r)
	}

	// Nothing appears: 503 when the wait is over.
	res = send(PoolHeader, "empty")
	waitUntil(t, "the request waits", fc.HasWaiters)
	fc.Step(2 * time.Second)
	if r := within(t, res, 5*time.Second, "the waiting request"); r.code != http.StatusServiceUnavailable {
		t.Fatalf("got %+v", r)
	}
}

func TestBodyTooLarge413(t *testing.T) {
	a := newBackend(t, "a", echoHandler("a"))
	h := newHarness(t, Options{MaxBodyBytes: 1024})
	h.g.SetBackends("p", []Backend{a.backend("p")})
	big := strings.Repeat("x", 2048)

	resp, body := h.do(t, http.MethodPost, "/api/chat", big)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || body != `{"error":"request body too large: the gateway accepts at most 1Ki (raise it with --max-body-size)"}` {
		t.Fatalf("with Content-Length: %d %q", resp.StatusCode, body)
	}
	// Chunked, length unknown up front.
	req, _ := http.NewRequest(http.MethodPost, h.srv.URL+"/api/chat", io.MultiReader(strings.NewReader(big)))
	r2, err := h.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r2.Body.Close()
	if r2.StatusCode != http.StatusRequestEntityTooLarge || req.ContentLength != 0 {
		t.Fatalf("chunked: %d (ContentLength %d)", r2.StatusCode, req.ContentLength)
	}
	if n := a.hits.Load(); n != 0 {
		t.Fatalf("backend got %d oversized requests", n)
	}
	// Exactly the limit passes, intact.
	exact := strings.Repeat("y", 1024)
	resp, body = h.do(t, http.MethodPost, "/api/chat", exact)
	var echo echoReply
	if resp.StatusCode != http.StatusOK || json.Unmarshal([]byte(body), &echo) != nil || echo.Body != exact {
		t.Fatalf("body at the limit: %d", resp.StatusCode)
	}
}

func TestRoutingAndHeaders(t *testing.T) {
	a := newBackend(t, "a", echoHandler("a"))
	h := newHarness(t, Options{})
	h.g.SetBackends("p", []Backend{a.backend("p")})

	for _, tc := range []struct{ method, in, path, query string }{
		{http.MethodPost, "/ollama-chat", "/api/chat", ""},
		{http.MethodPost, "/ollama-chat?trace=1", "/api/chat", "trace=1"},
		{http.MethodGet, "/api/tags", "/api/tags", ""},
		{http.MethodPost, "/api/generate?x=1&y=2", "/api/generate", "x=1&y=2"},
		{http.MethodGet, "/v1/models", "/v1/models", ""},
		{http.MethodPost, "/v1/chat/completions", "/v1/chat/completions", ""},
		{http.MethodGet, "/", "/", ""},
	} {
		resp, body := h.do(t, tc.method, tc.in, `{"q":1}`)
		var echo echoReply
		if err := json.Unmarshal([]byte(body), &echo); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %s: %d %q", tc.method, tc.in, resp.StatusCode, body)
		}
		if echo.Method != tc.method || echo.Path != tc.path || echo.Query != tc.query || echo.Body != `{"q":1}` {
			t.Errorf("%s %s reached the backend as %s %s?%s body %q", tc.method, tc.in, echo.Method, echo.Path, echo.Query, echo.Body)
		}
	}
	hits := a.hits.Load()
	for _, p := range []string{"/metrics", "/admin", "/apiX", "/ollama-chat/x"} {
		if resp, body := h.do(t, http.MethodGet, p, ""); resp.StatusCode != http.StatusNotFound || body != `{"error":"no route: the gateway serves /, /api/*, /v1/* and */ollama-chat"}` {
			t.Errorf("%s: %d %q", p, resp.StatusCode, body)
		}
	}
	if a.hits.Load() != hits {
		t.Error("unrouted paths reached the backend")
	}

	resp, body := h.do(t, http.MethodPost, "/api/chat", `{}`,
		"Connection", "X-Hop", "X-Hop", "secret", "Keep-Alive", "timeout=5", "X-Custom", "kept",
		"X-Forwarded-For", "10.1.2.3", "Expect", "100-continue")
	var echo echoReply
	if err := json.Unmarshal([]byte(body), &echo); err != nil {
		t.Fatal(err)
	}
	if resp.Header.Get(BackendHeader) != "a" {
		t.Errorf("response %s = %q", BackendHeader, resp.Header.Get(BackendHeader))
	}
	if got := echo.Header.Get("X-Custom"); got != "kept" {
		t.Errorf("X-Custom = %q", got)
	}
	for _, k := range []string{"X-Hop", "Keep-Alive", "Expect"} {
		if v := echo.Header.Get(k); v != "" {
			t.Errorf("hop-by-hop %s forwarded: %q", k, v)
		}
	}
	if got := echo.Header.Get("X-Forwarded-For"); got != "10.1.2.3, 127.0.0.1" {
		t.Errorf("X-Forwarded-For = %q", got)
	}
	if got := echo.Header.Get("X-Forwarded-Host"); got != h.srv.addr() {
		t.Errorf("X-Forwarded-Host = %q", got)
	}
	if echo.Host != a.addr() {
		t.Errorf("Host = %q, want the backend's %q", echo.Host, a.addr())
	}
	if ua := echo.Header.Get("User-Agent"); ua != "Go-http-client/1.1" {
		t.Errorf("User-Agent = %q, want the client's", ua)
	}
}

func TestPoolHeaderRestrictsCandidates(t *testing.T) {
	a := newBackend(t, "a", echoHandler("a"))
	b := newBackend(t, "b", echoHandler("b"))
	h := newHarness(t, Options{Policy: PolicyRoundRobin})
	h.g.SetBackends("small", []Backend{a.backend("small")})
	h.g.SetBackends("large", []Backend{b.backend("large")})
	for range 5 {
		if _, be := h.post(t, PoolHeader, "large"); be != "b" {
			t.Fatalf("pool large answered by %q", be)
		}
	}
	seen := map[string]bool{}
	for range 4 {
		_, be := h.post(t)
		seen[be] = true
	}
	if !seen["a"] || !seen["b"] {
		t.Fatalf("without the header: %v", seen)
	}
}

func TestClientCancelCancelsBackendRequest(t *testing.T) {
	entered := make(chan struct{}, 1)
	cancelled := make(chan struct{}, 1)
	a := newBackend(t, "a", func(w http.ResponseWriter, r *http.Request) {
		// Read the body first, as real servers do: net/http notices a
		// closed connection only once the body is consumed.
		_, _ = io.Copy(io.Discard, r.Body)
		entered <- struct{}{}
		<-r.Context().Done()
		cancelled <- struct{}{}
	})
	h := newHarness(t, Options{})
	h.g.SetBackends("p", []Backend{a.backend("p")})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.srv.URL+"/api/chat", strings.NewReader("{}"))
	errc := make(chan error, 1)
	go func() {
		resp, err := h.client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	within(t, entered, 5*time.Second, "request at the backend")
	cancel()
	within(t, cancelled, 5*time.Second, "backend request to be cancelled")
	if err := within(t, errc, 5*time.Second, "client"); err == nil {
		t.Fatal("cancelled client request succeeded")
	}
	waitUntil(t, "the gateway lets go", func() bool { return h.g.InFlight("a") == 0 })
	if s := status(t, h.g, "a"); s.Failures != 0 {
		t.Fatalf("client cancellation counted against the backend: %+v", s)
	}
}

func TestMidStreamFailureAbortsClientResponse(t *testing.T) {
	a := newBackend(t, "a", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		fmt.Fprintln(w, `{"done":false}`)
		w.(http.Flusher).Flush()
		hijackReset(w)
	})
	reg := prometheus.NewRegistry()
	h := newHarness(t, Options{Registry: reg})
	h.g.SetBackends("p", []Backend{a.backend("p")})
	resp, err := h.client.Post(h.srv.URL+"/api/chat", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil {
		t.Fatalf("truncated stream ended cleanly: %q", body)
	}
	if string(body) != "{\"done\":false}\n" {
		t.Fatalf("got %q before the abort", body)
	}
	waitUntil(t, "the gateway lets go", func() bool { return h.g.InFlight("a") == 0 })
	if n := testutil.ToFloat64(h.g.metrics.aborts); n != 1 {
		t.Fatalf("stream aborts = %v", n)
	}
}

func TestProbeMarksUnhealthyAndBack(t *testing.T) {
	var sick atomic.Bool
	a := newBackend(t, "a", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" && sick.Load() {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		echoHandler("a")(w, r)
	})
	h := newHarness(t, Options{ProbePath: "/healthz", ProbeFailures: 2})
	h.g.SetBackends("p", []Backend{a.backend("p"), {ID: "dead", Pool: "p", Address: refusedAddr(t)}})
	ctx := context.Background()

	h.g.probeAll(ctx)
	if !status(t, h.g, "a").Healthy || status(t, h.g, "dead").Healthy {
		t.Fatalf("after one round: %+v (a refused connection fails at once)", h.g.Backends())
	}
	sick.Store(true)
	h.g.probeAll(ctx)
	if !status(t, h.g, "a").Healthy {
		t.Fatal("unhealthy after one failed probe, want ProbeFailures=2")
	}
	h.g.probeAll(ctx)
	if s := status(t, h.g, "a"); s.Healthy || s.Eligible || !strings.Contains(s.LastError, "500") {
		t.Fatalf("after two failed probes: %+v", s)
	}
	if code, _ := h.post(t); code != http.StatusServiceUnavailable {
		t.Fatalf("with no healthy backend: %d", code)
	}
	sick.Store(false)
	h.g.probeAll(ctx)
	if code, be := h.post(t); code != http.StatusOK || be != "a" {
		t.Fatalf("after recovery: %d from %q", code, be)
	}
}

func TestProbeLoopRunsOnClock(t *testing.T) {
	fc := testingclock.NewFakeClock(time.Unix(1_000_000, 0))
	h := newHarness(t, Options{Clock: fc, ProbeInterval: time.Second})
	h.g.SetBackends("p", []Backend{{ID: "dead", Pool: "p", Address: refusedAddr(t)}})
	if !status(t, h.g, "dead").Healthy {
		t.Fatal("new backend not eligible at once")
	}
	waitUntil(t, "the prober waits", fc.HasWaiters)
	fc.Step(time.Second)
	waitUntil(t, "the probe marks it unhealthy", func() bool { return !status(t, h.g, "dead").Healthy })
}

func TestProbeBeforeAdmit(t *testing.T) {
	a := newBackend(t, "a", echoHandler("a"))
	sick := newBackend(t, "sick", statusHandler(http.StatusInternalServerError))
	h := newHarness(t, Options{ProbeBeforeAdmit: true, ProbeInterval: time.Hour, WaitForBackend: 10 * time.Second})
	// Not eligible until probed; the probe runs at once and the waiting
	// request is served.
	h.g.SetBackends("p", []Backend{a.backend("p")})
	if code, be := h.post(t); code != http.StatusOK || be != "a" {
		t.Fatalf("got %d from %q", code, be)
	}
	h.g.SetBackends("q", []Backend{sick.backend("q")})
	h.g.probeAll(context.Background())
	if s := status(t, h.g, "sick"); s.Healthy || s.Eligible {
		t.Fatalf("failing backend admitted: %+v", s)
	}
}

func TestProbeDownAbandonsHungAttempt(t *testing.T) {
	var down atomic.Bool
	entered := make(chan struct{}, 1)
	hung := newBackend(t, "hung", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			if down.Load() {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		entered <- struct{}{}
		<-r.Context().Done() // a host that vanished: no answer, no RST
	})
	good := newBackend(t, "good", echoHandler("good"))
	reg := prometheus.NewRegistry()
	h := newHarness(t, Options{Policy: PolicyRoundRobin, ProbePath: "/healthz", ProbeFailures: 1, Registry: reg})
	h.g.SetBackends("p", []Backend{hung.backend("p"), good.backend("p")})

	type result struct {
		code    int
		backend string
	}
	res := make(chan result, 1)
	go func() {
		code, be := h.post(t)
		res <- result{code, be}
	}()
	within(t, entered, 5*time.Second, "request at the hung backend")
	down.Store(true)
	h.g.probeAll(context.Background())
	if r := within(t, res, 5*time.Second, "the rescued request"); r.code != http.StatusOK || r.backend != "good" {
		t.Fatalf("got %+v", r)
	}
	if n := testutil.ToFloat64(h.g.metrics.retries.WithLabelValues("down")); n != 1 {
		t.Fatalf("retries{reason=down} = %v", n)
	}
}

func TestMetrics(t *testing.T) {
	a := newBackend(t, "a", echoHandler("a"))
	reg := prometheus.NewRegistry()
	h := newHarness(t, Options{Registry: reg})
	h.g.SetBackends("p", []Backend{a.backend("p")})
	for range 3 {
		h.post(t)
	}
	h.do(t, http.MethodGet, "/nowhere", "")
	if n := testutil.ToFloat64(h.g.metrics.requests.WithLabelValues("p", "a", "200")); n != 3 {
		t.Errorf("requests_total{backend=a,code=200} = %v", n)
	}
	if n := testutil.ToFloat64(h.g.metrics.requests.WithLabelValues("none", "none", "404")); n != 1 {
		t.Errorf("requests_total{code=404} = %v", n)
	}
	text := gatherText(t, reg)
	for _, want := range []string{
		`tidegpu_gateway_backend_in_flight{backend="a",pool="p"} 0`,
		`tidegpu_gateway_backend_healthy{backend="a",pool="p"} 1`,
		`tidegpu_gateway_backend_metrics_fresh{backend="a",pool="p",source="gateway"} 0`,
		`tidegpu_gateway_request_duration_seconds_count 4`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("missing %s in:\n%s", want, text)
		}
	}
	h.g.SetBackends("p", nil)
	if text := gatherText(t, reg); strings.Contains(text, `backend="a"`) {
		t.Errorf("series of removed backend remain:\n%s", text)
	}
}

func gatherText(t testing.TB, reg prometheus.Gatherer) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			sb.WriteString(mf.GetName())
			sb.WriteString("{")
			for i, l := range m.GetLabel() {
				if i > 0 {
					sb.WriteString(",")
				}
				fmt.Fprintf(&sb, "%s=%q", l.GetName(), l.GetValue())
			}
			sb.WriteString("} ")
			switch {
			case m.Gauge != nil:
				fmt.Fprint(&sb, m.GetGauge().GetValue())
			case m.Counter != nil:
				fmt.Fprint(&sb, m.GetCounter().GetValue())
			case m.Histogram != nil:
				fmt.Fprint(&sb, m.GetHistogram().GetSampleCount())
			}
			sb.WriteString("\n")
			if m.Histogram != nil {
				fmt.Fprintf(&sb, "%s_count %d\n", mf.GetName(), m.GetHistogram().GetSampleCount())
			}
		}
	}
	return sb.String()
}

func TestNewValidatesOptions(t *testing.T) {
	for field, opts := range map[string]Options{
		"Policy":           {Policy: "random"},
		"MaxBodyBytes":     {MaxBodyBytes: -1},
		"ProbePath":        {ProbePath: "healthz"},
		"ProbeTimeout":     {ProbeTimeout: -time.Second},
		"ProbeFailures":    {ProbeFailures: -1},
		"ProbeBeforeAdmit": {ProbeBeforeAdmit: true, ProbeInterval: -1},
		"EjectFor":         {EjectFor: -time.Second},
		"MaxEjectFor":      {EjectFor: time.Minute, MaxEjectFor: time.Second},
		"DialTimeout":      {DialTimeout: -1},
		"MetricsInterval":  {MetricsInterval: -1},
		"MetricsMaxAge":    {MetricsMaxAge: -1},
		"LatencyDecay":     {LatencyDecay: -1},
	} {
		if _, err := New(opts); err == nil || !strings.Contains(err.Error(), "Options."+field) {
			t.Errorf("%s: error %v does not name the field", field, err)
		}
	}
	g, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	g.Close()
	g.Close() // idempotent

	reg := prometheus.NewRegistry()
	g1, err := New(Options{Registry: reg, ProbeInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(Options{Registry: reg, ProbeInterval: -1}); err == nil || !strings.Contains(err.Error(), "Options.Registry") {
		t.Errorf("second gateway on one registry: %v", err)
	}
	g1.Close()
	g2, err := New(Options{Registry: reg, ProbeInterval: -1})
	if err != nil {
		t.Fatalf("after Close the registry is free again: %v", err)
	}
	g2.Close()
}

func TestSetBackendsKeepsStateAndIgnoresBadEntries(t *testing.T) {
	a := newBackend(t, "a", echoHandler("a"))
	h := newHarness(t, Options{})
	h.g.SetBackends("p", []Backend{a.backend("p"), {ID: "", Address: "x:1"}, {ID: "noaddr"}, a.backend("p")})
	if got := h.g.Backends(); len(got) != 1 || got[0].Weight != DefaultWeight {
		t.Fatalf("Backends() = %+v", got)
	}
	h.post(t)
	heavier := a.backend("p")
	heavier.Weight = 300
	h.g.SetBackends("p", []Backend{heavier})
	if s := status(t, h.g, "a"); s.Requests != 1 || s.Weight != 300 || s.EWMALatency <= 0 {
		t.Fatalf("state not kept across SetBackends: %+v", s)
	}
	// Same ID at a new address is a new backend.
	moved := heavier
	moved.Address = refusedAddr(t)
	h.g.SetBackends("p", []Backend{moved})
	if s := status(t, h.g, "a"); s.Requests != 0 || s.Address != moved.Address {
		t.Fatalf("moved backend: %+v", s)
	}
}

func TestHopHeaderRemoval(t *testing.T) {
	h := http.Header{
		"Connection":        {"close, X-Foo", "x-bar"},
		"X-Foo":             {"1"},
		"X-Bar":             {"2"},
		"Keep-Alive":        {"timeout=5"},
		"Transfer-Encoding": {"chunked"},
		"Te":                {"trailers"},
		"Upgrade":           {"websocket"},
		"Content-Type":      {"application/json"},
	}
	// An answer's fields, passed on (passable).
	var fields h1.Fields
	for k, vv := range h {
		for _, v := range vv {
			fields = append(fields, h1.Field{Name: k, Value: v})
		}
	}
	if left := passable(fields); len(left) != 1 || left[0].Name != "Content-Type" {
		t.Fatalf("answer: left %v", left)
	}
	// A request's header, sent on (outboundHeader), but for what the
	// gateway sets itself: X-Forwarded-Proto, the User-Agent placeholder
	// and Te: trailers, asked for by the client.
	out := outboundHeader(&http.Request{Header: h})
	for _, k := range []string{"X-Forwarded-Proto", "User-Agent"} {
		delete(out, k)
	}
	if te := out["Te"]; len(te) != 1 || te[0] != "trailers" {
		t.Fatalf("request: Te %q, want trailers", te)
	}
	delete(out, "Te")
	if len(out) != 1 || out.Get("Content-Type") == "" {
		t.Fatalf("request: left %v", out)
	}
}

// lastPolicy always picks the last candidate.
type lastPolicy struct{}

func (lastPolicy) Pick(cands []*Upstream, _ *http.Request) *Upstream { return cands[len(cands)-1] }

func TestCustomPolicy(t *testing.T) {
	a := newBackend(t, "a", echoHandler("a"))
	b := newBackend(t, "b", echoHandler("b"))
	h := newHarness(t, Options{Policy: "ignored", CustomPolicy: lastPolicy{}})
	h.g.SetBackends("p", []Backend{a.backend("p"), b.backend("p")})
	for range 3 {
		if _, be := h.post(t); be != "b" {
			t.Fatalf("got %q, want b", be)
		}
	}
}

// panicOncePolicy panics at its first pick and picks the last candidate
// after that.
type panicOncePolicy struct{ done *atomic.Bool }

func (p panicOncePolicy) Pick(cands []*Upstream, _ *http.Request) *Upstream {
	if !p.done.Swap(true) {
		panic("policy bug")
	}
	return cands[len(cands)-1]
}

// TestAPanicWhileServingStaysInItsRequest: serve runs on a goroutine of its
// own (serveApart), where an unrecovered panic would end the process; it is
// raised again on the handler's goroutine, so the server's recovery closes
// that one connection and the gateway goes on serving.
func TestAPanicWhileServingStaysInItsRequest(t *testing.T) {
	a := newBackend(t, "a", echoHandler("a"))
	h := newHarness(t, Options{CustomPolicy: panicOncePolicy{done: new(atomic.Bool)}})
	h.g.SetBackends("p", []Backend{a.backend("p")})
	req, _ := http.NewRequest(http.MethodPost, h.srv.URL+"/api/generate", strings.NewReader(`{}`))
	if resp, err := h.client.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("the request whose pick panicked got %s, want its connection closed", resp.Status)
	}
	if _, be := h.post(t); be != "a" {
		t.Fatalf("after the panic: answered by %q, want a", be)
	}
}

func TestTrailersForwarded(t *testing.T) {
	a := newBackend(t, "a", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Checksum")
		w.Header().Set("Content-Type", "application/x-ndjson")
		fmt.Fprintln(w, `{"done":true}`)
		w.(http.Flusher).Flush()
		w.Header().Set("X-Checksum", "abc")
		w.Header().Set(http.TrailerPrefix+"X-Late", "xyz")
	})
	h := newHarness(t, Options{})
	h.g.SetBackends("p", []Backend{a.backend("p")})
	resp, body := h.do(t, http.MethodPost, "/api/chat", `{}`, "Te", "trailers")
	if body != "{\"done\":true}\n" || resp.Trailer.Get("X-Checksum") != "abc" || resp.Trailer.Get("X-Late") != "xyz" {
		t.Fatalf("body %q trailers %v", body, resp.Trailer)
	}
}
