package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/tidegpu/tidegpu/internal/admin/guard"
	"github.com/tidegpu/tidegpu/internal/operator"
)

// NewOperatorCommand returns `tidegpu operator`.
func NewOperatorCommand() *cobra.Command {
	var (
		kubeconfig, metricsAddr, probeAddr, adminAddr, stateDir, leaderNS, logLevel, cluster, ledgerNS, dcgmURL string
		noticeAddr, noticeCert, noticeKey, noticeURL, awsQueue                                                  string
		leaderElect, insecureAdmin                                                                              bool
		gatewayMetrics                                                                                          []string
		alerts                                                                                                  alertFlags
	)
	cmd := &cobra.Command{
		Use:   "operator",
		Short: "Run the Kubernetes operator (TidePool and AIBalancer controllers)",
		Long: `Run the controller manager: it reconciles TidePools (and AIBalancers), launches and
terminates instances through the pools' providers, keeps gateways in step, and
writes status and events. In a cluster it uses the pod's service account; outside,
--kubeconfig (or $KUBECONFIG).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger, err := newLogger(logLevel)
			if err != nil {
				return err
			}
			token := os.Getenv(guard.TokenEnv)
			if err := guard.CheckExposure("--admin-addr", adminAddr, token, insecureAdmin); err != nil {
				return err
			}
			alertSinks, err := alerts.sinks()
			if err != nil {
				return err
			}
			report, err := alerts.schedule()
			if err != nil {
				return err
			}
			cfg, err := restConfig(kubeconfig)
			if err != nil {
				return err
			}
			if stateDir == "" {
				stateDir = defaultStateDir() + "-operator"
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return operator.Run(ctx, operator.Options{
				Config: cfg, MetricsAddr: metricsAddr, ProbeAddr: probeAddr, AdminAddr: adminAddr,
				AdminToken: token, InsecureAdmin: insecureAdmin, LeaderElection: leaderElect,
				LeaderElectionNamespace: leaderNS, StateDir: stateDir, Cluster: cluster, LedgerNamespace: ledgerNS, Logger: logger,
				NoticeAddr: noticeAddr, NoticeTLSCert: noticeCert, NoticeTLSKey: noticeKey, NoticeURL: noticeURL, AWSInterruptionQueue: awsQueue,
				GatewayMetrics: gatewayMetrics, DCGMURL: dcgmURL, Alerts: alertSinks,
				CostReport: report,
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file (default: in-cluster, else $KUBECONFIG)")
	f.StringVar(&metricsAddr, "metrics-bind-address", "127.0.0.1:8080", "Prometheus metrics address (0 disables)")
	f.StringVar(&probeAddr, "health-probe-bind-address", "127.0.0.1:8081", "liveness/readiness probe address (in a pod: :8081)")
	f.StringVar(&adminAddr, "admin-addr", "127.0.0.1:9090", "admin API address (0 disables); TIDEGPU_ADMIN_TOKEN requires a token")
	f.StringVar(&noticeAddr, "notice-addr", "127.0.0.1:9443", "notice endpoint address, where `tidegpu agent` posts interruption notices with its pool's token (0 disables; in a pod: :9443 behind the notice Service)")
	f.StringVar(&noticeCert, "notice-tls-cert", "", "PEM certificate to serve the notice endpoint over TLS (with --notice-tls-key)")
	f.StringVar(&noticeKey, "notice-tls-key", "", "PEM key of --notice-tls-cert")
	f.StringVar(&noticeURL, "notice-url", os.Getenv("TIDEGPU_NOTICE_URL"), "the notice endpoint's URL as instances reach it, rendered into spec.bootstrap's user data (default $TIDEGPU_NOTICE_URL)")
	f.StringVar(&awsQueue, "aws-interruption-queue", os.Getenv("TIDEGPU_AWS_INTERRUPTION_QUEUE"), "URL of the SQS queue EventBridge fills with EC2 spot interruption warnings, rebalance recommendations and state changes (empty: none)")
	f.BoolVar(&insecureAdmin, "insecure-admin", false, "serve an --admin-addr beyond loopback without a token (only when something else guards it)")
	f.BoolVar(&leaderElect, "leader-elect", false, "elect a leader so that only one replica acts")
	f.StringVar(&leaderNS, "leader-election-namespace", "", "namespace of the leader lease (default: the pod's)")
	f.StringVar(&stateDir, "state-dir", "", "state of the local provider's instances (default ~/.local/state/tidegpu-operator)")
	f.StringVar(&cluster, "cluster-name", "default", "names this installation in cloud ownership tags; two installations sharing an account need different names")
	f.StringVar(&ledgerNS, "ledger-namespace", os.Getenv("POD_NAMESPACE"), "namespace of the ConfigMap tidegpu-cost-ledger that keeps spend across restarts (default $POD_NAMESPACE; empty: memory only)")
	alerts.register(f)
	f.StringSliceVar(&gatewayMetrics, "gateway-metrics", nil, "metrics URLs of the standalone gateway replicas (tidegpu gateway --admin-addr, path /metrics), read for the pools' autoscalers (concurrency, qps); a headless Service's name reaches every replica, e.g. http://tidegpu-gateway-metrics.tidegpu-system.svc:9091/metrics; repeat or comma-separate")
	f.StringVar(&dcgmURL, "dcgm-url", "", dcgmURLUsage+" (for AIBalancers and the pools' gpu-utilization autoscaling)")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	return cmd
}

// restConfig loads --kubeconfig, else the in-cluster config, else $KUBECONFIG
// or ~/.kube/config.
func restConfig(path string) (*rest.Config, error) {
	if path != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig %s: %w", path, err)
		}
		return cfg, nil
	}
	if cfg, err := rest.InClusterConfig(); err == nil {
		return cfg, nil
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("no Kubernetes config: not in a cluster and no kubeconfig found (set --kubeconfig): %w", err)
	}
	return cfg, nil
}
