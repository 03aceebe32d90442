// Package peer runs the proxies the benchmarks compare the gateway with
// (Debian's HAProxy), each as a process of its own on loopback, with a
// configuration generated in a temporary directory.
package peer

import (
	"bytes"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// HAProxyBinary is the haproxy on PATH or Debian's /usr/sbin/haproxy; ""
// when neither is installed (the benchmarks then leave its rows out).
func HAProxyBinary() string {
	if p, err := exec.LookPath("haproxy"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/haproxy"); err == nil {
		return "/usr/sbin/haproxy"
	}
	return ""
}

// StartHAProxy runs bin with the configuration config(listen) for a free
// loopback address, waits until it answers GET / with 200, and returns its
// base URL and a stop function (SIGKILL to its process group, then wait).
func StartHAProxy(t testing.TB, bin string, config func(listen string) string) (string, func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen := ln.Addr().String()
	ln.Close()
	cfg := filepath.Join(t.TempDir(), "haproxy.cfg")
	if err := os.WriteFile(cfg, []byte(config(listen)), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd := exec.Command(bin, "-f", cfg, "-db")
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting haproxy: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	stop := func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	base := "http://" + listen
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(base + "/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base, stop
			}
			err = errors.New(resp.Status)
		}
		select {
		case <-done:
			t.Fatalf("haproxy exited: %s", out.String())
		default:
		}
		if time.Now().After(deadline) {
			stop()
			t.Fatalf("haproxy not answering: %v; output: %s", err, out.String())
		}
		time.Sleep(20 * time.Millisecond) // bounded poll of a condition
	}
}
