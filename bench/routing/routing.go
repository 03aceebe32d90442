// Package routingbench measures routing quality (issue 6, item 1): four
// simulated inference backends, one three times slower, behind one
// balancer at a time — the built-in gateway with each of its policies, and
// HAProxy with `balance leastconn` — under the same open-loop Poisson
// arrivals at 30 % and at 70 % of the pool's capacity, half of the requests
// streaming.
// It reports the p50 and p99 of time to first token and of end-to-end
// latency per balancer. This file holds the pure parts: the capacity of a
// simulated pool, the arrival schedule, percentiles and the HAProxy
// configuration; routing_test.go runs the experiment.
package routingbench

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// Backend is the latency model of one simulated backend, the fields of
// sim.Config that decide its speed (see internal/sim/latency.go).
type Backend struct {
	TTFT          time.Duration // base prefill time
	TokenTime     time.Duration // base time per output token, one sequence decoding
	BatchSlowdown float64       // per-token time grows by this per extra running sequence
	MaxBatch      int           // sequences decoding at once
	SlowFactor    float64       // multiplies TTFT and TokenTime
}

// Latency is the end-to-end time of one request of n output tokens while k
// sequences decode together, by the simulator's model:
//
//	SlowFactor × (TTFT + (n-1) × TokenTime × (1 + BatchSlowdown×(k-1)))
//
// Pure.
func (b Backend) Latency(n, k int) time.Duration {
	k = max(k, 1)
	decode := float64(max(n-1, 0)) * float64(b.TokenTime) * (1 + b.BatchSlowdown*float64(k-1))
	return time.Duration(b.slow() * (float64(b.TTFT) + decode))
}

func (b Backend) slow() float64 {
	if b.SlowFactor > 0 {
		return b.SlowFactor
	}
	return 1
}

// Capacity is the most requests per second the backend completes: a full
// batch (MaxBatch sequences) in flight at all times, each taking
// Latency(n, MaxBatch). Batching slows each sequence down but adds
// sequences faster than it slows them, so the full batch is the maximum.
// Pure.
func (b Backend) Capacity(n int) float64 {
	l := b.Latency(n, b.MaxBatch).Seconds()
	if l <= 0 || b.MaxBatch <= 0 {
		return math.Inf(1)
	}
	return float64(b.MaxBatch) / l
}

// PoolCapacity is the sum of the backends' capacities, requests per second.
// Pure.
func PoolCapacity(bs []Backend, n int) float64 {
	total := 0.0
	for _, b := range bs {
		total += b.Capacity(n)
	}
	return total
}

// Arrival is one scheduled request.
type Arrival struct {
	At     time.Duration // since the start of the run
	Stream bool          // streamed (NDJSON) or one JSON answer
}

// Schedule returns Poisson arrivals at rate per second over d: exponential
// gaps drawn from a PCG seeded with seed, each request streaming with
// probability streamShare. The same seed gives the same schedule, so every
// balancer sees the same load. Pure.
func Schedule(rate float64, d time.Duration, streamShare float64, seed uint64) []Arrival {
	if rate <= 0 || d <= 0 {
		return nil
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var out []Arrival
	t := 0.0
	for {
		t += rng.ExpFloat64() / rate
		at := time.Duration(t * float64(time.Second))
		if at >= d {
			return out
		}
		out = append(out, Arrival{At: at, Stream: rng.Float64() < streamShare})
	}
}

// Ratio returns a / b, 0 if b is not positive. Pure.
func Ratio(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// Millis formats d in whole milliseconds for the benches' tables. Pure.
func Millis(d time.Duration) string {
	return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
}

// Percentile returns the p-th percentile (0 < p ≤ 100) of xs by the
// nearest-rank method: the smallest value with at least p % of the values
// at or below it. 0 for no values. xs is not modified. Pure.
func Percentile(xs []time.Duration, p float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	rank = min(max(rank, 1), len(s))
	return s[rank-1]
}

// HAProxyConfig is an HAProxy configuration that listens on listen
// (host:port) and balances HTTP over servers with `balance leastconn`,
// keeping server connections alive and forwarding every chunk of a stream
// at once (option http-no-delay). Pure.
func HAProxyConfig(listen string, servers []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `global
    maxconn 4096

defaults
    mode http
    timeout connect 2s
    timeout client 120s
    timeout server 120s
    option http-keep-alive
    # Send each token as it comes: without this HAProxy asks the kernel to
    # coalesce small writes (MSG_MORE), which holds a stream's first token
    # for up to ~200 ms (docs.haproxy.org/2.6/configuration.html, "option
    # http-no-delay").
    option http-no-delay

frontend fe
    bind %s
    default_backend be

backend be
    balance leastconn
`, listen)
	for i, s := range servers {
		fmt.Fprintf(&b, "    server s%d %s\n", i, s)
	}
	return b.String()
}

// goalMargin is the share of the best possible ratio GoalRatio asks for
// where that best is below 2 (run-to-run noise and the batch slowdown keep
// a perfect router a few percent short of it: 1.94x of 2 measured).
const goalMargin = 0.85

// GoalRatio is how many times lower than round-robin's the default's p99
// (TTFT and end-to-end) must be on pool bs: 2 (issue 13), or, where no
// balancer can get there, goalMargin of the best any can. Round-robin
// sends each backend the same share, more than 1 %, so its p99 is at least
// the slowest backend's own latency, slowest/fastest SlowFactor times the
// fastest's; the best a balancer can do is the fastest's own latency. On a
// pool whose slowest backend is 2x slower that ratio is 2 at most (at low
// load, where nothing queues), so asking 2 would ask for the impossible.
// Pure.
func GoalRatio(bs []Backend) float64 {
	if len(bs) == 0 {
		return 2
	}
	lo, hi := bs[0].slow(), bs[0].slow()
	for _, b := range bs[1:] {
		lo, hi = min(lo, b.slow()), max(hi, b.slow())
	}
	return min(2, goalMargin*hi/lo)
}

// LoadClient is the load generators' HTTP client: keep-alive to the
// target, no compression, no proxy. close drops its idle connections.
func LoadClient() (client *http.Client, close func()) {
	tr := &http.Transport{MaxIdleConnsPerHost: 1024, DisableCompression: true, Proxy: nil}
	return &http.Client{Transport: tr}, tr.CloseIdleConnections
}

// OpenLoop is the benches' open-loop generator: it calls send(i, at) in a
// goroutine of its own at at = the start + offset(i), for i in 0..n-1
// (offsets ascending), whatever the earlier calls are doing, and returns
// when every call has. A caller counts latency from at, so a generator
// that falls behind cannot hide queueing.
func OpenLoop(n int, offset func(i int) time.Duration, send func(i int, at time.Time)) {
	var wg sync.WaitGroup
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	start := time.Now()
	for i := range n {
		at := start.Add(offset(i))
		if d := time.Until(at); d > 0 {
			timer.Reset(d)
			<-timer.C // pacing the open-loop generator, not a synchronisation
		}
		wg.Go(func() { send(i, at) })
	}
	wg.Wait()
}
