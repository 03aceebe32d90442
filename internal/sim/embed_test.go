package sim

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ollama/ollama/api"
	"github.com/openai/openai-go/v3"
)

// The shapes checked here follow:
//   - Ollama's API reference, docs/api.md of github.com/ollama/ollama v0.17.4
//     (the version in go.mod): "Show Model Information" (POST /api/show),
//     "Generate Embeddings" (POST /api/embed), "Generate Embedding" (the
//     legacy POST /api/embeddings) and "List Running Models" (GET /api/ps),
//     and the handlers of server/routes.go for the error messages;
//   - OpenAI's API reference for Embeddings ("Create embeddings", "The
//     embedding object": CreateEmbeddingResponse {object "list", data
//     [{object "embedding", index, embedding}], model, usage {prompt_tokens,
//     total_tokens}}), as openapi.yaml and openai-go v3 embedding.go carry it,
//     and "The error object" {message, type, param, code}.

const testDim = 48

func embedConfig() Config {
	cfg := fastConfig()
	cfg.EmbeddingDim = testDim
	return cfg
}

func norm(v []float32) float64 {
	var ss float64
	for _, x := range v {
		ss += float64(x) * float64(x)
	}
	return math.Sqrt(ss)
}

func isUnit(v []float32) bool { return math.Abs(norm(v)-1) < 1e-5 }

func TestEmbedVector(t *testing.T) {
	a, b := embedVector("the tide", 768), embedVector("the tide", 768)
	if !slices.Equal(a, b) || len(a) != 768 || !isUnit(a) {
		t.Fatalf("embedVector not deterministic or not unit: len %d, norm %v", len(a), norm(a))
	}
	c := embedVector("the tide.", 768)
	var dot float64
	for i := range a {
		dot += float64(a[i]) * float64(c[i])
	}
	if math.Abs(dot) > 0.3 {
		t.Errorf("unrelated texts have cosine %v", dot)
	}
	for _, n := range []int{1, 2, 3, 7} {
		if v := embedVector("x", n); len(v) != n || !isUnit(v) {
			t.Errorf("dim %d: %v", n, v)
		}
	}
	if tr := truncateEmbedding(a, 10); len(tr) != 10 || !isUnit(tr) {
		t.Errorf("truncated = %v", tr)
	}
	if tr := truncateEmbedding(a, 0); len(tr) != 768 {
		t.Errorf("truncate 0 = %d values", len(tr))
	}
	// A pinned value: the vectors must not change between releases, or
	// stored demo indexes stop matching.
	want := []float32{-0.7182989, -0.26825806, 0.23337144, 0.59801507}
	got := embedVector("pinned", 4)
	for i := range want {
		if math.Abs(float64(got[i]-want[i])) > 1e-6 {
			t.Fatalf("pinned = %v, want %v", got, want)
		}
	}
}

func TestEmbeddingDimDefault(t *testing.T) {
	for _, tt := range []struct{ in, want int }{{0, DefaultEmbeddingDim}, {-3, DefaultEmbeddingDim}, {5, 5}, {MaxEmbeddingDim + 1, MaxEmbeddingDim}} {
		if got := (Config{EmbeddingDim: tt.in}).embeddingDim(); got != tt.want {
			t.Errorf("embeddingDim(%d) = %d, want %d", tt.in, got, tt.want)
		}
	}
}

func TestOllamaShow(t *testing.T) {
	_, ts := startServer(t, embedConfig())
	c := ollamaClient(t, ts)
	ctx := testCtx(t)
	show, err := c.Show(ctx, &api.ShowRequest{Model: testModel})
	if err != nil {
		t.Fatal(err)
	}
	if d := show.Details; d.Family != "qwen" || d.ParameterSize != "0.5B" || d.Format != "gguf" || d.QuantizationLevel == "" {
		t.Errorf("details = %+v", d)
	}
	if !strings.Contains(show.Modelfile, "FROM "+testModel) || !strings.Contains(show.Modelfile, "TEMPLATE") ||
		!strings.Contains(show.Parameters, "num_ctx") || show.Template == "" {
		t.Errorf("modelfile %q, parameters %q, template %q", show.Modelfile, show.Parameters, show.Template)
	}
	mi := show.ModelInfo
	if mi["general.architecture"] != "qwen" || mi["qwen.context_length"] != float64(contextLength) ||
		mi["qwen.embedding_length"] != float64(testDim) || mi["general.parameter_count"] != float64(5e8) {
		t.Errorf("model_info = %v", mi)
	}
	if !slices.Contains(show.Capabilities, "completion") || !slices.Contains(show.Capabilities, "embedding") {
		t.Errorf("capabilities = %v", show.Capabilities)
	}
	// A name without a tag resolves like the generation endpoints.
	if _, err := c.Show(ctx, &api.ShowRequest{Model: "llama3.2:latest"}); err != nil {
		t.Errorf("llama3.2:latest: %v", err)
	}

	_, err = c.Show(ctx, &api.ShowRequest{Model: "nope"})
	var se api.StatusError
	if !errors.As(err, &se) || se.StatusCode != http.StatusNotFound || se.ErrorMessage != "model 'nope' not found" {
		t.Errorf("unknown model error = %#v", err)
	}
	_, err = c.Show(ctx, &api.ShowRequest{})
	if !errors.As(err, &se) || se.StatusCode != http.StatusBadRequest || se.ErrorMessage != "model is required" {
		t.Errorf("no model error = %#v", err)
	}
}

func TestOllamaPSShape(t *testing.T) {
	_, ts := startServer(t, embedConfig())
	ps, err := ollamaClient(t, ts).ListRunning(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(ps.Models) != 2 {
		t.Fatalf("ps = %+v", ps)
	}
	for _, m := range ps.Models {
		if m.Name == "" || m.Model != m.Name || m.Size <= 0 || m.SizeVRAM != m.Size || m.Digest == "" ||
			m.Details.Format != "gguf" || !m.ExpiresAt.After(time.Now()) || m.ContextLength != contextLength {
			t.Errorf("running model = %+v", m)
		}
	}
}

func TestOllamaEmbed(t *testing.T) {
	_, ts := startServer(t, embedConfig())
	c := ollamaClient(t, ts)
	ctx := testCtx(t)

	one, err := c.Embed(ctx, &api.EmbedRequest{Model: testModel, Input: "Why is the sky blue?"})
	if err != nil {
		t.Fatal(err)
	}
	if one.Model != testModel || len(one.Embeddings) != 1 || len(one.Embeddings[0]) != testDim || !isUnit(one.Embeddings[0]) {
		t.Fatalf("embed = %+v", one)
	}
	if one.PromptEvalCount != promptTokenEstimate(len("Why is the sky blue?")) || one.TotalDuration <= 0 {
		t.Errorf("prompt_eval_count %d, total_duration %v", one.PromptEvalCount, one.TotalDuration)
	}

	two, err := c.Embed(ctx, &api.EmbedRequest{Model: testModel, Input: []string{"Why is the grass green?", "Why is the sky blue?"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(two.Embeddings) != 2 || !slices.Equal(two.Embeddings[1], one.Embeddings[0]) ||
		slices.Equal(two.Embeddings[0], two.Embeddings[1]) {
		t.Fatalf("embeddings not deterministic per text: %v", two.Embeddings)
	}

	short, err := c.Embed(ctx, &api.EmbedRequest{Model: testModel, Input: "Why is the sky blue?", Dimensions: 8})
	if err != nil {
		t.Fatal(err)
	}
	if len(short.Embeddings[0]) != 8 || !isUnit(short.Embeddings[0]) {
		t.Errorf("dimensions 8 = %v", short.Embeddings)
	}

	// No input only loads the model.
	load, err := c.Embed(ctx, &api.EmbedRequest{Model: testModel})
	if err != nil || load.Embeddings == nil || len(load.Embeddings) != 0 {
		t.Errorf("load = %+v, %v", load, err)
	}

	legacy, err := c.Embeddings(ctx, &api.EmbeddingRequest{Model: testModel, Prompt: "Why is the sky blue?"})
	if err != nil {
		t.Fatal(err)
	}
	if len(legacy.Embedding) != testDim {
		t.Fatalf("legacy embedding has %d values", len(legacy.Embedding))
	}
	for i, x := range legacy.Embedding {
		if float32(x) != one.Embeddings[0][i] {
			t.Fatalf("legacy embedding differs at %d: %v vs %v", i, x, one.Embeddings[0][i])
		}
	}

	var se api.StatusError
	_, err = c.Embed(ctx, &api.EmbedRequest{Model: "nope", Input: "x"})
	if !errors.As(err, &se) || se.StatusCode != http.StatusNotFound || se.ErrorMessage != "model 'nope' not found" {
		t.Errorf("embed unknown model = %#v", err)
	}
	_, err = c.Embed(ctx, &api.EmbedRequest{Model: testModel, Input: []any{"a", 1}})
	if !errors.As(err, &se) || se.StatusCode != http.StatusBadRequest || se.ErrorMessage != "invalid input type" {
		t.Errorf("embed bad input = %#v", err)
	}
	_, err = c.Embeddings(ctx, &api.EmbeddingRequest{Model: "nope", Prompt: "x"})
	if !errors.As(err, &se) || se.StatusCode != http.StatusNotFound || !strings.Contains(se.ErrorMessage, `"nope" not found`) {
		t.Errorf("embeddings unknown model = %#v", err)
	}
}

func TestEmbeddingDimFromConfig(t *testing.T) {
	cfg := fastConfig() // EmbeddingDim unset: the default
	_, ts := startServer(t, cfg)
	r, err := ollamaClient(t, ts).Embed(testCtx(t), &api.EmbedRequest{Model: testModel, Input: "x"})
	if err != nil || len(r.Embeddings[0]) != DefaultEmbeddingDim {
		t.Fatalf("default dimension: %v, %v", err, r)
	}
}

func TestOpenAIEmbeddings(t *testing.T) {
	_, ts := startServer(t, embedConfig())
	c := openAIClient(ts)
	ctx := testCtx(t)
	ref, err := ollamaClient(t, ts).Embed(ctx, &api.EmbedRequest{Model: testModel, Input: []string{"alpha", "beta"}})
	if err != nil {
		t.Fatal(err)
	}
	same := func(a []float64, b []float32) bool {
		if len(a) != len(b) {
			return false
		}
		for i := range a {
			if float32(a[i]) != b[i] {
				return false
			}
		}
		return true
	}

	resp, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{
		Model: testModel,
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"alpha", "beta"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Object != "list" || resp.Model != testModel || len(resp.Data) != 2 {
		t.Fatalf("response = %+v", resp)
	}
	for i, d := range resp.Data {
		if d.Object != "embedding" || d.Index != int64(i) || !same(d.Embedding, ref.Embeddings[i]) {
			t.Errorf("data[%d] = index %d object %q, %d values, same as Ollama's: %v",
				i, d.Index, d.Object, len(d.Embedding), same(d.Embedding, ref.Embeddings[i]))
		}
	}
	tokens := int64(promptTokenEstimate(len("alpha")) + promptTokenEstimate(len("beta")))
	if resp.Usage.PromptTokens != tokens || resp.Usage.TotalTokens != tokens {
		t.Errorf("usage = %+v, want %d", resp.Usage, tokens)
	}

	single, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{
		Model: testModel, Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("beta")},
		Dimensions: openai.Int(5),
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := single.Data[0].Embedding; len(got) != 5 || !same(got, truncateEmbedding(ref.Embeddings[1], 5)) {
		t.Errorf("dimensions 5 = %v", got)
	}

	toks, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{
		Model: testModel, Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfTokenArrays: [][]int64{{1, 2, 3}, {4}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(toks.Data) != 2 || len(toks.Data[0].Embedding) != testDim || toks.Usage.PromptTokens != 4 {
		t.Errorf("token arrays = %d items, usage %+v", len(toks.Data), toks.Usage)
	}
	flat, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{
		Model: testModel, Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfTokens: []int64{1, 2, 3}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(flat.Data) != 1 || !slices.Equal(flat.Data[0].Embedding, toks.Data[0].Embedding) || flat.Usage.PromptTokens != 3 {
		t.Errorf("token array = %+v", flat)
	}

	var apiErr *openai.Error
	_, err = c.Embeddings.New(ctx, openai.EmbeddingNewParams{
		Model: "text-embedding-nope", Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("x")},
	})
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound || apiErr.Code != "model_not_found" ||
		apiErr.Type != "invalid_request_error" || apiErr.Param != "model" {
		t.Errorf("unknown model error = %v", err)
	}
	_, err = c.Embeddings.New(ctx, openai.EmbeddingNewParams{
		Model: testModel, Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"a", ""}},
	})
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || apiErr.Param != "input" ||
		apiErr.Type != "invalid_request_error" {
		t.Errorf("empty string error = %v", err)
	}
	_, err = c.Embeddings.New(ctx, openai.EmbeddingNewParams{
		Model: testModel, Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("x")},
		Dimensions: openai.Int(testDim + 1),
	})
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || apiErr.Param != "dimensions" {
		t.Errorf("too many dimensions error = %v", err)
	}
}

func TestOpenAIEmbeddingsBase64(t *testing.T) {
	_, ts := startServer(t, embedConfig())
	resp, err := http.Post(ts.URL+"/v1/embeddings", "application/json",
		strings.NewReader(`{"model":"qwen2:0.5b","input":"alpha","encoding_format":"base64"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Data []struct {
			Embedding string `json:"embedding"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || len(body.Data) != 1 {
		t.Fatalf("decode: %v, %+v", err, body)
	}
	raw, err := base64.StdEncoding.DecodeString(body.Data[0].Embedding)
	if err != nil || len(raw) != 4*testDim {
		t.Fatalf("base64: %v, %d bytes", err, len(raw))
	}
	want := embedVector("alpha", testDim)
	for i := range want {
		if got := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])); got != want[i] {
			t.Fatalf("value %d = %v, want %v", i, got, want[i])
		}
	}
}

func TestOpenAIModelGetNotFound(t *testing.T) {
	_, ts := startServer(t, embedConfig())
	c := openAIClient(ts)
	_, err := c.Models.Get(testCtx(t), "gpt-nope")
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound || apiErr.Code != "model_not_found" ||
		apiErr.Type != "invalid_request_error" {
		t.Errorf("unknown model error = %v", err)
	}
}
