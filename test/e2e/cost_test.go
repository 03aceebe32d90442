package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tidegpu/tidegpu/internal/admin"
	"github.com/tidegpu/tidegpu/test/testbin"
)

func (u *upProc) costReport(t *testing.T) admin.CostReport {
	t.Helper()
	resp, err := http.Get(u.admin + "/api/v1/cost?window=24h")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var rep admin.CostReport
	if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
		t.Fatal(err)
	}
	return rep
}

func (u *upProc) cost(t *testing.T) admin.CostView {
	t.Helper()
	rep := u.costReport(t)
	for _, p := range rep.Pools {
		if p.Name == "priced" {
			return p
		}
	}
	return admin.CostView{}
}

// A pool with its own prices: spend is instance-hours x the spot price,
// savings the on-demand difference, both labelled as overrides; after a
// restart spend goes on from where it was, counting nothing twice.
func TestCostFollowsThePoolAcrossRestarts(t *testing.T) {
	const spot, onDemand = 3.6, 7.2 // $/h: 0.001 and 0.002 $/s
	dir := t.TempDir()
	file := filepath.Join(dir, "pool.yaml")
	pool := "apiVersion: tidegpu.eja.dev/v1\nkind: TidePool\nmetadata:\n  name: priced\nspec:\n  minimum: 2\n  maximum: 2\n  pricing:\n    spotPerHour: \"3.6\"\n    onDemandPerHour: \"7.2\"\n"
	if err := os.WriteFile(file, []byte(pool), 0o644); err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	u := startUp(t, state, "-f", file)
	u.waitReady("priced", 2, 30*time.Second)
	start := time.Now()
	eventually(t, 10*time.Second, "some spend", func() bool { return u.cost(t).InstanceHours*3600 > 2 })
	c := u.cost(t)
	elapsed := time.Since(start).Seconds()
	t.Logf("after %.1fs: %.2f instance-seconds, spend %.6f, on-demand %.6f, savings %.6f, run-rate %.2f/h, sources %v",
		elapsed, c.InstanceHours*3600, c.Spend, c.OnDemandEquivalent, c.Savings, c.RunRatePerHour, c.SpendBySource)
	if rel(c.Spend, c.InstanceHours*spot) > 0.01 {
		t.Errorf("spend %.6f != instance-hours %.6f x %.2f", c.Spend, c.InstanceHours, spot)
	}
	if rel(c.Savings, c.InstanceHours*(onDemand-spot)) > 0.01 {
		t.Errorf("savings %.6f != instance-hours x (%.2f - %.2f)", c.Savings, onDemand, spot)
	}
	if rel(c.RunRatePerHour, 2*spot) > 0.01 {
		t.Errorf("run-rate %.4f/h, want 2 x %.2f", c.RunRatePerHour, spot)
	}
	if c.SpendBySource["override"] <= 0 {
		t.Errorf("spend not labelled as override: %v", c.SpendBySource)
	}

	before := u.cost(t).Spend
	read := time.Now()
	u.stop(syscall.SIGTERM)
	if _, err := os.Stat(filepath.Join(state, "cost.json")); err != nil {
		t.Fatalf("no cost ledger saved on shutdown: %v", err)
	}
	u2 := startUp(t, state, "-f", file)
	u2.waitReady("priced", 2, 30*time.Second)
	after := u2.cost(t)
	gap := time.Since(read).Seconds()
	t.Logf("spend before restart %.6f, right after %.6f (%.1fs later)", before, after.Spend, gap)
	if after.Spend+1e-9 < before {
		t.Errorf("spend went back from %.6f to %.6f across the restart", before, after.Spend)
	}
	// At most two instances ran at any moment since the last reading:
	// anything more was counted twice.
	if max := before + 2*spot/3600*gap; after.Spend > max*1.01 {
		t.Errorf("spend %.6f after the restart exceeds %.6f (two instances for %.1fs): counted twice?", after.Spend, max, gap)
	}
}

func rel(a, b float64) float64 {
	if b == 0 {
		return math.Abs(a)
	}
	return math.Abs(a-b) / math.Abs(b)
}

// A budget crossed: BudgetExceeded condition, event and metric; with
// CapAtMinimum the pool is held at its minimum.
func TestBudgetCapAtMinimum(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "pool.yaml")
	// 3 instances at 3.6 $/h spend 0.003 $/s: the 0.004 budget lasts ~1.3 s.
	pool := "apiVersion: tidegpu.eja.dev/v1\nkind: TidePool\nmetadata:\n  name: capped\nspec:\n  minimum: 1\n  maximum: 3\n  replicas: 3\n  pricing:\n    spotPerHour: \"3.6\"\n  budget:\n    monthly: \"0.004\"\n    action: CapAtMinimum\n"
	if err := os.WriteFile(file, []byte(pool), 0o644); err != nil {
		t.Fatal(err)
	}
	u := startUp(t, "", "-f", file)
	u.waitReady("capped", 3, 30*time.Second)
	took := eventually(t, 20*time.Second, "BudgetExceeded=True", func() bool {
		p, ok := u.pool("capped")
		if !ok {
			return false
		}
		for _, c := range p.Status.Conditions {
			if c.Type == "BudgetExceeded" && c.Status == "True" {
				return true
			}
		}
		return false
	})
	t.Logf("budget exceeded after %s", took)
	if !u.hasEvent("BudgetExceeded", "") {
		t.Errorf("no BudgetExceeded event")
	}
	eventually(t, 20*time.Second, "the pool held at its minimum of 1", func() bool {
		p, ok := u.pool("capped")
		return ok && p.Status.Desired == 1 && len(u.readyIDs("capped")) == 1
	})
	resp, err := http.Get(u.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(b), `tidegpu_pool_budget_exceeded{pool="capped"} 1`) {
		t.Errorf("metric tidegpu_pool_budget_exceeded{pool=\"capped\"} is not 1")
	}
}

// $ per million tokens: the gateway reads the token counts from the
// answers; the report's tokens equal what the clients were told, and the
// allocation basis is spend / tokens.
func TestCostPerMillionTokens(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "pool.yaml")
	pool := "apiVersion: tidegpu.eja.dev/v1\nkind: TidePool\nmetadata:\n  name: priced\nspec:\n  minimum: 2\n  maximum: 2\n  serving:\n    models: [\"qwen2:0.5b\"]\n  pricing:\n    spotPerHour: \"3.6\"\n"
	if err := os.WriteFile(file, []byte(pool), 0o644); err != nil {
		t.Fatal(err)
	}
	u := startUp(t, "", "-f", file)
	u.waitReady("priced", 2, 30*time.Second)
	var served float64
	for i := 0; i < 20; i++ {
		stream := i%2 == 0
		code, body := postJSON(t, u.gateway+"/api/chat", fmt.Sprintf(`{"model":"qwen2:0.5b","stream":%t,"options":{"num_predict":%d},"messages":[{"role":"user","content":"写一首诗 %d"}]}`, stream, 10+i, i))
		if code != 200 {
			t.Fatalf("chat: %d %s", code, body)
		}
		lines := strings.Split(strings.TrimSpace(body), "\n")
		var done struct {
			PromptEvalCount float64 `json:"prompt_eval_count"`
			EvalCount       float64 `json:"eval_count"`
		}
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &done); err != nil {
			t.Fatal(err)
		}
		served += done.PromptEvalCount + done.EvalCount
	}
	var tc admin.TokenCost
	var c admin.CostView
	eventually(t, 5*time.Second, "the report to count every token served", func() bool {
		c = u.cost(t)
		for _, x := range c.CostPerMillionTokens {
			if x.Model == "qwen2:0.5b" && x.Basis == "allocation" {
				tc = x
			}
		}
		// A window that ends inside an hour counts that hour's tokens pro
		// rata by time (the ledger keeps tokens per hour): within 0.1 %.
		return rel(tc.Tokens, served) < 1e-3
	})
	hand := c.Spend / served * 1e6
	t.Logf("%.0f tokens served; spend %.6f; $/Mtok allocation %.4f (by hand %.4f), usage %v", served, c.Spend, tc.Value, hand, c.CostPerMillionTokens)
	// The report and the hand computation read spend at slightly different
	// moments; both run at 2 x 3.6 $/h.
	if rel(tc.Value, hand) > 0.05 {
		t.Errorf("$/Mtok allocation %.4f, by hand %.4f", tc.Value, hand)
	}
}

// A sim-provider pool of 2 spot p3.2xlarge (the aws1 capacity trace, real
// time): spend is instance-hours x the catalog's spot price and savings the
// on-demand difference, each within 1 %.
func TestSimSpotPoolCost(t *testing.T) {
	trace := filepath.Join(testbin.RepoRoot(), "..", "shared", "data", "spot-traces", "aws1")
	if _, err := os.Stat(trace); err != nil {
		t.Skipf("spot traces not found at %s (../shared/data): %v", trace, err)
	}
	const spot, onDemand = 1.012733, 3.06 // catalog: us-west-2 p3.2xlarge
	dir := t.TempDir()
	file := filepath.Join(dir, "pool.yaml")
	pool := fmt.Sprintf(`apiVersion: tidegpu.eja.dev/v1
kind: TidePool
metadata:
  name: spot
spec:
  provider: sim
  region: us-west-2
  instanceType: p3.2xlarge
  minimum: 2
  maximum: 2
  placement:
    availabilityZones: [us-west-2c]
    strategy: LowestPrice
  sim:
    traceDir: %s
    compression: 1
`, trace)
	if err := os.WriteFile(file, []byte(pool), 0o644); err != nil {
		t.Fatal(err)
	}
	u := startUp(t, "", "-f", file)
	u.waitReady("spot", 2, 30*time.Second)
	get := func() admin.CostView {
		for _, p := range u.costReport(t).Pools {
			if p.Name == "spot" {
				return p
			}
		}
		return admin.CostView{}
	}
	eventually(t, 20*time.Second, "4 instance-seconds of spend", func() bool { return get().InstanceHours*3600 > 4 })
	c := get()
	t.Logf("%.2f instance-seconds: spend %.6f (%.6f expected), on-demand %.6f, savings %.6f, sources %v",
		c.InstanceHours*3600, c.Spend, c.InstanceHours*spot, c.OnDemandEquivalent, c.Savings, c.SpendBySource)
	if rel(c.Spend, c.InstanceHours*spot) > 0.01 {
		t.Errorf("spend %.6f != %.6f instance-hours x %.6f", c.Spend, c.InstanceHours, spot)
	}
	if rel(c.Savings, c.InstanceHours*(onDemand-spot)) > 0.01 {
		t.Errorf("savings %.6f != instance-hours x (%.2f - %.6f)", c.Savings, onDemand, spot)
	}
	if c.SpendBySource["catalog"] <= 0 {
		t.Errorf("spend not labelled as catalog prices: %v", c.SpendBySource)
	}
	// The simulated instances serve real requests.
	if code, body := postJSON(t, u.gateway+"/ollama-chat", `{"model":"qwen2:0.5b","messages":[{"role":"user","content":"hi"}],"stream":false}`); code != 200 {
		t.Errorf("gateway in front of the sim pool: %d %s", code, body)
	}
}
