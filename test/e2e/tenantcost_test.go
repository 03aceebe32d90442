package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tidegpu/tidegpu/internal/admin"
	"github.com/tidegpu/tidegpu/internal/notify"
	"github.com/tidegpu/tidegpu/internal/tenant"
)

// Issue 16 (4, budget): `tidegpu up --keys-file` with two keys of two
// tenants. `tidegpu cost --by tenant` shows for each the tokens its
// clients were told in the answers' usage (Ollama and OpenAI, streamed and
// not), within 0.1 %, with spend and $/Mtok; by label too. A third tenant
// with a tiny monthly budget gets 429 budget_exceeded once its spend
// reaches it, and its budget alert reaches a local webhook once.
func TestUpCostByTenantAndBudget(t *testing.T) {
	keyA, keyB, keyC := "sk-a-"+randHex(t), "sk-b-"+randHex(t), "sk-c-"+randHex(t)
	dir := t.TempDir()
	keysFile := filepath.Join(dir, "keys.yaml")
	keys := "keys:\n" +
		"- name: a\n  sha256: " + tenant.Hash(keyA) + "\n  tenant: team-a\n  labels: {team: alpha, project: chat, env: prod}\n" +
		"- name: b\n  sha256: " + tenant.Hash(keyB) + "\n  tenant: team-b\n  labels: {team: beta, env: test}\n" +
		"- name: c\n  sha256: " + tenant.Hash(keyC) + "\n  tenant: team-c\n  limits: {monthlyBudget: \"0.000001\"}\n"
	if err := os.WriteFile(keysFile, []byte(keys), 0o600); err != nil {
		t.Fatal(err)
	}
	pool := "apiVersion: tidegpu.eja.dev/v1\nkind: TidePool\nmetadata:\n  name: priced\nspec:\n  minimum: 2\n  maximum: 2\n  serving:\n    models: [\"qwen2:0.5b\"]\n  pricing:\n    spotPerHour: \"3.6\"\n"
	poolFile := filepath.Join(dir, "pool.yaml")
	if err := os.WriteFile(poolFile, []byte(pool), 0o644); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var hooks []notify.Body
	var ids []string
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var body notify.Body
		_ = json.Unmarshal(b, &body)
		mu.Lock()
		hooks, ids = append(hooks, body), append(ids, r.Header.Get(notify.HeaderDelivery))
		mu.Unlock()
	}))
	defer hook.Close()
	u := startUp(t, "", "-f", poolFile, "--keys-file", keysFile, "--alert-webhook", hook.URL+"/hook", "--cost-report", "daily")
	u.waitReady("priced", 2, 30*time.Second)

	post := func(key, path, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, u.gateway+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// told reads the usage an answer told its client.
	told := func(t *testing.T, body string) float64 {
		t.Helper()
		var n float64
		for _, line := range strings.Split(strings.TrimSpace(body), "\n") {
			line = strings.TrimPrefix(strings.TrimSpace(line), "data: ")
			var v struct {
				PromptEvalCount float64 `json:"prompt_eval_count"`
				EvalCount       float64 `json:"eval_count"`
				Usage           *struct {
					PromptTokens     float64 `json:"prompt_tokens"`
					CompletionTokens float64 `json:"completion_tokens"`
				} `json:"usage"`
			}
			if json.Unmarshal([]byte(line), &v) != nil {
				continue
			}
			if v.EvalCount > 0 || v.PromptEvalCount > 0 {
				n = v.PromptEvalCount + v.EvalCount
			}
			if v.Usage != nil {
				n = v.Usage.PromptTokens + v.Usage.CompletionTokens
			}
		}
		if n == 0 {
			t.Fatalf("an answer told no usage: %s", body)
		}
		return n
	}
	servedTo := map[string]float64{}
	for i := range 24 {
		key, name := keyA, "team-a"
		if i%3 == 2 {
			key, name = keyB, "team-b"
		}
		var path, body string
		switch i % 4 {
		case 0:
			path, body = "/api/chat", fmt.Sprintf(`{"model":"qwen2:0.5b","stream":false,"options":{"num_predict":%d},"messages":[{"role":"user","content":"poem %d"}]}`, 10+i, i)
		case 1:
			path, body = "/api/chat", fmt.Sprintf(`{"model":"qwen2:0.5b","stream":true,"options":{"num_predict":%d},"messages":[{"role":"user","content":"poem %d"}]}`, 10+i, i)
		case 2:
			path, body = "/v1/chat/completions", fmt.Sprintf(`{"model":"qwen2:0.5b","max_tokens":%d,"messages":[{"role":"user","content":"poem %d"}]}`, 10+i, i)
		default:
			path, body = "/v1/chat/completions", fmt.Sprintf(`{"model":"qwen2:0.5b","stream":true,"stream_options":{"include_usage":true},"max_tokens":%d,"messages":[{"role":"user","content":"poem %d"}]}`, 10+i, i)
		}
		code, answer := post(key, path, body)
		if code != 200 {
			t.Fatalf("request %d: %d %s", i, code, answer)
		}
		servedTo[name] += told(t, answer)
	}

	costCLI := func(by, output string) []byte {
		t.Helper()
		out, err := exec.Command(binary, "cost", "--admin", u.admin, "--by", by, "-o", output).CombinedOutput()
		if err != nil {
			t.Fatalf("tidegpu cost --by %s: %v: %s", by, err, out)
		}
		return out
	}
	var rep admin.CostReport
	group := func(name string) admin.GroupView {
		for _, g := range rep.Groups {
			if g.Group == name {
				return g
			}
		}
		return admin.GroupView{}
	}
	eventually(t, 10*time.Second, "cost --by tenant to show the tokens each tenant was told", func() bool {
		if err := json.Unmarshal(costCLI("tenant", "json"), &rep); err != nil {
			t.Fatal(err)
		}
		for name, n := range servedTo {
			g := group(name)
			if rel(g.PromptTokens+g.CompletionTokens, n) >= 1e-3 {
				return false
			}
		}
		return true
	})
	for name, n := range servedTo {
		g := group(name)
		if g.Spend <= 0 || g.PerMillionTokens == nil || rel(*g.PerMillionTokens, g.Spend*1e6/n) > 1e-3 {
			t.Errorf("%s: spend %v, $/Mtok %v with %v tokens", name, g.Spend, g.PerMillionTokens, n)
		}
		t.Logf("%s: told %.0f tokens, cost --by tenant %.0f; spend %.6f USD, %.4f $/Mtok, %.5f GPU-h",
			name, n, g.PromptTokens+g.CompletionTokens, g.Spend, *g.PerMillionTokens, g.GPUHours)
	}
	// The groups sum to the pool's spend (idle apart).
	var sum float64
	for _, g := range rep.Groups {
		sum += g.Spend
	}
	if len(rep.Pools) != 1 || rel(sum, rep.Pools[0].Spend) > 0.01 {
		t.Errorf("groups sum to %.6f, pool spend %+v", sum, rep.Pools)
	}
	table := string(costCLI("label:team", "table"))
	for _, want := range []string{"TEAM", "alpha", "beta", "(idle)", "$/MTOK"} {
		if !strings.Contains(table, want) {
			t.Errorf("cost --by label:team lacks %q:\n%s", want, table)
		}
	}
	csv := string(costCLI("tenant", "focus-csv"))
	if !strings.Contains(csv, `""tidegpu.io/tenant"":""team-a""`) || !strings.Contains(csv, `""tidegpu.io/team"":""alpha""`) {
		t.Errorf("FOCUS rows by tenant lack the tenant's tags:\n%s", csv)
	}
	resp, err := http.Get(u.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Contains(metrics, []byte(`tidegpu_cost_tenant_spend{currency="USD",env="prod",pool="priced",project="chat",team="alpha",tenant="team-a"}`)) {
		t.Errorf("/metrics lacks the tenant spend of team-a")
	}

	// Tenant c's budget is a millionth of a dollar: a few requests spend it.
	var refused string
	took := eventually(t, 60*time.Second, "tenant c to be refused for its budget", func() bool {
		code, body := post(keyC, "/v1/chat/completions", `{"model":"qwen2:0.5b","max_tokens":64,"messages":[{"role":"user","content":"a long poem"}]}`)
		if code == http.StatusTooManyRequests {
			refused = body
			return true
		}
		if code != 200 {
			t.Fatalf("tenant c: %d %s", code, body)
		}
		return false
	})
	if !strings.Contains(refused, `"code":"budget_exceeded"`) {
		t.Errorf("refusal %s", refused)
	}
	if code, _ := post(keyA, "/api/chat", `{"model":"qwen2:0.5b","stream":false,"messages":[]}`); code != 200 {
		t.Errorf("tenant a refused too: %d", code)
	}
	eventually(t, 30*time.Second, "tenant c's 100 % budget alert at the webhook", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, h := range hooks {
			if h.Reason == "TenantBudgetAlert" && strings.Contains(h.Message, "tenant team-c crossed 100 %") {
				return true
			}
		}
		return false
	})
	t.Logf("tenant c refused after %s: %s", took, strings.TrimSpace(refused))
	u.stop(syscall.SIGTERM)
	mu.Lock()
	defer mu.Unlock()
	seen := map[string]bool{}
	for i, id := range ids {
		if seen[id] {
			t.Errorf("delivery %s (%s) twice", id, hooks[i].Message)
		}
		seen[id] = true
		if strings.Contains(hooks[i].Message, "team-a") || strings.Contains(hooks[i].Message, "team-b") {
			t.Errorf("an alert for a tenant without a budget: %s", hooks[i].Message)
		}
	}
	out := u.Out.String()
	for _, k := range []string{keyA, keyB, keyC} {
		if strings.Contains(out, k) || strings.Contains(csv, k) || strings.Contains(table, k) {
			t.Error("a key in the output")
		}
	}
}
