// Package fairsharebench measures fair share under saturation (issue 16,
// item 3): tenant A sends ten times tenant B's rate into a pool saturated
// by the gateway's per-backend cap (--backend-max-inflight); with the fair
// queue B's p99 latency must stay within 1.5x of B's alone, and A gets the
// rest. The same load through the same gateway without API keys (one
// tenant: the queue is FIFO) shows what the fair queue changes, and
// without the cap (the backends queue by themselves) what the cap does.
//
// The backends are `tidegpu sim`'s simulator (internal/sim) on loopback
// sockets, the gateway and the tenant middleware the product's own, in
// this process; arrivals are open-loop Poisson.
//
//	go test -count=1 -v ./bench/fairshare/                          # short: about 35 s
//	TIDEGPU_FAIRSHARE_SECONDS=30 go test -count=1 -v ./bench/fairshare/
//	TIDEGPU_FAIRSHARE_CONFIG=holdout TIDEGPU_FAIRSHARE_SECONDS=30 go test -count=1 -v ./bench/fairshare/
package fairsharebench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidegpu/tidegpu/bench/internal/peer"
	routingbench "github.com/tidegpu/tidegpu/bench/routing"

	"github.com/tidegpu/tidegpu/internal/gateway"
	"github.com/tidegpu/tidegpu/internal/sim"
	"github.com/tidegpu/tidegpu/internal/tenant"
)

// The experiment's parameters common to both configurations.
const (
	warmup       = 2 * time.Second
	seedA, seedB = 20261202, 20261203
	// goal is the issue's: B's p99 with A within 1.5x of B's alone,
	// asserted on the long run (30 s measured: about 180 of B's requests).
	goal = 1.5
	// shortGuard is what the short run (make test; 8 s, 48 of B's
	// requests, so its p99 is their slowest) asserts: a regression guard
	// that still tells the fair queue from FIFO (3.9-5.4x in the runs of
	// BENCHMARKS.md), not the goal.
	shortGuard = 2.0
)

// config is one pool and load. The gateway's headroom (internal/gateway,
// fairshare.go) was chosen on "issue"; "holdout" differs in everything
// (pool size, batch, lengths that vary per request, B streaming with
// weight 2, B's share of the pool) and was fixed before it was first run.
type config struct {
	name       string
	backends   int
	batch      int // the simulator's batch and the gateway's cap per backend
	ttft, tpot time.Duration
	// tokens: each request asks for a length drawn uniformly in
	// [minTokens, maxTokens] (num_predict); equal: every answer alike.
	minTokens, maxTokens int
	shareB               float64 // B's rate as a fraction of the pool's capacity; A sends 10x
	weightB              int
	streamB              bool
}

var configs = map[string]config{
	"issue":   {name: "issue", backends: 4, batch: 4, ttft: 40 * time.Millisecond, tpot: 20 * time.Millisecond, minTokens: 16, maxTokens: 16, shareB: 6 / 39.2, weightB: 1},
	"holdout": {name: "holdout", backends: 3, batch: 8, ttft: 60 * time.Millisecond, tpot: 15 * time.Millisecond, minTokens: 8, maxTokens: 40, shareB: 0.12, weightB: 2, streamB: true},
}

// configEnv picks the configuration (default issue).
const configEnv = "TIDEGPU_FAIRSHARE_CONFIG"

// secondsEnv sets the measured seconds of each run (default 8).
const secondsEnv = "TIDEGPU_FAIRSHARE_SECONDS"

const keyA, keyB = "bench-key-a", "bench-key-b"

// result is one request's outcome.
type result struct {
	tenant string
	at     time.Duration // scheduled, since the run's start
	e2e    time.Duration
	status int
	err    error
}

// summary is one tenant's part of a run.
type summary struct {
	n, ok, shed, errs int
	p50, p99          time.Duration
	// okPerSecond: answers that ended within the measured window, per
	// second of it (the throughput, not the arrivals), whenever sent.
	okPerSecond float64
}

func TestFairShare(t *testing.T) {
	measured := 8 * time.Second
	long := false
	if v := os.Getenv(secondsEnv); v != "" {
		long = true
		s, err := strconv.Atoi(v)
		if err != nil || s < 4 || s > 600 {
			t.Fatalf("%s=%q: want seconds in 4..600", secondsEnv, v)
		}
		measured = time.Duration(s) * time.Second
	}
	cfg := configs["issue"]
	if v := os.Getenv(configEnv); v != "" {
		c, ok := configs[v]
		if !ok {
			t.Fatalf("%s=%q: want issue or holdout", configEnv, v)
		}
		cfg = c
	}
	var addrs []string
	for i := range cfg.backends {
		s := sim.New(sim.Config{TTFT: cfg.ttft, TokenTime: cfg.tpot, MaxBatch: cfg.batch,
			OutputTokens: cfg.maxTokens, InstanceID: fmt.Sprint("sim-", i)})
		srv := httptest.NewServer(s)
		t.Cleanup(func() { srv.CloseClientConnections(); srv.Close(); s.Close() })
		addrs = append(addrs, srv.Listener.Addr().String())
	}
	keysFile := fmt.Sprintf("keys:\n- name: a\n  sha256: %s\n  tenant: team-a\n- name: b\n  sha256: %s\n  tenant: team-b\n  weight: %d\n",
		tenant.Hash(keyA), tenant.Hash(keyB), cfg.weightB)
	keys, err := tenant.Parse([]byte(keysFile))
	if err != nil {
		t.Fatal(err)
	}
	// Capacity at a full batch: the simulator's time per token grows 5 %
	// per extra sequence (its default BatchSlowdown).
	meanTokens := float64(cfg.minTokens+cfg.maxTokens) / 2
	service := cfg.ttft + time.Duration(meanTokens*float64(cfg.tpot)*(1+0.05*float64(cfg.batch-1)))
	capacity := float64(cfg.backends*cfg.batch) / service.Seconds()
	rateB := cfg.shareB * capacity
	t.Logf("config %s: %d simulators, cap %d in flight each; mean service at a full batch %v: capacity %.1f req/s; B %.1f req/s (%.0f %%, weight %d, stream %v), A %.1f req/s: offered %.0f %% of capacity",
		cfg.name, cfg.backends, cfg.batch, service, capacity, rateB, 100*cfg.shareB, cfg.weightB, cfg.streamB, 10*rateB, 100*11*cfg.shareB)

	total := warmup + measured
	arrB := routingbench.Schedule(rateB, total, 0, seedB)
	arrA := routingbench.Schedule(10*rateB, total, 0, seedA)
	// Each request's length, drawn once: B's requests are the same in
	// every run.
	lengths := rand.New(rand.NewPCG(seedA, seedB))
	lensB, lensA := make([]int, len(arrB)), make([]int, len(arrA))
	for _, l := range [][]int{lensB, lensA} {
		for i := range l {
			l[i] = cfg.minTokens + lengths.IntN(cfg.maxTokens-cfg.minTokens+1)
		}
	}

	type run struct {
		name      string
		keys      bool // tenant middleware with the keys file
		cap       int
		withA     bool
		assertion bool
	}
	runs := []run{
		{"B alone, fair queue", true, cfg.batch, false, false},
		{"A + B, fair queue", true, cfg.batch, true, true},
		{"A + B, FIFO (cap, no keys)", false, cfg.batch, true, false},
	}
	if long {
		runs = append(runs, run{"A + B, no cap (backends queue)", false, 0, true, false})
	}
	var table strings.Builder
	table.WriteString("| run | tenant | requests | ok | 429 | errors | p50 | p99 | ok/s |\n| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	var alone summary
	for _, r := range runs {
		url, stop := start(t, addrs, r.cap, r.keys, keys)
		var arrivals []arrival
		for i, a := range arrB {
			arrivals = append(arrivals, arrival{tenant: "B", key: keyB, at: a.At, tokens: lensB[i], stream: cfg.streamB})
		}
		if r.withA {
			for i, a := range arrA {
				arrivals = append(arrivals, arrival{tenant: "A", key: keyA, at: a.At, tokens: lensA[i]})
			}
		}
		res := drive(url, arrivals)
		stop()
		sums := map[string]summary{}
		for _, who := range []string{"B", "A"} {
			if who == "A" && !r.withA {
				continue
			}
			s := summarize(res, who, measured)
			sums[who] = s
			fmt.Fprintf(&table, "| %s | %s | %d | %d | %d | %d | %s | %s | %.1f |\n", r.name, who, s.n, s.ok, s.shed, s.errs, ms(s.p50), ms(s.p99), s.okPerSecond)
			if s.errs > 0 && r.cap > 0 {
				// Without the cap the backends' own queues grow without
				// bound and requests time out (1 min): the row shows it.
				t.Errorf("%s: %s had %d failed requests (not 429)", r.name, who, s.errs)
			}
		}
		b := sums["B"]
		if !r.withA {
			alone = b
			if b.shed > 0 {
				t.Errorf("%s: %d requests shed with the pool not saturated", r.name, b.shed)
			}
			continue
		}
		ratio := float64(b.p99) / float64(alone.p99)
		t.Logf("%s: B's p99 %s vs %s alone: %.2fx; B shed %d; A served %.1f req/s", r.name, ms(b.p99), ms(alone.p99), ratio, b.shed, sums["A"].okPerSecond)
		if r.assertion {
			limit := goal
			if !long {
				limit = shortGuard
			}
			if ratio > limit || b.shed > 0 {
				t.Errorf("goal missed: with A at 10x, B's p99 is %.2fx its p99 alone (at most %.1f on this run's length; the goal, on the long run, %.1f), %d of B's requests shed (goal 0)", ratio, limit, goal, b.shed)
			}
			// A gets the rest: the capacity B leaves, within 15 %.
			if rest := capacity - sums["B"].okPerSecond; sums["A"].okPerSecond < 0.85*rest {
				t.Errorf("A served %.1f req/s, want at least 85 %% of the %.1f req/s B leaves", sums["A"].okPerSecond, rest)
			}
		}
	}
	t.Logf("results (e2e latency from the scheduled arrival, first %v unmeasured; %v measured):\n%s", warmup, measured, table.String())
}

type arrival struct {
	tenant, key string
	at          time.Duration
	tokens      int  // num_predict
	stream      bool // NDJSON stream; latency to its end
}

// start runs the product's gateway (cap maxInFlight per backend, 0: none)
// in this process, behind the tenant middleware with keys if withKeys, on a
// loopback socket.
func start(t *testing.T, addrs []string, maxInFlight int, withKeys bool, keys *tenant.Keys) (string, func()) {
	var front func(*gateway.Gateway) (http.Handler, error)
	if withKeys {
		front = func(g *gateway.Gateway) (http.Handler, error) { return tenant.Middleware(g, keys, tenant.Options{}) }
	}
	url, _, stop := peer.StartGatewayBehind(t, gateway.Options{BackendMaxInFlight: maxInFlight, BackendQueue: 64, BackendQueueWait: 20 * time.Second}, addrs, front)
	return url, stop
}

// drive sends the arrivals open-loop: each at its time whatever the others
// are doing, latency counted from its scheduled time.
func drive(base string, arrivals []arrival) []result {
	client, closeIdle := routingbench.LoadClient()
	defer closeIdle()
	// In time order across both tenants.
	sortByAt(arrivals)
	res := make([]result, len(arrivals))
	routingbench.OpenLoop(len(arrivals), func(i int) time.Duration { return arrivals[i].at }, func(i int, at time.Time) {
		res[i] = send(client, base, arrivals[i], at)
	})
	return res
}

func sortByAt(as []arrival) {
	for i := 1; i < len(as); i++ { // insertion sort: two sorted runs
		for j := i; j > 0 && as[j].at < as[j-1].at; j-- {
			as[j], as[j-1] = as[j-1], as[j]
		}
	}
}

func send(client *http.Client, base string, a arrival, at time.Time) result {
	r := result{tenant: a.tenant, at: a.at}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	body := fmt.Sprintf(`{"model":"qwen2:0.5b","prompt":"tell me about tides","stream":%v,"options":{"num_predict":%d}}`, a.stream, a.tokens)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/api/generate", strings.NewReader(body))
	if err != nil {
		r.err = err
		return r
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+a.key)
	resp, err := client.Do(req)
	if err != nil {
		r.err = err
		return r
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	r.status, r.err, r.e2e = resp.StatusCode, err, time.Since(at)
	return r
}

// summarize takes who's requests scheduled after the warm-up.
func summarize(res []result, who string, measured time.Duration) summary {
	var s summary
	var lat []time.Duration
	done := 0
	for _, x := range res {
		if x.tenant != who {
			continue
		}
		// Throughput: every answer that ended inside the window, whenever
		// it was sent (counting only those sent after the warm-up missed
		// the answers of the first seconds of the window, as many as the
		// latency is long: A's 2 s were a quarter of a short run).
		if x.err == nil && x.status == http.StatusOK {
			if end := x.at + x.e2e; end >= warmup && end < warmup+measured {
				done++
			}
		}
		if x.at < warmup {
			continue
		}
		s.n++
		switch {
		case x.err != nil:
			s.errs++
		case x.status == http.StatusTooManyRequests:
			s.shed++
		case x.status != http.StatusOK:
			s.errs++
		default:
			s.ok++
			lat = append(lat, x.e2e)
		}
	}
	s.p50, s.p99 = routingbench.Percentile(lat, 50), routingbench.Percentile(lat, 99)
	s.okPerSecond = float64(done) / measured.Seconds()
	return s
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }
