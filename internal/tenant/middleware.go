package tenant

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidegpu/tidegpu/internal/gateway"
)

// Options configure the middleware.
type Options struct {
	// MaxBodyBytes bounds the body read to find the model and the token
	// estimate; it should be the gateway's (0: gateway.DefaultMaxBodyBytes).
	// A larger body is passed on unread, for the gateway to refuse.
	MaxBodyBytes int64
	// ForwardKey keeps the key headers (Authorization, x-api-key) on the
	// request to the backend, as the keys file's forwardKey does; by
	// default they are removed.
	ForwardKey bool
	// ParseUsage reads the token counts from the end of an answer (the
	// cost ledger's parser); nil: only the usage of streams the gateway
	// strips (gateway.WithUsageHook) settles the token limits, other
	// answers keep their estimate.
	ParseUsage func(tail []byte) (model string, prompt, completion int64, ok bool)
	// Registerer, if non-nil, gets the tenant metrics.
	Registerer prometheus.Registerer
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// Spend, if non-nil, is consulted for keys with a monthlyBudget: a
	// tenant whose spend this month reached it gets 429 (spend.go).
	Spend Spend
}

// Middleware authenticates each request to next by its API key
// (Authorization: Bearer KEY or x-api-key: KEY), refuses models and pools
// the key does not allow, and holds it to its tenant's limits; see the
// package documentation. Refusals are answered in the API's own error shape:
// OpenAI's on /v1 paths, Ollama's elsewhere. Handler.SetKeys replaces the
// keys while it serves.
func Middleware(next http.Handler, keys *Keys, opts Options) (*Handler, error) {
	if keys == nil || keys.Len() == 0 {
		return nil, errors.New("tenant: no keys")
	}
	if opts.MaxBodyBytes == 0 {
		opts.MaxBodyBytes = gateway.DefaultMaxBodyBytes
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	m := &Handler{next: next, opts: opts, lim: NewLimiter(keys),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidegpu_gateway_tenant_requests_total",
			Help: "Requests by tenant (\"unauthenticated\" for a missing or unknown key) and status code.",
		}, []string{"tenant", "code"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidegpu_gateway_tenant_tokens_total",
			Help: "Tokens of answered requests by tenant and kind (prompt, completion), as the answers count them.",
		}, []string{"tenant", "kind"}),
	}
	if opts.Registerer != nil {
		for _, c := range []prometheus.Collector{m.requests, m.tokens} {
			if err := opts.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("tenant metrics: %w", err)
			}
		}
	}
	m.keys.Store(keys)
	return m, nil
}

// Handler is the middleware.
type Handler struct {
	next     http.Handler
	keys     atomic.Pointer[Keys]
	setMu    sync.Mutex // orders SetKeys calls
	opts     Options
	lim      *Limiter
	requests *prometheus.CounterVec
	tokens   *prometheus.CounterVec
}

// SetKeys makes ks the keys from the next request on, as a reload of the
// keys file does. Requests under way finish under the keys they started
// with. The tenants that stay keep their limits' state (Limiter.Update).
func (m *Handler) SetKeys(ks *Keys) error {
	if ks == nil || ks.Len() == 0 {
		return errors.New("tenant: no keys")
	}
	m.setMu.Lock()
	defer m.setMu.Unlock()
	m.lim.Update(ks, m.opts.Now())
	m.keys.Store(ks)
	return nil
}

// Unauthenticated is the tenant label of requests without a valid key.
const Unauthenticated = "unauthenticated"

func (m *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	openAI := strings.HasPrefix(r.URL.Path, "/v1/")
	keys := m.keys.Load()
	presented, ok := presentedKey(r.Header)
	if !m.opts.ForwardKey && !keys.forwardKey {
		r.Header.Del("Authorization")
		r.Header.Del("X-Api-Key")
	}
	if !ok {
		m.refuse(w, openAI, Unauthenticated, http.StatusUnauthorized, "invalid_request_error", "missing_api_key",
			"no API key: send it as \"Authorization: Bearer KEY\" or \"x-api-key: KEY\"")
		return
	}
	k := keys.Lookup(presented)
	if k == nil {
		m.refuse(w, openAI, Unauthenticated, http.StatusUnauthorized, "invalid_request_error", "invalid_api_key",
			"invalid API key")
		return
	}

	body, whole := m.readBody(r)
	req := parseRequest(body, whole)
	if req.model != "" && len(k.Models) > 0 && !allowed(k.Models, req.model) {
		m.refuse(w, openAI, k.Tenant, http.StatusForbidden, "invalid_request_error", "model_not_allowed",
			fmt.Sprintf("model %q is not allowed for this key (allowed: %s)", req.model, strings.Join(k.Models, ", ")))
		return
	}
	if len(k.Pools) > 0 {
		pool := r.Header.Get(gateway.PoolHeader)
		switch {
		case pool == "" && len(k.Pools) == 1:
			r.Header.Set(gateway.PoolHeader, k.Pools[0])
		case pool == "":
			m.refuse(w, openAI, k.Tenant, http.StatusForbidden, "invalid_request_error", "pool_required",
				fmt.Sprintf("this key may use pools %s: name one in the %s header", strings.Join(k.Pools, ", "), gateway.PoolHeader))
			return
		case !slices.Contains(k.Pools, pool):
			m.refuse(w, openAI, k.Tenant, http.StatusForbidden, "invalid_request_error", "pool_not_allowed",
				fmt.Sprintf("pool %q is not allowed for this key (allowed: %s)", pool, strings.Join(k.Pools, ", ")))
			return
		}
	}

	now := m.opts.Now()
	if m.refuseOverBudget(w, openAI, k, now) {
		return
	}
	d := m.lim.Admit(k, req.estimate, now)
	setRateHeaders(w.Header(), d)
	if !d.OK {
		w.Header().Set("Retry-After", strconv.FormatInt(max(1, int64(math.Ceil(d.Retry.Seconds()))), 10))
		typ := d.Denied
		msg := fmt.Sprintf("rate limit reached for %s: %s, try again in %s", k.Tenant, limitText(d.Denied, k.Limits), d.Retry.Round(time.Millisecond))
		m.refuse(w, openAI, k.Tenant, http.StatusTooManyRequests, typ, "rate_limit_exceeded", msg)
		return
	}

	// The stream's usage, if the gateway strips it, comes through the
	// hook; every other answer's from its tail.
	var (
		mu       sync.Mutex
		hooked   bool
		hp, hc   int64
		tw       = &tailWriter{ResponseWriter: w}
		settled  bool
		used     = req.estimate
		prompt   int64
		complete int64
	)
	ctx := gateway.WithUsageHook(WithInfo(r.Context(), Info{Tenant: k.Tenant, Labels: k.Labels}), func(_, _ string, p, c int64) {
		mu.Lock()
		hooked, hp, hc = true, p, c
		mu.Unlock()
	})
	ctx = gateway.WithTenant(ctx, gateway.Tenant{Name: k.Tenant, Weight: k.Weight, Priority: k.Priority})
	defer func() {
		// Runs on a panic too (http.ErrAbortHandler), so the slot is freed.
		if !settled {
			m.lim.Done(d, req.estimate, used, m.opts.Now())
		}
	}()
	m.next.ServeHTTP(tw, r.WithContext(ctx))

	status := tw.status
	if status == 0 {
		status = http.StatusOK
	}
	mu.Lock()
	got := hooked
	prompt, complete = hp, hc
	mu.Unlock()
	if !got && status < 300 && m.opts.ParseUsage != nil {
		_, prompt, complete, got = m.opts.ParseUsage(tw.tail())
	}
	switch {
	case got:
		used = prompt + complete
		m.tokens.WithLabelValues(k.Tenant, "prompt").Add(float64(prompt))
		m.tokens.WithLabelValues(k.Tenant, "completion").Add(float64(complete))
	case status >= 400:
		used = 0 // nothing was generated
	}
	settled = true
	m.lim.Done(d, req.estimate, used, m.opts.Now())
	m.requests.WithLabelValues(k.Tenant, strconv.Itoa(status)).Inc()
}

// presentedKey returns the key of a request: the Bearer token of
// Authorization, else x-api-key.
func presentedKey(h http.Header) (string, bool) {
	if a := h.Get("Authorization"); a != "" {
		if scheme, tok, ok := strings.Cut(a, " "); ok && strings.EqualFold(scheme, "Bearer") {
			if tok = strings.TrimSpace(tok); tok != "" {
				return tok, true
			}
		}
	}
	if k := strings.TrimSpace(h.Get("X-Api-Key")); k != "" {
		return k, true
	}
	return "", false
}

// readBody reads up to MaxBodyBytes of r's body and puts it back, so the
// gateway reads the same bytes. whole is false when the body was longer
// (the rest is left unread, for the gateway to refuse as too large).
func (m *Handler) readBody(r *http.Request) (body []byte, whole bool) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, true
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, m.opts.MaxBodyBytes+1))
	whole = err == nil && int64(len(b)) <= m.opts.MaxBodyBytes
	var rd io.Reader = bytes.NewReader(b)
	if !whole {
		rd = io.MultiReader(bytes.NewReader(b), r.Body)
	}
	r.Body = readCloser{rd, r.Body}
	return b, whole
}

type readCloser struct {
	io.Reader
	io.Closer
}

// request is what the middleware reads from a body.
type request struct {
	model    string
	estimate int64 // tokens: the prompt's estimate plus the completion's cap
}

// parseRequest reads the model and estimates the tokens of a request body
// (outside input): about four bytes a prompt token (the body, as an upper
// bound of the prompt), plus the completion's cap if the request sets one
// (OpenAI max_tokens, max_completion_tokens, max_output_tokens; Ollama
// options.num_predict). A body that is not a JSON object has no model and
// is estimated by its length.
func parseRequest(body []byte, whole bool) request {
	q := request{estimate: int64(len(body)+3) / 4}
	if !whole {
		return q
	}
	var b struct {
		Model               string `json:"model"`
		MaxTokens           int64  `json:"max_tokens"`
		MaxCompletionTokens int64  `json:"max_completion_tokens"`
		MaxOutputTokens     int64  `json:"max_output_tokens"`
		Options             struct {
			NumPredict int64 `json:"num_predict"`
		} `json:"options"`
	}
	if json.Unmarshal(body, &b) != nil {
		return q
	}
	q.model = b.Model
	if c := max(b.MaxTokens, b.MaxCompletionTokens, b.MaxOutputTokens, b.Options.NumPredict); c > 0 {
		q.estimate += min(c, 1<<40)
	}
	return q
}

// allowed reports whether model is one of models; a name without a tag
// means its ":latest", as Ollama reads it.
func allowed(models []string, model string) bool {
	norm := func(s string) string { return strings.TrimSuffix(s, ":latest") }
	for _, m := range models {
		if norm(m) == norm(model) {
			return true
		}
	}
	return false
}

func limitText(which string, l Limits) string {
	switch which {
	case LimitRequests:
		return fmt.Sprintf("limit %d requests per minute", l.RequestsPerMinute)
	case LimitTokens:
		return fmt.Sprintf("limit %d tokens per minute", l.TokensPerMinute)
	}
	return fmt.Sprintf("limit %d concurrent requests", l.Concurrent)
}

// setRateHeaders sets OpenAI's x-ratelimit-* headers
// (https://platform.openai.com/docs/guides/rate-limits, "Rate limits in
// headers") for the limits the key has.
func setRateHeaders(h http.Header, d Decision) {
	for _, x := range []struct {
		name string
		w    *Window
	}{{"requests", d.Requests}, {"tokens", d.Tokens}} {
		if x.w == nil {
			continue
		}
		h.Set("X-Ratelimit-Limit-"+x.name, strconv.FormatInt(x.w.Limit, 10))
		h.Set("X-Ratelimit-Remaining-"+x.name, strconv.FormatInt(x.w.Remaining, 10))
		h.Set("X-Ratelimit-Reset-"+x.name, x.w.Reset.Round(time.Millisecond).String())
	}
}

// refuse answers a request the middleware does not pass on, in OpenAI's
// error shape ({"error":{"message","type","code"}}) on /v1 paths and
// Ollama's ({"error":"..."}) elsewhere.
func (m *Handler) refuse(w http.ResponseWriter, openAI bool, tenant string, code int, typ, errCode, msg string) {
	b := gateway.ErrorBody(openAI, typ, errCode, msg)
	if code == http.StatusUnauthorized && openAI {
		w.Header().Set("WWW-Authenticate", `Bearer realm="tidegpu"`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
	m.requests.WithLabelValues(tenant, strconv.Itoa(code)).Inc()
}

// tailSize is how much of an answer is kept for ParseUsage: the counts are
// in the last chunk, or at the end of a whole answer.
const tailSize = 4096

// tailWriter passes everything through and keeps the status and the last
// tailSize bytes.
type tailWriter struct {
	http.ResponseWriter
	status int
	buf    []byte
}

func (t *tailWriter) WriteHeader(code int) {
	if t.status == 0 && code >= 200 {
		t.status = code
	}
	t.ResponseWriter.WriteHeader(code)
}

func (t *tailWriter) Write(p []byte) (int, error) {
	if t.status == 0 {
		t.status = http.StatusOK
	}
	n, err := t.ResponseWriter.Write(p)
	t.keep(p[:n])
	return n, err
}

// TapBody keeps the bytes of a stream the gateway writes straight to the
// client connection (gateway.StreamTap).
func (t *tailWriter) TapBody(p []byte) { t.keep(p) }

func (t *tailWriter) keep(p []byte) {
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2*tailSize {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-tailSize:]...)
	}
}

func (t *tailWriter) tail() []byte {
	if len(t.buf) > tailSize {
		return t.buf[len(t.buf)-tailSize:]
	}
	return t.buf
}

// Flush keeps streams streaming.
func (t *tailWriter) Flush() {
	if f, ok := t.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the real writer.
func (t *tailWriter) Unwrap() http.ResponseWriter { return t.ResponseWriter }
