package testbin

import (
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Proc is a process a test runs; it is stopped (SIGTERM) when the test
// ends, and its output is logged if the test failed or TIDEGPU_TEST_VERBOSE
// is set.
type Proc struct {
	t      *testing.T
	Cmd    *exec.Cmd
	Out    *SyncBuffer
	exited chan struct{}
	// ExitErr is what Wait returned, once Exited is closed.
	ExitErr error
}

// Start runs bin with args.
func Start(t *testing.T, bin string, args ...string) *Proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	out := &SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &Proc{t: t, Cmd: cmd, Out: out, exited: make(chan struct{})}
	go func() {
		p.ExitErr = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.Stop(syscall.SIGTERM)
		if t.Failed() || os.Getenv("TIDEGPU_TEST_VERBOSE") != "" {
			t.Logf("%s output:\n%s", args[0], out.String())
		}
	})
	return p
}

// Stop signals the process and waits for it to exit, killing it after 30 s.
func (p *Proc) Stop(sig syscall.Signal) {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.Cmd.Process.Signal(sig)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		_ = p.Cmd.Process.Kill()
		<-p.exited
		p.t.Errorf("%s did not exit within 30s of %v", p.Cmd.Path, sig)
	}
}

// Running reports whether the process has not exited.
func (p *Proc) Running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// FreeAddr returns a loopback address nothing listens on right now.
func FreeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// LostAddr reports whether p, started on addresses FreeAddr handed out,
// exited because one of them was taken before it could listen: a port
// FreeAddr saw free can become an outgoing connection's source port in the
// meantime. Its caller then starts it again on fresh addresses. It waits,
// up to timeout, until p accepts connections on addr or exits.
func LostAddr(p *Proc, addr string, timeout time.Duration) bool {
	return AddrLost(p.Running, p.Out.String, addr, timeout)
}

// AddrLost is LostAddr for a process started otherwise: running reports
// whether it still runs, out returns what it has printed.
func AddrLost(running func() bool, out func() string, addr string, timeout time.Duration) bool {
	Eventually(timeout, func() bool {
		if !running() {
			return true
		}
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return !running() && strings.Contains(out(), "address already in use")
}
