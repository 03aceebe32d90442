package metadatatest

import (
	"net/http"
	"testing"
	"time"
)

// Tencent Cloud metadata paths.
const (
	TerminationTimePath   = "/latest/meta-data/spot/termination-time"
	TencentInstanceIDPath = "/latest/meta-data/instance-id"
)

// tencentZone is the zone of the termination time: UTC+8.
var tencentZone = time.FixedZone("UTC+8", 8*60*60)

// Tencent is a fake of Tencent Cloud's CVM metadata service. Create it with
// NewTencent.
type Tencent struct {
	base

	instanceID  string
	termination *time.Time
}

// NewTencent starts a fake metadata service on a loopback port serving
// instanceID; it stops at the end of the test.
func NewTencent(t testing.TB, instanceID string) *Tencent {
	s := &Tencent{instanceID: instanceID}
	s.start(t, s.serve)
	return s
}

// Schedule makes spot/termination-time announce at.
func (s *Tencent) Schedule(at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.termination = &at
}

func (s *Tencent) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch r.URL.Path {
	case TencentInstanceIDPath:
		writeText(w, s.instanceID)
	case TerminationTimePath:
		if s.termination == nil {
			http.NotFound(w, r)
			return
		}
		writeText(w, s.termination.In(tencentZone).Format("2006-01-02 15:04:05"))
	default:
		http.NotFound(w, r)
	}
}
