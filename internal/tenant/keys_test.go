package tenant

import (
	"strings"
	"testing"
)

const digestA = "a665a45920422f9d417e4867efdc4fb8a04a1f3fff1fa07e998e86f7f7a27ae3" // sha256("123")

func TestParse(t *testing.T) {
	good := "keys:\n- name: a\n  sha256: " + digestA + "\n  tenant: team-a\n"
	for _, tc := range []struct {
		name, in, wantErr string
	}{
		{"minimal", good, ""},
		{"full", "keys:\n- name: a\n  sha256: " + digestA + "\n  tenant: team-a\n  labels: {team: a, project: chat, env: prod}\n  models: [llama3]\n  pools: [chat]\n  limits: {requestsPerMinute: 10, tokensPerMinute: 1000, concurrent: 2, monthlyBudget: \"99.50\"}\n", ""},
		{"empty", "", "keys: no key"},
		{"unknown field", good + "  secret: x\n", `unknown field "secret"`},
		{"plain key", "keys:\n- name: a\n  sha256: hunter2\n  tenant: t\n", "keys[0] (a).sha256: want the 64"},
		{"upper hex", "keys:\n- name: a\n  sha256: " + strings.ToUpper(digestA) + "\n  tenant: t\n", ".sha256"},
		{"no name", "keys:\n- sha256: " + digestA + "\n  tenant: t\n", "keys[0].name"},
		{"no tenant", "keys:\n- name: a\n  sha256: " + digestA + "\n", "keys[0] (a).tenant"},
		{"dup name", good + "- name: a\n  sha256: " + strings.Repeat("0", 64) + "\n  tenant: t\n", "keys[1] (a).name: used twice"},
		{"dup key", good + "- name: b\n  sha256: " + digestA + "\n  tenant: t\n", "keys[1] (b).sha256: the same key as a"},
		{"bad label", good + "  labels: {owner: x}\n", "labels.owner: unknown label"},
		{"empty label", good + "  labels: {team: \"\"}\n", "labels.team"},
		{"bad pool", good + "  pools: [Chat]\n", "pools[0]"},
		{"empty model", good + "  models: [\"\"]\n", "models[0]"},
		{"negative rpm", good + "  limits: {requestsPerMinute: -1}\n", "limits.requestsPerMinute: -1"},
		{"bad budget", good + "  limits: {monthlyBudget: \"-5\"}\n", "limits.monthlyBudget"},
		{"budget as a number", good + "  limits: {monthlyBudget: 5}\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ks, err := Parse([]byte(tc.in))
			if tc.wantErr == "" {
				if err != nil || ks.Len() != 1 {
					t.Fatalf("Parse: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Parse error %v, want it to contain %q", err, tc.wantErr)
			}
		})
	}
}

func TestLookup(t *testing.T) {
	ks, err := Parse([]byte("keys:\n- name: a\n  sha256: " + Hash("key-a") + "\n  tenant: ta\n- name: b\n  sha256: " + Hash("key-b") + "\n  tenant: tb\n  limits: {monthlyBudget: \"12.5\"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if k := ks.Lookup("key-b"); k == nil || k.Name != "b" || k.Budget == nil || k.Budget.FloatString(2) != "12.50" {
		t.Fatalf("Lookup(key-b) = %+v", k)
	}
	if k := ks.Lookup("key-a"); k == nil || k.Tenant != "ta" {
		t.Fatalf("Lookup(key-a) = %+v", k)
	}
	for _, bad := range []string{"", "key-c", Hash("key-a"), "key-a "} {
		if k := ks.Lookup(bad); k != nil {
			t.Fatalf("Lookup(%q) = %s, want nil", bad, k.Name)
		}
	}
	if got := strings.Join(ks.Tenants(), ","); got != "ta,tb" {
		t.Fatalf("Tenants = %s", got)
	}
}

// A parse error never quotes the digest it read.
func FuzzParse(f *testing.F) {
	f.Add([]byte("keys:\n- name: a\n  sha256: " + digestA + "\n  tenant: t\n  limits: {requestsPerMinute: 3}\n"))
	f.Add([]byte("keys: [{name: a, sha256: x, tenant: t, labels: {team: q}}]"))
	f.Add([]byte("{"))
	f.Add([]byte("keys:\n- {name: a, sha256: " + digestA + ", tenant: t, limits: {concurrent: 2}}\n- {name: b, sha256: " + Hash("b") + ", tenant: t}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ks, err := Parse(b)
		if err != nil {
			if strings.Contains(err.Error(), digestA) {
				t.Fatalf("error quotes a digest: %v", err)
			}
			return
		}
		if ks.Len() == 0 {
			t.Fatal("no error and no keys")
		}
		tenants := map[string]Limits{}
		for _, k := range ks.keys {
			if k.Name == "" || k.Tenant == "" || k.Limits.RequestsPerMinute < 0 {
				t.Fatalf("invalid key accepted: %+v", k)
			}
			// The limits are the tenant's.
			if l, ok := tenants[k.Tenant]; ok && !sameLimits(l, nil, k.Limits, nil) {
				t.Fatalf("tenant %s: keys with limits %v and %v", k.Tenant, l, k.Limits)
			}
			tenants[k.Tenant] = k.Limits
		}
	})
}

// The limits belong to the tenant: the entries of one tenant that give
// limits must give the same ones, and the others share them.
func TestParseTenantLimits(t *testing.T) {
	entry := func(name, tenant, limits string) string {
		s := "- name: " + name + "\n  sha256: " + Hash(name) + "\n  tenant: " + tenant + "\n"
		if limits != "" {
			s += "  limits: " + limits + "\n"
		}
		return s
	}
	for _, tc := range []struct {
		name    string
		entries []string
		wantErr string
		want    map[string]Limits // key name → its (tenant's) limits
	}{
		{"the same limits twice", []string{entry("a", "t", "{requestsPerMinute: 10}"), entry("b", "t", "{requestsPerMinute: 10}")}, "",
			map[string]Limits{"a": {RequestsPerMinute: 10}, "b": {RequestsPerMinute: 10}}},
		{"given once, shared", []string{entry("a", "t", ""), entry("b", "t", "{tokensPerMinute: 50, concurrent: 2}"), entry("c", "t", "")}, "",
			map[string]Limits{"a": {TokensPerMinute: 50, Concurrent: 2}, "c": {TokensPerMinute: 50, Concurrent: 2}}},
		{"other tenants keep theirs", []string{entry("a", "t", "{requestsPerMinute: 10}"), entry("b", "u", "")}, "",
			map[string]Limits{"a": {RequestsPerMinute: 10}, "b": {}}},
		{"budgets compared as numbers", []string{entry("a", "t", `{monthlyBudget: "50"}`), entry("b", "t", `{monthlyBudget: "50.00"}`)}, "", nil},
		{"different rates", []string{entry("a", "t", "{requestsPerMinute: 10}"), entry("b", "u", ""), entry("c", "t", "{requestsPerMinute: 20}")},
			"keys[2] (c).limits: tenant t already has the limits {requestsPerMinute: 10} from keys[0] (a); limits belong to the tenant (its keys share them): give every key of t the same limits, or leave limits out on all but one", nil},
		{"one limit more", []string{entry("a", "t", "{requestsPerMinute: 10}"), entry("b", "t", "{requestsPerMinute: 10, concurrent: 1}")},
			"keys[1] (b).limits: tenant t already has the limits {requestsPerMinute: 10} from keys[0] (a)", nil},
		{"different budgets", []string{entry("a", "t", `{monthlyBudget: "50"}`), entry("b", "t", `{monthlyBudget: "51"}`)},
			`keys[1] (b).limits: tenant t already has the limits {monthlyBudget: "50"}`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ks, err := Parse([]byte("keys:\n" + strings.Join(tc.entries, "")))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Parse error %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for name, want := range tc.want {
				if k := ks.Lookup(name); k == nil || k.Limits != want {
					t.Errorf("key %s: limits %+v, want %+v", name, k, want)
				}
			}
			if ks.keys[0].Budget != nil && ks.keys[1].Budget.Cmp(ks.keys[0].Budget) != 0 {
				t.Errorf("budgets %v and %v", ks.keys[0].Budget, ks.keys[1].Budget)
			}
		})
	}
}
