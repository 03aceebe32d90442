package metadatatest

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// IMDSv2 paths and headers.
const (
	TokenPath          = "/latest/api/token"
	InstanceActionPath = "/latest/meta-data/spot/instance-action"
	RebalancePath      = "/latest/meta-data/events/recommendations/rebalance"
	AWSInstanceIDPath  = "/latest/meta-data/instance-id"

	tokenHeader    = "X-Aws-Ec2-Metadata-Token"
	tokenTTLHeader = "X-Aws-Ec2-Metadata-Token-Ttl-Seconds"

	// MaxTokenTTLSeconds is the longest session token: six hours.
	MaxTokenTTLSeconds = 21600
)

// AWS is a fake of EC2's instance metadata service with IMDSv2 required.
// Create it with NewAWS.
type AWS struct {
	base

	instanceID string
	tokens     map[string]time.Time // token -> expiry
	issued     int
	action     *instanceAction
	rebalance  *time.Time
}

type instanceAction struct {
	action string
	at     time.Time
}

// NewAWS starts a fake IMDS on a loopback port serving instanceID; it stops
// at the end of the test.
func NewAWS(t testing.TB, instanceID string) *AWS {
	s := &AWS{instanceID: instanceID, tokens: map[string]time.Time{}}
	s.start(t, s.serve)
	return s
}

// Schedule makes spot/instance-action announce action (terminate, stop or
// hibernate) at at.
func (s *AWS) Schedule(action string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.action = &instanceAction{action: action, at: at}
}

// Unschedule makes spot/instance-action answer 404 again.
func (s *AWS) Unschedule() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.action = nil
}

// Rebalance emits a rebalance recommendation with noticeTime.
func (s *AWS) Rebalance(noticeTime time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rebalance = &noticeTime
}

// ForgetTokens invalidates every session token, as a restart of the
// service would: the next GET with an old token is 401.
func (s *AWS) ForgetTokens() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens = map[string]time.Time{}
}

// TokensIssued returns how many session tokens the fake issued.
func (s *AWS) TokensIssued() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.issued
}

// Unauthorized returns how many metadata GETs were refused with 401.
func (s *AWS) Unauthorized() int {
	n := 0
	for _, c := range s.Calls() {
		if c.Method == http.MethodGet && c.Status == http.StatusUnauthorized {
			n++
		}
	}
	return n
}

func (s *AWS) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == TokenPath {
		s.serveToken(w, r)
		return
	}
	if r.Method != http.MethodGet {
		http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	exp, ok := s.tokens[r.Header.Get(tokenHeader)]
	if !ok || !now.Before(exp) {
		delete(s.tokens, r.Header.Get(tokenHeader))
		// IMDSv2 required: no token or an invalid one is 401.
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
		return
	}
	w.Header().Set(tokenTTLHeader, strconv.Itoa(int(exp.Sub(now)/time.Second)))
	switch r.URL.Path {
	case AWSInstanceIDPath:
		writeText(w, s.instanceID)
	case InstanceActionPath:
		if s.action == nil {
			http.NotFound(w, r)
			return
		}
		writeJSON(w, map[string]string{"action": s.action.action, "time": s.action.at.UTC().Format("2006-01-02T15:04:05Z")})
	case RebalancePath:
		if s.rebalance == nil {
			http.NotFound(w, r)
			return
		}
		writeJSON(w, map[string]string{"noticeTime": s.rebalance.UTC().Format("2006-01-02T15:04:05Z")})
	default:
		http.NotFound(w, r)
	}
}

func (s *AWS) serveToken(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPut {
		http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
		return
	}
	if r.Header.Get("X-Forwarded-For") != "" {
		http.Error(w, "Forbidden", http.StatusForbidden)
		return
	}
	ttl, err := strconv.Atoi(strings.TrimSpace(r.Header.Get(tokenTTLHeader)))
	if err != nil || ttl < 1 || ttl > MaxTokenTTLSeconds {
		http.Error(w, "Bad Request", http.StatusBadRequest)
		return
	}
	b := make([]byte, 42)
	if _, err := io.ReadFull(rand.Reader, b); err != nil {
		http.Error(w, "Internal Server Error", http.StatusInternalServerError)
		return
	}
	tok := base64.URLEncoding.EncodeToString(b)
	s.mu.Lock()
	s.tokens[tok] = s.clock.Now().Add(time.Duration(ttl) * time.Second)
	s.issued++
	s.mu.Unlock()
	w.Header().Set(tokenTTLHeader, strconv.Itoa(ttl))
	writeText(w, tok)
}

func writeText(w http.ResponseWriter, s string) {
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, s)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "text/plain") // IMDS serves JSON items as text/plain
	w.WriteHeader(http.StatusOK)
	_ = json.NewEncoder(w).Encode(v)
}
