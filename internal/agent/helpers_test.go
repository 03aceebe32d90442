package agent

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/tidegpu/tidegpu/internal/admin"
)

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond) // polling interval of a condition
	}
}

// post is one notice the controller received.
type post struct {
	At            time.Time // the controller's now
	Path          string
	Authorization string
	Notice        admin.Notice
	Status        int
}

// controller is an httptest admin API that records notice POSTs, reads them
// with the admin API's own parser and answers the scripted statuses
// (then 202).
type controller struct {
	*httptest.Server
	mu     sync.Mutex
	posts  []post
	script []int
	always int // when not 0, the answer after the script
}

// newController starts a controller whose notion of now (for the admin
// API's checks of interruptAt) is now.
func newController(t *testing.T, now func() time.Time, script ...int) *controller {
	c := &controller{script: script}
	c.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		p := post{At: now(), Path: r.URL.Path, Authorization: r.Header.Get("Authorization")}
		n, err := admin.ParseNotice(body, now())
		c.mu.Lock()
		switch {
		case r.Method != http.MethodPost || err != nil:
			p.Status = http.StatusBadRequest
		case len(c.script) > 0:
			p.Status, c.script = c.script[0], c.script[1:]
		case c.always != 0:
			p.Status = c.always
		default:
			p.Status = http.StatusAccepted
		}
		p.Notice = n
		c.posts = append(c.posts, p)
		c.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(p.Status)
		if p.Status >= 300 {
			_, _ = io.WriteString(w, `{"error": "scripted failure"}`)
		} else {
			_, _ = io.WriteString(w, `{}`)
		}
	}))
	t.Cleanup(c.Close)
	return c
}

func (c *controller) setAlways(status int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.always = status
}

func (c *controller) Posts() []post {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]post(nil), c.posts...)
}

func (c *controller) count() int { return len(c.Posts()) }
