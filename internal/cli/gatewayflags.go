package cli

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/tidegpu/tidegpu/internal/gateway"
)

// tuningFlags are the gateway's limits, timeouts and CORS, the same flags on
// `tidegpu gateway` and `tidegpu up` (docs/guide.md, "Gateway limits").
type tuningFlags struct {
	maxBody          string
	readHeader, idle time.Duration
	backendHeader    time.Duration
	streamIdle       time.Duration
	corsOrigins      []string
	corsMethods      []string
	corsHeaders      []string
	corsExposed      []string
	corsMaxAge       time.Duration
	corsCredentials  bool
	// Fair share under saturation.
	backendMaxInFlight int
	backendQueue       int
	backendQueueWait   time.Duration
}

func (t *tuningFlags) register(f *pflag.FlagSet) {
	f.StringVar(&t.maxBody, "max-body-size", "8Mi", "largest request body the gateway takes (buffered for retries), as 8Mi, 64Mi or 20M; larger is answered 413")
	f.DurationVar(&t.readHeader, "read-header-timeout", gateway.DefaultReadHeaderTimeout, "time a client has to send its request headers")
	f.DurationVar(&t.idle, "idle-timeout", gateway.DefaultIdleTimeout, "a client's keep-alive connection idle this long is closed")
	f.DurationVar(&t.backendHeader, "backend-header-timeout", 0, "time a backend has to answer with its headers (0: no limit; Ollama answers a non-streamed request only when done)")
	f.DurationVar(&t.streamIdle, "stream-idle-timeout", 0, "abort an answer whose backend sends nothing for this long once it began (0: no limit)")
	f.StringArrayVar(&t.corsOrigins, "cors-allowed-origin", nil, "let browser pages of this origin (https://app.example.com, or *) call the gateway: preflights are answered by the gateway; repeat for several (none: CORS passes through to the backends)")
	f.StringSliceVar(&t.corsMethods, "cors-allowed-methods", nil, "with --cors-allowed-origin: methods a page may use (default GET,POST,HEAD)")
	f.StringSliceVar(&t.corsHeaders, "cors-allowed-headers", nil, "with --cors-allowed-origin: request headers a page may send, or * (default Accept,Authorization,Content-Type,X-Tidegpu-Pool)")
	f.StringSliceVar(&t.corsExposed, "cors-exposed-headers", nil, "with --cors-allowed-origin: response headers a page may read (default X-Tidegpu-Backend)")
	f.DurationVar(&t.corsMaxAge, "cors-max-age", 0, "with --cors-allowed-origin: how long a browser may cache a preflight's answer (0: the browser's default)")
	f.BoolVar(&t.corsCredentials, "cors-allow-credentials", false, "with --cors-allowed-origin: let pages send cookies and HTTP authentication (not with *)")
	f.IntVar(&t.backendMaxInFlight, "backend-max-inflight", 0, "most requests in flight on each backend (as vLLM's --max-num-seqs); beyond it requests wait at the gateway in the pool's fair queue, served across tenants by weight and priority (0: no cap)")
	f.IntVar(&t.backendQueue, "backend-queue", gateway.DefaultBackendQueue, "with --backend-max-inflight: most requests waiting per pool; beyond it the lowest-ranked is answered 429")
	f.DurationVar(&t.backendQueueWait, "backend-queue-wait", gateway.DefaultBackendQueueWait, "with --backend-max-inflight: a request waiting this long is answered 429")
}

// tuning checks the flags and returns them as a gateway.Tuning.
func (t *tuningFlags) tuning() (gateway.Tuning, error) {
	var errs []error
	out := gateway.Tuning{ReadHeaderTimeout: t.readHeader, IdleTimeout: t.idle,
		BackendHeaderTimeout: t.backendHeader, StreamIdleTimeout: t.streamIdle,
		BackendMaxInFlight: t.backendMaxInFlight, BackendQueue: t.backendQueue, BackendQueueWait: t.backendQueueWait}
	if t.backendMaxInFlight < 0 {
		errs = append(errs, fmt.Errorf("invalid --backend-max-inflight %d: want 0 (no cap) or more", t.backendMaxInFlight))
	}
	if t.backendQueue < 1 {
		errs = append(errs, fmt.Errorf("invalid --backend-queue %d: want 1 or more", t.backendQueue))
	}
	if t.backendQueueWait <= 0 {
		errs = append(errs, fmt.Errorf("invalid --backend-queue-wait %v: want more than 0", t.backendQueueWait))
	}
	q, err := resource.ParseQuantity(t.maxBody)
	switch {
	case err != nil:
		errs = append(errs, fmt.Errorf("invalid --max-body-size %q: want a size such as 8Mi, 64Mi or 20M", t.maxBody))
	case q.Value() <= 0:
		errs = append(errs, fmt.Errorf("invalid --max-body-size %q: must be more than 0", t.maxBody))
	default:
		out.MaxBodyBytes = q.Value()
	}
	for name, d := range map[string]time.Duration{"--read-header-timeout": t.readHeader, "--idle-timeout": t.idle,
		"--backend-header-timeout": t.backendHeader, "--stream-idle-timeout": t.streamIdle, "--cors-max-age": t.corsMaxAge} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("invalid %s %v: must not be negative", name, d))
		}
	}
	if t.readHeader == 0 || t.idle == 0 {
		errs = append(errs, errors.New("--read-header-timeout and --idle-timeout must be more than 0: a client could hold a connection forever"))
	}
	if len(t.corsOrigins) == 0 {
		if len(t.corsMethods)+len(t.corsHeaders)+len(t.corsExposed) > 0 || t.corsMaxAge != 0 || t.corsCredentials {
			errs = append(errs, errors.New("--cors-* flags need --cors-allowed-origin: name the origins allowed to call the gateway"))
		}
	} else {
		out.CORS = &gateway.CORS{AllowedOrigins: t.corsOrigins, AllowedMethods: t.corsMethods, AllowedHeaders: t.corsHeaders,
			ExposedHeaders: t.corsExposed, MaxAge: t.corsMaxAge, AllowCredentials: t.corsCredentials}
		if err := out.CORS.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("invalid --cors-* flags: %w", err))
		}
	}
	return out, errors.Join(errs...)
}
