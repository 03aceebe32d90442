package gateway

import (
	"net"
	"time"

	"github.com/tidegpu/tidegpu/internal/gateway/h1"
)

// backendClient selects the backend client of a gateway that owns its
// transport: "h1" (the h1 package), which reads each answer in the
// handler's goroutine and holds no buffer between tokens, or "transport"
// (net/http's Transport: two goroutines and two buffers per backend
// connection). Probes use a Transport either way (health.go). An internal
// switch, not a user knob, set at build time:
//
//	-ldflags "-X github.com/tidegpu/tidegpu/internal/gateway.backendClient=h1"
//
// (GOFLAGS=-ldflags=-X=github.com/tidegpu/tidegpu/internal/gateway.backendClient=transport
// runs a package's tests on the other). The gateway, usage, tenant and e2e
// suites pass on both. h1 is the default: measured side by side it holds
// 38-45 % less memory per open stream and spends 14-27 % less CPU per
// short request, with the CPU per stream and the added TTFB within noise
// (BENCHMARKS.md, "issue 19, second increment"); backends are plain HTTP
// (Backend.Address is host:port), which is all it speaks. The Transport
// stays reachable by the switch for one release.
var backendClient = "h1"

// newBackendClient returns the h1 client for the proxied requests, with the
// same dial, keep-alive and header-timeout settings as newTransport; its
// dials make no system call the scheduler is told of (h1.Dialer).
func newBackendClient(dialTimeout, headerTimeout time.Duration) *h1.Client {
	d := &h1.Dialer{
		Timeout: dialTimeout,
		KeepAlive: net.KeepAliveConfig{
			Enable: true, Idle: 15 * time.Second, Interval: 5 * time.Second, Count: 3,
		},
	}
	return h1.New(h1.Options{
		Dial:                  d.DialContext,
		ResponseHeaderTimeout: headerTimeout,
		IdleTimeout:           90 * time.Second,
		MaxIdlePerHost:        256,
		// The answers' fields are passed on to the client as they came
		// (writeHead), without a header map.
		PassHeads: true,
	})
}
