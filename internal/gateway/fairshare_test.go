package gateway

import (
	"encoding/json"
	"fmt"
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

	"github.com/tidegpu/tidegpu/internal/fairq"
)

// gatedBackend answers each request only when the test releases it, and
// records the order requests reached it (their X-Order header) and the
// most it had at once.
type gatedBackend struct {
	*testBackend
	release chan struct{}
	mu      sync.Mutex
	order   []string
	now     int
	most    int
}

func newGatedBackend(t *testing.T, id string) *gatedBackend {
	b := &gatedBackend{release: make(chan struct{})}
	b.testBackend = newBackend(t, id, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		b.mu.Lock()
		b.order = append(b.order, r.Header.Get("X-Order"))
		b.now++
		b.most = max(b.most, b.now)
		b.mu.Unlock()
		select {
		case <-b.release:
		case <-r.Context().Done():
		}
		b.mu.Lock()
		b.now--
		b.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"done":true}`)
	})
	t.Cleanup(func() { close(b.release) })
	return b
}

func (b *gatedBackend) seen() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.order...)
}

// tenantHeaders stands in for the tenant middleware: X-Tenant, X-Weight
// and X-Priority become the request's gateway.Tenant.
func tenantHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if name := r.Header.Get("X-Tenant"); name != "" {
			weight := 1
			if r.Header.Get("X-Weight") == "3" {
				weight = 3
			}
			p, _ := fairq.ParsePriority(r.Header.Get("X-Priority"))
			r = r.WithContext(WithTenant(r.Context(), Tenant{Name: name, Weight: weight, Priority: p}))
		}
		next.ServeHTTP(w, r)
	})
}

// fairHarness is a gateway with a cap behind tenantHeaders.
type fairHarness struct {
	g   *Gateway
	url string
	reg *prometheus.Registry
}

func newFairHarness(t *testing.T, opts Options) *fairHarness {
	opts.ProbeInterval = -1
	reg := prometheus.NewRegistry()
	opts.Registry = reg
	g, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(tenantHeaders(g))
	t.Cleanup(func() { srv.Close(); g.Close() })
	return &fairHarness{g: g, url: srv.URL, reg: reg}
}

type answer struct {
	order, code, retry string
	status             int
	body               string
}

// send posts one request in the background; its answer comes on the
// returned channel.
func (h *fairHarness) send(t *testing.T, path, order string, hdr ...string) <-chan answer {
	ch := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, h.url+path, strings.NewReader(`{"model":"m"}`))
		req.Header.Set("X-Order", order)
		req.Header.Set(PoolHeader, "p")
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			ch <- answer{order: order}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var e struct {
			Error struct{ Code string } `json:"error"`
		}
		_ = json.Unmarshal(b, &e)
		ch <- answer{order: order, status: resp.StatusCode, code: e.Error.Code, retry: resp.Header.Get("Retry-After"), body: string(b)}
	}()
	return ch
}

// until polls cond (a condition, not a sleep standing in for one) for up
// to 5 s.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestFairShareOrder(t *testing.T) {
	for _, tc := range []struct {
		name  string
		hdr   map[string][]string // order -> extra headers
		queue []string            // arrival order after the first
		want  []string
	}{
		{"without tenants: FIFO", nil,
			[]string{"a1", "a2", "a3", "a4", "b1"}, []string{"a0", "a1", "a2", "a3", "a4", "b1"}},
		{"a burst does not hold a light tenant back",
			map[string][]string{"a": {"X-Tenant", "a"}, "b": {"X-Tenant", "b"}},
			[]string{"a1", "a2", "a3", "a4", "b1", "b2"}, []string{"a0", "a1", "b1", "a2", "b2", "a3", "a4"}},
		{"weight 3 against 1",
			map[string][]string{"a": {"X-Tenant", "a", "X-Weight", "3"}, "b": {"X-Tenant", "b"}},
			[]string{"b1", "b2", "b3", "a1", "a2", "a3", "a4"}, []string{"a0", "a1", "a2", "a3", "b1", "a4", "b2", "b3"}},
		{"high before normal before low",
			map[string][]string{"a": {"X-Tenant", "a", "X-Priority", "low"}, "b": {"X-Tenant", "b"}, "c": {"X-Tenant", "c", "X-Priority", "high"}},
			[]string{"a1", "b1", "c1", "a2", "b2"}, []string{"a0", "c1", "b1", "b2", "a1", "a2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newFairHarness(t, Options{BackendMaxInFlight: 1})
			b := newGatedBackend(t, "b1")
			h.g.SetBackends("p", []Backend{b.backend("p")})
			hdr := func(order string) []string { return tc.hdr[order[:1]] }
			var answers []<-chan answer
			answers = append(answers, h.send(t, "/api/chat", "a0", hdr("a0")...))
			until(t, "the first request on the backend", func() bool { return len(b.seen()) == 1 })
			for i, o := range tc.queue {
				answers = append(answers, h.send(t, "/api/chat", o, hdr(o)...))
				until(t, o+" queued", func() bool { return h.g.Queued("p") == i+1 })
			}
			if tc.hdr != nil {
				q := testutil.ToFloat64(gaugeOf(t, h.reg, "tidegpu_gateway_queued_requests", "p", tc.queue[0][:1]))
				if q < 1 {
					t.Errorf("queued gauge for %s: %v", tc.queue[0][:1], q)
				}
			}
			if got := h.g.Held("p"); got != len(tc.queue) {
				t.Errorf("Held = %d, want the %d queued", got, len(tc.queue))
			}
			for i := range tc.want {
				until(t, "request "+tc.want[i]+" on the backend", func() bool { return len(b.seen()) == i+1 })
				b.release <- struct{}{}
			}
			for _, ch := range answers {
				if a := within(t, ch, 5*time.Second, "an answer"); a.status != http.StatusOK {
					t.Errorf("%s: %d %s", a.order, a.status, a.body)
				}
			}
			if got := strings.Join(b.seen(), " "); got != strings.Join(tc.want, " ") {
				t.Errorf("order %s, want %s", got, strings.Join(tc.want, " "))
			}
			if b.most != 1 {
				t.Errorf("the backend had %d requests at once, want the cap 1", b.most)
			}
			if n := h.g.InFlight("b1"); n != 0 || h.g.Queued("p") != 0 {
				t.Errorf("in flight %d, queued %d after the end", n, h.g.Queued("p"))
			}
		})
	}
}

// gaugeOf returns the collector of one series of a gauge for testutil.
func gaugeOf(t *testing.T, reg *prometheus.Registry, name, pool, tenant string) prometheus.Collector {
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name})
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["pool"] == pool && labels["tenant"] == tenant {
				g.Set(m.GetGauge().GetValue())
			}
		}
	}
	return g
}

func TestFairShareSheds(t *testing.T) {
	h := newFairHarness(t, Options{BackendMaxInFlight: 1, BackendQueue: 2})
	b := newGatedBackend(t, "b1")
	h.g.SetBackends("p", []Backend{b.backend("p")})
	a0 := h.send(t, "/v1/chat/completions", "a0", "X-Tenant", "a")
	until(t, "a0 on the backend", func() bool { return len(b.seen()) == 1 })
	a1 := h.send(t, "/v1/chat/completions", "a1", "X-Tenant", "a")
	until(t, "a1 queued", func() bool { return h.g.Queued("p") == 1 })
	a2 := h.send(t, "/v1/chat/completions", "a2", "X-Tenant", "a")
	until(t, "a2 queued", func() bool { return h.g.Queued("p") == 2 })
	// The queue is full: b1 takes a's newest place, a2 is answered 429.
	b1 := h.send(t, "/v1/chat/completions", "b1", "X-Tenant", "b")
	got := within(t, a2, 5*time.Second, "a2 shed")
	if got.status != http.StatusTooManyRequests || got.code != "queue_full" || got.retry == "" {
		t.Fatalf("a2: %d %q Retry-After %q, want 429 queue_full with Retry-After", got.status, got.code, got.retry)
	}
	// a's next arrival ranks below everything waiting: refused at once.
	got = within(t, h.send(t, "/v1/chat/completions", "a3", "X-Tenant", "a"), 5*time.Second, "a3 refused")
	if got.status != http.StatusTooManyRequests || got.code != "queue_full" {
		t.Fatalf("a3: %d %q, want 429 queue_full", got.status, got.code)
	}
	// A low-priority arrival too, while a high one displaces the newest
	// of the normal ones with the largest finish tag (a1 and b1 tie: b1).
	got = within(t, h.send(t, "/api/chat", "c1", "X-Tenant", "c", "X-Priority", "low"), 5*time.Second, "c1 refused")
	if got.status != http.StatusTooManyRequests || !strings.Contains(got.body, `"error":"`) {
		t.Fatalf("c1: %d %s, want 429 in Ollama's shape", got.status, got.body)
	}
	d1 := h.send(t, "/v1/chat/completions", "d1", "X-Tenant", "d", "X-Priority", "high")
	if got = within(t, b1, 5*time.Second, "b1 displaced"); got.status != http.StatusTooManyRequests {
		t.Fatalf("b1: %d, want 429", got.status)
	}
	for _, want := range []string{"d1", "a1"} {
		until(t, want+" on the backend", func() bool { return len(b.seen()) > 0 })
		b.release <- struct{}{}
		until(t, "the next", func() bool { s := b.seen(); return s[len(s)-1] == want })
	}
	b.release <- struct{}{}
	for _, ch := range []<-chan answer{a0, a1, d1} {
		if a := within(t, ch, 5*time.Second, "an answer"); a.status != http.StatusOK {
			t.Errorf("%s: %d", a.order, a.status)
		}
	}
	if got := strings.Join(b.seen(), " "); got != "a0 d1 a1" {
		t.Errorf("served %s, want a0 d1 a1", got)
	}
	shed, err := testutil.GatherAndCount(h.reg, "tidegpu_gateway_queue_shed_total")
	if err != nil || shed != 4 { // a: displaced, full; c: full; b: displaced
		t.Errorf("shed series %d (%v), want 4", shed, err)
	}
}

func TestFairShareWaitBound(t *testing.T) {
	h := newFairHarness(t, Options{BackendMaxInFlight: 1, BackendQueueWait: 100 * time.Millisecond})
	b := newGatedBackend(t, "b1")
	h.g.SetBackends("p", []Backend{b.backend("p")})
	a0 := h.send(t, "/v1/chat/completions", "a0")
	until(t, "a0 on the backend", func() bool { return len(b.seen()) == 1 })
	got := within(t, h.send(t, "/v1/chat/completions", "a1"), 5*time.Second, "a1 to time out")
	if got.status != http.StatusTooManyRequests || got.code != "queue_timeout" || got.retry == "" {
		t.Fatalf("a1: %d %q Retry-After %q, want 429 queue_timeout", got.status, got.code, got.retry)
	}
	b.release <- struct{}{}
	within(t, a0, 5*time.Second, "a0")
	if h.g.Queued("p") != 0 || h.g.InFlight("b1") != 0 {
		t.Errorf("queued %d, in flight %d", h.g.Queued("p"), h.g.InFlight("b1"))
	}
}

// A waiting request goes to a backend published while it waits, and not
// to one drained meanwhile; a pool with no backend answers as before.
func TestFairShareNewBackendAndDrain(t *testing.T) {
	h := newFairHarness(t, Options{BackendMaxInFlight: 1, WaitForBackend: -1})
	b1, b2 := newGatedBackend(t, "b1"), newGatedBackend(t, "b2")
	h.g.SetBackends("p", []Backend{b1.backend("p")})
	a0 := h.send(t, "/api/chat", "a0")
	until(t, "a0 on b1", func() bool { return len(b1.seen()) == 1 })
	a1 := h.send(t, "/api/chat", "a1")
	until(t, "a1 queued", func() bool { return h.g.Queued("p") == 1 })
	d := b1.backend("p")
	d.Draining = true
	h.g.SetBackends("p", []Backend{d, b2.backend("p")})
	until(t, "a1 on b2", func() bool { return len(b2.seen()) == 1 })
	b1.release <- struct{}{}
	b2.release <- struct{}{}
	for _, ch := range []<-chan answer{a0, a1} {
		if a := within(t, ch, 5*time.Second, "an answer"); a.status != http.StatusOK {
			t.Errorf("%s: %d", a.order, a.status)
		}
	}
	h.g.SetBackends("p", nil)
	if a := within(t, h.send(t, "/api/chat", "x"), 5*time.Second, "no backend"); a.status != http.StatusServiceUnavailable {
		t.Errorf("no backend: %d, want 503", a.status)
	}
}

func TestFairShareOptions(t *testing.T) {
	for _, o := range []Options{{BackendMaxInFlight: -1}, {BackendQueue: -1}, {BackendQueueWait: -time.Second}} {
		if _, err := New(o); err == nil || !strings.Contains(err.Error(), "Options.Backend") {
			t.Errorf("New(%+v): %v, want an error naming the field", o, err)
		}
	}
}

func TestHeadroom(t *testing.T) {
	for slots, want := range map[int]int{1: 1, 4: 1, 15: 1, 16: 2, 24: 3, 64: 8} {
		if got := headroom(slots); got != want {
			t.Errorf("headroom(%d) = %d, want %d", slots, got, want)
		}
	}
}

// mustYieldLocked: who leaves the last free slots of a pool to whom.
func TestMustYield(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	type use struct {
		name              string
		inflight, waiting int
		ago               time.Duration // since its last start, end or arrival
		weight            int
		priority          fairq.Priority
	}
	for _, tc := range []struct {
		name        string
		slots, free int
		uses        []use
		who         Tenant
		want        bool
	}{
		{"alone in the pool", 16, 1, []use{{name: "a", inflight: 15}}, Tenant{Name: "a"}, false},
		{"free slots beyond the headroom", 16, 3, []use{{name: "a", inflight: 12}, {name: "b", inflight: 1}}, Tenant{Name: "a"}, false},
		{"over its share, another active below its own", 16, 2, []use{{name: "a", inflight: 12}, {name: "b", inflight: 2}}, Tenant{Name: "a"}, true},
		{"the other idle but seen 5 s ago", 16, 2, []use{{name: "a", inflight: 14}, {name: "b", ago: 5 * time.Second}}, Tenant{Name: "a"}, true},
		{"the other gone for over fairActiveFor", 16, 2, []use{{name: "a", inflight: 14}, {name: "b", ago: 11 * time.Second}}, Tenant{Name: "a"}, false},
		{"the other only waiting", 16, 2, []use{{name: "a", inflight: 14}, {name: "b", waiting: 1, ago: time.Minute}}, Tenant{Name: "a"}, true},
		{"below its share it takes the last slot", 16, 1, []use{{name: "a", inflight: 12}, {name: "b", inflight: 3}}, Tenant{Name: "b"}, false},
		{"nothing in flight: always may", 1, 1, []use{{name: "a"}, {name: "b", ago: time.Second}}, Tenant{Name: "a"}, false},
		{"the other over its share too", 16, 2, []use{{name: "a", inflight: 6}, {name: "b", inflight: 8}}, Tenant{Name: "a"}, false},
		{"weight 3 raises the share", 16, 2, []use{{name: "a", inflight: 11, weight: 3}, {name: "b", inflight: 3}}, Tenant{Name: "a", Weight: 3}, false},
		{"weight 3, past its share", 16, 2, []use{{name: "a", inflight: 12, weight: 3}, {name: "b", inflight: 2}}, Tenant{Name: "a", Weight: 3}, true},
		{"a lower class is not owed the headroom", 16, 2, []use{{name: "a", inflight: 14, priority: fairq.High}, {name: "b", inflight: 0, priority: fairq.Normal}}, Tenant{Name: "a", Priority: fairq.High}, false},
		{"a higher class is", 16, 2, []use{{name: "a", inflight: 14, priority: fairq.Low}, {name: "b", inflight: 0, priority: fairq.High}}, Tenant{Name: "a", Priority: fairq.Low}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fairShare{cap: 1, use: map[string]map[string]*tenantUse{"p": {}}}
			for _, u := range tc.uses {
				f.use["p"][u.name] = &tenantUse{inflight: u.inflight, waiting: u.waiting, last: now.Add(-u.ago),
					weight: weightOf(Tenant{Weight: u.weight}), priority: u.priority}
			}
			if got := f.mustYieldLocked("p", tc.who, tc.slots, tc.free, now); got != tc.want {
				t.Errorf("mustYield = %v, want %v", got, tc.want)
			}
		})
	}
}

// A light tenant's request arriving at a pool kept full by a heavy one
// starts at once on the slot the heavy one left (the headroom), ahead of
// the heavy one's waiting request, which starts when one of the heavy
// one's own ends.
func TestFairShareHeadroomLetsALightTenantIn(t *testing.T) {
	h := newFairHarness(t, Options{BackendMaxInFlight: 1})
	var bs []*gatedBackend
	var backends []Backend
	for i := range 4 { // 4 slots: a headroom of 1
		b := newGatedBackend(t, fmt.Sprint("b", i))
		bs = append(bs, b)
		backends = append(backends, b.backend("p"))
	}
	h.g.SetBackends("p", backends)
	seen := func() []string {
		var out []string
		for _, b := range bs {
			out = append(out, b.seen()...)
		}
		return out
	}
	holding := func(order string) *gatedBackend {
		for _, b := range bs {
			if slices.Contains(b.seen(), order) {
				return b
			}
		}
		return nil
	}
	// b has been active: one request, answered.
	b0 := h.send(t, "/api/chat", "b0", "X-Tenant", "b")
	until(t, "b0 on a backend", func() bool { return len(seen()) == 1 })
	holding("b0").release <- struct{}{}
	within(t, b0, 5*time.Second, "b0's answer")
	// a fills three slots (its share is 2, the fourth is the headroom).
	var as []<-chan answer
	for i := range 4 {
		as = append(as, h.send(t, "/api/chat", fmt.Sprint("a", i), "X-Tenant", "a"))
		if i < 3 {
			until(t, fmt.Sprint("a", i, " on a backend"), func() bool { return len(seen()) == i+2 })
		}
	}
	until(t, "a3 queued", func() bool { return h.g.Queued("p") == 1 })
	// b's next request takes the free slot without waiting for a release.
	b1 := h.send(t, "/api/chat", "b1", "X-Tenant", "b")
	until(t, "b1 on a backend ahead of a3", func() bool { return holding("b1") != nil })
	if holding("a3") != nil {
		t.Fatalf("a3 took the headroom: served %v", seen())
	}
	// When b1 ends its slot is the headroom again (b was active just now);
	// when one of a's ends, a3 takes that one.
	holding("b1").release <- struct{}{}
	within(t, b1, 5*time.Second, "b1's answer")
	holding("a0").release <- struct{}{}
	until(t, "a3 on a backend", func() bool { return holding("a3") != nil })
	for i, ch := range as {
		if i > 0 {
			holding(fmt.Sprint("a", i)).release <- struct{}{}
		}
		if a := within(t, ch, 5*time.Second, "an answer"); a.status != http.StatusOK {
			t.Errorf("%s: %d", a.order, a.status)
		}
	}
	if h.g.Queued("p") != 0 {
		t.Errorf("%d still queued", h.g.Queued("p"))
	}
}
