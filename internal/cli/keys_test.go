package cli_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tidegpu/tidegpu/internal/cli"
	"github.com/tidegpu/tidegpu/internal/tenant"
)

func TestKeysHash(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{"sk-abc\n", tenant.Hash("sk-abc"), ""},
		{"sk-abc", tenant.Hash("sk-abc"), ""},
		{"sk-abc\r\nrest", tenant.Hash("sk-abc"), ""},
		{"", "", "no key on standard input"},
		{"  \n", "", "no key on standard input"},
	} {
		cmd := cli.NewKeysCommand()
		var out bytes.Buffer
		cmd.SetIn(strings.NewReader(tc.in))
		cmd.SetOut(&out)
		cmd.SetErr(&bytes.Buffer{})
		cmd.SetArgs([]string{"hash"})
		err := cmd.Execute()
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("%q: error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || strings.TrimSpace(out.String()) != tc.want {
			t.Fatalf("%q: %q %v, want %s", tc.in, out.String(), err, tc.want)
		}
	}
}

// `tidegpu gateway --keys-file`: no key is 401, a key is served, the key
// does not reach the backend, and a bad file stops the start naming the
// field.
func TestGatewayKeysFile(t *testing.T) {
	var sawKey atomic.Bool
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" || r.Header.Get("X-Api-Key") != "" {
			sawKey.Store(true)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	defer backend.Close()
	dir := t.TempDir()
	keysFile := filepath.Join(dir, "keys.yaml")
	if err := os.WriteFile(keysFile, []byte("keys:\n- {name: a, sha256: "+tenant.Hash("sk-a")+", tenant: team-a}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	gwURL, adminURL, stop, done := startGateway(t, "--backend", backend.URL, "--keys-file", keysFile)
	defer func() { stop(); <-done }()

	if resp, body := gwGet(t, gwURL+"/v1/models"); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "missing_api_key") {
		t.Fatalf("no key: %d %s", resp.StatusCode, body)
	}
	req, _ := http.NewRequest(http.MethodGet, gwURL+"/api/tags", nil)
	req.Header.Set("X-Api-Key", "sk-a")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || sawKey.Load() {
		t.Fatalf("with a key: %d, backend saw the key: %v", resp.StatusCode, sawKey.Load())
	}
	if _, body := gwGet(t, adminURL+"/metrics"); !strings.Contains(body, `tidegpu_gateway_tenant_requests_total{code="200",tenant="team-a"} 1`) {
		t.Errorf("/metrics lacks the tenant's request:\n%s", body)
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("keys:\n- {name: a, sha256: sk-a, tenant: team-a}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := cli.NewGatewayCommand()
	cmd.SetArgs([]string{"--backend", backend.URL, "--addr", "127.0.0.1:0", "--admin-addr", "", "--keys-file", bad})
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "keys[0] (a).sha256") || strings.Contains(err.Error(), "sk-a,") {
		t.Fatalf("bad keys file: %v", err)
	}
}
