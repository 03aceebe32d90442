package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/tidegpu/tidegpu/internal/gateway/h1"
	"k8s.io/utils/clock"
)

// The activator holds requests for a pool that has no ready instance and
// can grow (a pool scaled to zero), the way Knative's activator does: the
// request wakes the pool at once (Options.Waker) and waits in a bounded
// per-pool queue until an instance is published, then the queue drains to
// it in arrival order and balancing resumes. Streaming clients get
// keep-alive bytes in their stream's own format meanwhile (an SSE comment
// for OpenAI streams, an empty chunk for Ollama's NDJSON), so that proxies
// and SDKs do not time out; other clients wait silently. Past the queue
// bound the request is answered 429, past the wait limit 503, both with
// Retry-After.

// Activator defaults.
const (
	// DefaultActivatorQueue bounds the requests held per pool.
	DefaultActivatorQueue = 100
	// DefaultActivatorWait bounds how long a held request waits: a GPU
	// instance's cold start (boot, image, model load) takes minutes.
	DefaultActivatorWait = 10 * time.Minute
	// DefaultKeepAliveEvery paces the keep-alive bytes of held streams,
	// well inside the 60 s idle timeout of common proxies.
	DefaultKeepAliveEvery = 10 * time.Second
)

// Waker wakes a pool that has no ready instance. Wake reports whether the
// pool can grow (it autoscales and may have an instance); the gateway
// holds the request only then, and answers as usual otherwise.
type Waker interface {
	Wake(pool string) bool
}

// activator is the per-pool wait queues and held counts.
type activator struct {
	bound     int
	wait      time.Duration
	keepAlive time.Duration

	mu     sync.Mutex
	queues map[string][]*waiter // by the request's pool ("" when it names none)
	held   map[string]int       // by woken pool
}

// waiter is one held request; its turn is closed when it heads its queue.
type waiter struct {
	turn chan struct{}
}

func newActivator(bound int, wait, keepAlive time.Duration) *activator {
	return &activator{bound: bound, wait: wait, keepAlive: keepAlive, queues: map[string][]*waiter{}, held: map[string]int{}}
}

// enqueue adds a waiter for key, counted as held on pools; false when the
// queue is full.
func (a *activator) enqueue(key string, pools []string) (*waiter, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	q := a.queues[key]
	if len(q) >= a.bound {
		return nil, false
	}
	w := &waiter{turn: make(chan struct{})}
	if len(q) == 0 {
		close(w.turn)
	}
	a.queues[key] = append(q, w)
	for _, p := range pools {
		a.held[p]++
	}
	return w, true
}

// leave removes w, handing the turn on if it headed the queue.
func (a *activator) leave(key string, pools []string, w *waiter) {
	a.mu.Lock()
	defer a.mu.Unlock()
	q := a.queues[key]
	i := slices.Index(q, w)
	if i < 0 {
		return
	}
	q = slices.Delete(q, i, i+1)
	if i == 0 && len(q) > 0 {
		close(q[0].turn)
	}
	if len(q) == 0 {
		delete(a.queues, key)
	} else {
		a.queues[key] = q
	}
	for _, p := range pools {
		if a.held[p]--; a.held[p] <= 0 {
			delete(a.held, p)
		}
	}
}

// Held is how many requests the activator holds for pool (a request that
// names no pool counts for every pool it woke), plus those waiting for it
// in the fair queue (Queued). Autoscaling signals count them as in flight:
// they are load the pool has not served yet.
func (g *Gateway) Held(pool string) int {
	g.act.mu.Lock()
	n := g.act.held[pool]
	g.act.mu.Unlock()
	return n + g.Queued(pool)
}

// wake asks the waker to wake the request's pool (every pool the gateway
// knows without a ready backend, for a request that names none) and
// returns those that can grow.
func (e *exchange) wake() []string {
	g := e.g
	if g.waker == nil {
		return nil
	}
	var pools []string
	if e.pool != "" {
		pools = []string{e.pool}
	} else {
		t := g.table.Load()
		for _, name := range t.known {
			if !slices.ContainsFunc(t.pools[name], e.eligible) {
				pools = append(pools, name)
			}
		}
	}
	var out []string
	for _, p := range pools {
		if g.waker.Wake(p) {
			out = append(out, p)
		}
	}
	return out
}

// hold waits in the activator for a backend of the woken pools and
// returns it, or nil with e.waitErr set (queue full, wait over) or the
// client gone.
func (e *exchange) hold(pools []string) *Upstream {
	g, act := e.g, e.g.act
	w, ok := act.enqueue(e.pool, pools)
	if !ok {
		e.waitErr = apiError{http.StatusTooManyRequests, "activator_queue_full", fmt.Sprintf("the pool is waking up and %d requests already wait for it (--activator-queue): retry later", act.bound)}
		return nil
	}
	defer act.leave(e.pool, pools, w)
	g.metrics.activated()
	ka := e.keepAliveKind()
	h1.Detach(e.r.Context()) // a wait for an instance, not for a socket
	deadline := g.clock.NewTimer(act.wait)
	defer deadline.Stop()
	var tick clock.Timer
	var tickC <-chan time.Time
	if ka != keepNone {
		tick = g.clock.NewTimer(act.keepAlive)
		defer func() { tick.Stop() }()
		tickC = tick.C()
	}
	turn := w.turn
	for {
		var ch <-chan struct{}
		if turn == nil {
			ch = g.changeCh()
			if u := e.pick(); u != nil {
				return u
			}
			if e.saturated && g.fair != nil {
				// An instance is up and already full: wait in the fair
				// queue, leaving the turn to the next held request.
				act.leave(e.pool, pools, w)
				u, _ := e.queue()
				return u
			}
		}
		select {
		case <-turn:
			turn = nil
		case <-ch:
		case <-tickC:
			if !e.keepAlive(ka) {
				return nil // the client went away
			}
			tick = g.clock.NewTimer(act.keepAlive)
			tickC = tick.C()
		case <-deadline.C():
			e.waitErr = apiError{http.StatusServiceUnavailable, "activator_timeout", fmt.Sprintf("no instance of the pool became ready within %s (--activator-wait): retry later", act.wait)}
			return nil
		case <-e.r.Context().Done():
			return nil
		}
	}
}

// keepKind is the stream format of a held request.
type keepKind int

const (
	keepNone keepKind = iota
	keepSSE
	keepOllamaChat
	keepOllamaGenerate
)

// keepAliveKind says how the held request's client reads its answer: an
// Ollama chat or generate streams NDJSON unless "stream": false, an OpenAI
// request streams SSE with "stream": true.
func (e *exchange) keepAliveKind() keepKind {
	var b struct {
		Stream *bool  `json:"stream"`
		Model  string `json:"model"`
	}
	if e.r.Method != http.MethodPost || json.Unmarshal(e.body, &b) != nil {
		return keepNone
	}
	e.model = b.Model
	switch e.path {
	case "/api/chat", "/api/generate":
		if b.Stream != nil && !*b.Stream {
			return keepNone
		}
		if e.path == "/api/chat" {
			return keepOllamaChat
		}
		return keepOllamaGenerate
	case "/v1/chat/completions", "/v1/completions", "/v1/responses":
		if b.Stream != nil && *b.Stream {
			return keepSSE
		}
	}
	return keepNone
}

// keepAlive writes one keep-alive in the stream's format, committing the
// answer's status and headers the first time. False when the client is
// gone.
func (e *exchange) keepAlive(k keepKind) bool {
	if !e.kept {
		h := e.w.Header()
		if k == keepSSE {
			h.Set("Content-Type", "text/event-stream")
		} else {
			h.Set("Content-Type", "application/x-ndjson")
		}
		h.Set("Cache-Control", "no-cache")
		e.w.WriteHeader(http.StatusOK)
		e.kept, e.keptKind = true, k
	}
	var line []byte
	now := e.g.clock.Now().UTC().Format(time.RFC3339Nano)
	switch k {
	case keepSSE:
		line = []byte(": waiting for an instance to start\n\n")
	case keepOllamaChat:
		line, _ = json.Marshal(map[string]any{"model": e.model, "created_at": now,
			"message": map[string]string{"role": "assistant", "content": ""}, "done": false})
		line = append(line, '\n')
	default:
		line, _ = json.Marshal(map[string]any{"model": e.model, "created_at": now, "response": "", "done": false})
		line = append(line, '\n')
	}
	if _, err := e.w.Write(line); err != nil {
		return false
	}
	return http.NewResponseController(e.w).Flush() == nil
}

// failKept ends an answer whose status the keep-alives already committed
// with an error in the stream's own format: an SSE event carrying OpenAI's
// error object, or an Ollama NDJSON line {"error": ...}.
func (e *exchange) failKept(ae apiError) {
	var line []byte
	if e.keptKind == keepSSE {
		line = append(append([]byte("data: "), errorBody("/v1", ae)...), "\n\n"...)
	} else {
		line = append(errorBody("/api", ae), '\n')
	}
	_, _ = e.w.Write(line)
	e.g.metrics.request(noBackend, noBackend, ae.status, time.Since(e.start))
}
