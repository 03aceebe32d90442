package gateway

import "sync"

// serveWorkers runs the exchanges' serve (serveApart) on goroutines kept
// between requests. A goroutine started per request would grow its stack
// again every time (it starts at the runtime's average and serving takes
// it to 8 KiB: two stack copies per request); a kept one stays grown. At
// most max wait idle; the others end when their request is served.
//
// Hand-written: the standard library has no goroutine pool, and the pools
// that exist (fasthttp's workerpool among them) run their own handler
// type, not a function with a result to wait for.
type serveWorkers struct {
	mu      sync.Mutex
	idle    []chan serveJob
	max     int
	closed  bool
	started int // goroutines started, for the tests
}

// serveJob is what a worker runs: an exchange's serveOn.
type serveJob interface{ serveOn() }

// run runs e.serveOn on a kept goroutine or a new one (which tells its
// caller when it is done: for an exchange, e.served).
func (p *serveWorkers) run(e serveJob) {
	var ch chan serveJob
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		ch = p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
	} else {
		p.started++
	}
	p.mu.Unlock()
	if ch == nil {
		ch = make(chan serveJob, 1)
		go p.work(ch)
	}
	ch <- e
}

// work serves exchanges from ch until it is not kept.
func (p *serveWorkers) work(ch chan serveJob) {
	for e := range ch {
		e.serveOn()
		p.mu.Lock()
		if p.closed || len(p.idle) >= p.max {
			p.mu.Unlock()
			return
		}
		p.idle = append(p.idle, ch)
		p.mu.Unlock()
	}
}

// close ends the idle goroutines; those serving end after their request.
func (p *serveWorkers) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, ch := range p.idle {
		close(ch)
	}
	p.idle = nil
}
