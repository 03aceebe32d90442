// Package metadatatest holds fakes of the cloud metadata services that
// `tidegpu agent` reads, served over HTTP on a loopback port, for the tests
// of internal/agent, internal/cli and test/e2e. The real services only
// answer on the instance itself (169.254.169.254, metadata.tencentyun.com),
// so these fakes follow the documented behaviour instead:
//
// AWS (NewAWS), EC2's instance metadata service with IMDSv2 required:
//
//   - Session tokens: PUT /latest/api/token with
//     X-aws-ec2-metadata-token-ttl-seconds, "a minimum of one second and a
//     maximum of six hours" (21600 s); the token is sent back in
//     X-aws-ec2-metadata-token on every GET and is valid until its TTL
//     passes; the answer echoes the TTL header. A PUT carrying
//     X-Forwarded-For is refused (403), a missing or out-of-range TTL is 400
//     (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/instance-metadata-v2-how-it-works.html,
//     https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/instancedata-data-retrieval.html).
//   - With IMDSv2 required, a GET without a valid token is 401
//     Unauthorized, and clients (the AWS SDK's imds token provider,
//     aws-node-termination-handler) fetch a new token on 401.
//   - spot/instance-action: 404 while EC2 is not stopping or terminating
//     the instance; then {"action": "terminate|stop|hibernate",
//     "time": "2017-09-18T08:22:00Z"}, the time in UTC, two minutes ahead
//     (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html).
//   - events/recommendations/rebalance: 404 until a rebalance
//     recommendation is emitted, then {"noticeTime": "2020-10-27T08:22:00Z"}
//     (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/rebalance-recommendations.html).
//   - instance-id: the id as plain text
//     (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/instancedata-data-categories.html).
//
// Tencent Cloud (NewTencent), the CVM metadata service (no token):
//
//   - spot/termination-time: 404 when "the instance is not a spot instance
//     or it's not terminated", else the termination time as plain text,
//     "2018-08-18 12:05:33", in UTC+8
//     (https://www.tencentcloud.com/document/product/213/32487).
//   - instance-id: the id as plain text, e.g. ins-3g445roi
//     (https://www.tencentcloud.com/document/product/213/4934).
//
// Both record every request that reached them and can inject failures.
package metadatatest

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"k8s.io/utils/clock"
)

// Call is one request that reached a fake.
type Call struct {
	Method string
	Path   string
	// Token is whether an IMDSv2 session token header was sent (never its
	// value).
	Token bool
	// Status is the answer's status.
	Status int
	// At is the fake's clock when the request came.
	At time.Time
}

// fault makes the next Times requests to Path answer Status.
type fault struct {
	path   string
	status int
	times  int
}

// base is what both fakes share: the listener, the clock, the call log and
// injected faults.
type base struct {
	// URL is the fake's base URL (http://127.0.0.1:port).
	URL string

	srv    *httptest.Server
	mu     sync.Mutex
	clock  clock.PassiveClock
	calls  []Call
	faults []*fault
}

func (b *base) start(t testing.TB, h http.HandlerFunc) {
	b.clock = clock.RealClock{}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		b.mu.Lock()
		at := b.clock.Now()
		status := b.takeFault(r.URL.Path)
		b.mu.Unlock()
		if status != 0 {
			http.Error(rec, http.StatusText(status), status)
		} else {
			h(rec, r)
		}
		b.mu.Lock()
		b.calls = append(b.calls, Call{Method: r.Method, Path: r.URL.Path, Token: r.Header.Get(tokenHeader) != "", Status: rec.status, At: at})
		b.mu.Unlock()
	}))
	b.URL = b.srv.URL
	t.Cleanup(b.srv.Close)
}

// takeFault returns the status of a fault for path, if one is armed. b.mu
// is held.
func (b *base) takeFault(path string) int {
	for i, f := range b.faults {
		if f.path == path {
			f.times--
			if f.times <= 0 {
				b.faults = append(b.faults[:i], b.faults[i+1:]...)
			}
			return f.status
		}
	}
	return 0
}

// SetClock makes the fake tell time (token expiry, call times) with c.
func (b *base) SetClock(c clock.PassiveClock) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.clock = c
}

// Fail makes the next times requests to path (e.g.
// /latest/meta-data/spot/instance-action) answer status.
func (b *base) Fail(path string, status, times int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.faults = append(b.faults, &fault{path: path, status: status, times: times})
}

// Calls returns the requests that reached the fake, oldest first.
func (b *base) Calls() []Call {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]Call(nil), b.calls...)
}

// CallCount returns how many requests for path reached the fake.
func (b *base) CallCount(path string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, c := range b.calls {
		if c.Path == path {
			n++
		}
	}
	return n
}

// Close stops the fake (it stops at the end of the test anyway): later
// requests find the port closed.
func (b *base) Close() { b.srv.Close() }

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}
