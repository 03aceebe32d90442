package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/tidegpu/tidegpu/internal/agent"
)

// agentOptions are the flags of `tidegpu agent`.
type agentOptions struct {
	cloud             string
	controller        string
	pool              string
	namespace         string
	instanceID        string
	tokenFile         string
	metadataEndpoint  string
	interval          time.Duration
	rebalance         string
	rebalanceDeadline time.Duration
	imdsTokenTTL      time.Duration
	logLevel          string
}

// Bounds of the agent's durations.
const (
	minAgentInterval     = 10 * time.Millisecond
	maxAgentInterval     = time.Hour
	maxRebalanceDeadline = time.Hour
)

// NewAgentCommand returns the `tidegpu agent` command: run on each instance,
// it watches the cloud's interruption notice in the instance metadata
// service and reports it to the controller's admin API, so that the pool
// drains the instance and launches its replacement before the reclaim.
func NewAgentCommand() *cobra.Command {
	o := &agentOptions{}
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Watch this instance's spot interruption notice and report it to the controller",
		Long: `Run on each instance (bake it into the image): poll the cloud's instance
metadata service every --interval for an interruption notice and report it to
the controller (POST /api/v1/pools/POOL/instances/ID/notice on the admin API of
` + "`tidegpu up`" + `; with --namespace, POST
/api/v1/namespaces/NS/pools/POOL/instances/ID/notice on the operator's notice
endpoint, with the pool's notice token), which drains the instance from the
gateway and launches its replacement at once. The operator's rendered user data
(spec.bootstrap) starts the agent so.

AWS: IMDSv2 (a session token, refreshed before it expires), spot/instance-action
and, with --rebalance drain, the rebalance recommendation, reported as a notice
due --rebalance-deadline after it was emitted. Tencent Cloud:
spot/termination-time. --cloud auto asks AWS first, then Tencent.

Each notice is reported once, retried with exponential backoff and jitter until
the controller acknowledges it or the interruption time passes. The token (the
admin token, or with --namespace the pool's notice token) comes from
--token-file (read again for every attempt) or TIDEGPU_ADMIN_TOKEN; it is never
logged. The agent runs until SIGINT or SIGTERM.`,
		Example: `  tidegpu agent --controller https://tidegpu-notice.example.com:9443 --namespace llm --pool chat --token-file /etc/tidegpu/notice-token
  tidegpu agent --controller http://10.0.0.2:9090 --pool chat --token-file /etc/tidegpu/admin-token
  tidegpu agent --cloud tencent --controller https://tidegpu.internal:9090 --pool chat
  tidegpu agent --cloud aws --rebalance drain --rebalance-deadline 90s --controller http://10.0.0.2:9090 --pool chat`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runAgent(cmd, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.cloud, "cloud", "auto", "metadata service: aws, tencent or auto (ask AWS, then Tencent)")
	f.StringVar(&o.controller, "controller", "", "base URL of the controller's admin API, http(s)://host:port (required)")
	f.StringVar(&o.pool, "pool", os.Getenv("TIDEGPU_POOL"), "pool this instance belongs to; defaults to $TIDEGPU_POOL (required)")
	f.StringVar(&o.namespace, "namespace", os.Getenv("TIDEGPU_NAMESPACE"), "the TidePool's namespace, for the operator's notice endpoint (then --token-file holds the pool's notice token); defaults to $TIDEGPU_NAMESPACE; empty for `tidegpu up`")
	f.StringVar(&o.instanceID, "instance-id", os.Getenv("TIDEGPU_INSTANCE_ID"), "this instance's id; defaults to $TIDEGPU_INSTANCE_ID, else the metadata service's instance-id")
	f.StringVar(&o.tokenFile, "token-file", "", "file holding the admin token, sent as a bearer token (default $TIDEGPU_ADMIN_TOKEN)")
	f.StringVar(&o.metadataEndpoint, "metadata-endpoint", "", "metadata service base URL (default "+agent.DefaultAWSEndpoint+" for aws, "+agent.DefaultTencentEndpoint+" for tencent)")
	f.DurationVar(&o.interval, "interval", agent.DefaultInterval, "how often to poll the metadata service (AWS recommends 5s)")
	f.StringVar(&o.rebalance, "rebalance", string(agent.RebalanceIgnore), "AWS rebalance recommendations: ignore, or drain (report as a notice due --rebalance-deadline after it)")
	f.DurationVar(&o.rebalanceDeadline, "rebalance-deadline", agent.DefaultRebalanceDeadline, "with --rebalance drain: the interruption time reported, after the recommendation")
	f.DurationVar(&o.imdsTokenTTL, "imds-token-ttl", agent.MaxIMDSTokenTTL, "lifetime of the IMDSv2 session token, whole seconds from 1s to 6h")
	f.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	return cmd
}

// validate checks the flags without touching the network or files; errors
// name the flag.
func (o *agentOptions) validate() error {
	switch agent.Cloud(o.cloud) {
	case agent.CloudAWS, agent.CloudTencent, "auto":
	default:
		return fmt.Errorf("invalid --cloud %q: use aws, tencent or auto", o.cloud)
	}
	if o.controller == "" {
		return errors.New("--controller is required: the base URL of the controller's admin API, e.g. http://10.0.0.2:9090")
	}
	if u, err := url.Parse(o.controller); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" {
		return fmt.Errorf("invalid --controller %q: want http(s)://host:port of the admin API", o.controller)
	}
	if strings.TrimSpace(o.pool) == "" {
		return errors.New("--pool is required (or set TIDEGPU_POOL): the pool this instance belongs to")
	}
	if strings.ContainsAny(o.pool, "/?# \t") {
		return fmt.Errorf("invalid --pool %q: a pool name has no spaces or slashes", o.pool)
	}
	if strings.ContainsAny(o.namespace, "/?# \t") {
		return fmt.Errorf("invalid --namespace %q: a namespace has no spaces or slashes", o.namespace)
	}
	if strings.ContainsAny(o.instanceID, "/?# \t") {
		return fmt.Errorf("invalid --instance-id %q: an instance id has no spaces or slashes", o.instanceID)
	}
	if o.metadataEndpoint != "" {
		if u, err := url.Parse(o.metadataEndpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
			return fmt.Errorf("invalid --metadata-endpoint %q: want http://host[:port]", o.metadataEndpoint)
		}
	}
	if o.interval < minAgentInterval || o.interval > maxAgentInterval {
		return fmt.Errorf("invalid --interval %v: must be between %v and %v", o.interval, minAgentInterval, maxAgentInterval)
	}
	if _, err := agent.ParseRebalancePolicy(o.rebalance); err != nil || o.rebalance == "" {
		return fmt.Errorf("invalid --rebalance %q: use ignore or drain", o.rebalance)
	}
	if o.rebalanceDeadline < time.Second || o.rebalanceDeadline > maxRebalanceDeadline {
		return fmt.Errorf("invalid --rebalance-deadline %v: must be between 1s and %v", o.rebalanceDeadline, maxRebalanceDeadline)
	}
	if o.imdsTokenTTL < agent.MinIMDSTokenTTL || o.imdsTokenTTL > agent.MaxIMDSTokenTTL || o.imdsTokenTTL%time.Second != 0 {
		return fmt.Errorf("invalid --imds-token-ttl %v: must be whole seconds from 1s to 6h", o.imdsTokenTTL)
	}
	return nil
}

// tokenSource returns the admin token's source: the file (read again for
// each report, so a rotated token is picked up), else $TIDEGPU_ADMIN_TOKEN,
// else none. The file must be readable and not empty at start.
func (o *agentOptions) tokenSource() (func() (string, error), error) {
	if o.tokenFile != "" {
		read := func() (string, error) {
			b, err := os.ReadFile(o.tokenFile)
			if err != nil {
				return "", fmt.Errorf("--token-file: %w", err)
			}
			tok := strings.TrimSpace(string(b))
			if tok == "" {
				return "", fmt.Errorf("--token-file %s is empty", o.tokenFile)
			}
			return tok, nil
		}
		if _, err := read(); err != nil {
			return nil, err
		}
		return read, nil
	}
	tok := strings.TrimSpace(os.Getenv("TIDEGPU_ADMIN_TOKEN"))
	if tok == "" {
		return nil, nil
	}
	return func() (string, error) { return tok, nil }, nil
}

func runAgent(cmd *cobra.Command, o *agentOptions) error {
	if err := o.validate(); err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(strings.ToUpper(o.logLevel))); err != nil {
		return fmt.Errorf("invalid --log-level %q: use debug, info, warn or error", o.logLevel)
	}
	log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level}))
	token, err := o.tokenSource()
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	// The metadata service is link-local: never through a proxy.
	mdClient := &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 2, IdleConnTimeout: time.Minute}}
	src, cloud, err := o.source(ctx, mdClient)
	if err != nil {
		return err
	}
	id := o.instanceID
	if id == "" {
		if id, err = src.InstanceID(ctx); err != nil {
			return fmt.Errorf("--instance-id not given and TIDEGPU_INSTANCE_ID not set: reading it from the %s metadata service: %w", cloud, err)
		}
	}
	rep, err := agent.NewReporter(agent.ReporterOptions{Controller: o.controller, Namespace: o.namespace, Pool: o.pool, InstanceID: id, Token: token})
	if err != nil {
		return fmt.Errorf("invalid --controller, --pool or --instance-id: %w", err)
	}
	log = log.With("pool", o.pool, "instance", id, "cloud", string(cloud))
	if token != nil && insecureRemote(o.controller) {
		log.Warn("the admin token goes over plain http to a host that is not loopback: use https")
	}
	if token == nil {
		log.Info("no admin token (--token-file or TIDEGPU_ADMIN_TOKEN): reports go without one")
	}
	a, err := agent.New(agent.Config{Source: src, Reporter: rep, Interval: o.interval, Logger: log})
	if err != nil {
		return err
	}
	return a.Run(ctx)
}

// source builds the metadata source for --cloud, asking which cloud answers
// for auto.
func (o *agentOptions) source(ctx context.Context, client *http.Client) (agent.Source, agent.Cloud, error) {
	cloud := agent.Cloud(o.cloud)
	if cloud == "auto" {
		awsEP, tencentEP := agent.DefaultAWSEndpoint, agent.DefaultTencentEndpoint
		if o.metadataEndpoint != "" {
			awsEP, tencentEP = o.metadataEndpoint, o.metadataEndpoint
		}
		c, err := agent.Detect(ctx, client, awsEP, tencentEP)
		if err != nil {
			return nil, "", fmt.Errorf("--cloud auto: %w (give --cloud and --metadata-endpoint)", err)
		}
		cloud = c
	}
	switch cloud {
	case agent.CloudAWS:
		src, err := agent.NewAWS(agent.AWSOptions{Endpoint: o.metadataEndpoint, Client: client, TokenTTL: o.imdsTokenTTL,
			Rebalance: agent.RebalancePolicy(o.rebalance), RebalanceDeadline: o.rebalanceDeadline})
		if err != nil {
			return nil, "", fmt.Errorf("--cloud aws: %w", err)
		}
		return src, cloud, nil
	default:
		src, err := agent.NewTencent(agent.TencentOptions{Endpoint: o.metadataEndpoint, Client: client})
		if err != nil {
			return nil, "", fmt.Errorf("--cloud tencent: %w", err)
		}
		return src, cloud, nil
	}
}

// insecureRemote says whether the controller URL is plain http to a host
// that is not loopback.
func insecureRemote(controller string) bool {
	u, err := url.Parse(controller)
	if err != nil || u.Scheme != "http" {
		return false
	}
	host := u.Hostname()
	if host == "localhost" {
		return false
	}
	ip := net.ParseIP(host)
	return ip == nil || !ip.IsLoopback()
}
