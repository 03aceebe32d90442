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

// bootstrapRounds is how many resamples PercentileRatioInterval draws:
// enough that the interval's ends move by well under a percent between
// seeds on the benches' ~900-request samples.
const bootstrapRounds = 2000

// PercentileRatioInterval is a bootstrap interval for the ratio of the
// p-th percentiles of a and b: both are resampled with replacement
// bootstrapRounds times (a PCG seeded with seed, so the same samples give
// the same interval) and lo and hi are the ratios at the (100-conf)/2-th
// and (100+conf)/2-th percentiles of the resampled ratios. A p99 of ~900
// requests is the 9th-worst request: where both sides send a few percent
// of their requests to one slow backend, it is one draw of that backend's
// latency, so a point ratio of two p99s moves by ±10 % run to run with
// nothing changed. A goal "a is no more than x times b" is missed when lo
// is above x: worse beyond what this run can tell from noise. 0, 0 when
// either side has no samples. Pure.
func PercentileRatioInterval(a, b []time.Duration, p, conf float64, seed uint64) (lo, hi float64) {
	if len(a) == 0 || len(b) == 0 {
		return 0, 0
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x6a09e667f3bcc909))
	ra, rb := make([]time.Duration, len(a)), make([]time.Duration, len(b))
	ratios := make([]float64, 0, bootstrapRounds)
	for range bootstrapRounds {
		for i := range ra {
			ra[i] = a[rng.IntN(len(a))]
		}
		for i := range rb {
			rb[i] = b[rng.IntN(len(b))]
		}
		if pb := Percentile(rb, p); pb > 0 {
			ratios = append(ratios, Ratio(Percentile(ra, p), pb))
		}
	}
	if len(ratios) == 0 {
		return 0, 0
	}
	slices.Sort(ratios)
	at := func(q float64) float64 {
		i := int(math.Round(q / 100 * float64(len(ratios)-1)))
		return ratios[min(max(i, 0), len(ratios)-1)]
	}
	return at((100 - conf) / 2), at((100 + conf) / 2)
}
