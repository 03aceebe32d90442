// Package validation holds the domain rules of a TidePool spec, once: the
// rules `tidegpu up` (internal/config) applies before it starts anything,
// and that the CRD's OpenAPI markers and CEL rules in api/v1 mirror for the
// API server. Each rule returns field errors (the field's path, the bad
// value, and a message that says the fix); test/validation runs the same
// invalid documents through a real kube-apiserver and through `tidegpu up`'s
// loader, so a rule added on one side only fails that test.
//
// Why a package of its own, and not methods in api/v1: api/v1 sits at the
// bottom of the tree (everything imports it, it imports only apimachinery
// and controller-runtime's scheme), while the rules need the autoscaler's
// resolver (cron grammar, IANA zones, metric references: internal/autoscale,
// which imports api/v1) and the cost package's amount parser. Methods in
// api/v1 would have to import those, a cycle. This package imports api/v1,
// internal/autoscale and internal/cost and is imported by internal/config
// (and may be by the controller); nothing below it imports it.
//
// A rule here that CEL cannot express says so next to it ("Go only"); the
// API server then accepts what `tidegpu up` refuses, and the engine reports
// the problem at run time (for autoscaling, condition AutoscalingActive
// False, reason InvalidConfig).
package validation

import (
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/template"

	"k8s.io/apimachinery/pkg/util/validation/field"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/autoscale"
	"github.com/tidegpu/tidegpu/internal/cost"
)

// Patterns shared with the CRD: each equals the kubebuilder Pattern marker
// of its field in api/v1 (validation_test.go compares them with the
// generated CRD).
const (
	// EndpointPattern: spec.endpoint, spec.kong.adminURL.
	EndpointPattern = `^https?://`
	// GatewayAddressPattern: spec.kongGatewayIP, an IP address or host
	// name, optionally with :port.
	GatewayAddressPattern = `^(\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?|[0-9A-Fa-f]*:[0-9A-Fa-f:.]+|[0-9A-Za-z]([-0-9A-Za-z.]*[0-9A-Za-z])?(:[0-9]{1,5})?)$`
	// PathPattern: spec.serving.readinessPath.
	PathPattern = `^/`
	// EnvPattern: spec.local.env[*], NAME=VALUE.
	EnvPattern = `^[^=]+=`
	// AmountPattern: prices and budgets, at most nine digits before and
	// after the point (what cost.ParseAmount holds exactly).
	AmountPattern = `^[0-9]{1,9}(\.[0-9]{1,9})?$`
	// CurrencyPattern: an ISO 4217 code.
	CurrencyPattern = `^[A-Z]{3}$`
	// AvailabilityTargetPattern: spec.placement.availabilityTarget, a
	// percentage 0-100 (0 itself is refused by a CEL rule).
	AvailabilityTargetPattern = `^(100(\.0+)?|[1-9]?[0-9](\.[0-9]+)?)$`
	// NamePattern: spec.placement.instanceTypes[*] and availabilityZones[*],
	// a name without blanks.
	NamePattern = `^\S+$`
	// ModelPattern: spec.bootstrap.model, an Ollama or Hugging Face name.
	ModelPattern = `^[A-Za-z0-9][A-Za-z0-9._:/@+-]*$`
	// SHA256Pattern: spec.bootstrap.agentSHA256.
	SHA256Pattern = `^[0-9a-f]{64}$`
	// HTTPSPattern: spec.bootstrap.agentURL.
	HTTPSPattern = `^https://`
)

// Bounds shared with the CRD's markers.
const (
	MaxMaximum       = 1000
	MaxDrainSeconds  = 3600
	MaxStandby       = 100
	MaxInstanceTypes = 10
	MaxNameLength    = 64
	MaxSubnetIDs     = 64
	MaxMetrics       = 10
	MaxQueryLength   = 4096
	MaxSchedules     = 32
)

var (
	endpointRE = regexp.MustCompile(EndpointPattern)
	gatewayRE  = regexp.MustCompile(GatewayAddressPattern)
	pathRE     = regexp.MustCompile(PathPattern)
	envRE      = regexp.MustCompile(EnvPattern)
	amountRE   = regexp.MustCompile(AmountPattern)
	currencyRE = regexp.MustCompile(CurrencyPattern)
	targetRE   = regexp.MustCompile(AvailabilityTargetPattern)
	zeroRE     = regexp.MustCompile(`^0(\.0+)?$`)
	nameRE     = regexp.MustCompile(NamePattern)
)

const inlineSecret = "inline credentials are not accepted: store them in a Secret (keys secretId, secretKey) and set spec.credentialsSecretRef.name"

// Spec validates a TidePool spec at path (field.NewPath("spec")). Empty
// optional fields are unset, as the API server sees them (omitempty).
func Spec(s *tidev1.TidePoolSpec, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	add := func(e ...*field.Error) { errs = append(errs, e...) }

	switch s.Provider {
	case "", tidev1.ProviderTencent, tidev1.ProviderAWS, tidev1.ProviderLocal, tidev1.ProviderSim:
	default:
		add(field.NotSupported(path.Child("provider"), s.Provider, []string{tidev1.ProviderTencent, tidev1.ProviderAWS, tidev1.ProviderLocal, tidev1.ProviderSim}))
	}
	if s.Endpoint != "" && !endpointRE.MatchString(s.Endpoint) {
		add(field.Invalid(path.Child("endpoint"), s.Endpoint, "must be an http:// or https:// URL, such as https://cvm.ap-singapore.tencentcloudapi.com"))
	}
	if s.Minimum < 0 {
		add(field.Invalid(path.Child("minimum"), s.Minimum, "must be >= 0"))
	}
	if s.Maximum < 0 || s.Maximum > MaxMaximum {
		add(field.Invalid(path.Child("maximum"), s.Maximum, fmt.Sprintf("must be between 0 and %d", MaxMaximum)))
	}
	if s.Minimum > s.Maximum {
		add(field.Invalid(path.Child("minimum"), s.Minimum, fmt.Sprintf("must be <= spec.maximum (%d): lower minimum or raise maximum", s.Maximum)))
	}
	if s.Replicas != nil && (*s.Replicas < s.Minimum || *s.Replicas > s.Maximum) {
		add(field.Invalid(path.Child("replicas"), *s.Replicas, fmt.Sprintf("must lie between spec.minimum (%d) and spec.maximum (%d): set it in that range or remove it", s.Minimum, s.Maximum)))
	}
	switch s.InstanceChargeType {
	case "", tidev1.ChargeSpot, tidev1.ChargeOnDemand:
	default:
		add(field.NotSupported(path.Child("instanceChargeType"), s.InstanceChargeType, []string{tidev1.ChargeSpot, tidev1.ChargeOnDemand}))
	}
	// The values are never echoed: they are secrets.
	if s.SecretID != nil {
		add(field.Forbidden(path.Child("secretId"), inlineSecret))
	}
	if s.SecretKey != nil {
		add(field.Forbidden(path.Child("secretKey"), inlineSecret))
	}
	if r := s.CredentialsSecretRef; r != nil && r.Name == "" {
		add(field.Required(path.Child("credentialsSecretRef", "name"), "name the Secret holding the credentials"))
	}
	if a := s.KongGatewayIP; a != "" && !gatewayRE.MatchString(a) {
		add(field.Invalid(path.Child("kongGatewayIP"), a, "must be an IP address or host name, optionally with :port, such as 192.0.2.10 or kong.internal:8001"))
	}
	if k := s.Kong; k != nil {
		kp := path.Child("kong")
		if k.AdminURL != "" && !endpointRE.MatchString(k.AdminURL) {
			add(field.Invalid(kp.Child("adminURL"), k.AdminURL, "must be an http:// or https:// URL, such as https://kong-admin:8444"))
		}
		if r := k.TokenSecretRef; r != nil {
			if r.Name == "" {
				add(field.Required(kp.Child("tokenSecretRef", "name"), "name the Secret holding the admin token"))
			}
			if r.Key == "" {
				add(field.Required(kp.Child("tokenSecretRef", "key"), "name the Secret's key holding the admin token"))
			}
		}
		if r := k.TLSSecretRef; r != nil && r.Name == "" {
			add(field.Required(kp.Child("tlsSecretRef", "name"), "name the Secret holding ca.crt (and tls.crt, tls.key)"))
		}
	}
	add(serving(&s.Serving, path.Child("serving"))...)
	if d := s.DrainSeconds; d != nil && (*d < 0 || *d > MaxDrainSeconds) {
		add(field.Invalid(path.Child("drainSeconds"), *d, fmt.Sprintf("must be between 0 and %d", MaxDrainSeconds)))
	}
	if l := s.Local; l != nil {
		add(local(l, path.Child("local"))...)
	}
	if b := s.Bootstrap; b != nil {
		if s.Provider != "" && s.Provider != tidev1.ProviderAWS && s.Provider != tidev1.ProviderTencent {
			add(field.Invalid(path.Child("bootstrap"), s.Provider, "user data is for cloud instances: use it with provider aws or tencent, or remove it"))
		}
		add(bootstrap(b, path.Child("bootstrap"))...)
	}
	if s.Provider == tidev1.ProviderSim && s.Sim == nil {
		add(field.Required(path.Child("sim"), "required for provider sim: set spec.sim.traceDir to a folder of per-zone spot-capacity traces"))
	}
	if sm := s.Sim; sm != nil {
		add(sim(sm, path.Child("sim"))...)
	}
	if p := s.Placement; p != nil {
		add(Placement(p, path.Child("placement"))...)
	}
	if p := s.Pricing; p != nil {
		pp := path.Child("pricing")
		add(amount(pp.Child("onDemandPerHour"), p.OnDemandPerHour, "a decimal price such as 3.06")...)
		add(amount(pp.Child("spotPerHour"), p.SpotPerHour, "a decimal price such as 0.92")...)
		add(amount(pp.Child("standbyPerHour"), p.StandbyPerHour, "a decimal price such as 0.0111")...)
		add(currency(pp.Child("currency"), p.Currency)...)
	}
	if b := s.Budget; b != nil {
		bp := path.Child("budget")
		if b.Monthly == "" {
			add(field.Required(bp.Child("monthly"), "set the monthly amount, a decimal such as 2500"))
		}
		add(amount(bp.Child("monthly"), b.Monthly, "a decimal amount such as 2500")...)
		add(currency(bp.Child("currency"), b.Currency)...)
		switch b.Action {
		case "", tidev1.BudgetAlert, tidev1.BudgetCapAtMinimum:
		default:
			add(field.NotSupported(bp.Child("action"), b.Action, []string{tidev1.BudgetAlert, tidev1.BudgetCapAtMinimum}))
		}
	}
	if s.Autoscaling != nil {
		add(Autoscaling(s, path)...)
	}
	return errs
}

// SpecUpdate validates a change of a spec: the rules of Spec on the new
// one, and the fields that cannot change (CEL transition rules
// self == oldSelf in the CRD).
func SpecUpdate(s, old *tidev1.TidePoolSpec, path *field.Path) field.ErrorList {
	errs := Spec(s, path)
	if s.Provider != old.Provider {
		errs = append(errs, field.Invalid(path.Child("provider"), s.Provider, "is immutable: create a new TidePool to move to another provider"))
	}
	if s.Region != old.Region {
		errs = append(errs, field.Invalid(path.Child("region"), s.Region, "is immutable: create a new TidePool in the other region"))
	}
	return errs
}

func serving(s *tidev1.ServingSpec, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	// 0 is unset: the provider's default.
	if s.Port < 0 || s.Port > 65535 {
		errs = append(errs, field.Invalid(path.Child("port"), s.Port, "must be between 1 and 65535"))
	}
	if rp := s.ReadinessPath; rp != "" && !pathRE.MatchString(rp) {
		errs = append(errs, field.Invalid(path.Child("readinessPath"), rp, "must be a path starting with /, such as /healthz"))
	}
	if s.Metrics != nil {
		errs = append(errs, servingMetrics(s.Metrics, path.Child("metrics"))...)
	}
	return errs
}

// checkQueryTemplate checks that a PromQL query template renders with the
// fields the Prometheus source gives it.
func checkQueryTemplate(q string) error {
	t, err := template.New("q").Option("missingkey=error").Parse(q)
	if err != nil {
		return fmt.Errorf("not a valid template: %v", err)
	}
	data := struct{ Label, Selector, Window string }{"instance", `{job="x"}`, "1m"}
	if err := t.Execute(io.Discard, data); err != nil {
		return fmt.Errorf("uses a field other than {{.Label}}, {{.Selector}} and {{.Window}}: %v", err)
	}
	return nil
}

// MetricNamePattern is a Prometheus metric name
// (spec.serving.metrics.names.*).
const MetricNamePattern = `^[a-zA-Z_:][a-zA-Z0-9_:]*$`

var metricNameRE = regexp.MustCompile(MetricNamePattern)

// servingMetrics checks spec.serving.metrics (mirrored by the CRD's enum,
// pattern and CEL rules).
func servingMetrics(m *tidev1.ServingMetrics, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	families := []string{"auto", "vllm", "sglang", "tgi", "llamacpp", "none"}
	if m.Family != "" && !slices.Contains(families, string(m.Family)) {
		errs = append(errs, field.NotSupported(path.Child("family"), m.Family, families))
	}
	if q := m.PromQL; q != nil {
		qp := path.Child("promql")
		if m.Family == tidev1.MetricsFamilyNone {
			errs = append(errs, field.Invalid(qp, "", "a pool with family none reads no metrics: remove promql or set a family"))
		}
		for _, f := range []struct{ name, v string }{{"queue", q.Queue}, {"running", q.Running}, {"kvCache", q.KVCache},
			{"ttftP50", q.TTFTP50}, {"ttftP99", q.TTFTP99}, {"gpuUtil", q.GPUUtil}} {
			if f.v == "" {
				continue
			}
			if strings.TrimSpace(f.v) == "" {
				errs = append(errs, field.Invalid(qp.Child(f.name), f.v, "must not be blank: give the query or remove the field"))
				continue
			}
			// Go only: CEL cannot parse a template.
			if err := checkQueryTemplate(f.v); err != nil {
				errs = append(errs, field.Invalid(qp.Child(f.name), f.v, err.Error()))
			}
		}
	}
	n := m.Names
	if n == nil {
		return errs
	}
	np := path.Child("names")
	switch {
	case m.Family == tidev1.MetricsFamilyNone:
		errs = append(errs, field.Invalid(np, "", "a pool with family none reads no metrics: remove names or set a family"))
	case n.Queue == "" && (m.Family == "" || m.Family == tidev1.MetricsFamilyAuto):
		errs = append(errs, field.Required(np.Child("queue"), "required unless family names a server (auto has no names to start from): give the queue gauge's name"))
	}
	for _, f := range []struct{ name, v string }{{"queue", n.Queue}, {"running", n.Running}, {"kvCache", n.KVCache}, {"ttft", n.TTFT}} {
		if f.v != "" && !metricNameRE.MatchString(f.v) {
			errs = append(errs, field.Invalid(np.Child(f.name), f.v, "must be a Prometheus metric name, such as vllm:num_requests_waiting"))
		}
	}
	if u := n.KVCacheUnit; u != "" && u != "Fraction" && u != "Percent" {
		errs = append(errs, field.NotSupported(np.Child("kvCacheUnit"), u, []string{"Fraction", "Percent"}))
	}
	return errs
}

// Bounds of spec.bootstrap (the CRD's markers say the same).
const (
	MaxBootstrapModel    = 256
	MaxBootstrapArgs     = 64
	MaxBootstrapArg      = 1024
	MaxBootstrapUserData = 16384
)

var (
	modelRE  = regexp.MustCompile(ModelPattern)
	sha256RE = regexp.MustCompile(SHA256Pattern)
	httpsRE  = regexp.MustCompile(HTTPSPattern)
)

func bootstrap(b *tidev1.BootstrapSpec, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	add := func(e ...*field.Error) { errs = append(errs, e...) }
	switch b.Template {
	case tidev1.BootstrapOllama, tidev1.BootstrapVLLM:
		if b.Model == "" {
			add(field.Required(path.Child("model"), "required with templates ollama and vllm: name the model to serve, such as qwen2:0.5b or Qwen/Qwen2.5-0.5B-Instruct"))
		}
	case tidev1.BootstrapNone:
		if b.UserData == "" {
			add(field.Required(path.Child("userData"), "required with template none: give the cloud-init document to send, or choose template ollama or vllm"))
		}
	case "":
		add(field.Required(path.Child("template"), "choose ollama, vllm or none"))
	default:
		add(field.NotSupported(path.Child("template"), b.Template, []string{tidev1.BootstrapOllama, tidev1.BootstrapVLLM, tidev1.BootstrapNone}))
	}
	if b.Model != "" && (len(b.Model) > MaxBootstrapModel || !modelRE.MatchString(b.Model)) {
		add(field.Invalid(path.Child("model"), b.Model, fmt.Sprintf("must be a model name of at most %d characters: letters, digits and . _ : / @ + -", MaxBootstrapModel)))
	}
	if len(b.Args) > MaxBootstrapArgs {
		add(field.TooMany(path.Child("args"), len(b.Args), MaxBootstrapArgs))
	}
	for i, a := range b.Args {
		if len(a) > MaxBootstrapArg {
			add(field.TooLong(path.Child("args").Index(i), "", MaxBootstrapArg))
		}
	}
	if b.AgentURL != "" && !httpsRE.MatchString(b.AgentURL) {
		add(field.Invalid(path.Child("agentURL"), b.AgentURL, "must be an https:// URL of the tidegpu binary"))
	}
	if b.AgentSHA256 != "" && !sha256RE.MatchString(b.AgentSHA256) {
		add(field.Invalid(path.Child("agentSHA256"), b.AgentSHA256, "must be 64 lower-case hex digits (sha256sum of the binary)"))
	}
	// The value is not echoed: it is a whole document.
	if len(b.UserData) > MaxBootstrapUserData {
		add(field.TooLong(path.Child("userData"), "", MaxBootstrapUserData))
	}
	return errs
}

func local(l *tidev1.LocalSpec, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if t := l.StartTimeoutSeconds; t != nil && *t < 1 {
		errs = append(errs, field.Invalid(path.Child("startTimeoutSeconds"), *t, "must be >= 1"))
	}
	for i, e := range l.Env {
		if !envRE.MatchString(e) {
			errs = append(errs, field.Invalid(path.Child("env").Index(i), e, "must be NAME=VALUE"))
		}
	}
	if len(l.Command) > 0 && strings.TrimSpace(l.Command[0]) == "" {
		errs = append(errs, field.Invalid(path.Child("command").Index(0), l.Command[0], "the program must not be empty: name it first, for example [\"ollama\", \"serve\"]"))
	}
	return errs
}

func sim(s *tidev1.SimSpec, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if s.TraceDir == "" {
		errs = append(errs, field.Required(path.Child("traceDir"), "set a folder of per-zone spot-capacity traces"))
	}
	// 0 is unset: the default (300).
	if s.Compression < 0 {
		errs = append(errs, field.Invalid(path.Child("compression"), s.Compression, "must be >= 1 (trace seconds per wall second)"))
	}
	if n := s.NoticeSeconds; n != nil && *n < 0 {
		errs = append(errs, field.Invalid(path.Child("noticeSeconds"), *n, "must be >= 0 (0: no notice)"))
	}
	return errs
}

// Placement validates spec.placement.
func Placement(pl *tidev1.PlacementSpec, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch pl.Strategy {
	case "", tidev1.StrategyAdaptive, tidev1.StrategyLowestPrice, tidev1.StrategyZoneResilient, tidev1.StrategyOnDemand:
	default:
		errs = append(errs, field.NotSupported(path.Child("strategy"), pl.Strategy,
			[]string{tidev1.StrategyAdaptive, tidev1.StrategyLowestPrice, tidev1.StrategyZoneResilient, tidev1.StrategyOnDemand}))
	}
	if t := pl.AvailabilityTarget; t != "" {
		if v, err := strconv.ParseFloat(t, 64); err != nil || !targetRE.MatchString(t) || zeroRE.MatchString(t) || v <= 0 || v > 100 {
			errs = append(errs, field.Invalid(path.Child("availabilityTarget"), t, "must be a percentage above 0 and at most 100, such as \"99.9\""))
		}
	}
	if pl.OnDemandBase < 0 {
		errs = append(errs, field.Invalid(path.Child("onDemandBase"), pl.OnDemandBase, "must be >= 0"))
	}
	if sb := pl.Standby; sb != nil && (*sb < 0 || *sb > MaxStandby) {
		errs = append(errs, field.Invalid(path.Child("standby"), *sb, fmt.Sprintf("must be between 0 and %d", MaxStandby)))
	}
	if len(pl.InstanceTypes) > MaxInstanceTypes {
		errs = append(errs, field.TooMany(path.Child("instanceTypes"), len(pl.InstanceTypes), MaxInstanceTypes))
	}
	errs = append(errs, names(path.Child("instanceTypes"), pl.InstanceTypes, "must name a machine type such as g5.xlarge")...)
	errs = append(errs, names(path.Child("availabilityZones"), pl.AvailabilityZones, "must name a zone such as us-east-1a")...)
	if len(pl.SubnetIDs) > MaxSubnetIDs {
		errs = append(errs, field.TooMany(path.Child("subnetIds"), len(pl.SubnetIDs), MaxSubnetIDs))
	}
	return errs
}

// names checks a set of names: each without blanks, at most MaxNameLength
// characters, none twice.
func names(path *field.Path, xs []string, what string) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]bool{}
	for i, x := range xs {
		switch {
		case !nameRE.MatchString(x):
			errs = append(errs, field.Invalid(path.Index(i), x, what))
		case len(x) > MaxNameLength:
			errs = append(errs, field.TooLong(path.Index(i), x, MaxNameLength))
		case seen[x]:
			errs = append(errs, field.Duplicate(path.Index(i), x))
		}
		seen[x] = true
	}
	return errs
}

func amount(path *field.Path, v, what string) field.ErrorList {
	if v == "" {
		return nil
	}
	if !amountRE.MatchString(v) {
		return field.ErrorList{field.Invalid(path, v, "must be "+what+" (digits, at most nine on each side of the point)")}
	}
	if _, err := cost.ParseAmount(v); err != nil {
		return field.ErrorList{field.Invalid(path, v, "must be "+what+": "+err.Error())}
	}
	return nil
}

func currency(path *field.Path, v string) field.ErrorList {
	if v != "" && !currencyRE.MatchString(v) {
		return field.ErrorList{field.Invalid(path, v, "must be an ISO 4217 code such as USD or EUR")}
	}
	return nil
}

// Autoscaling validates spec.autoscaling as the engine runs it
// (autoscale.ForPool: the pool's watermarks filled in), with the
// autoscaler's own resolver, so that what `tidegpu up` accepts is what the
// autoscaler runs. Its errors name their field under spec.autoscaling; the
// autoscaler's messages carry the bad value ("got ...").
func Autoscaling(s *tidev1.TidePoolSpec, path *field.Path) field.ErrorList {
	ap := path.Child("autoscaling")
	var errs field.ErrorList
	// Bounds the CRD needs for its CEL rules' cost (MaxItems, MaxLength).
	a := s.Autoscaling
	if len(a.Metrics) > MaxMetrics {
		errs = append(errs, field.TooMany(ap.Child("metrics"), len(a.Metrics), MaxMetrics))
	}
	for i, m := range a.Metrics {
		if len(m.Query) > MaxQueryLength {
			errs = append(errs, field.TooLong(ap.Child("metrics").Index(i).Child("query"), "", MaxQueryLength))
		}
	}
	if len(a.Schedules) > MaxSchedules {
		errs = append(errs, field.TooMany(ap.Child("schedules"), len(a.Schedules), MaxSchedules))
	}
	err := autoscale.Validate(autoscale.ForPool(s))
	if err == nil {
		return errs
	}
	for _, e := range flatten(err) {
		var fe *autoscale.FieldError
		if errors.As(e, &fe) {
			errs = append(errs, field.Invalid(ap.Child(fe.Field), field.OmitValueType{}, fe.Reason))
			continue
		}
		errs = append(errs, field.Invalid(ap, field.OmitValueType{}, e.Error()))
	}
	return errs
}

func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}
