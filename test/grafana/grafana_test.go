// Package grafana checks the Grafana dashboard deploy/grafana/tidegpu.json
// against the code: every metric name its PromQL queries (panel targets and
// template variables) name must be one the code exports, as collected from
// the real collectors of the engine, the gateway, the cost ledger and the
// metered providers (their Describe); and every query must parse, by
// Prometheus's own promtool (`promtool check rules`, Debian's prometheus).
package grafana

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidegpu/tidegpu/internal/cost"
	"github.com/tidegpu/tidegpu/internal/engine"
	"github.com/tidegpu/tidegpu/internal/gateway"
	"github.com/tidegpu/tidegpu/internal/provider/metered"
	"github.com/tidegpu/tidegpu/test/testbin"
)

// recorder is a prometheus.Registerer that keeps what is registered, so
// that the test can ask each collector for its descriptions.
type recorder struct{ cs []prometheus.Collector }

func (r *recorder) Register(c prometheus.Collector) error   { r.cs = append(r.cs, c); return nil }
func (r *recorder) MustRegister(cs ...prometheus.Collector) { r.cs = append(r.cs, cs...) }
func (r *recorder) Unregister(prometheus.Collector) bool    { return true }

var (
	fqName    = regexp.MustCompile(`fqName: "([^"]+)"`)
	varLabels = regexp.MustCompile(`variableLabels: \{([^}]*)\}`)
)

// exported returns every metric name the code's collectors describe, with
// its label names.
func exported(t *testing.T) map[string][]string {
	t.Helper()
	rec := &recorder{}
	engine.NewMetrics(rec)
	metered.NewMetrics(rec)
	rec.MustRegister(cost.NewCollector(cost.NewLedger(cost.Options{}), cost.CollectorOptions{}))
	gw, err := gateway.New(gateway.Options{Registry: rec})
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	names := map[string][]string{}
	for _, c := range rec.cs {
		ch := make(chan *prometheus.Desc, 64)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			m := fqName.FindStringSubmatch(d.String())
			if m == nil {
				t.Fatalf("cannot read the name of %s", d)
			}
			var labels []string
			if l := varLabels.FindStringSubmatch(d.String()); l != nil && l[1] != "" {
				labels = strings.Split(l[1], ",")
			}
			names[m[1]] = labels
		}
	}
	if len(names) < 20 {
		t.Fatalf("only %d metric names collected: %v", len(names), names)
	}
	return names
}

// known reports whether name is exported, as is or as a histogram's
// _bucket, _sum or _count series, and returns its label names.
func known(exp map[string][]string, name string) ([]string, bool) {
	if l, ok := exp[name]; ok {
		return l, true
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suf); ok {
			if l, ok := exp[base]; ok {
				if suf == "_bucket" {
					l = append(slices.Clone(l), "le")
				}
				return l, true
			}
		}
	}
	return nil, false
}

var (
	selector = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\}`)
	matcher  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)`)
)

// matcherLabels returns, for each metric selector with label matchers in
// expr, the label names it matches on.
func matcherLabels(expr string) map[string][]string {
	out := map[string][]string{}
	for _, m := range selector.FindAllStringSubmatch(expr, -1) {
		// Blank out quoted values so "a=b" inside one is not a matcher.
		body := regexp.MustCompile(`"(?:[^"\\]|\\.)*"`).ReplaceAllString(m[2], `""`)
		for _, l := range matcher.FindAllStringSubmatch(body, -1) {
			out[m[1]] = append(out[m[1]], l[1])
		}
	}
	return out
}

type dashboard struct {
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	Title   string  `json:"title"`
	Panels  []panel `json:"panels"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

// query is one PromQL expression of the dashboard and where it is.
type query struct{ where, expr string }

var labelValues = regexp.MustCompile(`^label_values\(\s*(.+)\s*,\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)$`)

func queries(t *testing.T) []query {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testbin.RepoRoot(), "deploy", "grafana", "tidegpu.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("tidegpu.json: %v", err)
	}
	var out []query
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				out = append(out, query{"panel " + p.Title, tg.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(string)
		if m, ok := v.Query.(map[string]any); ok {
			q, _ = m["query"].(string)
		}
		// Grafana's label_values(SELECTOR, label): the selector is PromQL.
		if m := labelValues.FindStringSubmatch(strings.TrimSpace(q)); m != nil {
			q = m[1]
		}
		out = append(out, query{"variable " + v.Name, q})
	}
	if len(out) < 15 {
		t.Fatalf("only %d queries in the dashboard", len(out))
	}
	return out
}

// Every metric a dashboard query names is one the code exports, and every
// label it matches on is one of that metric's. A renamed or misspelt metric
// or label fails here.
func TestDashboardNamesOnlyExportedMetrics(t *testing.T) {
	exp := exported(t)
	used := map[string]bool{}
	for _, q := range queries(t) {
		names := metricNames(q.expr)
		if len(names) == 0 {
			t.Errorf("%s: no metric in %q", q.where, q.expr)
		}
		for _, n := range names {
			used[n] = true
			if _, ok := known(exp, n); !ok {
				t.Errorf("%s: %s is not a metric the code exports (query %q)", q.where, n, q.expr)
			}
		}
		// A matcher on a label the metric lacks selects nothing, silently.
		for n, labels := range matcherLabels(q.expr) {
			have, ok := known(exp, n)
			if !ok {
				continue
			}
			for _, l := range labels {
				if l != "__name__" && !slices.Contains(have, l) {
					t.Errorf("%s: %s has no label %q (it has %v; query %q)", q.where, n, l, have, q.expr)
				}
			}
		}
	}
	var list []string
	for n := range used {
		list = append(list, n)
	}
	sort.Strings(list)
	t.Logf("%d metrics used, all exported: %s", len(list), strings.Join(list, ", "))
}

// grafanaVars replaces Grafana's variables with values PromQL parses.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h", "${pool}", ".*", "$pool", ".*")

// Every query is valid PromQL by Prometheus's own parser: promtool checks
// them as recording rules.
func TestDashboardQueriesParse(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (Debian: apt-get install prometheus, as .ci/run does)")
	}
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for i, q := range queries(t) {
		e, _ := json.Marshal(grafanaVars.Replace(q.expr)) // a JSON string is a YAML string
		fmt.Fprintf(&rules, "      - record: dashboard:q%d\n        expr: %s\n", i, e)
	}
	f := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(f, []byte(rules.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", f).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s\n%s", err, out, rules.String())
	}
}

// metricNames returns the metric names of a PromQL expression: the
// identifiers that are neither functions or aggregations (followed by "(",
// or an aggregation by its by or without clause),
// keywords, label names (inside {...} or the label lists of by, without, on,
// ignoring, group_left and group_right), strings, numbers nor durations.
func metricNames(expr string) []string {
	var names []string
	keywords := map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true,
		"group_right": true, "offset": true, "bool": true, "and": true, "or": true, "unless": true, "inf": true, "nan": true, "atan2": true}
	aggregations := map[string]bool{"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
		"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true, "limitk": true, "limit_ratio": true}
	labelList := map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}
	isIdent := func(c byte, first bool) bool {
		return c == '_' || c == ':' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (!first && c >= '0' && c <= '9')
	}
	skipTo := func(i int, close byte) int { // index after the matching close (no nesting in PromQL's {} and [])
		for i < len(expr) && expr[i] != close {
			if expr[i] == '"' || expr[i] == '\'' || expr[i] == '`' {
				q := expr[i]
				for i++; i < len(expr) && expr[i] != q; i++ {
					if expr[i] == '\\' {
						i++
					}
				}
			}
			i++
		}
		return i + 1
	}
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for j < len(expr) && expr[j] != c {
				if expr[j] == '\\' {
					j++
				}
				j++
			}
			i = j + 1
		case c == '{':
			i = skipTo(i+1, '}')
		case c == '[':
			i = skipTo(i+1, ']')
		case c >= '0' && c <= '9' || c == '.':
			for i < len(expr) && (isIdent(expr[i], false) || expr[i] == '.') {
				i++ // numbers, 1e3, durations such as 5m
			}
		case isIdent(c, true):
			j := i
			for j < len(expr) && isIdent(expr[j], false) {
				j++
			}
			word := expr[i:j]
			k := j
			for k < len(expr) && expr[k] == ' ' {
				k++
			}
			switch {
			case labelList[strings.ToLower(word)]:
				if k < len(expr) && expr[k] == '(' {
					k = skipTo(k+1, ')')
				}
				j = k
			case keywords[strings.ToLower(word)]:
			case k < len(expr) && expr[k] == '(':
				// a function or an aggregation
			case aggregations[word] && (strings.HasPrefix(expr[k:], "by") || strings.HasPrefix(expr[k:], "without")):
				// an aggregation with its clause first: sum by (x) (...)
			default:
				if !slices.Contains(names, word) {
					names = append(names, word)
				}
			}
			i = j
		default:
			i++
		}
	}
	return names
}

func TestMetricNames(t *testing.T) {
	for _, c := range []struct {
		expr string
		want []string
	}{
		{`up`, []string{"up"}},
		{`sum by (pool) (rate(foo_total{pool=~"a|b", code!="5.."}[5m]))`, []string{"foo_total"}},
		{`histogram_quantile(0.95, sum by (le) (rate(x_bucket[$__rate_interval])))`, []string{"x_bucket"}},
		{`a / on(pool) group_left(zone) b * 3600`, []string{"a", "b"}},
		{`sum without (instance) (c) > bool 1e3 and d offset 5m`, []string{"c", "d"}},
		{`count(node_total_hourly_cost{capacity_type="spot"}) or vector(0)`, []string{"node_total_hourly_cost"}},
		{`max by (pool)(e{label="has {braces} and \"quotes\""})`, []string{"e"}},
		{`f:recorded:rate5m`, []string{"f:recorded:rate5m"}},
		{`sum(rate(g[1h])) * 3600 + 0.5`, []string{"g"}},
	} {
		if got := metricNames(c.expr); !slices.Equal(got, c.want) {
			t.Errorf("metricNames(%q) = %v, want %v", c.expr, got, c.want)
		}
	}
}
