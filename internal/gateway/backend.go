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
// (GOFLAGS=-ldflags=-X=github.com/tidegpu/tidegpu/internal/gateway.backendClient=h1
// runs a package's tests on it). The gateway, usage, tenant and e2e suites
// pass on both. The Transport stays the default: h1 cuts the memory per
// open stream by about 40 % (and the CPU per short request by 14-27 %) but
// not the CPU per stream, which the change of default asked for
// (BENCHMARKS.md, "issue 19, second increment").
var backendClient = "transport"

// newBackendClient returns the h1 client for the proxied requests, with the
// same dial, keep-alive and header-timeout settings as newTransport.
func newBackendClient(dialTimeout, headerTimeout time.Duration) *h1.Client {
	d := &net.Dialer{
		Timeout: dialTimeout,
		KeepAliveConfig: net.KeepAliveConfig{
			Enable: true, Idle: 15 * time.Second, Interval: 5 * time.Second, Count: 3,
		},
	}
	return h1.New(h1.Options{
		Dial:                  d.DialContext,
		ResponseHeaderTimeout: headerTimeout,
		IdleTimeout:           90 * time.Second,
		MaxIdlePerHost:        256,
	})
}
