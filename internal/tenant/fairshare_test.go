package tenant

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tidegpu/tidegpu/internal/fairq"
	"github.com/tidegpu/tidegpu/internal/gateway"
)

func TestParseFairShare(t *testing.T) {
	key := func(name, tenant, extra string) string {
		return "- name: " + name + "\n  sha256: " + Hash(name) + "\n  tenant: " + tenant + "\n" + extra
	}
	for _, tc := range []struct {
		name, in, wantErr string
		weight            int
		prio              fairq.Priority
	}{
		{"defaults", key("a", "t", ""), "", 1, fairq.Normal},
		{"set", key("a", "t", "  weight: 5\n  priority: high\n"), "", 5, fairq.High},
		{"low", key("a", "t", "  priority: low\n"), "", 1, fairq.Low},
		{"max weight", key("a", "t", "  weight: 1000\n"), "", 1000, fairq.Normal},
		{"weight too large", key("a", "t", "  weight: 1001\n"), "keys[0] (a).weight: 1001: want 1 to 1000", 0, 0},
		{"negative weight", key("a", "t", "  weight: -2\n"), "keys[0] (a).weight: -2", 0, 0},
		{"weight not a number", key("a", "t", "  weight: heavy\n"), "not a keys file", 0, 0},
		{"unknown priority", key("a", "t", "  priority: urgent\n"), `keys[0] (a).priority: "urgent": want one of low, normal, high`, 0, 0},
		{"a tenant's keys differ in weight", key("a", "t", "  weight: 2\n") + key("b", "t", ""), "keys[1] (b).weight: 1, but key a of tenant t has 2", 0, 0},
		{"a tenant's keys differ in priority", key("a", "t", "  priority: low\n") + key("b", "t", "  priority: high\n"), "", 1, fairq.Low},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ks, err := Parse([]byte("keys:\n" + tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Parse error %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			k := ks.Lookup("a")
			if k.Weight != tc.weight || k.Priority != tc.prio {
				t.Errorf("weight %d priority %v, want %d %v", k.Weight, k.Priority, tc.weight, tc.prio)
			}
		})
	}
}

// The middleware hands the key's tenant, weight and priority to the
// gateway's fair queue through the request context.
func TestMiddlewareSetsTenant(t *testing.T) {
	ks, err := Parse([]byte("keys:\n- name: a\n  sha256: " + Hash("key-a") + "\n  tenant: team-a\n  weight: 3\n  priority: low\n"))
	if err != nil {
		t.Fatal(err)
	}
	var got gateway.Tenant
	var seen bool
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, seen = tenantFromContext(r.Context())
	})
	h, err := Middleware(next, ks, Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(`{"model":"m"}`))
	r.Header.Set("Authorization", "Bearer key-a")
	h.ServeHTTP(httptest.NewRecorder(), r)
	if !seen || got != (gateway.Tenant{Name: "team-a", Weight: 3, Priority: fairq.Low}) {
		t.Errorf("tenant %+v (%v)", got, seen)
	}
}

// tenantFromContext reads what gateway.WithTenant stored, through a
// gateway that records it: the key type is the gateway's own.
func tenantFromContext(ctx context.Context) (gateway.Tenant, bool) {
	return gateway.TenantOf(ctx)
}
