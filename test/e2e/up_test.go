package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	ollama "github.com/ollama/ollama/api"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// The seed's demo: `tidegpu up` with its default pool answers the curl of
// the issue with an Ollama chat answer, and both official clients work
// through the gateway, streaming and not.
func TestUpServesOllamaAndOpenAIClients(t *testing.T) {
	u := startUp(t, "")
	took := u.waitReady("default", 2, 30*time.Second)
	t.Logf("default pool 2/2 ready %s after the first poll", took)

	code, body := postJSON(t, u.gateway+"/ollama-chat", `{"model":"qwen2:0.5b","messages":[{"role":"user","content":"写一首诗"}],"stream":false}`)
	if code != http.StatusOK {
		t.Fatalf("POST /ollama-chat: %d %s", code, body)
	}
	var chat ollama.ChatResponse
	if err := json.Unmarshal([]byte(body), &chat); err != nil {
		t.Fatalf("answer is not an Ollama chat response: %v: %s", err, body)
	}
	if !chat.Done || chat.Message.Role != "assistant" || chat.Message.Content == "" || chat.EvalCount == 0 || chat.PromptEvalCount == 0 {
		t.Fatalf("incomplete Ollama chat answer: %+v", chat)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	base, _ := url.Parse(u.gateway)
	oc := ollama.NewClient(base, http.DefaultClient)
	for _, stream := range []bool{false, true} {
		var chunks int
		var last ollama.ChatResponse
		err := oc.Chat(ctx, &ollama.ChatRequest{Model: "qwen2:0.5b", Stream: &stream,
			Messages: []ollama.Message{{Role: "user", Content: "写一首诗"}}}, func(r ollama.ChatResponse) error {
			chunks++
			last = r
			return nil
		})
		if err != nil {
			t.Fatalf("ollama client (stream=%t): %v", stream, err)
		}
		if !last.Done || (stream && chunks < 2) || (!stream && chunks != 1) {
			t.Fatalf("ollama client (stream=%t): %d chunks, last %+v", stream, chunks, last)
		}
	}
	// The gateway balances on the simulators' own metrics (scraped).
	eventually(t, 10*time.Second, "BalancingSignals=True from the backends' metrics", func() bool {
		p, ok := u.pool("default")
		if !ok {
			return false
		}
		for _, c := range p.Status.Conditions {
			if c.Type == "BalancingSignals" && c.Status == "True" && strings.Contains(c.Message, "scrape") {
				return true
			}
		}
		return false
	})
	tags, err := oc.List(ctx)
	if err != nil || len(tags.Models) == 0 {
		t.Fatalf("ollama client List: %v %+v", err, tags)
	}

	client := openai.NewClient(option.WithBaseURL(u.gateway+"/v1/"), option.WithAPIKey("unused"))
	resp, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:    "qwen2:0.5b",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("写一首诗")},
	})
	if err != nil {
		t.Fatalf("openai client: %v", err)
	}
	if len(resp.Choices) == 0 || resp.Choices[0].Message.Content == "" || resp.Usage.CompletionTokens == 0 {
		t.Fatalf("openai answer incomplete: %+v", resp)
	}
	st := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model:         "qwen2:0.5b",
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("写一首诗")},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	var acc openai.ChatCompletionAccumulator
	n := 0
	for st.Next() {
		acc.AddChunk(st.Current())
		n++
	}
	if err := st.Err(); err != nil {
		t.Fatalf("openai stream: %v", err)
	}
	if n < 2 || len(acc.Choices) == 0 || acc.Choices[0].Message.Content == "" || acc.Usage.TotalTokens == 0 {
		t.Fatalf("openai stream incomplete: %d chunks, %+v", n, acc.ChatCompletion)
	}
}

// kill -9 of an instance under load: no request that had not started
// streaming fails, the pool is back to 2 Ready within 5 s, the replacement
// takes traffic and the loss is recorded.
func TestKill9UnderLoad(t *testing.T) {
	u := startUp(t, "")
	u.waitReady("default", 2, 30*time.Second)
	before := u.readyIDs("default")
	pids := u.statePIDs()
	victim := before[0]

	l := startLoad(u.gateway, 16)
	eventually(t, 10*time.Second, "load to flow", func() bool { return l.ok.Load() > 50 })
	if err := syscall.Kill(pids[victim], syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 %d: %v", pids[victim], err)
	}
	killed := time.Now()
	var replacement string
	eventually(t, 5*time.Second, "the pool to be back to 2 Ready without the victim", func() bool {
		ids := u.readyIDs("default")
		if len(ids) != 2 || slices.Contains(ids, victim) {
			return false
		}
		for _, id := range ids {
			if !slices.Contains(before, id) {
				replacement = id
			}
		}
		return replacement != ""
	})
	healed := time.Since(killed)
	eventually(t, 10*time.Second, "the replacement to take traffic", func() bool { return l.backendCount(replacement) > 10 })
	l.finish()
	l.report(t)
	t.Logf("kill -9 of %s: back to 2 Ready with %s after %s", victim, replacement, healed)
	if n := l.failedBefore.Load(); n != 0 {
		t.Errorf("%d requests failed before their answer started", n)
	}
	if l.ok.Load() < 50 {
		t.Errorf("only %d requests completed: the load did not run", l.ok.Load())
	}
	if !u.hasEvent("InstanceLost", victim) {
		t.Errorf("no InstanceLost event for %s: %+v", victim, u.events())
	}
	if !u.hasEvent("Ready", replacement) {
		t.Errorf("no Ready event for the replacement %s", replacement)
	}
}

// A reclaim with a 10 s notice under load: zero failed requests, streams in
// progress on the reclaimed instance included; the replacement is launched
// at once and the reclaimed instance is gone.
func TestReclaimWithNoticeUnderLoad(t *testing.T) {
	u := startUp(t, "")
	u.waitReady("default", 2, 30*time.Second)
	before := u.readyIDs("default")
	victim := before[0]
	pid := u.statePIDs()[victim]

	l := startLoad(u.gateway, 16)
	eventually(t, 10*time.Second, "load to flow", func() bool { return l.ok.Load() > 50 && l.backendCount(victim) > 5 })
	code, body := postJSON(t, u.admin+"/api/v1/pools/default/instances/"+victim+"/reclaim", `{"noticeSeconds": 10}`)
	if code != http.StatusAccepted {
		t.Fatalf("reclaim: %d %s", code, body)
	}
	noticed := time.Now()
	took := eventually(t, 5*time.Second, "a replacement Ready beside the survivor", func() bool {
		ids := u.readyIDs("default")
		return len(ids) == 2 && !slices.Contains(ids, victim)
	})
	eventually(t, 15*time.Second, "the reclaimed instance's process to be gone", func() bool { return !alive(pid) })
	gone := time.Since(noticed)
	// Keep the load a little longer on the new set.
	n := l.ok.Load()
	eventually(t, 10*time.Second, "more traffic after the reclaim", func() bool { return l.ok.Load() > n+50 })
	l.finish()
	l.report(t)
	t.Logf("reclaim of %s with 10s notice: replacement ready after %s, victim gone after %s", victim, took, gone)
	if f, b := l.failedBefore.Load(), l.brokenStreams.Load(); f != 0 || b != 0 {
		t.Errorf("%d failed requests and %d cut streams; want none with a notice", f, b)
	}
	if !u.hasEvent("ReclaimNotice", victim) {
		t.Errorf("no ReclaimNotice event for %s", victim)
	}
}

// Bad input is refused at start with a message naming the field; nothing
// is started.
func TestBadInputRefusedBeforeStart(t *testing.T) {
	pool := func(spec string) string {
		return "apiVersion: tidegpu.eja.dev/v1\nkind: TidePool\nmetadata:\n  name: chat\nspec:\n" + spec
	}
	cases := []struct {
		name, yaml, want string
	}{
		{"minimum above maximum", pool("  minimum: 3\n  maximum: 2\n"), "spec.minimum"},
		{"negative number", pool("  minimum: -1\n  maximum: 2\n"), "spec.minimum"},
		{"unknown field", pool("  minimum: 1\n  maximum: 2\n  minimun: 1\n"), "minimun"},
		{"wrong apiVersion", strings.Replace(pool("  minimum: 1\n  maximum: 2\n"), "/v1", "/v9", 1), "apiVersion"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			file := filepath.Join(dir, "pools.yaml")
			if err := os.WriteFile(file, []byte(tc.yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			state := filepath.Join(dir, "state")
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			out, err := exec.CommandContext(ctx, binary, "up", "-f", file, "--state-dir", state,
				"--gateway-addr", freeAddr(t), "--admin-addr", freeAddr(t)).CombinedOutput()
			if err == nil {
				t.Fatalf("tidegpu up accepted bad input:\n%s", out)
			}
			if !strings.Contains(string(out), tc.want) {
				t.Errorf("error does not name %q:\n%s", tc.want, out)
			}
			if _, err := os.Stat(state); !os.IsNotExist(err) {
				t.Errorf("state dir was created (something started): %v", err)
			}
		})
	}
}

// SIGTERM stops every instance process.
func TestSigtermStopsEveryInstance(t *testing.T) {
	u := startUp(t, "")
	u.waitReady("default", 2, 30*time.Second)
	pids := u.statePIDs()
	if len(pids) != 2 {
		t.Fatalf("state has %d instances, want 2", len(pids))
	}
	u.stop(syscall.SIGTERM)
	if u.ExitErr != nil {
		t.Errorf("tidegpu up exited with %v after SIGTERM", u.ExitErr)
	}
	for id, pid := range pids {
		if alive(pid) {
			t.Errorf("instance %s (pid %d) still runs after SIGTERM", id, pid)
		}
	}
	if left := u.statePIDs(); len(left) != 0 {
		t.Errorf("state still lists %v", left)
	}
}

// kill -9 of `tidegpu up`: the instances keep serving (like cloud instances
// when a controller dies); the next run adopts them, launches nothing twice
// and leaves no process unaccounted for; a pool dropped from the config has
// its orphans stopped.
func TestKill9OfUpThenRestartAdopts(t *testing.T) {
	state := t.TempDir()
	u := startUp(t, state)
	u.waitReady("default", 2, 30*time.Second)
	first := u.statePIDs()
	u.stop(syscall.SIGKILL)
	for id, pid := range first {
		if !alive(pid) {
			t.Fatalf("instance %s died with its controller; it should keep serving", id)
		}
	}

	u2 := startUp(t, state)
	u2.waitReady("default", 2, 30*time.Second)
	ids := u2.readyIDs("default")
	for id, pid := range first {
		if !slices.Contains(ids, id) {
			t.Errorf("instance %s (pid %d) of the previous run was not adopted; pool has %v", id, pid, ids)
		}
	}
	if !u2.hasEvent("Adopted", "") {
		t.Errorf("no Adopted event")
	}
	if code, body := postJSON(t, u2.gateway+"/ollama-chat", `{"model":"qwen2:0.5b","messages":[{"role":"user","content":"hi"}],"stream":false}`); code != 200 {
		t.Errorf("adopted pool does not serve: %d %s", code, body)
	}
	u2.stop(syscall.SIGKILL)

	// A run whose config no longer has the pool stops the orphans.
	dir := t.TempDir()
	file := filepath.Join(dir, "other.yaml")
	other := "apiVersion: tidegpu.eja.dev/v1\nkind: TidePool\nmetadata:\n  name: other\nspec:\n  minimum: 1\n  maximum: 1\n"
	if err := os.WriteFile(file, []byte(other), 0o644); err != nil {
		t.Fatal(err)
	}
	u3 := startUp(t, state, "-f", file)
	u3.waitReady("other", 1, 30*time.Second)
	for id, pid := range first {
		if alive(pid) {
			t.Errorf("orphan %s (pid %d) of a dropped pool still runs", id, pid)
		}
	}
	if !u3.hasEvent("Orphan", "") {
		t.Errorf("no Orphan event for the stopped instances")
	}
	u3.stop(syscall.SIGTERM)
	for id, pid := range readStatePIDs(t, state) {
		t.Errorf("state still lists %s (pid %d) after SIGTERM", id, pid)
	}
}

// An admin API open to the network without a token is refused before
// anything starts; with a token it starts.
func TestUpRefusesAnOpenAdminWithoutAToken(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "up", "--state-dir", state, "--gateway-addr", freeAddr(t), "--admin-addr", "0.0.0.0:0")
	cmd.Env = append(os.Environ(), "TIDEGPU_ADMIN_TOKEN=")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("tidegpu up listened on 0.0.0.0 without a token:\n%s", out)
	}
	for _, want := range []string{"--admin-addr", "TIDEGPU_ADMIN_TOKEN", "127.0.0.1"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the error does not say %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Errorf("state dir was created (something started): %v", err)
	}
}

// Every role with an admin listener (up, operator, gateway) refuses an
// address beyond loopback without a token at start, exits non-zero and says
// how to fix it; --insecure-admin lets the gateway start anyway.
func TestRolesRefuseAnOpenAdminWithoutAToken(t *testing.T) {
	for _, c := range []struct {
		role string
		args []string
	}{
		{"up", []string{"up", "--state-dir", filepath.Join(t.TempDir(), "state"), "--gateway-addr", "127.0.0.1:0", "--admin-addr", "0.0.0.0:9090"}},
		// The refusal comes before the cluster is looked for.
		{"operator", []string{"operator", "--kubeconfig", filepath.Join(t.TempDir(), "absent"), "--admin-addr", "0.0.0.0:9090"}},
		{"gateway", []string{"gateway", "--backend", "http://127.0.0.1:1", "--addr", "127.0.0.1:0", "--admin-addr", "0.0.0.0:9091"}},
	} {
		t.Run(c.role, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, binary, c.args...)
			cmd.Env = append(os.Environ(), "TIDEGPU_ADMIN_TOKEN=")
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() == 0 {
				t.Fatalf("tidegpu %s with a public admin address and no token: err %v, want a non-zero exit:\n%s", c.role, err, out)
			}
			for _, want := range []string{"--admin-addr 0.0.0.0:909", "TIDEGPU_ADMIN_TOKEN", "127.0.0.1", "--insecure-admin"} {
				if !strings.Contains(string(out), want) {
					t.Errorf("the error does not say %q:\n%s", want, out)
				}
			}
		})
	}
	t.Run("gateway --insecure-admin", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, binary, "gateway", "--backend", "http://127.0.0.1:1", "--addr", "127.0.0.1:0",
			"--admin-addr", "0.0.0.0:0", "--insecure-admin")
		cmd.Env = append(os.Environ(), "TIDEGPU_ADMIN_TOKEN=")
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
		started := make(chan bool, 1)
		go func() {
			sc := bufio.NewScanner(stderr)
			for sc.Scan() {
				if strings.Contains(sc.Text(), "admin (/metrics, /healthz) on") {
					started <- true
					break
				}
			}
			_, _ = io.Copy(io.Discard, stderr)
		}()
		select {
		case <-started:
		case <-ctx.Done():
			t.Fatal("the gateway did not start with --insecure-admin")
		}
	})
}
