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
		for _, k := range ks.keys {
			if k.Name == "" || k.Tenant == "" || k.Limits.RequestsPerMinute < 0 {
				t.Fatalf("invalid key accepted: %+v", k)
			}
		}
	})
}
