package usage

import (
	"context"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tidegpu/tidegpu/internal/cost"
	"github.com/tidegpu/tidegpu/internal/costreport"
	"github.com/tidegpu/tidegpu/internal/tenant"
)

// A standalone replica holds its keys' monthly budgets with the operator's
// ledger: the replica's batch (a tenant's request time on a busy instance)
// reaches the operator's ledger through Ingest, the acknowledgement carries
// every tenant's spend this month as the operator computes it
// (costreport.SpendCache.All, as the operator wires it), and the replica's
// tenant middleware refuses the tenant once that spend reaches its budget.
func TestReplicaHoldsBudgetsWithTheOperatorsSpend(t *testing.T) {
	l := newTestLedger(t, "i-1") // a spot instance started a minute ago
	in := NewIngest(l, nil, nil)
	in.ShareSpend((&costreport.SpendCache{Ledger: l}).All)
	mux := http.NewServeMux()
	mux.Handle(Path, in)
	op := httptest.NewServer(mux)
	t.Cleanup(op.Close)
	r, err := NewReporter(ReporterOptions{URL: op.URL, Name: "gw-0"})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if _, ok := r.MonthSpend("team-a", now); ok {
		t.Fatal("spend known before the operator said it")
	}

	ks, err := tenant.Parse([]byte(`keys:
- {name: a, sha256: ` + tenant.Hash("sk-a") + `, tenant: team-a, limits: {monthlyBudget: "0.000001"}}
- {name: b, sha256: ` + tenant.Hash("sk-b") + `, tenant: team-b, limits: {monthlyBudget: "100"}}
`))
	if err != nil {
		t.Fatal(err)
	}
	answer := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"choices":[{"message":{"role":"assistant","content":"ok"}}],"usage":{"prompt_tokens":1,"completion_tokens":1}}`)
	})
	h, err := tenant.Middleware(answer, ks, tenant.Options{Spend: r})
	if err != nil {
		t.Fatal(err)
	}
	gw := httptest.NewServer(h)
	t.Cleanup(gw.Close)
	post := func(key string) int {
		req, _ := http.NewRequest("POST", gw.URL+"/v1/chat/completions", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	// Unknown spend passes (a replica just started).
	if c := post("sk-a"); c != http.StatusOK {
		t.Fatalf("before any acknowledgement: %d", c)
	}

	// Team A kept the instance busy for 20 s; the batch reaches the
	// operator and its acknowledgement brings the spend back.
	t0 := now.Add(-30 * time.Second)
	r.BusyStart("i-1", t0)
	r.BusyEnd("i-1", t0.Add(20*time.Second))
	r.AddUse("i-1", accModel, cost.Use{Tenant: "team-a", Prompt: 10, Completion: 20, Start: t0, End: t0.Add(20 * time.Second)})
	r.SetBudgets(ks.Budgets()) // as tidegpu gateway does with its keys
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// The operator learnt the budgets from the batch, and its tenant
	// budget alerts (costreport.WatchBudgets on the leader) see team A
	// over its budget and team B within.
	budgets := in.Budgets()
	if len(budgets) != 2 || budgets["team-a"].Cmp(big.NewRat(1, 1e6)) != 0 || budgets["team-b"].Cmp(big.NewRat(100, 1)) != 0 {
		t.Fatalf("the operator's budgets %v", budgets)
	}
	alerts := costreport.BudgetAlerts(budgets, l, time.Now(), map[string]bool{})
	if len(alerts) != 1 || !strings.Contains(alerts[0].Message, "team-a") {
		t.Fatalf("the operator's tenant alerts: %+v, want one for team-a", alerts)
	}
	a, ok := r.MonthSpend("team-a", time.Now())
	if !ok || a.Sign() <= 0 {
		t.Fatalf("team-a's spend after the acknowledgement: %v (known %v), want > 0", a, ok)
	}
	if b, ok := r.MonthSpend("team-b", time.Now()); !ok || b.Sign() != 0 {
		t.Fatalf("team-b's spend: %v (known %v), want 0", b, ok)
	}
	if c := post("sk-a"); c != http.StatusTooManyRequests {
		t.Errorf("team-a over its budget of $0.000001 (spent $%s): %d, want 429", a.FloatString(6), c)
	}
	if c := post("sk-b"); c != http.StatusOK {
		t.Errorf("team-b within its budget: %d", c)
	}
	// The figure holds for its month only.
	if _, ok := r.MonthSpend("team-a", time.Now().AddDate(0, 1, 0)); ok {
		t.Error("last month's spend taken for this month's")
	}
}
