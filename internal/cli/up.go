package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/tidegpu/tidegpu/internal/admin/guard"
	"github.com/tidegpu/tidegpu/internal/config"
	"github.com/tidegpu/tidegpu/internal/embedded"
	"github.com/tidegpu/tidegpu/internal/gateway"
	"github.com/tidegpu/tidegpu/internal/metrics"
	kongreg "github.com/tidegpu/tidegpu/internal/registrar/kong"
)

// NewUpCommand returns `tidegpu up`.
func NewUpCommand() *cobra.Command {
	var (
		file, gatewayAddr, adminAddr, stateDir, policy, logLevel string
		metricsFamily, dcgmURL                                   string
		kongTokenFile, kongCAFile, kongCertFile, kongKeyFile     string
		keysFile                                                 string
		activatorQueue                                           int
		activatorWait                                            time.Duration
		insecureAdmin                                            bool
		tuning                                                   tuningFlags
		alerts                                                   alertFlags
	)
	cmd := &cobra.Command{
		Use:   "up [-f FILE]",
		Short: "Run the pool, the gateway and the admin server on this machine",
		Long: `Run the whole system on this machine with no cluster: the pool engine with the
local provider (each instance an OS process, by default the built-in simulator),
the built-in gateway and the admin API.

With no file, a pool named "default" of 2 local simulator instances. FILE holds
one or more TidePool documents (apiVersion tidegpu.eja.dev/v1), the same YAML the
cluster takes. Bad input is refused before anything starts.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger, err := newLogger(logLevel)
			if err != nil {
				return err
			}
			pools := config.Default()
			if file != "" {
				f, err := os.Open(file)
				if err != nil {
					return fmt.Errorf("-f: %w", err)
				}
				pools, err = config.Parse(f, file)
				f.Close()
				if err != nil {
					return err
				}
			}
			if stateDir == "" {
				stateDir = defaultStateDir()
			}
			fam, noMetrics, err := parseMetricsFamily(metricsFamily)
			if err != nil {
				return err
			}
			if dcgmURL != "" {
				if noMetrics {
					return fmt.Errorf("--dcgm-url needs backend metrics: drop --metrics-family none")
				}
				if _, err := metrics.NewDCGM(nil, metrics.DCGMOptions{URL: dcgmURL}); err != nil {
					return fmt.Errorf("--dcgm-url: %w", err)
				}
			}
			kongSecrets, err := readKongFiles(kongTokenFile, kongCAFile, kongCertFile, kongKeyFile)
			if err != nil {
				return err
			}
			gwTuning, err := tuning.tuning()
			if err != nil {
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
			keys, keysReload, err := loadKeys(keysFile, logger)
			if err != nil {
				return err
			}
			token := os.Getenv(guard.TokenEnv)
			// Refuse a public admin address without a token before reading
			// anything else.
			if err := guard.CheckExposure("--admin-addr", adminAddr, token, insecureAdmin); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return embedded.Run(ctx, embedded.Options{
				Pools: pools, GatewayAddr: gatewayAddr, AdminAddr: adminAddr, StateDir: stateDir,
				AdminToken: token, InsecureAdmin: insecureAdmin, Policy: policy, KongSecrets: kongSecrets, Out: cmd.OutOrStdout(), Logger: logger,
				MetricsFamily: fam, NoBackendMetrics: noMetrics, ActivatorQueue: activatorQueue, ActivatorWait: activatorWait, DCGMURL: dcgmURL,
				Gateway: gwTuning,
				Keys:    keys, KeysReload: keysReload, Alerts: alertSinks, CostReport: report,
			})
		},
	}
	f := cmd.Flags()
	f.StringVarP(&file, "file", "f", "", "YAML file of TidePool documents (default: one local pool of 2 simulators)")
	f.StringVar(&gatewayAddr, "gateway-addr", "127.0.0.1:8000", "address the gateway listens on")
	f.StringVar(&adminAddr, "admin-addr", "127.0.0.1:9090", "address the admin API listens on (loopback unless you mean it); set TIDEGPU_ADMIN_TOKEN to require a token")
	f.BoolVar(&insecureAdmin, "insecure-admin", false, "serve an --admin-addr beyond loopback without a token (only when something else guards it)")
	f.StringVar(&stateDir, "state-dir", "", "where instance state and logs live (default $TIDEGPU_STATE_DIR, else $XDG_STATE_HOME/tidegpu or ~/.local/state/tidegpu)")
	f.StringVar(&policy, "policy", gateway.PolicyPrefixAware, "gateway balancing policy: "+strings.Join(gateway.PolicyNames, ", "))
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&metricsFamily, "metrics-family", metrics.FamilyAuto, metricsFamilyUsage)
	addActivatorFlags(f, &activatorQueue, &activatorWait)
	f.StringVar(&dcgmURL, "dcgm-url", "", dcgmURLUsage+" (for gpu-utilization autoscaling)")
	tuning.register(f)
	alerts.register(f)
	f.StringVar(&keysFile, "keys-file", "", keysFileUsage)
	f.StringVar(&kongTokenFile, "kong-token-file", "", "file holding the Kong admin token (sent as Kong-Admin-Token) for pools with spec.kong or spec.kongGatewayIP")
	f.StringVar(&kongCAFile, "kong-ca-file", "", "PEM CA bundle to verify Kong's Admin API")
	f.StringVar(&kongCertFile, "kong-cert-file", "", "PEM client certificate for mTLS to Kong's Admin API")
	f.StringVar(&kongKeyFile, "kong-key-file", "", "PEM client key for mTLS to Kong's Admin API")
	return cmd
}

// readKongFiles reads the Kong secrets named on the command line.
func readKongFiles(tokenFile, caFile, certFile, keyFile string) (kongreg.Secrets, error) {
	var s kongreg.Secrets
	read := func(flag, path string) ([]byte, error) {
		if path == "" {
			return nil, nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("--%s: %w", flag, err)
		}
		return b, nil
	}
	tok, err := read("kong-token-file", tokenFile)
	if err != nil {
		return s, err
	}
	s.Token = strings.TrimSpace(string(tok))
	if s.CA, err = read("kong-ca-file", caFile); err != nil {
		return s, err
	}
	if s.ClientCert, err = read("kong-cert-file", certFile); err != nil {
		return s, err
	}
	if s.Key, err = read("kong-key-file", keyFile); err != nil {
		return s, err
	}
	if (len(s.ClientCert) > 0) != (len(s.Key) > 0) {
		return s, fmt.Errorf("--kong-cert-file and --kong-key-file go together: give both or neither")
	}
	return s, nil
}

func defaultStateDir() string {
	if d := os.Getenv("TIDEGPU_STATE_DIR"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "tidegpu")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local", "state", "tidegpu")
	}
	return filepath.Join(os.TempDir(), "tidegpu-state")
}
