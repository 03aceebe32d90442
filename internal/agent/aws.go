package agent

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// IMDSv2 paths and headers
// (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/instance-metadata-v2-how-it-works.html).
const (
	awsTokenPath          = "/latest/api/token"
	awsTTLHeader          = "X-Aws-Ec2-Metadata-Token-Ttl-Seconds"
	awsTokenHeader        = "X-Aws-Ec2-Metadata-Token"
	awsInstanceActionPath = "/latest/meta-data/spot/instance-action"
	awsRebalancePath      = "/latest/meta-data/events/recommendations/rebalance"
	awsInstanceIDPath     = "/latest/meta-data/instance-id"
)

// IMDSv2 session token bounds: "a minimum of one second and a maximum of
// six hours".
const (
	MinIMDSTokenTTL = time.Second
	MaxIMDSTokenTTL = 6 * time.Hour
)

// AWSOptions configure an AWS source.
type AWSOptions struct {
	// Endpoint is the metadata service's base URL (DefaultAWSEndpoint when
	// empty).
	Endpoint string
	// Client does the requests (http.DefaultClient when nil).
	Client *http.Client
	// Clock tells when the session token must be refreshed (the real clock
	// when nil).
	Clock clock.PassiveClock
	// TokenTTL is the session token's lifetime, 1 s to 6 h (6 h when zero).
	TokenTTL time.Duration
	// Rebalance is what to do with a rebalance recommendation
	// (RebalanceIgnore when empty); RebalanceDeadline is the interruption
	// time it reports, after the recommendation's noticeTime
	// (DefaultRebalanceDeadline when zero).
	Rebalance         RebalancePolicy
	RebalanceDeadline time.Duration
}

// AWS reads EC2's instance metadata service with IMDSv2 session tokens: the
// spot interruption notice (spot/instance-action), the rebalance
// recommendation and the instance id.
type AWS struct {
	o AWSOptions

	mu      sync.Mutex
	token   string // secret: never logged
	expires time.Time
}

var _ Source = (*AWS)(nil)

// NewAWS returns an AWS source.
func NewAWS(o AWSOptions) (*AWS, error) {
	if o.Endpoint == "" {
		o.Endpoint = DefaultAWSEndpoint
	}
	ep, err := parseEndpoint(o.Endpoint)
	if err != nil {
		return nil, err
	}
	o.Endpoint = ep
	if o.Client == nil {
		o.Client = http.DefaultClient
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.TokenTTL == 0 {
		o.TokenTTL = MaxIMDSTokenTTL
	}
	if o.TokenTTL < MinIMDSTokenTTL || o.TokenTTL > MaxIMDSTokenTTL || o.TokenTTL%time.Second != 0 {
		return nil, fmt.Errorf("IMDSv2 token TTL %v: must be whole seconds from %v to %v", o.TokenTTL, MinIMDSTokenTTL, MaxIMDSTokenTTL)
	}
	p, err := ParseRebalancePolicy(string(o.Rebalance))
	if err != nil {
		return nil, err
	}
	o.Rebalance = p
	if o.RebalanceDeadline == 0 {
		o.RebalanceDeadline = DefaultRebalanceDeadline
	}
	if o.RebalanceDeadline < 0 {
		return nil, fmt.Errorf("rebalance deadline %v: must not be negative", o.RebalanceDeadline)
	}
	return &AWS{o: o}, nil
}

// Poll reads spot/instance-action and, unless the policy ignores them,
// events/recommendations/rebalance, and returns the more urgent notice.
// Both answer 404 while there is nothing to announce.
func (a *AWS) Poll(ctx context.Context) (*Notice, error) {
	var out *Notice
	status, body, err := a.get(ctx, awsInstanceActionPath)
	switch {
	case err != nil:
		return nil, err
	case status == http.StatusOK:
		action, at, err := ParseInstanceAction(body)
		if err != nil {
			return nil, err
		}
		out = &Notice{Kind: KindInterruption, Action: action, At: at, Source: SourceAWS}
	case status != http.StatusNotFound:
		return nil, &MetadataError{Path: awsInstanceActionPath, Status: status}
	}
	if a.o.Rebalance == RebalanceIgnore {
		return out, nil
	}
	status, body, err = a.get(ctx, awsRebalancePath)
	switch {
	case err != nil:
		return out, err
	case status == http.StatusOK:
		noticeTime, err := ParseRebalance(body)
		if err != nil {
			return out, err
		}
		out = earliest(out, rebalanceNotice(a.o.Rebalance, noticeTime, a.o.RebalanceDeadline))
	case status != http.StatusNotFound:
		return out, &MetadataError{Path: awsRebalancePath, Status: status}
	}
	return out, nil
}

// InstanceID reads the instance-id item.
func (a *AWS) InstanceID(ctx context.Context) (string, error) {
	status, body, err := a.get(ctx, awsInstanceIDPath)
	switch {
	case err != nil:
		return "", err
	case status == http.StatusNotFound:
		return "", fmt.Errorf("metadata %s: %w", awsInstanceIDPath, ErrNotFound)
	case status != http.StatusOK:
		return "", &MetadataError{Path: awsInstanceIDPath, Status: status}
	}
	return ParseInstanceID(body)
}

// get GETs a metadata path with a session token. A 401 means the token
// expired or the service forgot it (a restart): the token is dropped and
// the request made once more with a new one.
func (a *AWS) get(ctx context.Context, path string) (int, []byte, error) {
	for try := 0; ; try++ {
		tok, err := a.sessionToken(ctx)
		if err != nil {
			return 0, nil, err
		}
		status, _, body, err := get(ctx, a.o.Client, http.MethodGet, a.o.Endpoint, path, http.Header{awsTokenHeader: {tok}})
		if err != nil {
			return 0, nil, err
		}
		if status == http.StatusUnauthorized && try == 0 {
			a.dropToken(tok)
			continue
		}
		return status, body, nil
	}
}

// sessionToken returns the cached session token, or a new one when the
// cached one is about to expire.
func (a *AWS) sessionToken(ctx context.Context) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.o.Clock.Now()
	if a.token != "" && tokenFresh(now, a.expires, a.o.TokenTTL) {
		return a.token, nil
	}
	secs := strconv.Itoa(int(a.o.TokenTTL / time.Second))
	status, hdr, body, err := get(ctx, a.o.Client, http.MethodPut, a.o.Endpoint, awsTokenPath, http.Header{awsTTLHeader: {secs}})
	if err != nil {
		return "", fmt.Errorf("getting an IMDSv2 session token: %w", err)
	}
	if status != http.StatusOK {
		// 400: bad TTL; 403: IMDS turned off; 404/405: no IMDSv2 here.
		return "", fmt.Errorf("getting an IMDSv2 session token: %w", &MetadataError{Path: awsTokenPath, Status: status})
	}
	if len(body) == 0 {
		return "", fmt.Errorf("getting an IMDSv2 session token: empty token")
	}
	ttl := a.o.TokenTTL
	if s := hdr.Get(awsTTLHeader); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n > 0 && time.Duration(n)*time.Second < ttl {
			ttl = time.Duration(n) * time.Second
		}
	}
	a.token, a.expires = string(body), now.Add(ttl)
	return a.token, nil
}

// dropToken forgets tok if it is still the cached token.
func (a *AWS) dropToken(tok string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.token == tok {
		a.token, a.expires = "", time.Time{}
	}
}
