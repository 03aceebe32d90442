package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tidegpu/tidegpu/internal/tenant"
	"github.com/tidegpu/tidegpu/test/testbin"
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

// Issue 16: `tidegpu gateway --keys-file` in front of a `tidegpu sim`, the
// keys file laid out as a mounted Secret. A key added to the file is
// accepted without a restart (the kubelet's ..data swap), a removed one gets
// 401, and two keys of one tenant share its limit of 10 requests per
// minute: 20 requests over both keys, 10 answered and 10 429 with
// Retry-After.
func TestGatewayKeysReloadAndTenantLimit(t *testing.T) {
	key := func(name string) string { return "sk-" + name + "-" + randHex(t) }
	a1, a2, b := key("a1"), key("a2"), key("b")
	entry := func(name, k, tenantName, limits string) string {
		s := "- name: " + name + "\n  sha256: " + tenant.Hash(k) + "\n  tenant: " + tenantName + "\n"
		if limits != "" {
			s += "  limits: " + limits + "\n"
		}
		return s
	}
	// The Secret volume: keys.yaml → ..data/keys.yaml, ..data → a
	// timestamped directory the kubelet swaps.
	dir := t.TempDir()
	version := 0
	writeKeys := func(entries ...string) {
		t.Helper()
		version++
		ts := "..2026_12_02_05_00_0" + strconv.Itoa(version)
		if err := os.Mkdir(filepath.Join(dir, ts), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, ts, "keys.yaml"), []byte("keys:\n"+strings.Join(entries, "")), 0o644); err != nil {
			t.Fatal(err)
		}
		old, _ := os.Readlink(filepath.Join(dir, "..data"))
		if err := os.Symlink(ts, filepath.Join(dir, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
		if old != "" {
			_ = os.RemoveAll(filepath.Join(dir, old))
		}
	}
	writeKeys(entry("a1", a1, "team-a", "{requestsPerMinute: 10}"), entry("a2", a2, "team-a", ""))
	keysFile := filepath.Join(dir, "keys.yaml")
	if err := os.Symlink(filepath.Join("..data", "keys.yaml"), keysFile); err != nil {
		t.Fatal(err)
	}

	simAddr, gwAddr, admAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	testbin.Start(t, binary, "sim", "--addr", simAddr, "--ttft", "1ms", "--token-time", "1ms")
	gw := testbin.Start(t, binary, "gateway", "--backend", "http://"+simAddr, "--addr", gwAddr, "--admin-addr", admAddr,
		"--metrics", "none", "--keys-file", keysFile, "--log-level", "debug")
	base := "http://" + gwAddr
	const chat = `{"model":"qwen2:0.5b","messages":[{"role":"user","content":"hi"}],"max_tokens":1}`
	post := func(k string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(chat))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+k)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	// Up, and its backend eligible (a request with b, not yet a key,
	// takes nothing from team-a's bucket).
	eventually(t, 60*time.Second, "the gateway answers", func() bool {
		resp := post(b)
		return resp != nil && resp.StatusCode == http.StatusUnauthorized
	})
	// The sim listens (a static backend is eligible from the start, so a
	// request sent before the sim is up would fail on it).
	eventually(t, 60*time.Second, "the sim answers", func() bool {
		resp, err := http.Get("http://" + simAddr + "/")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	eventually(t, 30*time.Second, "the sim backend is eligible", func() bool {
		resp, err := http.Get("http://" + admAddr + "/api/v1/backends")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(body), `"eligible":true`)
	})

	var ok, limited int
	start := time.Now()
	for i := range 20 {
		k := a1
		if i%2 == 1 {
			k = a2
		}
		resp := post(k)
		if resp == nil {
			t.Fatalf("request %d: no answer", i)
		}
		switch resp.StatusCode {
		case http.StatusOK:
			ok++
		case http.StatusTooManyRequests:
			limited++
			if resp.Header.Get("Retry-After") == "" || resp.Header.Get("X-Ratelimit-Limit-Requests") != "10" {
				t.Fatalf("request %d: 429 without Retry-After or the tenant's limit: %v", i, resp.Header)
			}
		default:
			t.Fatalf("request %d: %d", i, resp.StatusCode)
		}
	}
	took := time.Since(start)
	// The tenant's bucket refills one request every 6 s: at most one more
	// per 6 s the 20 took can pass, and none when they took less.
	if extra := int(took / (6 * time.Second)); ok < 10 || ok > 10+extra || ok+limited != 20 {
		t.Fatalf("20 requests over two keys of one tenant in %s: %d answered, %d limited; want 10 and 10", took, ok, limited)
	}
	t.Logf("20 requests over two keys of team-a in %s: %d answered, %d got 429", took, ok, limited)

	// b added: accepted without a restart.
	writeKeys(entry("a1", a1, "team-a", "{requestsPerMinute: 10}"), entry("a2", a2, "team-a", ""), entry("b", b, "team-b", ""))
	took = eventually(t, 30*time.Second, "the added key is accepted", func() bool {
		resp := post(b)
		return resp != nil && resp.StatusCode == http.StatusOK
	})
	t.Logf("added key accepted %s after the swap", took)
	if resp := post(a1); resp == nil || resp.StatusCode != http.StatusTooManyRequests && time.Since(start) < 6*time.Second {
		t.Fatalf("team-a after the reload: %v, want 429 (its bucket kept)", resp)
	}

	// a2 removed: 401.
	writeKeys(entry("a1", a1, "team-a", "{requestsPerMinute: 10}"), entry("b", b, "team-b", ""))
	took = eventually(t, 30*time.Second, "the removed key gets 401", func() bool {
		resp := post(a2)
		return resp != nil && resp.StatusCode == http.StatusUnauthorized
	})
	t.Logf("removed key refused %s after the swap", took)
	if resp := post(b); resp == nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("b after a2's removal: %v", resp)
	}

	resp, err := http.Get("http://" + admAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(metrics), `tidegpu_gateway_keys_reloads_total{result="applied"} 2`) {
		t.Errorf("/metrics lacks 2 applied reloads")
	}
	gw.Stop(syscall.SIGTERM)
	for _, k := range []string{a1, a2, b} {
		if out := gw.Out.String(); strings.Contains(out, k) || strings.Contains(out, tenant.Hash(k)) {
			t.Errorf("the gateway's output shows a key or its digest")
		}
	}
}
