package sim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// InstanceHeader is the response header carrying Config.InstanceID.
const InstanceHeader = "X-Tidegpu-Instance"

// ollamaVersion is the Ollama API version the simulator reports.
const ollamaVersion = "0.17.4"

// contextLength is the context window every simulated model reports.
const contextLength = 4096

// maxBodyBytes bounds request bodies.
const maxBodyBytes = 32 << 20

// Server is one simulated inference backend. It is an [http.Handler]; create
// it with [New] and release it with [Server.Close].
type Server struct {
	cfg     Config
	mux     *http.ServeMux
	adm     *admission
	met     *metrics
	cache   *prefixCache      // nil: no prefix caching
	models  map[string]string // accepted name -> configured name
	started time.Time
	ids     atomic.Uint64

	done      chan struct{} // closed by Close
	closeOnce sync.Once
}

// New returns a backend simulator for cfg. Zero fields of cfg take their
// defaults: Models ["qwen2:0.5b"], TTFT 20ms, TokenTime 5ms, BatchSlowdown
// 0.05, MaxBatch 8, MaxQueue unlimited, OutputTokens 32, SlowFactor 1.
// Negative TTFT, TokenTime and BatchSlowdown mean zero; other out-of-range
// values take the defaults. The server is ready to serve when New returns.
func New(cfg Config) *Server {
	cfg = cfg.withDefaults()
	s := &Server{
		cfg:     cfg,
		mux:     http.NewServeMux(),
		adm:     newAdmission(cfg.MaxBatch, cfg.MaxQueue),
		met:     newMetrics(cfg, time.Now),
		cache:   newPrefixCache(cfg.PrefixCacheTokens, cfg.PrefixBlockTokens),
		models:  map[string]string{},
		started: time.Now(),
		done:    make(chan struct{}),
	}
	s.adm.onChange = s.met.loadChanged
	s.met.watchCache(s.cache)
	for _, m := range cfg.Models {
		s.models[m] = m
	}
	for _, m := range cfg.Models {
		// Ollama resolves a name without a tag to name:latest.
		if _, ok := s.models[m+":latest"]; !ok && !hasTag(m) {
			s.models[m+":latest"] = m
		}
		if base, ok := strings.CutSuffix(m, ":latest"); ok {
			if _, ok := s.models[base]; !ok {
				s.models[base] = m
			}
		}
	}

	s.mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "Ollama is running")
	})
	s.mux.HandleFunc("GET /healthz", s.handleHealthz)
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(s.met.reg, promhttp.HandlerOpts{}))
	s.mux.HandleFunc("GET /api/version", s.handleVersion)
	s.mux.HandleFunc("GET /api/tags", s.handleTags)
	s.mux.HandleFunc("GET /api/ps", s.handlePS)
	s.mux.HandleFunc("POST /api/show", s.handleShow)
	s.mux.HandleFunc("POST /api/embed", s.handleOllamaEmbed)
	s.mux.HandleFunc("POST /api/embeddings", s.handleOllamaEmbeddings)
	s.mux.HandleFunc("POST /api/chat", s.generationHandler(apiOllamaChat, parseOllamaChat))
	s.mux.HandleFunc("POST /api/generate", s.generationHandler(apiOllamaGenerate, parseOllamaGenerate))
	s.mux.HandleFunc("GET /v1/models", s.handleOpenAIModels)
	s.mux.HandleFunc("GET /v1/models/{model...}", s.handleOpenAIModel)
	s.mux.HandleFunc("POST /v1/chat/completions", s.generationHandler(apiOpenAIChat, parseOpenAIChat))
	s.mux.HandleFunc("POST /v1/completions", s.generationHandler(apiOpenAICompletion, parseOpenAICompletion))
	s.mux.HandleFunc("POST /v1/embeddings", s.handleOpenAIEmbeddings)
	s.mux.HandleFunc("POST /v1/responses", s.generationHandler(apiOpenAIResponses, parseOpenAIResponses))
	return s
}

// hasTag reports whether an Ollama model name has a tag ("name:tag"; a
// colon before the last slash is a registry port, not a tag).
func hasTag(name string) bool {
	return strings.Contains(name[strings.LastIndex(name, "/")+1:], ":")
}

// ServeHTTP serves the Ollama and OpenAI APIs, /metrics and /healthz.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.cfg.InstanceID != "" {
		w.Header().Set(InstanceHeader, s.cfg.InstanceID)
	}
	if _, pattern := s.mux.Handler(r); pattern == "" {
		if api, ok := apiOfPath(r.URL.Path); ok {
			s.routeError(w, r, api)
			return
		}
	}
	s.mux.ServeHTTP(w, r)
}

// apiOfPath tells which API's error shape a path outside the served routes
// gets: OpenAI's under /v1, Ollama's under /api; other paths keep the plain
// text of net/http.
func apiOfPath(path string) (apiKind, bool) {
	switch {
	case path == "/v1" || strings.HasPrefix(path, "/v1/"):
		return apiOpenAI, true
	case path == "/api" || strings.HasPrefix(path, "/api/"):
		return apiOllama, true
	}
	return 0, false
}

// routeError answers a request no route matches (404) or no route matches
// with this method (405, with its Allow header) in the error shape of api.
// The messages are the servers' own: OpenAI's "Invalid URL (GET /v1/x)" and
// Ollama's (gin's) "404 page not found".
func (s *Server) routeError(w http.ResponseWriter, r *http.Request, api apiKind) {
	// Let the mux decide between 404 and 405 and compute Allow.
	h, _ := s.mux.Handler(r)
	rec := &statusRecorder{header: http.Header{}}
	h.ServeHTTP(rec, r)
	status := rec.status
	if status != http.StatusMethodNotAllowed {
		status = http.StatusNotFound
	}
	if allow := rec.header.Get("Allow"); allow != "" {
		w.Header().Set("Allow", allow)
	}
	aerr := &apiError{status: status}
	switch {
	case api.isOpenAI() && status == http.StatusMethodNotAllowed:
		aerr.message = fmt.Sprintf("Invalid method for URL (%s %s)", r.Method, r.URL.Path)
	case api.isOpenAI():
		aerr.message = fmt.Sprintf("Invalid URL (%s %s)", r.Method, r.URL.Path)
	case status == http.StatusMethodNotAllowed:
		aerr.message = "405 method not allowed"
	default:
		aerr.message = "404 page not found"
	}
	writeError(w, api, aerr)
}

// statusRecorder keeps the status and headers a handler writes and drops
// its body.
type statusRecorder struct {
	header http.Header
	status int
}

func (r *statusRecorder) Header() http.Header { return r.header }

func (r *statusRecorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return len(b), nil
}

// Close stops the server: /healthz turns 503, waiting and new generation
// requests get 503, and running generations are aborted (a streamed answer
// ends with an error message). To let in-flight requests finish, shut the
// HTTP server down gracefully first and call Close afterwards. Close is
// idempotent.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		close(s.done)
		s.adm.close()
	})
}

func (s *Server) closed() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

func (s *Server) handleHealthz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if s.closed() {
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, "closed\n")
		return
	}
	io.WriteString(w, "ok\n")
}

// lookup resolves a requested model name to a configured one.
func (s *Server) lookup(name string) (string, bool) {
	m, ok := s.models[name]
	return m, ok
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// writeError renders err in the error shape of api.
func writeError(w http.ResponseWriter, api apiKind, err *apiError) {
	if err.status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	if !api.isOpenAI() {
		writeJSON(w, err.status, map[string]string{"error": err.message})
		return
	}
	writeJSON(w, err.status, map[string]any{"error": openAIErrorBody(err)})
}

func openAIErrorBody(err *apiError) map[string]any {
	typ := "invalid_request_error"
	if err.status >= 500 {
		typ = "server_error"
	}
	body := map[string]any{"message": err.message, "type": typ, "param": nil, "code": nil}
	if err.param != "" {
		body["param"] = err.param
	}
	if err.code != "" {
		body["code"] = err.code
	}
	return body
}

func modelNotFound(api apiKind, model string) *apiError {
	if api.isOpenAI() {
		return &apiError{status: http.StatusNotFound, code: "model_not_found", param: "model",
			message: "The model `" + model + "` does not exist or you do not have access to it."}
	}
	return &apiError{status: http.StatusNotFound,
		message: "model " + strconv.Quote(model) + " not found, try pulling it first"}
}

// modelInfo describes a served model deterministically from its name.
type modelInfo struct {
	family, parameterSize string
	parameterCount        int64 // 0 when the tag does not say
	size                  int64
	digest                string
}

func describeModel(name string) modelInfo {
	sum := sha256.Sum256([]byte(name))
	base := name[strings.LastIndex(name, "/")+1:]
	base, tag, _ := strings.Cut(base, ":")
	info := modelInfo{family: strings.TrimRight(base, "0123456789.-_"), digest: hex.EncodeToString(sum[:]), size: 1 << 30}
	if info.family == "" {
		info.family = base
	}
	// Tags like "0.5b" or "7b-instruct" give the parameter size.
	p, _, _ := strings.Cut(tag, "-")
	if num, ok := strings.CutSuffix(strings.ToLower(p), "b"); ok {
		if f, err := strconv.ParseFloat(num, 64); err == nil && f > 0 && f < 1e4 {
			info.parameterSize = strings.ToUpper(p)
			info.parameterCount = int64(f * 1e9)
			info.size = int64(f * 0.6e9) // about 4.8 bits per weight
		}
	}
	return info
}

type ollamaModelDetails struct {
	ParentModel       string   `json:"parent_model"`
	Format            string   `json:"format"`
	Family            string   `json:"family"`
	Families          []string `json:"families"`
	ParameterSize     string   `json:"parameter_size"`
	QuantizationLevel string   `json:"quantization_level"`
}

func (mi modelInfo) details() ollamaModelDetails {
	return ollamaModelDetails{Format: "gguf", Family: mi.family, Families: []string{mi.family},
		ParameterSize: mi.parameterSize, QuantizationLevel: "Q4_K_M"}
}

func (s *Server) handleVersion(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"version": ollamaVersion})
}

func (s *Server) handleTags(w http.ResponseWriter, r *http.Request) {
	type model struct {
		Name       string             `json:"name"`
		Model      string             `json:"model"`
		ModifiedAt time.Time          `json:"modified_at"`
		Size       int64              `json:"size"`
		Digest     string             `json:"digest"`
		Details    ollamaModelDetails `json:"details"`
	}
	models := []model{}
	for _, name := range s.cfg.Models {
		mi := describeModel(name)
		models = append(models, model{Name: name, Model: name, ModifiedAt: s.started,
			Size: mi.size, Digest: mi.digest, Details: mi.details()})
	}
	writeJSON(w, http.StatusOK, map[string]any{"models": models})
}

func (s *Server) handlePS(w http.ResponseWriter, r *http.Request) {
	type model struct {
		Name          string             `json:"name"`
		Model         string             `json:"model"`
		Size          int64              `json:"size"`
		Digest        string             `json:"digest"`
		Details       ollamaModelDetails `json:"details"`
		ExpiresAt     time.Time          `json:"expires_at"`
		SizeVRAM      int64              `json:"size_vram"`
		ContextLength int                `json:"context_length"`
	}
	models := []model{}
	for _, name := range s.cfg.Models {
		mi := describeModel(name)
		models = append(models, model{Name: name, Model: name, Size: mi.size, Digest: mi.digest,
			Details: mi.details(), ExpiresAt: time.Now().Add(24 * time.Hour).UTC(),
			SizeVRAM: mi.size, ContextLength: contextLength})
	}
	writeJSON(w, http.StatusOK, map[string]any{"models": models})
}

type openAIModel struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

func (s *Server) openAIModel(name string) openAIModel {
	return openAIModel{ID: name, Object: "model", Created: s.started.Unix(), OwnedBy: "library"}
}

func (s *Server) handleOpenAIModels(w http.ResponseWriter, r *http.Request) {
	data := []openAIModel{}
	for _, name := range s.cfg.Models {
		data = append(data, s.openAIModel(name))
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

func (s *Server) handleOpenAIModel(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("model")
	if _, ok := s.lookup(name); !ok {
		writeError(w, apiOpenAIChat, modelNotFound(apiOpenAIChat, name))
		return
	}
	writeJSON(w, http.StatusOK, s.openAIModel(name))
}

// generationHandler returns the handler of a generation endpoint.
func (s *Server) generationHandler(api apiKind, parse func([]byte) (genRequest, *apiError)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, aerr := readBody(w, r)
		if aerr != nil {
			writeError(w, api, aerr)
			return
		}
		req, aerr := parse(body)
		if aerr != nil {
			writeError(w, api, aerr)
			return
		}
		model, ok := s.lookup(req.model)
		if !ok {
			writeError(w, api, modelNotFound(api, req.model))
			return
		}
		s.generate(r.Context(), w, req, model)
	}
}

// readBody reads a request body of at most maxBodyBytes.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, *apiError) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, &apiError{status: http.StatusRequestEntityTooLarge, message: "request body too large"}
		}
		return nil, badRequest("reading request body: %v", err)
	}
	return body, nil
}

// errAborted ends a generation when the server is closed.
var errAborted = errors.New("generation aborted: server is shutting down")

// timing records the phases of one request.
type timing struct {
	arrived, admitted, firstToken, finished time.Time
}

// genResult is a finished generation.
type genResult struct {
	promptTokens, outputTokens int
	reason                     string
	timing
}

// generate runs one request: admission, prefill, decoding, and the answer
// in the shape of req.api. model is the configured model name.
func (s *Server) generate(ctx context.Context, w http.ResponseWriter, req genRequest, model string) {
	req = req.planned(s.cfg.OutputTokens)
	em := newEmitter(w, req, s.nextID())
	var t timing
	t.arrived = time.Now()
	if req.loadOnly {
		t.admitted, t.firstToken, t.finished = t.arrived, t.arrived, t.arrived
		em.finish(genResult{reason: finishLoad, timing: t})
		return
	}

	sl, err := s.adm.acquire(ctx, model)
	switch {
	case errors.Is(err, errQueueFull):
		writeError(w, req.api, &apiError{status: http.StatusServiceUnavailable, message: err.Error()})
		return
	case errors.Is(err, errClosed):
		writeError(w, req.api, &apiError{status: http.StatusServiceUnavailable, message: err.Error()})
		return
	case err != nil: // the client went away
		return
	}
	defer sl.release()
	t.admitted = time.Now()
	s.met.queueTime.WithLabelValues(model).Observe(t.admitted.Sub(t.arrived).Seconds())

	// All choices decode together, one token each per step (n sequences
	// of one request share its batch slot).
	n, total := req.steps()
	reason := req.choices[0].reason
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	due := t.admitted.Add(prefillTime(s.cfg, s.uncachedTokens(req, model)))
	genTokens := s.met.genTokens.WithLabelValues(model)
	for i := range n {
		if i > 0 {
			tpot := timePerOutputToken(s.cfg, s.adm.running())
			due = due.Add(tpot)
			if now := time.Now(); now.Sub(due) > tpot {
				due = now // fell behind (slow reader): do not burst
			}
		}
		if err := s.waitUntil(ctx, timer, due); err != nil {
			if errors.Is(err, errAborted) {
				em.fail(err)
			}
			return
		}
		if i == 0 {
			t.firstToken = time.Now()
			s.met.promptTokens.WithLabelValues(model).Add(float64(req.promptTokens))
			s.met.ttft.WithLabelValues(model).Observe(t.firstToken.Sub(t.arrived).Seconds())
		}
		for c := range req.choices {
			if ch := &req.choices[c]; i < ch.n {
				genTokens.Inc()
				if err := em.token(c, ch.text(i)); err != nil {
					return // the client went away
				}
			}
		}
	}
	t.finished = time.Now()
	if n > 1 {
		s.met.tpot.WithLabelValues(model).Observe(t.finished.Sub(t.firstToken).Seconds() / float64(n-1))
	}
	s.met.e2e.WithLabelValues(model).Observe(t.finished.Sub(t.arrived).Seconds())
	s.met.success.WithLabelValues(model, reason).Inc()
	em.finish(genResult{promptTokens: req.promptTokens, outputTokens: total, reason: reason, timing: t})
}

// waitUntil waits until due, returning ctx.Err() if ctx ends first and
// errAborted if the server is closed first.
func (s *Server) waitUntil(ctx context.Context, timer *time.Timer, due time.Time) error {
	d := time.Until(due)
	if d <= 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.done:
			return errAborted
		default:
			return nil
		}
	}
	timer.Reset(d)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-s.done:
		return errAborted
	case <-timer.C:
		return nil
	}
}

func (s *Server) nextID() string {
	return strconv.FormatInt(s.started.UnixNano()%1e12, 36) + strconv.FormatUint(s.ids.Add(1), 36)
}
