// Package aws is the provider whose instances are Amazon EC2 instances. It
// owns everything that knows EC2: the SDK client (credentials, endpoint,
// client-side rate limit, retries with exponential backoff and jitter),
// launching with RunInstances (spot or on-demand, idempotent through the
// launch token, ownership tags), listing with one batched and cached
// DescribeInstances per round for every pool, terminating, stopping and
// starting on-demand instances kept as warm standbys (stopped instances are
// listed as provider.StateStopped), the mapping of
// EC2 errors to the provider's typed errors, and offerings with live spot
// prices and a small on-demand price table.
//
// Ownership is recorded in tags, so that two installations (two clusters)
// sharing an account never touch each other's instances:
//
//	tidegpu.eja.dev/managed-by     tidegpu
//	tidegpu.eja.dev/cluster        Options.Cluster
//	tidegpu.eja.dev/pool           the pool's name
//	tidegpu.eja.dev/launch-token   the launch's idempotency token
//	tidegpu.eja.dev/serving-port   the inference server's port
//	tidegpu.eja.dev/serving-ip     private or public: which address serves
//	Name                           tidegpu-<pool>
//
// The serving tags let List compute an instance's address without the
// pool's spec. Terminate only acts on instances whose tags name this
// cluster.
//
// The credentials need ec2:RunInstances, ec2:CreateTags (tags are set at
// launch through TagSpecifications), ec2:DescribeInstances,
// ec2:TerminateInstances, ec2:DescribeSpotPriceHistory, and for warm
// standby instances (Stop, Start) ec2:StopInstances and
// ec2:StartInstances; an IAM condition
// on aws:ResourceTag/tidegpu.eja.dev/cluster can confine termination to
// the installation's own instances.
package aws

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/smithy-go/logging"
	"golang.org/x/sync/singleflight"
	"golang.org/x/time/rate"
	"k8s.io/utils/clock"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/provider"
)

// Name is the provider's name in TidePoolSpec.Provider.
const Name = tidev1.ProviderAWS

// Defaults of Options.
const (
	DefaultRateLimit      = 10.0
	DefaultBurst          = 20
	DefaultListCacheTTL   = time.Second
	DefaultMaxAttempts    = 8
	DefaultBackoffBase    = 500 * time.Millisecond
	DefaultMaxBackoff     = 20 * time.Second
	DefaultListPageSize   = 1000
	DefaultPriceCacheTTL  = 5 * time.Minute
	DefaultUnavailableTTL = 3 * time.Minute
	DefaultLaunchGrace    = 2 * time.Minute
	DefaultServingPort    = 8080
)

// ErrInvalidOptions is returned (wrapped) by New for unusable Options.
var ErrInvalidOptions = errors.New("invalid aws provider options")

// ErrInvalidRequest is returned (wrapped) for a request that cannot be sent
// to EC2: a launch without spec, image or instance type, offerings without
// an instance type, a terminate without an instance id.
var ErrInvalidRequest = errors.New("invalid request")

// StaticCredentials are an access key given explicitly (from a Secret). Its
// String, GoString and LogValue never show the secret parts.
type StaticCredentials struct {
	AccessKeyID     string
	SecretAccessKey string
	SessionToken    string
}

// String shows that credentials are set, never their value.
func (c StaticCredentials) String() string { return "StaticCredentials{redacted}" }

// GoString is String, so that %#v does not print the secret either.
func (c StaticCredentials) GoString() string { return c.String() }

// LogValue keeps the secret out of slog output.
func (c StaticCredentials) LogValue() slog.Value { return slog.StringValue(c.String()) }

// Options configure the provider.
type Options struct {
	// Region is the EC2 region (required).
	Region string
	// Credentials are used when set; nil means the SDK's default chain
	// (environment, shared config, instance role, IRSA).
	Credentials *StaticCredentials
	// Endpoint overrides the EC2 endpoint (for example a fake's URL).
	Endpoint string
	// Cluster is the value of the cluster ownership tag (required): only
	// instances carrying it are listed or terminated as ours.
	Cluster string
	// RateLimit is the client-side limit on EC2 calls per second (every
	// attempt, retries included) and Burst its bucket size. 0 means the
	// defaults; a negative RateLimit means no client-side limit.
	RateLimit float64
	Burst     int
	// MaxAttempts bounds the attempts of one EC2 call (default 8).
	// BackoffBase and MaxBackoff shape the delay before retry n, drawn
	// uniformly from [0, min(MaxBackoff, BackoffBase·2ⁿ⁻¹)) ("full
	// jitter"); defaults 500 ms and 20 s.
	MaxAttempts int
	BackoffBase time.Duration
	MaxBackoff  time.Duration
	// Clock is the provider's clock (cache ages, rate limit, spot price
	// queries); default the real clock.
	Clock clock.Clock
	// HTTPClient replaces the SDK's HTTP client (AWS_CA_BUNDLE then does
	// not apply: the client's own TLS settings do).
	HTTPClient *http.Client
	// ListCacheTTL is how long a DescribeInstances snapshot answers List
	// (default 1 s); negative disables the cache (concurrent calls still
	// share one request).
	ListCacheTTL time.Duration
	// ListPageSize is DescribeInstances' MaxResults, 5..1000 (default 1000).
	ListPageSize int32
	// LaunchGrace is how long a launched instance that DescribeInstances
	// does not show yet (EC2 is eventually consistent) is still reported
	// by List as Pending (default 2 min).
	LaunchGrace time.Duration
	// Zones are the zones offered when a spec names none (default: the
	// zones the spot price history reports).
	Zones []string
	// PriceCacheTTL is how long spot prices are reused (default 5 min).
	PriceCacheTTL time.Duration
	// UnavailableTTL is how long an offering stays unavailable after
	// EC2 refused it for capacity (default 3 min).
	UnavailableTTL time.Duration
	// Logger receives warnings (degraded prices); default slog.Default().
	Logger *slog.Logger
}

func (o *Options) setDefaults() {
	if o.RateLimit == 0 {
		o.RateLimit = DefaultRateLimit
	}
	if o.Burst <= 0 {
		o.Burst = DefaultBurst
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = DefaultMaxAttempts
	}
	if o.BackoffBase <= 0 {
		o.BackoffBase = DefaultBackoffBase
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = DefaultMaxBackoff
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.ListCacheTTL == 0 {
		o.ListCacheTTL = DefaultListCacheTTL
	}
	if o.ListPageSize == 0 {
		o.ListPageSize = DefaultListPageSize
	}
	if o.LaunchGrace <= 0 {
		o.LaunchGrace = DefaultLaunchGrace
	}
	if o.PriceCacheTTL <= 0 {
		o.PriceCacheTTL = DefaultPriceCacheTTL
	}
	if o.UnavailableTTL <= 0 {
		o.UnavailableTTL = DefaultUnavailableTTL
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

func (o *Options) validate() error {
	switch {
	case o.Region == "":
		return fmt.Errorf("%w: region is required", ErrInvalidOptions)
	case o.Cluster == "":
		return fmt.Errorf("%w: cluster is required (the ownership tag value that keeps installations apart)", ErrInvalidOptions)
	case len(o.Cluster) > maxTagValue:
		return fmt.Errorf("%w: cluster %q is longer than %d characters", ErrInvalidOptions, o.Cluster, maxTagValue)
	case o.ListPageSize < 5 || o.ListPageSize > 1000:
		return fmt.Errorf("%w: list page size %d is outside 5..1000", ErrInvalidOptions, o.ListPageSize)
	case o.Credentials != nil && (o.Credentials.AccessKeyID == "" || o.Credentials.SecretAccessKey == ""):
		return fmt.Errorf("%w: static credentials need both an access key id and a secret access key", ErrInvalidOptions)
	}
	return nil
}

// Provider launches, lists and terminates EC2 instances for pools.
type Provider struct {
	client  *ec2.Client
	opts    Options
	clock   clock.Clock
	limiter *rate.Limiter // nil: no client-side limit
	log     *slog.Logger

	flight singleflight.Group

	mu     sync.Mutex
	snap   *snapshot
	gen    uint64
	recent map[string]recentLaunch
	// unavailable maps an offering EC2 refused for capacity to when it may
	// be tried again.
	unavailable map[offeringKey]time.Time
	prices      map[string]priceEntry
}

var (
	_ provider.Provider       = (*Provider)(nil)
	_ provider.OfferingSource = (*Provider)(nil)
)

// New builds the provider and its EC2 client. It makes no EC2 call.
func New(ctx context.Context, opts Options) (*Provider, error) {
	opts.setDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	opts.Zones = slices.Clone(opts.Zones)
	p := &Provider{
		opts:        opts,
		clock:       opts.Clock,
		log:         opts.Logger,
		recent:      map[string]recentLaunch{},
		unavailable: map[offeringKey]time.Time{},
		prices:      map[string]priceEntry{},
	}
	// Nothing below may keep the secret: opts is kept without it.
	creds := p.opts.Credentials
	p.opts.Credentials = nil
	if opts.RateLimit > 0 {
		p.limiter = rate.NewLimiter(rate.Limit(opts.RateLimit), opts.Burst)
	}

	// The SDK's own logger writes to stderr; ours already reports what
	// matters (errors are returned and logged by the engine).
	loadOpts := []func(*config.LoadOptions) error{config.WithRegion(opts.Region), config.WithLogger(logging.Nop{})}
	if creds != nil {
		static := credentials.NewStaticCredentialsProvider(creds.AccessKeyID, creds.SecretAccessKey, creds.SessionToken)
		loadOpts = append(loadOpts, config.WithCredentialsProvider(aws.NewCredentialsCache(static)))
	}
	cfg, err := config.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return nil, fmt.Errorf("loading AWS configuration for %s: %w", opts.Region, err)
	}
	if opts.HTTPClient != nil {
		// Set after loading: the loader would try to add AWS_CA_BUNDLE to
		// the client's transport, which a plain *http.Client cannot take.
		// A caller's own client keeps its own TLS settings.
		cfg.HTTPClient = opts.HTTPClient
	}
	p.client = ec2.NewFromConfig(cfg, func(o *ec2.Options) {
		if opts.Endpoint != "" {
			o.BaseEndpoint = aws.String(opts.Endpoint)
		}
		o.Retryer = newRetryer(opts.MaxAttempts, opts.BackoffBase, opts.MaxBackoff)
		// Our retryer owns the attempt count, whatever AWS_MAX_ATTEMPTS says.
		o.RetryMaxAttempts = 0
		o.APIOptions = append(o.APIOptions, p.addRateLimit)
	})
	return p, nil
}

// Name is "aws".
func (p *Provider) Name() string { return Name }

// Region is the provider's region.
func (p *Provider) Region() string { return p.opts.Region }

// Cluster is the provider's ownership tag value.
func (p *Provider) Cluster() string { return p.opts.Cluster }
