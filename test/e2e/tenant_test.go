package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tidegpu/tidegpu/internal/tenant"
)

// Issue 16: `tidegpu up --keys-file` with two keys, one limited to 10
// requests per minute: of 20 requests 10 are answered and 10 get 429 with
// Retry-After and OpenAI's x-ratelimit-* headers; no key is 401; the other
// key is not limited. The keys never appear in the process's output (at
// debug level), the admin API or the dashboard.
func TestUpTenantKeysAndLimits(t *testing.T) {
	limitedKey, openKey := "sk-limited-"+randHex(t), "sk-open-"+randHex(t)
	keysFile := filepath.Join(t.TempDir(), "keys.yaml")
	keys := "keys:\n" +
		"- name: limited\n  sha256: " + tenant.Hash(limitedKey) + "\n  tenant: team-limited\n  labels: {team: limited, env: test}\n  limits: {requestsPerMinute: 10, monthlyBudget: \"50\"}\n" +
		"- name: open\n  sha256: " + tenant.Hash(openKey) + "\n  tenant: team-open\n  models: [qwen2:0.5b]\n"
	if err := os.WriteFile(keysFile, []byte(keys), 0o600); err != nil {
		t.Fatal(err)
	}
	u := startUp(t, "", "--keys-file", keysFile, "--log-level", "debug")
	u.waitReady("default", 2, 30*time.Second)

	post := func(path, body string, header ...string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, u.gateway+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	const chat = `{"model":"qwen2:0.5b","messages":[{"role":"user","content":"hi"}],"max_tokens":1}`

	resp, body := post("/v1/chat/completions", chat)
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, `"code":"missing_api_key"`) {
		t.Fatalf("no key: %d %s", resp.StatusCode, body)
	}
	resp, body = post("/api/chat", `{"model":"qwen2:0.5b","messages":[],"stream":false}`, "x-api-key", "sk-wrong")
	if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(body, `{"error":"`) {
		t.Fatalf("unknown key on an Ollama path: %d %s", resp.StatusCode, body)
	}

	var ok, limited int
	start := time.Now()
	for i := range 20 {
		resp, body := post("/v1/chat/completions", chat, "Authorization", "Bearer "+limitedKey)
		switch resp.StatusCode {
		case http.StatusOK:
			ok++
		case http.StatusTooManyRequests:
			limited++
			if resp.Header.Get("Retry-After") == "" || resp.Header.Get("X-Ratelimit-Limit-Requests") != "10" ||
				resp.Header.Get("X-Ratelimit-Remaining-Requests") != "0" || resp.Header.Get("X-Ratelimit-Reset-Requests") == "" ||
				!strings.Contains(body, `"code":"rate_limit_exceeded"`) {
				t.Fatalf("request %d: 429 without its headers or body: %v %s", i, resp.Header, body)
			}
		default:
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
	}
	took := time.Since(start)
	// The bucket refills one request every 6 s: within that, exactly 10 pass.
	if took < 6*time.Second && (ok != 10 || limited != 10) {
		t.Fatalf("20 requests in %s: %d answered, %d limited; want 10 and 10", took, ok, limited)
	}
	t.Logf("20 requests in %s: %d answered, %d got 429", took, ok, limited)

	for i := range 15 {
		if resp, body := post("/v1/chat/completions", chat, "Authorization", "Bearer "+openKey); resp.StatusCode != http.StatusOK {
			t.Fatalf("unlimited key, request %d: %d %s", i, resp.StatusCode, body)
		}
	}
	if resp, body := post("/api/chat", `{"model":"llama3","messages":[],"stream":false}`, "x-api-key", openKey); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("model not allowed: %d %s", resp.StatusCode, body)
	}

	get := func(path string) string {
		t.Helper()
		resp, err := http.Get(u.admin + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	metrics := get("/metrics")
	for _, want := range []string{
		`tidegpu_gateway_tenant_requests_total{code="429",tenant="team-limited"} 10`,
		`tidegpu_gateway_tenant_requests_total{code="200",tenant="team-limited"} 10`,
		`tidegpu_gateway_tenant_requests_total{code="200",tenant="team-open"} 15`,
		`tidegpu_gateway_tenant_requests_total{code="401",tenant="unauthenticated"} 2`,
		`tidegpu_gateway_tenant_tokens_total{kind="completion",tenant="team-open"} 15`,
	} {
		if took < 6*time.Second && !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	outputs := map[string]string{"process output": u.Out.String()}
	for _, p := range []string{"/metrics", "/api/v1/pools", "/api/v1/events", "/api/v1/cost", "/api/v1/backends", "/api/v1/timeline", "/api/v1/timeseries", "/"} {
		outputs[p] = get(p)
	}
	u.stop(syscall.SIGTERM)
	outputs["process output"] = u.Out.String()
	for where, text := range outputs {
		for _, secret := range []string{limitedKey, openKey, strings.TrimPrefix(limitedKey, "sk-limited-"), strings.TrimPrefix(openKey, "sk-open-")} {
			if strings.Contains(text, secret) {
				t.Errorf("%s shows a key", where)
			}
		}
	}
}

func randHex(t *testing.T) string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
