// Command enginefloor is the CPU floor of an HTTP engine used as a plain
// reverse proxy, for the choice of the gateway's server engine (issue 19,
// item 3; BENCHMARKS.md, "The floor of each HTTP engine"). It is not the
// gateway: it forwards every request to one backend with nothing else
// (no retries, no balancing, no metrics), so what it costs per request is
// the least any gateway on that engine can cost.
//
//	-engine nethttp:  net/http's server and httputil.ReverseProxy
//	-engine fasthttp: valyala/fasthttp's server and HostClient
//	-engine h1:       the gateway's own engine, h1.Server and h1.Client
//	-engine loop:     an epoll loop per processor, no HTTP engine at all
//	                  (loop_linux.go): the floor of an event-loop design
//	-engine coro:     the same loops running each connection's blocking-
//	                  style code as a coroutine (coro_linux.go)
//	-engine corolocked: -engine coro with each loop on a thread of its own
//	                  that waits in a blocking epoll_wait, as -engine
//	                  loop's do (coro_linux.go)
//	-engine raw:      coro's code on a goroutine per connection, through the
//	                  runtime's poller, with no HTTP engine (raw.go)
//	-engine h1server: h1.Server in front of -engine raw's backend side
//	                  (h1server.go): the h1 engine's server side alone
//	-engine h1pass:   h1.Server and h1.Client driven as the gateway drives
//	                  them, with none of its own work (h1pass.go)
//
// -loops sets how many loops the loop engines run (one per processor by
// default); -lateness logs how late a goroutine outside them wakes.
//
// bench/gateway/enginefloor/run.sh runs it in bench/gateway/run.sh's place
// of the gateway, beside HAProxy and nginx.
package main

import (
	"bytes"
	"flag"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"runtime/pprof"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/tidegpu/tidegpu/internal/gateway/h1"
)

// loops is how many loops the loop engines run (-loops); 0: one per
// processor.
var loops int

func main() {
	engine := flag.String("engine", "nethttp", "nethttp, fasthttp, h1, h1server, h1pass, loop, coro, corolocked or raw")
	listen := flag.String("listen", "127.0.0.1:18080", "address to serve on")
	backend := flag.String("backend", "127.0.0.1:18081", "the backend's host:port")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the first -profile-for here")
	profileFor := flag.Duration("profile-for", 10*time.Second, "how long -cpuprofile records")
	flag.IntVar(&loops, "loops", 0, "loops of -engine loop, coro and corolocked (0: one per processor, GOMAXPROCS)")
	late := flag.Duration("lateness", 0, "if set, log how late 1 ms sleeps outside the loops wake, over each such period")
	flag.Parse()
	if *late > 0 {
		go lateness(*late)
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
		time.AfterFunc(*profileFor, func() { pprof.StopCPUProfile(); _ = f.Close() })
	}
	switch *engine {
	case "nethttp":
		u := &url.URL{Scheme: "http", Host: *backend}
		rp := httputil.NewSingleHostReverseProxy(u)
		rp.Transport = &http.Transport{MaxIdleConnsPerHost: 256}
		log.Fatal(http.ListenAndServe(*listen, rp))
	case "fasthttp":
		c := &fasthttp.HostClient{Addr: *backend, MaxConns: 1024}
		h := func(ctx *fasthttp.RequestCtx) {
			ctx.Request.Header.Del("Connection")
			if err := c.Do(&ctx.Request, &ctx.Response); err != nil {
				ctx.Error(err.Error(), fasthttp.StatusBadGateway)
			}
			ctx.Response.Header.Del("Connection")
		}
		log.Fatal((&fasthttp.Server{Handler: h}).ListenAndServe(*listen))
	case "h1":
		ln, err := net.Listen("tcp", *listen)
		if err != nil {
			log.Fatal(err)
		}
		log.Fatal((&h1.Server{Handler: h1Proxy(*backend)}).Serve(ln))
	case "loop":
		serveLoops(*listen, *backend)
	case "coro":
		serveCoroLoops(*listen, *backend)
	case "corolocked":
		serveCoroLockedLoops(*listen, *backend)
	case "raw":
		serveRaw(*listen, *backend)
	case "h1server":
		ln, err := net.Listen("tcp", *listen)
		if err != nil {
			log.Fatal(err)
		}
		log.Fatal((&h1.Server{Handler: h1ServerRaw(*backend)}).Serve(ln))
	case "h1pass":
		ln, err := net.Listen("tcp", *listen)
		if err != nil {
			log.Fatal(err)
		}
		log.Fatal((&h1.Server{Handler: h1Pass(*backend)}).Serve(ln))
	default:
		log.Fatalf("-engine %q: want nethttp, fasthttp, h1, h1server, h1pass, loop, coro, corolocked or raw", *engine)
	}
}

// h1Proxy forwards each request to backend with the h1 client: the body
// read into memory (as the gateway does, to retry), the headers passed on
// but Connection, the answer copied back.
func h1Proxy(backend string) http.Handler {
	cl := h1.New(h1.Options{})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		out, err := http.NewRequestWithContext(r.Context(), r.Method, "http://"+backend+r.URL.RequestURI(), bytes.NewReader(body))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		out.Header = r.Header
		delete(out.Header, "Connection")
		resp, err := cl.RoundTrip(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		h := w.Header()
		for k, vv := range resp.Header {
			if k != "Connection" && k != "Keep-Alive" {
				h[k] = vv
			}
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	})
}
