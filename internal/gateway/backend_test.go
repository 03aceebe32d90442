package gateway

import (
	"testing"
)

// TestBackendClientSwitch checks that the build-time switch selects the
// client of the proxied requests, so that a suite run with it is known to
// have run on that client. Run the package's tests on the h1 client with
//
//	GOFLAGS=-ldflags=-X=github.com/tidegpu/tidegpu/internal/gateway.backendClient=h1 go test ./internal/gateway/...
func TestBackendClientSwitch(t *testing.T) {
	g, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	t.Logf("backend client of this build: %q", backendClient)
	switch backendClient {
	case "h1":
		if g.h1 == nil || g.transport != g.h1 {
			t.Fatalf("backendClient %q: the proxied requests do not go through the h1 client", backendClient)
		}
	case "transport":
		if g.h1 != nil || g.transport != g.ownTransport {
			t.Fatalf("backendClient %q: the proxied requests do not go through the Transport", backendClient)
		}
	default:
		t.Fatalf("backendClient %q: New accepted an unknown client", backendClient)
	}
	if g.probeTransport() == g.transport {
		t.Fatal("probes share the data plane's client")
	}

	// An unknown value is an error naming the switch.
	defer func(old string) { backendClient = old }(backendClient)
	backendClient = "h2"
	if _, err := New(Options{}); err == nil {
		t.Fatal(`backendClient "h2": New did not fail`)
	}
}
