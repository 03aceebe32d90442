// Package config reads the TidePool documents that `tidegpu up` takes from a
// file (the same YAML the cluster takes) and validates them with the rules the
// CRD's schema and CEL enforce in the cluster (internal/validation holds
// them once), so that bad input is refused before anything starts, with a
// message naming the field and the fix.
package config

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	specvalidation "github.com/tidegpu/tidegpu/internal/validation"
)

// Kind is the only kind `tidegpu up` accepts today.
const Kind = "TidePool"

// Default returns the embedded default: one pool named "default" of two
// local simulator instances.
func Default() []tidev1.TidePool {
	p := tidev1.TidePool{}
	p.APIVersion = tidev1.GroupVersion.String()
	p.Kind = Kind
	p.Name = "default"
	p.Spec.Provider = tidev1.ProviderLocal
	p.Spec.Minimum = 2
	p.Spec.Maximum = 2
	p.Spec.InstanceChargeType = tidev1.ChargeSpot
	p.Spec.Serving.Models = []string{"qwen2:0.5b"}
	SetDefaults(&p, tidev1.ProviderLocal)
	return []tidev1.TidePool{p}
}

// SetDefaults fills what the spec leaves unset. defaultProvider is used when
// spec.provider is empty ("local" for `tidegpu up`, "tencent" in the cluster).
func SetDefaults(p *tidev1.TidePool, defaultProvider string) {
	if p.Spec.Provider == "" {
		p.Spec.Provider = defaultProvider
	}
	if p.Spec.InstanceChargeType == "" {
		p.Spec.InstanceChargeType = tidev1.ChargeSpot
	}
	if p.Spec.Serving.ReadinessPath == "" {
		p.Spec.Serving.ReadinessPath = "/healthz"
	}
	if p.Namespace == "" {
		p.Namespace = "default"
	}
}

// Parse reads one or more YAML documents, each a TidePool, refusing unknown
// fields and wrong apiVersion/kind, then defaults and validates them. The
// error lists every problem found, each naming its document and field.
func Parse(r io.Reader, source string) ([]tidev1.TidePool, error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(r))
	var pools []tidev1.TidePool
	var errs []string
	for doc := 1; ; doc++ {
		raw, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: reading document %d: %w", source, doc, err)
		}
		if len(bytes.TrimSpace(stripComments(raw))) == 0 {
			continue
		}
		p, perrs := parseOne(raw)
		where := fmt.Sprintf("%s: document %d", source, doc)
		if p.Name != "" {
			where += fmt.Sprintf(" (TidePool %q)", p.Name)
		}
		for _, e := range perrs {
			errs = append(errs, where+": "+e)
		}
		if len(perrs) == 0 {
			pools = append(pools, p)
		}
	}
	if len(errs) == 0 {
		errs = append(errs, checkUnique(pools, source)...)
	}
	if len(errs) > 0 {
		return nil, &InvalidError{Problems: errs}
	}
	if len(pools) == 0 {
		return nil, fmt.Errorf("%s: no TidePool document found: add one with apiVersion %s and kind %s", source, tidev1.GroupVersion, Kind)
	}
	return pools, nil
}

// InvalidError lists every problem found in the input.
type InvalidError struct{ Problems []string }

func (e *InvalidError) Error() string {
	return "invalid configuration:\n  " + strings.Join(e.Problems, "\n  ")
}

func parseOne(raw []byte) (tidev1.TidePool, []string) {
	var p tidev1.TidePool
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := yaml.Unmarshal(raw, &head); err != nil {
		return p, []string{fmt.Sprintf("not valid YAML: %v", err)}
	}
	if head.APIVersion != tidev1.GroupVersion.String() {
		return p, []string{fmt.Sprintf("apiVersion: Unsupported value: %q: use %q", head.APIVersion, tidev1.GroupVersion.String())}
	}
	if head.Kind != Kind {
		return p, []string{fmt.Sprintf("kind: Unsupported value: %q: use %q", head.Kind, Kind)}
	}
	if err := yaml.UnmarshalStrict(raw, &p); err != nil {
		return p, []string{strictMessage(err)}
	}
	SetDefaults(&p, tidev1.ProviderLocal)
	var out []string
	for _, e := range Validate(&p) {
		out = append(out, e.Error())
	}
	return p, out
}

// strictMessage turns the strict decoder's error into one that names the
// field and says what to do.
func strictMessage(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, "unknown field "); i >= 0 {
		f := strings.TrimSpace(msg[i+len("unknown field "):])
		return fmt.Sprintf("%s: unknown field: remove it or check its spelling against `tidegpu explain`/the TidePool reference in docs/", strings.Trim(f, `"`))
	}
	return "decoding: " + msg
}

// Validate checks one TidePool: its name here, its spec with
// internal/validation's rules, the same rules the CRD's schema and CEL
// mirror in the cluster.
func Validate(p *tidev1.TidePool) field.ErrorList {
	var errs field.ErrorList
	meta := field.NewPath("metadata")
	if p.Name == "" {
		errs = append(errs, field.Required(meta.Child("name"), "every TidePool needs a name"))
	} else {
		for _, m := range validation.IsDNS1123Subdomain(p.Name) {
			errs = append(errs, field.Invalid(meta.Child("name"), p.Name, m))
		}
	}
	return append(errs, specvalidation.Spec(&p.Spec, field.NewPath("spec"))...)
}

func checkUnique(pools []tidev1.TidePool, source string) []string {
	seen := map[string]bool{}
	var errs []string
	for _, p := range pools {
		if seen[p.Name] {
			errs = append(errs, fmt.Sprintf("%s: metadata.name: Duplicate value: %q: each TidePool needs its own name", source, p.Name))
		}
		seen[p.Name] = true
	}
	return errs
}

func stripComments(b []byte) []byte {
	var out [][]byte
	for _, line := range bytes.Split(b, []byte("\n")) {
		t := bytes.TrimSpace(line)
		if len(t) == 0 || t[0] == '#' || bytes.Equal(t, []byte("---")) {
			continue
		}
		out = append(out, line)
	}
	return bytes.Join(out, []byte("\n"))
}
