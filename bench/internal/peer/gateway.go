package peer

import (
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/tidegpu/tidegpu/internal/gateway"
)

// StartGateway runs the product's own gateway in this process on a
// loopback socket with opts, in front of addrs (pool "bench", backends
// b0..bN-1). With a metrics source in opts it waits until every backend
// has fresh metrics. stop closes the server and the gateway (not the
// metrics source, which the caller made).
func StartGateway(t testing.TB, opts gateway.Options, addrs []string) (string, *gateway.Gateway, func()) {
	t.Helper()
	return StartGatewayBehind(t, opts, addrs, nil)
}

// StartGatewayBehind is StartGateway with the gateway behind the handler
// front returns (the tenant middleware, say); nil front serves the gateway
// itself.
func StartGatewayBehind(t testing.TB, opts gateway.Options, addrs []string, front func(*gateway.Gateway) (http.Handler, error)) (string, *gateway.Gateway, func()) {
	t.Helper()
	g, err := gateway.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	var bs []gateway.Backend
	for i, a := range addrs {
		bs = append(bs, gateway.Backend{ID: fmt.Sprint("b", i), Pool: "bench", Address: a})
	}
	g.SetBackends("bench", bs)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var h http.Handler = g
	if front != nil {
		if h, err = front(g); err != nil {
			g.Close()
			t.Fatal(err)
		}
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	if opts.Metrics != nil {
		deadline := time.Now().Add(10 * time.Second)
		for g.SignalStatus()["bench"].Fresh < len(addrs) {
			if time.Now().After(deadline) {
				t.Fatalf("no fresh metrics: %+v", g.SignalStatus())
			}
			time.Sleep(20 * time.Millisecond) // bounded poll of a condition
		}
	}
	return "http://" + ln.Addr().String(), g, func() {
		_ = srv.Close()
		g.Close()
	}
}
