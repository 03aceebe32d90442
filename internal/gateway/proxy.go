package gateway

// Why not httputil.ReverseProxy: the retry loop needs to own the moment the
// response is committed to the client. ReverseProxy commits inside
// ServeHTTP (its ErrorHandler writes the error response), so retries would
// have to hide in a RoundTripper, which then could not tell the proxy which
// backend answered, keep that backend's in-flight count until the stream
// ends, or learn whether a mid-stream error was the backend's (passive
// health) or the client's (not the backend's fault). What is left of
// ReverseProxy that we need — hop-by-hop headers, X-Forwarded-For, trailers,
// the copy loop with a flush per read, aborting the client connection on a
// mid-stream failure — is short and lives here and in headers.go, and
// writing it ourselves also saves ReverseProxy's per-request clone.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tidegpu/tidegpu/internal/gateway/h1"
)

// route maps a client path to the backend path: a path ending in
// /ollama-chat (the Kong route "~/ollama-chat$" with service path /api/chat)
// goes to /api/chat; /, /api/… and /v1/… pass through unchanged.
func route(u *url.URL) (path, rawPath string, ok bool) {
	p := u.Path
	switch {
	case strings.HasSuffix(p, "/ollama-chat"):
		return "/api/chat", "", true
	case p == "/", strings.HasPrefix(p, "/api/"), strings.HasPrefix(p, "/v1/"):
		return p, u.RawPath, true
	}
	return "", "", false
}

// statusClientClosed is the status recorded (never sent) for requests whose
// client went away before an answer, as nginx does.
const statusClientClosed = 499

// exchange is the state of one client request across its attempts.
type exchange struct {
	g     *Gateway
	w     http.ResponseWriter
	r     *http.Request
	start time.Time
	body  []byte
	// bodyBuf is the pooled buffer e.body was read into (bodyBufs), or
	// nil; given back when the request is forgotten (releaseBody).
	bodyBuf *[]byte
	outHdr  http.Header // the outbound request's headers (Transport)
	// The h1 client's outbound header instead (shapeOutbound): the
	// client's header, shaped by SkipField and ExtraFields.
	outExtra  [4]h1.Field
	outN      int
	outOwnXFF bool     // X-Forwarded-For is in outExtra
	outConn   []string // the client's Connection fields (shapeOutbound)
	out       outReq   // the outbound request on the h1 client (outbound)
	path      string
	rawPath   string
	pool      string
	tried     []*Upstream
	deadline  time.Time // end of the wait for a backend; zero until the first wait
	model     string    // the body's "model", if hasModel
	hasModel  bool
	// prefix: the prompt's block hashes for the prefix-aware policy
	// (readPrompt, at the request's start).
	prefix     []uint64
	prefixPick prefixPick // what the prefix-aware policy expected of the last pick
	// stream: the body's "stream" flag, if it was read with the prompt
	// (readPrompt).
	stream streamField
	// stripUsage: the gateway asked the backend for the stream's usage,
	// which goes to Options.OnUsage instead of the client.
	stripUsage bool
	sink       bodySink // the answer's body to the client, once committed
	announced  int      // trailers announced in the answer's head
	// activated: the activator held the request once. waitErr: how it
	// ended the wait (429, 503), if it did (status 0 otherwise). kept: its
	// keep-alives committed a 200 in keptKind's format.
	activated bool
	waitErr   apiError
	kept      bool
	keptKind  keepKind
	// saturated: the last pick found every eligible backend at
	// Options.BackendMaxInFlight, or the tenant must leave the free slots
	// to others (fairshare.go).
	saturated bool
	// tenant: who the request is for (TenantOf; the zero Tenant without
	// the tenant middleware, or without the fair share, which alone
	// reads it).
	tenant Tenant
	// answer is the attempt whose response is committed, if answerOK;
	// served, panicked: serveApart's handing over from serve's goroutine.
	answer   attempt
	answerOK bool
	served   sync.WaitGroup
	panicked *servePanic

	// headerWait lists the current attempt among its backend's (waitList).
	headerWait headerWait
	// replay is the attempts' request body on the h1 client (see try).
	replay replayBody

	triedBuf [4]*Upstream
	candBuf  [16]*Upstream
}

// outReq is an exchange's outbound request on the h1 client, and its URL.
type outReq struct {
	req http.Request
	url url.URL
}

// attempt is one try of an exchange on one backend.
type attempt struct {
	u       *Upstream
	ctx     *attemptCtx // the attempt's; ended by ctx.cancel
	resp    *http.Response
	latency time.Duration
	sent    *sentBody // the request body handed to a Transport
}

// cancel ends the attempt (see attemptCtx.cancel).
func (a *attempt) cancel(cause error) { a.ctx.cancel(cause) }

// ServeHTTP proxies r to a backend: it buffers the body, picks a backend,
// and retries on another one every attempt that fails before the response
// is committed; see the package documentation.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Small on purpose: a stream waits for tokens below this frame (see
	// commit); the request is read in begin's.
	e := g.begin(w, r)
	if e == nil {
		return
	}
	// The answer is committed after serve returned; a stream's is served
	// on another goroutine, so that serve's frames never grow this one's
	// stack, under which the stream waits for tokens (see serveApart).
	ok := false
	if e.asksToStream() {
		// A stream waits for its worker and then for tokens: off the
		// h1 server's serve loop (a no-op elsewhere).
		h1.Detach(r.Context())
		ok = e.serveApart()
	} else {
		// An answer that does not stream is over soon: served in place,
		// without the two hand-overs.
		ok = e.serveHere()
	}
	if ok {
		e.commit(&e.answer)
	}
	e.recycle()
}

// exchanges keeps exchanges between requests. An exchange is the largest
// thing a request allocates (about 1.3 KB with its outbound request, more
// than the rest of the gateway's allocations together), and short requests
// come by the tens of thousands a second: reused, they no longer drive
// garbage collections (BENCHMARKS.md, issue 19 twelfth increment).
var exchanges = sync.Pool{New: func() any { return new(exchange) }}

// recycle hands e back to exchanges once ServeHTTP is done with it. Nothing
// holds an exchange past ServeHTTP: the worker that served it apart is done
// (e.served), its attempts left their backends' wait lists, the idle timer
// of its stream holds only the attempt's context, and an answer taken over
// from net/http (stream.go) only the attempt's context too. It is emptied
// first, so that a kept exchange holds no request's memory, but for its
// body buffer (releaseBody), which the pool of them would hold anyway. A
// panic skips it: the exchange is dropped.
func (e *exchange) recycle() {
	e.releaseBody(false)
	kept := e.bodyBuf
	*e = exchange{}
	e.bodyBuf = kept
	exchanges.Put(e)
}

// serveHere is serve on the handler's goroutine, leaving the answer in
// e.answer; not inlined, so that the attempt takes no room in ServeHTTP's
// frame.
//
//go:noinline
func (e *exchange) serveHere() bool {
	e.answer, e.answerOK = e.serve()
	return e.answerOK
}

// asksToStream reports whether a request is likely answered by a stream,
// the only kind worth serving apart (serveApart): Ollama's chat and
// generate stream unless the body says "stream": false, the other APIs
// (OpenAI's, TGI's, llama.cpp's) only when it says "stream": true. A wrong
// guess costs only memory (a stream served in place keeps 8 KiB of stack
// until a collection) or two hand-overs (an answer served apart).
func asksToStream(path string, body []byte) bool {
	v, found := streamFlag(body)
	return asksWith(path, streamField{v: v, found: found, known: true})
}

// asksWith is asksToStream on a flag already read. Pure.
func asksWith(path string, f streamField) bool {
	if path == "/api/chat" || path == "/api/generate" {
		return !f.found || f.v
	}
	return f.found && f.v
}

// asksToStream is asksToStream of e's request, on the flag read with its
// prompt (readPrompt) if it was.
func (e *exchange) asksToStream() bool {
	if e.stream.known {
		return asksWith(e.path, e.stream)
	}
	return asksToStream(e.path, e.body)
}

// streamFlag returns the request's top-level "stream" field, if it is a
// boolean (topLevelValue's scan, as for the model).
func streamFlag(body []byte) (v, found bool) {
	raw, ok := topLevelValue(body, "stream")
	switch {
	case ok && string(raw) == "true":
		return true, true
	case ok && string(raw) == "false":
		return false, true
	}
	return false, false
}

// serveApart runs serve on another goroutine (a kept one: serveWorkers)
// and waits for it, leaving the answer in e.answer.
//
// Why: a goroutine's stack grows to hold its deepest call and shrinks
// only when a garbage collection finds it three quarters unused. Serving
// an attempt goes deep (the pick, the backend's dial, the parse of its
// head), which took the handler's stack to 8 KiB; a stream then kept
// those 8 KiB for its whole life unless a collection ran, and a stream
// that allocates nothing per token seldom causes one. Served apart, the
// deep frames live on a worker's stack, and a waiting stream keeps 2-4
// KiB (TestWaitingStreamsHaveSmallStacks). The cost is two hand-overs
// between goroutines per request, which measured 10-15 % of the gateway's
// CPU on short requests: only requests that ask for a stream
// (asksToStream) are served apart (BENCHMARKS.md, issue 19 seventh
// increment).
//
// A panic in serve is carried back and raised again here, where the
// server's recovery (or http.ErrAbortHandler's meaning) applies.
func (e *exchange) serveApart() bool {
	e.served.Add(1)
	e.g.workers.run(e)
	e.served.Wait()
	if p := e.panicked; p != nil {
		if p.value == http.ErrAbortHandler {
			panic(http.ErrAbortHandler)
		}
		panic(p)
	}
	return e.answerOK
}

// serveOn is serveApart's goroutine.
func (e *exchange) serveOn() {
	defer e.served.Done()
	defer func() {
		if v := recover(); v != nil {
			e.panicked = &servePanic{value: v, stack: debug.Stack()}
		}
	}()
	e.answer, e.answerOK = e.serve()
}

// servePanic is a panic in serve raised again on the handler's goroutine,
// with the stack where it happened.
type servePanic struct {
	value any
	stack []byte
}

func (p *servePanic) String() string { return fmt.Sprintf("%v\n\n%s", p.value, p.stack) }

// begin reads the request and makes its exchange; nil if it was answered
// already (a preflight, a refusal).
func (g *Gateway) begin(w http.ResponseWriter, r *http.Request) *exchange {
	start := time.Now()
	if g.cors != nil {
		// Sets the Access-Control-* headers; answers a preflight 204.
		g.cors.HandlerFunc(w, r)
		if isPreflight(r) {
			g.metrics.request(noBackend, noBackend, http.StatusNoContent, time.Since(start))
			return nil
		}
	}
	path, rawPath, ok := route(r.URL)
	if !ok {
		g.fail(w, r, start, errNoRoute)
		return nil
	}
	if r.Method == http.MethodConnect {
		g.fail(w, r, start, errMethod)
		return nil
	}
	e := exchanges.Get().(*exchange) // empty but for a kept body buffer (recycle)
	body, bodyBuf, code := g.readBody(r, e.bodyBuf)
	e.bodyBuf = bodyBuf
	switch code {
	case 0:
	case http.StatusRequestEntityTooLarge:
		e.recycle()
		g.fail(w, r, start, bodyTooLarge(g.maxBody))
		return nil
	default:
		e.recycle()
		g.fail(w, r, start, errBodyUnread)
		return nil
	}
	stripUsage := false
	if g.onUsage != nil && r.Method == http.MethodPost && usagePath(path) {
		body, stripUsage = withStreamUsage(body, g.maxBody)
	}
	e.g, e.w, e.r, e.start, e.body, e.stripUsage = g, w, r, start, body, stripUsage
	e.path, e.rawPath, e.pool = path, rawPath, r.Header.Get(PoolHeader)
	e.tried = e.triedBuf[:0]
	if g.h1 != nil {
		e.shapeOutbound()
	} else {
		e.outHdr = outboundHeader(r)
		ownValues(e.outHdr)
	}
	if g.fair != nil {
		// Only the fair share tells tenants apart; the lookup walks the
		// request context's chain of values.
		e.tenant, _ = TenantOf(r.Context())
	}
	if g.table.Load().modelAware || g.splits.Load() != nil || g.loadedSeen.Load() {
		e.model, e.hasModel = requestModel(body)
	}
	if g.prefix != nil {
		// Now rather than at the pick: the same pass reads the stream
		// flag, which decides how the request is served (ServeHTTP).
		e.readPrompt()
	}
	return e
}

// readPrompt reads the prompt's block hashes for the prefix-aware policy
// (a POST's only) and, in the same pass, the body's stream flag.
func (e *exchange) readPrompt() {
	if e.r.Method != http.MethodPost {
		return
	}
	tb := promptTexts.get()
	model, text, flag, ok := promptRead(e.path, e.body, *tb)
	if ok {
		e.prefix = prefixHashes(model, text, e.g.prefix.blockBytes())
	}
	e.stream = flag
	promptTexts.put(tb, text)
}

// readBody buffers the request body, up to MaxBodyBytes. It returns a
// non-zero status if the body is too large or cannot be read. A body of
// known length up to maxPooledBody, on the h1 client, is read into the
// exchange's kept buffer (kept, from its last request) or a pooled one;
// the buffer is returned whatever the outcome (kept if it was not used),
// for the exchange to hold: it gives it back to the pool once a stream
// is committed, and keeps it for its next request otherwise (releaseBody,
// recycle). net/http's Transport may read a request's body after
// RoundTrip returns, so its bodies are not pooled.
func (g *Gateway) readBody(r *http.Request, kept *[]byte) ([]byte, *[]byte, int) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, kept, 0
	}
	if r.ContentLength > g.maxBody {
		return nil, kept, http.StatusRequestEntityTooLarge
	}
	hint := int64(512)
	if r.ContentLength >= 0 {
		hint = r.ContentLength + 1 // room for the read that returns EOF
	}
	pb := kept
	var dst []byte
	pooled := g.h1 != nil && r.ContentLength >= 0 && hint <= maxPooledBody
	if pooled {
		if pb == nil {
			pb = bodyBufs.get()
		}
		dst = *pb
	}
	buf, err := readAtMostInto(r.Body, dst, hint, g.maxBody)
	switch {
	case errors.Is(err, errTooLarge):
		return nil, pb, http.StatusRequestEntityTooLarge
	case err != nil:
		return nil, pb, http.StatusBadRequest
	case buf == nil:
		return nil, pb, 0
	}
	if pooled && cap(buf) > cap(*pb) {
		*pb = buf[:0] // grown: the larger array is kept
	}
	return buf, pb, 0
}

// bodyBufs keeps the request bodies' buffers (readBody, releaseBody): an
// LLM request of many kilobytes is the largest thing a request allocates,
// and was a garbage collection's work for each; a rare upload past 64 KiB
// is not kept.
var bodyBufs = bytesPool{max: maxPooledBody}

const maxPooledBody = 64 << 10

// promptTexts keeps the buffers the prefix-aware policy reads prompts
// into, which nothing keeps past the hashing (a prompt's text is at most
// maxPromptBytes).
var promptTexts = bytesPool{max: maxPromptBytes}

// bytesPool keeps byte buffers of up to max bytes between requests.
type bytesPool struct {
	pool sync.Pool
	max  int
}

// get returns an empty buffer, from the pool if it has one.
func (p *bytesPool) get() *[]byte {
	if pb, ok := p.pool.Get().(*[]byte); ok {
		return pb
	}
	return new([]byte)
}

// put gives pb back (nil: nothing), holding grown instead of its array if
// grown is the larger, unless the buffer is now past max.
func (p *bytesPool) put(pb *[]byte, grown []byte) {
	if pb == nil {
		return
	}
	if cap(grown) > cap(*pb) {
		*pb = grown
	}
	if cap(*pb) <= p.max {
		*pb = (*pb)[:0]
		p.pool.Put(pb)
	}
}

// releaseBody lets go of e's body once nothing reads it again: the answer
// is committed (forgetRequest) or the exchange is over (recycle). The h1
// client is done with the body when RoundTrip returns. The buffer goes
// back to the pool if stream is set (a stream's exchange lives as long as
// the answer, and should not hold it); otherwise the exchange keeps it for
// its next request (recycle), which then needs no pool.
func (e *exchange) releaseBody(stream bool) {
	e.body = nil
	if stream || (e.bodyBuf != nil && cap(*e.bodyBuf) > maxPooledBody) {
		bodyBufs.put(e.bodyBuf, nil)
		e.bodyBuf = nil
	}
}

var errTooLarge = errors.New("body too large")

// errStreamIdle cancels an attempt whose backend fell silent for
// Options.StreamIdleTimeout.
var errStreamIdle = errors.New("stream idle timeout")

// readAtMost reads rd to EOF into a buffer of initial capacity hint, failing
// with errTooLarge past limit bytes. Reading up to EOF, not just
// Content-Length bytes, matters: only then does net/http start watching the
// client connection, so that a client going away cancels r.Context().
func readAtMost(rd io.Reader, hint, limit int64) ([]byte, error) {
	return readAtMostInto(rd, nil, hint, limit)
}

// readAtMostInto is readAtMost into buf's array (emptied), if it has room
// for hint bytes, else into a new one.
func readAtMostInto(rd io.Reader, buf []byte, hint, limit int64) ([]byte, error) {
	if n := min(hint, limit+1); int64(cap(buf)) < n {
		buf = make([]byte, 0, n)
	}
	buf = buf[:0]
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := rd.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > limit {
			return nil, errTooLarge
		}
		if err == io.EOF {
			if len(buf) == 0 {
				return nil, nil
			}
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// serve tries backends until one answers, and returns that answer for
// commit; false if the request was answered otherwise (or not at all: the
// client went away).
func (e *exchange) serve() (attempt, bool) {
	g := e.g
	var (
		held    attempt // a 502/503 answer (if held.u != nil), sent if no other backend is left
		lastErr error
		reason  string // of the last failure, for the retry metric
	)
	for attempts := 0; ; attempts++ {
		var u *Upstream
		if attempts <= g.maxRetries {
			u = e.next()
		}
		if u == nil {
			switch {
			case held.u != nil:
				return held, true
			case e.r.Context().Err() != nil:
				g.metrics.request(noBackend, noBackend, statusClientClosed, time.Since(e.start))
			case e.kept:
				werr := e.waitErr
				if werr.status == 0 {
					werr = errNoBackend
				}
				e.failKept(werr)
			case e.waitErr.status != 0:
				g.failRetry(e.w, e.r, e.start, e.waitErr)
			case attempts == 0:
				g.fail(e.w, e.r, e.start, errNoBackend)
			default:
				g.log.Warn("gateway: request failed on every backend tried", "tried", len(e.tried), "lastErr", lastErr)
				g.fail(e.w, e.r, e.start, errAllFailed)
			}
			return attempt{}, false
		}
		if held.u != nil {
			held.discard(e)
			held = attempt{}
		}
		if attempts > 0 {
			g.metrics.retry(reason)
		}
		a, err := e.try(u)
		switch {
		case err == nil && (a.resp.StatusCode == http.StatusBadGateway || a.resp.StatusCode == http.StatusServiceUnavailable):
			g.recordFailure(u, "status "+a.resp.Status, false)
			e.tried = append(e.tried, u)
			held, reason = a, "status"
			lastErr = errors.New("backend " + u.id + ": " + a.resp.Status)
			continue
		case err == nil:
			if a.resp.StatusCode >= 500 {
				g.recordFailure(u, "status "+a.resp.Status, false)
			} else {
				g.recordSuccess(u, a.latency, isStream(a.resp))
				if g.prefix != nil && isStream(a.resp) {
					g.prefix.observe(e.prefixPick, a.latency)
				}
			}
			return a, true
		}
		// The attempt failed before any response.
		a.cancel(nil)
		if e.r.Context().Err() != nil {
			g.metrics.request(u.pool, u.id, statusClientClosed, time.Since(e.start))
			e.release(u)
			return attempt{}, false
		}
		switch {
		case errors.Is(err, errBackendDown):
			reason = "down" // already counted by the probe
		case isConnectFailure(err):
			reason = "connect"
			g.recordFailure(u, err.Error(), true)
		default:
			reason = "transport"
			g.recordFailure(u, err.Error(), false)
		}
		e.release(u)
		e.tried = append(e.tried, u)
		lastErr = err
	}
}

// next picks a backend for the next attempt, waiting (within the request's
// WaitForBackend budget) for one to appear if there is none. It returns nil
// if none appeared or the client went away.
func (e *exchange) next() *Upstream {
	if u, done := e.fairNext(); done {
		return u
	}
	if u := e.pick(); u != nil {
		return u
	}
	g := e.g
	if len(e.tried) == 0 && !e.activated && g.waker != nil {
		if pools := e.wake(); len(pools) > 0 {
			e.activated = true
			return e.hold(pools)
		}
	}
	for {
		// Take the change channel before looking again, so that a change
		// between the look and the wait is not missed.
		ch := g.changeCh()
		if u := e.pick(); u != nil {
			return u
		}
		if u, done := e.fairWait(); done {
			return u
		}
		if g.waitFor <= 0 {
			return nil
		}
		if e.deadline.IsZero() {
			e.deadline = g.clock.Now().Add(g.waitFor)
		}
		left := e.deadline.Sub(g.clock.Now())
		if left <= 0 {
			return nil
		}
		h1.Detach(e.r.Context()) // a wait for a backend, not for a socket
		t := g.clock.NewTimer(left)
		select {
		case <-ch:
			t.Stop()
		case <-t.C():
			return nil
		case <-e.r.Context().Done():
			t.Stop()
			return nil
		}
	}
}

// pick chooses among the eligible backends (of the requested pool, if any,
// and serving the request's model, if any does) not yet tried, narrowed to
// one version by a version split, and counts the request in flight on the
// chosen one. If all eligible backends are passively ejected it chooses
// among those rather than fail (panic routing).
func (e *exchange) pick() *Upstream {
	g := e.g
	e.saturated = false
	for range 4 {
		t := g.table.Load()
		src := t.all
		if e.pool != "" {
			src = t.pools[e.pool]
		}
		byModel := e.hasModel && t.modelAware && anyServes(src, e.model)
		// The clock is read only for a backend that was ever ejected.
		var now int64
		cands := e.candBuf[:0]
		anyEjected := false
		for _, u := range src {
			if !e.eligible(u) || (byModel && !u.serves(e.model)) {
				continue
			}
			if u.ejectedUntil.Load() != 0 {
				if now == 0 {
					now = g.clock.Now().UnixNano()
				}
				if u.ejected(now) {
					anyEjected = true
					continue
				}
			}
			if g.full(u) {
				e.saturated = true
				continue
			}
			cands = append(cands, u)
		}
		if len(cands) == 0 && anyEjected {
			for _, u := range src {
				if e.eligible(u) && (!byModel || u.serves(e.model)) {
					if g.full(u) {
						e.saturated = true
						continue
					}
					cands = append(cands, u)
				}
			}
		}
		cands = g.applySplit(cands, e.model)
		if e.hasModel {
			cands = g.preferLoaded(cands, e.model)
		}
		if len(cands) == 0 {
			return nil
		}
		if g.fair != nil && e.yields() {
			e.saturated = true
			return nil
		}
		var u *Upstream
		if g.prefix != nil {
			u, e.prefixPick = g.prefix.pickPrompt(cands, e.prefix)
		} else {
			u = g.policy.Pick(cands, e.r)
		}
		if u == nil {
			u = cands[0] // a CustomPolicy that breaks its contract
		}
		// Count first, then check draining/removed again: SetBackends sets
		// those flags before it returns, so a controller that then reads
		// InFlight as 0 knows that no request can still start here.
		if !g.claim(u) {
			e.saturated = true // at the cap since the look
			continue
		}
		if !u.draining.Load() && !u.removed.Load() {
			if g.prefix != nil {
				g.prefix.record(u, e.prefix)
			}
			if g.fair != nil {
				g.fair.started(e.pool, e.tenant, g.clock.Now())
			}
			return u
		}
		g.release(u)
	}
	return nil
}

// anyServes reports whether a backend of src serves model.
func anyServes(src []*Upstream, model string) bool {
	for _, u := range src {
		if u.serves(model) {
			return true
		}
	}
	return false
}

func (e *exchange) eligible(u *Upstream) bool {
	return !u.draining.Load() && !u.removed.Load() && u.healthy.Load() && !slices.Contains(e.tried, u)
}

// release ends a request's claim on u.
func (g *Gateway) release(u *Upstream) {
	if u.inflight.Add(-1) == 0 && u.removed.Load() {
		g.reap()
	}
	if g.fair != nil {
		g.released(u.pool)
	}
}

// release ends the claim of an attempt that pick counted for the
// exchange's tenant.
func (e *exchange) release(u *Upstream) {
	if e.g.fair != nil {
		e.g.fair.ended(e.pool, e.tenant, e.g.clock.Now())
	}
	e.g.release(u)
}

// replayBody is one attempt's reader over the buffered request body.
type replayBody struct{ bytes.Reader }

func (*replayBody) Close() error { return nil }

// sentBody is an attempt's request body for a Transport: readers over the
// buffered body (the first, then one per GetBody), which the exchange can
// let go of (drop) while the Transport still holds the request.
type sentBody struct {
	mu  sync.Mutex
	b   []byte
	eof bool // the last reader handed out has been handed every byte
}

func (s *sentBody) reader() io.ReadCloser {
	s.mu.Lock()
	s.eof = false
	s.mu.Unlock()
	return &sentReader{s: s}
}

func (s *sentBody) getBody() (io.ReadCloser, error) { return s.reader(), nil }

// drop lets go of the bytes if the write has read them all: one still
// under way keeps them (a backend may answer before it has read the
// request).
func (s *sentBody) drop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.eof {
		s.b = nil
	}
}

type sentReader struct {
	s   *sentBody
	off int
}

func (r *sentReader) Read(p []byte) (int, error) {
	s := r.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.off >= len(s.b) {
		s.eof = true
		return 0, io.EOF
	}
	n := copy(p, s.b[r.off:])
	r.off += n
	// Every byte is handed out: the bytes are not needed again, though the
	// Transport has yet to read the EOF (it may do so after the answer).
	s.eof = r.off == len(s.b)
	return n, nil
}

func (*sentReader) Close() error { return nil }

// try sends one attempt to u. The attempt's context is the client's (the
// client going away cancels it) and is also cancelled, with errBackendDown,
// if the probe declares u dead before the response headers arrive.
func (e *exchange) try(u *Upstream) (attempt, error) {
	ctx := newAttemptCtx(e.r.Context())
	a := attempt{u: u, ctx: ctx}
	// The attempts of an exchange follow one another: one node serves them.
	u.waiting.add(&e.headerWait, ctx)

	u.requests.Add(1)
	var resp *http.Response
	var err error
	t0 := time.Now()
	if e.g.h1 != nil {
		resp, err = e.g.h1.RoundTripOutbound(ctx, e.outbound(u), e)
	} else {
		resp, err = e.g.transport.RoundTrip(e.transportRequest(ctx, u, &a))
	}
	a.latency = time.Since(t0)
	if !u.waiting.remove(&e.headerWait) && err == nil && errors.Is(ctx.Cause(), errBackendDown) {
		// Declared down just as the headers came: the body would fail.
		_ = resp.Body.Close()
		resp, err = nil, errBackendDown
	}
	if err != nil && errors.Is(ctx.Cause(), errBackendDown) {
		err = errBackendDown
	}
	a.resp = resp
	return a, err
}

// target is the URL of e's request on u.
func (e *exchange) target(u *Upstream) url.URL {
	return url.URL{Scheme: "http", Host: u.address, Path: e.path, RawPath: e.rawPath, RawQuery: e.r.URL.RawQuery}
}

// request is e's request to u, at target with header h, without a body.
func (e *exchange) request(u *Upstream, target *url.URL, h http.Header) http.Request {
	return http.Request{
		Method: e.r.Method, URL: target, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, ContentLength: int64(len(e.body)),
		// The backend's own address as Host: Ollama bound to loopback
		// refuses other Host values. The client's is in X-Forwarded-Host.
		Host: u.address,
	}
}

// outbound is the request to u for the h1 client, which is done with it
// when RoundTrip returns (it has written the body into its buffer and
// never asks for it again): the exchange's one request, URL and body
// reader serve every attempt, and the attempt's context is handed to the
// client beside it.
func (e *exchange) outbound(u *Upstream) *http.Request {
	o := &e.out
	o.url = e.target(u)
	o.req = e.request(u, &o.url, e.r.Header) // the header shaped by e (h1.Outbound)
	if len(e.body) > 0 {
		e.replay.Reset(e.body)
		o.req.Body = &e.replay
	}
	return &o.req
}

// transportRequest is the request to u for net/http's Transport, one per
// attempt: a Transport may still write a failed attempt's request, read
// its body after RoundTrip returned, and ask for the body again (GetBody).
// It also keeps the request while the answer streams: the body's bytes are
// let go at commit (forgetRequest) through a.sent, once a write has read
// them all.
func (e *exchange) transportRequest(ctx context.Context, u *Upstream, a *attempt) *http.Request {
	target := e.target(u)
	tmpl := e.request(u, &target, e.outHdr)
	out := tmpl.WithContext(ctx)
	if len(e.body) > 0 {
		a.sent = &sentBody{b: e.body}
		out.Body = a.sent.reader()
		out.GetBody = a.sent.getBody
	}
	return out
}

// discard drops a held 502/503 answer that will not be sent.
func (a *attempt) discard(e *exchange) {
	_ = a.resp.Body.Close()
	a.cancel(nil)
	e.release(a.u)
}

// Copy buffers. A stream holds its buffer while it waits for the next
// token, for as long as the answer lasts, and a token chunk is a few
// hundred bytes: streams get 4 KiB (the transport's read buffer, which
// holds what arrived together, so one read still takes all of it), bodies
// of a known length 32 KiB, for fewer reads of large answers.
var (
	copyBufPool   = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}
	streamBufPool = sync.Pool{New: func() any { b := make([]byte, streamBufSize); return &b }}
)

const streamBufSize = 4 << 10

// streamLoop selects how a stream from the h1 client reaches a client of
// the h1 server: "on", on an event loop (h1.Body.EachOnLoop: both sockets
// leave the runtime's poller for the stream's life), or "off", on the
// handler's goroutine (h1.Body.Each). An internal switch, set at build time:
//
//	-ldflags "-X github.com/tidegpu/tidegpu/internal/gateway.streamLoop=off"
var streamLoop = "on"

// commit sends a's response to the client. Streams (no Content-Length, or
// Server-Sent Events) are flushed after every read, so each NDJSON line or
// SSE event reaches the client as soon as the backend sent it. If the
// backend fails mid-body, the client connection is aborted so the client
// does not take the truncated body for a complete one.
func (e *exchange) commit(a *attempt) {
	// Only what a waiting stream needs is in this frame: the head goes
	// out (open) and the end is settled (end, settle) in functions of
	// their own, so that their frames are gone while the stream waits for
	// tokens. A waiting stream's stack then stays under the quarter of
	// 8 KiB below which the garbage collector halves it.
	defer e.settle(a)
	if !e.open(a) {
		return
	}
	var rerr error
	if src, ok := a.resp.Body.(*h1.Body); ok && e.sink.flush != nil {
		// A stream from the h1 client is read without a buffer of ours, one
		// read(2) per arrival; to a client of the h1 server, on an event
		// loop (streamLoop).
		if streamLoop == "on" {
			rerr = src.EachOnLoop(e.w, &e.sink)
		} else {
			rerr = src.Each(&e.sink)
		}
	} else if ok && src.Whole() {
		// A short answer, read with its head: written from the backend
		// connection's buffer, with no copy buffer and no read.
		rerr = src.Each(&e.sink)
	} else {
		rerr = copyBody(a.resp.Body, &e.sink)
	}
	e.end(a, rerr)
}

// open writes the answer's head and readies e.sink for its body; false if
// the answer ended there (a kept stream's backend failed).
func (e *exchange) open(a *attempt) bool {
	g, u, resp := e.g, a.u, a.resp
	var strip *usageStrip
	if e.stripUsage && resp.StatusCode == http.StatusOK && hasPrefixFold(contentType(resp), "text/event-stream") {
		model := e.model
		if !e.hasModel {
			model, _ = requestModel(e.body)
		}
		strip = &usageStrip{report: withUsageHook(e.r.Context(), g.onUsage), backend: u.id, reqModel: model}
	}
	stream := resp.ContentLength == -1 || strings.HasPrefix(contentType(resp), "text/event-stream")
	if e.kept && resp.StatusCode != http.StatusOK {
		e.failKeptBackend(resp)
		return false
	}
	var st *directStream // the stream taken over from net/http (stream.go)
	if !e.kept {
		st, e.announced = e.writeHead(a, stream)
	}
	var out io.Writer = e.w
	var flush func() error
	switch {
	case st != nil:
		out = &st.out // the headers went out with the hijack
		flush = st.out.Flush
	case stream:
		// The client sees the status now, before the first token, unless
		// the first token came with the head (h1.Body.Ready): then both
		// leave in the first write of the body. A wrapping writer that
		// cannot flush: copy unflushed (Emit learns it at its first flush).
		if flush = flusherOf(e.w); flush != nil && !firstReady(resp) && errors.Is(flush(), http.ErrNotSupported) {
			flush = nil
		}
	}
	e.sink = bodySink{out: out, strip: strip, st: st, flush: flush}
	if g.streamIdle > 0 {
		// idle cancels the attempt when the backend falls silent; it runs
		// only while a read waits, so a slow client is not taken for a
		// silent backend.
		// The attempt's context alone: the timer may fire as the exchange
		// ends, and the exchange is reused (recycle).
		ctx := a.ctx
		e.sink.idle = time.AfterFunc(time.Hour, func() { ctx.cancel(errStreamIdle) })
		e.sink.idle.Stop()
		e.sink.idleFor = g.streamIdle
	}
	e.forgetRequest(a)
	return true
}

// forgetRequest lets go of what only the attempts needed, once the answer
// is committed: the request's body (a prompt can be many kilobytes), the
// outbound request with its headers, the prompt's block hashes. A stream
// would otherwise hold them for its whole life.
func (e *exchange) forgetRequest(a *attempt) {
	e.releaseBody(e.sink.flush != nil)
	e.prefix = nil
	e.outHdr, e.out, e.outConn = nil, outReq{}, nil
	e.replay.Reset(nil)
	if a.sent != nil {
		a.sent.drop()
	}
	a.resp.Request = nil
}

// end finishes the answer once its body was copied (rerr: how that
// ended): the usage chunk, a mid-stream failure, the trailers.
func (e *exchange) end(a *attempt, rerr error) {
	resp, s := a.resp, &e.sink
	if rerr == nil && s.strip != nil && s.strip.flush(s.out) == nil && s.flush != nil {
		_ = s.flush()
	}
	if rerr != nil {
		if _, ok := rerr.(clientGone); ok || errors.Is(rerr, h1.ErrClientGone) {
			return // the client went away; not the backend's fault
		}
		if e.r.Context().Err() != nil {
			return // the client went away, which cancelled the read
		}
		if s.st != nil && s.st.aborted.Load() {
			return // Server.Close, which cancelled the read
		}
		e.midStreamFailure(a, rerr)
		return
	}
	if s.st != nil {
		// The last chunk and the trailers go out when the handler chain
		// has returned (connSlot.finish).
		s.st.done, s.st.trailer = true, resp.Trailer
		return
	}
	if len(resp.Trailer) > 0 {
		setTrailers(e.w.Header(), resp.Trailer, e.announced)
	}
}

// settle closes the backend's answer and accounts for it, however commit
// ended.
func (e *exchange) settle(a *attempt) {
	if e.sink.idle != nil {
		e.sink.idle.Stop()
	}
	_ = a.resp.Body.Close()
	e.g.metrics.request(a.u.pool, a.u.id, a.resp.StatusCode, time.Since(e.start))
	a.cancel(nil)
	e.release(a.u) // after the metrics: see reapLocked
}

// bodySink writes a committed answer's body to the client (h1.Sink).
type bodySink struct {
	out     io.Writer
	strip   *usageStrip // an OpenAI stream's usage chunk, taken out
	st      *directStream
	flush   func() error // a stream's: sends what was written (flusherOf, or st's); nil: not flushed
	idle    *time.Timer  // cancels the attempt when the backend falls silent
	idleFor time.Duration
}

// Emit writes p to the client and, if flush is set, sends it with what was
// written before.
func (s *bodySink) Emit(p []byte, flush bool) error {
	var err error
	if s.strip != nil {
		err = s.strip.write(s.out, p)
	} else {
		_, err = s.out.Write(p)
	}
	if err == nil && flush && s.flush != nil {
		if err = s.flush(); errors.Is(err, http.ErrNotSupported) {
			s.flush, err = nil, nil
		}
	}
	if err != nil {
		return clientGone{err}
	}
	return nil
}

// firstReady reports whether resp's body holds body bytes read with its
// head.
func firstReady(resp *http.Response) bool {
	b, ok := resp.Body.(*h1.Body)
	return ok && b.Ready()
}

// Waiting runs the idle timer while the backend is waited for.
func (s *bodySink) Waiting(on bool) {
	switch {
	case s.idle == nil:
	case on:
		s.idle.Reset(s.idleFor)
	default:
		s.idle.Stop()
	}
}

// clientGone is a failed write to the client (bodySink.Emit's error).
type clientGone struct{ error }

// copyBody hands s body's bytes read into a pooled buffer, each read
// flushed when s.flush is set (a stream).
func copyBody(body io.Reader, s *bodySink) error {
	pool := &copyBufPool
	if s.flush != nil {
		pool = &streamBufPool
	}
	bufp := pool.Get().(*[]byte)
	defer pool.Put(bufp)
	buf := *bufp
	for {
		s.Waiting(true)
		n, err := body.Read(buf)
		s.Waiting(false)
		if n > 0 {
			if werr := s.Emit(buf[:n], true); werr != nil {
				return werr
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// flusherOf returns w's flush, found as http.ResponseController.Flush
// finds it (FlushError, else Flush, on w or what it wraps through
// Unwrap), but once for a stream's life instead of at every token; nil if
// w cannot flush.
func flusherOf(w http.ResponseWriter) func() error {
	for range 16 {
		switch t := w.(type) {
		case interface{ FlushError() error }:
			return t.FlushError
		case http.Flusher:
			return func() error { t.Flush(); return nil }
		case interface{ Unwrap() http.ResponseWriter }:
			w = t.Unwrap()
		default:
			return nil
		}
	}
	return nil
}

// failKeptBackend ends a kept stream (e.kept) whose backend answered an
// error.
func (e *exchange) failKeptBackend(resp *http.Response) {
	msg, _ := readAtMost(resp.Body, 512, 4096)
	e.failKept(apiError{resp.StatusCode, "backend_error", fmt.Sprintf("backend answered %s: %s", resp.Status, bytes.TrimSpace(msg))})
}

// writeHead sets the client's headers from the backend's and writes
// them, taking a stream over from net/http if it can (stream.go). It
// returns the taken-over stream, if any, and the number of trailers
// announced.
func (e *exchange) writeHead(a *attempt, stream bool) (*directStream, int) {
	g, u, resp := e.g, a.u, a.resp
	h := e.w.Header()
	idPassed := false
	if fields, ok := h1.PassedFields(resp); ok {
		// Passed on as they came but for the hop-by-hop fields, without a
		// header map, when the writer is the h1 server's and the gateway's
		// CORS policy does not rewrite them; else into the header. The
		// backend's ID goes with them (in the room the answer's fields
		// have), so that a short answer's header map stays empty and the
		// server writes the head without a lookup in it.
		fields = passable(fields)
		if g.cors == nil && h1.PassFields(e.w, append(fields, h1.Field{Name: BackendHeader, Value: u.id})) {
			fields, idPassed = nil, true
		}
		for _, f := range fields {
			// A CORS policy's headers are the gateway's, not the backend's.
			if g.cors == nil || !isCORSHeader(f.Name) {
				h[f.Name] = append(h[f.Name], f.Value)
			}
		}
	}
	if conn := resp.Header["Connection"]; conn != nil {
		removeListedHeaders(resp.Header, conn)
	}
	for k, vv := range resp.Header {
		switch {
		case isHopHeader(k):
		case g.cors == nil:
			h[k] = vv
		case isCORSHeader(k):
			// The gateway's policy, not the backend's.
		case k == "Vary":
			h[k] = append(h[k], vv...)
		default:
			h[k] = vv
		}
	}
	if !idPassed {
		h[BackendHeader] = u.idHeader
	}
	if n := len(resp.Trailer); n > 0 {
		keys := make([]string, 0, n)
		for k := range resp.Trailer {
			keys = append(keys, k)
		}
		h["Trailer"] = []string{strings.Join(keys, ", ")}
	}
	if stream && serverStreams == "direct" {
		if st, wrote := e.takeOver(a, resp.StatusCode, h); wrote {
			return st, len(resp.Trailer)
		}
	}
	e.w.WriteHeader(resp.StatusCode)
	return nil, len(resp.Trailer)
}

// setTrailers sets the backend's trailers for net/http to send; those not
// announced (of the announced count) with http.TrailerPrefix.
func setTrailers(h, trailer http.Header, announced int) {
	for k, vv := range trailer {
		if len(trailer) != announced {
			k = http.TrailerPrefix + k
		}
		h[k] = vv
	}
}

// midStreamFailure counts a backend's failure after the answer was
// committed and aborts the client's response.
func (e *exchange) midStreamFailure(a *attempt, rerr error) {
	g, u := e.g, a.u
	if errors.Is(a.ctx.Cause(), errStreamIdle) {
		rerr = fmt.Errorf("%w (%v without a byte)", errStreamIdle, g.streamIdle)
	}
	g.recordFailure(u, "mid-stream: "+rerr.Error(), false)
	g.metrics.aborted()
	g.log.Warn("gateway: backend failed mid-response", "backend", u.id, "pool", u.pool, "err", rerr)
	panic(http.ErrAbortHandler)
}

// contentType returns the answer's Content-Type, from its passed fields
// (h1.Options.PassHeads) or its header.
func contentType(resp *http.Response) string {
	if f, ok := h1.PassedFields(resp); ok {
		return f.Get("Content-Type")
	}
	return resp.Header.Get("Content-Type")
}

// isStream reports whether a response is a token stream by its media
// type: NDJSON (Ollama) or Server-Sent Events (OpenAI API, vLLM).
func isStream(resp *http.Response) bool {
	ct := contentType(resp)
	return hasPrefixFold(ct, "application/x-ndjson") || hasPrefixFold(ct, "text/event-stream")
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// failRetry answers the activator's 429 and 503 with a Retry-After.
func (g *Gateway) failRetry(w http.ResponseWriter, r *http.Request, start time.Time, e apiError) {
	after := "10"
	if e.status == http.StatusTooManyRequests {
		after = "5"
	}
	w.Header().Set("Retry-After", after)
	g.fail(w, r, start, e)
}
