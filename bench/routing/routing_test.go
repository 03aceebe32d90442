package routingbench

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidegpu/tidegpu/bench/internal/peer"
	"github.com/tidegpu/tidegpu/bench/internal/stall"

	"github.com/tidegpu/tidegpu/internal/gateway"
	loadmetrics "github.com/tidegpu/tidegpu/internal/metrics"
	"github.com/tidegpu/tidegpu/internal/metrics/promtest"
	"github.com/tidegpu/tidegpu/internal/sim"
)

// The experiment's parameters.
const (
	outputTokens = 16
	streamShare  = 0.5
	warmup       = 3 * time.Second
	seed         = 20260601
	// requestTimeout bounds one request; round-robin's queue on the slow
	// backend stays far below it.
	requestTimeout = 2 * time.Minute
)

// A row a goal reads is measured again, up to stallAttempts times in all,
// when this process or its host stalled for more than stallLimit while it
// ran (bench/internal/stall, waking every stallPeriod). Everything here —
// simulators, gateway, load generator — is one process: a pause of it
// holds every backend's first token and then releases every arrival due
// meanwhile at once, a pile-up of the machine's that no balancer avoids.
// Paused for 1.2 s every 7 s (SIGSTOP from outside), p2c, the default and
// HAProxy all put their TTFT p99 at 2.2-3.3 s; once in CI the default's
// row alone was measured through one (TTFT p99 2.2 s, the others' 0.12 s)
// and failed. Unpaused, this machine's worst wake-up is late by tens of
// milliseconds; the limit is well above that and well below a pile-up.
// The stall each row was measured through is in the table; the last
// attempt is judged whatever its stall.
const (
	stallPeriod   = 10 * time.Millisecond
	stallLimit    = 250 * time.Millisecond
	stallAttempts = 3
)

// secondsEnv overrides the measured seconds per balancer (default 20);
// onlyEnv, a comma-separated list of substrings of balancer names, runs
// only those (the goal checks then apply only to what ran).
const (
	secondsEnv = "TIDEGPU_ROUTING_SECONDS"
	onlyEnv    = "TIDEGPU_ROUTING_ONLY"
)

// envPrefix starts every variable of this benchmark. The plain run (none
// of them set: `make test`) measures the rows no goal reads (goalRow) for
// smokeMeasured instead of the full window: they still run the same load
// from the same schedule (its first smokeMeasured seconds after the
// warm-up) and fail on any failed request, but their figures are printed,
// not asserted, so they need not take 20 s each. Every goal row runs the
// full window, and any TIDEGPU_ROUTING_* variable (TIDEGPU_ROUTING_SECONDS=20
// for the default length) runs every row in full, as BENCHMARKS.md's tables
// were measured.
const (
	envPrefix     = "TIDEGPU_ROUTING_"
	smokeMeasured = 5 * time.Second
)

// The rows the goals compare.
const (
	rowRR      = "round-robin"
	rowP2C     = "p2c + /metrics scrape"
	rowDefault = "prefix-aware + /metrics scrape (default)"
	rowHAProxy = "HAProxy balance leastconn"
	// p2cGoalLoad is the lowest load at which the default is held to p2c's
	// e2e p99 (issue 14).
	p2cGoalLoad = 0.7
)

// goalRow reports whether a goal at load reads the row of balancer name.
func goalRow(name string, load float64) bool {
	switch name {
	case rowRR, rowDefault, rowHAProxy:
		return true
	case rowP2C:
		return load >= p2cGoalLoad
	}
	return false
}

// plainRun reports whether no TIDEGPU_ROUTING_* variable is set.
func plainRun() bool {
	return !slices.ContainsFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, envPrefix) })
}

// pool is the simulated pool: three backends and one three times slower.
func pool() []Backend {
	fast := Backend{TTFT: 40 * time.Millisecond, TokenTime: 20 * time.Millisecond, BatchSlowdown: 0.05, MaxBatch: 8, SlowFactor: 1}
	slow := fast
	slow.SlowFactor = 3
	if os.Getenv(poolEnv) == "holdout2" {
		// A second held-out pool, made after least-cost's fix (which the
		// first one prompted) and used for nothing else: six backends,
		// one 4x slower, one 1.4x, batches of 10.
		fast.MaxBatch, slow.MaxBatch = 10, 10
		slow.SlowFactor = 4
		mild := fast
		mild.SlowFactor = 1.4
		return []Backend{fast, mild, fast, slow, fast, fast}
	}
	if os.Getenv(poolEnv) == "holdout" {
		// A pool the policy's settings (least-cost's 1.5x tolerance) were
		// not chosen on: five backends, two of them 2x slower, batches of
		// 6.
		fast.MaxBatch, slow.MaxBatch, slow.SlowFactor = 6, 6, 2
		return []Backend{fast, slow, fast, fast, slow}
	}
	return []Backend{fast, fast, fast, slow}
}

// poolEnv=holdout or holdout2 runs a held-out pool (see pool).
const poolEnv = "TIDEGPU_ROUTING_POOL"

// result is one request's outcome.
type result struct {
	stream   bool
	ttft     time.Duration // streams only: to the first NDJSON line
	e2e      time.Duration // to the end of the body
	instance string        // X-Tidegpu-Instance: which simulator answered
	err      error
}

// row is one balancer's summary.
type row struct {
	name           string
	n, errs        int
	ttft50, ttft99 time.Duration
	e2e50, e2e99   time.Duration
	slowShare      float64
	ttft, e2e      []time.Duration // the measured samples, for the goals' intervals
}

// balancer starts a balancer in front of the simulators' addresses and
// returns its base URL, a function to call when the warm-up ends (nil for
// none) and a stop function.
type balancer struct {
	name  string
	start func(t *testing.T, addrs []string) (url string, atWarmup, stop func())
}

func TestRoutingQuality(t *testing.T) {
	if testing.Short() {
		t.Skip("routing-quality benchmark: about four minutes (five with every row in full); runs without -short")
	}
	haproxy := haproxyBinary()
	if haproxy == "" {
		t.Skip("haproxy not found: install the Debian package `haproxy` (/usr/sbin/haproxy)")
	}
	measured := 20 * time.Second
	if v := os.Getenv(secondsEnv); v != "" {
		s, err := strconv.Atoi(v)
		if err != nil || s < 5 || s > 600 {
			t.Fatalf("%s=%q: want seconds in 5..600", secondsEnv, v)
		}
		measured = time.Duration(s) * time.Second
	}

	bs := pool()
	var addrs []string
	for i, b := range bs {
		id := fmt.Sprintf("fast-%d", i)
		if b.SlowFactor > 1 {
			id = fmt.Sprintf("slow-%d", i)
		}
		s := sim.New(sim.Config{
			TTFT: b.TTFT, TokenTime: b.TokenTime, BatchSlowdown: b.BatchSlowdown, MaxBatch: b.MaxBatch,
			OutputTokens: outputTokens, SlowFactor: b.SlowFactor, InstanceID: id,
		})
		srv := httptest.NewServer(s)
		t.Cleanup(func() { srv.CloseClientConnections(); srv.Close(); s.Close() })
		addrs = append(addrs, srv.Listener.Addr().String())
	}
	capacity := PoolCapacity(bs, outputTokens)
	t.Logf("pool (%s): %d backends, slow factors %v; %d tokens per answer", cmp.Or(os.Getenv(poolEnv), "the issue's"), len(bs), slowFactors(bs), outputTokens)
	t.Logf("capacity %.1f req/s (fast %.2f, slow %.2f: MaxBatch / latency at a full batch)",
		capacity, bs[0].Capacity(outputTokens), bs[3].Capacity(outputTokens))

	// Fail fast if HAProxy cannot start here, before minutes of runs.
	_, _, stop := haproxyBalancer(haproxy)(t, addrs)
	stop()

	const def = rowDefault
	smoke := plainRun() && measured > smokeMeasured
	runs := []struct {
		load      float64
		balancers []balancer
	}{
		{0.30, []balancer{
			{rowRR, gatewayBalancer(gateway.PolicyRoundRobin, false)},
			{rowP2C, gatewayBalancer(gateway.PolicyP2C, true)},
			{def, gatewayBalancer(gateway.PolicyPrefixAware, true)},
			{rowHAProxy, haproxyBalancer(haproxy)},
		}},
		{0.70, []balancer{
			{rowRR, gatewayBalancer(gateway.PolicyRoundRobin, false)},
			{"least-request", gatewayBalancer(gateway.PolicyLeastRequest, false)},
			{"p2c, gateway signals only", gatewayBalancer(gateway.PolicyP2C, false)},
			{rowP2C, gatewayBalancer(gateway.PolicyP2C, true)},
			{"prefix-aware, gateway signals only", gatewayBalancer(gateway.PolicyPrefixAware, false)},
			{def, gatewayBalancer(gateway.PolicyPrefixAware, true)},
			{"prefix-aware + Prometheus, killed after warm-up", prometheusBalancer()},
			{rowHAProxy, haproxyBalancer(haproxy)},
		}},
	}
	var table strings.Builder
	table.WriteString("| load | balancer | requests | errors | TTFT p50 | TTFT p99 | e2e p50 | e2e p99 | to the slow backend | longest stall |\n")
	table.WriteString("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	var goals []string
	for _, run := range runs {
		rate := run.load * capacity
		arrivals := Schedule(rate, warmup+measured, streamShare, seed)
		t.Logf("load %.0f%%: offered %.1f req/s, %d arrivals over %v (first %v unmeasured)",
			run.load*100, rate, len(arrivals), warmup+measured, warmup)
		// The same seed: the first arrivals of the full schedule.
		short := Schedule(rate, warmup+smokeMeasured, streamShare, seed)
		balancers := run.balancers
		if only := os.Getenv(onlyEnv); only != "" {
			balancers = slices.DeleteFunc(slices.Clone(balancers), func(b balancer) bool {
				return !slices.ContainsFunc(strings.Split(only, ","), func(s string) bool { return strings.Contains(b.name, s) })
			})
		}
		rows := map[string]row{}
		for _, b := range balancers {
			arr, label := arrivals, b.name
			if smoke && !goalRow(b.name, run.load) {
				arr, label = short, fmt.Sprintf("%s (%v measured, no goal)", b.name, smokeMeasured)
			}
			var r row
			var stalled time.Duration
			for attempt := 1; ; attempt++ {
				url, atWarmup, stop := b.start(t, addrs)
				if url == "" {
					break // not available here; start said why
				}
				watch := stall.Start(stallPeriod)
				res := drive(url, arr, atWarmup)
				stalled = watch.Stop()
				stop()
				r = summarize(b.name, arr, res)
				if stalled <= stallLimit || attempt == stallAttempts || !goalRow(b.name, run.load) {
					break
				}
				t.Logf("%.0f%% %s: the process or host stalled for %v while it ran (limit %v): measuring it again",
					run.load*100, b.name, stalled.Round(time.Millisecond), stallLimit)
			}
			if r.name == "" {
				continue
			}
			rows[b.name] = r
			t.Logf("%.0f%% %-32s done: %d requests, %d errors, longest stall %v", run.load*100, label, r.n, r.errs, stalled.Round(time.Millisecond))
			fmt.Fprintf(&table, "| %.0f %% | %s | %d | %d | %s | %s | %s | %s | %.1f %% | %s |\n",
				run.load*100, label, r.n, r.errs, Millis(r.ttft50), Millis(r.ttft99), Millis(r.e2e50), Millis(r.e2e99), 100*r.slowShare, Millis(stalled))
			if r.errs > 0 {
				t.Errorf("%.0f%% %s: %d failed requests", run.load*100, r.name, r.errs)
			}
		}
		d, okDef := rows[def]
		if rr, ok := rows[rowRR]; ok && okDef {
			// 2x, or on a pool where 2x is beyond any balancer (the first
			// held-out one: its slow backends are 2x slower) what can be
			// met; see GoalRatio.
			//
			// Missed when the ratio is below the goal beyond this run's
			// noise (the 90 % interval's high end below it), as the goals
			// below: at 30 % the default sends nothing to the slow backend
			// and its TTFT p99 over ~185 streams is the second-worst
			// stream, so two stalls of the host (69 ms against 42 ms, on a
			// shared CI machine, with the simulators' own peak at 41 ms)
			// moved the point ratio from 2.8x to 1.78x. The high end
			// forgives up to about four such streams (a resample then
			// draws at most one of them one time in twenty); a default
			// that sent five or more of its ~185 streams (3 %) to the slow
			// backend has its p99 at that backend's TTFT in nearly every
			// resample, and the high end near 1.
			goal := GoalRatio(bs)
			tlo, thi := PercentileRatioInterval(rr.ttft, d.ttft, 99, 90, 15)
			elo, ehi := PercentileRatioInterval(rr.e2e, d.e2e, 99, 90, 16)
			goals = append(goals, fmt.Sprintf("%.0f%%: default vs round-robin: p99 TTFT %.2fx lower (90 %% interval %.2f-%.2f), p99 e2e %.2fx lower (%.2f-%.2f) (goal: high ends >= %.2fx)",
				run.load*100, Ratio(rr.ttft99, d.ttft99), tlo, thi, Ratio(rr.e2e99, d.e2e99), elo, ehi, goal))
			if ehi < goal || thi < goal {
				t.Errorf("goal missed at %.0f%%: the default's p99 is not %.2fx lower than round-robin's", run.load*100, goal)
			}
		}
		if p, ok := rows[rowP2C]; ok && okDef && run.load >= p2cGoalLoad {
			// Issue 14: the prefix-aware default costs requests without a
			// shared prefix nothing against the p2c it replaced: missed
			// when the default is more than 5 % worse beyond this run's
			// noise (the 90 % interval's low end above 1.05; see
			// PercentileRatioInterval for why a point ratio of two p99s
			// cannot carry a 5 % bound).
			lo, hi := PercentileRatioInterval(d.e2e, p.e2e, 99, 90, 14)
			goals = append(goals, fmt.Sprintf("%.0f%%: default vs p2c: p99 e2e %.2fx of p2c's (90 %% interval %.2f-%.2f; goal: low end <= 1.05)",
				run.load*100, Ratio(d.e2e99, p.e2e99), lo, hi))
			if lo > 1.05 {
				t.Errorf("goal missed at %.0f%%: the default's e2e p99 is more than 5 %% worse than p2c's (interval %.2f-%.2f)", run.load*100, lo, hi)
			}
		}
		if hap, ok := rows[rowHAProxy]; ok && okDef {
			// "No worse" within 5 %, beyond this run's noise, as against
			// p2c: when both send more than 1 % of the requests to the slow
			// backend, both p99s are draws of its latency.
			elo, ehi := PercentileRatioInterval(d.e2e, hap.e2e, 99, 90, 6)
			tlo, thi := PercentileRatioInterval(d.ttft, hap.ttft, 99, 90, 6)
			goals = append(goals, fmt.Sprintf("%.0f%%: default vs HAProxy leastconn: p99 TTFT %.2fx (90 %% interval %.2f-%.2f), p99 e2e %.2fx (%.2f-%.2f) of HAProxy's (goal: low ends <= 1.05)",
				run.load*100, Ratio(d.ttft99, hap.ttft99), tlo, thi, Ratio(d.e2e99, hap.e2e99), elo, ehi))
			if elo > 1.05 || tlo > 1.05 {
				t.Errorf("goal missed at %.0f%%: the default's p99 is worse than HAProxy leastconn's", run.load*100)
			}
		}
	}
	t.Logf("results (TTFT over streaming requests, e2e over all):\n%s", table.String())
	for _, g := range goals {
		t.Log(g)
	}
}

// summarize takes the requests that arrived after the warm-up.
func summarize(name string, arrivals []Arrival, res []result) row {
	r := row{name: name}
	var ttft, e2e []time.Duration
	slow := 0
	for i, a := range arrivals {
		if a.At < warmup {
			continue
		}
		x := res[i]
		r.n++
		if x.err != nil {
			r.errs++
			continue
		}
		e2e = append(e2e, x.e2e)
		if x.stream {
			ttft = append(ttft, x.ttft)
		}
		if strings.HasPrefix(x.instance, "slow") {
			slow++
		}
	}
	r.ttft, r.e2e = ttft, e2e
	r.ttft50, r.ttft99 = Percentile(ttft, 50), Percentile(ttft, 99)
	r.e2e50, r.e2e99 = Percentile(e2e, 50), Percentile(e2e, 99)
	if n := r.n - r.errs; n > 0 {
		r.slowShare = float64(slow) / float64(n)
	}
	return r
}

// drive sends the arrivals to base open-loop: each at its time whatever
// the others are doing, latency counted from its scheduled time (so a
// generator that falls behind cannot hide queueing).
func drive(base string, arrivals []Arrival, atWarmup func()) []result {
	client, closeIdle := LoadClient()
	defer closeIdle()
	res := make([]result, len(arrivals))
	if atWarmup != nil {
		w := time.AfterFunc(warmup, atWarmup)
		defer w.Stop()
	}
	OpenLoop(len(arrivals), func(i int) time.Duration { return arrivals[i].At }, func(i int, at time.Time) {
		res[i] = send(client, base, arrivals[i].Stream, at, i)
	})
	return res
}

// send issues one Ollama /api/generate request.
func send(client *http.Client, base string, stream bool, at time.Time, i int) result {
	r := result{stream: stream}
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	body := fmt.Sprintf(`{"model":"qwen2:0.5b","prompt":"request %d: tell me about tides","stream":%t}`, i, stream)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/api/generate", strings.NewReader(body))
	if err != nil {
		r.err = err
		return r
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		r.err = err
		return r
	}
	defer resp.Body.Close()
	r.instance = resp.Header.Get(sim.InstanceHeader)
	if resp.StatusCode != http.StatusOK {
		r.err = fmt.Errorf("status %s", resp.Status)
		return r
	}
	if stream {
		br := bufio.NewReader(resp.Body)
		line, err := br.ReadBytes('\n')
		if err != nil || !bytes.Contains(line, []byte(`"done":false`)) {
			r.err = fmt.Errorf("first chunk %q: %v", line, err)
			return r
		}
		r.ttft = time.Since(at)
		if _, err := io.Copy(io.Discard, br); err != nil {
			r.err = err
			return r
		}
	} else if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		r.err = err
		return r
	}
	r.e2e = time.Since(at)
	return r
}

// gatewayBalancer runs the built-in gateway in this process on a loopback
// socket with policy; withScrape adds the direct /metrics scrape every
// 250 ms (the configuration the default policy is meant to run with).
func gatewayBalancer(policy string, withScrape bool) func(t *testing.T, addrs []string) (string, func(), func()) {
	return func(t *testing.T, addrs []string) (string, func(), func()) {
		var src loadmetrics.Source
		if withScrape {
			src = loadmetrics.NewScrape(loadmetrics.ScrapeOptions{Timeout: 500 * time.Millisecond})
		}
		url, stop := startGateway(t, policy, src, addrs)
		return url, nil, stop
	}
}

// prometheusBalancer runs the default policy on metrics from a real
// Prometheus (Debian's package) scraping the simulators every 250 ms, and
// kills Prometheus when the warm-up ends: the measured part runs on the
// gateway's fallback (its own signals and the batch sizes learnt before).
func prometheusBalancer() func(t *testing.T, addrs []string) (string, func(), func()) {
	return func(t *testing.T, addrs []string) (string, func(), func()) {
		if promtest.Binary() == "" {
			t.Log("prometheus not found (Debian package `prometheus`): skipping the Prometheus row")
			return "", nil, func() {}
		}
		prom := promtest.Start(t, addrs, 250*time.Millisecond)
		prom.WaitFor(t, "vllm:num_requests_waiting", len(addrs), 20*time.Second)
		src, err := loadmetrics.NewPrometheus(loadmetrics.PrometheusOptions{Address: prom.URL, Timeout: 500 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		url, stop := startGateway(t, gateway.PolicyPrefixAware, src, addrs)
		return url, prom.Stop, func() {
			stop()
			prom.Stop()
		}
	}
}

// startGateway runs the built-in gateway in this process on a loopback
// socket with policy and, if src is not nil, metrics from src every 250 ms
// (waiting until every backend has fresh ones).
func startGateway(t *testing.T, policy string, src loadmetrics.Source, addrs []string) (string, func()) {
	opts := gateway.Options{Policy: policy}
	if src != nil {
		opts.Metrics, opts.MetricsInterval, opts.MetricsMaxAge = src, 250*time.Millisecond, time.Second
	}
	url, g, closeGateway := peer.StartGateway(t, opts, addrs)
	return url, func() {
		for _, b := range g.Backends() {
			t.Logf("  %s %s: %d requests, peak TTFT %v, peak latency %v, batch estimate %.1f", policy, b.Address,
				b.Requests, b.PeakTTFT.Round(time.Millisecond), b.PeakLatency.Round(time.Millisecond), b.Concurrency)
		}
		if src != nil {
			t.Logf("  signals at the end: %+v", g.SignalStatus()["bench"])
		}
		closeGateway()
		if src != nil {
			src.Close()
		}
	}
}

func haproxyBinary() string { return peer.HAProxyBinary() }

// haproxyBalancer runs HAProxy (a process of its own) with a configuration
// generated in a temporary directory, listening on loopback only.
func haproxyBalancer(bin string) func(t *testing.T, addrs []string) (string, func(), func()) {
	return func(t *testing.T, addrs []string) (string, func(), func()) {
		base, stop := peer.StartHAProxy(t, bin, func(listen string) string { return HAProxyConfig(listen, addrs) })
		return base, nil, stop
	}
}

func slowFactors(bs []Backend) []float64 {
	out := make([]float64, len(bs))
	for i, b := range bs {
		out[i] = b.SlowFactor
	}
	return out
}
