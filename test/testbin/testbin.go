// Package testbin builds the tidegpu binary once for tests that run it as a
// real process, and offers small helpers for such tests.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// BinaryEnv names a tidegpu binary built beforehand from this tree. `make
// test` builds one and sets it, so the packages that run the binary share
// one build instead of linking it once each while the other packages' tests
// run beside them.
const BinaryEnv = "TIDEGPU_TEST_BINARY"

// Build returns $TIDEGPU_TEST_BINARY if set, or compiles ./cmd/tidegpu into
// a temporary directory; it returns the binary's path and a function that
// removes what it built.
func Build() (string, func(), error) {
	if bin := os.Getenv(BinaryEnv); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			return "", nil, fmt.Errorf("%s: %w", BinaryEnv, err)
		}
		return bin, func() {}, nil
	}
	dir, err := os.MkdirTemp("", "tidegpu-test-bin")
	if err != nil {
		return "", nil, err
	}
	bin := filepath.Join(dir, "tidegpu")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/tidegpu")
	cmd.Dir = RepoRoot()
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("building tidegpu: %w", err)
	}
	return bin, func() { os.RemoveAll(dir) }, nil
}

// RepoRoot is the module's root directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// SyncBuffer collects a process's output safely.
type SyncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

// Write implements io.Writer.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Alive reports whether pid runs and is not a zombie.
func Alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// PIDsWithEnv lists live processes whose environment holds the exact
// NAME=VALUE entry kv.
func PIDsWithEnv(kv string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil {
			continue
		}
		for _, v := range strings.Split(string(b), "\x00") {
			if v == kv && Alive(pid) {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}

// Eventually polls cond every 20 ms until it holds or timeout passes, and
// reports how long it took.
func Eventually(timeout time.Duration, cond func() bool) (time.Duration, bool) {
	start := time.Now()
	for {
		if cond() {
			return time.Since(start), true
		}
		if time.Since(start) > timeout {
			return time.Since(start), false
		}
		time.Sleep(20 * time.Millisecond) // the polling interval of a condition
	}
}

// EnvtestAssets returns KUBEBUILDER_ASSETS, building the API server and etcd
// with hack/envtest.sh when it is not set (cached after the first time).
func EnvtestAssets() (string, error) {
	if d := os.Getenv("KUBEBUILDER_ASSETS"); d != "" {
		return d, nil
	}
	cmd := exec.Command("bash", filepath.Join(RepoRoot(), "hack", "envtest.sh"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("hack/envtest.sh: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// StartAPIServer starts a real kube-apiserver and etcd from assets (see
// EnvtestAssets) with the repository's generated CRDs installed, and says
// how long it took; stop it with env.Stop.
func StartAPIServer(assets string) (*envtest.Environment, *rest.Config, time.Duration, error) {
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     []string{filepath.Join(RepoRoot(), "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
	}
	start := time.Now()
	cfg, err := env.Start()
	if err != nil {
		return nil, nil, 0, fmt.Errorf("starting envtest: %w", err)
	}
	return env, cfg, time.Since(start), nil
}
