// Package promtest starts a real Prometheus server (Debian's `prometheus`
// package, /usr/bin/prometheus) for tests: on a free loopback port, with a
// generated configuration that scrapes the given targets, its storage in
// the test's temporary directory. It is test-only support code, not a fake.
package promtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// BinaryEnv names an environment variable that overrides the path of the
// prometheus binary.
const BinaryEnv = "TIDEGPU_PROMETHEUS"

// Server is a Prometheus process started by Start.
type Server struct {
	// URL is the server's base URL, http://127.0.0.1:PORT.
	URL string

	cmd      *exec.Cmd
	out      *syncBuffer
	done     chan struct{}
	stopOnce sync.Once
}

// Binary returns the path of the prometheus binary, or "" if there is none.
func Binary() string {
	if p := os.Getenv(BinaryEnv); p != "" {
		return p
	}
	if p, err := exec.LookPath("prometheus"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/bin/prometheus"); err == nil {
		return "/usr/bin/prometheus"
	}
	return ""
}

// Start starts Prometheus scraping targets (host:port each) at interval
// under job "tidegpu", waits until it is ready (GET /-/ready answers 200)
// and stops it when the test ends. It skips the test if the binary is
// missing.
func Start(t testing.TB, targets []string, interval time.Duration) *Server {
	t.Helper()
	bin := Binary()
	if bin == "" {
		t.Skip("prometheus binary not found: install the Debian package `prometheus` (apt-get install prometheus) or set " + BinaryEnv)
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfg, []byte(Config(targets, interval)), 0o600); err != nil {
		t.Fatal(err)
	}
	var lastErr error
	for range 3 { // a free port can be taken between the look and the bind
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		s := &Server{URL: "http://127.0.0.1:" + port, out: &syncBuffer{}, done: make(chan struct{})}
		s.cmd = exec.Command(bin,
			"--config.file="+cfg,
			"--storage.tsdb.path="+filepath.Join(dir, "data-"+port),
			"--storage.tsdb.retention.time=1h",
			"--web.listen-address=127.0.0.1:"+port,
			"--log.level=warn",
		)
		s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
		s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := s.cmd.Start(); err != nil {
			t.Fatalf("starting %s: %v", bin, err)
		}
		go func() { _ = s.cmd.Wait(); close(s.done) }()
		t.Cleanup(s.Stop)
		if lastErr = s.waitReady(30 * time.Second); lastErr == nil {
			return s
		}
		s.Stop()
	}
	t.Fatalf("prometheus did not become ready: %v", lastErr)
	return nil
}

// Config returns the Prometheus configuration Start uses: one job,
// "tidegpu", scraping targets at interval.
func Config(targets []string, interval time.Duration) string {
	iv := fmt.Sprintf("%dms", max(interval.Milliseconds(), 100))
	quoted := make([]string, len(targets))
	for i, t := range targets {
		quoted[i] = fmt.Sprintf("'%s'", t)
	}
	return fmt.Sprintf(`global:
  scrape_interval: %[1]s
  scrape_timeout: %[1]s
  evaluation_interval: %[1]s
scrape_configs:
  - job_name: tidegpu
    static_configs:
      - targets: [%[2]s]
`, iv, strings.Join(quoted, ", "))
}

func (s *Server) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: time.Second}
	for {
		select {
		case <-s.done:
			return fmt.Errorf("prometheus exited: %s", s.out.String())
		default:
		}
		resp, err := client.Get(s.URL + "/-/ready")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("/-/ready: %s", resp.Status)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%v; output: %s", err, s.out.String())
		}
		select {
		case <-s.done:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Stop kills the server and waits for it to exit. It is idempotent.
func (s *Server) Stop() {
	s.stopOnce.Do(func() {
		if s.cmd.Process != nil {
			_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		}
		<-s.done
	})
}

// Output returns what the server has logged.
func (s *Server) Output() string { return s.out.String() }

// WaitFor polls the instant query q until it returns at least n samples,
// or fails the test after timeout.
func (s *Server) WaitFor(t testing.TB, q string, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got, err := s.Count(q)
		if err == nil && got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus query %q: %d samples (err %v) after %v, want >= %d; output: %s", q, got, err, timeout, n, s.Output())
		}
		time.Sleep(100 * time.Millisecond) // polling a condition, bounded by the deadline
	}
}

// Count runs the instant query q and returns the number of samples.
func (s *Server) Count(q string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/api/v1/query?query="+url.QueryEscape(q), nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Data   struct {
			Result []json.RawMessage `json:"result"`
		} `json:"data"`
		Error string `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return 0, err
	}
	if body.Status != "success" {
		return 0, fmt.Errorf("query %q: %s", q, body.Error)
	}
	return len(body.Data.Result), nil
}

func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	_, port, err := net.SplitHostPort(ln.Addr().String())
	return port, err
}

// syncBuffer is a bytes.Buffer safe for the process's writes and our reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.b.Len() > 64<<10 {
		return len(p), nil // enough to diagnose
	}
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
