package metrics

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"text/template"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"k8s.io/utils/clock"
)

// Queries are the PromQL instant queries of a Prometheus source, one per
// value. Each is a text/template over {{.Label}} (the label that names the
// backend), {{.Selector}} (a series selector such as {job="vllm"}, or
// empty) and {{.Window}} (a range such as 1m). Each query must return an
// instant vector with one sample per backend, carrying the Label.
type Queries struct {
	QueueDepth   string
	Running      string
	KVCacheUsage string
	GPUUtil      string
	TTFTP50      string
	TTFTP99      string
	// ObservedAt returns, per backend, the Unix time in seconds of the
	// scrape the values come from; without it the evaluation time is used,
	// which hides a Prometheus that has stopped scraping.
	ObservedAt string
}

// DefaultQueries read every known family's metrics (FamilyQueries of the
// zero Family): for each backend, the first family with series wins.
var DefaultQueries = FamilyQueries(Family{})

// FamilyQueries returns the queries that read family f's metric names, or,
// for the zero Family, every family's joined with PromQL's or (the first
// family with a series for a backend wins, in the order of Families).
// Queue and running requests are summed per backend, KV-cache usage maxed
// (as ParseFamily does), with f's units scaled to a fraction and seconds.
// A query f has no metric for is DisabledQuery.
func FamilyQueries(f Family) Queries {
	fams := Families
	if f.Queue != "" {
		fams = []Family{f}
	}
	var q Queries
	var queue, running, kv, ttft50, ttft99, observed []string
	for _, g := range fams {
		queue = append(queue, fmt.Sprintf("sum by ({{.Label}}) (%s)", seriesExpr(g.Queue, g.SingleRank)))
		observed = append(observed, fmt.Sprintf("max by ({{.Label}}) (timestamp(%s{{.Selector}}))", g.Queue))
		if g.Running != "" {
			running = append(running, fmt.Sprintf("sum by ({{.Label}}) (%s)", seriesExpr(g.Running, g.SingleRank)))
		}
		for _, name := range g.KVCache {
			kv = append(kv, fmt.Sprintf("max by ({{.Label}}) (%s)%s", seriesExpr(name, g.SingleRank), scaled(g.KVCacheScale)))
		}
		if g.TTFT != "" {
			buckets := fmt.Sprintf("sum by ({{.Label}}, le) (%s)", rateExpr(g.TTFT+"_bucket", g.SingleRank))
			ttft50 = append(ttft50, fmt.Sprintf("histogram_quantile(0.5, %s)%s", buckets, scaled(g.TTFTScale)))
			ttft99 = append(ttft99, fmt.Sprintf("histogram_quantile(0.99, %s)%s", buckets, scaled(g.TTFTScale)))
		}
	}
	q.QueueDepth = orJoin(queue)
	q.Running = orJoin(running)
	q.KVCacheUsage = orJoin(kv)
	q.GPUUtil = `max by ({{.Label}}) (tidegpu_sim_gpu_utilization{{.Selector}})`
	q.TTFTP50 = orJoin(ttft50)
	q.TTFTP99 = orJoin(ttft99)
	q.ObservedAt = orJoin(observed)
	return q
}

// seriesExpr selects a metric's series under the configured selector,
// leaving out those of a rank other than 0 of singleRank (copies of rank
// 0's values).
func seriesExpr(name, singleRank string) string {
	if singleRank == "" {
		return name + "{{.Selector}}"
	}
	return fmt.Sprintf(`(%s{{.Selector}} unless %s{%s!~"0|"})`, name, name, singleRank)
}

// rateExpr is seriesExpr's rate over the window (PromQL takes a range of
// a selector only, so the other ranks are left out after the rate).
func rateExpr(name, singleRank string) string {
	if singleRank == "" {
		return fmt.Sprintf("rate(%s{{.Selector}}[{{.Window}}])", name)
	}
	return fmt.Sprintf(`(rate(%s{{.Selector}}[{{.Window}}]) unless rate(%s{%s!~"0|"}[{{.Window}}]))`, name, name, singleRank)
}

// scaled multiplies by s unless s is 1 or unset.
func scaled(s float64) string {
	if s == 0 || s == 1 {
		return ""
	}
	return fmt.Sprintf(" * %g", s)
}

// orJoin joins queries with PromQL's or; none is DisabledQuery.
func orJoin(qs []string) string {
	if len(qs) == 0 {
		return DisabledQuery
	}
	return strings.Join(qs, " or ")
}

// DisabledQuery, as a field of Queries, turns that query off.
const DisabledQuery = "-"

// Defaults of PrometheusOptions.
const (
	DefaultPrometheusLabel   = "instance"
	DefaultPrometheusWindow  = "1m"
	DefaultPrometheusTimeout = 2 * time.Second
)

// PrometheusOptions configure a Prometheus source.
type PrometheusOptions struct {
	// Family is the server family whose metric names the default queries
	// read; the zero Family reads every known family's (DefaultQueries).
	Family Family
	// Address is the Prometheus base URL, e.g. http://127.0.0.1:9090.
	// Required.
	Address string
	// Queries override the default queries (FamilyQueries(Family)) field
	// by field; an empty field keeps the default, DisabledQuery turns it
	// off.
	Queries Queries
	// Label is the label whose value names a backend in the query results:
	// its Address (host:port, Prometheus's "instance" for a scraped target)
	// or its ID. Default "instance".
	Label string
	// Selector restricts the series, e.g. {job="vllm"}; default none.
	Selector string
	// Window is the rate window of the TTFT queries; default 1m.
	Window string
	// Timeout bounds one Snapshot (all its queries); default 2s.
	Timeout time.Duration
	// RoundTripper carries the queries; nil means the client library's
	// default.
	RoundTripper http.RoundTripper
	// Clock is used when no ObservedAt query gives a time; nil means the
	// real clock.
	Clock clock.PassiveClock
}

// Prometheus is the Source that asks a Prometheus server with PromQL
// instant queries (https://prometheus.io/docs/prometheus/latest/querying/api/#instant-queries).
type Prometheus struct {
	api     promv1.API
	queries []namedQuery
	label   model.LabelName
	timeout time.Duration
	clock   clock.PassiveClock
	family  Family
	data    struct{ Label, Selector, Window string }

	mu       sync.Mutex
	byFamily map[string][]namedQuery // the queries of targets' own families, by familyKey
}

type namedQuery struct {
	field Field // 0 for ObservedAt; FieldTTFT for both quantiles
	name  string
	q     string
	p99   bool // for FieldTTFT: the 0.99 quantile
}

var _ Source = (*Prometheus)(nil)

// NewPrometheus checks o and returns a Prometheus source. It does not
// contact the server.
func NewPrometheus(o PrometheusOptions) (*Prometheus, error) {
	if o.Address == "" {
		return nil, errors.New("prometheus source: no address")
	}
	u, err := url.Parse(o.Address)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errors.New("prometheus source: address must be an http(s) URL with a host")
	}
	if o.Label == "" {
		o.Label = DefaultPrometheusLabel
	}
	if !model.LegacyValidation.IsValidLabelName(o.Label) { // it goes into PromQL unquoted
		return nil, fmt.Errorf("prometheus source: invalid label name %q", o.Label)
	}
	if o.Window == "" {
		o.Window = DefaultPrometheusWindow
	}
	if _, err := model.ParseDuration(o.Window); err != nil {
		return nil, fmt.Errorf("prometheus source: window %q: %w", o.Window, err)
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultPrometheusTimeout
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	c, err := api.NewClient(api.Config{Address: o.Address, RoundTripper: o.RoundTripper})
	if err != nil {
		return nil, fmt.Errorf("prometheus source: %w", err)
	}
	p := &Prometheus{api: promv1.NewAPI(c), label: model.LabelName(o.Label), timeout: o.Timeout, clock: o.Clock}
	data := struct{ Label, Selector, Window string }{o.Label, o.Selector, o.Window}
	p.data = data
	def := FamilyQueries(o.Family)
	p.family = o.Family
	for _, q := range []struct {
		field     Field
		name      string
		give, def string
		p99       bool
	}{
		{FieldQueueDepth, "QueueDepth", o.Queries.QueueDepth, def.QueueDepth, false},
		{FieldRunning, "Running", o.Queries.Running, def.Running, false},
		{FieldKVCacheUsage, "KVCacheUsage", o.Queries.KVCacheUsage, def.KVCacheUsage, false},
		{FieldGPUUtil, "GPUUtil", o.Queries.GPUUtil, def.GPUUtil, false},
		{FieldTTFT, "TTFTP50", o.Queries.TTFTP50, def.TTFTP50, false},
		{FieldTTFT, "TTFTP99", o.Queries.TTFTP99, def.TTFTP99, true},
		{0, "ObservedAt", o.Queries.ObservedAt, def.ObservedAt, false},
	} {
		text := q.give
		if text == "" {
			text = q.def
		}
		if text == DisabledQuery {
			continue
		}
		rendered, err := render(q.name, text, data)
		if err != nil {
			return nil, fmt.Errorf("prometheus source: query %s: %w", q.name, err)
		}
		p.queries = append(p.queries, namedQuery{field: q.field, name: q.name, q: rendered, p99: q.p99})
	}
	return p, nil
}

func render(name, text string, data any) (string, error) {
	t, err := template.New(name).Option("missingkey=error").Parse(text)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	if err := t.Execute(&b, data); err != nil {
		return "", err
	}
	return b.String(), nil
}

// Name returns "prometheus".
func (p *Prometheus) Name() string { return "prometheus" }

// Close does nothing: the client keeps no state worth releasing.
func (p *Prometheus) Close() {}

// Queries returns the rendered PromQL queries, for status and debugging.
func (p *Prometheus) Queries() map[string]string {
	out := make(map[string]string, len(p.queries))
	for _, q := range p.queries {
		out[q.name] = q.q
	}
	return out
}

// familyKey identifies a family's metric names and a target's own queries.
func familyKey(f Family, q Queries) string {
	return fmt.Sprintf("%s|%s|%v|%g|%s|%g|%s|%+v", f.Queue, f.Running, f.KVCache, f.KVCacheScale, f.TTFT, f.TTFTScale, f.SingleRank, q)
}

// queriesFor returns the queries of a target's own family f and queries
// own (from its pool's spec): own's fields over FamilyQueries(f), without
// the overrides of PrometheusOptions.Queries, which are for the source's
// family.
func (p *Prometheus) queriesFor(f Family, own Queries) ([]namedQuery, error) {
	key := familyKey(f, own)
	p.mu.Lock()
	defer p.mu.Unlock()
	if qs, ok := p.byFamily[key]; ok {
		return qs, nil
	}
	def := FamilyQueries(f)
	for _, o := range []struct {
		dst *string
		v   string
	}{
		{&def.QueueDepth, own.QueueDepth}, {&def.Running, own.Running}, {&def.KVCacheUsage, own.KVCacheUsage},
		{&def.GPUUtil, own.GPUUtil}, {&def.TTFTP50, own.TTFTP50}, {&def.TTFTP99, own.TTFTP99},
	} {
		if o.v != "" {
			*o.dst = o.v
		}
	}
	if own.QueueDepth != "" {
		// The default ObservedAt reads the family's queue gauge, which a
		// query of its own may not use: the evaluation's time then.
		def.ObservedAt = DisabledQuery
	}
	var qs []namedQuery
	for _, q := range []struct {
		field Field
		name  string
		text  string
		p99   bool
	}{
		{FieldQueueDepth, "QueueDepth", def.QueueDepth, false},
		{FieldRunning, "Running", def.Running, false},
		{FieldKVCacheUsage, "KVCacheUsage", def.KVCacheUsage, false},
		{FieldGPUUtil, "GPUUtil", def.GPUUtil, false},
		{FieldTTFT, "TTFTP50", def.TTFTP50, false},
		{FieldTTFT, "TTFTP99", def.TTFTP99, true},
		{0, "ObservedAt", def.ObservedAt, false},
	} {
		if q.text == DisabledQuery {
			continue
		}
		rendered, err := render(q.name, q.text, p.data)
		if err != nil {
			return nil, fmt.Errorf("prometheus source: query %s of family %s: %w", q.name, f.Name, err)
		}
		qs = append(qs, namedQuery{field: q.field, name: q.name, q: rendered, p99: q.p99})
	}
	if p.byFamily == nil {
		p.byFamily = map[string][]namedQuery{}
	}
	p.byFamily[key] = qs
	return qs, nil
}

// Snapshot runs the queries concurrently and matches their samples to the
// targets by Label (address or ID); a target with a Family of its own is
// read with that family's queries. Any failing query makes the error
// non-nil; the values of the queries that worked are returned with it.
// When every query worked, a target without a queue-depth series (not
// scraped, or serving no known family's metrics) is left out and named in
// a *TargetError: its load is unknown, not idle.
func (p *Prometheus) Snapshot(ctx context.Context, targets []Target) (map[string]BackendMetrics, error) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	groups := map[string][]Target{}
	own := map[string]Target{}
	for _, t := range targets {
		key := ""
		if t.Family.Queue != "" || t.Queries != (Queries{}) {
			key = familyKey(t.Family, t.Queries)
			own[key] = t
		}
		groups[key] = append(groups[key], t)
	}
	out := make(map[string]BackendMetrics, len(targets))
	var errs []error
	missing := map[string]error{}
	for key, group := range groups {
		queries, fam := p.queries, p.family
		if key != "" {
			fam = own[key].Family
			var err error
			if queries, err = p.queriesFor(fam, own[key].Queries); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		got, miss, err := p.snapshot(ctx, group, queries, fam)
		for id, m := range got {
			out[id] = m
		}
		for id, e := range miss {
			missing[id] = e
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return out, err // a failing query explains the missing values
	}
	if len(missing) > 0 {
		return out, &TargetError{Source: p.Name(), Failed: missing, Total: len(byIDs(targets))}
	}
	return out, nil
}

// snapshot is Snapshot for targets read with one set of queries (of
// family fam): their metrics, the targets without a queue series, and the
// queries' error.
func (p *Prometheus) snapshot(ctx context.Context, targets []Target, queries []namedQuery, fam Family) (map[string]BackendMetrics, map[string]error, error) {
	byKey := make(map[string]string, 2*len(targets))
	for _, t := range targets {
		if t.ID == "" {
			continue
		}
		byKey[t.ID] = t.ID
		if t.Address != "" {
			byKey[t.Address] = t.ID
		}
	}
	now := p.clock.Now()
	results := make([]model.Vector, len(queries))
	errs := make([]error, len(queries))
	var wg sync.WaitGroup
	for i, q := range queries {
		wg.Go(func() {
			v, _, _, err := p.api.Query(ctx, q.q, now)
			if err != nil {
				errs[i] = fmt.Errorf("prometheus query %s: %w", q.name, err)
				return
			}
			vec, ok := v.(model.Vector)
			if !ok {
				errs[i] = fmt.Errorf("prometheus query %s: got a %s, want an instant vector", q.name, v.Type())
				return
			}
			results[i] = vec
		})
	}
	wg.Wait()

	out := make(map[string]BackendMetrics, len(targets))
	ttft := map[string][2]float64{}
	ttftSeen := map[string]uint8{}
	observed := map[string]time.Time{}
	evaluated := map[string]time.Time{}
	for i, q := range queries {
		for _, s := range results[i] {
			id, ok := byKey[string(s.Metric[p.label])]
			if !ok {
				continue
			}
			v := float64(s.Value)
			switch q.field {
			case 0:
				if !math.IsNaN(v) && !math.IsInf(v, 0) && v > 0 {
					observed[id] = time.UnixMilli(int64(v * 1000))
				}
				continue
			case FieldTTFT:
				pair := ttft[id]
				bit := uint8(1)
				if q.p99 {
					pair[1], bit = v, 2
				} else {
					pair[0] = v
				}
				ttft[id] = pair
				ttftSeen[id] |= bit
			default:
				m := out[id]
				m.set(q.field, v)
				out[id] = m
			}
			if t := s.Timestamp.Time(); !s.Timestamp.Equal(0) {
				evaluated[id] = t
			}
		}
	}
	for id, pair := range ttft {
		if ttftSeen[id] == 3 {
			m := out[id]
			m.setTTFT(pair[0], pair[1])
			out[id] = m
		}
	}
	var missing map[string]error
	for _, t := range targets {
		if t.ID == "" {
			continue
		}
		if m, ok := out[t.ID]; !ok || m.Has&FieldQueueDepth == 0 {
			if missing == nil {
				missing = map[string]error{}
			}
			missing[t.ID] = fmt.Errorf("prometheus: no series of %s for backend %s (%s=%q or %q)",
				expected(fam), t.ID, p.label, t.Address, t.ID)
			delete(out, t.ID)
		}
	}
	for id, m := range out {
		switch {
		case !observed[id].IsZero():
			m.ObservedAt = observed[id]
		case !evaluated[id].IsZero():
			m.ObservedAt = evaluated[id]
		default:
			m.ObservedAt = now
		}
		out[id] = m
	}
	return out, missing, errors.Join(errs...)
}

// byIDs returns the set of targets' non-empty IDs.
func byIDs(targets []Target) map[string]bool {
	ids := make(map[string]bool, len(targets))
	for _, t := range targets {
		if t.ID != "" {
			ids[t.ID] = true
		}
	}
	return ids
}
