package gateway

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/tidegpu/tidegpu/internal/fairq"
	"github.com/tidegpu/tidegpu/internal/gateway/h1"
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
// too, even if a slot is free at that instant: the slot is the next
// waiter's.
//
// Headroom. Slots free up in bursts (a batch of equal answers ends
// together), so a light tenant arriving at a pool kept full by a heavy one
// would wait for the next burst even though it goes first in the queue.
// So a tenant holding its weighted share of the pool's slots or more
// (share: slots x its weight / the weights of the tenants active in the
// pool) does not take one of the last free slots of the headroom (one per
// fairHeadroomPer slots, at least one) while
// another tenant of its class or a higher one, below its own share, has
// been active in the pool within fairActiveFor; the light tenant's next
// request then starts at once. It is trunk reservation (the telephone
// network's way of protecting one class of calls on shared circuits): the
// heavy tenant leaves at most the headroom idle, and only while someone
// else uses the pool. A tenant with nothing in flight may always take a
// slot. A waiting request of a tenant that must
// leave the headroom is passed over by the ones behind it that need not.
// Tenants are counted per queue key (the pool a request names, or ""
// for requests that name none), and slots are the cap times the healthy
// backends of that pool (of every pool for "").

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

// The headroom's parameters (see the package comment above).
const (
	// fairHeadroomPer: a tenant at or over its share leaves one free slot
	// to the others per fairHeadroomPer slots of the pool, and at least one
	// (2 of 16).
	fairHeadroomPer = 8
	// fairActiveFor is how long a tenant counts as active in a pool after
	// its last request there started, ended or queued.
	fairActiveFor = 10 * time.Second
)

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
	// use: the tenants seen recently, by queue key, then tenant name.
	use map[string]map[string]*tenantUse
}

// tenantUse is one tenant's recent use of one pool.
type tenantUse struct {
	inflight, waiting int
	last              time.Time // its last request's start, end or arrival in the queue
	weight            uint64
	priority          fairq.Priority
}

func (u *tenantUse) active(now time.Time) bool {
	return u.inflight > 0 || u.waiting > 0 || now.Sub(u.last) < fairActiveFor
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
	return &fairShare{cap: int64(n), limit: limit, wait: wait, queues: map[string]*poolQueue{}, use: map[string]map[string]*tenantUse{}}
}

// full reports whether u is at the cap.
func (g *Gateway) full(u *Upstream) bool {
	return g.fair != nil && u.inflight.Load() >= g.fair.cap
}

// claim counts a request in flight on u, unless u is at the cap.
func (g *Gateway) claim(u *Upstream) bool {
	if g.fair == nil {
		u.inflight.Add(1)
		g.wakeIdle()
		return true
	}
	for {
		n := u.inflight.Load()
		if n >= g.fair.cap {
			return false
		}
		if u.inflight.CompareAndSwap(n, n+1) {
			g.wakeIdle()
			return true
		}
	}
}

// touchLocked returns t's use of key's pool, created if need be, marked
// active now.
func (f *fairShare) touchLocked(key string, t Tenant, now time.Time) *tenantUse {
	m := f.use[key]
	if m == nil {
		m = map[string]*tenantUse{}
		f.use[key] = m
	}
	u := m[t.Name]
	if u == nil {
		u = &tenantUse{}
		m[t.Name] = u
	}
	u.last, u.weight, u.priority = now, weightOf(t), t.Priority
	return u
}

func weightOf(t Tenant) uint64 { return uint64(min(max(t.Weight, 1), fairq.MaxWeight)) }

// started counts a request of t in flight in key's pool.
func (f *fairShare) started(key string, t Tenant, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.touchLocked(key, t, now).inflight++
}

// ended counts it out again.
func (f *fairShare) ended(key string, t Tenant, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if u := f.use[key][t.Name]; u != nil && u.inflight > 0 {
		u.inflight--
		u.last = now
	}
}

// headroom is the free slots of a pool of slots a tenant at or over its
// share leaves to others.
func headroom(slots int) int { return max(1, slots/fairHeadroomPer) }

// mustYieldLocked reports whether t must leave the free slots of key's pool
// to other tenants (the headroom); slots and free are the pool's.
func (f *fairShare) mustYieldLocked(key string, t Tenant, slots, free int, now time.Time) bool {
	if free-1 >= headroom(slots) {
		return false
	}
	m := f.use[key]
	if len(m) < 2 {
		return false
	}
	var sum uint64
	for name, u := range m {
		if name == t.Name || u.active(now) {
			sum += u.weight
		} else if u.inflight == 0 && u.waiting == 0 {
			delete(m, name) // forgotten after fairActiveFor
		}
	}
	held := 0
	if me := m[t.Name]; me != nil {
		held = me.inflight
	} else {
		sum += weightOf(t) // not seen here yet
	}
	share := func(w uint64) float64 { return float64(slots) * float64(w) / float64(sum) }
	if held == 0 || float64(held+1) <= share(weightOf(t)) {
		return false // below its share, or nothing in flight: it may take the last slot
	}
	for name, u := range m {
		if name != t.Name && u.priority >= t.Priority && u.active(now) && float64(u.inflight) < share(u.weight) {
			return true
		}
	}
	return false
}

// slots returns the cap times key's healthy backends and how many of
// those slots are free.
func (g *Gateway) slots(key string) (slots, free int) {
	t := g.table.Load()
	src := t.all
	if key != "" {
		src = t.pools[key]
	}
	for _, u := range src {
		if u.draining.Load() || u.removed.Load() || !u.healthy.Load() {
			continue
		}
		slots += int(g.fair.cap)
		free += int(max(g.fair.cap-u.inflight.Load(), 0))
	}
	return slots, free
}

// yields reports whether the exchange's tenant must leave the free slots
// of its pool to others now (see headroom).
func (e *exchange) yields() bool {
	f := e.g.fair
	slots, free := e.g.slots(e.pool)
	if free-1 >= headroom(slots) {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mustYieldLocked(e.pool, e.tenant, slots, free, e.g.clock.Now())
}

// busy reports whether requests wait for key.
func (f *fairShare) busy(key string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.queues[key] != nil
}

// enqueue adds a waiter for key; nil when the queue refused it.
func (f *fairShare) enqueue(key string, t Tenant, now time.Time) (w *fairWaiter, shed *fairWaiter) {
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
		f.unwaitLocked(key, shed.tenant)
		close(shed.shed)
	}
	if ok {
		f.touchLocked(key, t, now).waiting++
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

func (f *fairShare) unwaitLocked(key, tenant string) {
	if u := f.use[key][tenant]; u != nil && u.waiting > 0 {
		u.waiting--
	}
}

// isNext reports whether w is next: the first waiter in the queue's order
// whose tenant need not leave the pool's free slots to others.
func (g *Gateway) isNext(w *fairWaiter) bool {
	f := g.fair
	slots, free := g.slots(w.key)
	f.mu.Lock()
	defer f.mu.Unlock()
	h, ok := f.nextLocked(w.key, slots, free, g.clock.Now())
	return ok && h.ID == w.id
}

// nextLocked returns the waiter of key to poke.
func (f *fairShare) nextLocked(key string, slots, free int, now time.Time) (fairq.Request, bool) {
	pq := f.queues[key]
	if pq == nil {
		return fairq.Request{}, false
	}
	if free-1 >= headroom(slots) {
		return pq.q.Head()
	}
	return pq.q.HeadWhere(func(r fairq.Request) bool {
		return !f.mustYieldLocked(key, Tenant{Name: r.Tenant, Weight: r.Weight, Priority: r.Priority}, slots, free, now)
	})
}

// done takes w out of its queue, served or not, and pokes the next
// waiter: a served one may have left free slots, and one that gave up
// leaves its turn.
func (g *Gateway) done(w *fairWaiter, served bool) {
	f := g.fair
	slots, free := g.slots(w.key)
	now := g.clock.Now()
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
	f.unwaitLocked(w.key, w.tenant)
	if pq.q.Len() == 0 {
		delete(f.queues, w.key)
		return
	}
	f.pokeNextLocked(w.key, slots, free, now)
}

// pokeNextLocked pokes key's next waiter.
func (f *fairShare) pokeNextLocked(key string, slots, free int, now time.Time) {
	if h, ok := f.nextLocked(key, slots, free, now); ok {
		select {
		case f.queues[key].waiters[h.ID].poke <- struct{}{}:
		default:
		}
	}
}

// released tells the next waiters of pool's queue and of the queue of
// requests that name no pool that a slot of pool is free.
func (g *Gateway) released(pool string) {
	f := g.fair
	now := g.clock.Now()
	for _, key := range [2]string{pool, ""} {
		if !f.busy(key) {
			continue
		}
		slots, free := g.slots(key)
		f.mu.Lock()
		f.pokeNextLocked(key, slots, free, now)
		f.mu.Unlock()
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
	t := e.tenant
	label := e.pool
	if label == "" {
		label = anyPool
	}
	w, shed := f.enqueue(e.pool, t, g.clock.Now())
	if shed != nil {
		g.metrics.shedRequest(label, shed.tenant, "displaced")
	}
	if w == nil {
		g.metrics.shedRequest(label, t.Name, "full")
		e.waitErr = apiError{http.StatusTooManyRequests, "queue_full",
			fmt.Sprintf("every backend of the pool is busy and %d requests wait for it (--backend-queue): retry later", f.limit)}
		return nil, true
	}
	h1.Detach(e.r.Context()) // a wait for a turn, not for a socket
	deadline := g.clock.NewTimer(f.wait)
	defer deadline.Stop()
	for {
		ch := g.changeCh()
		if g.isNext(w) {
			if u := e.pick(); u != nil {
				g.done(w, true)
				return u, true
			}
			if !e.saturated {
				g.done(w, false)
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
			g.done(w, false)
			g.metrics.shedRequest(label, t.Name, "wait")
			e.waitErr = apiError{http.StatusTooManyRequests, "queue_timeout",
				fmt.Sprintf("every backend of the pool stayed busy for %s (--backend-queue-wait): retry later", f.wait)}
			return nil, true
		case <-e.r.Context().Done():
			g.done(w, false)
			return nil, true
		}
	}
}
