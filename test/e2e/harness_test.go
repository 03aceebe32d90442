// Package e2e runs the real tidegpu binary (`tidegpu up`) as a user would:
// real processes, real sockets, real clients, and checks what the issue
// promises end to end — a pool that heals under load with no failed request.
package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tidegpu/tidegpu/internal/engine"
	"github.com/tidegpu/tidegpu/internal/events"
	"github.com/tidegpu/tidegpu/test/testbin"
)

var binary string

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("e2e: skipped in -short mode")
		os.Exit(0)
	}
	bin, cleanup, err := testbin.Build()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	binary = bin
	code := m.Run()
	cleanup()
	os.Exit(code)
}

// upProc is one running `tidegpu up`.
type upProc struct {
	*testbin.Proc
	t        *testing.T
	gateway  string // http://host:port
	admin    string
	stateDir string
}

func freeAddr(t *testing.T) string { return testbin.FreeAddr(t) }

// startUp runs `tidegpu up` with extra args on fresh ports; stateDir "" means
// a new temporary one. It stops the process at the end of the test.
func startUp(t *testing.T, stateDir string, args ...string) *upProc {
	t.Helper()
	if stateDir == "" {
		stateDir = t.TempDir()
	}
	for try := 1; ; try++ {
		gw, adm := freeAddr(t), freeAddr(t)
		all := append([]string{"up", "--gateway-addr", gw, "--admin-addr", adm, "--state-dir", stateDir, "--log-level", "warn"}, args...)
		p := testbin.Start(t, binary, all...)
		if try < 3 && testbin.LostAddr(p, adm, 30*time.Second) {
			continue // a port taken between freeAddr and up's listen: others
		}
		return &upProc{Proc: p, t: t, gateway: "http://" + gw, admin: "http://" + adm, stateDir: stateDir}
	}
}

// stop signals the process and waits for it to exit (bounded).
func (u *upProc) stop(sig syscall.Signal) { u.Stop(sig) }

// eventually polls cond until it holds or timeout passes, and says how long
// it took.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	d, ok := testbin.Eventually(timeout, cond)
	if !ok {
		t.Fatalf("timed out after %s waiting for %s", timeout, what)
	}
	return d
}

func (u *upProc) pools() []engine.PoolView {
	resp, err := http.Get(u.admin + "/api/v1/pools")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var ps []engine.PoolView
	if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&ps) != nil {
		return nil
	}
	return ps
}

func (u *upProc) pool(name string) (engine.PoolView, bool) {
	for _, p := range u.pools() {
		if p.Name == name {
			return p, true
		}
	}
	return engine.PoolView{}, false
}

// readyIDs returns the ids of the pool's Ready instances.
func (u *upProc) readyIDs(pool string) []string {
	p, ok := u.pool(pool)
	if !ok {
		return nil
	}
	var ids []string
	for _, in := range p.Status.Instances {
		if in.Phase == "Ready" {
			ids = append(ids, in.ID)
		}
	}
	return ids
}

func (u *upProc) waitReady(pool string, n int, timeout time.Duration) time.Duration {
	u.t.Helper()
	return eventually(u.t, timeout, fmt.Sprintf("pool %s to have %d ready", pool, n), func() bool {
		p, ok := u.pool(pool)
		return ok && int(p.Status.Ready) == n && len(u.readyIDs(pool)) == n
	})
}

func (u *upProc) events() []events.Event {
	resp, err := http.Get(u.admin + "/api/v1/events")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var evs []events.Event
	_ = json.NewDecoder(resp.Body).Decode(&evs)
	return evs
}

func (u *upProc) hasEvent(reason, instance string) bool {
	for _, e := range u.events() {
		if e.Reason == reason && (instance == "" || e.Instance == instance) {
			return true
		}
	}
	return false
}

// stateEntry mirrors the local provider's state file entries.
type stateEntry struct {
	ID   string `json:"id"`
	Pool string `json:"pool"`
	PID  int    `json:"pid"`
}

func (u *upProc) statePIDs() map[string]int {
	return readStatePIDs(u.t, u.stateDir)
}

func readStatePIDs(t *testing.T, dir string) map[string]int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil {
		return map[string]int{}
	}
	var st struct {
		Instances []stateEntry `json:"instances"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("state.json: %v", err)
	}
	out := map[string]int{}
	for _, e := range st.Instances {
		out[e.ID] = e.PID
	}
	return out
}

// alive reports whether pid runs and is not a zombie.
func alive(pid int) bool { return testbin.Alive(pid) }

// load drives the gateway with concurrent clients, half streaming, and
// classifies every request.
type load struct {
	ok             atomic.Int64 // answered completely
	failedBefore   atomic.Int64 // failed before any byte of the answer: never allowed
	brokenStreams  atomic.Int64 // a stream cut after it started
	mu             sync.Mutex
	failures       []string
	backends       map[string]int
	stop           chan struct{}
	wg             sync.WaitGroup
	client         *http.Client
	gateway, model string
}

func startLoad(gateway string, workers int) *load {
	l := &load{stop: make(chan struct{}), backends: map[string]int{}, gateway: gateway, model: "qwen2:0.5b",
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 60 * time.Second}}
	for w := 0; w < workers; w++ {
		l.wg.Add(1)
		go func(w int) {
			defer l.wg.Done()
			stream := w%2 == 0
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				l.one(stream, w, i)
			}
		}(w)
	}
	return l
}

func (l *load) fail(format string, args ...any) {
	l.failedBefore.Add(1)
	l.mu.Lock()
	if len(l.failures) < 20 {
		l.failures = append(l.failures, fmt.Sprintf(format, args...))
	}
	l.mu.Unlock()
}

func (l *load) one(stream bool, w, i int) {
	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"worker %d request %d: 写一首诗"}],"stream":%t,"options":{"num_predict":24}}`, l.model, w, i, stream)
	path := "/ollama-chat"
	if i%3 == 1 {
		path = "/api/chat"
	}
	resp, err := l.client.Post(l.gateway+path, "application/json", strings.NewReader(body))
	if err != nil {
		l.fail("%s stream=%t: %v", path, stream, err)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		l.fail("%s stream=%t: status %d: %s", path, stream, resp.StatusCode, strings.TrimSpace(string(b)))
		return
	}
	l.mu.Lock()
	l.backends[resp.Header.Get("X-Tidegpu-Backend")]++
	l.mu.Unlock()
	// Read NDJSON lines; the answer is complete when a line says done.
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	done := false
	lines := 0
	for sc.Scan() {
		lines++
		var chunk struct {
			Done bool `json:"done"`
		}
		if json.Unmarshal(sc.Bytes(), &chunk) == nil && chunk.Done {
			done = true
		}
	}
	switch {
	case done:
		l.ok.Add(1)
	case stream && lines > 0:
		l.brokenStreams.Add(1) // started streaming, then cut: the one case that may fail
	default:
		l.fail("%s stream=%t: answer incomplete after headers (%d lines, err %v)", path, stream, lines, sc.Err())
	}
}

func (l *load) finish() {
	close(l.stop)
	l.wg.Wait()
}

func (l *load) backendCount(id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.backends[id]
}

func (l *load) report(t *testing.T) {
	t.Logf("load: %d complete, %d failed before the answer started, %d streams cut after starting",
		l.ok.Load(), l.failedBefore.Load(), l.brokenStreams.Load())
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range l.failures {
		t.Logf("  failure: %s", f)
	}
}

func postJSON(t *testing.T, url, body string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestLostAddr: startUp's retry tells a process that could not listen on
// an address handed out free (its gateway address, taken here on purpose)
// from one that listens.
func TestLostAddr(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	adm := freeAddr(t)
	p := testbin.Start(t, binary, "up", "--gateway-addr", ln.Addr().String(), "--admin-addr", adm, "--state-dir", t.TempDir(), "--log-level", "warn")
	if !testbin.LostAddr(p, adm, 30*time.Second) {
		t.Fatalf("up on a taken admin address: not told apart; output:\n%s", p.Out.String())
	}
	u := startUp(t, "")
	if !u.Running() {
		t.Fatalf("up on free addresses exited:\n%s", u.Out.String())
	}
}
