package gateway

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/tidegpu/tidegpu/internal/fairq"
)

// Fair share under saturation. With Options.BackendMaxInFlight set, a
// backend that has that many requests in flight takes no more (the cap an
// inference server has anyway, vLLM's max_num_seqs: past it the server
// queues by itself, first come first served, where the gateway can no
// longer choose). When every eligible backend of a request's pool is at
// the cap the pool is saturated and the request waits at the gateway in
// the pool's queue, whose order is package fairq's: strict by priority
// class, then weighted fair queueing across tenants (the tenant, weight
// and priority the tenant middleware puts in the request's context; a
// request without them is tenant "" of weight 1, so without API keys the
// queue is FIFO). A freed slot goes to the queue's head. A request is
// answered 429 with Retry-After when the queue is full and it ranks below
// every waiting request (or when a request ranking above it takes its
// place), and when it waited Options.BackendQueueWait.
//
// While a pool's queue is not empty, a new request of that pool queues
// too, even if a slot is free at that instant: the slot is the head's.

// Fair-share defaults.
const (
	// DefaultBackendQueue bounds the requests waiting per pool.
	DefaultBackendQueue = 256
	// DefaultBackendQueueWait bounds a waiting request's wait: below the
	// 60 s idle timeout of common proxies, as a waiting client gets no
	// byte.
	DefaultBackendQueueWait = 30 * time.Second
)

// Tenant is who a request is for, as the fair queue sees it.
type Tenant struct {
	// Name is the tenant (a flow of the fair queue).
	Name string
	// Weight is the tenant's share of the dispatches of its class when
	// several tenants wait (1..fairq.MaxWeight; 0 means 1).
	Weight int
	// Priority is the request's class.
	Priority fairq.Priority
}

type tenantKey struct{}

// WithTenant returns ctx carrying the request's tenant for the fair queue
// (set by the tenant middleware in front of the gateway).
func WithTenant(ctx context.Context, t Tenant) context.Context {
	return context.WithValue(ctx, tenantKey{}, t)
}

// TenantOf returns the tenant WithTenant put in ctx, if any.
func TenantOf(ctx context.Context) (Tenant, bool) {
	t, ok := ctx.Value(tenantKey{}).(Tenant)
	return t, ok
}

// anyPool is the pool label of the queue of requests that name no pool.
const anyPool = "any"

// fairShare is the per-pool wait queues.
type fairShare struct {
	cap   int64
	limit int
	wait  time.Duration

	mu     sync.Mutex
	queues map[string]*poolQueue // by the request's pool ("" when it names none)
	nextID uint64
}

type poolQueue struct {
	q       *fairq.Queue
	waiters map[uint64]*fairWaiter
}

// fairWaiter is one waiting request. poke (one buffered signal) tells it
// to look for a slot; shed is closed when another request took its place.
type fairWaiter struct {
	id     uint64
	key    string
	tenant string
	poke   chan struct{}
	shed   chan struct{}
}

// newFairShare checks the options; nil when there is no cap.
func newFairShare(opts Options, bad func(field, format string, args ...any)) *fairShare {
	n, limit, wait := opts.BackendMaxInFlight, opts.BackendQueue, opts.BackendQueueWait
	if n < 0 {
		bad("BackendMaxInFlight", "must not be negative, got %d", n)
	}
	if limit < 0 {
		bad("BackendQueue", "must not be negative, got %d", limit)
	}
	if wait < 0 {
		bad("BackendQueueWait", "must not be negative, got %v", wait)
	}
	if n <= 0 {
		return nil
	}
	if limit == 0 {
		limit = DefaultBackendQueue
	}
	if wait == 0 {
		wait = DefaultBackendQueueWait
	}
	return &fairShare{cap: int64(n), limit: limit, wait: wait, queues: map[string]*poolQueue{}}
}

// full reports whether u is at the cap.
func (g *Gateway) full(u *Upstream) bool {
	return g.fair != nil && u.inflight.Load() >= g.fair.cap
}

// claim counts a request in flight on u, unless u is at the cap.
func (g *Gateway) claim(u *Upstream) bool {
	if g.fair == nil {
		u.inflight.Add(1)
		return true
	}
	for {
		n := u.inflight.Load()
		if n >= g.fair.cap {
			return false
		}
		if u.inflight.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// busy reports whether requests wait for key.
func (f *fairShare) busy(key string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.queues[key] != nil
}

// enqueue adds a waiter for key; nil when the queue refused it.
func (f *fairShare) enqueue(key string, t Tenant) (w *fairWaiter, shed *fairWaiter) {
	f.mu.Lock()
	defer f.mu.Unlock()
	pq := f.queues[key]
	if pq == nil {
		pq = &poolQueue{q: fairq.New(f.limit), waiters: map[uint64]*fairWaiter{}}
		f.queues[key] = pq
	}
	f.nextID++
	w = &fairWaiter{id: f.nextID, key: key, tenant: t.Name, poke: make(chan struct{}, 1), shed: make(chan struct{})}
	ok, victim, did := pq.q.Push(fairq.Request{ID: w.id, Tenant: t.Name, Weight: t.Weight, Priority: t.Priority})
	if did {
		shed = pq.waiters[victim]
		delete(pq.waiters, victim)
		close(shed.shed)
	}
	if !ok {
		if pq.q.Len() == 0 {
			delete(f.queues, key)
		}
		return nil, shed
	}
	pq.waiters[w.id] = w
	return w, shed
}

// isHead reports whether w is next.
func (f *fairShare) isHead(w *fairWaiter) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	pq := f.queues[w.key]
	if pq == nil {
		return false
	}
	h, ok := pq.q.Head()
	return ok && h.ID == w.id
}

// done takes w out of its queue, served or not, and pokes the new head:
// a served head may have left free slots, and a head that gave up leaves
// its turn.
func (f *fairShare) done(w *fairWaiter, served bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	pq := f.queues[w.key]
	if pq == nil || pq.waiters[w.id] == nil {
		return
	}
	if served {
		pq.q.Dispatch(w.id)
	} else {
		pq.q.Remove(w.id)
	}
	delete(pq.waiters, w.id)
	if pq.q.Len() == 0 {
		delete(f.queues, w.key)
		return
	}
	pokeHead(pq)
}

func pokeHead(pq *poolQueue) {
	if h, ok := pq.q.Head(); ok {
		select {
		case pq.waiters[h.ID].poke <- struct{}{}:
		default:
		}
	}
}

// released tells the heads of pool's queue and of the queue of requests
// that name no pool that a slot of pool is free.
func (f *fairShare) released(pool string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, key := range [2]string{pool, ""} {
		if pq := f.queues[key]; pq != nil {
			pokeHead(pq)
		}
	}
}

// waiting returns how many requests wait for key, by tenant.
func (f *fairShare) waiting() map[string]map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]map[string]int, len(f.queues))
	for key, pq := range f.queues {
		out[key] = pq.q.Waiting()
	}
	return out
}

// Queued is how many requests wait for pool at the fair queue (requests
// that name no pool are not counted). Autoscaling counts them as in flight
// (Held): they are load the pool has not served yet.
func (g *Gateway) Queued(pool string) int {
	if g.fair == nil {
		return 0
	}
	g.fair.mu.Lock()
	defer g.fair.mu.Unlock()
	if pq := g.fair.queues[pool]; pq != nil {
		return pq.q.Len()
	}
	return 0
}

// fairNext is next's first step when there is a cap: a request whose pool
// has a queue, or finds it saturated, waits in the queue. done is false
// when it should go on as without a cap (no eligible backend at all).
func (e *exchange) fairNext() (u *Upstream, done bool) {
	if e.g.fair == nil {
		return nil, false
	}
	if !e.g.fair.busy(e.pool) {
		if u := e.pick(); u != nil || !e.saturated {
			return u, u != nil
		}
	}
	return e.queue()
}

// fairWait queues a request that pick found saturated.
func (e *exchange) fairWait() (*Upstream, bool) {
	if e.g.fair == nil || !e.saturated {
		return nil, false
	}
	return e.queue()
}

// queue waits in the fair queue for a slot and returns the backend, or nil
// with e.waitErr set (shed, waited too long) or the client gone; done is
// false if the pool stopped being saturated without a slot (its backends
// went away), for the caller to go on as without a cap.
func (e *exchange) queue() (*Upstream, bool) {
	g, f := e.g, e.g.fair
	t, _ := TenantOf(e.r.Context())
	label := e.pool
	if label == "" {
		label = anyPool
	}
	w, shed := f.enqueue(e.pool, t)
	if shed != nil {
		g.metrics.shedRequest(label, shed.tenant, "displaced")
	}
	if w == nil {
		g.metrics.shedRequest(label, t.Name, "full")
		e.waitErr = apiError{http.StatusTooManyRequests, "queue_full",
			fmt.Sprintf("every backend of the pool is busy and %d requests wait for it (--backend-queue): retry later", f.limit)}
		return nil, true
	}
	deadline := g.clock.NewTimer(f.wait)
	defer deadline.Stop()
	for {
		ch := g.changeCh()
		if f.isHead(w) {
			if u := e.pick(); u != nil {
				f.done(w, true)
				return u, true
			}
			if !e.saturated {
				f.done(w, false)
				return nil, false
			}
		}
		select {
		case <-w.poke:
		case <-ch:
		case <-w.shed:
			e.waitErr = apiError{http.StatusTooManyRequests, "queue_full",
				"every backend of the pool is busy and the queue is full of requests that go before this one: retry later"}
			return nil, true
		case <-deadline.C():
			f.done(w, false)
			g.metrics.shedRequest(label, t.Name, "wait")
			e.waitErr = apiError{http.StatusTooManyRequests, "queue_timeout",
				fmt.Sprintf("every backend of the pool stayed busy for %s (--backend-queue-wait): retry later", f.wait)}
			return nil, true
		case <-e.r.Context().Done():
			f.done(w, false)
			return nil, true
		}
	}
}
