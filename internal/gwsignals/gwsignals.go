// Package gwsignals reads the autoscaling signals of the pools that
// `tidegpu operator` runs from the standalone gateway replicas (`tidegpu
// gateway --kubeconfig`): each replica's own /metrics (its admin address),
// summed over replicas. It gives the operator's autoscalers what
// `tidegpu up` feeds from its embedded gateway: concurrency (requests in
// flight) and qps (requests answered per second), and says, per pool,
// whether the gateways balance on the backends' metrics.
package gwsignals

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"k8s.io/utils/clock"

	"github.com/tidegpu/tidegpu/internal/autoscale"
)

// The gateway's metric names read here (internal/gateway/metrics.go).
const (
	metricInFlight = "tidegpu_gateway_backend_in_flight"
	metricRequests = "tidegpu_gateway_requests_total"
	metricFresh    = "tidegpu_gateway_backend_metrics_fresh"
	// metricHeld is the requests the activator holds for a pool at zero:
	// they count as in flight, so the pool's autoscaler sees the load
	// that woke it.
	metricHeld = "tidegpu_gateway_activator_held"
	// metricQueued is the requests waiting in a saturated pool's fair
	// queue (pool "any": requests naming no pool, not counted): load the
	// pool has not served yet, as `tidegpu up` counts it (Gateway.Held).
	metricQueued = "tidegpu_gateway_queued_requests"
	// metricDuration is always there, backends or not: it marks a
	// gateway's exposition.
	metricDuration = "tidegpu_gateway_request_duration_seconds"
)

// anyPoolLabel is the queued gauge's pool for requests naming no pool.
const anyPoolLabel = "any"

// Defaults of Options.
const (
	DefaultTimeout = time.Second
	// DefaultMaxAge is how long one read of the replicas serves every
	// pool's observation.
	DefaultMaxAge  = time.Second
	maxAnswerBytes = 8 << 20
)

// Options configure a Reader.
type Options struct {
	// URLs are the gateway replicas' metrics URLs, such as
	// http://tidegpu-gateway-metrics.tidegpu-system.svc:9091/metrics. A
	// host name is resolved at every read and each of its addresses is one
	// replica: a headless Service's name gives every ready gateway pod.
	// Required.
	URLs []string
	// Timeout bounds the read of one replica; default 1s.
	Timeout time.Duration
	// MaxAge is how long one read serves all pools; default 1s.
	MaxAge time.Duration
	// Client carries the reads; nil means a client that ignores proxies.
	Client *http.Client
	// Resolver resolves the URLs' host names; nil means net.DefaultResolver.
	Resolver *net.Resolver
	// Clock is the reader's; nil means the real clock.
	Clock clock.PassiveClock
	// Logger gets a warning when a replica cannot be read.
	Logger *slog.Logger
	// Token, if set, is sent as a bearer token: a gateway whose admin
	// listener has TIDEGPU_ADMIN_TOKEN wants it on /metrics. Never logged.
	Token string
}

// Reader implements engine.Signals and engine.SignalHealth from the
// gateway replicas' metrics. Safe for concurrent use.
type Reader struct {
	urls     []*url.URL
	timeout  time.Duration
	maxAge   time.Duration
	client   *http.Client
	resolver *net.Resolver
	clock    clock.PassiveClock
	log      *slog.Logger
	token    string

	mu   sync.Mutex
	last *Reading                        // nil before the first read
	prev map[string]map[string]counterAt // pool → replica → requests at the pool's last Observe
	// failing are the replicas the last read failed on (logged once).
	failing map[string]bool
}

type counterAt struct {
	requests float64
	at       time.Time
}

// New checks o and returns a Reader. It reads nothing yet.
func New(o Options) (*Reader, error) {
	if len(o.URLs) == 0 {
		return nil, errors.New("gateway metrics: no URL: give each gateway replica's metrics URL (its --admin-addr, path /metrics), or a headless Service's")
	}
	r := &Reader{timeout: o.Timeout, maxAge: o.MaxAge, client: o.Client, resolver: o.Resolver, clock: o.Clock, log: o.Logger, token: o.Token,
		prev: map[string]map[string]counterAt{}}
	for _, raw := range o.URLs {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("gateway metrics URL %q: want http(s)://host:port/metrics", raw)
		}
		if u.Path == "" {
			u.Path = "/metrics"
		}
		r.urls = append(r.urls, u)
	}
	if r.timeout <= 0 {
		r.timeout = DefaultTimeout
	}
	if r.maxAge <= 0 {
		r.maxAge = DefaultMaxAge
	}
	if r.client == nil {
		r.client = &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 2, IdleConnTimeout: 30 * time.Second}}
	}
	if r.resolver == nil {
		r.resolver = net.DefaultResolver
	}
	if r.clock == nil {
		r.clock = clock.RealClock{}
	}
	if r.log == nil {
		r.log = slog.Default()
	}
	return r, nil
}

// Reading is one read of every replica.
type Reading struct {
	// At is when the read started.
	At time.Time
	// Replicas are the replicas read, by their URL.
	Replicas map[string]Replica
	// Failed are the replicas (or URLs that did not resolve) that could
	// not be read, with the error.
	Failed map[string]error
}

// Replica is what one gateway replica reports, by pool.
type Replica struct {
	// InFlight is the requests in flight per pool (summed over backends).
	InFlight map[string]float64
	// BackendInFlight is the requests in flight per backend, removed
	// backends still serving included.
	BackendInFlight map[string]float64
	// Requests is the requests answered per pool (a counter).
	Requests map[string]float64
	// Fresh says, per pool and backend, whether the replica has fresh
	// metrics of the backend.
	Fresh map[string]map[string]bool
	// Source is the replica's metrics source ("scrape", "prometheus", or
	// "gateway" for none).
	Source string
}

// Observe implements engine.Signals: the pool's concurrency (in flight,
// summed over replicas) and, from the second call on, its qps (requests
// answered per second since the previous call, summed over replicas, a
// replica's restart counted from zero). While a replica cannot be read
// nothing is observed: a partial sum would look like a drop in load.
func (r *Reader) Observe(pool string, now time.Time) []autoscale.Observation {
	rd := r.reading(context.Background())
	if len(rd.Failed) > 0 || len(rd.Replicas) == 0 {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	obs, next := observe(pool, rd, r.prev[pool], now)
	r.prev[pool] = next
	return obs
}

// observe turns a reading into a pool's observations, given the pool's
// counters at its previous observation; it returns the counters to keep.
// Pure.
func observe(pool string, rd *Reading, prev map[string]counterAt, now time.Time) ([]autoscale.Observation, map[string]counterAt) {
	var inFlight, qps float64
	rated := false
	next := make(map[string]counterAt, len(rd.Replicas))
	for name, rep := range rd.Replicas {
		inFlight += rep.InFlight[pool]
		cur := rep.Requests[pool]
		next[name] = counterAt{requests: cur, at: now}
		p, ok := prev[name]
		if !ok || !now.After(p.at) {
			continue
		}
		delta := cur - p.requests
		if delta < 0 { // the replica restarted: its counter began again
			delta = cur
		}
		qps += delta / now.Sub(p.at).Seconds()
		rated = true
	}
	obs := []autoscale.Observation{{Metric: "concurrency", Value: inFlight, At: now}}
	if rated {
		obs = append(obs, autoscale.Observation{Metric: "qps", Value: qps, At: now})
	}
	return obs, next
}

// InFlight implements registrar.InFlightReporter: the requests in flight
// on a backend through every gateway replica, so that a draining instance
// is let go once the gateways are done with it; -1 (unknown) while a
// replica cannot be read or none is known.
func (r *Reader) InFlight(id string) int {
	rd := r.reading(context.Background())
	if len(rd.Failed) > 0 || len(rd.Replicas) == 0 {
		return -1
	}
	var n float64
	for _, rep := range rd.Replicas {
		n += rep.BackendInFlight[id]
	}
	return int(n)
}

// SignalHealth implements engine.SignalHealth: whether the gateways balance
// the pool on its backends' metrics, naming the backends that have none
// and the replicas that could not be read.
func (r *Reader) SignalHealth(pool string) (source string, fallback bool, reason string, ok bool) {
	return health(pool, r.reading(context.Background()))
}

// SignalGaps implements engine.SignalGaps: the pool's backends no gateway
// replica has fresh metrics of, while another backend has them (with none
// fresh, SignalHealth reports the fallback).
func (r *Reader) SignalGaps(pool string) []string {
	return gaps(pool, r.reading(context.Background()))
}

// gaps is SignalGaps's pure part.
func gaps(pool string, rd *Reading) []string {
	fresh := map[string]bool{}
	for _, rep := range rd.Replicas {
		for be, f := range rep.Fresh[pool] {
			fresh[be] = fresh[be] || f
		}
	}
	var missing []string
	someFresh := false
	for be, f := range fresh {
		if f {
			someFresh = true
		} else {
			missing = append(missing, be)
		}
	}
	if !someFresh {
		return nil
	}
	slices.Sort(missing)
	return missing
}

// health is SignalHealth's pure part.
func health(pool string, rd *Reading) (source string, fallback bool, reason string, ok bool) {
	fresh := map[string]bool{}
	for _, rep := range rd.Replicas {
		for be, f := range rep.Fresh[pool] {
			fresh[be] = fresh[be] || f
			if source == "" || rep.Source != "gateway" {
				source = rep.Source
			}
		}
	}
	var failed []string
	for name, err := range rd.Failed {
		failed = append(failed, fmt.Sprintf("%s: %v", name, err))
	}
	sort.Strings(failed)
	if len(fresh) == 0 {
		if len(failed) == 0 {
			return "", false, "", false
		}
		return "gateway", true, "gateway replicas unreadable: " + strings.Join(failed, "; "), true
	}
	var missing []string
	n := 0
	for be, f := range fresh {
		if f {
			n++
		} else {
			missing = append(missing, be)
		}
	}
	slices.Sort(missing)
	reason = fmt.Sprintf("%d of %d backends with fresh metrics (%d gateway replicas)", n, len(fresh), len(rd.Replicas))
	if len(missing) > 0 {
		reason += "; no fresh metrics for " + strings.Join(missing, ", ")
	}
	if len(failed) > 0 {
		reason += "; gateway replicas unreadable: " + strings.Join(failed, "; ")
	}
	if n == 0 {
		return "gateway", true, reason, true
	}
	return source, false, reason, true
}

// reading returns the last reading if it is younger than MaxAge, else
// reads every replica now.
func (r *Reader) reading(ctx context.Context) *Reading {
	r.mu.Lock()
	last := r.last
	r.mu.Unlock()
	now := r.clock.Now()
	if last != nil && now.Sub(last.At) < r.maxAge && now.Sub(last.At) >= 0 {
		return last
	}
	rd := r.read(ctx, now)
	r.mu.Lock()
	r.last = rd
	r.mu.Unlock()
	return rd
}

// read reads every replica concurrently.
func (r *Reader) read(ctx context.Context, now time.Time) *Reading {
	rd := &Reading{At: now, Replicas: map[string]Replica{}, Failed: map[string]error{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, u := range r.urls {
		targets, err := r.expand(ctx, u)
		if err != nil {
			rd.Failed[u.String()] = err
			continue
		}
		for _, t := range targets {
			wg.Go(func() {
				rep, err := r.readOne(ctx, t)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					rd.Failed[t] = err
					return
				}
				rd.Replicas[t] = rep
			})
		}
	}
	wg.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, err := range rd.Failed {
		if !r.failing[name] {
			r.log.Warn("gateway metrics: a replica could not be read; the operator's autoscalers hold", "replica", name, "err", err)
		}
	}
	for name := range r.failing {
		if rd.Failed[name] == nil {
			r.log.Info("gateway metrics: a replica answers again, or is gone", "replica", name)
		}
	}
	r.failing = make(map[string]bool, len(rd.Failed))
	for name := range rd.Failed {
		r.failing[name] = true
	}
	return rd
}

// expand resolves u's host to one URL per address; an IP is itself.
func (r *Reader) expand(ctx context.Context, u *url.URL) ([]string, error) {
	host, port := u.Hostname(), u.Port()
	if net.ParseIP(host) != nil {
		return []string{u.String()}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	addrs, err := r.resolver.LookupHost(ctx, host)
	if err != nil {
		return nil, fmt.Errorf("resolving %s: %w", host, err)
	}
	slices.Sort(addrs)
	out := make([]string, 0, len(addrs))
	for _, a := range slices.Compact(addrs) {
		v := *u
		v.Host = a
		if port != "" {
			v.Host = net.JoinHostPort(a, port)
		} else if strings.Contains(a, ":") {
			v.Host = "[" + a + "]"
		}
		out = append(out, v.String())
	}
	return out, nil
}

// readOne reads one replica's metrics.
func (r *Reader) readOne(ctx context.Context, target string) (Replica, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return Replica{}, err
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return Replica{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Replica{}, fmt.Errorf("status %s", resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes+1))
	if err != nil {
		return Replica{}, err
	}
	if len(body) > maxAnswerBytes {
		return Replica{}, fmt.Errorf("answer larger than %d bytes", maxAnswerBytes)
	}
	return Parse(body, expfmt.ResponseFormat(resp.Header))
}

// Parse reads one gateway replica's exposition. It fails on malformed
// input and on an exposition without the gateway's request duration
// histogram (not a TideGPU gateway). Pure.
func Parse(body []byte, format expfmt.Format) (Replica, error) {
	if format.FormatType() == expfmt.TypeUnknown {
		format = expfmt.NewFormat(expfmt.TypeTextPlain)
	}
	rep := Replica{InFlight: map[string]float64{}, BackendInFlight: map[string]float64{}, Requests: map[string]float64{}, Fresh: map[string]map[string]bool{}, Source: "gateway"}
	dec := expfmt.NewDecoder(bytes.NewReader(body), format)
	gateway := false
	for {
		mf := &dto.MetricFamily{}
		err := dec.Decode(mf)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return Replica{}, fmt.Errorf("parsing gateway metrics: %w", err)
		}
		switch mf.GetName() {
		case metricDuration:
			gateway = true
		case metricInFlight:
			for _, m := range mf.GetMetric() {
				if v := m.GetGauge().GetValue(); v > 0 {
					rep.InFlight[label(m, "pool")] += v
					rep.BackendInFlight[label(m, "backend")] += v
				}
			}
		case metricHeld:
			for _, m := range mf.GetMetric() {
				if v := m.GetGauge().GetValue(); v > 0 {
					rep.InFlight[label(m, "pool")] += v
				}
			}
		case metricQueued:
			for _, m := range mf.GetMetric() {
				if v := m.GetGauge().GetValue(); v > 0 && label(m, "pool") != anyPoolLabel {
					rep.InFlight[label(m, "pool")] += v
				}
			}
		case metricRequests:
			for _, m := range mf.GetMetric() {
				if v := m.GetCounter().GetValue(); v > 0 {
					rep.Requests[label(m, "pool")] += v
				}
			}
		case metricFresh:
			for _, m := range mf.GetMetric() {
				pool := label(m, "pool")
				if rep.Fresh[pool] == nil {
					rep.Fresh[pool] = map[string]bool{}
				}
				rep.Fresh[pool][label(m, "backend")] = m.GetGauge().GetValue() > 0
				if s := label(m, "source"); s != "" {
					rep.Source = s
				}
			}
		}
	}
	if !gateway {
		return Replica{}, fmt.Errorf("no %s in the answer: not a tidegpu gateway's metrics", metricDuration)
	}
	return rep, nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
