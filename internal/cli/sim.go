package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/tidegpu/tidegpu/internal/sim"
)

// simShutdownTimeout bounds the graceful shutdown of `tidegpu sim`.
const simShutdownTimeout = 5 * time.Second

// simOptions are the flags of `tidegpu sim`.
type simOptions struct {
	addr              string
	loadTime          time.Duration
	models            []string
	ttft              time.Duration
	tokenTime         time.Duration
	batchSlowdown     float64
	maxBatch          int
	maxQueue          int
	outputTokens      int
	slowFactor        float64
	embeddingDim      int
	prefixCacheTokens int
	prefixBlockTokens int
	prefillRate       float64
	instanceID        string
}

// NewSimCommand returns the `tidegpu sim` command: an inference backend
// simulator speaking the Ollama and OpenAI HTTP APIs (see package sim). It
// serves until SIGINT or SIGTERM, then shuts down gracefully, letting
// in-flight requests finish for at most 5 seconds.
func NewSimCommand() *cobra.Command {
	o := &simOptions{}
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Run a simulated LLM inference backend (Ollama and OpenAI APIs)",
		Long: `Run a simulated LLM inference backend speaking the Ollama API (/api/chat,
/api/generate, /api/embed, /api/show, /api/tags, ...) and the OpenAI API
(/v1/chat/completions, /v1/completions, /v1/responses, /v1/embeddings,
/v1/models), with vLLM-style Prometheus metrics at /metrics and a readiness
probe at /healthz.

Embeddings are deterministic unit vectors of --embedding-dim values derived
from a hash of the text, answered at once outside the batch queue.

Requests wait in a FIFO queue for one of --max-batch batch slots, then take
--ttft to the first token and --token-time per further token, slowed down by
--batch-slowdown per additional running sequence and multiplied by
--slow-factor.

The listen address is --addr, or 127.0.0.1:$TIDEGPU_PORT when --addr is not
given and TIDEGPU_PORT is set.`,
		Example: `  tidegpu sim
  tidegpu sim --addr 127.0.0.1:8001 --model qwen2:0.5b --model llama3.2:1b --max-batch 4
  TIDEGPU_PORT=8002 tidegpu sim --slow-factor 2 --instance-id gpu-b`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runSim(cmd, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.addr, "addr", "127.0.0.1:11434", "listen address host:port; when not given and TIDEGPU_PORT is set, 127.0.0.1:$TIDEGPU_PORT")
	f.StringArrayVar(&o.models, "model", nil, "served model name; repeat for several (default "+sim.DefaultModel+")")
	f.DurationVar(&o.ttft, "ttft", sim.DefaultTTFT, "base time to first token (prefill)")
	f.DurationVar(&o.tokenTime, "token-time", sim.DefaultTokenTime, "base time per output token with one sequence decoding")
	f.Float64Var(&o.batchSlowdown, "batch-slowdown", sim.DefaultBatchSlowdown, "per-token time grows by this fraction per extra running sequence")
	f.IntVar(&o.maxBatch, "max-batch", sim.DefaultMaxBatch, "maximum sequences decoding at once; more requests wait in a FIFO queue")
	f.IntVar(&o.maxQueue, "max-queue", 0, "maximum waiting requests, beyond which requests get 503 (0 = unlimited)")
	f.IntVar(&o.outputTokens, "output-tokens", sim.DefaultOutputTokens, "tokens generated per answer unless the request sets a limit")
	f.Float64Var(&o.slowFactor, "slow-factor", sim.DefaultSlowFactor, "multiplies --ttft and --token-time (makes this backend slower)")
	f.IntVar(&o.prefixCacheTokens, "prefix-cache-tokens", 0, "capacity in tokens of the simulated prefix (KV) cache, LRU-evicted; exports vllm:prefix_cache_queries_total/hits_total (0 = no cache)")
	f.IntVar(&o.prefixBlockTokens, "prefix-block-tokens", sim.DefaultPrefixBlockTokens, "block size of the prefix cache in tokens")
	f.Float64Var(&o.prefillRate, "prefill-tokens-per-second", 0, "prefill speed: each prompt token not in the prefix cache adds 1/N s (times --slow-factor) to the time to first token (0 = prompt length costs nothing)")
	f.IntVar(&o.embeddingDim, "embedding-dim", sim.DefaultEmbeddingDim, "dimension of the deterministic embedding vectors (/api/embed, /api/embeddings, /v1/embeddings)")
	f.DurationVar(&o.loadTime, "load-time", 0, "time before the server listens, as a model load at an instance's cold start")
	f.StringVar(&o.instanceID, "instance-id", os.Getenv("TIDEGPU_INSTANCE_ID"), "instance id reported in the X-Tidegpu-Instance header and metrics; defaults to $TIDEGPU_INSTANCE_ID")
	return cmd
}

// config validates the options and turns them into a sim.Config.
func (o *simOptions) config() (sim.Config, error) {
	for _, m := range o.models {
		if strings.TrimSpace(m) == "" || strings.ContainsAny(m, " \t\r\n") {
			return sim.Config{}, fmt.Errorf("invalid --model %q: must be a non-empty name without spaces", m)
		}
	}
	switch {
	case o.ttft < 0:
		return sim.Config{}, fmt.Errorf("invalid --ttft %v: must not be negative", o.ttft)
	case o.tokenTime < 0:
		return sim.Config{}, fmt.Errorf("invalid --token-time %v: must not be negative", o.tokenTime)
	case !(o.batchSlowdown >= 0) || o.batchSlowdown > 1e6:
		return sim.Config{}, fmt.Errorf("invalid --batch-slowdown %v: must be between 0 and 1e6", o.batchSlowdown)
	case o.maxBatch < 1:
		return sim.Config{}, fmt.Errorf("invalid --max-batch %d: must be at least 1", o.maxBatch)
	case o.maxQueue < 0:
		return sim.Config{}, fmt.Errorf("invalid --max-queue %d: must not be negative (0 = unlimited)", o.maxQueue)
	case o.outputTokens < 1 || o.outputTokens > sim.MaxOutputTokens:
		return sim.Config{}, fmt.Errorf("invalid --output-tokens %d: must be between 1 and %d", o.outputTokens, sim.MaxOutputTokens)
	case !(o.slowFactor > 0) || o.slowFactor > 1e6:
		return sim.Config{}, fmt.Errorf("invalid --slow-factor %v: must be greater than 0 and at most 1e6", o.slowFactor)
	case o.prefixCacheTokens < 0:
		return sim.Config{}, fmt.Errorf("invalid --prefix-cache-tokens %d: must not be negative (0 = no cache)", o.prefixCacheTokens)
	case o.prefixBlockTokens < 1 || o.prefixBlockTokens > 1<<16:
		return sim.Config{}, fmt.Errorf("invalid --prefix-block-tokens %d: must be between 1 and 65536", o.prefixBlockTokens)
	case o.prefixCacheTokens > 0 && o.prefixCacheTokens < o.prefixBlockTokens:
		return sim.Config{}, fmt.Errorf("invalid --prefix-cache-tokens %d: must hold at least one block of --prefix-block-tokens %d", o.prefixCacheTokens, o.prefixBlockTokens)
	case !(o.prefillRate >= 0) || o.prefillRate > 1e12:
		return sim.Config{}, fmt.Errorf("invalid --prefill-tokens-per-second %v: must be between 0 and 1e12 (0 = prompt length costs nothing)", o.prefillRate)
	case o.embeddingDim < 1 || o.embeddingDim > sim.MaxEmbeddingDim:
		return sim.Config{}, fmt.Errorf("invalid --embedding-dim %d: must be between 1 and %d", o.embeddingDim, sim.MaxEmbeddingDim)
	}
	cfg := sim.Config{
		Models:                 o.models,
		TTFT:                   o.ttft,
		TokenTime:              o.tokenTime,
		BatchSlowdown:          o.batchSlowdown,
		MaxBatch:               o.maxBatch,
		MaxQueue:               o.maxQueue,
		OutputTokens:           o.outputTokens,
		SlowFactor:             o.slowFactor,
		EmbeddingDim:           o.embeddingDim,
		PrefixCacheTokens:      o.prefixCacheTokens,
		PrefixBlockTokens:      o.prefixBlockTokens,
		PrefillTokensPerSecond: o.prefillRate,
		InstanceID:             o.instanceID,
	}
	// In sim.Config zero means "default" and negative means an explicit
	// zero; on the command line 0 means 0.
	if cfg.TTFT == 0 {
		cfg.TTFT = -1
	}
	if cfg.TokenTime == 0 {
		cfg.TokenTime = -1
	}
	if cfg.BatchSlowdown == 0 {
		cfg.BatchSlowdown = -1
	}
	return cfg, nil
}

// listenAddr returns --addr, or 127.0.0.1:$TIDEGPU_PORT when --addr was not
// given and TIDEGPU_PORT is set.
func (o *simOptions) listenAddr(cmd *cobra.Command) (string, error) {
	if cmd.Flags().Changed("addr") {
		if _, _, err := net.SplitHostPort(o.addr); err != nil {
			return "", fmt.Errorf("invalid --addr %q: %v", o.addr, err)
		}
		return o.addr, nil
	}
	if port, ok := os.LookupEnv("TIDEGPU_PORT"); ok && port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 0 || n > 65535 {
			return "", fmt.Errorf("invalid TIDEGPU_PORT %q: must be a port number 0-65535 (or pass --addr)", port)
		}
		return net.JoinHostPort("127.0.0.1", strconv.Itoa(n)), nil
	}
	return o.addr, nil
}

func runSim(cmd *cobra.Command, o *simOptions) error {
	cfg, err := o.config()
	if err != nil {
		return err
	}
	addr, err := o.listenAddr(cmd)
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	if o.loadTime > 0 {
		// The model load of a cold start: nothing listens until it is done.
		select {
		case <-time.After(o.loadTime):
		case <-ctx.Done():
			return nil
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on --addr %s: %w", addr, err)
	}
	s := sim.New(cfg)
	defer s.Close()
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	fmt.Fprintf(cmd.ErrOrStderr(), "tidegpu sim listening on %s\n", ln.Addr())

	select {
	case err := <-serveErr:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	stop() // a second signal kills the process the default way

	shutdownCtx, cancel := context.WithTimeout(context.Background(), simShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		// In-flight requests did not finish in time: abort them.
		s.Close()
		srv.Close()
		fmt.Fprintf(cmd.ErrOrStderr(), "tidegpu sim: graceful shutdown incomplete after %v: %v\n", simShutdownTimeout, err)
	}
	if err := <-serveErr; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}
