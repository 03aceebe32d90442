// Package clitest tests the `tidegpu sim` command (internal/cli) end to end.
// It lives under internal/sim so that the simulator's owners can change
// both together.
package cli_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidegpu/tidegpu/internal/cli"
)

func TestSimCommandFlagValidation(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--ttft", "-1s"}, "--ttft"},
		{[]string{"--token-time", "-5ms"}, "--token-time"},
		{[]string{"--batch-slowdown", "-0.1"}, "--batch-slowdown"},
		{[]string{"--batch-slowdown", "NaN"}, "--batch-slowdown"},
		{[]string{"--max-batch", "0"}, "--max-batch"},
		{[]string{"--max-queue", "-1"}, "--max-queue"},
		{[]string{"--output-tokens", "0"}, "--output-tokens"},
		{[]string{"--slow-factor", "0"}, "--slow-factor"},
		{[]string{"--prefix-cache-tokens", "-1"}, "--prefix-cache-tokens"},
		{[]string{"--prefix-cache-tokens", "8"}, "--prefix-cache-tokens"},
		{[]string{"--prefix-block-tokens", "0"}, "--prefix-block-tokens"},
		{[]string{"--prefill-tokens-per-second", "-1"}, "--prefill-tokens-per-second"},
		{[]string{"--model", ""}, "--model"},
		{[]string{"--model", "a b"}, "--model"},
		{[]string{"--addr", "nonsense"}, "--addr"},
		{[]string{"--ttft", "soon"}, "ttft"},
		{[]string{"extra"}, "extra"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			cmd := cli.NewSimCommand()
			cmd.SetArgs(tt.args)
			cmd.SetOut(io.Discard)
			cmd.SetErr(io.Discard)
			err := cmd.Execute()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error = %v, want one naming %s", err, tt.want)
			}
		})
	}

	t.Run("TIDEGPU_PORT", func(t *testing.T) {
		t.Setenv("TIDEGPU_PORT", "http")
		cmd := cli.NewSimCommand()
		cmd.SetArgs(nil)
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "TIDEGPU_PORT") {
			t.Fatalf("error = %v, want one naming TIDEGPU_PORT", err)
		}
	})
}

// lineWriter sends each written line to lines.
type lineWriter struct {
	lines chan string
	buf   string
}

func (w *lineWriter) Write(p []byte) (int, error) {
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

// startSim runs `tidegpu sim args...` until the returned cancel is called and
// returns its base URL and its exit error channel.
func startSim(t *testing.T, args ...string) (string, context.CancelFunc, <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cmd := cli.NewSimCommand()
	cmd.SetArgs(args)
	stderr := &lineWriter{lines: make(chan string, 10)}
	cmd.SetErr(stderr)
	cmd.SetOut(io.Discard)
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	select {
	case line := <-stderr.lines:
		addr, ok := strings.CutPrefix(line, "tidegpu sim listening on ")
		if !ok {
			t.Fatalf("first stderr line %q", line)
		}
		return "http://" + addr, cancel, done
	case err := <-done:
		t.Fatalf("sim exited: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("sim did not start")
	}
	return "", nil, nil
}

func TestSimCommandServesAndShutsDownGracefully(t *testing.T) {
	t.Setenv("TIDEGPU_PORT", "0") // 127.0.0.1 on a free port
	t.Setenv("TIDEGPU_INSTANCE_ID", "gpu-7")
	url, stop, done := startSim(t, "--model", "tiny:1b", "--ttft", "1ms", "--token-time", "2ms", "--output-tokens", "40")
	if !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Errorf("listening on %s, want 127.0.0.1", url)
	}
	resp, err := http.Get(url + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Tidegpu-Instance") != "gpu-7" {
		t.Fatalf("healthz = %d, instance %q", resp.StatusCode, resp.Header.Get("X-Tidegpu-Instance"))
	}

	// A streamed request in flight when the signal comes still finishes.
	resp, err = http.Post(url+"/api/chat", "application/json",
		strings.NewReader(`{"model":"tiny:1b","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	if !sc.Scan() {
		t.Fatal("no first chunk")
	}
	stop()
	lines := 1
	last := ""
	for sc.Scan() {
		lines++
		last = sc.Text()
	}
	if lines != 41 || !strings.Contains(last, `"done":true`) {
		t.Errorf("got %d lines, last %q; want 40 tokens and a final chunk", lines, last)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("sim exited with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("sim did not shut down")
	}
}

func TestSimCommandEmbeddingDim(t *testing.T) {
	for _, bad := range []string{"0", "-1", "1000000"} {
		cmd := cli.NewSimCommand()
		cmd.SetArgs([]string{"--embedding-dim", bad})
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "--embedding-dim") {
			t.Errorf("--embedding-dim %s: error = %v, want one naming --embedding-dim", bad, err)
		}
	}

	url, stop, done := startSim(t, "--addr", "127.0.0.1:0", "--embedding-dim", "12")
	resp, err := http.Post(url+"/api/embed", "application/json", strings.NewReader(`{"model":"qwen2:0.5b","input":["a","b"]}`))
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		Embeddings [][]float32 `json:"embeddings"`
	}
	err = json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if err != nil || len(body.Embeddings) != 2 || len(body.Embeddings[0]) != 12 || len(body.Embeddings[1]) != 12 {
		t.Fatalf("embeddings = %v, %v; want two of 12 values", body.Embeddings, err)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("sim exited with %v", err)
	}
}
