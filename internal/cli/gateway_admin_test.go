package cli_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidegpu/tidegpu/internal/cli"
)

// With TIDEGPU_ADMIN_TOKEN set, the gateway's admin listener wants the
// token on everything but /healthz.
func TestGatewayAdminRequiresTheToken(t *testing.T) {
	t.Setenv("TIDEGPU_ADMIN_TOKEN", "s3cret")
	_, adminURL, stop, done := startGateway(t, "--backend", "http://127.0.0.1:1")
	for _, c := range []struct {
		path, auth string
		code       int
	}{
		{"/healthz", "", http.StatusOK},
		{"/metrics", "", http.StatusUnauthorized},
		{"/api/v1/backends", "", http.StatusUnauthorized},
		{"/metrics", "Bearer wrong", http.StatusUnauthorized},
		{"/metrics", "Bearer s3cret", http.StatusOK},
		{"/api/v1/backends", "Bearer s3cret", http.StatusOK},
	} {
		req, _ := http.NewRequest("GET", adminURL+c.path, nil)
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.code {
			t.Errorf("GET %s with %q = %d, want %d", c.path, c.auth, resp.StatusCode, c.code)
		}
	}
	stop()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("gateway did not stop")
	}
}

// A public --admin-addr without a token is refused before anything listens,
// and the message names the fixes.
func TestGatewayRefusesAPublicAdminWithoutAToken(t *testing.T) {
	t.Setenv("TIDEGPU_ADMIN_TOKEN", "")
	cmd := cli.NewGatewayCommand()
	cmd.SetArgs([]string{"--backend", "http://127.0.0.1:1", "--addr", "127.0.0.1:0", "--admin-addr", ":0"})
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	err := cmd.Execute()
	if err == nil {
		t.Fatal("the gateway started with --admin-addr :0 and no token")
	}
	for _, want := range []string{"--admin-addr :0", "TIDEGPU_ADMIN_TOKEN", "--insecure-admin"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not name %s: %v", want, err)
		}
	}
}
