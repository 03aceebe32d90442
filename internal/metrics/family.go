package metrics

import (
	"fmt"
	"strings"
)

// Family is the metric vocabulary of one inference server family: which
// gauges and histogram of its /metrics carry the signals the balancer reads.
// A family is data, not code; ParseExposition reads any of them the same
// way.
type Family struct {
	// Name is the family's name on the command line ("vllm", "sglang",
	// "tgi", "llamacpp").
	Name string
	// Server is the server's name for people ("vLLM").
	Server string
	// Queue is the gauge of requests waiting for a batch slot, summed over
	// label sets (models, engines, data-parallel ranks). Required: an
	// exposition without it has no load signal.
	Queue string
	// Running is the gauge of requests in the running batch, summed; ""
	// if the server has none.
	Running string
	// KVCache are the gauges of KV-cache usage, the first present wins
	// (a server renames them between versions); maxed over label sets.
	KVCache []string
	// KVCacheScale turns KVCache's unit into a fraction 0..1: 1 for a
	// fraction, 0.01 for a percentage.
	KVCacheScale float64
	// TTFT is the classic histogram of the time to first token, ""
	// if the server has none.
	TTFT string
	// TTFTScale turns TTFT's bucket bounds into seconds: 1 for seconds,
	// 0.001 for milliseconds.
	TTFTScale float64
	// SingleRank, if set, is a label whose series other than value "0" are
	// left out: ranks that report a copy of the same scheduler's state.
	SingleRank string
}

// The families read from backends. The names come from each server's own
// metric registration (see the sources named in family_test.go).
var (
	// FamilyVLLM is vLLM's (V1 engine; V0's KV-cache name as a fallback),
	// also served by TideGPU's simulator. Labels: model_name, engine (one
	// series per engine core with data parallelism).
	FamilyVLLM = Family{
		Name:         "vllm",
		Server:       "vLLM",
		Queue:        MetricQueueDepth,
		Running:      MetricRunning,
		KVCache:      []string{MetricKVCacheUsage, MetricKVCacheUsageV0},
		KVCacheScale: 1, // "1 means 100 percent usage", despite the name
		TTFT:         MetricTTFT,
		TTFTScale:    1,
	}
	// FamilySGLang is SGLang's scheduler and tokenizer metrics (served with
	// --enable-metrics). sglang:token_usage is a fraction of the KV pool.
	FamilySGLang = Family{
		Name:         "sglang",
		Server:       "SGLang",
		Queue:        "sglang:num_queue_reqs",
		Running:      "sglang:num_running_reqs",
		KVCache:      []string{"sglang:token_usage"},
		KVCacheScale: 1,
		TTFT:         "sglang:time_to_first_token_seconds",
		TTFTScale:    1,
		// Every tensor-parallel rank of one data-parallel group shares one
		// scheduler state; counting each would multiply the queue.
		SingleRank: "tp_rank",
	}
	// FamilyTGI is Hugging Face Text Generation Inference's router
	// metrics. TGI publishes no KV-cache gauge and no TTFT histogram.
	FamilyTGI = Family{
		Name:    "tgi",
		Server:  "TGI",
		Queue:   "tgi_queue_size",
		Running: "tgi_batch_current_size",
	}
	// FamilyLlamaCpp is llama.cpp's llama-server (served with --metrics):
	// deferred requests wait for a free slot. The KV-cache ratio is only
	// in some versions; there is no TTFT histogram.
	FamilyLlamaCpp = Family{
		Name:         "llamacpp",
		Server:       "llama.cpp",
		Queue:        "llamacpp:requests_deferred",
		Running:      "llamacpp:requests_processing",
		KVCache:      []string{"llamacpp:kv_cache_usage_ratio"},
		KVCacheScale: 1,
	}
)

// Families are the known families, in the order auto-detection tries them.
var Families = []Family{FamilyVLLM, FamilySGLang, FamilyTGI, FamilyLlamaCpp}

// FamilyAuto, as a family name, detects the family from each exposition.
const FamilyAuto = "auto"

// FamilyNames are the names LookupFamily accepts, auto first.
func FamilyNames() []string {
	out := []string{FamilyAuto}
	for _, f := range Families {
		out = append(out, f.Name)
	}
	return out
}

// LookupFamily returns the family called name; "" and "auto" return the
// zero Family, which means detection. Case-insensitive.
func LookupFamily(name string) (Family, error) {
	name = strings.ToLower(strings.TrimSpace(name))
	if name == "" || name == FamilyAuto {
		return Family{}, nil
	}
	for _, f := range Families {
		if f.Name == name {
			return f, nil
		}
	}
	return Family{}, fmt.Errorf("unknown metrics family %q: want one of %s", name, strings.Join(FamilyNames(), ", "))
}

// names returns every metric name the family reads.
func (f Family) names() []string {
	out := []string{f.Queue}
	if f.Running != "" {
		out = append(out, f.Running)
	}
	out = append(out, f.KVCache...)
	if f.TTFT != "" {
		out = append(out, f.TTFT)
	}
	return out
}

// expected describes, for an error, what an exposition of family f (or of
// any family, for the zero Family) must hold.
func expected(f Family) string {
	if f.Queue != "" {
		return fmt.Sprintf("%s (%s)", f.Queue, f.Server)
	}
	parts := make([]string, len(Families))
	for i, g := range Families {
		parts[i] = fmt.Sprintf("%s (%s)", g.Queue, g.Server)
	}
	return "one of " + strings.Join(parts, ", ")
}
