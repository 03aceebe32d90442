package config

import (
	"strings"
	"testing"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
)

const good = `
apiVersion: tidegpu.eja.dev/v1
kind: TidePool
metadata:
  name: chat
spec:
  minimum: 2
  maximum: 4
  replicas: 3
  local:
    command: ["tidegpu", "sim", "--addr", "{{.Host}}:{{.Port}}"]
    env: ["A=b"]
`

func TestParseGood(t *testing.T) {
	pools, err := Parse(strings.NewReader(good+"---\n# second\n"+strings.Replace(good, "name: chat", "name: code", 1)), "pools.yaml")
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if len(pools) != 2 {
		t.Fatalf("got %d pools, want 2", len(pools))
	}
	p := pools[0]
	if p.Name != "chat" || p.Spec.Provider != tidev1.ProviderLocal || p.Spec.InstanceChargeType != tidev1.ChargeSpot ||
		p.Spec.Serving.ReadinessPath != "/healthz" || p.Spec.DesiredReplicas() != 3 {
		t.Errorf("defaults not applied as expected: %+v", p.Spec)
	}
}

func TestParseBad(t *testing.T) {
	cases := []struct {
		name string
		yaml string
		want []string // every fragment must appear in the error
	}{
		{"minimum above maximum", strings.Replace(good, "minimum: 2", "minimum: 5", 1),
			[]string{"spec.minimum", "must be <= spec.maximum (4)", `TidePool "chat"`}},
		{"negative maximum", strings.Replace(strings.Replace(good, "maximum: 4", "maximum: -1", 1), "minimum: 2", "minimum: 0", 1),
			[]string{"spec.maximum", "must be between 0 and 1000"}},
		{"negative minimum", strings.Replace(good, "minimum: 2", "minimum: -2", 1), []string{"spec.minimum", "must be >= 0"}},
		{"unknown field", strings.Replace(good, "maximum: 4", "maximum: 4\n  maximun: 5", 1),
			[]string{"maximun", "unknown field"}},
		{"wrong apiVersion", strings.Replace(good, "tidegpu.eja.dev/v1", "tidegpu.eja.dev/v2", 1),
			[]string{"apiVersion", `"tidegpu.eja.dev/v2"`, `use "tidegpu.eja.dev/v1"`}},
		{"wrong kind", strings.Replace(good, "kind: TidePool", "kind: Pool", 1), []string{"kind", `use "TidePool"`}},
		{"inline secret", strings.Replace(good, "maximum: 4", "maximum: 4\n  secretKey: hunter2", 1),
			[]string{"spec.secretKey", "credentialsSecretRef"}},
		{"unknown charge type", strings.Replace(good, "maximum: 4", "maximum: 4\n  instanceChargeType: PREPAID", 1),
			[]string{"spec.instanceChargeType", "SPOTPAID"}},
		{"unknown provider", strings.Replace(good, "maximum: 4", "maximum: 4\n  provider: gcp", 1),
			[]string{"spec.provider", "local"}},
		{"replicas out of range", strings.Replace(good, "replicas: 3", "replicas: 9", 1), []string{"spec.replicas"}},
		{"bad env", strings.Replace(good, `"A=b"`, `"novalue"`, 1), []string{"spec.local.env[0]", "NAME=VALUE"}},
		{"sim without spec.sim", strings.Replace(good, "maximum: 4", "maximum: 4\n  provider: sim", 1),
			[]string{"spec.sim", "traceDir"}},
		{"duplicate instance type", strings.Replace(good, "maximum: 4", "maximum: 4\n  placement:\n    instanceTypes: [g5.xlarge, g5.xlarge]", 1),
			[]string{"spec.placement.instanceTypes[1]", "Duplicate", "g5.xlarge"}},
		{"empty instance type", strings.Replace(good, "maximum: 4", "maximum: 4\n  placement:\n    instanceTypes: [\"\"]", 1),
			[]string{"spec.placement.instanceTypes[0]", "machine type"}},
		{"unknown strategy", strings.Replace(good, "maximum: 4", "maximum: 4\n  placement:\n    strategy: Cheapest", 1),
			[]string{"spec.placement.strategy", "Adaptive", "LowestPrice", "ZoneResilient", "OnDemand"}},
		{"availability target above 100", strings.Replace(good, "maximum: 4", "maximum: 4\n  placement:\n    availabilityTarget: \"100.5\"", 1),
			[]string{"spec.placement.availabilityTarget", "percentage"}},
		{"availability target as a fraction word", strings.Replace(good, "maximum: 4", "maximum: 4\n  placement:\n    availabilityTarget: high", 1),
			[]string{"spec.placement.availabilityTarget", "99.9"}},
		{"removed knob", strings.Replace(good, "maximum: 4", "maximum: 4\n  placement:\n    maxPerZone: 2", 1),
			[]string{"maxPerZone"}},
		{"standby out of range", strings.Replace(good, "maximum: 4", "maximum: 4\n  placement:\n    standby: -1", 1),
			[]string{"spec.placement.standby", "between 0 and 100"}},
		{"bad standby price", strings.Replace(good, "maximum: 4", "maximum: 4\n  pricing:\n    standbyPerHour: cheap", 1),
			[]string{"spec.pricing.standbyPerHour", "decimal price"}},
		{"missing name", strings.Replace(good, "name: chat", "labels: {}", 1), []string{"metadata.name", "Required"}},
		{"duplicate names", good + "---\n" + good, []string{"Duplicate", `"chat"`}},
		{"no documents", "# nothing\n", []string{"no TidePool document"}},
		{"not yaml", "apiVersion: [", []string{"document 1"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(strings.NewReader(tc.yaml), "pools.yaml")
			if err == nil {
				t.Fatal("Parse accepted bad input")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error leaks the secret: %q", err)
			}
		})
	}
}

func TestDefaultIsValid(t *testing.T) {
	for _, p := range Default() {
		if errs := Validate(&p); len(errs) > 0 {
			t.Errorf("default pool %s invalid: %v", p.Name, errs)
		}
		if p.Spec.DesiredReplicas() != 2 {
			t.Errorf("default pool wants %d instances, want 2", p.Spec.DesiredReplicas())
		}
	}
}

// FuzzParse: any input gives pools or an error, never a panic, and every
// accepted pool passes validation.
func FuzzParse(f *testing.F) {
	f.Add(good)
	f.Add(good + "---\n" + good)
	f.Add("apiVersion: tidegpu.eja.dev/v1\nkind: TidePool\nmetadata: {name: x}\nspec: {minimum: 1, maximum: 0}\n")
	f.Add("---\n---\n")
	f.Fuzz(func(t *testing.T, in string) {
		pools, err := Parse(strings.NewReader(in), "fuzz")
		if err != nil {
			return
		}
		for _, p := range pools {
			if errs := Validate(&p); len(errs) > 0 {
				t.Fatalf("accepted invalid pool: %v", errs)
			}
		}
	})
}
