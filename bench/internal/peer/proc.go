package peer

import (
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Proc is a process a bench started (a peer proxy, a simulator, the
// tidegpu binary), in its own process group so that Stop ends its children
// too; its output goes to a log file that Fail prints.
type Proc struct {
	// PID is the process's id (its /proc entry gives its CPU and memory).
	PID  int
	done chan struct{}
	log  string
	once sync.Once
	cmd  *exec.Cmd
}

// Start runs bin with args, its output to logPath, and stops it (the whole
// process group) when the test ends.
func Start(t testing.TB, logPath, bin string, args ...string) *Proc {
	t.Helper()
	return StartEnv(t, logPath, nil, bin, args...)
}

// StartEnv is Start with env added to the process's environment.
func StartEnv(t testing.TB, logPath string, env []string, bin string, args ...string) *Proc {
	t.Helper()
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	p := &Proc{PID: cmd.Process.Pid, done: make(chan struct{}), log: logPath, cmd: cmd}
	go func() { _ = cmd.Wait(); f.Close(); close(p.done) }()
	t.Cleanup(p.Stop)
	return p
}

// Stop kills the process group and waits for the process; safe to call
// more than once.
func (p *Proc) Stop() {
	p.once.Do(func() {
		_ = syscall.Kill(-p.PID, syscall.SIGKILL)
		<-p.done
	})
}

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Fail ends the test with what went wrong and the process's output.
func (p *Proc) Fail(t testing.TB, what string) {
	t.Helper()
	out, _ := os.ReadFile(p.log)
	t.Fatalf("%s: %s; output:\n%s", p.cmd.Path, what, out)
}

// startTimeout bounds the waits for a process to listen or answer.
const startTimeout = 30 * time.Second

// WaitHTTP polls url until it answers 200, within 30 s, failing the test
// (with p's output) if p exits first.
func WaitHTTP(t testing.TB, p *Proc, url string) {
	t.Helper()
	deadline := time.Now().Add(startTimeout)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if p.Exited() {
			p.Fail(t, "exited")
		}
		if time.Now().After(deadline) {
			p.Fail(t, "not answering "+url)
		}
		time.Sleep(20 * time.Millisecond) // bounded poll of a condition
	}
}

// WaitTCP polls addr until it accepts, within 30 s, failing the test (with
// p's output) if p exits first.
func WaitTCP(t testing.TB, p *Proc, addr string) {
	t.Helper()
	deadline := time.Now().Add(startTimeout)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return
		}
		if p.Exited() {
			p.Fail(t, "exited")
		}
		if time.Now().After(deadline) {
			p.Fail(t, "not listening on "+addr)
		}
		time.Sleep(20 * time.Millisecond) // bounded poll of a condition
	}
}

// FreeAddr returns a loopback address that was free a moment ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// LookBin finds name on PATH, else at fallback (Debian puts nginx and
// haproxy in /usr/sbin, often not on a user's PATH); "" when neither.
func LookBin(name, fallback string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if _, err := os.Stat(fallback); err == nil {
		return fallback
	}
	return ""
}

// BinEnv names a prebuilt tidegpu binary for the benches to run.
const BinEnv = "TIDEGPU_BIN"

// TidegpuBinary returns $TIDEGPU_BIN, or builds ./cmd/tidegpu (from a bench
// package two levels below the module root) into the test's temp dir.
func TidegpuBinary(t testing.TB) string {
	t.Helper()
	if b := os.Getenv(BinEnv); b != "" {
		return b
	}
	out := filepath.Join(t.TempDir(), "tidegpu")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/tidegpu")
	cmd.Dir = filepath.Join("..", "..")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/tidegpu: %v\n%s", err, b)
	}
	return out
}

// StartNginx runs the nginx binary bin with the configuration config(dir,
// addr) for a free loopback address addr and a fresh directory dir (its
// prefix, for logs and temporary files), and waits until it listens.
func StartNginx(t testing.TB, bin string, config func(dir, addr string) string) (string, *Proc) {
	t.Helper()
	addr, dir := FreeAddr(t), t.TempDir()
	cfg := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(cfg, []byte(config(dir, addr)), 0o600); err != nil {
		t.Fatal(err)
	}
	pr := Start(t, filepath.Join(dir, "out.log"), bin, "-e", filepath.Join(dir, "error.log"), "-p", dir, "-c", cfg)
	WaitTCP(t, pr, addr)
	return addr, pr
}
