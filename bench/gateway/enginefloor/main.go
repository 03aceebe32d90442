// Command enginefloor is the CPU floor of an HTTP engine used as a plain
// reverse proxy, for the choice of the gateway's server engine (issue 19,
// item 3; BENCHMARKS.md, "The floor of each HTTP engine"). It is not the
// gateway: it forwards every request to one backend with nothing else
// (no retries, no balancing, no metrics), so what it costs per request is
// the least any gateway on that engine can cost.
//
//	-engine nethttp:  net/http's server and httputil.ReverseProxy
//	-engine fasthttp: valyala/fasthttp's server and HostClient
//
// bench/gateway/enginefloor/run.sh runs it in bench/gateway/run.sh's place
// of the gateway, beside HAProxy and nginx.
package main

import (
	"flag"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"

	"github.com/valyala/fasthttp"
)

func main() {
	engine := flag.String("engine", "nethttp", "nethttp or fasthttp")
	listen := flag.String("listen", "127.0.0.1:18080", "address to serve on")
	backend := flag.String("backend", "127.0.0.1:18081", "the backend's host:port")
	flag.Parse()
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
	default:
		log.Fatalf("-engine %q: want nethttp or fasthttp", *engine)
	}
}
