// Package cvmtest is a fake of the Tencent Cloud CVM API 3.0 (version
// 2017-03-12) for tests: an httptest server that speaks the wire format the
// tencentcloud-sdk-go common client sends (POST, JSON body, X-TC-* headers,
// TC3-HMAC-SHA256 Authorization, which it verifies with the known key) and
// answers as the documented API does. It implements RunInstances,
// DescribeInstances, TerminateInstances, StopInstances, StartInstances and
// InquiryPriceRunInstances,
// records every call, and injects faults: no capacity per zone and type,
// throttling (the next N calls or a fraction of calls), latency, answers
// lost after the instance was created, and the asynchronous public IP.
//
// Documentation followed:
//   - Request structure and signature v3: https://www.tencentcloud.com/document/product/267/37447
//   - Responses (HTTP 200 with {"Response": {..., "RequestId"}} or
//     {"Response": {"Error": {"Code", "Message"}, "RequestId"}}):
//     https://intl.cloud.tencent.com/document/api/213/15694
//   - RunInstances: https://intl.cloud.tencent.com/document/product/213/33237
//   - DescribeInstances: https://www.tencentcloud.com/document/api/213/33258
//   - InquiryPriceRunInstances: https://www.tencentcloud.com/document/api/213/33248
//   - Instance states: https://www.tencentcloud.com/document/product/213/15753#InstanceStatus
//   - Lifecycle: https://www.tencentcloud.com/document/product/213/4856
//   - StopInstances (RUNNING → STOPPING → STOPPED; StopType SOFT, HARD or
//     SOFT_FIRST; StoppedMode KEEP_CHARGING, the default, or STOP_CHARGING,
//     which only some pay-as-you-go instances support):
//     https://www.tencentcloud.com/document/api/213/33235
//   - StartInstances (STOPPED → STARTING → RUNNING):
//     https://www.tencentcloud.com/document/api/213/33236
//   - No charges when shut down (pay-as-you-go only; the public IP is
//     released on shutdown and a new one assigned on start):
//     https://www.tencentcloud.com/document/product/213/19922
//   - Error codes per action: the CVM error code list, as carried in
//     tencentcloud-sdk-go-intl-en tencentcloud/cvm/v20170312/{client,errors}.go
//
// It is test support only: nothing outside tests imports it.
package cvmtest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Version is the CVM API version the fake speaks.
const Version = "2017-03-12"

// Default test credentials.
const (
	TestSecretID  = "AKIDtidegpuFAKE0000000000000000000"
	TestSecretKey = "tidegpuFakeSecretKey000000000000"
)

// Default error codes of the injections.
const (
	CodeNoCapacity = "ResourceInsufficient.SpecifiedInstanceType"
	CodeThrottled  = "RequestLimitExceeded"
)

// Instance is an instance as the fake holds it.
type Instance struct {
	ID           string
	Name         string
	Zone         string
	InstanceType string
	ImageID      string
	// ChargeType is InstanceChargeType (POSTPAID_BY_HOUR, SPOTPAID).
	ChargeType string
	// MarketType, SpotInstanceType and MaxPrice are the market options the
	// instance was requested with.
	MarketType, SpotInstanceType, MaxPrice string
	VpcID, SubnetID                        string
	SecurityGroupIDs                       []string
	// Tags of the instance.
	Tags map[string]string
	// State is the CVM InstanceState.
	State        string
	PrivateIP    string
	PublicIP     string
	WantPublicIP bool
	BandwidthOut int
	ClientToken  string
	// UserData is the launch's user data, base64 as sent.
	UserData    string
	CreatedTime time.Time
	// StoppedMode is the StoppedMode of the last StopInstances
	// (KEEP_CHARGING or STOP_CHARGING); "" for an instance never stopped.
	StoppedMode string
	// Starts counts the StartInstances calls that started it from STOPPED.
	Starts             int
	n                  int // creation sequence number
	transDescribes     int // describes since the last stop or start
	describes          int
	terminateDescribes int
}

// Call is one API call the fake received.
type Call struct {
	Action string
	Region string
	// Params is the JSON request body.
	Params json.RawMessage
	// Authorization is the Authorization header as sent.
	Authorization string
	// ErrorCode is the error answered, "" on success; "lost" when the
	// answer was dropped on purpose.
	ErrorCode string
}

type offering struct{ zone, instanceType, chargeType string }

// Server is the fake CVM endpoint. Its zero value is not usable: use
// NewServer. All methods are safe for concurrent use.
type Server struct {
	// URL is the base URL (http://127.0.0.1:port) to use as the provider's
	// endpoint.
	URL string
	// Region is the only region the fake serves.
	Region string

	srv *httptest.Server

	mu        sync.Mutex
	secretID  string
	secretKey string
	verify    bool
	now       func() time.Time
	seq       int
	order     []string
	byID      map[string]*Instance
	tokens    map[string][]string
	calls     []Call

	noCap            map[offering]string
	throttleNext     int
	throttleFraction float64
	throttleAcc      float64
	latency          time.Duration
	loseRun          int
	runningAfter     int
	stoppedAfter     int
	publicIPAfter    int
	goneAfter        int
	prices           map[offering]float64
	priceErrs        map[offering]string
}

// NewServer starts a fake for region with the test credentials, verifying
// signatures. Close it when done.
func NewServer(region string) *Server {
	s := &Server{
		Region:       region,
		secretID:     TestSecretID,
		secretKey:    TestSecretKey,
		verify:       true,
		now:          time.Now,
		byID:         map[string]*Instance{},
		tokens:       map[string][]string{},
		noCap:        map[offering]string{},
		prices:       map[offering]float64{},
		priceErrs:    map[offering]string{},
		runningAfter: 1,
		stoppedAfter: 1,
		goneAfter:    1,
	}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.srv.URL
	return s
}

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

// SetCredentials changes the key pair signatures are checked against.
func (s *Server) SetCredentials(secretID, secretKey string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.secretID, s.secretKey = secretID, secretKey
}

// SetNoCapacity makes RunInstances and InquiryPriceRunInstances fail with
// code (CodeNoCapacity when empty) for instanceType in zone; chargeType ""
// means every charge type.
func (s *Server) SetNoCapacity(zone, instanceType, chargeType, code string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if code == "" {
		code = CodeNoCapacity
	}
	s.noCap[offering{zone, instanceType, chargeType}] = code
}

// ClearNoCapacity removes every capacity injection.
func (s *Server) ClearNoCapacity() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.noCap = map[offering]string{}
}

// ThrottleNext answers the next n calls with RequestLimitExceeded.
func (s *Server) ThrottleNext(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.throttleNext = n
}

// ThrottleFraction answers that fraction of calls (0..1) with
// RequestLimitExceeded, spread evenly and deterministically (0.5 throttles
// every second call).
func (s *Server) ThrottleFraction(f float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.throttleFraction, s.throttleAcc = f, 0
}

// SetLatency delays every answer by d.
func (s *Server) SetLatency(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.latency = d
}

// LoseNextRunResponses makes the next n successful RunInstances calls
// create their instances and then drop the connection without an answer.
func (s *Server) LoseNextRunResponses(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loseRun = n
}

// SetRunningAfter makes a new instance PENDING for its first n describes
// (default 1), RUNNING afterwards.
func (s *Server) SetRunningAfter(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.runningAfter = n
}

// SetStoppedAfter keeps a stopped instance STOPPING for its first n
// describes after StopInstances (default 1), STOPPED afterwards. A started
// instance is STARTING for as many describes as SetRunningAfter says.
func (s *Server) SetStoppedAfter(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stoppedAfter = n
}

// SetPublicIPAfter withholds a new instance's public IP for its first n
// describes (default 0), as the real API assigns it asynchronously.
func (s *Server) SetPublicIPAfter(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.publicIPAfter = n
}

// SetGoneAfter keeps a terminated instance TERMINATING for n describes
// (default 1) before it disappears.
func (s *Server) SetGoneAfter(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.goneAfter = n
}

// SetPrice sets the hourly price InquiryPriceRunInstances answers for
// instanceType in zone under chargeType.
func (s *Server) SetPrice(zone, instanceType, chargeType string, price float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.prices[offering{zone, instanceType, chargeType}] = price
}

// SetPriceError makes InquiryPriceRunInstances fail with code for the
// offering ("" clears it).
func (s *Server) SetPriceError(zone, instanceType, chargeType, code string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if code == "" {
		delete(s.priceErrs, offering{zone, instanceType, chargeType})
		return
	}
	s.priceErrs[offering{zone, instanceType, chargeType}] = code
}

// AddInstance adds an instance directly (no API call), filling in ID,
// IPs, State (RUNNING) and CreatedTime when empty, and returns its ID.
func (s *Server) AddInstance(in Instance) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if in.State == "" {
		in.State = "RUNNING"
		in.describes = s.runningAfter
	}
	if in.CreatedTime.IsZero() {
		in.CreatedTime = s.now().UTC().Truncate(time.Second)
	}
	if in.Tags == nil {
		in.Tags = map[string]string{}
	}
	p := s.create(in)
	if p.WantPublicIP && p.PublicIP == "" {
		p.PublicIP = publicIP(p.n)
	}
	return p.ID
}

// SetState forces an instance's CVM state.
func (s *Server) SetState(id, state string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if in, ok := s.byID[id]; ok {
		in.State = state
	}
}

// Instance returns a copy of an instance.
func (s *Server) Instance(id string) (Instance, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, ok := s.byID[id]
	if !ok {
		return Instance{}, false
	}
	return copyInstance(in), true
}

// Instances returns copies of all instances in creation order.
func (s *Server) Instances() []Instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Instance, 0, len(s.order))
	for _, id := range s.order {
		out = append(out, copyInstance(s.byID[id]))
	}
	return out
}

// Calls returns the calls received so far.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
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

// ResetCalls forgets the recorded calls.
func (s *Server) ResetCalls() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = nil
}

func copyInstance(in *Instance) Instance {
	c := *in
	c.Tags = make(map[string]string, len(in.Tags))
	for k, v := range in.Tags {
		c.Tags[k] = v
	}
	c.SecurityGroupIDs = slices.Clone(in.SecurityGroupIDs)
	return c
}

// apiError is an error answer.
type apiError struct{ code, msg string }

func errf(code, format string, a ...any) *apiError {
	return &apiError{code: code, msg: fmt.Sprintf(format, a...)}
}

// errLost marks a RunInstances whose answer is dropped.
var errLost = &apiError{code: "lost"}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 10<<20))
	if err != nil {
		return
	}
	action := r.Header.Get("X-TC-Action")
	call := Call{Action: action, Region: r.Header.Get("X-TC-Region"), Params: json.RawMessage(slices.Clone(body)), Authorization: r.Header.Get("Authorization")}

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
	result, aerr := s.handle(r, action, body)
	if aerr != nil {
		call.ErrorCode = aerr.code
	}
	s.calls = append(s.calls, call)
	s.mu.Unlock()

	if aerr == errLost {
		// The instance exists; the caller never hears of it.
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				conn.Close()
				return
			}
		}
		panic(http.ErrAbortHandler)
	}
	resp := map[string]any{}
	for k, v := range result {
		resp[k] = v
	}
	if aerr != nil {
		resp = map[string]any{"Error": map[string]string{"Code": aerr.code, "Message": aerr.msg}}
	}
	resp["RequestId"] = s.requestID()
	var buf bytes.Buffer
	_ = json.NewEncoder(&buf).Encode(map[string]any{"Response": resp})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK) // errors too: the API answers 200 with an Error object
	_, _ = w.Write(buf.Bytes())
}

func (s *Server) requestID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprintf("fake-%08x-%d", s.seq, len(s.calls))
}

// handle checks the envelope, applies injections and runs the action. It
// runs with s.mu held.
func (s *Server) handle(r *http.Request, action string, body []byte) (map[string]any, *apiError) {
	if err := s.checkEnvelope(r, action, body); err != nil {
		return nil, err
	}
	if s.throttleNext > 0 {
		s.throttleNext--
		return nil, errf(CodeThrottled, "Your current request times exceed the frequency limit for %s; please retry later.", action)
	}
	if s.throttleFraction > 0 {
		s.throttleAcc += s.throttleFraction
		if s.throttleAcc >= 1 {
			s.throttleAcc--
			return nil, errf(CodeThrottled, "Your current request times exceed the frequency limit for %s; please retry later.", action)
		}
	}
	switch action {
	case "RunInstances":
		return s.runInstances(body)
	case "DescribeInstances":
		return s.describeInstances(body)
	case "TerminateInstances":
		return s.terminateInstances(body)
	case "StopInstances":
		return s.stopInstances(body)
	case "StartInstances":
		return s.startInstances(body)
	case "InquiryPriceRunInstances":
		return s.inquiryPrice(body)
	default:
		return nil, errf("InvalidAction", "action %q does not exist", action)
	}
}

// checkEnvelope checks what API 3.0 requires of every request: POST with a
// JSON body, the X-TC-* common parameters, a well-formed TC3 Authorization
// with a valid signature, a known version and this region.
func (s *Server) checkEnvelope(r *http.Request, action string, body []byte) *apiError {
	if r.Method != http.MethodPost {
		return errf("UnsupportedProtocol", "the fake accepts POST only, got %s", r.Method)
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		return errf("InvalidParameter", "Content-Type %q, want application/json", ct)
	}
	if action == "" {
		return errf("MissingParameter", "the X-TC-Action header is missing")
	}
	ts := r.Header.Get("X-TC-Timestamp")
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return errf("MissingParameter", "the X-TC-Timestamp header is missing or not a number")
	}
	a, err := parseAuthorization(r.Header.Get("Authorization"))
	if err != nil {
		return errf("AuthFailure.InvalidAuthorization", "Authorization header: %v", err)
	}
	if a.Service != "cvm" {
		return errf("AuthFailure.SignatureFailure", "credential scope service %q, want cvm", a.Service)
	}
	if !slices.Contains(a.SignedHeaders, "content-type") || !slices.Contains(a.SignedHeaders, "host") {
		return errf("AuthFailure.SignatureFailure", "SignedHeaders must include content-type and host")
	}
	signedAt := time.Unix(sec, 0).UTC()
	if d := time.Since(signedAt); d > 5*time.Minute || d < -5*time.Minute {
		return errf("AuthFailure.SignatureExpire", "the signature was made at %s, more than 5 minutes off", signedAt)
	}
	if a.Date != signedAt.Format("2006-01-02") {
		return errf("AuthFailure.SignatureFailure", "credential date %s does not match the timestamp", a.Date)
	}
	if s.verify {
		if a.SecretID != s.secretID {
			return errf("AuthFailure.SecretIdNotFound", "the SecretId is not found")
		}
		if want := signature(s.secretKey, a, r, ts, body); want != a.Signature {
			return errf("AuthFailure.SignatureFailure", "the provided credentials could not be validated")
		}
	}
	if v := r.Header.Get("X-TC-Version"); v != Version {
		return errf("NoSuchVersion", "version %q does not exist for cvm", v)
	}
	if region := r.Header.Get("X-TC-Region"); region != s.Region {
		return errf("UnsupportedRegion", "region %q is not served here (%s)", region, s.Region)
	}
	return nil
}

// decode unmarshals a request body strictly: unknown parameters are
// refused as the API does (UnknownParameter).
func decode(body []byte, v any) *apiError {
	d := json.NewDecoder(bytes.NewReader(body))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		if strings.Contains(err.Error(), "unknown field") {
			return errf("UnknownParameter", "%v", err)
		}
		return errf("InvalidParameter", "%v", err)
	}
	return nil
}

type wirePlacement struct {
	Zone      string `json:"Zone"`
	ProjectId *int   `json:"ProjectId,omitempty"`
}

type wireMarket struct {
	MarketType  string `json:"MarketType"`
	SpotOptions *struct {
		MaxPrice         string `json:"MaxPrice"`
		SpotInstanceType string `json:"SpotInstanceType"`
	} `json:"SpotOptions"`
}

type wireTag struct {
	Key   string `json:"Key"`
	Value string `json:"Value"`
}

type runRequest struct {
	InstanceChargeType  string         `json:"InstanceChargeType"`
	Placement           *wirePlacement `json:"Placement"`
	InstanceType        string         `json:"InstanceType"`
	ImageId             string         `json:"ImageId"`
	VirtualPrivateCloud *struct {
		VpcId    string `json:"VpcId"`
		SubnetId string `json:"SubnetId"`
	} `json:"VirtualPrivateCloud"`
	SecurityGroupIds   []string `json:"SecurityGroupIds"`
	InternetAccessible *struct {
		InternetChargeType      string `json:"InternetChargeType"`
		InternetMaxBandwidthOut int    `json:"InternetMaxBandwidthOut"`
		PublicIpAssigned        *bool  `json:"PublicIpAssigned"`
	} `json:"InternetAccessible"`
	InstanceCount    *int   `json:"InstanceCount"`
	InstanceName     string `json:"InstanceName"`
	ClientToken      string `json:"ClientToken"`
	TagSpecification []struct {
		ResourceType string    `json:"ResourceType"`
		Tags         []wireTag `json:"Tags"`
	} `json:"TagSpecification"`
	InstanceMarketOptions *wireMarket `json:"InstanceMarketOptions"`
	DryRun                bool        `json:"DryRun"`
	// UserData: base64, "of up to 16 KB" (RunInstances).
	UserData string `json:"UserData"`
}

var chargeTypes = []string{"PREPAID", "POSTPAID_BY_HOUR", "CDHPAID", "SPOTPAID"}

// checkOffering validates what RunInstances and InquiryPriceRunInstances
// share and applies capacity injections.
func (s *Server) checkOffering(pl *wirePlacement, instanceType, imageID, chargeType string, m *wireMarket) *apiError {
	switch {
	case pl == nil || pl.Zone == "":
		return errf("MissingParameter", "the parameter Placement.Zone is missing")
	case imageID == "":
		return errf("MissingParameter", "the parameter ImageId is missing")
	case instanceType == "":
		return errf("MissingParameter", "the parameter InstanceType is missing")
	case !strings.HasPrefix(pl.Zone, s.Region+"-"):
		return errf("InvalidZone.MismatchRegion", "zone %s is not in region %s", pl.Zone, s.Region)
	case !slices.Contains(chargeTypes, chargeType):
		return errf("InvalidParameterValue", "InstanceChargeType %q is not one of %v", chargeType, chargeTypes)
	}
	if chargeType == "SPOTPAID" {
		if m == nil || m.MarketType != "spot" {
			return errf("MissingParameter", "SPOTPAID needs InstanceMarketOptions with MarketType spot")
		}
		if m.SpotOptions != nil && m.SpotOptions.SpotInstanceType != "" && m.SpotOptions.SpotInstanceType != "one-time" {
			return errf("InvalidParameterValue", "SpotInstanceType %q: only one-time is supported", m.SpotOptions.SpotInstanceType)
		}
		if m.SpotOptions != nil && m.SpotOptions.MaxPrice != "" {
			if _, err := strconv.ParseFloat(m.SpotOptions.MaxPrice, 64); err != nil {
				return errf("InvalidParameterValue", "MaxPrice %q is not a decimal", m.SpotOptions.MaxPrice)
			}
		}
	} else if m != nil {
		return errf("InvalidParameterCombination", "InstanceMarketOptions is only valid with SPOTPAID")
	}
	for _, k := range []offering{{pl.Zone, instanceType, chargeType}, {pl.Zone, instanceType, ""}} {
		if code, ok := s.noCap[k]; ok {
			return errf(code, "the instance type %s is sold out in %s (%s)", instanceType, pl.Zone, chargeType)
		}
	}
	return nil
}

func (s *Server) runInstances(body []byte) (map[string]any, *apiError) {
	var req runRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if len(req.ClientToken) > 64 {
		return nil, errf("InvalidClientToken.TooLong", "the ClientToken exceeds 64 characters")
	}
	if ids, ok := s.tokens[req.ClientToken]; ok && req.ClientToken != "" {
		// Idempotent: the same token answers the same instances.
		return map[string]any{"InstanceIdSet": ids}, nil
	}
	if req.InstanceChargeType == "" {
		req.InstanceChargeType = "POSTPAID_BY_HOUR"
	}
	if err := s.checkOffering(req.Placement, req.InstanceType, req.ImageId, req.InstanceChargeType, req.InstanceMarketOptions); err != nil {
		return nil, err
	}
	count := 1
	if req.InstanceCount != nil {
		count = *req.InstanceCount
	}
	if count < 1 || count > 100 {
		return nil, errf("InvalidParameterValue.Range", "InstanceCount %d is not in [1, 100]", count)
	}
	if len(req.UserData) > 16*1024 {
		return nil, errf("InvalidParameterValue.UserDataSizeExceeded", "the base64-encoded UserData exceeds 16 KB")
	}
	if _, err := base64.StdEncoding.DecodeString(req.UserData); err != nil {
		return nil, errf("InvalidParameterValue", "UserData is not base64: %v", err)
	}
	if len(req.InstanceName) > 128 {
		return nil, errf("InvalidInstanceName.TooLong", "the InstanceName exceeds 128 characters")
	}
	if v := req.VirtualPrivateCloud; v != nil && (v.VpcId == "" || v.SubnetId == "") {
		return nil, errf("MissingParameter", "VirtualPrivateCloud needs VpcId and SubnetId")
	}
	tags := map[string]string{}
	for _, ts := range req.TagSpecification {
		if !slices.Contains([]string{"instance", "host", "image", "keypair", "ps", "hpc"}, ts.ResourceType) {
			return nil, errf("InvalidParameterValue", "TagSpecification.ResourceType %q", ts.ResourceType)
		}
		if ts.ResourceType != "instance" {
			continue
		}
		for _, t := range ts.Tags {
			if t.Key == "" {
				return nil, errf("FailedOperation.IllegalTagKey", "empty tag key")
			}
			if _, dup := tags[t.Key]; dup {
				return nil, errf("InvalidParameterValue.DuplicateTags", "tag %q given twice", t.Key)
			}
			tags[t.Key] = t.Value
		}
	}
	if req.DryRun {
		return nil, errf("DryRunOperation", "the request would have succeeded")
	}
	proto := Instance{
		Name: req.InstanceName, Zone: req.Placement.Zone, InstanceType: req.InstanceType, ImageID: req.ImageId,
		ChargeType: req.InstanceChargeType, SecurityGroupIDs: req.SecurityGroupIds, Tags: tags,
		State: "PENDING", ClientToken: req.ClientToken, UserData: req.UserData, CreatedTime: s.now().UTC().Truncate(time.Second),
	}
	if m := req.InstanceMarketOptions; m != nil {
		proto.MarketType = m.MarketType
		if m.SpotOptions != nil {
			proto.SpotInstanceType, proto.MaxPrice = m.SpotOptions.SpotInstanceType, m.SpotOptions.MaxPrice
		}
	}
	if v := req.VirtualPrivateCloud; v != nil {
		proto.VpcID, proto.SubnetID = v.VpcId, v.SubnetId
	}
	if ia := req.InternetAccessible; ia != nil {
		proto.BandwidthOut = ia.InternetMaxBandwidthOut
		proto.WantPublicIP = ia.InternetMaxBandwidthOut > 0 && (ia.PublicIpAssigned == nil || *ia.PublicIpAssigned)
	}
	ids := make([]string, 0, count)
	for i := 0; i < count; i++ {
		in := proto
		in.Tags = map[string]string{}
		for k, v := range proto.Tags {
			in.Tags[k] = v
		}
		ids = append(ids, s.create(in).ID)
	}
	if req.ClientToken != "" {
		s.tokens[req.ClientToken] = ids
	}
	if s.loseRun > 0 {
		s.loseRun--
		return nil, errLost
	}
	return map[string]any{"InstanceIdSet": ids}, nil
}

// create stores a new instance with the next id and a private IP.
func (s *Server) create(in Instance) *Instance {
	s.seq++
	in.n = s.seq
	if in.ID == "" {
		in.ID = fmt.Sprintf("ins-%08x", s.seq)
	}
	if in.PrivateIP == "" {
		in.PrivateIP = fmt.Sprintf("10.%d.%d.%d", (s.seq>>16)&0xff, (s.seq>>8)&0xff, s.seq&0xff)
	}
	p := &in
	s.byID[p.ID] = p
	s.order = append(s.order, p.ID)
	return p
}

// publicIP is the n-th public address (198.18.0.0/15, the benchmarking range).
func publicIP(n int) string {
	return fmt.Sprintf("198.%d.%d.%d", 18+(n>>16)&1, (n>>8)&0xff, n&0xff)
}

var idPattern = regexp.MustCompile(`^ins-[0-9a-z]{8}$`)

type describeRequest struct {
	InstanceIds []string `json:"InstanceIds"`
	Filters     []struct {
		Name   string   `json:"Name"`
		Values []string `json:"Values"`
	} `json:"Filters"`
	Offset *int `json:"Offset"`
	Limit  *int `json:"Limit"`
}

func (s *Server) describeInstances(body []byte) (map[string]any, *apiError) {
	var req describeRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if len(req.InstanceIds) > 0 && len(req.Filters) > 0 {
		return nil, errf("InvalidParameterCombination", "InstanceIds and Filters cannot be specified together")
	}
	if len(req.InstanceIds) > 100 {
		return nil, errf("InvalidInstanceId.Malformed", "at most 100 InstanceIds per request")
	}
	for _, id := range req.InstanceIds {
		if !idPattern.MatchString(id) {
			return nil, errf("InvalidInstanceId.Malformed", "instance id %q is malformed", id)
		}
	}
	if len(req.Filters) > 10 {
		return nil, errf("InvalidFilterValue.LimitExceeded", "at most 10 Filters")
	}
	for _, f := range req.Filters {
		if len(f.Values) > 5 {
			return nil, errf("InvalidFilterValue.LimitExceeded", "at most 5 values per filter")
		}
		if !knownFilter(f.Name) {
			return nil, errf("InvalidFilter", "filter %q is not supported", f.Name)
		}
	}
	offset, limit := 0, 20
	if req.Offset != nil {
		offset = *req.Offset
	}
	if req.Limit != nil {
		limit = *req.Limit
	}
	if offset < 0 {
		return nil, errf("InvalidParameterValueOffset", "Offset %d is invalid", offset)
	}
	if limit < 1 || limit > 100 {
		return nil, errf("InvalidParameterValue.LimitExceeded", "Limit %d is not in [1, 100]", limit)
	}

	var matched []*Instance
	for _, id := range s.order {
		in := s.byID[id]
		if len(req.InstanceIds) > 0 && !slices.Contains(req.InstanceIds, id) {
			continue
		}
		ok := true
		for _, f := range req.Filters {
			if !matchFilter(in, f.Name, f.Values) {
				ok = false
				break
			}
		}
		if ok {
			matched = append(matched, in)
		}
	}
	total := len(matched)
	page := []*Instance{}
	if offset < total {
		page = matched[offset:min(offset+limit, total)]
	}
	set := make([]map[string]any, 0, len(page))
	var gone []string
	for _, in := range page {
		set = append(set, s.observe(in))
		if in.State == "TERMINATING" && in.terminateDescribes >= s.goneAfter {
			gone = append(gone, in.ID)
		}
	}
	for _, id := range gone {
		s.remove(id)
	}
	return map[string]any{"TotalCount": total, "InstanceSet": set}, nil
}

// observe renders an instance for DescribeInstances and advances its
// lifecycle by one describe.
func (s *Server) observe(in *Instance) map[string]any {
	if in.State == "PENDING" && in.describes >= s.runningAfter {
		in.State = "RUNNING"
	}
	switch {
	case in.State == "STOPPING" && in.transDescribes >= s.stoppedAfter:
		in.State = "STOPPED"
		if in.StoppedMode == "STOP_CHARGING" {
			// No charges when shut down releases the public IP.
			in.PublicIP = ""
		}
	case in.State == "STARTING" && in.transDescribes >= s.runningAfter:
		in.State = "RUNNING"
	}
	switch {
	case !in.WantPublicIP || in.PublicIP != "" || in.State == "STOPPING" || in.State == "STOPPED":
	case in.Starts == 0 && in.describes >= s.publicIPAfter:
		in.PublicIP = publicIP(in.n)
	case in.Starts > 0 && in.transDescribes >= s.publicIPAfter:
		// A new address after a start, never the one released.
		s.seq++
		in.PublicIP = publicIP(s.seq)
	}
	in.describes++
	in.transDescribes++
	if in.State == "TERMINATING" {
		in.terminateDescribes++
	}
	tags := make([]wireTag, 0, len(in.Tags))
	keys := make([]string, 0, len(in.Tags))
	for k := range in.Tags {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		tags = append(tags, wireTag{Key: k, Value: in.Tags[k]})
	}
	var public []string
	if in.PublicIP != "" {
		public = []string{in.PublicIP}
	}
	return map[string]any{
		"InstanceId":         in.ID,
		"InstanceName":       in.Name,
		"InstanceType":       in.InstanceType,
		"InstanceState":      in.State,
		"InstanceChargeType": in.ChargeType,
		"ImageId":            in.ImageID,
		"Placement":          map[string]any{"Zone": in.Zone, "ProjectId": 0},
		"PrivateIpAddresses": []string{in.PrivateIP},
		"PublicIpAddresses":  public, // null until assigned, as documented
		"SecurityGroupIds":   in.SecurityGroupIDs,
		"CreatedTime":        in.CreatedTime.Format(time.RFC3339),
		"StopChargingMode":   stopChargingMode(in),
		"Tags":               tags,
		"RestrictState":      "NORMAL",
	}
}

func (s *Server) remove(id string) {
	delete(s.byID, id)
	s.order = slices.DeleteFunc(s.order, func(v string) bool { return v == id })
}

func knownFilter(name string) bool {
	switch name {
	case "zone", "instance-id", "instance-name", "instance-charge-type", "instance-state",
		"private-ip-address", "public-ip-address", "tag-key", "tag-value":
		return true
	}
	return strings.HasPrefix(name, "tag:") && len(name) > len("tag:")
}

func matchFilter(in *Instance, name string, values []string) bool {
	var got []string
	switch {
	case name == "zone":
		got = []string{in.Zone}
	case name == "instance-id":
		got = []string{in.ID}
	case name == "instance-name":
		got = []string{in.Name}
	case name == "instance-charge-type":
		got = []string{in.ChargeType}
	case name == "instance-state":
		got = []string{in.State}
	case name == "private-ip-address":
		got = []string{in.PrivateIP}
	case name == "public-ip-address":
		got = []string{in.PublicIP}
	case name == "tag-key":
		for k := range in.Tags {
			got = append(got, k)
		}
	case name == "tag-value":
		for _, v := range in.Tags {
			got = append(got, v)
		}
	case strings.HasPrefix(name, "tag:"):
		v, ok := in.Tags[strings.TrimPrefix(name, "tag:")]
		if !ok {
			return false
		}
		got = []string{v}
	}
	for _, g := range got {
		if slices.Contains(values, g) {
			return true
		}
	}
	return false
}

func (s *Server) terminateInstances(body []byte) (map[string]any, *apiError) {
	var req struct {
		InstanceIds []string `json:"InstanceIds"`
	}
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if len(req.InstanceIds) == 0 {
		return nil, errf("MissingParameter", "the parameter InstanceIds is missing")
	}
	if len(req.InstanceIds) > 100 {
		return nil, errf("InvalidParameterValue.LimitExceeded", "at most 100 instances per request")
	}
	// The whole batch is refused if one instance cannot be terminated.
	for _, id := range req.InstanceIds {
		if !idPattern.MatchString(id) {
			return nil, errf("InvalidInstanceId.Malformed", "instance id %q is malformed", id)
		}
		in, ok := s.byID[id]
		if !ok {
			return nil, errf("InvalidInstanceId.NotFound", "instance %s is not found", id)
		}
		switch in.State {
		case "TERMINATING":
			return nil, errf("UnsupportedOperation.InstanceStateTerminating", "instance %s is terminating", id)
		case "LAUNCH_FAILED":
			return nil, errf("UnsupportedOperation.InstanceStateLaunchFailed", "instance %s failed to launch", id)
		}
	}
	for _, id := range req.InstanceIds {
		if s.goneAfter <= 0 {
			s.remove(id)
			continue
		}
		in := s.byID[id]
		in.State = "TERMINATING"
		in.terminateDescribes = 0
	}
	return map[string]any{}, nil
}

// stopChargingMode is DescribeInstances' StopChargingMode: the stopped
// mode of a STOPPED instance, NOT_APPLICABLE otherwise.
func stopChargingMode(in *Instance) string {
	if in.State == "STOPPED" && in.StoppedMode != "" {
		return in.StoppedMode
	}
	return "NOT_APPLICABLE"
}

// checkStateIDs validates the InstanceIds of StopInstances and
// StartInstances: present, at most 100, well-formed, known.
func (s *Server) checkStateIDs(ids []string) *apiError {
	if len(ids) == 0 {
		return errf("MissingParameter", "the parameter InstanceIds is missing")
	}
	if len(ids) > 100 {
		return errf("InvalidParameterValue.LimitExceeded", "at most 100 instances per request")
	}
	for _, id := range ids {
		if !idPattern.MatchString(id) {
			return errf("InvalidInstanceId.Malformed", "instance id %q is malformed", id)
		}
		if _, ok := s.byID[id]; !ok {
			return errf("InvalidInstanceId.NotFound", "instance %s is not found", id)
		}
	}
	return nil
}

// stateCode is the UnsupportedOperation.InstanceState* code for an
// instance in state refusing an operation (per the action's error list).
func stateCode(state string) string {
	switch state {
	case "PENDING":
		return "UnsupportedOperation.InstanceStatePending"
	case "RUNNING":
		return "UnsupportedOperation.InstanceStateRunning"
	case "STARTING":
		return "UnsupportedOperation.InstanceStateStarting"
	case "STOPPING":
		return "UnsupportedOperation.InstanceStateStopping"
	case "STOPPED":
		return "UnsupportedOperation.InstanceStateStopped"
	case "REBOOTING":
		return "UnsupportedOperation.InstanceStateRebooting"
	case "SHUTDOWN":
		return "UnsupportedOperation.InstanceStateShutdown"
	case "TERMINATING":
		return "UnsupportedOperation.InstanceStateTerminating"
	}
	return "InvalidInstance.NotSupported"
}

// stopInstances shuts RUNNING instances down (STOPPING, then STOPPED). The
// whole batch is refused if one instance is not RUNNING
// (UnsupportedOperation.InstanceState*) or cannot stop without charges
// (UnsupportedOperation.StoppedModeStopCharging: only pay-as-you-go,
// POSTPAID_BY_HOUR, instances can).
func (s *Server) stopInstances(body []byte) (map[string]any, *apiError) {
	var req struct {
		InstanceIds []string `json:"InstanceIds"`
		ForceStop   *bool    `json:"ForceStop"`
		StopType    string   `json:"StopType"`
		StoppedMode string   `json:"StoppedMode"`
	}
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if err := s.checkStateIDs(req.InstanceIds); err != nil {
		return nil, err
	}
	switch req.StopType {
	case "", "SOFT", "HARD", "SOFT_FIRST":
	default:
		return nil, errf("InvalidParameterValue", "StopType %q is not one of SOFT, HARD, SOFT_FIRST", req.StopType)
	}
	mode := req.StoppedMode
	switch mode {
	case "":
		mode = "KEEP_CHARGING"
	case "KEEP_CHARGING", "STOP_CHARGING":
	default:
		return nil, errf("InvalidParameterValue", "StoppedMode %q is not one of KEEP_CHARGING, STOP_CHARGING", req.StoppedMode)
	}
	for _, id := range req.InstanceIds {
		in := s.byID[id]
		if in.State != "RUNNING" {
			return nil, errf(stateCode(in.State), "instance %s is %s; only RUNNING instances can be shut down", id, in.State)
		}
		if mode == "STOP_CHARGING" && in.ChargeType != "POSTPAID_BY_HOUR" {
			return nil, errf("UnsupportedOperation.StoppedModeStopCharging", "instance %s (%s) does not support no charges when shut down", id, in.ChargeType)
		}
	}
	for _, id := range req.InstanceIds {
		in := s.byID[id]
		in.State = "STOPPING"
		in.StoppedMode = mode
		in.transDescribes = 0
	}
	return map[string]any{}, nil
}

// startInstances starts STOPPED instances (STARTING, then RUNNING). The
// whole batch is refused if one instance is not STOPPED.
func (s *Server) startInstances(body []byte) (map[string]any, *apiError) {
	var req struct {
		InstanceIds []string `json:"InstanceIds"`
	}
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if err := s.checkStateIDs(req.InstanceIds); err != nil {
		return nil, err
	}
	for _, id := range req.InstanceIds {
		if in := s.byID[id]; in.State != "STOPPED" {
			return nil, errf(stateCode(in.State), "instance %s is %s; only STOPPED instances can be started", id, in.State)
		}
	}
	for _, id := range req.InstanceIds {
		in := s.byID[id]
		in.State = "STARTING"
		in.Starts++
		in.transDescribes = 0
	}
	return map[string]any{}, nil
}

type priceRequest struct {
	InstanceChargeType    string         `json:"InstanceChargeType"`
	Placement             *wirePlacement `json:"Placement"`
	InstanceType          string         `json:"InstanceType"`
	ImageId               string         `json:"ImageId"`
	InstanceCount         *int           `json:"InstanceCount"`
	InstanceMarketOptions *wireMarket    `json:"InstanceMarketOptions"`
}

func (s *Server) inquiryPrice(body []byte) (map[string]any, *apiError) {
	var req priceRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if req.InstanceChargeType == "" {
		req.InstanceChargeType = "POSTPAID_BY_HOUR"
	}
	if err := s.checkOffering(req.Placement, req.InstanceType, req.ImageId, req.InstanceChargeType, req.InstanceMarketOptions); err != nil {
		if strings.HasPrefix(err.code, "ResourceInsufficient.") {
			// InquiryPriceRunInstances reports sold-out types this way.
			err.code = "ResourcesSoldOut.SpecifiedInstanceType"
		}
		return nil, err
	}
	k := offering{req.Placement.Zone, req.InstanceType, req.InstanceChargeType}
	if code, ok := s.priceErrs[k]; ok {
		return nil, errf(code, "price inquiry failed for %s in %s", req.InstanceType, req.Placement.Zone)
	}
	price, ok := s.prices[k]
	if !ok {
		return nil, errf("FailedOperation.InquiryPriceFailed", "no price for %s in %s (%s)", req.InstanceType, req.Placement.Zone, req.InstanceChargeType)
	}
	list := price
	if od, ok := s.prices[offering{req.Placement.Zone, req.InstanceType, "POSTPAID_BY_HOUR"}]; ok && od > 0 {
		list = od
	}
	discount := 100.0
	if list > 0 {
		discount = 100 * price / list
	}
	return map[string]any{"Price": map[string]any{
		"InstancePrice": map[string]any{
			"UnitPrice":         list,
			"UnitPriceDiscount": price,
			"Discount":          discount,
			"ChargeUnit":        "HOUR",
		},
		"BandwidthPrice": map[string]any{
			"UnitPrice":         0.12,
			"UnitPriceDiscount": 0.12,
			"Discount":          100,
			"ChargeUnit":        "GB",
		},
	}}, nil
}
