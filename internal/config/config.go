// Package config reads the TidePool documents that `tidegpu up` takes from a
// file (the same YAML the cluster takes) and validates them with the rules the
// CRD's schema and CEL enforce in the cluster, so that bad input is refused
// before anything starts, with a message naming the field and the fix.
package config

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/clock"
	"sigs.k8s.io/yaml"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/autoscale"
	"github.com/tidegpu/tidegpu/internal/cost"
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

// availabilityPattern is the CRD's pattern of spec.placement.availabilityTarget.
var availabilityPattern = regexp.MustCompile(`^(100(\.0+)?|[1-9]?[0-9](\.[0-9]+)?)$`)

// Validate applies the rules the CRD enforces in the cluster.
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
	s := &p.Spec
	spec := field.NewPath("spec")
	switch s.Provider {
	case tidev1.ProviderLocal, tidev1.ProviderSim, tidev1.ProviderAWS, tidev1.ProviderTencent:
	default:
		errs = append(errs, field.NotSupported(spec.Child("provider"), s.Provider, []string{tidev1.ProviderTencent, tidev1.ProviderAWS, tidev1.ProviderLocal, tidev1.ProviderSim}))
	}
	if s.Minimum < 0 {
		errs = append(errs, field.Invalid(spec.Child("minimum"), s.Minimum, "must be >= 0"))
	}
	if s.Maximum < 0 {
		errs = append(errs, field.Invalid(spec.Child("maximum"), s.Maximum, "must be >= 0"))
	}
	if s.Maximum > 1000 {
		errs = append(errs, field.Invalid(spec.Child("maximum"), s.Maximum, "must be <= 1000"))
	}
	if s.Minimum > s.Maximum {
		errs = append(errs, field.Invalid(spec.Child("minimum"), s.Minimum, fmt.Sprintf("must be <= spec.maximum (%d): lower minimum or raise maximum", s.Maximum)))
	}
	if s.Replicas != nil && (*s.Replicas < s.Minimum || *s.Replicas > s.Maximum) {
		errs = append(errs, field.Invalid(spec.Child("replicas"), *s.Replicas, fmt.Sprintf("must lie between spec.minimum (%d) and spec.maximum (%d)", s.Minimum, s.Maximum)))
	}
	switch s.InstanceChargeType {
	case tidev1.ChargeSpot, tidev1.ChargeOnDemand:
	default:
		errs = append(errs, field.NotSupported(spec.Child("instanceChargeType"), s.InstanceChargeType, []string{tidev1.ChargeSpot, tidev1.ChargeOnDemand}))
	}
	if s.SecretID != nil {
		errs = append(errs, field.Forbidden(spec.Child("secretId"), "inline credentials are not accepted: store them in a Secret (keys secretId, secretKey) and set spec.credentialsSecretRef.name"))
	}
	if s.SecretKey != nil {
		errs = append(errs, field.Forbidden(spec.Child("secretKey"), "inline credentials are not accepted: store them in a Secret (keys secretId, secretKey) and set spec.credentialsSecretRef.name"))
	}
	if s.KongGatewayIP != "" && net.ParseIP(s.KongGatewayIP) == nil {
		if _, _, err := net.SplitHostPort(s.KongGatewayIP); err != nil && len(validation.IsDNS1123Subdomain(s.KongGatewayIP)) > 0 {
			errs = append(errs, field.Invalid(spec.Child("kongGatewayIP"), s.KongGatewayIP, "must be an IP address or host name"))
		}
	}
	if s.Serving.Port < 0 || s.Serving.Port > 65535 {
		errs = append(errs, field.Invalid(spec.Child("serving", "port"), s.Serving.Port, "must be between 1 and 65535"))
	}
	if rp := s.Serving.ReadinessPath; rp != "" && !strings.HasPrefix(rp, "/") {
		errs = append(errs, field.Invalid(spec.Child("serving", "readinessPath"), rp, "must start with /"))
	}
	if s.DrainSeconds != nil && (*s.DrainSeconds < 0 || *s.DrainSeconds > 3600) {
		errs = append(errs, field.Invalid(spec.Child("drainSeconds"), *s.DrainSeconds, "must be between 0 and 3600"))
	}
	if a := s.Autoscaling; a != nil {
		cfg := *a.DeepCopy()
		if cfg.MinReplicas == 0 || cfg.MinReplicas < s.Minimum {
			cfg.MinReplicas = s.Minimum
		}
		if cfg.MaxReplicas == 0 || cfg.MaxReplicas > s.Maximum {
			cfg.MaxReplicas = s.Maximum
		}
		if _, err := autoscale.New(cfg, clock.RealClock{}); err != nil {
			errs = append(errs, field.Invalid(spec.Child("autoscaling"), "", err.Error()))
		}
	}
	if pr := s.Pricing; pr != nil {
		for name, v := range map[string]string{"onDemandPerHour": pr.OnDemandPerHour, "spotPerHour": pr.SpotPerHour, "standbyPerHour": pr.StandbyPerHour} {
			if v == "" {
				continue
			}
			if _, err := cost.ParseAmount(v); err != nil {
				errs = append(errs, field.Invalid(spec.Child("pricing", name), v, "must be a decimal price such as 3.06"))
			}
		}
	}
	if b := s.Budget; b != nil {
		if _, err := cost.ParseAmount(b.Monthly); err != nil {
			errs = append(errs, field.Invalid(spec.Child("budget", "monthly"), b.Monthly, "must be a decimal amount such as 2500"))
		}
		switch b.Action {
		case "", tidev1.BudgetAlert, tidev1.BudgetCapAtMinimum:
		default:
			errs = append(errs, field.NotSupported(spec.Child("budget", "action"), b.Action, []string{tidev1.BudgetAlert, tidev1.BudgetCapAtMinimum}))
		}
	}
	if s.Provider == tidev1.ProviderSim && s.Sim == nil {
		errs = append(errs, field.Required(spec.Child("sim"), "required for provider sim: set spec.sim.traceDir to a folder of per-zone spot-capacity traces"))
	}
	if pl := s.Placement; pl != nil {
		pp := spec.Child("placement")
		switch pl.Strategy {
		case "", tidev1.StrategyAdaptive, tidev1.StrategyLowestPrice, tidev1.StrategyZoneResilient, tidev1.StrategyOnDemand:
		default:
			errs = append(errs, field.NotSupported(pp.Child("strategy"), pl.Strategy,
				[]string{tidev1.StrategyAdaptive, tidev1.StrategyLowestPrice, tidev1.StrategyZoneResilient, tidev1.StrategyOnDemand}))
		}
		if t := pl.AvailabilityTarget; t != "" {
			if v, err := strconv.ParseFloat(t, 64); err != nil || !availabilityPattern.MatchString(t) || v <= 0 || v > 100 {
				errs = append(errs, field.Invalid(pp.Child("availabilityTarget"), t, "must be a percentage above 0 and at most 100, such as \"99.9\""))
			}
		}
		if pl.OnDemandBase < 0 {
			errs = append(errs, field.Invalid(pp.Child("onDemandBase"), pl.OnDemandBase, "must be >= 0"))
		}
		if pl.Standby != nil && (*pl.Standby < 0 || *pl.Standby > 100) {
			errs = append(errs, field.Invalid(pp.Child("standby"), *pl.Standby, "must be between 0 and 100"))
		}
		if len(pl.InstanceTypes) > 10 {
			errs = append(errs, field.TooMany(pp.Child("instanceTypes"), len(pl.InstanceTypes), 10))
		}
		seen := map[string]bool{}
		for i, t := range pl.InstanceTypes {
			switch {
			case strings.TrimSpace(t) == "":
				errs = append(errs, field.Invalid(pp.Child("instanceTypes").Index(i), t, "must name a machine type such as g5.xlarge"))
			case seen[t]:
				errs = append(errs, field.Duplicate(pp.Child("instanceTypes").Index(i), t))
			}
			seen[t] = true
		}
	}
	if l := s.Local; l != nil {
		lp := spec.Child("local")
		if l.StartTimeoutSeconds != nil && *l.StartTimeoutSeconds < 1 {
			errs = append(errs, field.Invalid(lp.Child("startTimeoutSeconds"), *l.StartTimeoutSeconds, "must be >= 1"))
		}
		for i, e := range l.Env {
			if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
				errs = append(errs, field.Invalid(lp.Child("env").Index(i), e, "must be NAME=VALUE"))
			}
		}
		if len(l.Command) > 0 && strings.TrimSpace(l.Command[0]) == "" {
			errs = append(errs, field.Invalid(lp.Child("command").Index(0), l.Command[0], "the program must not be empty"))
		}
	}
	return errs
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
