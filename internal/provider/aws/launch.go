package aws

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/tidegpu/tidegpu/internal/provider"
)

// maxClientToken is EC2's limit on a ClientToken: up to 64 ASCII characters
// (https://docs.aws.amazon.com/ec2/latest/devguide/ec2-api-idempotency.html).
const maxClientToken = 64

// MaxUserData is EC2's limit on user data: "16 KB, in raw form, before it
// is base64-encoded"
// (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/instancedata-add-user-data.html).
const MaxUserData = 16 * 1024

// launchParams is a LaunchRequest resolved against its spec.
type launchParams struct {
	Pool           string
	ImageID        string
	InstanceType   string
	Zone           string
	Market         provider.Market
	Token          string
	Port           int32
	UsePrivate     bool
	SubnetID       string
	SecurityGroups []string
	// UserData is raw; RunInstances gets it base64-encoded.
	UserData []byte
}

// resolveLaunch applies the request's overrides to its spec and checks that
// EC2 can be asked.
func resolveLaunch(req provider.LaunchRequest) (launchParams, error) {
	spec := req.Spec
	if spec == nil {
		return launchParams{}, fmt.Errorf("%w: pool %q has no spec", ErrInvalidRequest, req.Pool)
	}
	lp := launchParams{
		Pool:           req.Pool,
		ImageID:        spec.ImageID,
		InstanceType:   firstNonEmpty(req.InstanceType, spec.InstanceType),
		Zone:           firstNonEmpty(req.Zone, spec.AvailabilityZone),
		Market:         req.Market,
		Token:          clientToken(req.Token),
		Port:           spec.Serving.Port,
		UsePrivate:     spec.Serving.UsePrivateIP,
		SecurityGroups: spec.SecurityGroupIDs,
		UserData:       req.UserData,
	}
	lp.SubnetID = spec.SubnetFor(lp.Zone)
	if lp.Market == "" {
		lp.Market = provider.MarketFor(spec.InstanceChargeType)
	}
	if lp.Port <= 0 {
		lp.Port = DefaultServingPort
	}
	switch {
	case lp.Pool == "":
		return lp, fmt.Errorf("%w: no pool name", ErrInvalidRequest)
	case utf8.RuneCountInString(lp.Pool) > maxTagValue:
		return lp, fmt.Errorf("%w: pool name longer than %d characters cannot be a tag value", ErrInvalidRequest, maxTagValue)
	case lp.ImageID == "":
		return lp, fmt.Errorf("%w: pool %q: spec.imageId is required on aws", ErrInvalidRequest, lp.Pool)
	case lp.InstanceType == "":
		return lp, fmt.Errorf("%w: pool %q: spec.instanceType is required on aws", ErrInvalidRequest, lp.Pool)
	case lp.Market != provider.MarketSpot && lp.Market != provider.MarketOnDemand:
		return lp, fmt.Errorf("%w: pool %q: unknown market %q", ErrInvalidRequest, lp.Pool, lp.Market)
	case len(lp.UserData) > MaxUserData:
		return lp, fmt.Errorf("%w: pool %q: spec.bootstrap: user data of %d bytes is over EC2's %d-byte limit", ErrInvalidRequest, lp.Pool, len(lp.UserData), MaxUserData)
	}
	return lp, nil
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// clientToken makes a launch token usable as EC2's ClientToken: a token of
// up to 64 printable ASCII characters is used as is, a longer or non-ASCII
// one is replaced by its SHA-256 (64 hex characters, still stable across
// retries), and an empty one by a random token (no idempotency asked for).
func clientToken(token string) string {
	if token == "" {
		var b [16]byte
		_, _ = rand.Read(b[:])
		return hex.EncodeToString(b[:])
	}
	if len(token) <= maxClientToken && printableASCII(token) {
		return token
	}
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// runInput is the RunInstances request for a launch: one instance
// (MinCount = MaxCount = 1), spot as a one-time request terminated on
// interruption, the launch token as ClientToken, ownership tags on the
// instance and its volumes.
func runInput(lp launchParams, cluster string) *ec2.RunInstancesInput {
	in := &ec2.RunInstancesInput{
		MinCount:     aws.Int32(1),
		MaxCount:     aws.Int32(1),
		ImageId:      aws.String(lp.ImageID),
		InstanceType: types.InstanceType(lp.InstanceType),
		ClientToken:  aws.String(lp.Token),
	}
	if len(lp.UserData) > 0 {
		in.UserData = aws.String(base64.StdEncoding.EncodeToString(lp.UserData))
	}
	if lp.Zone != "" {
		in.Placement = &types.Placement{AvailabilityZone: aws.String(lp.Zone)}
	}
	if lp.SubnetID != "" {
		in.SubnetId = aws.String(lp.SubnetID)
	}
	if len(lp.SecurityGroups) > 0 {
		in.SecurityGroupIds = append([]string(nil), lp.SecurityGroups...)
	}
	if lp.Market == provider.MarketSpot {
		in.InstanceMarketOptions = &types.InstanceMarketOptionsRequest{
			MarketType: types.MarketTypeSpot,
			SpotOptions: &types.SpotMarketOptions{
				SpotInstanceType:             types.SpotInstanceTypeOneTime,
				InstanceInterruptionBehavior: types.InstanceInterruptionBehaviorTerminate,
			},
		}
	}
	tags := ownershipTags(owner{
		Managed: true, Cluster: cluster, Pool: lp.Pool, Token: lp.Token,
		Port: lp.Port, UsePrivate: lp.UsePrivate,
	})
	in.TagSpecifications = []types.TagSpecification{
		{ResourceType: types.ResourceTypeInstance, Tags: tags},
		{ResourceType: types.ResourceTypeVolume, Tags: tags},
	}
	return in
}

// Launch starts one instance with RunInstances. Retries inside the SDK
// reuse the ClientToken, so a response lost to a timeout does not make a
// second instance; a capacity error is returned at once as a
// *provider.InsufficientCapacityError naming the offering, and the
// offering is reported unavailable for UnavailableTTL.
func (p *Provider) Launch(ctx context.Context, req provider.LaunchRequest) (provider.Instance, error) {
	lp, err := resolveLaunch(req)
	if err != nil {
		return provider.Instance{}, fmt.Errorf("launching for pool %q: %w", req.Pool, err)
	}
	out, err := p.client.RunInstances(ctx, runInput(lp, p.opts.Cluster))
	if err != nil {
		cerr := classify(err, lp.Zone, lp.InstanceType, lp.Market)
		if provider.IsInsufficientCapacity(cerr) {
			p.markUnavailable(offeringKey{Zone: lp.Zone, InstanceType: lp.InstanceType, Market: lp.Market})
		}
		return provider.Instance{}, fmt.Errorf("launching %s (%s) in %s for pool %q: %w",
			lp.InstanceType, lp.Market, zoneOrAny(lp.Zone, p.opts.Region), lp.Pool, cerr)
	}
	if len(out.Instances) == 0 {
		return provider.Instance{}, fmt.Errorf("launching %s for pool %q: RunInstances returned no instance", lp.InstanceType, lp.Pool)
	}
	o := owner{Managed: true, Cluster: p.opts.Cluster, Pool: lp.Pool, Token: lp.Token, Port: lp.Port, UsePrivate: lp.UsePrivate}
	inst, live := instanceFrom(out.Instances[0], o, p.clock.Now())
	if !live {
		// Only an idempotent replay of a token whose instance has since
		// ended can answer with a dead instance.
		return provider.Instance{}, fmt.Errorf("launching for pool %q: launch token %s already made instance %s, which is %s",
			lp.Pool, lp.Token, inst.ID, stateName(out.Instances[0]))
	}
	p.rememberLaunch(inst)
	return inst, nil
}

func zoneOrAny(zone, region string) string {
	if zone == "" {
		return "any zone of " + region
	}
	return zone
}

func stateName(in types.Instance) string {
	if in.State == nil {
		return "unknown"
	}
	return string(in.State.Name)
}

// stateOf maps an EC2 instance state to the provider's: pending and running
// as such, shutting-down as Terminating, stopping and stopped as Stopping
// and Stopped (a warm standby, see Stop: listed, never counted as running);
// terminated and anything unknown are not live.
func stateOf(name types.InstanceStateName) (provider.State, bool) {
	switch name {
	case types.InstanceStateNamePending:
		return provider.StatePending, true
	case types.InstanceStateNameRunning:
		return provider.StateRunning, true
	case types.InstanceStateNameShuttingDown:
		return provider.StateTerminating, true
	case types.InstanceStateNameStopping:
		return provider.StateStopping, true
	case types.InstanceStateNameStopped:
		return provider.StateStopped, true
	}
	return "", false
}

// address is host:port of the inference server on the chosen IP, "" while
// that IP is unknown.
func address(privateIP, publicIP string, port int32, usePrivate bool) string {
	ip := publicIP
	if usePrivate {
		ip = privateIP
	}
	if ip == "" {
		return ""
	}
	if port <= 0 {
		port = DefaultServingPort
	}
	return net.JoinHostPort(ip, strconv.Itoa(int(port)))
}

// instanceFrom converts an EC2 instance owned as o; live is false for
// instances that are gone (terminated) or in a state we do not know. A
// stopping or stopped instance has no Address: it serves nothing, and its
// public IP does not survive the stop.
func instanceFrom(in types.Instance, o owner, now time.Time) (provider.Instance, bool) {
	var state provider.State
	live := false
	if in.State != nil {
		state, live = stateOf(in.State.Name)
	}
	market := provider.MarketOnDemand
	if in.InstanceLifecycle == types.InstanceLifecycleTypeSpot {
		market = provider.MarketSpot
	}
	zone := ""
	if in.Placement != nil {
		zone = aws.ToString(in.Placement.AvailabilityZone)
	}
	launched := aws.ToTime(in.LaunchTime)
	if launched.IsZero() {
		launched = now
	}
	priv, pub := aws.ToString(in.PrivateIpAddress), aws.ToString(in.PublicIpAddress)
	addr := ""
	if state == provider.StatePending || state == provider.StateRunning {
		addr = address(priv, pub, o.Port, o.UsePrivate)
	}
	return provider.Instance{
		ID:           aws.ToString(in.InstanceId),
		Pool:         o.Pool,
		Zone:         zone,
		InstanceType: string(in.InstanceType),
		Market:       market,
		State:        state,
		PrivateIP:    priv,
		PublicIP:     pub,
		Address:      addr,
		LaunchedAt:   launched,
	}, live
}
