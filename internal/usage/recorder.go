// Package usage counts the tokens a gateway serves and brings them to the
// cost ledger: the Recorder reads each answer's token counts (and the usage
// chunks the gateway removed from streams) for the backend that served it;
// SampleBusy turns the gateway's in-flight counts into busy periods; in
// `tidegpu up` both feed the ledger directly, and a standalone gateway
// replica sends them to the operator's ledger with a Reporter, where an
// Ingest counts each batch once.
package usage

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/tidegpu/tidegpu/internal/cost"
	"github.com/tidegpu/tidegpu/internal/gateway"
	"github.com/tidegpu/tidegpu/internal/tenant"
)

// tailSize is how much of each answer is kept to read its token counts:
// Ollama and OpenAI put them in the last chunk (or at the end of a whole
// answer).
const tailSize = 4096

// Sink receives the tokens of one answer served by a backend.
type Sink func(backendID, model string, prompt, completion int64)

// UseSink receives one answer's use of a backend by a tenant: its tokens
// and its time in flight (cost.Use), for the cost per tenant.
type UseSink func(backendID, model string, u cost.Use)

// Recorder wraps the gateway and, after each answer, gives Sink the tokens
// it carried (Ollama prompt_eval_count/eval_count, OpenAI chat and
// completions usage, Responses usage, embeddings' prompt tokens) for the
// backend that served it (X-Tidegpu-Backend), and Use the same with the
// request's tenant (tenant.InfoFrom: the tenant middleware in front puts it
// on the context) and its time in flight. The usage of OpenAI streams
// whose client did not ask for it never reaches the client, so never the
// tail: the gateway hands it to the hook the Recorder puts on the request's
// context (gateway.WithUsageHook, chained to any hook already there).
// Each answer's tokens reach Sink once.
type Recorder struct {
	// Next is the gateway; set before the first request.
	Next http.Handler
	// Sink gets the counts; set before the first request.
	Sink Sink
	// Use, if non-nil, gets each answer's use with its tenant.
	Use UseSink
	// Now is the clock of the requests' time in flight (nil: time.Now).
	Now func() time.Time
}

// StreamUsage is the gateway's Options.OnUsage: setting it makes the
// gateway ask streams for their usage. It records nothing itself: the
// Recorder takes each stream's usage from the hook on its request's
// context, where the request's tenant is known.
func (u *Recorder) StreamUsage(backendID, model string, prompt, completion int64) {}

func (u *Recorder) now() time.Time {
	if u.Now != nil {
		return u.Now()
	}
	return time.Now()
}

func (u *Recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := u.now()
	tw := &tailWriter{ResponseWriter: w}
	var head *headReader
	if r.Body != nil && r.Body != http.NoBody {
		head = &headReader{ReadCloser: r.Body}
		r.Body = head
	}
	info, _ := tenant.InfoFrom(r.Context())
	record := func(id, model string, prompt, completion int64) {
		u.Sink(id, model, prompt, completion)
		if u.Use != nil {
			u.Use(id, model, cost.Use{Tenant: info.Tenant, Labels: info.Labels, Prompt: prompt, Completion: completion, Start: start, End: u.now()})
		}
	}
	// A stream's usage is recorded as soon as the gateway finds it, as
	// the gateway's OnUsage was (a client that reads the stream's end
	// finds it counted).
	var hooked atomic.Bool
	outer := gateway.UsageHook(r.Context())
	ctx := gateway.WithUsageHook(r.Context(), func(backendID, model string, prompt, completion int64) {
		if hooked.CompareAndSwap(false, true) {
			record(backendID, model, prompt, completion)
		}
		if outer != nil {
			outer(backendID, model, prompt, completion)
		}
	})
	u.Next.ServeHTTP(tw, r.WithContext(ctx))
	if hooked.Load() {
		return
	}
	id := w.Header().Get(gateway.BackendHeader)
	if id == "" || tw.status >= 300 {
		return
	}
	model, prompt, completion, got := ParseUsage(tw.tail())
	if !got {
		return
	}
	if model == "" && head != nil {
		// A long answer (embeddings) names its model only at its
		// start: take the request's.
		if m := reModel.FindSubmatch(head.buf); m != nil {
			model = string(m[1])
		}
	}
	record(id, model, prompt, completion)
}

// headReader passes a request body through and keeps its first tailSize
// bytes, where clients put "model".
type headReader struct {
	io.ReadCloser
	buf []byte
}

func (h *headReader) Read(p []byte) (int, error) {
	n, err := h.ReadCloser.Read(p)
	if room := tailSize - len(h.buf); room > 0 {
		h.buf = append(h.buf, p[:min(n, room)]...)
	}
	return n, err
}

// tailWriter passes everything through and keeps the last tailSize bytes.
type tailWriter struct {
	http.ResponseWriter
	status int
	buf    [2 * tailSize]byte
	n      int
}

func (t *tailWriter) WriteHeader(code int) {
	if t.status == 0 {
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
	if len(p) >= tailSize {
		t.n = copy(t.buf[:], p[len(p)-tailSize:])
		return
	}
	if t.n+len(p) > len(t.buf) {
		keep := tailSize - len(p)
		copy(t.buf[:], t.buf[t.n-keep:t.n])
		t.n = keep
	}
	t.n += copy(t.buf[t.n:], p)
}

func (t *tailWriter) tail() []byte { return t.buf[:t.n] }

// Flush keeps streams streaming.
func (t *tailWriter) Flush() {
	if f, ok := t.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the real writer.
func (t *tailWriter) Unwrap() http.ResponseWriter { return t.ResponseWriter }

// Hijack is passed through (the gateway takes streams over; see TapBody).
func (t *tailWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(t.ResponseWriter).Hijack()
}

var (
	reModel      = regexp.MustCompile(`"model"\s*:\s*"([^"\\]{1,200})"`)
	rePromptOll  = regexp.MustCompile(`"prompt_eval_count"\s*:\s*(\d{1,12})`)
	reEvalOll    = regexp.MustCompile(`"eval_count"\s*:\s*(\d{1,12})`)
	rePromptOpen = regexp.MustCompile(`"prompt_tokens"\s*:\s*(\d{1,12})`)
	reCompOpen   = regexp.MustCompile(`"completion_tokens"\s*:\s*(\d{1,12})`)
	// The Responses API's usage (a whole answer, or the response.completed
	// event that ends a stream).
	reInputResp  = regexp.MustCompile(`"input_tokens"\s*:\s*(\d{1,12})`)
	reOutputResp = regexp.MustCompile(`"output_tokens"\s*:\s*(\d{1,12})`)
)

// ParseUsage reads the token counts from the end of an answer (outside
// input): the last Ollama counts, OpenAI chat/completions usage, Responses
// usage (input_tokens/output_tokens), or an embedding's prompt count alone
// (Ollama /api/embed prompt_eval_count, OpenAI /v1/embeddings
// prompt_tokens), and the model. ok is false when the tail carries no
// counts (an unfinished stream, a stream without usage, an error).
func ParseUsage(tail []byte) (model string, prompt, completion int64, ok bool) {
	last := func(re *regexp.Regexp) (string, bool) {
		m := re.FindAllSubmatch(tail, -1)
		if len(m) == 0 {
			return "", false
		}
		return string(m[len(m)-1][1]), true
	}
	num := func(s string) int64 {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < 0 {
			return 0
		}
		return v
	}
	if m, found := last(reModel); found {
		model = m
	}
	if c, found := last(reEvalOll); found {
		p, _ := last(rePromptOll)
		return model, num(p), num(c), true
	}
	if c, found := last(reCompOpen); found {
		p, _ := last(rePromptOpen)
		return model, num(p), num(c), true
	}
	if c, found := last(reOutputResp); found {
		p, _ := last(reInputResp)
		return model, num(p), num(c), true
	}
	for _, re := range []*regexp.Regexp{rePromptOll, rePromptOpen} {
		if p, found := last(re); found {
			return model, num(p), 0, true
		}
	}
	return model, 0, 0, false
}

// SampleBusy samples the gateway's in-flight counts every interval and calls
// start when a backend turns busy (a request in flight) and end when it
// turns idle or disappears, until ctx ends, when it ends every busy period.
// Sampling bounds the error of each busy period to one interval.
func SampleBusy(ctx context.Context, backends func() []gateway.BackendStatus, every time.Duration, start, end func(id string, at time.Time)) {
	t := time.NewTicker(every)
	defer t.Stop()
	busy := map[string]bool{}
	for {
		select {
		case <-ctx.Done():
			now := time.Now()
			for id, b := range busy {
				if b {
					end(id, now)
				}
			}
			return
		case now := <-t.C:
			seen := map[string]bool{}
			for _, b := range backends() {
				seen[b.ID] = true
				on := b.InFlight > 0
				switch {
				case on && !busy[b.ID]:
					start(b.ID, now)
				case !on && busy[b.ID]:
					end(b.ID, now)
				}
				busy[b.ID] = on
			}
			for id, b := range busy {
				if !seen[id] {
					if b {
						end(id, now)
					}
					delete(busy, id)
				}
			}
		}
	}
}
