// Package tencent is the Tencent Cloud CVM provider: it launches, lists and
// terminates a pool's instances with the CVM API 3.0 (version 2017-03-12)
// through the tencentcloud-sdk-go common client (TC3-HMAC-SHA256 signing
// by the SDK), and lists offerings with live prices from
// InquiryPriceRunInstances, falling back to a small embedded table.
//
// It owns: the RunInstances request for a pool (spot via SPOTPAID +
// InstanceMarketOptions, ownership tags, ClientToken idempotency), the
// mapping of CVM instance states and addresses to provider.Instance,
// stopping (StoppedMode STOP_CHARGING) and starting pay-as-you-go instances
// kept as warm standbys, one cached DescribeInstances listing per region
// shared by every pool, the
// mapping of CVM error codes to provider.InsufficientCapacityError and
// provider.ThrottledError, and the client-side rate limit with backoff.
//
// Everything time-related runs on the injected clock.
package tencent

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/common"
	"github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/common/profile"
	"golang.org/x/sync/singleflight"
	"golang.org/x/time/rate"
	"k8s.io/utils/clock"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/provider"
)

// Options configures a Provider. Region, SecretID and SecretKey are
// required; the rest has defaults.
type Options struct {
	// Region is the CVM region (e.g. ap-singapore). One Provider serves one
	// region.
	Region string
	// SecretID and SecretKey are the API key, read from a Kubernetes Secret.
	// They are never logged nor shown by String.
	SecretID, SecretKey string
	// Endpoint overrides the API host: "host[:port]" (HTTPS) or a URL such
	// as "http://127.0.0.1:8080" (the scheme is honoured; tests use the
	// fake in cvmtest this way). Empty means the SDK's cvm.tencentcloudapi.com.
	Endpoint string
	// Cluster names this installation; its instances carry it in the
	// TagCluster tag and List sees only those. Default "default".
	Cluster string
	// RateLimit is the client-side limit on API calls per second (default
	// 10, the documented per-action limit of RunInstances and
	// InquiryPriceRunInstances); Burst its bucket size (default 10).
	RateLimit float64
	Burst     int
	// Clock is the time source (default the real clock).
	Clock clock.Clock
	// ListCacheTTL is how long one DescribeInstances listing serves every
	// List (default 1 s).
	ListCacheTTL time.Duration

	// RequestTimeout bounds one HTTP attempt (default 30 s).
	RequestTimeout time.Duration
	// MaxAttempts bounds the attempts of one call that is throttled or
	// fails transiently (default 8).
	MaxAttempts int
	// BackoffBase and BackoffMax shape the exponential backoff between
	// attempts (defaults 250 ms and 8 s).
	BackoffBase, BackoffMax time.Duration
	// SpotMaxPrice is the spot bid sent as SpotOptions.MaxPrice (a decimal
	// string such as "1.05"); empty sends none, which bids the market price.
	SpotMaxPrice string
	// PublicBandwidthMbps is InternetMaxBandwidthOut for pools reached by
	// public IP (default 10).
	PublicBandwidthMbps int
	// Currency of the prices the account is billed in (default USD, as on
	// the international site; CNY on the China site).
	Currency string
	// PriceCacheTTL is how long a live price is reused (default 5 min).
	PriceCacheTTL time.Duration
	// CapacityTTL is how long an offering stays unavailable after the API
	// reported no capacity for it (default 3 min).
	CapacityTTL time.Duration
	// LaunchGrace is how long a launched instance is listed (as Pending)
	// while DescribeInstances does not show it yet (default 2 min).
	LaunchGrace time.Duration
}

// String describes the options without the secret key.
func (o Options) String() string {
	id := "unset"
	if o.SecretID != "" {
		id = "set"
	}
	return fmt.Sprintf("tencent.Options{Region:%q Endpoint:%q Cluster:%q SecretID:%s SecretKey:redacted}", o.Region, o.Endpoint, o.Cluster, id)
}

// GoString is String, so that %#v does not print the key either.
func (o Options) GoString() string { return o.String() }

func (o Options) withDefaults() Options {
	if o.Cluster == "" {
		o.Cluster = "default"
	}
	if o.RateLimit <= 0 {
		o.RateLimit = 10
	}
	if o.Burst <= 0 {
		o.Burst = 10
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.ListCacheTTL <= 0 {
		o.ListCacheTTL = time.Second
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = 30 * time.Second
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 8
	}
	if o.BackoffBase <= 0 {
		o.BackoffBase = 250 * time.Millisecond
	}
	if o.BackoffMax <= 0 {
		o.BackoffMax = 8 * time.Second
	}
	if o.BackoffMax < o.BackoffBase {
		o.BackoffMax = o.BackoffBase
	}
	if o.PublicBandwidthMbps <= 0 {
		o.PublicBandwidthMbps = 10
	}
	if o.Currency == "" {
		o.Currency = "USD"
	}
	if o.PriceCacheTTL <= 0 {
		o.PriceCacheTTL = 5 * time.Minute
	}
	if o.CapacityTTL <= 0 {
		o.CapacityTTL = 3 * time.Minute
	}
	if o.LaunchGrace <= 0 {
		o.LaunchGrace = 2 * time.Minute
	}
	return o
}

// endpoint splits Options.Endpoint into the SDK's scheme and host.
func endpoint(e string) (scheme, host string, err error) {
	if e == "" {
		return "HTTPS", "", nil
	}
	if !strings.Contains(e, "://") {
		return "HTTPS", strings.TrimSuffix(e, "/"), nil
	}
	u, err := url.Parse(e)
	if err != nil {
		return "", "", fmt.Errorf("endpoint %q: %w", e, err)
	}
	switch u.Scheme {
	case "http", "https":
	default:
		return "", "", fmt.Errorf("endpoint %q: scheme must be http or https", e)
	}
	if u.Host == "" {
		return "", "", fmt.Errorf("endpoint %q: no host", e)
	}
	return strings.ToUpper(u.Scheme), u.Host, nil
}

// Provider is the Tencent Cloud CVM provider of one region.
type Provider struct {
	opts  Options
	api   *caller
	clock clock.Clock
	sf    singleflight.Group

	mu        sync.Mutex
	snap      *snapshot
	gen       uint64                       // bumped by invalidate: older listings are not cached
	launched  map[string]provider.Instance // accepted, not yet seen by DescribeInstances
	dying     map[string]time.Time         // terminated at
	firstSeen map[string]time.Time
	prices    map[priceKey]priceEntry
	noCap     map[offerKey]time.Time // offering without capacity until
}

var (
	_ provider.Provider       = (*Provider)(nil)
	_ provider.OfferingSource = (*Provider)(nil)
)

// snapshot is one DescribeInstances listing of the cluster's instances.
type snapshot struct {
	at        time.Time // when the listing started
	instances []cvmInstance
}

// New returns a provider for opts.Region.
func New(opts Options) (*Provider, error) {
	switch {
	case opts.Region == "":
		return nil, errors.New("tencent: region is required")
	case opts.SecretID == "" || opts.SecretKey == "":
		return nil, errors.New("tencent: secretId and secretKey are required (from the pool's credentials Secret)")
	}
	opts = opts.withDefaults()
	scheme, host, err := endpoint(opts.Endpoint)
	if err != nil {
		return nil, fmt.Errorf("tencent: %w", err)
	}
	cp := profile.NewClientProfile()
	cp.HttpProfile.Scheme = scheme
	cp.HttpProfile.Endpoint = host
	cp.HttpProfile.ReqMethod = "POST"
	cp.HttpProfile.ReqTimeout = int((opts.RequestTimeout + time.Second - 1) / time.Second)
	cp.Language = "en-US"
	// Retries are ours (on the injected clock, with jitter); the SDK's
	// would sleep on the wall clock without jitter.
	cp.RateLimitExceededMaxRetries = 0
	cp.NetworkFailureMaxRetries = 0
	cp.DisableRegionBreaker = true
	sdk := common.NewCommonClient(common.NewCredential(opts.SecretID, opts.SecretKey), opts.Region, cp)

	p := &Provider{
		opts:  opts,
		clock: opts.Clock,
		api: &caller{
			sdk:         sdk,
			clock:       opts.Clock,
			limiter:     rate.NewLimiter(rate.Limit(opts.RateLimit), opts.Burst),
			maxAttempts: opts.MaxAttempts,
			base:        opts.BackoffBase,
			max:         opts.BackoffMax,
			rnd:         rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())),
		},
		launched:  map[string]provider.Instance{},
		dying:     map[string]time.Time{},
		firstSeen: map[string]time.Time{},
		prices:    map[priceKey]priceEntry{},
		noCap:     map[offerKey]time.Time{},
	}
	return p, nil
}

// Name implements provider.Provider.
func (p *Provider) Name() string { return tidev1.ProviderTencent }

// Region is the region this provider serves.
func (p *Provider) Region() string { return p.opts.Region }

// Launch implements provider.Provider: one RunInstances call (retried on
// throttling and transient failures with the same ClientToken, so a retry
// after a lost answer does not make a second instance). Lack of capacity is
// a *provider.InsufficientCapacityError naming the zone, type and market.
func (p *Provider) Launch(ctx context.Context, req provider.LaunchRequest) (provider.Instance, error) {
	params, err := buildRunInstances(req, launchConfig{
		Region:            p.opts.Region,
		Cluster:           p.opts.Cluster,
		SpotMaxPrice:      p.opts.SpotMaxPrice,
		PublicBandwidthMb: p.opts.PublicBandwidthMbps,
	})
	if err != nil {
		return provider.Instance{}, fmt.Errorf("tencent: launching for pool %q: %w", req.Pool, err)
	}
	t := resolveTarget(req)
	body, err := p.api.call(ctx, "RunInstances", params)
	if err != nil {
		if classify(apiCode(err)) == kindCapacity {
			p.markNoCapacity(offerKey{Zone: t.Zone, InstanceType: t.InstanceType, Market: t.Market})
			err = &provider.InsufficientCapacityError{Zone: t.Zone, InstanceType: t.InstanceType, Market: t.Market, Err: err}
		}
		return provider.Instance{}, fmt.Errorf("tencent: launching %s (%s) in %s for pool %q: %w", t.InstanceType, t.Market, t.Zone, req.Pool, err)
	}
	ids, err := parseRunInstances(body)
	if err != nil {
		return provider.Instance{}, fmt.Errorf("tencent: launching for pool %q: %w", req.Pool, err)
	}
	if len(ids) != 1 {
		return provider.Instance{}, fmt.Errorf("tencent: launching for pool %q: RunInstances accepted %d instances, want 1 (%v)", req.Pool, len(ids), ids)
	}
	in := provider.Instance{
		ID:           ids[0],
		Pool:         req.Pool,
		Zone:         t.Zone,
		InstanceType: t.InstanceType,
		Market:       t.Market,
		State:        provider.StatePending,
		LaunchedAt:   p.clock.Now(),
	}
	p.mu.Lock()
	p.launched[in.ID] = in
	p.mu.Unlock()
	return in, nil
}

// Terminate implements provider.Provider with TerminateInstances. An
// instance that is already gone or going is not an error.
func (p *Provider) Terminate(ctx context.Context, id string) error {
	if id == "" {
		return errors.New("tencent: terminate: empty instance id")
	}
	_, err := p.api.call(ctx, "TerminateInstances", terminateParams{InstanceIds: []string{id}})
	if err != nil && !goneOnTerminate(apiCode(err)) {
		return fmt.Errorf("tencent: terminating %s: %w", id, err)
	}
	p.mu.Lock()
	delete(p.launched, id)
	p.dying[id] = p.clock.Now()
	p.mu.Unlock()
	return nil
}

// List implements provider.Provider: the live instances of pool ("" for
// every pool) from the region's shared, briefly cached DescribeInstances
// listing, plus instances accepted by Launch that the listing does not
// show yet, with instances being terminated shown as Terminating.
func (p *Provider) List(ctx context.Context, pool string) ([]provider.Instance, error) {
	all, err := p.ListAll(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]provider.Instance, 0, len(all))
	for _, o := range all {
		if o.Live && (pool == "" || o.Pool == pool) {
			out = append(out, o.Instance)
		}
	}
	return out, nil
}

// Owned is an instance carrying this cluster's ownership tags, in any CVM
// state, as ListAll reports it for garbage collection.
type Owned struct {
	provider.Instance
	// CVMState is the CVM InstanceState (PENDING, RUNNING, STOPPED,
	// SHUTDOWN, ...); empty for a launch DescribeInstances does not show yet.
	CVMState string
	// Live is false for instances the engine no longer sees (SHUTDOWN,
	// LAUNCH_FAILED): a garbage collector may terminate them. STOPPED and
	// STOPPING instances are warm standbys and live.
	Live bool
}

// ListAll returns every instance of this cluster, of every pool and in
// every state, from the same shared listing as List.
func (p *Provider) ListAll(ctx context.Context) ([]Owned, error) {
	snap, err := p.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	now := p.clock.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	seen := make(map[string]bool, len(snap.instances))
	out := make([]Owned, 0, len(snap.instances)+len(p.launched))
	for i := range snap.instances {
		c := &snap.instances[i]
		seen[c.InstanceId] = true
		fs, ok := p.firstSeen[c.InstanceId]
		if !ok {
			fs = now
			p.firstSeen[c.InstanceId] = fs
		}
		in, live := toInstance(c, fs)
		if l, ok := p.launched[c.InstanceId]; ok {
			delete(p.launched, c.InstanceId)
			if c.CreatedTime == "" {
				in.LaunchedAt = l.LaunchedAt
			}
		}
		if at, ok := p.dying[c.InstanceId]; ok {
			if !live && snap.at.After(at) {
				delete(p.dying, c.InstanceId)
			} else if live {
				in.State = provider.StateTerminating
				in.Address = ""
			}
		}
		out = append(out, Owned{Instance: in, CVMState: c.InstanceState, Live: live})
	}
	for id, at := range p.dying {
		if !seen[id] && snap.at.After(at) {
			delete(p.dying, id)
		}
	}
	for id := range p.firstSeen {
		if !seen[id] {
			delete(p.firstSeen, id)
		}
	}
	for id, in := range p.launched {
		if now.Sub(in.LaunchedAt) >= p.opts.LaunchGrace {
			delete(p.launched, id)
			continue
		}
		out = append(out, Owned{Instance: in, Live: true})
	}
	return out, nil
}

// snapshot returns the cached listing, or makes one: concurrent callers
// share a single DescribeInstances round.
func (p *Provider) snapshot(ctx context.Context) (*snapshot, error) {
	p.mu.Lock()
	s := p.snap
	p.mu.Unlock()
	if s != nil && p.clock.Since(s.at) < p.opts.ListCacheTTL {
		return s, nil
	}
	p.mu.Lock()
	gen := p.gen
	p.mu.Unlock()
	// A listing started before an invalidation is neither joined nor cached.
	ch := p.sf.DoChan(fmt.Sprintf("describe-%d", gen), func() (any, error) {
		// Shared by every waiting caller: not bound to the first one's
		// context, but bounded on its own.
		budget := time.Duration(p.opts.MaxAttempts) * (p.opts.RequestTimeout + p.opts.BackoffMax)
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), budget)
		defer cancel()
		at := p.clock.Now()
		ins, err := p.describeAll(dctx)
		if err != nil {
			return nil, err
		}
		s := &snapshot{at: at, instances: ins}
		p.mu.Lock()
		if p.gen == gen && (p.snap == nil || !p.snap.at.After(at)) {
			p.snap = s
		}
		p.mu.Unlock()
		return s, nil
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return nil, fmt.Errorf("tencent: listing instances in %s: %w", p.opts.Region, r.Err)
		}
		return r.Val.(*snapshot), nil
	case <-ctx.Done():
		return nil, fmt.Errorf("tencent: listing instances in %s: %w", p.opts.Region, ctx.Err())
	}
}

// invalidate drops the cached listing after a stop or start, so that the
// next List asks the API again.
func (p *Provider) invalidate() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gen++
	p.snap = nil
}

// describePageSize is DescribeInstances' maximum Limit.
const describePageSize = 100

// describeAll pages through DescribeInstances for this cluster's
// instances, Offset/Limit up to TotalCount.
func (p *Provider) describeAll(ctx context.Context) ([]cvmInstance, error) {
	var out []cvmInstance
	seen := map[string]bool{}
	params := describeParams{Filters: ownedFilters(p.opts.Cluster), Limit: describePageSize}
	for page := 0; ; page++ {
		body, err := p.api.call(ctx, "DescribeInstances", params)
		if err != nil {
			return nil, err
		}
		pg, err := parseDescribeInstances(body)
		if err != nil {
			return nil, fmt.Errorf("DescribeInstances offset %d: %w", params.Offset, err)
		}
		for _, c := range pg.Instances {
			if seen[c.InstanceId] || !owned(&c, p.opts.Cluster) {
				continue
			}
			seen[c.InstanceId] = true
			out = append(out, c)
		}
		params.Offset += len(pg.Instances)
		if len(pg.Instances) == 0 || params.Offset >= pg.TotalCount {
			return out, nil
		}
		if page > pg.TotalCount/describePageSize+2 {
			return nil, fmt.Errorf("DescribeInstances: still paging at offset %d of %d", params.Offset, pg.TotalCount)
		}
	}
}
