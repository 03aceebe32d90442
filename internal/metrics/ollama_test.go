package metrics

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

// ollamaPS renders an /api/ps answer in the shape of Ollama's API
// reference (https://docs.ollama.com/api/ps, PsResponse: models with name,
// model, size, digest, details, expires_at, size_vram, context_length),
// written for these tests.
func ollamaPS(models ...string) string {
	var parts []string
	for _, m := range models {
		parts = append(parts, fmt.Sprintf(`{"name":%q,"model":%q,"size":6591830464,"digest":"a2af6cc3eb7fa8be8504abaf9b04e88f17a119ec3f04a3addf55f92841195f5a",`+
			`"details":{"parent_model":"","format":"gguf","family":"gemma3","families":["gemma3"],"parameter_size":"4.3B","quantization_level":"Q4_K_M"},`+
			`"expires_at":"2025-10-17T16:47:07.93355-07:00","size_vram":5333539264,"context_length":4096}`, m, m))
	}
	return `{"models":[` + strings.Join(parts, ",") + `]}`
}

func TestParseOllamaPS(t *testing.T) {
	for _, tc := range []struct {
		body    string
		want    []string
		wantErr string
	}{
		{ollamaPS("gemma3", "qwen2:0.5b"), []string{"gemma3", "qwen2:0.5b"}, ""},
		{`{"models":[]}`, []string{}, ""},
		{`{"models":[{"name":"only-name"}]}`, []string{"only-name"}, ""},
		{`{"error":"not found"}`, nil, "not an Ollama server"},
		{`# TYPE x gauge`, nil, OllamaPSPath},
	} {
		got, err := ParseOllamaPS([]byte(tc.body))
		switch {
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: err %v; want %q", tc.body, err, tc.wantErr)
		case tc.wantErr == "" && (err != nil || !slices.Equal(got, tc.want)):
			t.Errorf("%s: (%v, %v); want %v", tc.body, got, err, tc.want)
		}
	}
}

func FuzzParseOllamaPS(f *testing.F) {
	f.Add([]byte(ollamaPS("gemma3")))
	f.Add([]byte(`{"models":null}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		models, err := ParseOllamaPS(b)
		if err == nil && slices.Contains(models, "") {
			t.Fatalf("an empty model name kept: %q", models)
		}
	})
}

// TestOllamaSourceReadsLoadedModels: behind the scrape source, a backend
// without /metrics that answers /api/ps is an Ollama server: its loaded
// models are read and its scrape failure is no error; a backend that
// answers neither is still the scrape's error; a vLLM-style one is not
// asked.
func TestOllamaSourceReadsLoadedModels(t *testing.T) {
	var psAsked int
	ollama := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == OllamaPSPath {
			_, _ = w.Write([]byte(ollamaPS("qwen2:0.5b")))
			return
		}
		http.NotFound(w, r)
	}))
	defer ollama.Close()
	vllm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == OllamaPSPath {
			psAsked++
		}
		_, _ = w.Write([]byte("# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 2\n"))
	}))
	defer vllm.Close()
	other := httptest.NewServer(http.NotFoundHandler())
	defer other.Close()

	src := NewOllama(NewScrape(ScrapeOptions{}), OllamaOptions{})
	defer src.Close()
	if src.Name() != "scrape" {
		t.Errorf("Name %q", src.Name())
	}
	snap, err := src.Snapshot(context.Background(), []Target{
		{ID: "o", Address: ollama.Listener.Addr().String()},
		{ID: "v", Address: vllm.Listener.Addr().String()},
		{ID: "x", Address: other.Listener.Addr().String()},
	})
	var te *TargetError
	if !errors.As(err, &te) || len(te.Failed) != 1 || te.Failed["x"] == nil {
		t.Fatalf("err %v; want only x failing", err)
	}
	if m := snap["o"]; m.Has != FieldLoaded || !slices.Equal(m.Loaded, []string{"qwen2:0.5b"}) || m.ObservedAt.IsZero() {
		t.Errorf("ollama: %+v", m)
	}
	if m := snap["v"]; m.QueueDepth != 2 || m.Has&FieldLoaded != 0 || psAsked != 0 {
		t.Errorf("vllm: %+v, asked /api/ps %d times", m, psAsked)
	}
	snap, err = src.Snapshot(context.Background(), []Target{{ID: "o", Address: ollama.Listener.Addr().String()}})
	if err != nil || len(snap["o"].Loaded) != 1 {
		t.Errorf("an Ollama pool alone: (%v, %v); want its models and no error", snap, err)
	}
}
