package validation

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
)

// quantityPattern is apimachinery's own, on every resource.Quantity.
const quantityPattern = `^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$`

// TestPatternsMatchTheCRD: every pattern of the generated TidePool CRD's spec is
// one of this package's, and each of this package's is in the CRD, so a
// marker changed without its Go twin (or the reverse) fails here.
func TestPatternsMatchTheCRD(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "config", "crd", "bases", "tidegpu.eja.dev_tidepools.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd map[string]any
	if err := yaml.Unmarshal(raw, &crd); err != nil {
		t.Fatal(err)
	}
	inCRD := map[string]bool{}
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if s, ok := e.(string); ok && k == "pattern" {
					inCRD[s] = true
				}
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	// Only the spec: status holds metav1.Condition's own patterns.
	for _, v := range crd["spec"].(map[string]any)["versions"].([]any) {
		walk(v.(map[string]any)["schema"].(map[string]any)["openAPIV3Schema"].(map[string]any)["properties"].(map[string]any)["spec"])
	}
	ours := map[string]bool{quantityPattern: true}
	for _, p := range []string{EndpointPattern, GatewayAddressPattern, PathPattern, EnvPattern, AmountPattern,
		CurrencyPattern, AvailabilityTargetPattern, NamePattern, ModelPattern, SHA256Pattern, HTTPSPattern, MetricNamePattern} {
		ours[p] = true
		if !inCRD[p] {
			t.Errorf("pattern %s is not in the CRD: mirror it with a +kubebuilder:validation:Pattern marker", p)
		}
	}
	for p := range inCRD {
		if !ours[p] {
			t.Errorf("the CRD's pattern %s has no Go twin in internal/validation", p)
		}
	}
}

func TestSpecUpdateRefusesProviderAndRegionChanges(t *testing.T) {
	old := tidev1.TidePoolSpec{Provider: tidev1.ProviderAWS, Region: "us-east-1", Minimum: 1, Maximum: 2}
	s := old
	s.Provider, s.Region = tidev1.ProviderTencent, "ap-singapore"
	errs := SpecUpdate(&s, &old, field.NewPath("spec"))
	if len(errs) != 2 || !strings.Contains(errs.ToAggregate().Error(), "spec.provider") || !strings.Contains(errs.ToAggregate().Error(), "spec.region") {
		t.Errorf("SpecUpdate = %v, want spec.provider and spec.region refused", errs)
	}
	if errs := SpecUpdate(&old, &old, field.NewPath("spec")); len(errs) != 0 {
		t.Errorf("SpecUpdate of an unchanged spec = %v", errs)
	}
}
