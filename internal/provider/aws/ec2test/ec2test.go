// Package ec2test is a fake Amazon EC2 endpoint for tests: an httptest
// server that speaks the EC2 Query protocol the way the AWS SDK for Go v2
// sends it, for the calls the aws provider makes (RunInstances,
// DescribeInstances, TerminateInstances, StopInstances, StartInstances,
// DescribeSpotPriceHistory).
//
// It follows the documented behaviour, not an implementation:
//
//   - requests and responses: https://docs.aws.amazon.com/AWSEC2/latest/APIReference/Query-Requests.html
//     and http://docs.amazonwebservices.com/AWSEC2/latest/UserGuide/api-responses.html
//   - errors, their codes and HTTP status classes:
//     https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html
//   - idempotent RunInstances with ClientToken (same token and parameters:
//     the same instances, state possibly updated; same token, other
//     parameters: IdempotentParameterMismatch):
//     https://docs.aws.amazon.com/ec2/latest/devguide/ec2-api-idempotency.html
//   - throttling (RequestLimitExceeded, a server error, HTTP 503):
//     https://docs.aws.amazon.com/ec2/latest/devguide/ec2-api-throttling.html
//   - DescribeInstances filters (tag:KEY, instance-state-name, ...),
//     MaxResults 5..1000 with NextToken, MaxResults not combinable with
//     instance IDs: https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeInstances.html
//   - TerminateInstances (idempotent by default; an unknown id fails the
//     call with InvalidInstanceID.NotFound):
//     https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_TerminateInstances.html
//   - DescribeSpotPriceHistory (with a StartTime, the prices in the range
//     plus the last change before it, which is the price in effect at the
//     start): https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeSpotPriceHistory.html
//   - instance state codes: https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_InstanceState.html
//   - StopInstances and StartInstances (StoppingInstances/StartingInstances
//     with CurrentState and PreviousState; running → stopping → stopped and
//     stopped → pending → running; stopping a stopping/stopped instance or
//     starting a pending/running one succeeds and changes nothing; a
//     pending, shutting-down or terminated instance cannot be stopped and a
//     stopping, shutting-down or terminated one cannot be started:
//     IncorrectInstanceState; a spot instance of a one-time request cannot
//     be stopped: UnsupportedOperation; an unknown id fails the whole call
//     with InvalidInstanceID.NotFound):
//     https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_StopInstances.html,
//     https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_StartInstances.html,
//     https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-instance-lifecycle.html,
//     https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/stopping-a-spot-instance.html
//   - a stopped instance releases its public IPv4 address and gets a new
//     one when it starts again; its private address stays:
//     https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/using-instance-addressing.html#concepts-public-addresses
//
// Faults can be injected: insufficient capacity for a zone, type and market;
// throttling of the next N calls or of a fraction of calls; latency; and a
// dropped RunInstances response after the instance was created (what a
// client sees as a timeout, so that it retries with the same ClientToken).
// Every call is logged for assertions.
package ec2test

import (
	"encoding/base64"
	"encoding/xml"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Instance states (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_InstanceState.html).
const (
	StatePending      = "pending"
	StateRunning      = "running"
	StateShuttingDown = "shutting-down"
	StateTerminated   = "terminated"
	StateStopping     = "stopping"
	StateStopped      = "stopped"
)

// Markets as the fake records them.
const (
	MarketSpot     = "spot"
	MarketOnDemand = "on-demand"
)

// Error codes the fake returns.
const (
	CodeInsufficientInstanceCapacity = "InsufficientInstanceCapacity"
	CodeRequestLimitExceeded         = "RequestLimitExceeded"
	CodeIdempotentParameterMismatch  = "IdempotentParameterMismatch"
	CodeInvalidInstanceIDNotFound    = "InvalidInstanceID.NotFound"
	CodeInvalidInstanceIDMalformed   = "InvalidInstanceID.Malformed"
	CodeInvalidParameterValue        = "InvalidParameterValue"
	CodeInvalidParameterCombination  = "InvalidParameterCombination"
	CodeMissingParameter             = "MissingParameter"
	CodeInvalidAction                = "InvalidAction"
	CodeAuthFailure                  = "AuthFailure"
	CodeNoSuchVersion                = "NoSuchVersion"
	CodeIncorrectInstanceState       = "IncorrectInstanceState"
	CodeUnsupportedOperation         = "UnsupportedOperation"
)

// serverErrors are the codes the errors overview lists as server errors
// (HTTP 5xx); every other code is a client error (HTTP 400).
var serverErrors = map[string]int{
	"InsufficientAddressCapacity":          http.StatusInternalServerError,
	"InsufficientCapacity":                 http.StatusInternalServerError,
	"InsufficientInstanceCapacity":         http.StatusInternalServerError,
	"InsufficientHostCapacity":             http.StatusInternalServerError,
	"InsufficientReservedInstanceCapacity": http.StatusInternalServerError,
	"InternalError":                        http.StatusInternalServerError,
	"RequestLimitExceeded":                 http.StatusServiceUnavailable,
	"ServiceUnavailable":                   http.StatusServiceUnavailable,
	"Unavailable":                          http.StatusServiceUnavailable,
}

// StatusFor is the HTTP status the fake sends with an error code: 5xx for
// server errors, 401 for AuthFailure, 400 for other client errors.
func StatusFor(code string) int {
	if s, ok := serverErrors[code]; ok {
		return s
	}
	if code == CodeAuthFailure {
		return http.StatusUnauthorized
	}
	return http.StatusBadRequest
}

// Instance is one fake instance, as the fake stores it.
type Instance struct {
	ID               string
	ReservationID    string
	ImageID          string
	InstanceType     string
	Zone             string
	SubnetID         string
	SecurityGroupIDs []string
	State            string
	PrivateIP        string
	PublicIP         string
	ClientToken      string
	// Market is MarketSpot or MarketOnDemand.
	Market string
	// SpotInstanceType and InterruptionBehavior record the request's
	// InstanceMarketOptions.SpotOptions.
	SpotInstanceType     string
	InterruptionBehavior string
	// Tags and VolumeTags record the request's TagSpecifications for the
	// instance and volume resource types.
	Tags       map[string]string
	VolumeTags map[string]string
	LaunchTime time.Time
	// Starts counts the StartInstances calls that started the instance
	// from stopped.
	Starts int
}

func (in Instance) clone() Instance {
	in.SecurityGroupIDs = slices.Clone(in.SecurityGroupIDs)
	in.Tags = cloneMap(in.Tags)
	in.VolumeTags = cloneMap(in.VolumeTags)
	return in
}

func cloneMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Call is one request the fake received.
type Call struct {
	Action string
	Params url.Values
	// Status is the HTTP status sent; 0 when the response was dropped.
	Status int
	// Code is the error code sent, "" on success.
	Code string
	// Dropped is true when the fake closed the connection instead of
	// answering.
	Dropped bool
}

// SpotPrice is one entry of the spot price history.
type SpotPrice struct {
	InstanceType string
	Zone         string
	// ProductDescription defaults to "Linux/UNIX".
	ProductDescription string
	// Price in USD per hour, as EC2 writes it (for example "0.401200").
	Price     string
	Timestamp time.Time
}

// Options configure a Server.
type Options struct {
	// Region names the fake's region; default us-east-1. Zones default to
	// Region+"a".
	Region string
	// Now is the fake's clock for launch times; default time.Now.
	Now func() time.Time
	// PrivateIP gives the private address of the n-th instance (n from 1);
	// default 10.0.x.y. A test whose engine probes instances sets it to a
	// loopback address where its inference stand-in listens.
	PrivateIP func(n int) string
}

type iceKey struct{ zone, instanceType, market string }

type tokenRecord struct {
	fingerprint   string
	reservationID string
	ids           []string
}

// Server is the fake EC2 endpoint. Its methods are safe for concurrent use.
type Server struct {
	// URL is the endpoint to give the SDK (BaseEndpoint).
	URL string

	ts        *httptest.Server
	now       func() time.Time
	privateIP func(n int) string
	region    string

	mu               sync.Mutex
	order            []string
	instances        map[string]*Instance
	tokens           map[string]tokenRecord
	seq              int
	calls            []Call
	ice              map[iceKey]string
	throttleNext     int
	throttleFraction float64
	throttleSeen     int
	latency          time.Duration
	dropRuns         int
	manual           bool
	prices           []SpotPrice
	// restartIPs numbers the public addresses handed out on restarts.
	restartIPs int
}

// NewServer starts a fake EC2 endpoint; Close it when done.
func NewServer(opts Options) *Server {
	s := &Server{
		privateIP: opts.PrivateIP,
		now:       opts.Now,
		region:    opts.Region,
		instances: map[string]*Instance{},
		tokens:    map[string]tokenRecord{},
		ice:       map[iceKey]string{},
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.privateIP == nil {
		s.privateIP = privateIP
	}
	if s.region == "" {
		s.region = "us-east-1"
	}
	s.ts = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.ts.URL
	return s
}

// Close stops the server.
func (s *Server) Close() { s.ts.Close() }

// SetICE makes RunInstances fail with code (default
// InsufficientInstanceCapacity) for the zone, instance type and market
// (MarketSpot or MarketOnDemand); an empty field matches any value.
func (s *Server) SetICE(zone, instanceType, market, code string) {
	if code == "" {
		code = CodeInsufficientInstanceCapacity
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ice[iceKey{zone, instanceType, market}] = code
}

// ClearICE removes every injected capacity error.
func (s *Server) ClearICE() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ice = map[iceKey]string{}
}

// ThrottleNext makes the next n calls (any action) fail with
// RequestLimitExceeded, HTTP 503.
func (s *Server) ThrottleNext(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.throttleNext = n
}

// ThrottleFraction throttles a fraction f (0..1) of the calls,
// deterministically: call k (from 0) is throttled when ⌊(k+1)f⌋ > ⌊kf⌋, so
// with f = 0.5 every second call is.
func (s *Server) ThrottleFraction(f float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.throttleFraction = f
	s.throttleSeen = 0
}

// SetLatency delays every answer by d (or until the client gives up).
func (s *Server) SetLatency(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.latency = d
}

// DropNextRunInstances makes the next n successful RunInstances calls
// create (or find) their instances and then close the connection without
// an answer, as a response lost to a timeout.
func (s *Server) DropNextRunInstances(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropRuns = n
}

// SetManual stops (true) or restarts (false) the automatic state changes:
// by default every DescribeInstances first moves pending instances to
// running, shutting-down to terminated and stopping to stopped. With
// manual on, states change only through Advance and SetState.
func (s *Server) SetManual(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.manual = on
}

// Advance moves every instance in a transitional state one step on.
func (s *Server) Advance() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advanceLocked()
}

// SetState sets an instance's state.
func (s *Server) SetState(id, state string) error {
	if _, ok := stateCodes[state]; !ok {
		return fmt.Errorf("ec2test: unknown state %q", state)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	in, ok := s.instances[id]
	if !ok {
		return fmt.Errorf("ec2test: no instance %q", id)
	}
	in.State = state
	switch state {
	case StateRunning:
		if in.PublicIP == "" {
			in.PublicIP = s.publicIPLocked(in)
		}
	case StateStopped, StateTerminated:
		in.PublicIP = ""
	}
	return nil
}

// AddSpotPrice appends an entry to the spot price history.
func (s *Server) AddSpotPrice(p SpotPrice) {
	if p.ProductDescription == "" {
		p.ProductDescription = "Linux/UNIX"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.prices = append(s.prices, p)
}

// Put stores an instance as if it had been launched earlier (by anyone),
// filling in ID, reservation, state (running), zone, addresses and launch
// time when empty, and returns its ID.
func (s *Server) Put(in Instance) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	n := len(s.order) + 1
	if in.ID == "" {
		in.ID = instanceID(n)
	}
	if in.ReservationID == "" {
		in.ReservationID = fmt.Sprintf("r-%017x", s.seq)
	}
	if in.State == "" {
		in.State = StateRunning
	}
	if in.Zone == "" {
		in.Zone = s.region + "a"
	}
	if in.InstanceType == "" {
		in.InstanceType = "m1.small"
	}
	if in.Market == "" {
		in.Market = MarketOnDemand
	}
	if in.PrivateIP == "" {
		in.PrivateIP = s.privateIP(n)
	}
	if in.PublicIP == "" && in.State == StateRunning {
		in.PublicIP = publicIP(n)
	}
	if in.LaunchTime.IsZero() {
		in.LaunchTime = s.now()
	}
	c := in.clone()
	s.instances[c.ID] = &c
	s.order = append(s.order, c.ID)
	return c.ID
}

// Instances returns every instance, terminated ones included, in creation
// order.
func (s *Server) Instances() []Instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Instance, 0, len(s.order))
	for _, id := range s.order {
		out = append(out, s.instances[id].clone())
	}
	return out
}

// Instance returns one instance.
func (s *Server) Instance(id string) (Instance, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, ok := s.instances[id]
	if !ok {
		return Instance{}, false
	}
	return in.clone(), true
}

// Calls returns the calls received so far, in order.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Call, len(s.calls))
	for i, c := range s.calls {
		c.Params = cloneValues(c.Params)
		out[i] = c
	}
	return out
}

// CallCount returns how many calls of action were received ("" for all).
func (s *Server) CallCount(action string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.calls {
		if action == "" || c.Action == action {
			n++
		}
	}
	return n
}

// ResetCalls forgets the call log.
func (s *Server) ResetCalls() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = nil
}

func cloneValues(v url.Values) url.Values {
	out := make(url.Values, len(v))
	for k, vs := range v {
		out[k] = slices.Clone(vs)
	}
	return out
}

// result is what a handler decided to answer.
type result struct {
	body    any
	code    string
	message string
	drop    bool
}

func errResult(code, format string, args ...any) result {
	return result{code: code, message: fmt.Sprintf(format, args...)}
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	form := r.Form
	s.mu.Lock()
	latency := s.latency
	s.mu.Unlock()
	if latency > 0 {
		t := time.NewTimer(latency)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	requestID := fmt.Sprintf("%08x-fa4e-4c2d-9e1b-%012x", s.seq, s.seq)
	action := form.Get("Action")
	var res result
	switch {
	case !strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 "):
		res = errResult(CodeAuthFailure, "AWS was not able to validate the provided access credentials")
	case form.Get("Version") != APIVersion:
		res = errResult(CodeNoSuchVersion, "The requested version (%s) of service AmazonEC2 does not exist", form.Get("Version"))
	case s.throttledLocked():
		res = errResult(CodeRequestLimitExceeded, "Request limit exceeded.")
	default:
		switch action {
		case "RunInstances":
			res = s.runInstances(form)
		case "DescribeInstances":
			res = s.describeInstances(form)
		case "TerminateInstances":
			res = s.terminateInstances(form)
		case "StopInstances":
			res = s.stopInstances(form)
		case "StartInstances":
			res = s.startInstances(form)
		case "DescribeSpotPriceHistory":
			res = s.describeSpotPriceHistory(form)
		default:
			res = errResult(CodeInvalidAction, "The action %s is not valid for this web service.", action)
		}
	}
	call := Call{Action: action, Params: cloneValues(form), Code: res.code}
	if res.drop {
		call.Dropped = true
		s.calls = append(s.calls, call)
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
				return
			}
		}
		panic(http.ErrAbortHandler)
	}
	var status int
	var body any
	if res.code != "" {
		status = StatusFor(res.code)
		body = xmlError{Code: res.code, Message: res.message, RequestID: requestID}
	} else {
		status = http.StatusOK
		body = withRequestID(res.body, requestID)
	}
	call.Status = status
	s.calls = append(s.calls, call)
	out, err := xml.Marshal(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(xml.Header))
	_, _ = w.Write(out)
}

func withRequestID(body any, id string) any {
	switch b := body.(type) {
	case *xmlRunInstancesResponse:
		b.RequestID, b.Xmlns = id, Namespace
	case *xmlDescribeInstancesResponse:
		b.RequestID, b.Xmlns = id, Namespace
	case *xmlTerminateInstancesResponse:
		b.RequestID, b.Xmlns = id, Namespace
	case *xmlStopInstancesResponse:
		b.RequestID, b.Xmlns = id, Namespace
	case *xmlStartInstancesResponse:
		b.RequestID, b.Xmlns = id, Namespace
	case *xmlDescribeSpotPriceHistoryResponse:
		b.RequestID, b.Xmlns = id, Namespace
	}
	return body
}

func (s *Server) throttledLocked() bool {
	if s.throttleNext > 0 {
		s.throttleNext--
		return true
	}
	if s.throttleFraction > 0 {
		k := float64(s.throttleSeen)
		s.throttleSeen++
		return math.Floor((k+1)*s.throttleFraction) > math.Floor(k*s.throttleFraction)
	}
	return false
}

func (s *Server) advanceLocked() {
	for _, id := range s.order {
		in := s.instances[id]
		switch in.State {
		case StatePending:
			in.State = StateRunning
			if in.PublicIP == "" {
				in.PublicIP = s.publicIPLocked(in)
			}
		case StateShuttingDown:
			in.State = StateTerminated
			in.PublicIP = ""
		case StateStopping:
			in.State = StateStopped
			in.PublicIP = ""
		}
	}
}

// publicIPLocked is the public address an instance gets when it runs: its
// first from its creation index, a fresh one after every restart.
func (s *Server) publicIPLocked(in *Instance) string {
	if in.Starts == 0 {
		return publicIP(s.indexOf(in.ID))
	}
	s.restartIPs++
	n := s.restartIPs
	return fmt.Sprintf("203.0.%d.%d", (n/250)%256, n%250+1)
}

func (s *Server) indexOf(id string) int { return slices.Index(s.order, id) + 1 }

func instanceID(n int) string { return fmt.Sprintf("i-%017x", 0xabc0000+n) }

func privateIP(n int) string { return fmt.Sprintf("10.0.%d.%d", (n/250)%256, n%250+4) }

func publicIP(n int) string { return fmt.Sprintf("198.51.%d.%d", (n/250)%256, n%250+1) }

func (s *Server) xmlOf(in *Instance) xmlInstance {
	x := xmlInstance{
		InstanceID:       in.ID,
		ImageID:          in.ImageID,
		State:            xmlStateOf(in.State),
		PrivateIPAddress: in.PrivateIP,
		IPAddress:        in.PublicIP,
		InstanceType:     in.InstanceType,
		LaunchTime:       in.LaunchTime.UTC().Format("2006-01-02T15:04:05.000Z"),
		Placement:        xmlPlacement{AvailabilityZone: in.Zone, Tenancy: "default"},
		SubnetID:         in.SubnetID,
		ClientToken:      in.ClientToken,
		TagSet:           sortedTags(in.Tags),
	}
	for _, g := range in.SecurityGroupIDs {
		x.GroupSet = append(x.GroupSet, xmlGroup{GroupID: g})
	}
	if in.Market == MarketSpot {
		x.InstanceLifecycle = "spot"
		x.SpotInstanceRequestID = fmt.Sprintf("sir-%08x", s.indexOf(in.ID))
	}
	return x
}

// fingerprint identifies a RunInstances request's parameters apart from
// its ClientToken, to detect a token reused for another request.
func fingerprint(form url.Values) string {
	v := cloneValues(form)
	v.Del("ClientToken")
	v.Del("Action")
	v.Del("Version")
	return v.Encode()
}

func (s *Server) runInstances(form url.Values) result {
	token := form.Get("ClientToken")
	fp := fingerprint(form)
	if token != "" {
		if rec, ok := s.tokens[token]; ok {
			if rec.fingerprint != fp {
				return errResult(CodeIdempotentParameterMismatch, "The client token %s has been used with different parameters", token)
			}
			return s.runResponse(rec.reservationID, rec.ids)
		}
		if len(token) > 64 {
			return errResult(CodeInvalidParameterValue, "Value (%s) for parameter clientToken is invalid. Length exceeds maximum of 64", token)
		}
	}
	image := form.Get("ImageId")
	if image == "" {
		return errResult(CodeMissingParameter, "The request must contain the parameter ImageId")
	}
	minCount, err1 := strconv.Atoi(form.Get("MinCount"))
	maxCount, err2 := strconv.Atoi(form.Get("MaxCount"))
	if err1 != nil || err2 != nil {
		return errResult(CodeMissingParameter, "The request must contain the parameters MinCount and MaxCount")
	}
	if minCount < 1 || maxCount < minCount || maxCount > 100 {
		return errResult(CodeInvalidParameterValue, "Invalid MinCount %d / MaxCount %d", minCount, maxCount)
	}
	itype := form.Get("InstanceType")
	if itype == "" {
		itype = "m1.small"
	}
	zone := form.Get("Placement.AvailabilityZone")
	if zone == "" {
		zone = s.region + "a"
	}
	market := MarketOnDemand
	switch mt := form.Get("InstanceMarketOptions.MarketType"); mt {
	case "", "capacity-block":
	case "spot":
		market = MarketSpot
	default:
		return errResult(CodeInvalidParameterValue, "Value (%s) for parameter MarketType is invalid", mt)
	}
	if code, ok := s.iceLocked(zone, itype, market); ok {
		if code == CodeInsufficientInstanceCapacity {
			return errResult(code, "We currently do not have sufficient %s capacity in the Availability Zone you requested (%s). Our system will be working on provisioning additional capacity.", itype, zone)
		}
		return errResult(code, "%s: cannot launch %s %s in %s", code, market, itype, zone)
	}
	specs := tagSpecs(form)
	s.seq++
	resID := fmt.Sprintf("r-%017x", s.seq)
	var ids []string
	for range maxCount {
		n := len(s.order) + 1
		in := &Instance{
			ID:               instanceID(n),
			ReservationID:    resID,
			ImageID:          image,
			InstanceType:     itype,
			Zone:             zone,
			SubnetID:         form.Get("SubnetId"),
			SecurityGroupIDs: list(form, "SecurityGroupId"),
			State:            StatePending,
			PrivateIP:        s.privateIP(n),
			ClientToken:      token,
			Market:           market,
			Tags:             cloneMap(specs["instance"]),
			VolumeTags:       cloneMap(specs["volume"]),
			LaunchTime:       s.now(),
		}
		if market == MarketSpot {
			in.SpotInstanceType = form.Get("InstanceMarketOptions.SpotOptions.SpotInstanceType")
			in.InterruptionBehavior = form.Get("InstanceMarketOptions.SpotOptions.InstanceInterruptionBehavior")
		}
		s.instances[in.ID] = in
		s.order = append(s.order, in.ID)
		ids = append(ids, in.ID)
	}
	if token != "" {
		s.tokens[token] = tokenRecord{fingerprint: fp, reservationID: resID, ids: ids}
	}
	return s.runResponse(resID, ids)
}

func (s *Server) runResponse(resID string, ids []string) result {
	body := &xmlRunInstancesResponse{ReservationID: resID, OwnerID: "123456789012"}
	for _, id := range ids {
		body.InstancesSet = append(body.InstancesSet, s.xmlOf(s.instances[id]))
	}
	res := result{body: body}
	if s.dropRuns > 0 {
		s.dropRuns--
		res.drop = true
	}
	return res
}

func (s *Server) iceLocked(zone, itype, market string) (string, bool) {
	for _, z := range []string{zone, ""} {
		for _, t := range []string{itype, ""} {
			for _, m := range []string{market, ""} {
				if code, ok := s.ice[iceKey{z, t, m}]; ok {
					return code, true
				}
			}
		}
	}
	return "", false
}

var instanceIDPattern = regexp.MustCompile(`^i-([0-9a-f]{8}|[0-9a-f]{17})$`)

// describeFilters are the DescribeInstances filters the fake implements.
var describeFilters = map[string]func(in *Instance) []string{
	"instance-state-name": func(in *Instance) []string { return []string{in.State} },
	"instance-id":         func(in *Instance) []string { return []string{in.ID} },
	"instance-type":       func(in *Instance) []string { return []string{in.InstanceType} },
	"availability-zone":   func(in *Instance) []string { return []string{in.Zone} },
	"client-token":        func(in *Instance) []string { return []string{in.ClientToken} },
	"instance-lifecycle": func(in *Instance) []string {
		if in.Market == MarketSpot {
			return []string{"spot"}
		}
		return []string{"scheduled-or-on-demand"}
	},
	"tag-key": func(in *Instance) []string {
		keys := make([]string, 0, len(in.Tags))
		for k := range in.Tags {
			keys = append(keys, k)
		}
		return keys
	},
}

func filterValues(name string, in *Instance) ([]string, bool) {
	if key, ok := strings.CutPrefix(name, "tag:"); ok {
		v, has := in.Tags[key]
		if !has {
			return nil, true
		}
		return []string{v}, true
	}
	f, ok := describeFilters[name]
	if !ok {
		return nil, false
	}
	return f(in), true
}

// globMatch matches EC2 filter wildcards: * any run, ? one character.
func globMatch(pattern, s string) bool {
	if !strings.ContainsAny(pattern, "*?") {
		return pattern == s
	}
	p, t := []rune(pattern), []rune(s)
	var star, match = -1, 0
	i, j := 0, 0
	for j < len(t) {
		switch {
		case i < len(p) && p[i] == '*':
			star, match = i, j
			i++
		case i < len(p) && (p[i] == '?' || p[i] == t[j]):
			i++
			j++
		case star >= 0:
			i = star + 1
			match++
			j = match
		default:
			return false
		}
	}
	for i < len(p) && p[i] == '*' {
		i++
	}
	return i == len(p)
}

func matches(fs []filter, in *Instance) bool {
	for _, f := range fs {
		have, _ := filterValues(f.Name, in)
		ok := false
		for _, want := range f.Values {
			for _, h := range have {
				if globMatch(want, h) {
					ok = true
				}
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

func encodeToken(prefix, v string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(prefix + v))
}

func decodeToken(prefix, tok string) (string, bool) {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return "", false
	}
	return strings.CutPrefix(string(b), prefix)
}

func (s *Server) describeInstances(form url.Values) result {
	if !s.manual {
		s.advanceLocked()
	}
	ids := list(form, "InstanceId")
	fs := filters(form)
	for _, f := range fs {
		if _, ok := filterValues(f.Name, &Instance{}); !ok {
			return errResult(CodeInvalidParameterValue, "The filter '%s' is invalid", f.Name)
		}
	}
	limit := 0
	if mr := form.Get("MaxResults"); mr != "" {
		if len(ids) > 0 {
			return errResult(CodeInvalidParameterCombination, "The parameter instancesSet cannot be used with the parameter maxResults")
		}
		n, err := strconv.Atoi(mr)
		if err != nil || n < 5 || n > 1000 {
			return errResult(CodeInvalidParameterValue, "Value ( %s ) for parameter maxResults is invalid. Expecting a value between 5 and 1000.", mr)
		}
		limit = n
	}
	candidates := s.order
	if len(ids) > 0 {
		var missing []string
		for _, id := range ids {
			if !instanceIDPattern.MatchString(id) {
				return errResult(CodeInvalidInstanceIDMalformed, "Invalid id: %q", id)
			}
			if _, ok := s.instances[id]; !ok {
				missing = append(missing, id)
			}
		}
		if len(missing) > 0 {
			return errResult(CodeInvalidInstanceIDNotFound, "The instance IDs '%s' do not exist", strings.Join(missing, ", "))
		}
		candidates = ids
	}
	start := 0
	if tok := form.Get("NextToken"); tok != "" {
		after, ok := decodeToken("after:", tok)
		idx := slices.Index(candidates, after)
		if !ok || idx < 0 {
			return errResult(CodeInvalidParameterValue, "Unable to parse pagination token %q", tok)
		}
		start = idx + 1
	}
	body := &xmlDescribeInstancesResponse{}
	count := 0
	for i := start; i < len(candidates); i++ {
		in := s.instances[candidates[i]]
		if !matches(fs, in) {
			continue
		}
		if limit > 0 && count == limit {
			body.NextToken = encodeToken("after:", candidates[i-1])
			break
		}
		count++
		x := s.xmlOf(in)
		n := len(body.ReservationSet)
		if n > 0 && body.ReservationSet[n-1].ReservationID == in.ReservationID {
			body.ReservationSet[n-1].InstancesSet = append(body.ReservationSet[n-1].InstancesSet, x)
			continue
		}
		body.ReservationSet = append(body.ReservationSet, xmlReservation{
			ReservationID: in.ReservationID,
			OwnerID:       "123456789012",
			InstancesSet:  []xmlInstance{x},
		})
	}
	return result{body: body}
}

func (s *Server) terminateInstances(form url.Values) result {
	ids := list(form, "InstanceId")
	if len(ids) == 0 {
		return errResult(CodeMissingParameter, "The request must contain the parameter InstanceId")
	}
	var missing []string
	for _, id := range ids {
		if !instanceIDPattern.MatchString(id) {
			return errResult(CodeInvalidInstanceIDMalformed, "Invalid id: %q", id)
		}
		if _, ok := s.instances[id]; !ok {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		return errResult(CodeInvalidInstanceIDNotFound, "The instance IDs '%s' do not exist", strings.Join(missing, ", "))
	}
	body := &xmlTerminateInstancesResponse{}
	for _, id := range ids {
		in := s.instances[id]
		prev := in.State
		switch in.State {
		case StatePending, StateRunning, StateStopping, StateStopped:
			in.State = StateShuttingDown
		}
		body.InstancesSet = append(body.InstancesSet, xmlStateChange{
			InstanceID:    id,
			CurrentState:  xmlStateOf(in.State),
			PreviousState: xmlStateOf(prev),
		})
	}
	return result{body: body}
}

// checkIDs validates the InstanceId.N of a state-changing call: present,
// well-formed, known; one bad id fails the whole call.
func (s *Server) checkIDs(form url.Values) ([]string, *result) {
	ids := list(form, "InstanceId")
	if len(ids) == 0 {
		r := errResult(CodeMissingParameter, "The request must contain the parameter InstanceId")
		return nil, &r
	}
	var missing []string
	for _, id := range ids {
		if !instanceIDPattern.MatchString(id) {
			r := errResult(CodeInvalidInstanceIDMalformed, "Invalid id: %q", id)
			return nil, &r
		}
		if _, ok := s.instances[id]; !ok {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		r := errResult(CodeInvalidInstanceIDNotFound, "The instance IDs '%s' do not exist", strings.Join(missing, ", "))
		return nil, &r
	}
	return ids, nil
}

// stopInstances: every instance must be stoppable before any changes.
// Running instances go to stopping; stopping and stopped ones stay (the
// call is idempotent). A one-time spot instance is UnsupportedOperation; a
// pending, shutting-down or terminated one IncorrectInstanceState.
func (s *Server) stopInstances(form url.Values) result {
	ids, bad := s.checkIDs(form)
	if bad != nil {
		return *bad
	}
	for _, id := range ids {
		in := s.instances[id]
		if in.Market == MarketSpot && in.SpotInstanceType != "persistent" {
			return errResult(CodeUnsupportedOperation, "You can't stop the Spot Instance '%s' because it is associated with a one-time Spot Instance request. You can only stop Spot Instances associated with persistent Spot Instance requests.", id)
		}
		switch in.State {
		case StatePending:
			return errResult(CodeIncorrectInstanceState, "Instance '%s' cannot be stopped as it has never reached the 'running' state.", id)
		case StateShuttingDown, StateTerminated:
			return errResult(CodeIncorrectInstanceState, "This instance '%s' is not in a state from which it can be stopped.", id)
		}
	}
	body := &xmlStopInstancesResponse{}
	for _, id := range ids {
		in := s.instances[id]
		prev := in.State
		if in.State == StateRunning {
			in.State = StateStopping
		}
		body.InstancesSet = append(body.InstancesSet, xmlStateChange{
			InstanceID: id, CurrentState: xmlStateOf(in.State), PreviousState: xmlStateOf(prev),
		})
	}
	return result{body: body}
}

// startInstances: every instance must be startable before any changes.
// Stopped instances go to pending (a new public IP comes with running);
// pending and running ones stay (idempotent). A stopping, shutting-down or
// terminated one is IncorrectInstanceState.
func (s *Server) startInstances(form url.Values) result {
	ids, bad := s.checkIDs(form)
	if bad != nil {
		return *bad
	}
	for _, id := range ids {
		switch s.instances[id].State {
		case StateStopping, StateShuttingDown, StateTerminated:
			return errResult(CodeIncorrectInstanceState, "The instance '%s' is not in a state from which it can be started.", id)
		}
	}
	body := &xmlStartInstancesResponse{}
	for _, id := range ids {
		in := s.instances[id]
		prev := in.State
		if in.State == StateStopped {
			in.State = StatePending
			in.PublicIP = ""
			in.Starts++
		}
		body.InstancesSet = append(body.InstancesSet, xmlStateChange{
			InstanceID: id, CurrentState: xmlStateOf(in.State), PreviousState: xmlStateOf(prev),
		})
	}
	return result{body: body}
}

func parseTime(v string) (time.Time, error) {
	return time.Parse(time.RFC3339Nano, v)
}

func (s *Server) describeSpotPriceHistory(form url.Values) result {
	types := list(form, "InstanceType")
	products := list(form, "ProductDescription")
	zones := []string{}
	if z := form.Get("AvailabilityZone"); z != "" {
		zones = append(zones, z)
	}
	for _, f := range filters(form) {
		switch f.Name {
		case "availability-zone":
			zones = append(zones, f.Values...)
		case "instance-type":
			types = append(types, f.Values...)
		case "product-description":
			products = append(products, f.Values...)
		default:
			return errResult(CodeInvalidParameterValue, "The filter '%s' is invalid", f.Name)
		}
	}
	var start, end time.Time
	var err error
	if v := form.Get("StartTime"); v != "" {
		if start, err = parseTime(v); err != nil {
			return errResult(CodeInvalidParameterValue, "Invalid StartTime %q", v)
		}
	}
	if v := form.Get("EndTime"); v != "" {
		if end, err = parseTime(v); err != nil {
			return errResult(CodeInvalidParameterValue, "Invalid EndTime %q", v)
		}
	}
	limit := 1000
	if mr := form.Get("MaxResults"); mr != "" {
		n, err := strconv.Atoi(mr)
		if err != nil || n < 1 || n > 1000 {
			return errResult(CodeInvalidParameterValue, "Value ( %s ) for parameter maxResults is invalid. Expecting a value between 1 and 1000.", mr)
		}
		limit = n
	}
	offset := 0
	if tok := form.Get("NextToken"); tok != "" {
		v, ok := decodeToken("offset:", tok)
		n, err := strconv.Atoi(v)
		if !ok || err != nil || n < 0 {
			return errResult(CodeInvalidParameterValue, "Unable to parse pagination token %q", tok)
		}
		offset = n
	}
	in := func(set []string, v string) bool { return len(set) == 0 || slices.Contains(set, v) }
	type seriesKey struct{ t, z, p string }
	series := map[seriesKey][]SpotPrice{}
	for _, p := range s.prices {
		if in(types, p.InstanceType) && in(zones, p.Zone) && in(products, p.ProductDescription) {
			k := seriesKey{p.InstanceType, p.Zone, p.ProductDescription}
			series[k] = append(series[k], p)
		}
	}
	var sel []SpotPrice
	for _, ps := range series {
		sort.SliceStable(ps, func(i, j int) bool { return ps[i].Timestamp.Before(ps[j].Timestamp) })
		var before *SpotPrice
		for i := range ps {
			p := ps[i]
			if !end.IsZero() && p.Timestamp.After(end) {
				continue
			}
			if !start.IsZero() && p.Timestamp.Before(start) {
				before = &ps[i]
				continue
			}
			sel = append(sel, p)
		}
		if before != nil {
			sel = append(sel, *before)
		}
	}
	sort.SliceStable(sel, func(i, j int) bool {
		a, b := sel[i], sel[j]
		if !a.Timestamp.Equal(b.Timestamp) {
			return a.Timestamp.After(b.Timestamp)
		}
		if a.InstanceType != b.InstanceType {
			return a.InstanceType < b.InstanceType
		}
		return a.Zone < b.Zone
	})
	body := &xmlDescribeSpotPriceHistoryResponse{}
	if offset > len(sel) {
		offset = len(sel)
	}
	page := sel[offset:]
	if len(page) > limit {
		page = page[:limit]
		body.NextToken = encodeToken("offset:", strconv.Itoa(offset+limit))
	}
	for _, p := range page {
		body.SpotPriceHistorySet = append(body.SpotPriceHistorySet, xmlSpotPrice{
			InstanceType:       p.InstanceType,
			ProductDescription: p.ProductDescription,
			SpotPrice:          p.Price,
			Timestamp:          p.Timestamp.UTC().Format("2006-01-02T15:04:05.000Z"),
			AvailabilityZone:   p.Zone,
		})
	}
	return result{body: body}
}
