// Package admin serves TideGPU's admin API: pools and their instances,
// events, the gateway's backends, simulated reclaims, Prometheus metrics and
// health. It listens on loopback unless told otherwise, and when a token is
// set every endpoint but /healthz requires it.
package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tidegpu/tidegpu/internal/admin/guard"
	"github.com/tidegpu/tidegpu/internal/cost"
	"github.com/tidegpu/tidegpu/internal/engine"
	"github.com/tidegpu/tidegpu/internal/events"
	"github.com/tidegpu/tidegpu/internal/gateway"
)

// Pools is what the admin API reads and acts on (the engine's Manager).
type Pools interface {
	Pools() []engine.PoolView
	Pool(name string) (engine.PoolView, bool)
	Reclaim(ctx context.Context, pool, id string, notice time.Duration) error
	// Notice records a reclaim notice that the agent on an instance read
	// from its cloud's metadata service.
	Notice(pool, id string, at time.Time, source string) error
}

// Backends reports the gateway's backends (the embedded gateway).
type Backends interface {
	Backends() []gateway.BackendStatus
}

// Options configure the admin handler.
type Options struct {
	Pools    Pools               // required
	Events   *events.Recorder    // required
	Backends Backends            // optional
	Gatherer prometheus.Gatherer // for /metrics; nil serves none
	// Ledger serves /api/v1/cost; nil answers 404.
	Ledger *cost.Ledger
	// Token, when not empty, is required as "Authorization: Bearer TOKEN"
	// on every endpoint but /healthz.
	Token string
	// Usage, when set, takes the gateway replicas' token batches at
	// POST /api/v1/usage (usage.Ingest), behind the token.
	Usage http.Handler
	// Dashboard, when set, is the web dashboard (dashboard.Handler): its
	// page (GET /) and assets (GET /ui/) are served without the token, as
	// they hold no data and the page asks for the token; its JSON
	// (/api/v1/timeline, /api/v1/timeseries) sits behind the token.
	Dashboard http.Handler
}

// MaxNoticeSeconds bounds a simulated reclaim notice.
const MaxNoticeSeconds = 3600

// NewHandler returns the admin API's handler.
func NewHandler(o Options) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /api/v1/pools", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, o.Pools.Pools())
	})
	mux.HandleFunc("GET /api/v1/pools/{name}", func(w http.ResponseWriter, r *http.Request) {
		p, ok := o.Pools.Pool(r.PathValue("name"))
		if !ok {
			writeError(w, http.StatusNotFound, fmt.Sprintf("pool %q not found", r.PathValue("name")))
			return
		}
		writeJSON(w, http.StatusOK, p)
	})
	mux.HandleFunc("POST /api/v1/pools/{name}/instances/{id}/reclaim", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 4096))
		if err != nil {
			writeError(w, http.StatusBadRequest, "reading body: "+err.Error())
			return
		}
		notice, err := ParseReclaim(body)
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		pool, id := r.PathValue("name"), r.PathValue("id")
		err = o.Pools.Reclaim(r.Context(), pool, id, notice)
		switch {
		case errors.Is(err, engine.ErrNotFound):
			writeError(w, http.StatusNotFound, err.Error())
		case errors.Is(err, engine.ErrNotSupported):
			writeError(w, http.StatusNotImplemented, err.Error())
		case err != nil:
			writeError(w, http.StatusInternalServerError, err.Error())
		default:
			writeJSON(w, http.StatusAccepted, map[string]any{"pool": pool, "instance": id, "noticeSeconds": notice.Seconds()})
		}
	})
	mux.HandleFunc("POST /api/v1/pools/{name}/instances/{id}/notice", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 4096))
		if err != nil {
			writeError(w, http.StatusBadRequest, "reading body: "+err.Error())
			return
		}
		n, err := ParseNotice(body, time.Now())
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		pool, id := r.PathValue("name"), r.PathValue("id")
		switch err := o.Pools.Notice(pool, id, n.At, n.Source); {
		case errors.Is(err, engine.ErrNotFound):
			writeError(w, http.StatusNotFound, err.Error())
		case err != nil:
			writeError(w, http.StatusInternalServerError, err.Error())
		default:
			writeJSON(w, http.StatusAccepted, map[string]any{"pool": pool, "instance": id, "interruptAt": n.At})
		}
	})
	mux.HandleFunc("GET /api/v1/events", func(w http.ResponseWriter, r *http.Request) {
		since, err := parseSince(r.URL.Query().Get("since"))
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		evs := o.Events.List(since, r.URL.Query().Get("pool"))
		if evs == nil {
			evs = []events.Event{}
		}
		writeJSON(w, http.StatusOK, evs)
	})
	mux.HandleFunc("GET /api/v1/events/stream", func(w http.ResponseWriter, r *http.Request) {
		streamEvents(w, r, o.Events)
	})
	mux.HandleFunc("GET /api/v1/cost", costHandler(o.Ledger))
	mux.HandleFunc("GET /api/v1/backends", func(w http.ResponseWriter, _ *http.Request) {
		var bs []gateway.BackendStatus
		if o.Backends != nil {
			bs = o.Backends.Backends()
		}
		if bs == nil {
			bs = []gateway.BackendStatus{}
		}
		writeJSON(w, http.StatusOK, bs)
	})
	if o.Usage != nil {
		mux.Handle("POST /api/v1/usage", o.Usage)
	}
	if o.Gatherer != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(o.Gatherer, promhttp.HandlerOpts{}))
	}
	if o.Dashboard != nil {
		mux.Handle("GET /api/v1/timeline", o.Dashboard)
		mux.Handle("GET /api/v1/timeseries", o.Dashboard)
	}
	var h http.Handler = mux
	if o.Token != "" {
		h = guard.RequireToken(o.Token, mux)
	}
	h = refuseCrossSite(h)
	if o.Dashboard == nil {
		return h
	}
	outer := http.NewServeMux()
	outer.Handle("GET /{$}", o.Dashboard)
	outer.Handle("GET /ui/", o.Dashboard)
	outer.Handle("/", h)
	return outer
}

// refuseCrossSite closes the admin API to other web pages open in the same
// browser: a state-changing request must be JSON (a plain HTML form cannot
// send that without a CORS preflight we never grant) and must not come
// from another site (Sec-Fetch-Site). Command-line clients send neither
// browser header and are unaffected.
func refuseCrossSite(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			if site := r.Header.Get("Sec-Fetch-Site"); site == "cross-site" || site == "same-site" {
				writeError(w, http.StatusForbidden, "cross-site requests to the admin API are refused")
				return
			}
			ct := r.Header.Get("Content-Type")
			if r.ContentLength != 0 && !strings.HasPrefix(ct, "application/json") {
				writeError(w, http.StatusUnsupportedMediaType, "send the body as Content-Type: application/json")
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// ParseReclaim reads a reclaim request body: {"noticeSeconds": N}, N a whole
// number of seconds in [0, MaxNoticeSeconds]. An empty body means 0.
func ParseReclaim(body []byte) (time.Duration, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return 0, nil
	}
	var req struct {
		NoticeSeconds *float64 `json:"noticeSeconds"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return 0, fmt.Errorf("body: %v: send {\"noticeSeconds\": N}", err)
	}
	if dec.More() {
		return 0, errors.New(`body: trailing data after the JSON object: send {"noticeSeconds": N}`)
	}
	if req.NoticeSeconds == nil {
		return 0, nil
	}
	n := *req.NoticeSeconds
	if n < 0 || n > MaxNoticeSeconds || n != float64(int64(n)) {
		return 0, fmt.Errorf("noticeSeconds: invalid value %v: must be a whole number from 0 to %d", n, MaxNoticeSeconds)
	}
	return time.Duration(n) * time.Second, nil
}

// Notice is a reclaim notice as the agent reports it.
type Notice struct {
	// At is when the cloud will take the instance back.
	At time.Time `json:"interruptAt"`
	// Source says where the notice came from (aws-imds, tencent-metadata).
	Source string `json:"source"`
}

// ParseNotice reads {"interruptAt": RFC 3339 time, "source": "..."}; a
// missing or past time means now.
func ParseNotice(body []byte, now time.Time) (Notice, error) {
	var n struct {
		InterruptAt *time.Time `json:"interruptAt"`
		Source      string     `json:"source"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&n); err != nil {
		return Notice{}, fmt.Errorf(`body: %v: send {"interruptAt": "RFC 3339 time", "source": "..."}`, err)
	}
	if len(n.Source) > 64 {
		return Notice{}, errors.New("source: longer than 64 characters")
	}
	out := Notice{At: now, Source: n.Source}
	if out.Source == "" {
		out.Source = "agent"
	}
	if n.InterruptAt != nil && n.InterruptAt.After(now) {
		if n.InterruptAt.Sub(now) > 24*time.Hour {
			return Notice{}, errors.New("interruptAt: more than 24h ahead: not a reclaim notice")
		}
		out.At = *n.InterruptAt
	}
	return out, nil
}

func parseSince(s string) (uint64, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("since: %q is not a sequence number: use the seq of the last event seen", s)
	}
	return n, nil
}

func streamEvents(w http.ResponseWriter, r *http.Request, rec *events.Recorder) {
	fl, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, "streaming unsupported")
		return
	}
	since, err := parseSince(r.URL.Query().Get("since"))
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	ch, cancel := rec.Subscribe(256)
	defer cancel()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	last := since
	send := func(e events.Event) {
		if e.Seq <= last {
			return
		}
		last = e.Seq
		b, _ := json.Marshal(e)
		fmt.Fprintf(w, "id: %d\ndata: %s\n\n", e.Seq, b)
	}
	for _, e := range rec.List(since, "") {
		send(e)
	}
	fl.Flush()
	keepalive := time.NewTicker(15 * time.Second)
	defer keepalive.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case e := <-ch:
			send(e)
			fl.Flush()
		case <-keepalive.C:
			_, _ = io.WriteString(w, ": keepalive\n\n")
			fl.Flush()
		}
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}
