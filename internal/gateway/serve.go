package gateway

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"syscall"
	"time"

	"github.com/tidegpu/tidegpu/internal/gateway/h1"
)

// Defaults of the gateway's HTTP server (Tuning).
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultIdleTimeout       = 2 * time.Minute
)

// Tuning is what a user sets of a gateway process: its limits, timeouts and
// CORS, the same for `tidegpu gateway` and `tidegpu up` (docs/guide.md
// lists them in one table). The zero value is the defaults.
type Tuning struct {
	// MaxBodyBytes bounds a request body (Options.MaxBodyBytes).
	MaxBodyBytes int64
	// ReadHeaderTimeout bounds reading a client's request headers; 0 means
	// DefaultReadHeaderTimeout.
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes a client's keep-alive connection idle this long;
	// 0 means DefaultIdleTimeout.
	IdleTimeout time.Duration
	// BackendHeaderTimeout bounds the wait for a backend's response
	// headers (Options.ResponseHeaderTimeout); 0 means none.
	BackendHeaderTimeout time.Duration
	// StreamIdleTimeout bounds a backend's silence mid-answer
	// (Options.StreamIdleTimeout); 0 means none.
	StreamIdleTimeout time.Duration
	// CORS is Options.CORS.
	CORS *CORS
	// BackendMaxInFlight, BackendQueue and BackendQueueWait are the
	// Options' fair share under saturation.
	BackendMaxInFlight int
	BackendQueue       int
	BackendQueueWait   time.Duration
}

// Apply sets t's gateway fields in o.
func (t Tuning) Apply(o *Options) {
	o.MaxBodyBytes = t.MaxBodyBytes
	o.ResponseHeaderTimeout = t.BackendHeaderTimeout
	o.StreamIdleTimeout = t.StreamIdleTimeout
	o.CORS = t.CORS
	o.BackendMaxInFlight, o.BackendQueue, o.BackendQueueWait = t.BackendMaxInFlight, t.BackendQueue, t.BackendQueueWait
}

// serverEngine selects the gateway's HTTP server: "h1" (h1.Server, our
// own HTTP/1.1 server) or "nethttp" (net/http's, with streamed answers
// taken over from it, stream.go). "h1" is the default: BENCHMARKS.md,
// issue 19, "An HTTP/1.1 server of our own". An internal switch, set at
// build time:
//
//	-ldflags "-X github.com/tidegpu/tidegpu/internal/gateway.serverEngine=nethttp"
var serverEngine = "h1"

// serveLoops selects how h1.Server serves the clients' connections on
// Linux: "off", a goroutine per connection, or "on", as coroutines of its
// serve loops (h1.Server.NoLoops; the gateway calls h1.Detach before every
// wait that is not for a socket). "off" is the default: the loops cut the
// gateway's context switches per short request threefold, but did not
// serve more requests per second one at a time on two shared cores, where
// their throughput moved between two levels from round to round
// (BENCHMARKS.md, issue 19, session 30). An internal switch, set at build
// time (GOFLAGS=-ldflags=-X=github.com/tidegpu/tidegpu/internal/gateway.serveLoops=on
// runs a package's tests on it; with it on, the gateway's suite passes but
// for TestWaitingStreamsHaveSmallStacks: a stream that starts on a loop
// waits on 6.4-6.7 KB of stack, not 4 KiB, the coroutine's stack grown by
// the request's start before it detaches):
//
//	-ldflags "-X github.com/tidegpu/tidegpu/internal/gateway.serveLoops=on"
var serveLoops = "off"

// Server returns the HTTP server of a gateway handler h with t's timeouts.
// It has no ReadTimeout or WriteTimeout: they would cut long uploads and
// long generations; the body limit and StreamIdleTimeout bound those.
//
// It serves HTTP/1.0 and HTTP/1.1 (h1.Server): each answer the handler
// finishes goes out in one write, and a streamed answer holds no buffer
// between its tokens. With the "nethttp" engine, the gateway behind it (h,
// or a handler h passes the request to) writes the streamed answers to
// HTTP/1.1 clients straight to their connection, taken over from net/http
// (stream.go); the Server's Shutdown waits for those too, and its Close
// ends them.
func (t Tuning) Server(h http.Handler) *Server {
	return t.server(h, serverEngine)
}

func (t Tuning) server(h http.Handler, engine string) *Server {
	s := &Server{}
	if engine == "h1" {
		s.lean = &h1.Server{
			Handler:           h,
			ReadHeaderTimeout: cmp(t.ReadHeaderTimeout, DefaultReadHeaderTimeout),
			IdleTimeout:       cmp(t.IdleTimeout, DefaultIdleTimeout),
			NoLoops:           serveLoops != "on",
		}
		return s
	}
	s.std = &http.Server{
		Handler:           h,
		ReadHeaderTimeout: cmp(t.ReadHeaderTimeout, DefaultReadHeaderTimeout),
		IdleTimeout:       cmp(t.IdleTimeout, DefaultIdleTimeout),
	}
	if serverStreams == "direct" {
		s.std.Handler = &finishing{h}
		s.std.ConnContext = s.connContext
	}
	return s
}

// Server is a gateway's HTTP server (Tuning.Server). With the "nethttp"
// engine it is an http.Server whose Shutdown and Close also cover the
// streams the gateway took over from net/http, which http.Server no
// longer tracks once their connection is hijacked.
type Server struct {
	lean    *h1.Server
	std     *http.Server
	streams streamSet
}

// Serve serves connections from ln until Shutdown or Close, then returns
// http.ErrServerClosed.
func (s *Server) Serve(ln net.Listener) error {
	if s.lean != nil {
		return s.lean.Serve(ln)
	}
	return s.std.Serve(ln)
}

// Shutdown shuts the server down gracefully: no new connections, idle
// ones closed, and it returns once the answers under way have ended. If
// ctx ends first it returns ctx's error; Close then ends what is left.
func (s *Server) Shutdown(ctx context.Context) error {
	if s.lean != nil {
		return s.lean.Shutdown(ctx)
	}
	if err := s.std.Shutdown(ctx); err != nil {
		return err
	}
	return s.streams.wait(ctx)
}

// Close closes the server's listeners and connections and cancels the
// requests under way (with "nethttp", it ends the streams taken over:
// their client connections are closed and their backend reads
// cancelled).
func (s *Server) Close() error {
	if s.lean != nil {
		return s.lean.Close()
	}
	err := s.std.Close()
	s.streams.abort()
	return err
}

// Listen listens on the TCP address addr. When its host is "localhost" it
// listens on the IPv4 and the IPv6 loopback, 127.0.0.1 and [::1], on one
// port (with port 0, the one the first got), since "localhost" resolves to
// either; [::1] is left out, without error, on a machine that has no IPv6
// loopback. Any other address is one listener, as net.Listen has it.
// With the h1 engine, the listeners are h1.Listen's, which accept without
// system calls the scheduler is told of.
func Listen(addr string) ([]net.Listener, error) {
	listen := net.Listen
	if serverEngine == "h1" {
		listen = h1.Listen
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host != "localhost" {
		ln, err := listen("tcp", addr)
		if err != nil {
			return nil, err
		}
		return []net.Listener{ln}, nil
	}
	v4, err := listen("tcp4", net.JoinHostPort("127.0.0.1", port))
	if err != nil {
		return nil, err
	}
	p := strconv.Itoa(v4.Addr().(*net.TCPAddr).Port)
	v6, err := listen("tcp6", net.JoinHostPort("::1", p))
	switch {
	case err == nil:
		return []net.Listener{v4, v6}, nil
	case noIPv6(err):
		return []net.Listener{v4}, nil
	}
	_ = v4.Close()
	return nil, err
}

// noIPv6 reports whether a listen error means the machine has no IPv6
// loopback (no address ::1, or IPv6 off), not that the port is taken.
func noIPv6(err error) bool {
	return errors.Is(err, syscall.EADDRNOTAVAIL) || errors.Is(err, syscall.EAFNOSUPPORT) ||
		errors.Is(err, syscall.EPROTONOSUPPORT)
}
