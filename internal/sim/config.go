package sim

import (
	"math"
	"strings"
	"time"
)

// Default values used by [New] for zero fields of [Config].
const (
	DefaultModel         = "qwen2:0.5b"
	DefaultTTFT          = 20 * time.Millisecond
	DefaultTokenTime     = 5 * time.Millisecond
	DefaultBatchSlowdown = 0.05
	DefaultMaxBatch      = 8
	DefaultOutputTokens  = 32
	DefaultSlowFactor    = 1.0
	DefaultEmbeddingDim  = 768
)

// MaxEmbeddingDim caps Config.EmbeddingDim.
const MaxEmbeddingDim = 1 << 14

// MaxOutputTokens caps the number of tokens one request may ask for
// (options.num_predict, max_tokens, max_completion_tokens).
const MaxOutputTokens = 1 << 16

// Config is the speed and capacity of one simulated backend.
//
// Zero fields take their defaults (see [New]). Because zero means "default",
// a negative TTFT, TokenTime or BatchSlowdown means an explicit zero: no
// prefill delay, no per-token delay, or no batch slowdown respectively.
type Config struct {
	// Models are the served model names; default ["qwen2:0.5b"]. A name
	// without a tag also answers to name:latest, as in Ollama.
	Models []string
	// TTFT is the base time to first token (prefill); default 20ms.
	TTFT time.Duration
	// TokenTime is the base time per output token with one sequence
	// decoding; default 5ms.
	TokenTime time.Duration
	// BatchSlowdown makes the per-token time grow by this fraction per extra
	// running sequence: tpot = TokenTime*(1+BatchSlowdown*(running-1));
	// default 0.05.
	BatchSlowdown float64
	// MaxBatch is the maximum number of sequences decoding at once; beyond
	// it requests wait in a FIFO queue; default 8.
	MaxBatch int
	// MaxQueue is the maximum number of waiting requests; requests beyond it
	// get 503. 0 (or negative) means unlimited.
	MaxQueue int
	// OutputTokens is the number of tokens generated per answer unless the
	// request sets a limit (Ollama options.num_predict, OpenAI max_tokens or
	// max_completion_tokens), in which case exactly that many tokens are
	// generated (capped at MaxOutputTokens) and the answer ends with reason
	// "length"; default 32.
	OutputTokens int
	// SlowFactor multiplies TTFT and TokenTime (makes one backend slower);
	// default 1. Non-positive values mean the default.
	SlowFactor float64
	// EmbeddingDim is the dimension of the embedding vectors served by
	// /api/embed, /api/embeddings and /v1/embeddings; default 768, capped at
	// MaxEmbeddingDim. Non-positive values mean the default.
	EmbeddingDim int
	// PrefixCacheTokens is the capacity in tokens of the simulated prefix
	// cache (see prefixCache): prompts are tokenized, their leading blocks
	// already cached are not prefilled again, and vLLM's prefix-cache
	// counters are exported. 0 (or less than a block) means no cache.
	PrefixCacheTokens int
	// PrefixBlockTokens is the cache's block size in tokens; default
	// DefaultPrefixBlockTokens (16, vLLM's).
	PrefixBlockTokens int
	// PrefillTokensPerSecond is the prefill speed: each prompt token not
	// found in the prefix cache adds 1/PrefillTokensPerSecond seconds (times
	// SlowFactor) to the time to first token. 0 means prompt length costs
	// nothing (the prefill is TTFT alone).
	PrefillTokensPerSecond float64
	// InstanceID is reported in the X-Tidegpu-Instance response header and
	// in the tidegpu_sim_info metric.
	InstanceID string
}

// withDefaults returns cfg with zero fields replaced by defaults, negative
// "explicit zero" fields turned into zero, and model names cleaned up.
func (cfg Config) withDefaults() Config {
	out := cfg
	out.Models = nil
	seen := map[string]bool{}
	for _, m := range cfg.Models {
		m = strings.TrimSpace(m)
		if m == "" || seen[m] {
			continue
		}
		seen[m] = true
		out.Models = append(out.Models, m)
	}
	if len(out.Models) == 0 {
		out.Models = []string{DefaultModel}
	}
	switch {
	case cfg.TTFT == 0:
		out.TTFT = DefaultTTFT
	case cfg.TTFT < 0:
		out.TTFT = 0
	}
	switch {
	case cfg.TokenTime == 0:
		out.TokenTime = DefaultTokenTime
	case cfg.TokenTime < 0:
		out.TokenTime = 0
	}
	switch {
	case cfg.BatchSlowdown == 0:
		out.BatchSlowdown = DefaultBatchSlowdown
	case cfg.BatchSlowdown < 0 || math.IsNaN(cfg.BatchSlowdown):
		out.BatchSlowdown = 0
	case math.IsInf(cfg.BatchSlowdown, 1):
		out.BatchSlowdown = math.MaxFloat64
	}
	if cfg.MaxBatch <= 0 {
		out.MaxBatch = DefaultMaxBatch
	}
	if cfg.MaxQueue < 0 {
		out.MaxQueue = 0
	}
	if cfg.OutputTokens <= 0 {
		out.OutputTokens = DefaultOutputTokens
	}
	if out.OutputTokens > MaxOutputTokens {
		out.OutputTokens = MaxOutputTokens
	}
	if cfg.PrefixCacheTokens < 0 {
		out.PrefixCacheTokens = 0
	}
	if !(cfg.PrefillTokensPerSecond > 0) || math.IsInf(cfg.PrefillTokensPerSecond, 1) {
		out.PrefillTokensPerSecond = 0
	}
	if !(cfg.SlowFactor > 0) || math.IsInf(cfg.SlowFactor, 1) {
		out.SlowFactor = DefaultSlowFactor
	}
	return out
}

// embeddingDim returns the configured embedding dimension, or its default
// when unset, capped at MaxEmbeddingDim.
func (cfg Config) embeddingDim() int {
	switch {
	case cfg.EmbeddingDim <= 0:
		return DefaultEmbeddingDim
	case cfg.EmbeddingDim > MaxEmbeddingDim:
		return MaxEmbeddingDim
	}
	return cfg.EmbeddingDim
}
