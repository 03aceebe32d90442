// Package operator assembles `tidegpu operator`: the controller-runtime
// manager with the TidePool controller and its engines, leader election,
// health probes, metrics, and the admin API, and the providers it can build
// from a pool's spec.
package operator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/admin"
	"github.com/tidegpu/tidegpu/internal/admin/guard"
	"github.com/tidegpu/tidegpu/internal/bootstrap"
	"github.com/tidegpu/tidegpu/internal/controller/aibalancer"
	"github.com/tidegpu/tidegpu/internal/controller/tidepool"
	"github.com/tidegpu/tidegpu/internal/cost"
	"github.com/tidegpu/tidegpu/internal/costreport"
	"github.com/tidegpu/tidegpu/internal/dashboard"
	"github.com/tidegpu/tidegpu/internal/engine"
	"github.com/tidegpu/tidegpu/internal/events"
	"github.com/tidegpu/tidegpu/internal/gwsignals"
	"github.com/tidegpu/tidegpu/internal/market"
	"github.com/tidegpu/tidegpu/internal/metrics"
	"github.com/tidegpu/tidegpu/internal/notice"
	"github.com/tidegpu/tidegpu/internal/notify"
	"github.com/tidegpu/tidegpu/internal/provider"
	awsprov "github.com/tidegpu/tidegpu/internal/provider/aws"
	"github.com/tidegpu/tidegpu/internal/provider/aws/awsqueue"
	"github.com/tidegpu/tidegpu/internal/provider/local"
	"github.com/tidegpu/tidegpu/internal/provider/metered"
	"github.com/tidegpu/tidegpu/internal/provider/tencent"
	"github.com/tidegpu/tidegpu/internal/registrar"
	"github.com/tidegpu/tidegpu/internal/scheme"
	"github.com/tidegpu/tidegpu/internal/usage"
)

// Scheme knows the built-in types and ours (internal/scheme).
func Scheme() *runtime.Scheme { return scheme.New() }

// Options configure the operator.
type Options struct {
	Config *rest.Config
	// MetricsAddr, ProbeAddr, AdminAddr: "0" disables; loopback by default.
	MetricsAddr, ProbeAddr, AdminAddr string
	AdminToken                        string
	// InsecureAdmin serves an AdminAddr beyond loopback without a token
	// (--insecure-admin): something else guards it.
	InsecureAdmin           bool
	LeaderElection          bool
	LeaderElectionNamespace string
	// StateDir is where the local provider keeps its state and logs.
	StateDir string
	// LedgerNamespace holds the ConfigMap that keeps the cost ledger across
	// restarts; empty keeps it in memory only.
	LedgerNamespace string
	// Cluster names this installation in the clouds' ownership tags, so
	// that two installations never touch each other's instances.
	Cluster string
	// NoticeAddr is the notice endpoint's listen address ("0" disables):
	// `tidegpu agent` on each instance posts interruption notices there
	// with its pool's token. NoticeTLSCert and NoticeTLSKey, when set,
	// serve it over TLS. NoticeURL is its URL as instances reach it (a
	// Service, a load balancer), rendered into spec.bootstrap's user data.
	NoticeAddr, NoticeTLSCert, NoticeTLSKey, NoticeURL string
	// AWSInterruptionQueue is the URL of the SQS queue that EventBridge
	// fills with EC2 spot interruption warnings, rebalance recommendations
	// and state changes; empty polls none.
	AWSInterruptionQueue string
	// AWSQueueOptions tune the queue's client (tests: retries, timeouts).
	AWSQueueOptions []func(*sqs.Options)
	// GatewayMetrics are the standalone gateway replicas' metrics URLs
	// (`tidegpu gateway --admin-addr`, path /metrics; a headless Service's
	// name reaches every replica), read for the pools' autoscalers; none:
	// autoscaling on traffic metrics has no signals.
	GatewayMetrics []string
	// Alerts are the webhooks budget alerts go to (package notify).
	Alerts []notify.Sink
	// CostReport is the schedule of the cost report per tenant to the
	// Alerts' webhooks (package costreport), sent by the leader.
	CostReport costreport.Schedule
	// DCGMURL is NVIDIA dcgm-exporter's metrics URL template (see
	// metrics.DCGMOptions.URL): GPU utilisation for AIBalancers and for the
	// pools' autoscalers (gpu-utilization). Empty: none.
	DCGMURL string
	Logger  *slog.Logger
}

// Run runs the operator until ctx ends.
func Run(ctx context.Context, o Options) error {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	// An admin API open to the network needs a token: refuse before
	// anything starts.
	if err := guard.CheckExposure("--admin-addr", o.AdminAddr, o.AdminToken, o.InsecureAdmin); err != nil {
		return err
	}
	ctrl.SetLogger(logr.FromSlogHandler(o.Logger.Handler()))
	mgr, err := ctrl.NewManager(o.Config, ctrl.Options{
		Scheme:                  Scheme(),
		Metrics:                 metricsserver.Options{BindAddress: o.MetricsAddr},
		HealthProbeBindAddress:  o.ProbeAddr,
		LeaderElection:          o.LeaderElection,
		LeaderElectionID:        "tidegpu-operator.tidegpu.eja.dev",
		LeaderElectionNamespace: o.LeaderElectionNamespace,
	})
	if err != nil {
		return fmt.Errorf("creating the controller manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return err
	}
	rec := events.NewRecorder(5000, nil, o.Logger)
	if len(o.Alerts) > 0 {
		// Budget alerts come from the leader's engines: followers record none.
		n, err := notify.New(notify.Options{Sinks: o.Alerts, Logger: o.Logger,
			Reasons: []string{notify.DefaultReason, costreport.ReasonReport, costreport.ReasonTenantAlert}})
		if err != nil {
			return err
		}
		ch, unsubscribe := rec.Subscribe(256)
		defer unsubscribe()
		go n.Run(ctx, ch)
	}
	ledger := cost.NewLedger(cost.Options{})
	crmetrics.Registry.MustRegister(cost.NewCollector(ledger, cost.CollectorOptions{}))
	// The standalone gateway replicas' tokens and busy time (see
	// usage.Reporter) come in through the admin API.
	// They are taken only where the ledger is kept: on the leader, once
	// the ledger is restored.
	ingest := usage.NewIngest(ledger, nil, o.Logger)
	// Each acknowledgement carries the tenants' spend this month, so that
	// the replicas hold the keys' monthly budgets.
	ingest.ShareSpend((&costreport.SpendCache{Ledger: ledger}).All)
	var ledgerReady atomic.Bool
	ingest.Gate(ledgerReady.Load)
	if err := ingest.Register(crmetrics.Registry); err != nil {
		return fmt.Errorf("usage ingest metrics: %w", err)
	}
	// The tenants' budgets come from the replicas' keys (their batches):
	// the leader, which keeps the ledger, alerts on them.
	go func() {
		select {
		case <-mgr.Elected():
			costreport.WatchBudgets(ctx, clock.RealClock{}, 5*time.Second, ingest.Budgets, ledger, func(reason, msg string) {
				rec.Eventf(events.TypeWarning, reason, "", "", "%s", msg)
			})
		case <-ctx.Done():
		}
	}()
	if o.CostReport != costreport.Off && o.CostReport != "" {
		// The leader keeps the ledger (the replicas' usage, with their
		// tenants, reaches it): it alone reports.
		go func() {
			select {
			case <-mgr.Elected():
				costreport.Run(ctx, clock.RealClock{}, o.CostReport, ledger, func(reason, msg string) {
					rec.Eventf(events.TypeNormal, reason, "", "", "%s", msg)
				})
			case <-ctx.Done():
			}
		}()
	}
	if o.LedgerNamespace == "" {
		go func() {
			select {
			case <-mgr.Elected():
				ledgerReady.Store(true)
			case <-ctx.Done():
			}
		}()
	} else {
		if err := mgr.Add(&ledgerStore{client: mgr.GetClient(), reader: mgr.GetAPIReader(), ledger: ledger, usage: ingest, restored: &ledgerReady,
			name:     types.NamespacedName{Namespace: o.LedgerNamespace, Name: "tidegpu-cost-ledger"},
			interval: time.Minute, logger: o.Logger}); err != nil {
			return err
		}
	}
	tokens := notice.NewTokens()
	var signals joinedSignals
	var defaultRegistrar registrar.Registrar = registrar.Nop{}
	if len(o.GatewayMetrics) > 0 {
		r, err := gwsignals.New(gwsignals.Options{URLs: o.GatewayMetrics, Logger: o.Logger, Token: o.AdminToken})
		if err != nil {
			return fmt.Errorf("--gateway-metrics: %w", err)
		}
		signals = append(signals, r)
		// The gateways follow the pools on their own; what they tell is
		// how many requests a draining instance still has.
		defaultRegistrar = inFlightNop{r}
	}
	var gpu *metrics.DCGM
	if o.DCGMURL != "" {
		if gpu, err = metrics.NewDCGM(nil, metrics.DCGMOptions{URL: o.DCGMURL}); err != nil {
			return fmt.Errorf("--dcgm-url: %w", err)
		}
	}
	var engineSignals engine.Signals
	if len(signals) > 0 || gpu != nil {
		engineSignals = &signals // the GPU signals join below, before anything runs
	}
	engines := tidepool.NewEngines(tidepool.EnginesOptions{
		Signals:   engineSignals,
		Recorder:  rec,
		Registrar: defaultRegistrar,
		Registry:  crmetrics.Registry,
		Logger:    o.Logger,
		Factory:   FactoryWith(FactoryOptions{StateDir: o.StateDir, Cluster: o.Cluster, Logger: o.Logger, NoticeURL: o.NoticeURL, Tokens: tokens}),
		Existing:  existingPools(mgr.GetAPIReader()),
		Costing:   &engine.Costing{Ledger: ledger, Catalog: market.DefaultCatalog(), Live: cost.NewLivePrices()},
	})
	r := &tidepool.Reconciler{Client: mgr.GetClient(), Engines: engines, Recorder: rec,
		Events: mgr.GetEventRecorder("tidegpu-operator"), Registry: crmetrics.Registry, NoticeTokens: tokens}
	if err := r.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the TidePool controller: %w", err)
	}
	if gpu != nil {
		signals = append(signals, gpuSignals{src: gpu, pools: engines.Status})
	}
	var abMetrics metrics.Source = metrics.NewScrape(metrics.ScrapeOptions{})
	if o.DCGMURL != "" {
		if abMetrics, err = metrics.NewDCGM(abMetrics, metrics.DCGMOptions{URL: o.DCGMURL}); err != nil {
			return fmt.Errorf("--dcgm-url: %w", err)
		}
	}
	ab := &aibalancer.Reconciler{Client: mgr.GetClient(), Metrics: abMetrics, Weights: engines, Registry: crmetrics.Registry,
		Events: mgr.GetEventRecorder("tidegpu-aibalancer")}
	if err := ab.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the AIBalancer controller: %w", err)
	}
	router := notice.NewRouter(engines, nil)
	if o.NoticeAddr != "" && o.NoticeAddr != "0" {
		if (o.NoticeTLSCert == "") != (o.NoticeTLSKey == "") {
			return errors.New("--notice-tls-cert and --notice-tls-key go together: give both, or neither for plain http")
		}
		if _, _, err := net.SplitHostPort(o.NoticeAddr); err != nil {
			return fmt.Errorf("--notice-addr %q: %v (want host:port, such as :9443)", o.NoticeAddr, err)
		}
		srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: notice.Handler(tokens, router, o.Logger)}
		addr, cert, key := o.NoticeAddr, o.NoticeTLSCert, o.NoticeTLSKey
		// Listen once leader: a follower refuses connections at once
		// rather than holding them unanswered.
		if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("--notice-addr %s: %w", addr, err)
			}
			return serveRunnable(srv, ln, cert, key).Start(ctx)
		})); err != nil {
			return err
		}
	}
	if o.AWSInterruptionQueue != "" {
		q, err := awsqueue.New(ctx, awsqueue.Options{QueueURL: o.AWSInterruptionQueue, Router: router,
			Locate: engines.Locate, Round: engines.Round, Logger: o.Logger, SQSOptions: o.AWSQueueOptions})
		if err != nil {
			return fmt.Errorf("--aws-interruption-queue: %w", err)
		}
		if err := mgr.Add(q); err != nil {
			return err
		}
	}
	if o.AdminAddr != "" && o.AdminAddr != "0" {
		ln, err := net.Listen("tcp", o.AdminAddr)
		if err != nil {
			return fmt.Errorf("--admin-addr %s: %w", o.AdminAddr, err)
		}
		srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: admin.NewHandler(admin.Options{
			Pools: engines, Events: rec, Gatherer: prometheus.Gatherers{crmetrics.Registry}, Token: o.AdminToken, Ledger: ledger,
			Usage:     ingest,
			Dashboard: dashboard.Handler(dashboard.Options{Pools: engines, Events: rec})})}
		if err := mgr.Add(serveRunnable(srv, ln, "", "")); err != nil {
			return err
		}
	}
	o.Logger.Info("starting tidegpu operator", "metrics", o.MetricsAddr, "probes", o.ProbeAddr, "admin", o.AdminAddr,
		"notice", o.NoticeAddr, "noticeTLS", o.NoticeTLSCert != "", "awsInterruptionQueue", o.AWSInterruptionQueue != "",
		"leaderElection", o.LeaderElection)
	return mgr.Start(ctx)
}

// serveRunnable serves srv on ln (TLS with cert and key when set) until
// the manager stops. Like every runnable that does not say otherwise, it
// runs on the leader only (the leader has the pools and their tokens): a
// follower refuses connections, and the agent retries until it reaches
// the leader.
func serveRunnable(srv *http.Server, ln net.Listener, cert, key string) manager.Runnable {
	return manager.RunnableFunc(func(ctx context.Context) error {
		go func() {
			<-ctx.Done()
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		}()
		var err error
		if cert != "" {
			err = srv.ServeTLS(ln, cert, key)
		} else {
			err = srv.Serve(ln)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
}

func existingPools(c client.Reader) func(ctx context.Context) (map[string]bool, error) {
	return func(ctx context.Context) (map[string]bool, error) {
		var list tidev1.TidePoolList
		if err := c.List(ctx, &list); err != nil {
			return nil, err
		}
		out := map[string]bool{}
		for _, tp := range list.Items {
			if tp.DeletionTimestamp.IsZero() {
				out[tp.Namespace+"/"+tp.Name] = true
			}
		}
		return out, nil
	}
}

// Factory builds providers from a pool's spec: local processes (one
// provider for every local pool), Tencent CVM and AWS EC2 (one per region,
// credentials Secret and endpoint) and simulated spot markets (one per
// spec.sim). Providers are cached by key; pools with the same key
// share one provider and one engine.
func Factory(stateDir, cluster string, logger *slog.Logger) tidepool.ProviderFactory {
	return FactoryWith(FactoryOptions{StateDir: stateDir, Cluster: cluster, Logger: logger})
}

// FactoryOptions configure FactoryWith.
type FactoryOptions struct {
	StateDir, Cluster string
	Logger            *slog.Logger
	// NoticeURL and Tokens render spec.bootstrap's user data for the cloud
	// providers (aws, tencent); Tokens nil sends none.
	NoticeURL string
	Tokens    *notice.Tokens
}

// FactoryWith is Factory with the bootstrap of cloud instances.
func FactoryWith(fo FactoryOptions) tidepool.ProviderFactory {
	stateDir, cluster, logger := fo.StateDir, fo.Cluster, fo.Logger
	var (
		mu    sync.Mutex
		cache = map[string]provider.Provider{}
	)
	providerMetrics := metered.NewMetrics(crmetrics.Registry)
	return func(ctx context.Context, tp *tidev1.TidePool, creds map[string][]byte) (string, provider.Provider, error) {
		spec := &tp.Spec
		mu.Lock()
		defer mu.Unlock()
		secret := "default-chain"
		if spec.CredentialsSecretRef != nil {
			secret = tp.Namespace + "/" + spec.CredentialsSecretRef.Name
		}
		var key string
		switch spec.Provider {
		case tidev1.ProviderLocal:
			key = "local"
		case tidev1.ProviderTencent, tidev1.ProviderAWS:
			if spec.Region == "" {
				return "", nil, fmt.Errorf("spec.region: required for provider %s", spec.Provider)
			}
			key = spec.Provider + "/" + spec.Region + "/" + secret + "/" + spec.Endpoint
		case tidev1.ProviderSim:
			if spec.Sim == nil {
				return "", nil, fmt.Errorf("spec.sim: required for provider sim: set spec.sim.traceDir")
			}
			key = simKey(spec.Sim)
		default:
			return "", nil, fmt.Errorf("spec.provider %q: unknown: use tencent, aws, local or sim", spec.Provider)
		}
		if p, ok := cache[key]; ok {
			return key, p, nil
		}
		var (
			p   provider.Provider
			err error
		)
		switch spec.Provider {
		case tidev1.ProviderLocal:
			if err := os.MkdirAll(stateDir, 0o755); err != nil {
				return "", nil, fmt.Errorf("--state-dir %s: %w", stateDir, err)
			}
			p, err = local.New(local.Options{StateDir: stateDir, Logger: logger})
		case tidev1.ProviderTencent:
			id, sk := string(creds["secretId"]), string(creds["secretKey"])
			if id == "" || sk == "" {
				return "", nil, fmt.Errorf("spec.credentialsSecretRef: Secret %s needs the keys secretId and secretKey", secret)
			}
			p, err = tencent.New(tencent.Options{Region: spec.Region, SecretID: id, SecretKey: sk, Cluster: cluster, Endpoint: spec.Endpoint})
		case tidev1.ProviderAWS:
			opts := awsprov.Options{Region: spec.Region, Cluster: cluster, Endpoint: spec.Endpoint}
			if creds != nil {
				id, sk := string(creds["accessKeyId"]), string(creds["secretAccessKey"])
				if id == "" || sk == "" {
					return "", nil, fmt.Errorf("spec.credentialsSecretRef: Secret %s needs the keys accessKeyId and secretAccessKey (sessionToken optional); or drop the reference to use the instance role / IRSA", secret)
				}
				opts.Credentials = &awsprov.StaticCredentials{AccessKeyID: id, SecretAccessKey: sk, SessionToken: string(creds["sessionToken"])}
			}
			p, err = awsprov.New(ctx, opts)
		case tidev1.ProviderSim:
			if err := os.MkdirAll(stateDir, 0o755); err != nil {
				return "", nil, fmt.Errorf("--state-dir %s: %w", stateDir, err)
			}
			p, err = newSimMarket(ctx, stateDir, key, spec.Sim, logger)
		default:
			err = fmt.Errorf("spec.provider %q: not available in this build yet", spec.Provider)
		}
		if err != nil {
			return "", nil, err
		}
		if fo.Tokens != nil && (spec.Provider == tidev1.ProviderAWS || spec.Provider == tidev1.ProviderTencent) {
			p = bootstrap.Wrap(p, spec.Provider, fo.NoticeURL, fo.Tokens.Token)
		}
		p = metered.Wrap(p, providerMetrics)
		cache[key] = p
		return key, p, nil
	}
}
