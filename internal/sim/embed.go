package sim

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"time"
)

// maxEmbedInputs is the most inputs one OpenAI embeddings request may carry
// (the API's documented limit for arrays).
const maxEmbedInputs = 2048

// embedVector is the deterministic embedding of key: dim Gaussian values
// drawn from a generator seeded by the SHA-256 of key, scaled to unit L2
// norm. The generator (SplitMix64 and Box-Muller) is written out here so the
// vectors do not depend on math/rand's algorithms, which may change between
// Go releases. Different keys give unrelated directions: equal texts match
// exactly, nothing else is "similar".
func embedVector(key string, dim int) []float32 {
	sum := sha256.Sum256([]byte(key))
	state := binary.LittleEndian.Uint64(sum[:8]) ^ binary.LittleEndian.Uint64(sum[8:16])
	next := func() float64 { // uniform in (0, 1)
		state += 0x9e3779b97f4a7c15
		z := state
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		z ^= z >> 31
		return (float64(z>>11) + 0.5) / (1 << 53)
	}
	v := make([]float64, dim)
	for i := 0; i < dim; i += 2 {
		r, theta := math.Sqrt(-2*math.Log(next())), 2*math.Pi*next()
		v[i] = r * math.Cos(theta)
		if i+1 < dim {
			v[i+1] = r * math.Sin(theta)
		}
	}
	return normalize(v)
}

// normalize returns v scaled to unit L2 norm, as float32.
func normalize(v []float64) []float32 {
	var ss float64
	for _, x := range v {
		ss += x * x
	}
	scale := 1 / max(math.Sqrt(ss), 1e-12)
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(x * scale)
	}
	return out
}

// truncateEmbedding keeps the first n values of e and renormalises them,
// as Ollama's and OpenAI's dimensions parameter do; n <= 0 or n >= len(e)
// keeps e.
func truncateEmbedding(e []float32, n int) []float32 {
	if n <= 0 || n >= len(e) {
		return e
	}
	v := make([]float64, n)
	for i := range v {
		v[i] = float64(e[i])
	}
	return normalize(v)
}

// handleOllamaEmbed serves POST /api/embed: {model, input: string or
// []string, dimensions} -> {model, embeddings, total_duration,
// prompt_eval_count}. An empty input only "loads" the model and returns no
// embeddings, as Ollama does. Embeddings are answered at once, outside the
// batch queue.
func (s *Server) handleOllamaEmbed(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	var req struct {
		Model      string          `json:"model"`
		Input      json.RawMessage `json:"input"`
		Dimensions int             `json:"dimensions"`
	}
	if aerr := readJSON(w, r, &req); aerr != nil {
		writeError(w, apiOllama, aerr)
		return
	}
	inputs, aerr := ollamaEmbedInputs(req.Input)
	if aerr != nil {
		writeError(w, apiOllama, aerr)
		return
	}
	if _, ok := s.lookup(req.Model); !ok {
		writeError(w, apiOllama, &apiError{status: http.StatusNotFound,
			message: fmt.Sprintf("model '%s' not found", req.Model)})
		return
	}
	embeddings, tokens := [][]float32{}, 0
	for _, in := range inputs {
		embeddings = append(embeddings, truncateEmbedding(embedVector(in, s.cfg.embeddingDim()), req.Dimensions))
		tokens += promptTokenEstimate(len(in))
	}
	resp := struct {
		Model           string      `json:"model"`
		Embeddings      [][]float32 `json:"embeddings"`
		TotalDuration   int64       `json:"total_duration,omitempty"`
		PromptEvalCount int         `json:"prompt_eval_count,omitempty"`
	}{Model: req.Model, Embeddings: embeddings, PromptEvalCount: tokens}
	if len(inputs) > 0 {
		resp.TotalDuration = max(int64(time.Since(start)), 1)
	}
	writeJSON(w, http.StatusOK, resp)
}

// ollamaEmbedInputs parses the input of /api/embed: absent, a string (an
// empty one means none) or an array of strings.
func ollamaEmbedInputs(raw json.RawMessage) ([]string, *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s == "" {
			return nil, nil
		}
		return []string{s}, nil
	}
	var ss []string
	if json.Unmarshal(raw, &ss) == nil {
		return ss, nil
	}
	return nil, badRequest("invalid input type")
}

// handleOllamaEmbeddings serves the legacy POST /api/embeddings: {model,
// prompt} -> {embedding}. An empty prompt only "loads" the model and
// returns an empty embedding, as Ollama does.
func (s *Server) handleOllamaEmbeddings(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model  string `json:"model"`
		Prompt string `json:"prompt"`
	}
	if aerr := readJSON(w, r, &req); aerr != nil {
		writeError(w, apiOllama, aerr)
		return
	}
	if req.Model == "" {
		writeError(w, apiOllama, badRequest("model is required"))
		return
	}
	if _, ok := s.lookup(req.Model); !ok {
		writeError(w, apiOllama, modelNotFound(apiOllama, req.Model))
		return
	}
	embedding := []float64{}
	if req.Prompt != "" {
		for _, x := range embedVector(req.Prompt, s.cfg.embeddingDim()) {
			embedding = append(embedding, float64(x))
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"embedding": embedding})
}

// embedInput is one input of an OpenAI embeddings request: the key its
// vector is derived from and its size in tokens.
type embedInput struct {
	key    string
	tokens int
}

// openAIEmbedInputs parses the input of /v1/embeddings: a non-empty string,
// an array of non-empty strings, an array of token ids, or an array of
// non-empty arrays of token ids, at most maxEmbedInputs entries. Token
// arrays are keyed apart from strings, so the string "[1,2]" and the tokens
// [1,2] embed differently.
func openAIEmbedInputs(raw json.RawMessage) ([]embedInput, *apiError) {
	invalid := func(format string, args ...any) *apiError {
		return &apiError{status: http.StatusBadRequest, param: "input",
			message: "Invalid 'input': " + fmt.Sprintf(format, args...)}
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, &apiError{status: http.StatusBadRequest, param: "input",
			message: "Missing required parameter: 'input'."}
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s == "" {
			return nil, invalid("empty string. Expected a non-empty string.")
		}
		return []embedInput{{s, promptTokenEstimate(len(s))}}, nil
	}
	tokenKey := func(ids []int64) string {
		b, _ := json.Marshal(ids)
		return "\x00tokens" + string(b)
	}
	var ss []string
	var ids []int64
	var idss [][]int64
	var out []embedInput
	switch {
	case json.Unmarshal(raw, &ss) == nil:
		for i, s := range ss {
			if s == "" {
				return nil, invalid("input[%d] is an empty string. Expected non-empty strings.", i)
			}
			out = append(out, embedInput{s, promptTokenEstimate(len(s))})
		}
	case json.Unmarshal(raw, &ids) == nil:
		out = []embedInput{{tokenKey(ids), len(ids)}}
	case json.Unmarshal(raw, &idss) == nil:
		for i, ids := range idss {
			if len(ids) == 0 {
				return nil, invalid("input[%d] is an empty array. Expected non-empty token arrays.", i)
			}
			out = append(out, embedInput{tokenKey(ids), len(ids)})
		}
	default:
		return nil, invalid("expected a string, an array of strings, an array of token ids or an array of token arrays.")
	}
	switch {
	case len(out) == 0:
		return nil, invalid("empty array. Expected an array with minimum length 1, but got an empty array instead.")
	case len(out) > maxEmbedInputs:
		return nil, invalid("array too long. Expected an array with maximum length %d, but got an array with length %d instead.", maxEmbedInputs, len(out))
	}
	return out, nil
}

// openAIEmbedding is one element of the data of an OpenAI embeddings
// response; Embedding is a []float32 or, with encoding_format base64, the
// base64 of the little-endian float32 values.
type openAIEmbedding struct {
	Object    string `json:"object"`
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"`
}

// handleOpenAIEmbeddings serves POST /v1/embeddings.
func (s *Server) handleOpenAIEmbeddings(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model          string          `json:"model"`
		Input          json.RawMessage `json:"input"`
		Dimensions     *int64          `json:"dimensions"`
		EncodingFormat string          `json:"encoding_format"`
	}
	if aerr := readJSON(w, r, &req); aerr != nil {
		writeError(w, apiOpenAI, aerr)
		return
	}
	if req.Model == "" {
		writeError(w, apiOpenAI, &apiError{status: http.StatusBadRequest, param: "model",
			message: "you must provide a model parameter"})
		return
	}
	inputs, aerr := openAIEmbedInputs(req.Input)
	if aerr != nil {
		writeError(w, apiOpenAI, aerr)
		return
	}
	dim := s.cfg.embeddingDim()
	want := dim
	if d := req.Dimensions; d != nil {
		if *d < 1 || *d > int64(dim) {
			writeError(w, apiOpenAI, &apiError{status: http.StatusBadRequest, param: "dimensions",
				message: fmt.Sprintf("Invalid 'dimensions': expected a value between 1 and %d, but got %d instead.", dim, *d)})
			return
		}
		want = int(*d)
	}
	if f := req.EncodingFormat; f != "" && f != "float" && f != "base64" {
		writeError(w, apiOpenAI, &apiError{status: http.StatusBadRequest, param: "encoding_format",
			message: fmt.Sprintf("Invalid 'encoding_format': expected one of 'float' or 'base64', but got '%s' instead.", f)})
		return
	}
	if _, ok := s.lookup(req.Model); !ok {
		writeError(w, apiOpenAI, modelNotFound(apiOpenAI, req.Model))
		return
	}
	data := make([]openAIEmbedding, len(inputs))
	tokens := 0
	for i, in := range inputs {
		e := truncateEmbedding(embedVector(in.key, dim), want)
		data[i] = openAIEmbedding{Object: "embedding", Index: i, Embedding: e}
		if req.EncodingFormat == "base64" {
			b := make([]byte, 0, 4*len(e))
			for _, x := range e {
				b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
			}
			data[i].Embedding = base64.StdEncoding.EncodeToString(b)
		}
		tokens += in.tokens
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list",
		"data":   data,
		"model":  req.Model,
		"usage":  map[string]int{"prompt_tokens": tokens, "total_tokens": tokens},
	})
}

// readJSON reads and decodes a JSON request body into v.
func readJSON(w http.ResponseWriter, r *http.Request, v any) *apiError {
	body, aerr := readBody(w, r)
	if aerr != nil {
		return aerr
	}
	return decodeJSON(body, v)
}
