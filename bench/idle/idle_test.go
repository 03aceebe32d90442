package idlebench

import (
	"bytes"
	"fmt"
	"github.com/tidegpu/tidegpu/bench/internal/peer"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	streamingbench "github.com/tidegpu/tidegpu/bench/streaming"
)

const (
	// longEnv=1 runs the measured variant: settle 40 s (the back-off
	// reaches its caps), then a 30 s window, 3 repetitions, and asserts
	// the headline (the gateway with 10 backends under 0.2 % of a core).
	longEnv = "TIDEGPU_BENCH_IDLE"
	repsEnv = "TIDEGPU_IDLE_REPS"
	// windowEnv sets the measurement window (a duration such as 120s):
	// one clock tick is 0.033 % of a core over 30 s, 0.008 % over 120 s.
	windowEnv = "TIDEGPU_IDLE_WINDOW"
	// A prebuilt tidegpu binary (peer.BinEnv, TIDEGPU_BIN; default: go
	// build ./cmd/tidegpu), e.g. an older one, measures what a change saves.
	// noAssertEnv=1 reports without asserting (for an older binary).
	noAssertEnv = "TIDEGPU_IDLE_NO_ASSERT"
)

// Headline bounds: idle CPU of the gateway with 10 backends, in percent of
// one core. The short variant's window is too short for the headline
// (one clock tick is 0.1 % of 10 s) and its back-off has not reached its
// caps: it only catches a gateway that reads its backends at full rate
// while idle (about 4 % before the back-off).
const (
	headlinePercent = 0.2
	shortPercent    = 2.0
)

func TestIdleCPU(t *testing.T) {
	long := os.Getenv(longEnv) == "1"
	settle, window, reps := 3*time.Second, 10*time.Second, 1
	if long {
		settle, window, reps = 40*time.Second, 30*time.Second, 3
	}
	if v := os.Getenv(repsEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 20 {
			t.Fatalf("%s=%q: want 1..20", repsEnv, v)
		}
		reps = n
	}
	window, err := envDuration(windowEnv, window)
	if err != nil || window <= 0 {
		t.Fatalf("%s: want a positive duration (%v)", windowEnv, err)
	}
	inproc := os.Getenv(inprocEnv) == "1"
	bin := os.Args[0]
	if !inproc {
		bin = peer.TidegpuBinary(t)
	}
	// child starts a simulator or a gateway: the tidegpu binary, or this
	// test binary in a child role.
	child := func(t *testing.T, logPath string, role string, args ...string) *peer.Proc {
		if inproc {
			return peer.StartEnv(t, logPath, []string{childEnv + "=" + strings.Join(append([]string{role}, args...), " ")}, bin)
		}
		return peer.Start(t, logPath, bin, append([]string{role}, args...)...)
	}
	tmp := t.TempDir()
	const nSims = 10
	var sims []string
	var simProcs []*peer.Proc
	for i := range nSims {
		addr := peer.FreeAddr(t)
		var pr *peer.Proc
		if inproc {
			pr = child(t, filepath.Join(tmp, fmt.Sprintf("sim%d.log", i)), "sim", addr)
		} else {
			pr = peer.Start(t, filepath.Join(tmp, fmt.Sprintf("sim%d.log", i)), bin, "sim", "--addr", addr,
				"--ttft", "5ms", "--token-time", "1ms", "--output-tokens", "3", "--instance-id", fmt.Sprintf("sim-%d", i))
		}
		peer.WaitHTTP(t, pr, "http://"+addr+"/healthz")
		sims = append(sims, addr)
		simProcs = append(simProcs, pr)
	}
	type target struct {
		name  string
		n     int // backends
		start func(t *testing.T, backends []string) (addr string, pr *peer.Proc)
	}
	gw := func(t *testing.T, backends []string) (string, *peer.Proc) {
		addr, admin := peer.FreeAddr(t), peer.FreeAddr(t)
		var pr *peer.Proc
		if inproc {
			pr = child(t, filepath.Join(t.TempDir(), "gateway.log"), "gateway", append([]string{addr, admin}, backends...)...)
		} else {
			args := []string{"gateway", "--addr", addr, "--admin-addr", admin, "--log-level", "warn"}
			for _, s := range backends {
				args = append(args, "--backend", "http://"+s)
			}
			pr = peer.Start(t, filepath.Join(t.TempDir(), "gateway.log"), bin, args...)
		}
		peer.WaitHTTP(t, pr, "http://"+admin+"/healthz")
		return addr, pr
	}
	var kinds []target
	kinds = append(kinds, target{name: "gateway", start: gw})
	if nginx := peer.LookBin("nginx", "/usr/sbin/nginx"); nginx != "" {
		kinds = append(kinds, target{name: "nginx", start: func(t *testing.T, backends []string) (string, *peer.Proc) {
			return peer.StartNginx(t, nginx, func(dir, addr string) string { return streamingbench.NginxConfig(dir, addr, backends) })
		}})
	} else {
		t.Log("nginx not found (Debian package nginx): skipped")
	}
	if haproxy := peer.LookBin("haproxy", "/usr/sbin/haproxy"); haproxy != "" {
		hap := func(checks bool) func(t *testing.T, backends []string) (string, *peer.Proc) {
			return func(t *testing.T, backends []string) (string, *peer.Proc) {
				addr, dir := peer.FreeAddr(t), t.TempDir()
				c := streamingbench.HAProxyConfig(addr, backends)
				if checks {
					c = WithChecks(c, time.Second) // as often as the gateway's base probe interval
				}
				cfg := filepath.Join(dir, "haproxy.cfg")
				if err := os.WriteFile(cfg, []byte(c), 0o600); err != nil {
					t.Fatal(err)
				}
				pr := peer.Start(t, filepath.Join(dir, "out.log"), haproxy, "-db", "-f", cfg)
				peer.WaitTCP(t, pr, addr)
				return addr, pr
			}
		}
		kinds = append(kinds, target{name: "haproxy", start: hap(false)}, target{name: "haproxy-check", start: hap(true)})
	} else {
		t.Log("haproxy not found (Debian package haproxy): skipped")
	}
	var targets []target
	for _, n := range []int{2, 10} {
		for _, k := range kinds {
			k.n = n
			targets = append(targets, k)
		}
	}

	if inproc {
		t.Logf("in-process roles (%s=1): this test binary as the gateway and the simulators", inprocEnv)
	}
	t.Logf("machine: %d CPUs, shared; load average at start %s", runtime.NumCPU(), peer.LoadAvg())
	t.Logf("%d simulators; every target started at once, warmed up with 4 requests, idle %v, then measured over the same %v window", nSims, settle, window)
	results := map[string][]float64{} // name/n → idle CPU % per repetition
	var simCPU []float64
	for rep := range reps {
		procs := make([]*peer.Proc, len(targets))
		for i, tg := range targets {
			addr, pr := tg.start(t, sims[:tg.n])
			for j := range 4 {
				if err := generate(addr, j); err != nil {
					t.Fatalf("%s with %d backends: warm-up request: %v", tg.name, tg.n, err)
				}
			}
			procs[i] = pr
		}
		time.Sleep(settle) // idleness itself is the condition: nothing to poll for
		c0 := make([]int64, len(procs))
		for i, pr := range procs {
			c0[i] = peer.CPUTicks(pr.PID)
		}
		var s0 int64
		for _, sp := range simProcs {
			s0 += peer.CPUTicks(sp.PID)
		}
		time.Sleep(window) // the measurement window
		for i, pr := range procs {
			key := fmt.Sprintf("%s/%d", targets[i].name, targets[i].n)
			v := CPUPercent(peer.CPUTicks(pr.PID)-c0[i], window)
			results[key] = append(results[key], v)
			t.Logf("rep %d: %-14s %2d backends: idle CPU %.3f %% of a core", rep+1, targets[i].name, targets[i].n, v)
		}
		var s1 int64
		for _, sp := range simProcs {
			s1 += peer.CPUTicks(sp.PID)
		}
		simCPU = append(simCPU, CPUPercent(s1-s0, window)/nSims)
		for _, pr := range procs {
			pr.Stop()
		}
	}
	t.Logf("load average at end %s", peer.LoadAvg())

	var b strings.Builder
	b.WriteString("\n| backends | target | idle CPU, % of a core (min–max, reps) |\n| ---: | --- | ---: |\n")
	for _, tg := range targets {
		fmt.Fprintf(&b, "| %d | %s | %s |\n", tg.n, tg.name, Span(results[fmt.Sprintf("%s/%d", tg.name, tg.n)], "%.3f"))
	}
	fmt.Fprintf(&b, "\neach simulator meanwhile (all targets reading it): %s %% of a core\n", Span(simCPU, "%.3f"))
	t.Log(b.String())

	if os.Getenv(noAssertEnv) == "1" {
		return
	}
	bound := shortPercent
	if long {
		bound = headlinePercent
	}
	for _, v := range results["gateway/10"] {
		if v >= bound {
			t.Errorf("gateway with 10 idle backends: %.3f %% of a core, want under %.1f %%", v, bound)
		}
	}
}

// generate sends one small generation to addr.
func generate(addr string, i int) error {
	body := fmt.Sprintf(`{"model":"qwen2:0.5b","stream":false,"messages":[{"role":"user","content":"warm up %d"}]}`, i)
	c := &http.Client{Timeout: 20 * time.Second}
	resp, err := c.Post("http://"+addr+"/api/chat", "application/json", strings.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %s: %s", resp.Status, bytes.TrimSpace(buf.Bytes()))
	}
	return nil
}
