// Package prefixbench measures prefix-cache-aware routing (issue 14): four
// simulated backends with a prefix (KV) cache and a prefill cost per
// uncached prompt token, a shared-prefix chat workload (many tenants with
// long system prompts, multi-turn conversations with think time, open-loop
// arrivals), and one balancer at a time in front — the gateway's
// round-robin, p2c and default policies, HAProxy leastconn and HAProxy
// consistent hashing on a header. It reports TTFT p50/p90/p99, end-to-end
// p99, output tokens per second and the backends' prefix-cache hit rate,
// at 50 % and 80 % of the pool's capacity. This file holds the pure parts:
// the workload, its capacity and the HAProxy configurations;
// prefix_test.go runs the experiment.
package prefixbench

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Message is one chat message.
type Message struct {
	Role, Content string
}

// Conversation is one chat of a tenant: its messages, system prompt first,
// then user and assistant in turns (the assistant's answers are written
// by the workload, as a client would send back what it was answered).
type Conversation struct {
	ID, Tenant int
	Messages   []Message
}

// Turn is one scheduled request: turn Index (from 0) of conversation Conv,
// whose prompt is Conv.Messages[:2+2*Index].
type Turn struct {
	At    time.Duration // since the start of the run
	Conv  *Conversation
	Index int
}

// Prompt returns the turn's messages: the system prompt, the history and
// the new user message.
func (t Turn) Prompt() []Message { return t.Conv.Messages[:2+2*t.Index] }

// Workload is the shape of the shared-prefix chat workload. Text is made
// of three-letter words after a space: one token each for the simulator's
// tokenizer (and about one for real ones).
type Workload struct {
	Tenants         int           // distinct system prompts
	SystemTokens    int           // words per system prompt
	Turns           int           // turns per conversation
	UserTokens      int           // words per user message
	AssistantTokens int           // words per assistant answer in the history
	Think           time.Duration // mean think time between turns (exponential)
	// Skew is the exponent of the tenants' Zipf-like popularity: tenant i
	// starts conversations in proportion to 1/(i+1)^Skew.
	Skew float64
}

// words returns n words from rng.
func words(rng *rand.Rand, n int) string {
	var b strings.Builder
	b.Grow(4 * n)
	for range n {
		b.WriteByte(' ')
		for range 3 {
			b.WriteByte(byte('a' + rng.IntN(26)))
		}
	}
	return b.String()
}

// Schedule returns the turns of conversations starting as a Poisson
// process at convRate per second over d, in time order: turn k of a
// conversation comes a think time (exponential, mean w.Think) after turn
// k-1's scheduled time — open loop, whatever the answers' latency, so
// every balancer sees the same requests at the same times. Turns beyond d
// are dropped. The same seed gives the same schedule. Pure.
func (w Workload) Schedule(convRate float64, d time.Duration, seed uint64) []Turn {
	rng := rand.New(rand.NewPCG(seed, seed^0x2545f4914f6cdd1d))
	systems := make([]string, w.Tenants)
	cum := make([]float64, w.Tenants)
	total := 0.0
	for i := range systems {
		trng := rand.New(rand.NewPCG(seed+uint64(i)+1, uint64(i)))
		systems[i] = fmt.Sprintf("You are the assistant of tenant %d.", i) + words(trng, w.SystemTokens)
		total += 1 / math.Pow(float64(i+1), w.Skew)
		cum[i] = total
	}
	var out []Turn
	t := 0.0
	for id := 0; ; id++ {
		t += rng.ExpFloat64() / convRate
		start := time.Duration(t * float64(time.Second))
		if start >= d {
			break
		}
		tenant, _ := slices.BinarySearch(cum, rng.Float64()*total)
		tenant = min(tenant, w.Tenants-1)
		c := &Conversation{ID: id, Tenant: tenant, Messages: []Message{{"system", systems[tenant]}}}
		at := start
		for k := range w.Turns {
			if k > 0 {
				at += time.Duration(rng.ExpFloat64() * float64(w.Think))
			}
			c.Messages = append(c.Messages,
				Message{"user", fmt.Sprintf("Question %d:", k) + words(rng, w.UserTokens)},
				Message{"assistant", words(rng, w.AssistantTokens)})
			if at < d {
				out = append(out, Turn{At: at, Conv: c, Index: k})
			}
		}
	}
	slices.SortStableFunc(out, func(a, b Turn) int { return int(a.At - b.At) })
	return out
}

// RequestsPerConversation is the mean number of turns of a conversation
// that fall inside a run (all of them, for runs much longer than a
// conversation).
func (w Workload) RequestsPerConversation() float64 { return float64(w.Turns) }

// NewTokens is the mean number of prompt tokens of a turn that a backend
// which served the conversation's previous turns (and holds the tenant's
// system prompt) has not seen: the new user message and, after the first
// turn, the previous answer. Pure.
func (w Workload) NewTokens() float64 {
	if w.Turns <= 0 {
		return 0
	}
	return float64(w.UserTokens) + float64(w.AssistantTokens)*float64(w.Turns-1)/float64(w.Turns)
}

// Backend is the latency model of one simulated backend (see
// internal/sim/latency.go).
type Backend struct {
	TTFT          time.Duration // base prefill time
	PrefillRate   float64       // uncached prompt tokens per second
	TokenTime     time.Duration // per output token, one sequence
	BatchSlowdown float64       // per extra running sequence
	MaxBatch      int
	OutputTokens  int
}

// SlotTime is how long one request holds a batch slot when uncached of its
// prompt tokens are prefilled and the batch is full:
//
//	TTFT + uncached/PrefillRate + (OutputTokens-1) × TokenTime × (1 + BatchSlowdown×(MaxBatch-1))
//
// Pure.
func (b Backend) SlotTime(uncached float64) time.Duration {
	prefill := float64(b.TTFT) + uncached/b.PrefillRate*float64(time.Second)
	decode := float64(max(b.OutputTokens-1, 0)) * float64(b.TokenTime) * (1 + b.BatchSlowdown*float64(b.MaxBatch-1))
	return time.Duration(prefill + decode)
}

// Capacity is the requests per second n such backends complete with full
// batches when each request prefills only uncached tokens — the capacity
// of ideal routing, where every turn finds its history cached. A balancer
// that makes backends prefill more has less. Pure.
func Capacity(b Backend, n int, uncached float64) float64 {
	return float64(n*b.MaxBatch) / b.SlotTime(uncached).Seconds()
}

// Session and tenant headers the load generator sends, for HAProxy's
// hashing (the gateway reads the body instead).
const (
	SessionHeader = "X-Session-Id"
	TenantHeader  = "X-Tenant-Id"
)

// HAProxyConfig is an HAProxy configuration listening on listen and
// balancing over servers with balance (e.g. "leastconn", or
// "hdr(X-Session-Id)" with hashType "consistent"); hashBalanceFactor, if
// not 0, bounds each server's load to that percentage of the average
// (HAProxy's consistent hashing with bounded loads). Keep-alive and
// http-no-delay as in bench/routing. Pure.
func HAProxyConfig(listen string, servers []string, balance, hashType string, hashBalanceFactor int) string {
	var b strings.Builder
	fmt.Fprintf(&b, `global
    maxconn 4096

defaults
    mode http
    timeout connect 2s
    timeout client 300s
    timeout server 300s
    option http-keep-alive
    option http-no-delay

frontend fe
    bind %s
    default_backend be

backend be
    balance %s
`, listen, balance)
	if hashType != "" {
		fmt.Fprintf(&b, "    hash-type %s\n", hashType)
	}
	if hashBalanceFactor > 0 {
		fmt.Fprintf(&b, "    hash-balance-factor %d\n", hashBalanceFactor)
	}
	for i, s := range servers {
		fmt.Fprintf(&b, "    server s%d %s\n", i, s)
	}
	return b.String()
}
