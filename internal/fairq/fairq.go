// Package fairq is the gateway's fair queue: the order in which requests
// waiting for a saturated pool are served, and which of them are shed when
// the queue is full. It is pure (no clock, no goroutines, no locks): the
// gateway holds one Queue per pool under its own lock and asks it who is
// next.
//
// Order: strict by priority class (every waiting High request before any
// Normal one, Normal before Low), and within a class by weighted fair
// queueing across tenants, in the self-clocked form (SCFQ, Golestani 1994):
// each tenant's flow has a virtual finish time; a request arriving at
// virtual time V gets start S = max(V, the flow's last finish) and finish
// F = S + 1/weight; the waiting request with the least F goes first (ties:
// the earlier arrival) and V becomes its F. A backlogged tenant of weight w
// so gets w/Σw of the dispatches of its class, whatever the others send,
// and a tenant that sends little waits behind at most about one request of
// each other tenant. With one tenant (no API keys) F grows with every
// arrival and the order is FIFO.
//
// Shedding: when the queue is full, the request given up is the one of the
// lowest priority class present with the largest finish time (the newest
// request of the tenant furthest beyond its share), unless the arriving one
// ranks lower still, in which case the arrival is refused. A tenant's burst
// therefore sheds its own requests, not another tenant's.
//
// Written here rather than taken from a library: the Go WFQ packages
// found (e.g. the Kubernetes API server's priority and fairness) are bound
// to their servers' request types and concurrency accounting; the
// scheduler is a heap and a few lines of tag arithmetic.
package fairq

import (
	"container/heap"
	"fmt"
	"strings"
)

// Priority is a request's class; higher is served first and shed last.
type Priority int

// The priority classes.
const (
	Low    Priority = iota - 1
	Normal          // the zero value
	High
	numClasses = 3
)

// PriorityNames are the classes as the keys file spells them, lowest first.
var PriorityNames = []string{"low", "normal", "high"}

func (p Priority) String() string {
	if p >= Low && p <= High {
		return PriorityNames[p-Low]
	}
	return fmt.Sprintf("Priority(%d)", int(p))
}

// ParsePriority reads a class name; "" is Normal.
func ParsePriority(s string) (Priority, error) {
	if s == "" {
		return Normal, nil
	}
	for i, n := range PriorityNames {
		if s == n {
			return Priority(i) + Low, nil
		}
	}
	return Normal, fmt.Errorf("%q: want one of %s", s, strings.Join(PriorityNames, ", "))
}

// Weight bounds: a weight is a tenant's relative share of the dispatches
// of its class when several tenants wait.
const (
	DefaultWeight = 1
	MaxWeight     = 1000
)

// unit is one request's cost in virtual time at weight 1; a request of
// weight w costs unit/w (integer: no floating-point drift over a long run,
// and 2^32/1000 leaves the rounding far below one request).
const unit = 1 << 32

// Request is what the queue knows of a waiting request.
type Request struct {
	// ID names the request to the caller; unique among those waiting.
	ID uint64
	// Tenant is the flow the request belongs to ("" is a tenant too).
	Tenant string
	// Weight is the tenant's weight, 1..MaxWeight; out of range is
	// clamped (0: DefaultWeight).
	Weight int
	// Priority is the request's class.
	Priority Priority
}

// Queue is one pool's waiting requests. The zero value is not usable: use
// New.
type Queue struct {
	limit   int
	seq     uint64
	n       int
	byID    map[uint64]*item
	classes [numClasses]class
}

type class struct {
	v     uint64           // virtual time: the finish tag last dispatched
	flows map[string]*flow // by tenant
	heap  itemHeap
}

type flow struct {
	last    uint64 // finish tag of the flow's latest arrival
	waiting int
}

type item struct {
	Request
	start, finish uint64
	seq           uint64
	index         int // in its class's heap
}

// New returns an empty queue holding at most limit requests (limit >= 1).
func New(limit int) *Queue {
	q := &Queue{limit: max(limit, 1), byID: map[uint64]*item{}}
	for i := range q.classes {
		q.classes[i].flows = map[string]*flow{}
	}
	return q
}

// Len is the number of waiting requests.
func (q *Queue) Len() int { return q.n }

// Limit is the most requests the queue holds.
func (q *Queue) Limit() int { return q.limit }

// Waiting returns the number of waiting requests per tenant.
func (q *Queue) Waiting() map[string]int {
	out := map[string]int{}
	for _, it := range q.byID {
		out[it.Tenant]++
	}
	return out
}

func clampWeight(w int) uint64 {
	switch {
	case w <= 0:
		return DefaultWeight
	case w > MaxWeight:
		return MaxWeight
	}
	return uint64(w)
}

func clampPriority(p Priority) Priority {
	return min(max(p, Low), High)
}

// class returns p's class.
func (q *Queue) class(p Priority) *class { return &q.classes[clampPriority(p)-Low] }

// tags returns the start and finish tags r would get now.
func (q *Queue) tags(r Request) (start, finish uint64) {
	c := q.class(r.Priority)
	start = c.v
	if f := c.flows[r.Tenant]; f != nil && f.last > start {
		start = f.last
	}
	return start, start + unit/clampWeight(r.Weight)
}

// Push adds r. When the queue is full it sheds one request, the arrival or
// a waiting one (see the package documentation): admitted says whether r
// is waiting now, shed is the ID of the waiting request given up for it
// (ok false if none was).
func (q *Queue) Push(r Request) (admitted bool, shed uint64, ok bool) {
	if _, dup := q.byID[r.ID]; dup {
		panic(fmt.Sprintf("fairq: request %d pushed twice", r.ID))
	}
	r.Priority = clampPriority(r.Priority)
	start, finish := q.tags(r)
	if q.n >= q.limit {
		v := q.victim()
		if v == nil || r.Priority < v.Priority || (r.Priority == v.Priority && finish >= v.finish) {
			return false, 0, false
		}
		shed, ok = v.ID, true
		q.remove(v, true)
		start, finish = q.tags(r) // the victim's flow may be r's own
	}
	c := q.class(r.Priority)
	f := c.flows[r.Tenant]
	if f == nil {
		f = &flow{}
		c.flows[r.Tenant] = f
	}
	f.last = finish
	f.waiting++
	q.seq++
	it := &item{Request: r, start: start, finish: finish, seq: q.seq}
	heap.Push(&c.heap, it)
	q.byID[r.ID] = it
	q.n++
	return true, shed, ok
}

// victim is the waiting request shed first: of the lowest class present,
// the largest finish tag, the latest arrival among equals.
func (q *Queue) victim() *item {
	for p := Low; p <= High; p++ {
		var v *item
		for _, it := range q.class(p).heap {
			if v == nil || it.finish > v.finish || (it.finish == v.finish && it.seq > v.seq) {
				v = it
			}
		}
		if v != nil {
			return v
		}
	}
	return nil
}

// Head returns the request to serve next.
func (q *Queue) Head() (Request, bool) {
	for p := High; p >= Low; p-- {
		if h := q.class(p).heap; len(h) > 0 {
			return h[0].Request, true
		}
	}
	return Request{}, false
}

// HeadWhere returns the request to serve next among those pass accepts:
// the first in the queue's order (class, then finish tag, then arrival)
// whose pass is true. pass should depend on the request's tenant and class
// only (the gateway asks whether that tenant may take a slot now): it is
// asked once per tenant and class. The head is found in O(1);
// when pass refuses it, the class is scanned (O(n), n the waiting
// requests of the class: a few hundred at most).
func (q *Queue) HeadWhere(pass func(Request) bool) (Request, bool) {
	for p := High; p >= Low; p-- {
		h := q.class(p).heap
		if len(h) == 0 {
			continue
		}
		if pass(h[0].Request) {
			return h[0].Request, true
		}
		var best *item
		refused := map[string]bool{h[0].Tenant: true}
		for _, it := range h[1:] {
			if best != nil && !h.less(it, best) {
				continue
			}
			ok, seen := refused[it.Tenant]
			if !seen {
				ok = !pass(it.Request)
				refused[it.Tenant] = ok
			}
			if !ok {
				best = it
			}
		}
		if best != nil {
			return best.Request, true
		}
	}
	return Request{}, false
}

// Dispatch removes the request id as served: its class's virtual time
// advances to its finish tag. It reports whether id was waiting.
func (q *Queue) Dispatch(id uint64) bool {
	it := q.byID[id]
	if it == nil {
		return false
	}
	c := q.class(it.Priority)
	if it.finish > c.v {
		c.v = it.finish
	}
	q.remove(it, false)
	return true
}

// Remove takes the request id out without serving it (its client went
// away, or it waited too long). It reports whether id was waiting.
func (q *Queue) Remove(id uint64) bool {
	it := q.byID[id]
	if it == nil {
		return false
	}
	q.remove(it, false)
	return true
}

// remove takes it out; shed rolls its flow's last finish back to its
// start (a shed request is always its flow's latest, so the flow is not
// charged for it).
func (q *Queue) remove(it *item, shed bool) {
	c := q.class(it.Priority)
	heap.Remove(&c.heap, it.index)
	delete(q.byID, it.ID)
	q.n--
	f := c.flows[it.Tenant]
	f.waiting--
	if shed && f.last == it.finish {
		f.last = it.start
	}
	// A flow with nothing waiting whose last finish the virtual time has
	// reached carries no state: forget it, so the map holds only the
	// tenants that wait or are ahead of their share.
	if f.waiting == 0 && f.last <= c.v {
		delete(c.flows, it.Tenant)
	}
	// Forget the other idle flows the virtual time has passed, so that a
	// queue fed by many tenants over time stays small. Cheap: flows are
	// tenants with state, few.
	if !shed {
		for t, g := range c.flows {
			if g.waiting == 0 && g.last <= c.v {
				delete(c.flows, t)
			}
		}
	}
}

// itemHeap orders a class's items by finish tag, then arrival.
type itemHeap []*item

func (h itemHeap) Len() int           { return len(h) }
func (h itemHeap) Less(i, j int) bool { return h.less(h[i], h[j]) }

// less orders a before b: finish tag, then arrival.
func (itemHeap) less(a, b *item) bool {
	if a.finish != b.finish {
		return a.finish < b.finish
	}
	return a.seq < b.seq
}
func (h itemHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *itemHeap) Push(x any) {
	it := x.(*item)
	it.index = len(*h)
	*h = append(*h, it)
}
func (h *itemHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return it
}
