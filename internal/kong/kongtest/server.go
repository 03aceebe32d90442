// Package kongtest is an in-memory fake of the Kong Gateway 3.x Admin API,
// served over HTTP on a loopback port, for the tests of internal/kong and of
// the Kong registrar. Kong itself cannot run here, so this fake follows the
// documented behaviour instead:
//
//   - Admin API reference (entities, verbs, status codes):
//     https://docs.konghq.com/gateway/api/admin-oss/latest/
//   - Pagination: size defaults to 100, 1..1000; an opaque offset; "next" is
//     null on the last page (https://discuss.konghq.com/t/pagination-in-kong-admin-api/6638,
//     and kong/api/endpoints.lua, whose "next" link of a nested list carries
//     neither size nor tags).
//   - Tags: ?tags=a,b is AND, ?tags=a/b is OR, tag syntax [A-Za-z0-9._~-];
//     "Filtering by tags is not supported in foreign key relationship
//     endpoints" (https://docs.konghq.com/gateway/2.8.x/admin-api/#tags,
//     quoted in https://github.com/Kong/kong/issues/6779), so the targets of
//     an upstream are listed unfiltered.
//   - Targets: POST of an existing target is 409 since 3.0
//     (https://github.com/Kong/kong/pull/8798); PATCH updates; PUT of a
//     target that does not exist answers 404 although documented as an
//     upsert (https://github.com/Kong/kong/issues/12987). Targets are listed
//     newest first with a numeric offset (kong/db/dao/targets.lua); a target
//     without port gets 8000.
//   - Errors: Kong's JSON error bodies and codes (kong/db/errors.lua): 400
//     schema violation (code 2), 400 foreign key violation (code 4), 409
//     unique violation (code 5), 404 {"message":"Not found"}.
//   - RBAC: the Kong-Admin-Token header; a missing or wrong token answers
//     401 (https://docs.konghq.com/gateway/latest/admin-api/workspaces/examples).
//   - Health checks: the upstream's healthchecks record and its defaults
//     (https://developer.konghq.com/gateway/traffic-control/health-checks-circuit-breakers/).
//
// Faults can be injected (Down: connection refused; Unavailable: 503;
// Throttle: 429; Inject: any status for matching calls) and every call that
// reached the server is recorded.
package kongtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Call is one request that reached the fake.
type Call struct {
	Method string
	// Path is the unescaped request path.
	Path  string
	Query url.Values
	// Token is whether a Kong-Admin-Token header was sent (never its value).
	Token  bool
	Body   []byte
	Status int
}

// Fault makes matching calls fail with Status.
type Fault struct {
	// Method matches the request method; "" matches any.
	Method string
	// PathPrefix matches the start of the unescaped path; "" matches any.
	PathPrefix string
	// Status and Message are the answer.
	Status  int
	Message string
	// Times is how many calls fail; 0 means until ClearFaults.
	Times int
}

// Server is the fake Admin API. Create it with New.
type Server struct {
	// URL is the base URL of the Admin API (http://127.0.0.1:port).
	URL string

	tb   testing.TB
	addr string
	srv  *http.Server

	mu          sync.Mutex
	ln          net.Listener
	conns       map[net.Conn]struct{}
	down        bool
	unavailable bool
	token       string
	throttle    int
	pageLimit   int
	faults      []*Fault
	calls       []Call
	st          *store
}

// New starts a fake on a free loopback port; it is closed when the test ends.
func New(tb testing.TB) *Server {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("kongtest: listen: %v", err)
	}
	s := &Server{
		tb:        tb,
		addr:      ln.Addr().String(),
		ln:        ln,
		conns:     map[net.Conn]struct{}{},
		pageLimit: 1000,
		st:        newStore(),
	}
	s.URL = "http://" + s.addr
	s.srv = &http.Server{
		Handler:           s.middleware(s.routes()),
		ReadHeaderTimeout: 5 * time.Second,
		ConnState:         s.connState,
	}
	go func() { _ = s.srv.Serve(ln) }()
	tb.Cleanup(s.Close)
	return s
}

// Close stops the fake.
func (s *Server) Close() { _ = s.srv.Close() }

func (s *Server) connState(c net.Conn, st http.ConnState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch st {
	case http.StateNew:
		s.conns[c] = struct{}{}
	case http.StateClosed, http.StateHijacked:
		delete(s.conns, c)
	}
}

// Down(true) closes the listener and every open connection, so that calls
// fail with "connection refused" as when Kong is not running; Down(false)
// listens again on the same address.
func (s *Server) Down(down bool) {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if down == s.down {
		return
	}
	s.down = down
	if down {
		_ = s.ln.Close()
		for c := range s.conns {
			_ = c.Close()
		}
		return
	}
	var ln net.Listener
	var err error
	for range 50 { // the port was ours a moment ago; retry briefly if the OS lags
		if ln, err = net.Listen("tcp", s.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		s.tb.Fatalf("kongtest: listen again on %s: %v", s.addr, err)
	}
	s.ln = ln
	go func() { _ = s.srv.Serve(ln) }()
}

// Unavailable makes every call answer 503 (e.g. Kong up but its database
// not) until called with false.
func (s *Server) Unavailable(on bool) { s.mu.Lock(); s.unavailable = on; s.mu.Unlock() }

// SetToken turns RBAC on: calls must carry Kong-Admin-Token equal to token,
// else they answer 401. "" turns it off.
func (s *Server) SetToken(token string) { s.mu.Lock(); s.token = token; s.mu.Unlock() }

// Throttle makes the next n calls answer 429 with Retry-After: 1.
func (s *Server) Throttle(n int) { s.mu.Lock(); s.throttle = n; s.mu.Unlock() }

// SetPageLimit caps every page at n entities whatever size is asked (Kong
// clamps target pages at its max_page_size); default 1000.
func (s *Server) SetPageLimit(n int) { s.mu.Lock(); s.pageLimit = max(n, 1); s.mu.Unlock() }

// Inject adds a fault.
func (s *Server) Inject(f Fault) { s.mu.Lock(); s.faults = append(s.faults, &f); s.mu.Unlock() }

// ClearFaults removes every injected fault, throttle and the 503 mode.
func (s *Server) ClearFaults() {
	s.mu.Lock()
	s.faults, s.throttle, s.unavailable = nil, 0, false
	s.mu.Unlock()
}

// Calls returns the calls recorded since the start or the last ResetCalls.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.calls...)
}

// ResetCalls forgets the recorded calls.
func (s *Server) ResetCalls() { s.mu.Lock(); s.calls = nil; s.mu.Unlock() }

// recorder captures the status of an answer.
type recorder struct {
	http.ResponseWriter
	status int
}

// WriteHeader records the status.
func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

// Write records an implicit 200.
func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// middleware records the call and applies faults, RBAC and throttling
// before the entity handlers.
func (s *Server) middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
		if err != nil {
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec := &recorder{ResponseWriter: w}
		defer func() {
			s.mu.Lock()
			s.calls = append(s.calls, Call{Method: r.Method, Path: r.URL.Path, Query: r.URL.Query(),
				Token: r.Header.Get("Kong-Admin-Token") != "", Body: body, Status: rec.status})
			s.mu.Unlock()
		}()

		s.mu.Lock()
		unavailable, token := s.unavailable, s.token
		throttled := s.throttle > 0
		if throttled {
			s.throttle--
		}
		var fault *Fault
		for i, f := range s.faults {
			if (f.Method == "" || f.Method == r.Method) && strings.HasPrefix(r.URL.Path, f.PathPrefix) {
				fault = f
				if f.Times > 0 {
					if f.Times--; f.Times == 0 {
						s.faults = append(s.faults[:i:i], s.faults[i+1:]...)
					}
				}
				break
			}
		}
		s.mu.Unlock()

		switch {
		case unavailable:
			writeJSON(rec, http.StatusServiceUnavailable, map[string]any{"message": "Service Unavailable"})
		case token != "" && r.Header.Get("Kong-Admin-Token") != token:
			writeJSON(rec, http.StatusUnauthorized, map[string]any{"message": "Invalid credentials. Token or User credentials required"})
		case throttled:
			rec.Header().Set("Retry-After", "1")
			writeJSON(rec, http.StatusTooManyRequests, map[string]any{"message": "API rate limit exceeded"})
		case fault != nil:
			msg := fault.Message
			if msg == "" {
				msg = http.StatusText(fault.Status)
			}
			writeJSON(rec, fault.Status, map[string]any{"message": msg})
		default:
			next.ServeHTTP(rec, r)
		}
	})
}

// routes maps the Admin API endpoints the fake serves.
func (s *Server) routes() http.Handler {
	m := http.NewServeMux()
	m.HandleFunc("GET /upstreams", s.listRoot(kindUpstream))
	m.HandleFunc("POST /upstreams", s.create(kindUpstream))
	m.HandleFunc("GET /upstreams/{key}", s.get(kindUpstream))
	m.HandleFunc("PATCH /upstreams/{key}", s.patch(kindUpstream))
	m.HandleFunc("PUT /upstreams/{key}", s.put(kindUpstream))
	m.HandleFunc("DELETE /upstreams/{key}", s.del(kindUpstream))

	m.HandleFunc("GET /services", s.listRoot(kindService))
	m.HandleFunc("POST /services", s.create(kindService))
	m.HandleFunc("GET /services/{key}", s.get(kindService))
	m.HandleFunc("PATCH /services/{key}", s.patch(kindService))
	m.HandleFunc("PUT /services/{key}", s.put(kindService))
	m.HandleFunc("DELETE /services/{key}", s.del(kindService))
	m.HandleFunc("GET /services/{key}/routes", s.listServiceRoutes)
	m.HandleFunc("POST /services/{key}/routes", s.createServiceRoute)

	m.HandleFunc("GET /routes", s.listRoot(kindRoute))
	m.HandleFunc("POST /routes", s.create(kindRoute))
	m.HandleFunc("GET /routes/{key}", s.get(kindRoute))
	m.HandleFunc("PATCH /routes/{key}", s.patch(kindRoute))
	m.HandleFunc("PUT /routes/{key}", s.put(kindRoute))
	m.HandleFunc("DELETE /routes/{key}", s.del(kindRoute))

	m.HandleFunc("GET /upstreams/{key}/targets", s.listTargets)
	m.HandleFunc("POST /upstreams/{key}/targets", s.createTarget)
	m.HandleFunc("GET /upstreams/{key}/targets/{target}", s.getTarget)
	m.HandleFunc("PATCH /upstreams/{key}/targets/{target}", s.updateTarget(false))
	m.HandleFunc("PUT /upstreams/{key}/targets/{target}", s.updateTarget(true))
	m.HandleFunc("DELETE /upstreams/{key}/targets/{target}", s.deleteTarget)
	return m
}

// apiError is an error answer in Kong's shape.
type apiError struct {
	status int
	body   map[string]any
}

func notFound() *apiError {
	return &apiError{http.StatusNotFound, map[string]any{"message": "Not found"}}
}

func badRequest(msg string) *apiError {
	return &apiError{http.StatusBadRequest, map[string]any{"message": msg}}
}

// schemaViolation is code 2 of kong/db/errors.lua.
func schemaViolation(field, problem string) *apiError {
	return &apiError{http.StatusBadRequest, map[string]any{
		"code": 2, "name": "schema violation",
		"message": "schema violation (" + field + ": " + problem + ")",
		"fields":  map[string]any{field: problem},
	}}
}

// uniqueViolation is code 5 of kong/db/errors.lua.
func uniqueViolation(fields map[string]any) *apiError {
	b, _ := json.Marshal(fields)
	return &apiError{http.StatusConflict, map[string]any{
		"code": 5, "name": "unique constraint violation",
		"message": "UNIQUE violation detected on '" + string(b) + "'",
		"fields":  fields,
	}}
}

// foreignKeyViolation is code 4 of kong/db/errors.lua.
func foreignKeyViolation(msg string) *apiError {
	return &apiError{http.StatusBadRequest, map[string]any{
		"code": 4, "name": "foreign key violation", "message": msg,
	}}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, e *apiError) { writeJSON(w, e.status, e.body) }

// decodeBody reads a JSON object body (Kong also takes form bodies; the
// fake, like our client, speaks JSON only).
func decodeBody(r *http.Request) (map[string]any, *apiError) {
	b, _ := io.ReadAll(r.Body)
	if len(bytes.TrimSpace(b)) == 0 {
		return map[string]any{}, nil
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		return nil, &apiError{http.StatusUnsupportedMediaType, map[string]any{"message": "Unsupported Content-Type: " + ct}}
	}
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil || m == nil {
		return nil, badRequest("Cannot parse JSON body")
	}
	return m, nil
}

// pageSize reads ?size= as Kong does: absent is 100; it must be a number
// in 1..1000 (the DAO's "size must be an integer between 1 and 1000").
func pageSize(q url.Values) (int, *apiError) {
	v := q.Get("size")
	if v == "" {
		return 100, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, &apiError{http.StatusBadRequest, map[string]any{"code": 9, "name": "invalid size", "message": "size must be a number"}}
	}
	if n < 1 || n > 1000 {
		return 0, &apiError{http.StatusBadRequest, map[string]any{"code": 9, "name": "invalid size", "message": "size must be an integer between 1 and 1000"}}
	}
	return n, nil
}

var errTagSyntax = errors.New("invalid tags filter")

// Target is a stored target as the tests see it.
type Target struct {
	ID     string
	Target string
	Weight int
	Tags   []string
}

// Targets returns the targets of the upstream (name or id), oldest first;
// nil when there is no such upstream.
func (s *Server) Targets(upstream string) []Target {
	s.mu.Lock()
	defer s.mu.Unlock()
	up := s.st.find(kindUpstream, upstream)
	if up == nil {
		return nil
	}
	var out []Target
	for _, e := range s.targetsOfLocked(up["id"].(string)) {
		t := Target{ID: e["id"].(string), Target: e["target"].(string)}
		t.Weight, _ = asInt(e["weight"])
		if arr, ok := e["tags"].([]any); ok {
			for _, x := range arr {
				if str, ok := x.(string); ok {
					t.Tags = append(t.Tags, str)
				}
			}
		}
		out = append(out, t)
	}
	return out
}

// Upstream returns a copy of the upstream with that name or id, or nil.
func (s *Server) Upstream(key string) map[string]any { return s.entity(kindUpstream, key) }

// Service returns a copy of the service with that name or id, or nil.
func (s *Server) Service(key string) map[string]any { return s.entity(kindService, key) }

// Route returns a copy of the route with that name or id, or nil.
func (s *Server) Route(key string) map[string]any { return s.entity(kindRoute, key) }

func (s *Server) entity(k kind, key string) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.st.find(k, key)
	if e == nil {
		return nil
	}
	return clone(e)
}
