package tenant

import (
	"encoding/json"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidegpu/tidegpu/internal/gateway"
	"github.com/tidegpu/tidegpu/internal/sim"
)

func TestCheckBudget(t *testing.T) {
	rat := func(s string) *big.Rat { r, _ := new(big.Rat).SetString(s); return r }
	now := time.Date(2026, 2, 27, 12, 0, 0, 0, time.UTC)
	budget := &Key{Tenant: "a", Budget: rat("10")}
	for _, c := range []struct {
		name  string
		k     *Key
		spent *big.Rat
		known bool
		want  BudgetCheck
	}{
		{"no budget", &Key{Tenant: "a"}, rat("1000"), true, BudgetCheck{}},
		{"below", budget, rat("9.999999"), true, BudgetCheck{}},
		{"unknown spend passes", budget, rat("20"), false, BudgetCheck{}},
		{"reached", budget, rat("10"), true, BudgetCheck{Exceeded: true, RetryAfter: 36 * time.Hour}},
		{"over", budget, rat("11"), true, BudgetCheck{Exceeded: true, RetryAfter: 36 * time.Hour}},
	} {
		if got := CheckBudget(c.k, c.spent, c.known, now); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
	// December rolls into January.
	dec := time.Date(2026, 12, 31, 23, 0, 0, 0, time.UTC)
	if got := CheckBudget(budget, rat("10"), true, dec); got.RetryAfter != time.Hour {
		t.Errorf("December: retry after %v, want 1h", got.RetryAfter)
	}
}

// A budget belongs to the tenant: a key without limits shares its
// tenant's, and a tenant without one has none.
func TestKeysBudgets(t *testing.T) {
	ks, err := Parse([]byte(`keys:
- {name: a1, sha256: ` + Hash("1") + `, tenant: a}
- {name: a2, sha256: ` + Hash("2") + `, tenant: a, limits: {monthlyBudget: "7.5"}}
- {name: b, sha256: ` + Hash("3") + `, tenant: b}
`))
	if err != nil {
		t.Fatal(err)
	}
	b := ks.Budgets()
	if len(b) != 1 || b["a"].FloatString(2) != "7.50" {
		t.Errorf("budgets %v, want a: 7.50 only", b)
	}
}

// spendTable is a Spend read from a table the test sets.
type spendTable struct {
	mu sync.Mutex
	m  map[string]*big.Rat
}

func (s *spendTable) MonthSpend(tenant string, _ time.Time) (*big.Rat, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[tenant]
	return v, ok
}

// A tenant over its budget gets 429 budget_exceeded in the API's shape with
// Retry-After until the month's end; the handler behind sees the tenant on
// the context.
func TestMiddlewareBudget(t *testing.T) {
	s := sim.New(sim.Config{TTFT: -1, TokenTime: -1})
	backend := httptest.NewServer(s)
	defer func() { backend.CloseClientConnections(); backend.Close(); s.Close() }()
	gw, err := gateway.New(gateway.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	gw.SetBackends("chat", []gateway.Backend{{ID: "chat-0", Pool: "chat", Address: strings.TrimPrefix(backend.URL, "http://")}})
	ks, err := Parse([]byte(`keys:
- {name: k, sha256: ` + Hash("sk-a") + `, tenant: team-a, labels: {team: a}, limits: {monthlyBudget: "5"}}
`))
	if err != nil {
		t.Fatal(err)
	}
	var seen Info
	var seenMu sync.Mutex
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seenMu.Lock()
		seen, _ = InfoFrom(r.Context())
		seenMu.Unlock()
		gw.ServeHTTP(w, r)
	})
	now := time.Date(2026, 3, 31, 22, 0, 0, 0, time.UTC)
	spend := &spendTable{m: map[string]*big.Rat{"team-a": big.NewRat(49, 10)}}
	h, err := Middleware(inner, ks, Options{Now: func() time.Time { return now }, Spend: spend})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	post := func() *http.Response {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/chat/completions", strings.NewReader(`{"model":"qwen2:0.5b","messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Authorization", "Bearer sk-a")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := post()
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("below budget: %d", resp.StatusCode)
	}
	seenMu.Lock()
	if seen.Tenant != "team-a" || seen.Labels["team"] != "a" {
		t.Errorf("context carried %+v", seen)
	}
	seenMu.Unlock()
	spend.mu.Lock()
	spend.m["team-a"] = big.NewRat(5, 1)
	spend.mu.Unlock()
	resp = post()
	defer resp.Body.Close()
	var body struct {
		Error struct{ Type, Code, Message string }
	}
	_ = json.NewDecoder(resp.Body).Decode(&body)
	if resp.StatusCode != 429 || body.Error.Code != "budget_exceeded" || resp.Header.Get("Retry-After") != "7200" {
		t.Errorf("over budget: %d %+v Retry-After %q; want 429 budget_exceeded 7200", resp.StatusCode, body.Error, resp.Header.Get("Retry-After"))
	}
	if strings.Contains(body.Error.Message, "sk-a") {
		t.Error("the key in the message")
	}
}
