package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func parseTuning(t *testing.T, args ...string) (*tuningFlags, error) {
	t.Helper()
	tf := &tuningFlags{}
	f := pflag.NewFlagSet("x", pflag.ContinueOnError)
	tf.register(f)
	if err := f.Parse(args); err != nil {
		t.Fatal(err)
	}
	_, err := tf.tuning()
	return tf, err
}

func TestTuningFlags(t *testing.T) {
	tf, err := parseTuning(t)
	if err != nil {
		t.Fatal(err)
	}
	def, _ := tf.tuning()
	if def.MaxBodyBytes != 8<<20 || def.ReadHeaderTimeout != 10*time.Second || def.IdleTimeout != 2*time.Minute ||
		def.StreamIdleTimeout != 0 || def.BackendHeaderTimeout != 0 || def.CORS != nil {
		t.Fatalf("defaults: %+v", def)
	}
	tf, err = parseTuning(t, "--max-body-size", "64Mi", "--stream-idle-timeout", "5m", "--backend-header-timeout", "30s",
		"--cors-allowed-origin", "https://app.example", "--cors-allowed-headers", "Authorization,Content-Type", "--cors-max-age", "10m")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := tf.tuning()
	if got.MaxBodyBytes != 64<<20 || got.StreamIdleTimeout != 5*time.Minute || got.BackendHeaderTimeout != 30*time.Second ||
		got.CORS == nil || got.CORS.AllowedOrigins[0] != "https://app.example" || len(got.CORS.AllowedHeaders) != 2 || got.CORS.MaxAge != 10*time.Minute {
		t.Fatalf("set: %+v %+v", got, got.CORS)
	}
	if got, _ := parseTuning(t, "--max-body-size", "20M"); got != nil {
		if v, _ := got.tuning(); v.MaxBodyBytes != 20_000_000 {
			t.Fatalf("20M = %d", v.MaxBodyBytes)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-body-size", "lots"}, "--max-body-size"},
		{[]string{"--max-body-size", "0"}, "--max-body-size"},
		{[]string{"--stream-idle-timeout", "-1s"}, "--stream-idle-timeout"},
		{[]string{"--idle-timeout", "0"}, "--idle-timeout"},
		{[]string{"--cors-max-age", "1m"}, "need --cors-allowed-origin"},
		{[]string{"--cors-allowed-origin", "app.example"}, "not an origin"},
		{[]string{"--cors-allowed-origin", "*", "--cors-allow-credentials"}, "AllowCredentials"},
	} {
		if _, err := parseTuning(t, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err %v, want %q", tc.args, err, tc.want)
		}
	}
}
