package metrics

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/utils/clock"
)

// Metric names of vLLM (https://docs.vllm.ai/en/stable/usage/metrics/), which
// the simulator also serves, and the simulator's GPU utilisation. The other
// families' names are in their Family values.
const (
	MetricQueueDepth   = "vllm:num_requests_waiting"
	MetricRunning      = "vllm:num_requests_running"
	MetricKVCacheUsage = "vllm:kv_cache_usage_perc"
	// MetricKVCacheUsageV0 is the name of the KV-cache gauge before vLLM's
	// V1 engine; read when the new one is absent.
	MetricKVCacheUsageV0 = "vllm:gpu_cache_usage_perc"
	MetricGPUUtil        = "tidegpu_sim_gpu_utilization"
	MetricTTFT           = "vllm:time_to_first_token_seconds"
)

// Defaults of ScrapeOptions.
const (
	DefaultScrapePath     = "/metrics"
	DefaultScrapeTimeout  = time.Second
	DefaultScrapeMaxBytes = 8 << 20
	// scrapeConcurrency bounds the scrapes in flight at once.
	scrapeConcurrency = 32
)

// acceptText asks for the Prometheus text format 0.0.4, which every
// exporter serves (https://prometheus.io/docs/instrumenting/exposition_formats/).
const acceptText = "text/plain;version=0.0.4;q=1,*/*;q=0.1"

// ScrapeOptions configure a Scrape source. The zero value is valid.
type ScrapeOptions struct {
	// Path is the metrics path on every backend; default /metrics.
	Path string
	// Timeout bounds the scrape of one backend (the caller's context may
	// end it sooner); default 1s.
	Timeout time.Duration
	// MaxBytes bounds one backend's answer; default 8 MiB.
	MaxBytes int64
	// Client carries the scrapes; nil means a client of the source's own
	// that keeps connections alive and ignores proxy settings.
	Client *http.Client
	// Clock stamps ObservedAt; nil means the real clock.
	Clock clock.PassiveClock
	// Family names the metrics every backend serves; the zero Family
	// detects each backend's from its exposition (see LookupFamily).
	Family Family
}

// Scrape is the Source that reads every backend's /metrics directly. TTFT
// quantiles come from the difference between a backend's histogram at this
// scrape and at the previous one, so they describe the last interval only;
// the first scrape of a backend (or one after its counters reset) uses the
// whole histogram.
//
// Targets with the same address and family are scraped once per Snapshot
// (two pools, or two IDs, publishing one server). An answer that did not
// change is not parsed again: the server's ETag or Last-Modified is sent
// back (If-None-Match, If-Modified-Since) and a 304 reuses the last values,
// and a 200 whose body is byte for byte the last one's (FNV-1a) reuses them
// too, so that reading an idle backend costs one small request.
type Scrape struct {
	path     string
	timeout  time.Duration
	maxBytes int64
	client   *http.Client
	own      *http.Transport
	clock    clock.PassiveClock
	family   Family

	mu    sync.Mutex
	prev  map[string]*scrapeState // by scrapeKey
	plans map[string]*scrapePlan  // by scrapeKey
}

// scrapeState is what the last good scrape of one address and family
// left: its TTFT histogram, and the answer and its values, to reuse if the
// next answer is the same.
type scrapeState struct {
	buckets []Bucket // the TTFT histogram; nil if absent
	sum     uint64   // FNV-1a of the body
	etag    string   // the answer's ETag, if any
	lastMod string   // its Last-Modified, if any
	m       BackendMetrics
	used    time.Time // when a Snapshot last asked for it (guarded by Scrape.mu)
}

var _ Source = (*Scrape)(nil)

// NewScrape returns a Scrape source.
func NewScrape(o ScrapeOptions) *Scrape {
	s := &Scrape{
		path:     o.Path,
		timeout:  o.Timeout,
		maxBytes: o.MaxBytes,
		client:   o.Client,
		clock:    o.Clock,
		family:   o.Family,
		prev:     map[string]*scrapeState{},
		plans:    map[string]*scrapePlan{},
	}
	if s.path == "" {
		s.path = DefaultScrapePath
	}
	if !strings.HasPrefix(s.path, "/") {
		s.path = "/" + s.path
	}
	if s.timeout <= 0 {
		s.timeout = DefaultScrapeTimeout
	}
	if s.maxBytes <= 0 {
		s.maxBytes = DefaultScrapeMaxBytes
	}
	if s.clock == nil {
		s.clock = clock.RealClock{}
	}
	if s.client == nil {
		s.own = &http.Transport{
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: s.timeout}).DialContext,
			MaxIdleConnsPerHost: 2,
			IdleConnTimeout:     30 * time.Second,
			// Plain text: decompressing a gzipped exposition cost the
			// gateway more CPU than the bytes saved on a backend's own
			// network (BENCHMARKS.md, "Idle cost").
			DisableCompression: true,
		}
		s.client = &http.Client{Transport: s.own}
	}
	return s
}

// Name returns "scrape".
func (s *Scrape) Name() string { return "scrape" }

// Close closes idle connections and forgets histogram state.
func (s *Scrape) Close() {
	if s.own != nil {
		s.own.CloseIdleConnections()
	}
	s.mu.Lock()
	s.prev = map[string]*scrapeState{}
	s.plans = map[string]*scrapePlan{}
	s.mu.Unlock()
}

// familyOf returns the names t is read with: its own, else the source's.
func (s *Scrape) familyOf(t Target) Family {
	if t.Family.Queue != "" {
		return t.Family
	}
	return s.family
}

// scrapeKey names one scrape: the address and the metric names read. Pure.
func scrapeKey(address string, f Family) string {
	return address + "\x00" + f.Name + "\x00" + strings.Join(f.names(), ",")
}

// Snapshot scrapes every target concurrently, each address (and family)
// once. Targets that fail are left out of the map and listed in a
// *TargetError.
func (s *Scrape) Snapshot(ctx context.Context, targets []Target) (map[string]BackendMetrics, error) {
	out := make(map[string]BackendMetrics, len(targets))
	// One scrape per key, for every target with that key.
	type job struct {
		t   Target
		fam Family
		ids []string
	}
	jobs := map[string]*job{}
	var order []string
	for _, t := range targets {
		if t.ID == "" || t.Address == "" {
			continue
		}
		fam := s.familyOf(t)
		k := scrapeKey(t.Address, fam)
		if j := jobs[k]; j != nil {
			j.ids = append(j.ids, t.ID)
			continue
		}
		jobs[k] = &job{t: t, fam: fam, ids: []string{t.ID}}
		order = append(order, k)
	}
	var (
		mu     sync.Mutex
		failed map[string]error
		wg     sync.WaitGroup
		sem    = make(chan struct{}, scrapeConcurrency)
	)
	fail := func(j *job, err error) {
		mu.Lock()
		defer mu.Unlock()
		if failed == nil {
			failed = map[string]error{}
		}
		for _, id := range j.ids {
			failed[id] = fmt.Errorf("scraping %s (%s): %w", id, j.t.Address, err)
		}
	}
	for _, k := range order {
		j := jobs[k]
		wg.Go(func() {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				fail(j, ctx.Err())
				return
			}
			defer func() { <-sem }()
			m, err := s.scrapeOne(ctx, k, j.t.Address, j.fam)
			if err != nil {
				fail(j, err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for _, id := range j.ids {
				out[id] = m
			}
		})
	}
	wg.Wait()
	s.forget(order, s.clock.Now())
	if len(failed) > 0 {
		return out, &TargetError{Source: s.Name(), Failed: failed, Total: len(targets)}
	}
	return out, nil
}

// forgetAfter is how long the state of a scrape no longer asked for is
// kept: a reader that backs off asks for an idle backend seldom, not
// never.
const forgetAfter = 10 * time.Minute

// forget drops the state of scrapes not asked for within forgetAfter of
// now, and marks those of keys as used now.
func (s *Scrape) forget(keys []string, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		if st := s.prev[k]; st != nil {
			st.used = now
		}
		if p := s.plans[k]; p != nil {
			p.used = now
		}
	}
	for k, st := range s.prev {
		if now.Sub(st.used) > forgetAfter {
			delete(s.prev, k)
		}
	}
	for k, p := range s.plans {
		if now.Sub(p.used) > forgetAfter {
			delete(s.plans, k)
		}
	}
}

// scrapePlan is what every scrape of one key asks and keeps: the URL, with
// the wanted names as name[] parameters, and the family's reader.
type scrapePlan struct {
	url    string // with the name[] query
	plain  string // without: for a server that refused the query
	reader *familyReader
	// refused: the server answered the query with 400 Bad Request; it is
	// asked without from then on.
	refused atomic.Bool
	used    time.Time // guarded by Scrape.mu
}

// nameQuery returns the query that asks a server for family f's metrics
// only (the zero Family: every family's) with the name[] parameter of the
// Prometheus client libraries (client_golang's promhttp and client_java
// match it against family names, client_python against sample names, so a
// histogram's _bucket, _sum and _count are named too). Servers without it
// (TGI, llama.cpp) ignore it and send everything, which the text filter
// then skips. Pure.
func nameQuery(f Family) string {
	fams := []Family{f}
	if f.Queue == "" {
		fams = Families
	}
	q := url.Values{}
	seen := map[string]bool{}
	add := func(n string) {
		if n != "" && !seen[n] {
			seen[n] = true
			q.Add("name[]", n)
		}
	}
	add(MetricGPUUtil)
	for _, g := range fams {
		for _, n := range g.names() {
			add(n)
		}
		if g.TTFT != "" {
			for _, suf := range histogramSuffixes {
				add(g.TTFT + suf)
			}
		}
	}
	return q.Encode()
}

// plan returns the plan of key k, made on first use.
func (s *Scrape) plan(k, address string, fam Family) *scrapePlan {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.plans[k]; p != nil {
		return p
	}
	plain := "http://" + address + s.path
	p := &scrapePlan{url: plain + "?" + nameQuery(fam), plain: plain, reader: newFamilyReader(fam), used: s.clock.Now()}
	s.plans[k] = p
	return p
}

// bodyBufs are the buffers scrape answers are read into, kept across
// scrapes; one larger than maxPooledBody is let go.
var bodyBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

const maxPooledBody = 1 << 20

// scrapeOne reads the metrics at address with family fam (the zero Family:
// detected), under key k.
func (s *Scrape) scrapeOne(ctx context.Context, k, address string, fam Family) (BackendMetrics, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	plan := s.plan(k, address, fam)
	s.mu.Lock()
	prev := s.prev[k]
	s.mu.Unlock()
	resp, err := s.get(ctx, plan, prev)
	if err != nil {
		return BackendMetrics{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotModified && prev != nil && (prev.etag != "" || prev.lastMod != "") {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		return s.reuse(prev), nil
	}
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		return BackendMetrics{}, fmt.Errorf("status %s", resp.Status)
	}
	buf := bodyBufs.Get().(*bytes.Buffer)
	buf.Reset()
	defer func() {
		if buf.Cap() <= maxPooledBody {
			bodyBufs.Put(buf)
		}
	}()
	if _, err := buf.ReadFrom(io.LimitReader(resp.Body, s.maxBytes+1)); err != nil {
		return BackendMetrics{}, fmt.Errorf("reading: %w", err)
	}
	if int64(buf.Len()) > s.maxBytes {
		return BackendMetrics{}, fmt.Errorf("answer larger than %d bytes", s.maxBytes)
	}
	// Only the wanted families' lines count: an answer whose other
	// families moved (a counter of tokens served) is not parsed again.
	format := expfmt.ResponseFormat(resp.Header)
	body := plan.reader.filter(buf.Bytes(), format, true)
	h := fnv.New64a()
	_, _ = h.Write(body)
	sum := h.Sum64()
	etag, lastMod := resp.Header.Get("ETag"), resp.Header.Get("Last-Modified")
	if prev != nil && prev.sum == sum {
		if prev.etag != etag || prev.lastMod != lastMod {
			s.mu.Lock()
			if s.prev[k] == prev {
				next := *prev
				next.etag, next.lastMod, next.used = etag, lastMod, s.clock.Now()
				s.prev[k] = &next
			}
			s.mu.Unlock()
		}
		return s.reuse(prev), nil
	}
	m, ttft, err := plan.reader.read(body, format)
	if err != nil {
		return BackendMetrics{}, err
	}
	parsed := m
	m.ObservedAt = s.clock.Now()
	s.mu.Lock()
	s.prev[k] = &scrapeState{buckets: ttft, sum: sum, etag: etag, lastMod: lastMod, m: parsed, used: m.ObservedAt}
	s.mu.Unlock()
	if ttft != nil {
		delta := ttft
		if prev != nil && prev.buckets != nil {
			delta = bucketDelta(prev.buckets, ttft)
		}
		m.setTTFT(HistogramQuantile(0.5, delta), HistogramQuantile(0.99, delta))
	}
	return m, nil
}

// get sends the scrape of plan, conditional on prev's validators; with
// the name[] query unless the server refused it, and again without it if
// it does now (400 Bad Request).
func (s *Scrape) get(ctx context.Context, plan *scrapePlan, prev *scrapeState) (*http.Response, error) {
	for {
		refused := plan.refused.Load()
		u := plan.url
		if refused {
			u = plan.plain
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Accept", acceptText)
		req.Header.Set("User-Agent", "tidegpu-metrics-scrape")
		if prev != nil {
			if prev.etag != "" {
				req.Header.Set("If-None-Match", prev.etag)
			}
			if prev.lastMod != "" {
				req.Header.Set("If-Modified-Since", prev.lastMod)
			}
		}
		resp, err := s.client.Do(req)
		if err != nil || refused || resp.StatusCode != http.StatusBadRequest {
			return resp, err
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		resp.Body.Close()
		plan.refused.Store(true)
	}
}

// reuse returns the values of an answer that did not change since prev,
// observed now: what parsing it again would give (its TTFT histogram did
// not move, so there is no TTFT for the interval).
func (s *Scrape) reuse(prev *scrapeState) BackendMetrics {
	m := prev.m
	m.ObservedAt = s.clock.Now()
	return m
}

// ErrNoMetrics is returned (wrapped, with what was expected) by
// ParseExposition when the exposition has no usable queue-depth gauge of
// the family asked for, or of any known family: the backend's load is
// unknown, which is not the same as idle.
var ErrNoMetrics = errors.New("no queue-depth metric in the exposition")

// ParseExposition reads a Prometheus exposition (text format, or delimited
// protobuf if format says so) of any known family, detected from the metric
// names present: the first of Families whose queue gauge is there. See
// ParseFamily.
func ParseExposition(body []byte, format expfmt.Format) (BackendMetrics, []Bucket, error) {
	return ParseFamily(body, format, Family{})
}

// ParseFamily reads a Prometheus exposition (text format, or delimited
// protobuf if format says so) with family f's metric names, or with the
// detected family's if f is the zero Family, and returns the load metrics
// in it (BackendMetrics.Family says which family read them) and the TTFT
// histogram's cumulative buckets summed over its label sets, bounds in
// seconds (nil if absent). Queue depth and running requests are summed over
// label sets (models, engines, data-parallel ranks); KV-cache usage and GPU
// utilisation are maxed, so that one full rank is not averaged away by idle
// ones. It fails on malformed input and, with ErrNoMetrics, on input
// without a usable queue gauge. ObservedAt is left zero. Pure.
func ParseFamily(body []byte, format expfmt.Format, f Family) (BackendMetrics, []Bucket, error) {
	return newFamilyReader(f).parse(body, format, false)
}

// familyReader reads the expositions of one Family (the zero Family:
// detected): the metric names it keeps. Built once per scrape key.
type familyReader struct {
	f    Family
	want familySet
}

// wantedNames returns the metric names read with family f: its own and
// the simulator's GPU utilisation, or every family's for the zero Family
// (detection). Pure.
func wantedNames(f Family) []string {
	out := []string{MetricGPUUtil}
	if f.Queue != "" {
		return append(out, f.names()...)
	}
	for _, g := range Families {
		out = append(out, g.names()...)
	}
	return out
}

// newFamilyReader returns the reader of family f's expositions.
func newFamilyReader(f Family) *familyReader {
	return &familyReader{f: f, want: newFamilySet(wantedNames(f))}
}

// textParsers reuse expfmt's text parsers (and their read buffers) across
// scrapes, one pool per name validation scheme.
var textParsers = [2]sync.Pool{
	{New: func() any { p := expfmt.NewTextParser(model.LegacyValidation); return &p }},
	{New: func() any { p := expfmt.NewTextParser(model.UTF8Validation); return &p }},
}

// isText reports whether format is read as the text format: text/plain,
// or an unknown one.
func isText(format expfmt.Format) bool {
	t := format.FormatType()
	return t == expfmt.TypeTextPlain || t == expfmt.TypeUnknown
}

// filter returns the lines of a text body that r reads (filterText), or
// body itself (another format, or one filterText leaves whole). With owned,
// body is the caller's to overwrite and is filtered in place.
func (r *familyReader) filter(body []byte, format expfmt.Format, owned bool) []byte {
	if !isText(format) {
		return body
	}
	var dst []byte
	if owned {
		dst = body[:0]
	}
	if kept, ok := filterText(dst, body, r.want); ok {
		return kept
	}
	return body
}

// decode returns the metric families of body in format by name: the wanted
// ones, and, in text (which filter has already thinned), whatever else is
// left.
func (r *familyReader) decode(body []byte, format expfmt.Format) (map[string]*dto.MetricFamily, error) {
	if isText(format) {
		// The scheme expfmt.NewDecoder would use for this format.
		pool := &textParsers[0]
		if format.ToEscapingScheme() == model.NoEscaping {
			pool = &textParsers[1]
		}
		p := pool.Get().(*expfmt.TextParser)
		defer pool.Put(p)
		found, err := p.TextToMetricFamilies(bytes.NewReader(body))
		if err != nil {
			return nil, fmt.Errorf("parsing metrics: %w", err)
		}
		return found, nil
	}
	found := map[string]*dto.MetricFamily{}
	dec := expfmt.NewDecoder(bytes.NewReader(body), format)
	for {
		mf := &dto.MetricFamily{}
		err := dec.Decode(mf)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("parsing metrics: %w", err)
		}
		if !r.want[mf.GetName()] {
			continue
		}
		if prev, ok := found[mf.GetName()]; ok { // the same name twice: one family
			prev.Metric = append(prev.Metric, mf.GetMetric()...)
			continue
		}
		found[mf.GetName()] = mf
	}
	return found, nil
}

// parse is ParseFamily with r's family; with owned, body is the caller's
// to overwrite.
func (r *familyReader) parse(body []byte, format expfmt.Format, owned bool) (BackendMetrics, []Bucket, error) {
	return r.read(r.filter(body, format, owned), format)
}

// read is parse of a body filter returned.
func (r *familyReader) read(body []byte, format expfmt.Format) (BackendMetrics, []Bucket, error) {
	found, err := r.decode(body, format)
	if err != nil {
		return BackendMetrics{}, nil, err
	}
	f := r.f
	if f.Queue == "" {
		for _, g := range Families {
			if found[g.Queue] != nil {
				f = g
				break
			}
		}
		if f.Queue == "" {
			return BackendMetrics{}, nil, fmt.Errorf("%w: want %s", ErrNoMetrics, expected(Family{}))
		}
	}
	if found[f.Queue] == nil {
		return BackendMetrics{}, nil, fmt.Errorf("%w: want %s", ErrNoMetrics, expected(f))
	}

	m := BackendMetrics{Family: f.Name}
	var queue, running, kv, gpu agg
	queue.add(found[f.Queue], false, f.SingleRank)
	queue.store(&m, FieldQueueDepth)
	if m.Has&FieldQueueDepth == 0 {
		return BackendMetrics{}, nil, fmt.Errorf("%w: %s (%s) has no usable value", ErrNoMetrics, f.Queue, f.Server)
	}
	if f.Running != "" {
		running.add(found[f.Running], false, f.SingleRank)
		running.store(&m, FieldRunning)
	}
	for _, name := range f.KVCache {
		if kv.add(found[name], true, f.SingleRank); kv.ok {
			break
		}
	}
	if kv.ok {
		kv.v *= scaleOr1(f.KVCacheScale)
		kv.store(&m, FieldKVCacheUsage)
	}
	gpu.add(found[MetricGPUUtil], true, "")
	gpu.store(&m, FieldGPUUtil)
	var buckets []Bucket
	if f.TTFT != "" {
		buckets = histogramBuckets(found[f.TTFT], scaleOr1(f.TTFTScale), f.SingleRank)
	}
	return m, buckets, nil
}

// scaleOr1 returns s, or 1 for an unset scale.
func scaleOr1(s float64) float64 {
	if s == 0 {
		return 1
	}
	return s
}

// histogramBuckets sums the cumulative buckets of a histogram family's
// series, bounds multiplied by scale, sorted by bound; nil if mf has no
// histogram.
func histogramBuckets(mf *dto.MetricFamily, scale float64, singleRank string) []Bucket {
	var sum map[float64]float64
	for _, x := range mf.GetMetric() {
		h := x.GetHistogram()
		if h == nil || otherRank(x, singleRank) {
			continue
		}
		if sum == nil {
			sum = map[float64]float64{}
		}
		hasInf := false
		for _, b := range h.GetBucket() {
			sum[b.GetUpperBound()*scale] += float64(b.GetCumulativeCount())
			hasInf = hasInf || math.IsInf(b.GetUpperBound(), 1)
		}
		if !hasInf {
			// Client libraries leave the +Inf bucket implicit in
			// protobuf: it is the sample count.
			sum[math.Inf(1)] += float64(h.GetSampleCount())
		}
	}
	if len(sum) == 0 {
		return nil
	}
	buckets := make([]Bucket, 0, len(sum))
	for ub, c := range sum {
		if !math.IsNaN(ub) {
			buckets = append(buckets, Bucket{UpperBound: ub, Count: c})
		}
	}
	slices.SortFunc(buckets, func(a, b Bucket) int {
		if a.UpperBound < b.UpperBound {
			return -1
		}
		return 1
	})
	return buckets
}

// otherRank reports whether series x carries label with a value other than
// "0" (a rank whose values copy rank 0's).
func otherRank(x *dto.Metric, label string) bool {
	if label == "" {
		return false
	}
	for _, l := range x.GetLabel() {
		if l.GetName() == label {
			return l.GetValue() != "0"
		}
	}
	return false
}

// agg folds a gauge family's samples: their sum, or their maximum.
type agg struct {
	v  float64
	ok bool
}

func (a *agg) add(mf *dto.MetricFamily, useMax bool, singleRank string) {
	for _, x := range mf.GetMetric() {
		if otherRank(x, singleRank) {
			continue
		}
		var v float64
		switch {
		case x.GetGauge() != nil:
			v = x.GetGauge().GetValue()
		case x.GetUntyped() != nil:
			v = x.GetUntyped().GetValue()
		case x.GetCounter() != nil:
			v = x.GetCounter().GetValue()
		default:
			continue
		}
		if math.IsNaN(v) {
			continue
		}
		switch {
		case !a.ok:
			a.v = v
		case useMax:
			a.v = max(a.v, v)
		default:
			a.v += v
		}
		a.ok = true
	}
}

func (a agg) store(m *BackendMetrics, f Field) {
	if a.ok {
		m.set(f, a.v)
	}
}
