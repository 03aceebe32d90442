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

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	tidev1alpha1 "github.com/tidegpu/tidegpu/api/v1alpha1"
	"github.com/tidegpu/tidegpu/internal/admin"
	"github.com/tidegpu/tidegpu/internal/controller/aibalancer"
	"github.com/tidegpu/tidegpu/internal/controller/tidepool"
	"github.com/tidegpu/tidegpu/internal/cost"
	"github.com/tidegpu/tidegpu/internal/dashboard"
	"github.com/tidegpu/tidegpu/internal/engine"
	"github.com/tidegpu/tidegpu/internal/events"
	"github.com/tidegpu/tidegpu/internal/market"
	"github.com/tidegpu/tidegpu/internal/metrics"
	"github.com/tidegpu/tidegpu/internal/provider"
	awsprov "github.com/tidegpu/tidegpu/internal/provider/aws"
	"github.com/tidegpu/tidegpu/internal/provider/local"
	"github.com/tidegpu/tidegpu/internal/provider/metered"
	"github.com/tidegpu/tidegpu/internal/provider/tencent"
	"github.com/tidegpu/tidegpu/internal/registrar"
	"github.com/tidegpu/tidegpu/internal/usage"
)

// Scheme knows the built-in types and ours.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(tidev1.AddToScheme(s))
	utilruntime.Must(tidev1alpha1.AddToScheme(s))
	return s
}

// Options configure the operator.
type Options struct {
	Config *rest.Config
	// MetricsAddr, ProbeAddr, AdminAddr: "0" disables; loopback by default.
	MetricsAddr, ProbeAddr, AdminAddr string
	AdminToken                        string
	LeaderElection                    bool
	LeaderElectionNamespace           string
	// StateDir is where the local provider keeps its state and logs.
	StateDir string
	// LedgerNamespace holds the ConfigMap that keeps the cost ledger across
	// restarts; empty keeps it in memory only.
	LedgerNamespace string
	// Cluster names this installation in the clouds' ownership tags, so
	// that two installations never touch each other's instances.
	Cluster string
	Logger  *slog.Logger
}

// Run runs the operator until ctx ends.
func Run(ctx context.Context, o Options) error {
	if o.Logger == nil {
		o.Logger = slog.Default()
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
	ledger := cost.NewLedger(cost.Options{})
	crmetrics.Registry.MustRegister(cost.NewCollector(ledger, cost.CollectorOptions{}))
	// The standalone gateway replicas' tokens and busy time (see
	// usage.Reporter) come in through the admin API.
	// They are taken only where the ledger is kept: on the leader, once
	// the ledger is restored.
	ingest := usage.NewIngest(ledger, nil, o.Logger)
	var ledgerReady atomic.Bool
	ingest.Gate(ledgerReady.Load)
	if err := ingest.Register(crmetrics.Registry); err != nil {
		return fmt.Errorf("usage ingest metrics: %w", err)
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
	engines := tidepool.NewEngines(tidepool.EnginesOptions{
		Recorder:  rec,
		Registrar: registrar.Nop{},
		Registry:  crmetrics.Registry,
		Logger:    o.Logger,
		Factory:   Factory(o.StateDir, o.Cluster, o.Logger),
		Existing:  existingPools(mgr.GetAPIReader()),
		Costing:   &engine.Costing{Ledger: ledger, Catalog: market.DefaultCatalog(), Live: cost.NewLivePrices()},
	})
	r := &tidepool.Reconciler{Client: mgr.GetClient(), Engines: engines, Recorder: rec,
		Events: mgr.GetEventRecorder("tidegpu-operator"), Registry: crmetrics.Registry}
	if err := r.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the TidePool controller: %w", err)
	}
	scrape := metrics.NewScrape(metrics.ScrapeOptions{})
	ab := &aibalancer.Reconciler{Client: mgr.GetClient(), Metrics: scrape, Weights: engines, Registry: crmetrics.Registry,
		Events: mgr.GetEventRecorder("tidegpu-aibalancer")}
	if err := ab.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the AIBalancer controller: %w", err)
	}
	if o.AdminAddr != "" && o.AdminAddr != "0" {
		if err := admin.CheckExposure("--admin-addr", o.AdminAddr, o.AdminToken); err != nil {
			return err
		}
		ln, err := net.Listen("tcp", o.AdminAddr)
		if err != nil {
			return fmt.Errorf("--admin-addr %s: %w", o.AdminAddr, err)
		}
		srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: admin.NewHandler(admin.Options{
			Pools: engines, Events: rec, Gatherer: prometheus.Gatherers{crmetrics.Registry}, Token: o.AdminToken, Ledger: ledger,
			Usage:     ingest,
			Dashboard: dashboard.Handler(dashboard.Options{Pools: engines, Events: rec})})}
		if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
			go func() {
				<-ctx.Done()
				sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = srv.Shutdown(sctx)
			}()
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		})); err != nil {
			return err
		}
	}
	o.Logger.Info("starting tidegpu operator", "metrics", o.MetricsAddr, "probes", o.ProbeAddr, "admin", o.AdminAddr,
		"leaderElection", o.LeaderElection)
	return mgr.Start(ctx)
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
		p = metered.Wrap(p, providerMetrics)
		cache[key] = p
		return key, p, nil
	}
}
