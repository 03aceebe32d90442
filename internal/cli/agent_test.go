package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidegpu/tidegpu/internal/agent/metadatatest"
	"github.com/tidegpu/tidegpu/internal/cli"
)

func TestAgentCommandFlagValidation(t *testing.T) {
	t.Setenv("TIDEGPU_POOL", "")
	t.Setenv("TIDEGPU_INSTANCE_ID", "")
	ok := []string{"--controller", "http://127.0.0.1:9", "--pool", "p", "--instance-id", "i-1", "--cloud", "aws", "--metadata-endpoint", "http://127.0.0.1:9"}
	with := func(extra ...string) []string { return append(append([]string(nil), ok...), extra...) }
	tests := []struct {
		args []string
		want string
	}{
		{with("--cloud", "gcp"), "--cloud"},
		{[]string{"--pool", "p"}, "--controller"},
		{with("--controller", "127.0.0.1:9090"), "--controller"},
		{with("--controller", "http://user:pw@h:1"), "--controller"},
		{with("--pool", ""), "--pool"},
		{with("--pool", "a/b"), "--pool"},
		{with("--instance-id", "i 1"), "--instance-id"},
		{with("--metadata-endpoint", "169.254.169.254"), "--metadata-endpoint"},
		{with("--metadata-endpoint", "http://169.254.169.254/latest"), "--metadata-endpoint"},
		{with("--interval", "0s"), "--interval"},
		{with("--interval", "2h"), "--interval"},
		{with("--interval", "soon"), "interval"},
		{with("--rebalance", "cordon"), "--rebalance"},
		{with("--rebalance", ""), "--rebalance"},
		{with("--rebalance-deadline", "0s"), "--rebalance-deadline"},
		{with("--imds-token-ttl", "7h"), "--imds-token-ttl"},
		{with("--imds-token-ttl", "1500ms"), "--imds-token-ttl"},
		{with("--log-level", "loud"), "--log-level"},
		{with("--token-file", filepath.Join(t.TempDir(), "missing")), "--token-file"},
		{with("extra"), "extra"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			cmd := cli.NewAgentCommand()
			cmd.SetArgs(tt.args)
			cmd.SetOut(io.Discard)
			cmd.SetErr(io.Discard)
			err := cmd.Execute()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error = %v, want one naming %s", err, tt.want)
			}
		})
	}

	t.Run("empty token file", func(t *testing.T) {
		f := filepath.Join(t.TempDir(), "token")
		if err := os.WriteFile(f, []byte("\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := cli.NewAgentCommand()
		cmd.SetArgs(with("--token-file", f))
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "--token-file") {
			t.Fatalf("error = %v, want one naming --token-file", err)
		}
	})
}

// notices is a controller endpoint that records notice POSTs.
type notices struct {
	*httptest.Server
	mu    sync.Mutex
	posts []notice
}

type notice struct {
	Path, Authorization string
	InterruptAt         time.Time `json:"interruptAt"`
	Source              string    `json:"source"`
}

func newNotices(t *testing.T) *notices {
	n := &notices{}
	n.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p notice
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil || r.Method != http.MethodPost {
			http.Error(w, "bad notice", http.StatusBadRequest)
			return
		}
		p.Path, p.Authorization = r.URL.Path, r.Header.Get("Authorization")
		n.mu.Lock()
		n.posts = append(n.posts, p)
		n.mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(n.Close)
	return n
}

func (n *notices) list() []notice {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]notice(nil), n.posts...)
}

// runAgentCommand runs `tidegpu agent args...` until the test ends and
// returns its stderr.
func runAgentCommand(t *testing.T, args ...string) *lockedBuffer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := &lockedBuffer{}
	cmd := cli.NewAgentCommand()
	cmd.SetArgs(args)
	cmd.SetOut(out)
	cmd.SetErr(out)
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("tidegpu agent: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("tidegpu agent did not stop within 10s of its context")
		}
	})
	return out
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond) // polling interval of a condition
	}
}

// --cloud auto finds the AWS fake, reads the instance id from it, and the
// token file wins over TIDEGPU_ADMIN_TOKEN.
func TestAgentCommandAWS(t *testing.T) {
	t.Setenv("TIDEGPU_INSTANCE_ID", "")
	t.Setenv("TIDEGPU_POOL", "chat")
	t.Setenv("TIDEGPU_ADMIN_TOKEN", "from-env")
	imds := metadatatest.NewAWS(t, "i-0123456789abcdef0")
	ctl := newNotices(t)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("from-file-s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := runAgentCommand(t, "--controller", ctl.URL, "--metadata-endpoint", imds.URL, "--token-file", tokenFile, "--interval", "20ms")
	waitUntil(t, "a few polls", func() bool { return imds.CallCount(metadatatest.InstanceActionPath) >= 3 })
	if n := len(ctl.list()); n != 0 {
		t.Fatalf("%d notices posted before any was announced", n)
	}
	at := time.Now().Add(2 * time.Minute).UTC().Truncate(time.Second)
	imds.Schedule("terminate", at)
	waitUntil(t, "the notice at the controller", func() bool { return len(ctl.list()) > 0 })
	p := ctl.list()[0]
	if p.Path != "/api/v1/pools/chat/instances/i-0123456789abcdef0/notice" || p.Authorization != "Bearer from-file-s3cret" || !p.InterruptAt.Equal(at) || p.Source != "aws-imds" {
		t.Fatalf("notice = %+v", p)
	}
	// The controller records the notice before its answer reaches the
	// agent, so the acknowledgement is logged a moment later.
	waitUntil(t, "the acknowledgement in the logs", func() bool { return strings.Contains(logs.String(), "notice acknowledged") })
	if strings.Contains(logs.String(), "s3cret") {
		t.Errorf("the token is in the logs:\n%s", logs)
	}
	if !strings.Contains(logs.String(), "cloud=aws") {
		t.Errorf("logs do not show the detected cloud and the acknowledgement:\n%s", logs)
	}
}

func TestAgentCommandTencent(t *testing.T) {
	t.Setenv("TIDEGPU_INSTANCE_ID", "ins-fromenv")
	t.Setenv("TIDEGPU_ADMIN_TOKEN", "env-s3cret")
	md := metadatatest.NewTencent(t, "ins-frommetadata")
	ctl := newNotices(t)
	at := time.Now().Add(2 * time.Minute).UTC().Truncate(time.Second)
	md.Schedule(at)
	logs := runAgentCommand(t, "--cloud", "tencent", "--controller", ctl.URL, "--pool", "default", "--metadata-endpoint", md.URL, "--interval", "20ms")
	waitUntil(t, "the notice at the controller", func() bool { return len(ctl.list()) > 0 })
	p := ctl.list()[0]
	if p.Path != "/api/v1/pools/default/instances/ins-fromenv/notice" || p.Authorization != "Bearer env-s3cret" || !p.InterruptAt.Equal(at) || p.Source != "tencent-metadata" {
		t.Fatalf("notice = %+v", p)
	}
	if strings.Contains(logs.String(), "s3cret") {
		t.Errorf("the token is in the logs:\n%s", logs)
	}
}
