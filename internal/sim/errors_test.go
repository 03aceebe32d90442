package sim

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
)

// Error shapes: OpenAI's "The error object" ({"error": {"message", "type",
// "param", "code"}}, param and code null when they do not apply) on /v1
// paths, as openai-go v3 decodes it into *openai.Error; Ollama's
// {"error": "..."} (docs/api.md of ollama v0.17.4, and api.StatusError) on
// /api paths.

// checkErrorShape fails unless body is the error shape of the API of path.
func checkErrorShape(t *testing.T, path, body string) {
	t.Helper()
	var top map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &top); err != nil || len(top) != 1 || top["error"] == nil {
		t.Errorf("%s: body %q is not {\"error\": ...}", path, body)
		return
	}
	if strings.HasPrefix(path, "/v1") {
		var e map[string]any
		if err := json.Unmarshal(top["error"], &e); err != nil {
			t.Errorf("%s: error is not an object: %s", path, body)
			return
		}
		for _, k := range []string{"message", "type", "param", "code"} {
			if _, ok := e[k]; !ok {
				t.Errorf("%s: error lacks %q: %s", path, k, body)
			}
		}
		if m, _ := e["message"].(string); m == "" {
			t.Errorf("%s: empty message: %s", path, body)
		}
		return
	}
	var msg string
	if err := json.Unmarshal(top["error"], &msg); err != nil || msg == "" {
		t.Errorf("%s: error is not a non-empty string: %s", path, body)
	}
}

func TestErrorShapes(t *testing.T) {
	_, ts := startServer(t, embedConfig())
	tests := []struct {
		method, path, body string
		status             int
		contains           string
	}{
		{"GET", "/v1/nope", "", 404, `"message":"Invalid URL (GET /v1/nope)"`},
		{"GET", "/v1", "", 404, `Invalid URL`},
		{"GET", "/v1/chat/completions", "", 405, `"message":"Invalid method for URL (GET /v1/chat/completions)"`},
		{"DELETE", "/v1/models/qwen2:0.5b", "", 405, `Invalid method`},
		{"GET", "/api/nope", "", 404, `{"error":"404 page not found"}`},
		{"GET", "/api/chat", "", 405, `{"error":"405 method not allowed"}`},
		{"GET", "/api/show", "", 405, `405`},
		{"POST", "/api/show", `{"model":"nope"}`, 404, `{"error":"model 'nope' not found"}`},
		{"POST", "/api/show", `{`, 400, `invalid JSON`},
		{"POST", "/api/embed", ``, 400, `missing request body`},
		{"POST", "/api/embed", `{"model":"qwen2:0.5b","input":5}`, 400, `invalid input type`},
		{"POST", "/api/embeddings", `{"prompt":"x"}`, 400, `model is required`},
		{"POST", "/api/chat", `{"model":"x","messages":[{"role":"user","content":"hi"}]}`, 404, `not found`},
		{"POST", "/v1/embeddings", `{"model":"qwen2:0.5b"}`, 400, `"param":"input"`},
		{"POST", "/v1/embeddings", `{"input":"x"}`, 400, `"param":"model"`},
		{"POST", "/v1/embeddings", `{"model":"qwen2:0.5b","input":[]}`, 400, `empty array`},
		{"POST", "/v1/embeddings", `{"model":"qwen2:0.5b","input":"x","encoding_format":"hex"}`, 400, `"param":"encoding_format"`},
		{"POST", "/v1/embeddings", `{"model":"qwen2:0.5b","input":"x","dimensions":0}`, 400, `"param":"dimensions"`},
		{"POST", "/v1/embeddings", `{"model":"nope","input":"x"}`, 404, `"code":"model_not_found"`},
		{"POST", "/v1/embeddings", `[`, 400, `"type":"invalid_request_error"`},
		{"GET", "/v1/models/nope", "", 404, `"code":"model_not_found"`},
		{"POST", "/v1/completions", `{"model":"qwen2:0.5b","prompt":{}}`, 400, `"param":"prompt"`},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			req, err := http.NewRequestWithContext(testCtx(t), tt.method, ts.URL+tt.path, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body := string(b)
			if resp.StatusCode != tt.status || !strings.Contains(body, tt.contains) {
				t.Errorf("= %d %q, want %d containing %q", resp.StatusCode, body, tt.status, tt.contains)
			}
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
				t.Errorf("content type %q", ct)
			}
			if tt.status == 405 && resp.Header.Get("Allow") == "" {
				t.Errorf("405 without Allow")
			}
			checkErrorShape(t, tt.path, body)
		})
	}

	// Paths of neither API keep net/http's plain text.
	resp, err := http.Get(ts.URL + "/nope")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 || strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Errorf("/nope = %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
}

func TestOpenAIUnknownRouteIsAnAPIError(t *testing.T) {
	_, ts := startServer(t, embedConfig())
	c := openAIClient(ts)
	var res map[string]any
	err := c.Get(testCtx(t), "nope", nil, &res)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound || apiErr.Type != "invalid_request_error" ||
		apiErr.Message != "Invalid URL (GET /v1/nope)" {
		t.Fatalf("error = %v (%#v)", err, apiErr)
	}
}

// Every POST route answers a malformed, a wrongly typed and an oversized
// body with an error in its API's shape.
func TestEveryPostRouteErrorShape(t *testing.T) {
	s := New(fastConfig())
	defer s.Close()
	routes := []string{"/api/chat", "/api/generate", "/api/embed", "/api/embeddings", "/api/show",
		"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses"}
	bodies := []struct {
		name   string
		body   func() io.Reader
		status int
	}{
		{"malformed", func() io.Reader { return strings.NewReader(`{"model":`) }, http.StatusBadRequest},
		{"wrong type", func() io.Reader { return strings.NewReader(`{"model":7}`) }, http.StatusBadRequest},
		{"too large", func() io.Reader {
			return io.MultiReader(strings.NewReader(`{"model":"`), io.LimitReader(letterA{}, maxBodyBytes))
		}, http.StatusRequestEntityTooLarge},
	}
	for _, path := range routes {
		for _, b := range bodies {
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, b.body()))
			if rec.Code != b.status {
				t.Errorf("%s %s: %d %s, want %d", path, b.name, rec.Code, rec.Body, b.status)
			}
			checkErrorShape(t, path, rec.Body.String())
		}
	}
}

type letterA struct{}

func (letterA) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'a'
	}
	return len(p), nil
}
