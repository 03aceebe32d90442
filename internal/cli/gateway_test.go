package cli_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidegpu/tidegpu/internal/cli"
)

func TestGatewayCommandFlagValidation(t *testing.T) {
	// Not "in a pod": without --backend the command would follow the cluster.
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("TIDEGPU_ADMIN_TOKEN", "") // --report-usage-to off loopback needs one
	const ok = "http://127.0.0.1:11434"
	tests := []struct {
		args []string
		want []string // substrings of the error
	}{
		{nil, []string{"--backend"}},
		{[]string{"--backend", ""}, []string{"--backend", `""`}},
		{[]string{"--backend", "https://127.0.0.1:443"}, []string{"--backend", "https://127.0.0.1:443", "http"}},
		{[]string{"--backend", "127.0.0.1:11434"}, []string{"--backend", "127.0.0.1:11434"}},
		{[]string{"--backend", "localhost"}, []string{"--backend", "localhost"}},
		{[]string{"--backend", "http://127.0.0.1"}, []string{"--backend", "http://127.0.0.1", "port"}},
		{[]string{"--backend", "http://:11434"}, []string{"--backend", "http://:11434", "host"}},
		{[]string{"--backend", "http://127.0.0.1:0"}, []string{"--backend", "port"}},
		{[]string{"--backend", "http://127.0.0.1:99999"}, []string{"--backend", "99999"}},
		{[]string{"--backend", "http://127.0.0.1:11434/api"}, []string{"--backend", "http://127.0.0.1:11434/api", "path"}},
		{[]string{"--backend", "http://127.0.0.1:11434?x=1"}, []string{"--backend", "query"}},
		{[]string{"--backend", "http://u:p@127.0.0.1:11434"}, []string{"--backend", "user"}},
		{[]string{"--backend", "http://%zz:1"}, []string{"--backend", "%zz"}},
		{[]string{"--backend", ok, "--backend", "http://127.0.0.1:11434/"}, []string{"--backend", "twice"}},
		{[]string{"--backend", ok, "--backend", "ftp://127.0.0.1:21"}, []string{"--backend", "ftp://127.0.0.1:21"}},
		{[]string{"--backend", ok, "--policy", "random"}, []string{"--policy", "random"}},
		{[]string{"--backend", ok, "--addr", "nonsense"}, []string{"--addr", "nonsense"}},
		{[]string{"--backend", ok, "--addr", "127.0.0.1:http"}, []string{"--addr"}},
		{[]string{"--backend", ok, "--admin-addr", "nonsense"}, []string{"--admin-addr", "nonsense"}},
		{[]string{"--backend", ok, "--log-level", "loud"}, []string{"--log-level"}},
		{[]string{"--backend", ok, "--metrics-family", "ollama"}, []string{"--metrics-family", "ollama", "auto, vllm, sglang, tgi, llamacpp or none"}},
		{[]string{"--backend", ok, "extra"}, []string{"extra"}},
		{[]string{"--backend", ok, "--max-body-size", "huge"}, []string{"--max-body-size", "8Mi"}},
		{[]string{"--backend", ok, "--cors-allowed-origin", "app.example"}, []string{"--cors", "app.example", "origin"}},
		{[]string{"--backend", ok, "--report-usage-to", "operator:9090"}, []string{"--report-usage-to", "http://host:port"}},
		{[]string{"--backend", ok, "--report-usage-to", "http://10.0.0.5:9090"}, []string{"--report-usage-to", "TIDEGPU_ADMIN_TOKEN"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			cmd := cli.NewGatewayCommand()
			cmd.SetArgs(tt.args)
			cmd.SetOut(io.Discard)
			cmd.SetErr(io.Discard)
			err := cmd.Execute()
			if err == nil {
				t.Fatalf("no error, want one naming %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// gwLines collects the lines written to the command's stderr.
type gwLines struct {
	mu    sync.Mutex
	buf   string
	lines chan string
}

func (w *gwLines) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf += string(p)
	for {
		line, rest, ok := strings.Cut(w.buf, "\n")
		if !ok {
			return len(p), nil
		}
		w.buf = rest
		select {
		case w.lines <- line:
		default:
		}
	}
}

// startGateway runs `tidegpu gateway args...` on free loopback ports until
// the returned cancel is called; it returns the gateway's and the admin
// server's base URLs and the command's exit channel.
func startGateway(t *testing.T, args ...string) (gwURL, adminURL string, cancel context.CancelFunc, done <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cmd := cli.NewGatewayCommand()
	cmd.SetArgs(append([]string{"--addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"}, args...))
	stderr := &gwLines{lines: make(chan string, 20)}
	cmd.SetErr(stderr)
	cmd.SetOut(io.Discard)
	exit := make(chan error, 1)
	go func() { exit <- cmd.ExecuteContext(ctx) }()
	timeout := time.After(10 * time.Second)
	for gwURL == "" || adminURL == "" {
		select {
		case line := <-stderr.lines:
			if a, ok := strings.CutPrefix(line, "tidegpu gateway listening on "); ok {
				gwURL = "http://" + a
			}
			if a, ok := strings.CutPrefix(line, "tidegpu gateway admin (/metrics, /healthz) on "); ok {
				adminURL = "http://" + a
			}
		case err := <-exit:
			t.Fatalf("gateway exited: %v", err)
		case <-timeout:
			t.Fatal("gateway did not start")
		}
	}
	return gwURL, adminURL, cancel, exit
}

func gwGet(t *testing.T, url string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func TestGatewayCommandProxiesAndStops(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"path":"`+r.URL.Path+`"}`)
	}))
	defer backend.Close()

	gwURL, adminURL, stop, done := startGateway(t, "--backend", backend.URL, "--policy", "round-robin")
	if !strings.HasPrefix(gwURL, "http://127.0.0.1:") || !strings.HasPrefix(adminURL, "http://127.0.0.1:") {
		t.Errorf("listening on %s and %s, want 127.0.0.1", gwURL, adminURL)
	}

	resp, body := gwGet(t, gwURL+"/api/tags")
	if resp.StatusCode != http.StatusOK || body != `{"path":"/api/tags"}` {
		t.Fatalf("GET /api/tags = %d %q", resp.StatusCode, body)
	}
	if got := resp.Header.Get("X-Tidegpu-Backend"); got != "static-0" {
		t.Errorf("X-Tidegpu-Backend = %q, want static-0", got)
	}
	resp, err := http.Post(gwURL+"/ollama-chat", "application/json", strings.NewReader(`{"model":"m"}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(b) != `{"path":"/api/chat"}` {
		t.Fatalf("POST /ollama-chat = %d %q", resp.StatusCode, b)
	}

	resp, body = gwGet(t, adminURL+"/healthz")
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz = %d %q", resp.StatusCode, body)
	}
	resp, body = gwGet(t, adminURL+"/metrics")
	if resp.StatusCode != http.StatusOK ||
		!strings.Contains(body, `tidegpu_gateway_requests_total{backend="static-0",code="200",pool="static"} 2`) ||
		!strings.Contains(body, "go_goroutines") {
		t.Errorf("/metrics = %d, lacks the gateway's request count or Go metrics:\n%s", resp.StatusCode, body)
	}

	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("gateway exited with %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("gateway did not stop")
	}
	if _, err := http.Get(gwURL + "/api/tags"); err == nil {
		t.Error("gateway still answers after stopping")
	}
}

func TestGatewayMetricsFlag(t *testing.T) {
	cases := []struct {
		value   string
		wantErr string
	}{
		{"scrape", ""},
		{"none", ""},
		{"prometheus=http://127.0.0.1:9090", ""},
		{"prometheus=localhost:9090", "prometheus=http://host:port"},
		{"graphite", "want scrape, prometheus=URL or none"},
	}
	for _, tc := range cases {
		cmd := cli.NewGatewayCommand()
		cmd.SetArgs([]string{"--backend", "http://127.0.0.1:1", "--metrics", tc.value, "--addr", "127.0.0.1:0", "--admin-addr", ""})
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // a valid command starts and stops at once
		err := cmd.ExecuteContext(ctx)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("--metrics %s: %v", tc.value, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("--metrics %s: error %v, want one mentioning %q", tc.value, err, tc.wantErr)
		}
	}
	for _, tc := range []struct{ metrics, dcgm, wantErr string }{
		{"scrape", "http://{{.IP}}:9400/metrics", ""},
		{"prometheus=http://127.0.0.1:9090", "http://dcgm.monitoring:9400/metrics", ""},
		{"none", "http://{{.IP}}:9400/metrics", "--dcgm-url needs backend metrics"},
		{"scrape", "http://{{.Node}}:9400/metrics", "--dcgm-url"},
		{"scrape", "{{.IP}}:9400", "want an http(s) URL"},
	} {
		cmd := cli.NewGatewayCommand()
		cmd.SetArgs([]string{"--backend", "http://127.0.0.1:1", "--metrics", tc.metrics, "--dcgm-url", tc.dcgm, "--addr", "127.0.0.1:0", "--admin-addr", ""})
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		err := cmd.ExecuteContext(ctx)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("--dcgm-url %s: %v", tc.dcgm, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("--metrics %s --dcgm-url %s: error %v, want one mentioning %q", tc.metrics, tc.dcgm, err, tc.wantErr)
		}
	}
	for _, fam := range []string{"auto", "vllm", "sglang", "tgi", "llamacpp", "none", "SGLang"} {
		for _, m := range []string{"scrape", "prometheus=http://127.0.0.1:9090"} {
			cmd := cli.NewGatewayCommand()
			cmd.SetArgs([]string{"--backend", "http://127.0.0.1:1", "--metrics", m, "--metrics-family", fam, "--addr", "127.0.0.1:0", "--admin-addr", ""})
			cmd.SetOut(io.Discard)
			cmd.SetErr(io.Discard)
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if err := cmd.ExecuteContext(ctx); err != nil {
				t.Errorf("--metrics %s --metrics-family %s: %v", m, fam, err)
			}
		}
	}
}

// The trial's 9 MB base64 image: refused 413 (in the OpenAI shape on /v1,
// naming the flag) by default, taken with --max-body-size 16Mi; with
// --addr localhost the gateway answers on [::1] too, where there is one.
func TestGatewayBodyLimitFlagAndLocalhost(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"bytes":`+strconv.FormatInt(n, 10)+`}`)
	}))
	defer backend.Close()
	image := `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,` +
		strings.Repeat("QUJD", 9_000_000/4) + `"}}]}]}`
	post := func(base string) (int, string) {
		resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(image))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	def, _, stopDef, _ := startGateway(t, "--backend", backend.URL)
	defer stopDef()
	if code, body := post(def); code != http.StatusRequestEntityTooLarge || !strings.Contains(body, `"code":"request_too_large"`) ||
		!strings.Contains(body, "--max-body-size") {
		t.Fatalf("default limit: %d %s", code, body)
	}
	big, _, stopBig, _ := startGateway(t, "--backend", backend.URL, "--max-body-size", "16Mi", "--addr", "localhost:0")
	defer stopBig()
	if code, body := post(big); code != http.StatusOK || body != `{"bytes":`+strconv.Itoa(len(image))+`}` {
		t.Fatalf("--max-body-size 16Mi: %d %.200s", code, body)
	}
	u, _ := url.Parse(big)
	if resp, body := gwGet(t, "http://127.0.0.1:"+u.Port()+"/v1/models"); resp.StatusCode != http.StatusOK {
		t.Fatalf("GET on 127.0.0.1: %d %s", resp.StatusCode, body)
	}
	ln, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback here (%v): [::1] not checked", err)
	}
	ln.Close()
	resp, body := gwGet(t, "http://[::1]:"+u.Port()+"/v1/models")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET on [::1]: %d %s", resp.StatusCode, body)
	}
}
