package tencent

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/provider"
)

// Tags put on every instance this provider launches. The first three say
// who owns it; TagPort and TagAddress say how its inference server is
// reached, so that List computes addresses without the pool's spec (after a
// restart, say).
const (
	TagManagedBy = "tidegpu.eja.dev/managed-by"
	TagCluster   = "tidegpu.eja.dev/cluster"
	TagPool      = "tidegpu.eja.dev/pool"
	TagPort      = "tidegpu.eja.dev/port"
	TagAddress   = "tidegpu.eja.dev/address"
)

// Tag values.
const (
	// ManagedByValue is the value of TagManagedBy.
	ManagedByValue = "tidegpu"
	// AddressPublic and AddressPrivate are the values of TagAddress.
	AddressPublic  = "public"
	AddressPrivate = "private"
)

// DefaultPort is the inference server's port when spec.serving.port is
// unset (the seed's demo port).
const DefaultPort = 8080

const (
	maxClientToken  = 64 // RunInstances: ClientToken is at most 64 ASCII characters
	maxInstanceName = 60 // InvalidInstanceName.TooLong: 60 bytes in the older limit
)

// CVM instance states, as listed for Instance.InstanceState
// (https://www.tencentcloud.com/document/product/213/15753#InstanceStatus).
const (
	cvmPending      = "PENDING"
	cvmLaunchFailed = "LAUNCH_FAILED"
	cvmRunning      = "RUNNING"
	cvmStopped      = "STOPPED"
	cvmStarting     = "STARTING"
	cvmStopping     = "STOPPING"
	cvmRebooting    = "REBOOTING"
	cvmShutdown     = "SHUTDOWN"
	cvmTerminating  = "TERMINATING"
)

// mapState maps a CVM InstanceState to the provider's state and says
// whether the instance is live (listed to the engine at all).
//
// PENDING, STARTING and REBOOTING are Pending: they count toward the pool's
// size, as the seed counted PENDING and STARTING, but are not routed.
// RUNNING and the live-migration states serve. STOPPING and STOPPED are
// Stopping and Stopped: warm standbys (see Stop), listed so that they
// survive a controller restart, neither counted nor routed. TERMINATING and
// the rescue-mode states are Terminating: leaving, not counted, not routed.
// SHUTDOWN (in the recycle bin, to be destroyed) and LAUNCH_FAILED are gone
// for the engine. An unknown state counts as Pending so that a new API
// state never triggers a replacement storm; the engine's start timeout
// still bounds it.
func mapState(s string) (provider.State, bool) {
	switch s {
	case cvmPending, cvmStarting, cvmRebooting:
		return provider.StatePending, true
	case cvmRunning, "ENTER_SERVICE_LIVE_MIGRATE", "SERVICE_LIVE_MIGRATE", "EXIT_SERVICE_LIVE_MIGRATE":
		return provider.StateRunning, true
	case cvmStopping:
		return provider.StateStopping, true
	case cvmStopped:
		return provider.StateStopped, true
	case cvmTerminating, "ENTER_RESCUE_MODE", "RESCUE_MODE", "EXIT_RESCUE_MODE":
		return provider.StateTerminating, true
	case cvmShutdown, cvmLaunchFailed:
		return "", false
	default:
		return provider.StatePending, true
	}
}

// addressMode returns how an instance is reached: its port and whether by
// private IP, from its tags (defaults: DefaultPort, public).
func addressMode(c *cvmInstance) (port int, private bool) {
	port = DefaultPort
	if v, ok := c.tagValue(TagPort); ok {
		if p, err := strconv.Atoi(v); err == nil && p > 0 && p < 65536 {
			port = p
		}
	}
	v, _ := c.tagValue(TagAddress)
	return port, v == AddressPrivate
}

// toInstance maps a described CVM instance to a provider.Instance and says
// whether it is live. firstSeen stands in for LaunchedAt when CreatedTime is
// missing or unreadable. Address is set only while Running and once the IP
// the pool uses is assigned (a public IP arrives after the instance runs).
func toInstance(c *cvmInstance, firstSeen time.Time) (provider.Instance, bool) {
	state, live := mapState(c.InstanceState)
	pool, _ := c.tagValue(TagPool)
	in := provider.Instance{
		ID:           c.InstanceId,
		Pool:         pool,
		Zone:         c.Placement.Zone,
		InstanceType: c.InstanceType,
		Market:       provider.MarketFor(c.InstanceChargeType),
		State:        state,
		PrivateIP:    firstIP(c.PrivateIpAddresses),
		PublicIP:     firstIP(c.PublicIpAddresses),
		LaunchedAt:   firstSeen,
	}
	if t, err := time.Parse(time.RFC3339, c.CreatedTime); err == nil {
		in.LaunchedAt = t
	}
	if state == provider.StateRunning {
		port, private := addressMode(c)
		ip := in.PublicIP
		if private {
			ip = in.PrivateIP
		}
		if ip != "" {
			in.Address = net.JoinHostPort(ip, strconv.Itoa(port))
		}
	}
	return in, live
}

// firstIP returns the first valid IP address of s, or "".
func firstIP(s []string) string {
	for _, v := range s {
		if a, err := netip.ParseAddr(v); err == nil && a.Zone() == "" {
			return a.String()
		}
	}
	return ""
}

// errKind is how the provider treats an API error code.
type errKind int

const (
	kindOther     errKind = iota // give up at once
	kindThrottled                // back off and retry; a ThrottledError in the end
	kindTransient                // back off and retry (every call we make is idempotent)
	kindCapacity                 // no capacity for the offering: never retried
)

// capacityCodes are the RunInstances / InquiryPriceRunInstances error codes
// that mean "this offering has no capacity now" (from the CVM error code
// list, cvm/v20170312 errors). InvalidZone.MismatchRegion is deliberately
// absent: a zone outside the region is a configuration error that no other
// moment will fix, and hiding it as capacity would make it look transient.
// Quota codes (LimitExceeded.UserSpotQuota, LimitExceeded.InstanceQuota) are
// absent too: they are the account's limit, not the zone's capacity.
var capacityCodes = map[string]bool{
	"ResourceInsufficient.SpecifiedInstanceType":           true,
	"ResourceInsufficient.ZoneSoldOutForSpecifiedInstance": true,
	"ResourceInsufficient.AvailabilityZoneSoldOut":         true,
	"ResourceInsufficient.InsufficientOfferingMinimum":     true,
	"ResourcesSoldOut.SpecifiedInstanceType":               true,
	"ResourcesSoldOut.AvailableZone":                       true,
	"ResourcesSoldOut.EipInsufficient":                     true,
	"ResourceUnavailable.InstanceType":                     true,
	"InvalidParameterValue.InsufficientOffering":           true, // "the spot instance is out of stock"
	"LimitExceeded.SpotQuota":                              true, // "the spot instance offerings are out of stock"
}

// classify returns how an error code is handled.
func classify(code string) errKind {
	switch {
	case code == "RequestLimitExceeded" || strings.HasPrefix(code, "RequestLimitExceeded."):
		return kindThrottled
	case capacityCodes[code]:
		return kindCapacity
	case code == "ClientError.NetworkError", code == "ClientError.HttpStatusCodeError",
		code == "InternalError", strings.HasPrefix(code, "InternalError."),
		code == "InternalServerError":
		return kindTransient
	default:
		return kindOther
	}
}

// goneOnTerminate reports whether a TerminateInstances error code means
// there is nothing (left) to terminate.
func goneOnTerminate(code string) bool {
	switch code {
	case "InvalidInstanceId.NotFound",
		"UnsupportedOperation.InstanceStateTerminated",
		"UnsupportedOperation.InstanceStateTerminating",
		"UnsupportedOperation.InstanceStateLaunchFailed":
		return true
	}
	return false
}

// backoff is the wait before retry number attempt (0-based): base doubled
// per attempt, capped at max, with equal jitter (half fixed, half random by
// jitter in [0,1)) so that many callers throttled together spread out.
func backoff(attempt int, base, max time.Duration, jitter float64) time.Duration {
	if base <= 0 {
		return 0
	}
	d := base
	for i := 0; i < attempt && d < max; i++ {
		d *= 2
	}
	if d > max {
		d = max
	}
	if jitter < 0 {
		jitter = 0
	}
	if jitter >= 1 {
		jitter = 0.999999
	}
	half := d / 2
	return half + time.Duration(jitter*float64(d-half))
}

// clientToken maps a launch token to a RunInstances ClientToken: kept when
// it is printable ASCII of at most 64 characters, else its SHA-256 in hex
// (64 characters), so the same token always gives the same ClientToken.
func clientToken(token string) string {
	if token == "" {
		return ""
	}
	ok := len(token) <= maxClientToken
	for i := 0; ok && i < len(token); i++ {
		if token[i] < 0x21 || token[i] > 0x7e {
			ok = false
		}
	}
	if ok {
		return token
	}
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// instanceName is the CVM display name of a pool's instance.
func instanceName(pool string) string {
	n := "tidegpu-" + pool
	if len(n) > maxInstanceName {
		n = n[:maxInstanceName]
	}
	return n
}

// launchTarget is the offering a launch asks for, resolved from the request
// and the pool's spec.
type launchTarget struct {
	Zone, InstanceType string
	Market             provider.Market
}

// resolveTarget picks the zone, type and market of a launch: the request's
// when set, else the spec's.
func resolveTarget(req provider.LaunchRequest) launchTarget {
	t := launchTarget{Zone: req.Zone, InstanceType: req.InstanceType, Market: req.Market}
	if req.Spec != nil {
		if zs := req.Spec.Zones(); t.Zone == "" && len(zs) > 0 {
			t.Zone = zs[0]
		}
		if t.InstanceType == "" {
			t.InstanceType = req.Spec.InstanceType
		}
		if t.Market == "" {
			t.Market = provider.MarketFor(req.Spec.InstanceChargeType)
		}
	}
	if t.Market == "" {
		t.Market = provider.MarketSpot
	}
	return t
}

// launchConfig is what buildRunInstances needs besides the request.
type launchConfig struct {
	Region, Cluster   string
	SpotMaxPrice      string
	PublicBandwidthMb int
}

// buildRunInstances builds the RunInstances body for one instance of the
// request's pool. It checks what the API would refuse anyway, so that a
// misconfigured pool fails with a message naming the field.
func buildRunInstances(req provider.LaunchRequest, cfg launchConfig) (runInstancesParams, error) {
	spec := req.Spec
	if spec == nil {
		return runInstancesParams{}, fmt.Errorf("pool %q: no spec", req.Pool)
	}
	if req.Pool == "" {
		return runInstancesParams{}, fmt.Errorf("launch request without a pool")
	}
	if spec.Region != "" && spec.Region != cfg.Region {
		return runInstancesParams{}, fmt.Errorf("pool %q: spec.region %q, but this provider serves %q", req.Pool, spec.Region, cfg.Region)
	}
	t := resolveTarget(req)
	switch {
	case t.Zone == "":
		return runInstancesParams{}, fmt.Errorf("pool %q: spec.availabilityZone is empty", req.Pool)
	case t.InstanceType == "":
		return runInstancesParams{}, fmt.Errorf("pool %q: spec.instanceType is empty", req.Pool)
	case spec.ImageID == "":
		return runInstancesParams{}, fmt.Errorf("pool %q: spec.imageId is empty", req.Pool)
	case (spec.VpcID == "") != (spec.SubnetFor(t.Zone) == ""):
		return runInstancesParams{}, fmt.Errorf("pool %q: spec.vpcId and spec.subnetId (or spec.placement.subnetIds[%s]) must be set together", req.Pool, t.Zone)
	}
	if n := base64.StdEncoding.EncodedLen(len(req.UserData)); n > MaxUserData {
		return runInstancesParams{}, fmt.Errorf("pool %q: spec.bootstrap: user data is %d bytes base64-encoded, over CVM's %d-byte limit", req.Pool, n, MaxUserData)
	}
	port := int(spec.Serving.Port)
	if port <= 0 {
		port = DefaultPort
	}
	mode := AddressPublic
	if spec.Serving.UsePrivateIP {
		mode = AddressPrivate
	}
	p := runInstancesParams{
		InstanceChargeType: tidev1.ChargeOnDemand,
		Placement:          placement{Zone: t.Zone},
		InstanceType:       t.InstanceType,
		ImageId:            spec.ImageID,
		SecurityGroupIds:   append([]string(nil), spec.SecurityGroupIDs...),
		InstanceCount:      1,
		InstanceName:       instanceName(req.Pool),
		UserData:           encodeUserData(req.UserData),
		ClientToken:        clientToken(req.Token),
		TagSpecification: []tagSpecification{{
			ResourceType: "instance",
			Tags: []tag{
				{Key: TagManagedBy, Value: ManagedByValue},
				{Key: TagCluster, Value: cfg.Cluster},
				{Key: TagPool, Value: req.Pool},
				{Key: TagPort, Value: strconv.Itoa(port)},
				{Key: TagAddress, Value: mode},
			},
		}},
	}
	if spec.VpcID != "" {
		p.VirtualPrivateCloud = &virtualPrivateCloud{VpcId: spec.VpcID, SubnetId: spec.SubnetFor(t.Zone)}
	}
	if !spec.Serving.UsePrivateIP {
		bw := cfg.PublicBandwidthMb
		if bw <= 0 {
			bw = 1
		}
		p.InternetAccessible = &internetAccessible{
			InternetChargeType:      "TRAFFIC_POSTPAID_BY_HOUR",
			InternetMaxBandwidthOut: bw,
			PublicIpAssigned:        true,
		}
	}
	if t.Market == provider.MarketSpot {
		p.InstanceChargeType = tidev1.ChargeSpot
		p.InstanceMarketOptions = spotOptions(cfg.SpotMaxPrice)
	}
	return p, nil
}

// spotOptions are the market options of a one-time spot request.
func spotOptions(maxPrice string) *instanceMarketOptions {
	return &instanceMarketOptions{
		MarketType:  "spot",
		SpotOptions: spotMarketOptions{MaxPrice: maxPrice, SpotInstanceType: "one-time"},
	}
}

// ownedFilters are the DescribeInstances filters selecting this cluster's
// instances (tag:KEY filters; see DescribeInstances' Filters).
func ownedFilters(cluster string) []filter {
	return []filter{
		{Name: "tag:" + TagManagedBy, Values: []string{ManagedByValue}},
		{Name: "tag:" + TagCluster, Values: []string{cluster}},
	}
}

// owned reports whether a described instance carries this cluster's
// ownership tags (the filters already ask for that; this guards against an
// API that ignores a filter).
func owned(c *cvmInstance, cluster string) bool {
	m, _ := c.tagValue(TagManagedBy)
	cl, _ := c.tagValue(TagCluster)
	return m == ManagedByValue && cl == cluster
}

// MaxUserData is CVM's limit on RunInstances' UserData, "Base64-encoded
// custom data of up to 16 KB" (RunInstancesRequest in Tencent Cloud's Go
// SDK, cvm/v20170312), taken as the encoded size.
const MaxUserData = 16 * 1024

// encodeUserData is CVM's form of user data: base64 ("" for none).
func encodeUserData(raw []byte) string {
	if len(raw) == 0 {
		return ""
	}
	return base64.StdEncoding.EncodeToString(raw)
}
