package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/tidegpu/tidegpu/internal/admin/guard"
	"github.com/tidegpu/tidegpu/internal/dashboard"
	"github.com/tidegpu/tidegpu/internal/gateway"
	"github.com/tidegpu/tidegpu/internal/gateway/kubesource"
	"github.com/tidegpu/tidegpu/internal/metrics"
	"github.com/tidegpu/tidegpu/internal/tenant"
	"github.com/tidegpu/tidegpu/internal/usage"
)

// gatewayShutdownTimeout bounds the graceful shutdown of `tidegpu gateway`:
// in-flight requests (streams included) get this long to finish.
const gatewayShutdownTimeout = 10 * time.Second

// staticPool is the pool name of the backends given with --backend.
const staticPool = "static"

// gatewayOptions are the flags of `tidegpu gateway`.
type gatewayOptions struct {
	backends   []string
	metrics    string
	family     string
	dcgmURL    string
	kubeconfig string
	// activatorQueue and activatorWait bound the requests held for a pool
	// at zero while it wakes.
	activatorQueue int
	activatorWait  time.Duration
	namespace      string
	addr           string
	adminAddr      string
	policy         string
	logLevel       string
	// Limits, timeouts and CORS (gatewayflags.go); where the tokens go.
	tuning   tuningFlags
	reportTo string

	// insecureAdmin serves a public --admin-addr without a token.
	insecureAdmin bool
	keysFile      string
}

// backendSource publishes the gateway's backends through publish and keeps
// them current until ctx ends, then returns nil. It returns an error if it
// cannot go on, which stops the gateway. publish has the semantics of
// gateway.Gateway.SetBackends (one call replaces one pool's set) and may be
// called from any goroutine.
//
// The static source (--backend) publishes once. A source following pools
// from the Kubernetes API (--kubeconfig) fits the same shape: it watches and
// publishes each pool's ready instances as they change.
type backendSource func(ctx context.Context, publish func(pool string, bs []gateway.Backend)) error

// staticSource publishes bs as pool "static" and then holds them unchanged.
func staticSource(bs []gateway.Backend) backendSource {
	return func(ctx context.Context, publish func(string, []gateway.Backend)) error {
		publish(staticPool, bs)
		<-ctx.Done()
		return nil
	}
}

// NewGatewayCommand returns the `tidegpu gateway` command: the built-in
// gateway as its own process, in front of a fixed set of backends. It serves
// until SIGINT or SIGTERM, then shuts down gracefully, letting in-flight
// requests finish for at most 10 seconds.
func NewGatewayCommand() *cobra.Command {
	o := &gatewayOptions{}
	cmd := &cobra.Command{
		Use:   "gateway --backend URL [--backend URL ...]",
		Short: "Run the built-in gateway alone, in front of fixed backends",
		Long: `Run TideGPU's built-in HTTP gateway as its own process in front of a fixed set
of backends (Ollama, vLLM or 'tidegpu sim'), with no pool behind it: for
benchmarks, and for users who run their inference servers themselves.

Each --backend is http://host:port. The backends form the pool "static" and get
the IDs static-0, static-1, ... in the order given; every response names the
one that answered in its X-Tidegpu-Backend header. The gateway sends each
request to one backend by --policy, retries requests that fail before any
response on another backend, probes every backend with GET / each second (backing off to
every 30 s while a backend idles unchanged; a request answered counts as a probe) and
stops sending to one that does not answer. It routes /ollama-chat to the
backend's /api/chat and passes /, /api/* and /v1/* through.

--admin-addr serves Prometheus metrics at /metrics and a liveness check at
/healthz; an empty --admin-addr turns it off. With TIDEGPU_ADMIN_TOKEN set,
every admin path but /healthz requires "Authorization: Bearer TOKEN"; an
--admin-addr beyond loopback is refused without a token unless
--insecure-admin is given.`,
		Example: `  tidegpu gateway --backend http://127.0.0.1:11434
  tidegpu gateway --addr 127.0.0.1:8000 --policy round-robin \
    --backend http://10.0.0.5:11434 --backend http://10.0.0.6:11434`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runGateway(cmd, o)
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&o.backends, "backend", nil, "backend base URL http://host:port; repeat for several (required)")
	f.StringVar(&o.metrics, "metrics", "scrape", "backend signals for balancing: scrape (each backend's /metrics), prometheus=URL (PromQL), or none (the gateway's own measurements)")
	f.StringVar(&o.family, "metrics-family", metrics.FamilyAuto, metricsFamilyUsage)
	f.StringVar(&o.dcgmURL, "dcgm-url", "", dcgmURLUsage)
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "follow the TidePools' Ready instances from this cluster (in a pod, the service account is used when no --backend is given)")
	addActivatorFlags(f, &o.activatorQueue, &o.activatorWait)
	f.StringVar(&o.keysFile, "keys-file", "", keysFileUsage+" (in a cluster, mount it from a Secret)")
	f.StringVar(&o.namespace, "namespace", "", "with --kubeconfig: only this namespace's pools (default all)")
	f.StringVar(&o.addr, "addr", "127.0.0.1:8000", "address the gateway listens on")
	f.StringVar(&o.adminAddr, "admin-addr", "127.0.0.1:9091", "address serving /metrics and /healthz (loopback unless you mean it); empty to disable")
	f.BoolVar(&o.insecureAdmin, "insecure-admin", false, "serve an --admin-addr beyond loopback without a token (only when something else guards it)")
	f.StringVar(&o.policy, "policy", gateway.PolicyPrefixAware, "balancing policy: "+strings.Join(gateway.PolicyNames, ", "))
	f.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	o.tuning.register(f)
	f.StringVar(&o.reportTo, "report-usage-to", "", "send the tokens served and busy time to the operator's admin API at this URL (http://host:port; token from TIDEGPU_ADMIN_TOKEN) for its cost ledger")
	return cmd
}

// metricsFamilyUsage is the help of --metrics-family (gateway and up).
var metricsFamilyUsage = "metric names the backends serve: " + strings.Join(metrics.FamilyNames(), ", ") +
	" (auto detects each backend's from its /metrics), or none (the gateway's own measurements, as for Ollama)"

// parseMetricsFamily reads --metrics-family: the family, or off for none.
func parseMetricsFamily(name string) (fam metrics.Family, off bool, err error) {
	if strings.EqualFold(strings.TrimSpace(name), "none") {
		return metrics.Family{}, true, nil
	}
	fam, err = metrics.LookupFamily(name)
	if err != nil {
		return fam, false, fmt.Errorf("invalid --metrics-family %q: want one of %s or none", name, strings.Join(metrics.FamilyNames(), ", "))
	}
	return fam, false, nil
}

// validate checks the flags that need no I/O.
func (o *gatewayOptions) validate() error {
	if _, _, err := parseMetricsFamily(o.family); err != nil {
		return err
	}
	if _, err := gateway.NewPolicy(o.policy); err != nil {
		return fmt.Errorf("invalid --policy %q: want one of %s", o.policy, strings.Join(gateway.PolicyNames, ", "))
	}
	if _, err := o.tuning.tuning(); err != nil {
		return err
	}
	if err := checkListenAddr(o.addr); err != nil {
		return fmt.Errorf("invalid --addr %q: %v", o.addr, err)
	}
	if o.adminAddr != "" {
		if err := checkListenAddr(o.adminAddr); err != nil {
			return fmt.Errorf("invalid --admin-addr %q: %v", o.adminAddr, err)
		}
	}
	return guard.CheckExposure("--admin-addr", o.adminAddr, os.Getenv(guard.TokenEnv), o.insecureAdmin)
}

// kube reports whether the backends come from the cluster's pools.
func (o *gatewayOptions) kube() bool {
	return o.kubeconfig != "" || (len(o.backends) == 0 && inCluster())
}

// source returns where the gateway's backends come from: the cluster's
// pools with --kubeconfig (or in a pod when no --backend is given), else the
// fixed --backend list.
func (o *gatewayOptions) source() (backendSource, error) {
	if o.kube() {
		if len(o.backends) > 0 {
			return nil, errors.New("--backend and --kubeconfig exclude each other: use one source of backends")
		}
		return kubeSource(o.kubeconfig, o.namespace), nil
	}
	bs, err := staticBackends(o.backends)
	if err != nil {
		return nil, err
	}
	return staticSource(bs), nil
}

// staticBackends turns the --backend URLs into the backends static-0..N-1 of
// pool "static".
func staticBackends(urls []string) ([]gateway.Backend, error) {
	if len(urls) == 0 {
		return nil, errors.New("no --backend given: pass at least one --backend http://host:port, or --kubeconfig to follow the pools of a cluster")
	}
	bs := make([]gateway.Backend, 0, len(urls))
	seen := make(map[string]bool, len(urls))
	for i, raw := range urls {
		addr, err := parseBackendURL(raw)
		if err != nil {
			return nil, fmt.Errorf("invalid --backend %q: %v", raw, err)
		}
		if seen[addr] {
			return nil, fmt.Errorf("invalid --backend %q: %s is given twice", raw, addr)
		}
		seen[addr] = true
		bs = append(bs, gateway.Backend{
			ID:      staticPool + "-" + strconv.Itoa(i),
			Pool:    staticPool,
			Address: addr,
			Weight:  gateway.DefaultWeight,
		})
	}
	return bs, nil
}

// parseBackendURL checks that raw is http://host:port (an optional trailing
// "/" allowed) and returns host:port.
func parseBackendURL(raw string) (string, error) {
	if !strings.Contains(raw, "://") {
		return "", errors.New("no http:// scheme: want http://host:port")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", errors.New("not a URL: want http://host:port")
	}
	switch {
	case u.Scheme != "http":
		return "", fmt.Errorf("scheme %q: want http (the gateway speaks plain HTTP to backends)", u.Scheme)
	case u.Opaque != "" || u.Host == "":
		return "", errors.New("no host: want http://host:port")
	case u.User != nil:
		return "", errors.New("user info is not supported: want http://host:port")
	case u.Path != "" && u.Path != "/", u.RawQuery != "", u.ForceQuery, u.Fragment != "":
		return "", errors.New("want http://host:port with no path, query or fragment (the gateway keeps the client's path)")
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		return "", errors.New("no port: want http://host:port")
	}
	if host == "" {
		return "", errors.New("no host: want http://host:port")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("port %q: want a number 1-65535", port)
	}
	return net.JoinHostPort(host, port), nil
}

// checkListenAddr checks that addr is host:port with a numeric port (host
// may be empty: all interfaces).
func checkListenAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("port %q: want a number 0-65535", port)
	}
	return nil
}

func runGateway(cmd *cobra.Command, o *gatewayOptions) error {
	if err := o.validate(); err != nil {
		return err
	}
	logger, err := newLogger(o.logLevel)
	if err != nil {
		return err
	}
	src, err := o.source()
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	tuning, _ := o.tuning.tuning() // checked by validate
	reg := prometheus.NewRegistry()
	reporter, err := o.usageReporter(logger, reg)
	if err != nil {
		return err
	}
	// Bind both first: a taken port fails before anything runs.
	lns, err := gateway.Listen(o.addr)
	if err != nil {
		return fmt.Errorf("listen on --addr %s: %w", o.addr, err)
	}
	for _, ln := range lns {
		defer ln.Close()
	}
	var adminLn net.Listener
	if o.adminAddr != "" {
		adminLn, err = net.Listen("tcp", o.adminAddr)
		if err != nil {
			return fmt.Errorf("listen on --admin-addr %s: %w", o.adminAddr, err)
		}
		defer adminLn.Close()
	}

	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	msrc, err := metricsSource(o.metrics, o.family)
	if err != nil {
		return err
	}
	if msrc, err = withDCGM(msrc, o.dcgmURL); err != nil {
		return err
	}
	if msrc != nil {
		defer msrc.Close()
	}
	gwOpts := gateway.Options{Policy: o.policy, Registry: reg, Logger: logger, MetricsInterval: 250 * time.Millisecond,
		ActivatorQueue: o.activatorQueue, ActivatorWait: o.activatorWait}
	tuning.Apply(&gwOpts)
	if o.kube() {
		// Pools at zero are woken through the API server.
		cfg, err := restConfig(o.kubeconfig)
		if err != nil {
			return err
		}
		if gwOpts.Waker, err = kubesource.NewWaker(cfg, logger); err != nil {
			return err
		}
	}
	var handler http.Handler // the gateway, behind the token recorder with --report-usage-to
	var rec *usage.Recorder
	if reporter != nil {
		rec = &usage.Recorder{Sink: reporter.Add, Use: reporter.AddUse}
		gwOpts.OnUsage = rec.StreamUsage
	}
	if msrc != nil {
		gwOpts.Metrics = msrc
	}
	keys, keysReload, err := loadKeys(o.keysFile, logger)
	if err != nil {
		return err
	}
	if keys != nil && gwOpts.OnUsage == nil {
		// Ask streams for their usage, so that the token limits settle
		// with real counts (the tenant middleware gets them by hook).
		gwOpts.OnUsage = func(string, string, int64, int64) {}
	}
	gw, err := gateway.New(gwOpts)
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	defer gw.Close()

	// The source runs until srcCtx ends; its error (if it gives up) stops
	// the gateway.
	srcCtx, stopSrc := context.WithCancel(context.Background())
	defer stopSrc()
	srcDone := make(chan error, 1)
	go func() { srcDone <- src(srcCtx, gw.SetBackends) }()

	handler = gw
	reportDone := make(chan struct{})
	busyCtx, stopBusy := context.WithCancel(context.Background())
	busyDone := make(chan struct{})
	if reporter != nil {
		rec.Next = gw
		handler = rec
		go func() {
			defer close(busyDone)
			usage.SampleBusy(busyCtx, gw.Backends, 200*time.Millisecond, reporter.BusyStart, reporter.BusyEnd)
		}()
		go func() { defer close(reportDone); reporter.Run(srcCtx) }()
	} else {
		close(busyDone)
		close(reportDone)
	}
	defer stopBusy()
	if keys != nil {
		// API keys and their limits in front of everything else.
		var spend tenant.Spend // the keys' monthly budgets: from the operator's acknowledgements
		if reporter != nil {
			spend = reporter
		} else if len(keys.Budgets()) > 0 {
			logger.Warn("the keys file gives monthlyBudget, but without --report-usage-to this replica has no spend to hold it against, so budgets are not enforced: point --report-usage-to at the operator's admin API")
		}
		mw, err := tenant.Middleware(handler, keys, tenant.Options{ParseUsage: usage.ParseUsage, Registerer: reg, Spend: spend})
		if err != nil {
			return fmt.Errorf("--keys-file: %w", err)
		}
		handler = mw
		// The keys file is re-read when it changes (a Secret's update).
		reg.MustRegister(keysReload)
		ticker := time.NewTicker(tenant.ReloadInterval)
		defer ticker.Stop()
		apply := mw.SetKeys
		if reporter != nil {
			// The keys' budgets go to the operator with the usage, which
			// alerts on them.
			reporter.SetBudgets(keys.Budgets())
			apply = func(ks *tenant.Keys) error {
				if err := mw.SetKeys(ks); err != nil {
					return err
				}
				reporter.SetBudgets(ks.Budgets())
				return nil
			}
		}
		go keysReload.Run(srcCtx, ticker.C, apply)
	}
	// No WriteTimeout: it would cut long generations (see package gateway).
	srv := tuning.Server(handler)
	serveErr := make(chan error, 3)
	for _, l := range lns {
		go func() { serveErr <- serveHTTP(srv, l, "gateway") }()
	}
	var adminSrv *http.Server
	if adminLn != nil {
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			_, _ = w.Write([]byte("ok\n"))
		})
		// The dashboard (backends and traffic; no pools here) and the
		// backends' JSON it reads.
		sampler := dashboard.NewSampler(dashboard.SamplerOptions{Gatherer: gw.RequestMetrics(), Backends: gw.Backends})
		go sampler.Run(srcCtx)
		d := dashboard.Handler(dashboard.Options{Sampler: sampler})
		for _, p := range append(append([]string(nil), dashboard.PublicRoutes...), dashboard.DataRoutes...) {
			mux.Handle(p, d)
		}
		mux.HandleFunc("GET /api/v1/backends", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			bs := gw.Backends()
			if bs == nil {
				bs = []gateway.BackendStatus{}
			}
			_ = json.NewEncoder(w).Encode(bs)
		})
		var h http.Handler = mux
		if tok := os.Getenv(guard.TokenEnv); strings.TrimSpace(tok) != "" {
			h = guard.RequireToken(tok, mux)
		}
		adminSrv = &http.Server{
			Handler:           h,
			ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout:       30 * time.Second,
			WriteTimeout:      30 * time.Second,
			IdleTimeout:       2 * time.Minute,
		}
		go func() { serveErr <- serveHTTP(adminSrv, adminLn, "admin") }()
	}

	errOut := cmd.ErrOrStderr()
	for _, l := range lns {
		fmt.Fprintf(errOut, "tidegpu gateway listening on %s\n", l.Addr())
	}
	if reporter != nil {
		fmt.Fprintf(errOut, "tidegpu gateway: reporting usage to %s as replica %s\n", o.reportTo, reporter.Replica())
	}
	if adminLn != nil {
		fmt.Fprintf(errOut, "tidegpu gateway admin (/metrics, /healthz) on %s\n", adminLn.Addr())
	}
	fmt.Fprintf(errOut, "tidegpu gateway: %d static backend(s), policy %s\n", len(o.backends), o.policy)

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-serveErr:
	case runErr = <-srcDone:
		if runErr == nil {
			runErr = errors.New("backend source stopped")
		}
		runErr = fmt.Errorf("backends: %w", runErr)
	}
	stop() // a second signal kills the process the default way

	shutCtx, cancel := context.WithTimeout(context.Background(), gatewayShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutCtx); err != nil {
		// In-flight requests did not finish in time: abort them.
		_ = srv.Close()
		fmt.Fprintf(errOut, "tidegpu gateway: graceful shutdown incomplete after %v: %v\n", gatewayShutdownTimeout, err)
	}
	stopSrc()
	if reporter != nil {
		// Every request has finished: end the busy periods, then send the
		// rest and wait for the operator's acknowledgement.
		stopBusy()
		<-busyDone
		<-reportDone
		flushCtx, cancelFlush := context.WithTimeout(context.Background(), 5*time.Second)
		if err := reporter.Flush(flushCtx); err != nil {
			fmt.Fprintf(errOut, "tidegpu gateway: %v\n", err)
		}
		cancelFlush()
	}
	if adminSrv != nil {
		_ = adminSrv.Shutdown(shutCtx)
	}
	return runErr
}

// serveHTTP serves s on ln; a normal shutdown is not an error.
func serveHTTP(s interface{ Serve(net.Listener) error }, ln net.Listener, what string) error {
	if err := s.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("%s server: %w", what, err)
	}
	return nil
}

// inCluster reports whether this process runs in a Kubernetes pod.
func inCluster() bool { return os.Getenv("KUBERNETES_SERVICE_HOST") != "" }

// kubeSource follows the pools from the Kubernetes API: every TidePool's
// Ready instances become its backends, as status changes (a watch, not a
// poll).
func kubeSource(kubeconfig, namespace string) backendSource {
	return func(ctx context.Context, publish func(string, []gateway.Backend)) error {
		cfg, err := restConfig(kubeconfig)
		if err != nil {
			return err
		}
		if err := kubesource.Run(ctx, cfg, publish, namespace, slog.Default()); err != nil {
			return err
		}
		<-ctx.Done()
		return nil
	}
}

// dcgmURLUsage is the help of --dcgm-url (gateway and operator).
const dcgmURLUsage = "NVIDIA dcgm-exporter metrics URL for GPU utilisation (DCGM_FI_DEV_GPU_UTIL, averaged over an instance's GPUs), a template over {{.IP}}, {{.ID}} and {{.Port}} of each backend, e.g. http://{{.IP}}:9400/metrics; a URL without fields is one exporter whose series are matched by their pod or Hostname label; empty: none"

// withDCGM adds dcgm-exporter's GPU utilisation (--dcgm-url) to src.
func withDCGM(src metrics.Source, dcgmURL string) (metrics.Source, error) {
	if dcgmURL == "" {
		return src, nil
	}
	if src == nil {
		return nil, fmt.Errorf("--dcgm-url needs backend metrics: set --metrics scrape or prometheus=URL (and --metrics-family other than none)")
	}
	d, err := metrics.NewDCGM(src, metrics.DCGMOptions{URL: dcgmURL})
	if err != nil {
		return nil, fmt.Errorf("--dcgm-url: %w", err)
	}
	return d, nil
}

// metricsSource builds the balancing signal source --metrics names, reading
// --metrics-family's metric names; nil means the gateway's own measurements
// only.
func metricsSource(spec, family string) (metrics.Source, error) {
	fam, off, err := parseMetricsFamily(family)
	if err != nil {
		return nil, err
	}
	switch {
	case off:
		return nil, nil
	case spec == "" || spec == "scrape":
		return metrics.NewOllama(metrics.NewScrape(metrics.ScrapeOptions{Family: fam}), metrics.OllamaOptions{}), nil
	case spec == "none":
		return nil, nil
	case strings.HasPrefix(spec, "prometheus="):
		addr := strings.TrimPrefix(spec, "prometheus=")
		if u, err := url.Parse(addr); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("invalid --metrics %q: want prometheus=http://host:port", spec)
		}
		p, err := metrics.NewPrometheus(metrics.PrometheusOptions{Address: addr, Family: fam})
		if err != nil {
			return nil, fmt.Errorf("--metrics %q: %w", spec, err)
		}
		return metrics.NewOllama(p, metrics.OllamaOptions{}), nil
	default:
		return nil, fmt.Errorf("invalid --metrics %q: want scrape, prometheus=URL or none", spec)
	}
}

// usageReporter returns the reporter of --report-usage-to, or nil.
func (o *gatewayOptions) usageReporter(logger *slog.Logger, reg prometheus.Registerer) (*usage.Reporter, error) {
	if o.reportTo == "" {
		return nil, nil
	}
	r, err := usage.NewReporter(usage.ReporterOptions{URL: o.reportTo, Token: os.Getenv("TIDEGPU_ADMIN_TOKEN"),
		Name: os.Getenv("POD_NAME"), Logger: logger, Registry: reg})
	if err != nil {
		return nil, fmt.Errorf("invalid --report-usage-to: %w", err)
	}
	return r, nil
}
