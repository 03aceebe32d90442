package main

// -engine h1pass: both sides of the h1 engine driven as the gateway drives
// them, with none of the gateway's own work (no routing, prefix index,
// metrics, usage or retries). The body is read whole into a buffer the
// handler keeps between requests (the gateway reads it to retry and to
// route); one request, URL and body reader serve every request of a
// handler's state; the header goes out through an h1.Outbound that drops
// the hop-by-hop fields; the answer's fields are passed on as they came
// (h1.Options.PassHeads, h1.PassFields) and its body copied by the
// server's ReadFrom. Beside -engine h1server (the same server, a hand-written
// client) it tells what the h1 client costs as the gateway uses it; beside
// the gateway, what the gateway's own work costs. -engine h1's handler,
// written as a plain net/http proxy (a new request and a URL parsed per
// request, header maps copied), costs more than the gateway's path, so it
// is no floor for the gateway.

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
	"sync"

	"github.com/tidegpu/tidegpu/internal/gateway/h1"
)

// passState is what one request of -engine h1pass is made of, pooled.
type passState struct {
	out  http.Request
	url  url.URL
	body bytes.Buffer // keeps its array between requests
	rd   replayBody
}

// replayBody reads a request body kept in memory.
type replayBody struct{ bytes.Reader }

func (*replayBody) Close() error { return nil }

// hopByHop is the h1.Outbound of -engine h1pass: the client's own
// connection fields stay with it.
type hopByHop struct{}

func (hopByHop) SkipField(name string) bool {
	switch name {
	case "Connection", "Keep-Alive", "Proxy-Connection", "Te", "Upgrade":
		return true
	}
	return false
}

func (hopByHop) ExtraFields() h1.Fields { return nil }

// h1Pass is the handler of -engine h1pass.
func h1Pass(backend string) http.Handler {
	cl := h1.New(h1.Options{PassHeads: true})
	pool := sync.Pool{New: func() any { return new(passState) }}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st := pool.Get().(*passState)
		defer pool.Put(st)
		st.body.Reset()
		if r.Body != nil {
			if _, err := st.body.ReadFrom(r.Body); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
		}
		body := st.body.Bytes()
		st.url = url.URL{Scheme: "http", Host: backend, Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery}
		st.out = http.Request{
			Method: r.Method, URL: &st.url, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: r.Header, ContentLength: int64(len(body)), Host: backend,
		}
		if len(body) > 0 {
			st.rd.Reset(body)
			st.out.Body = &st.rd
		}
		resp, err := cl.RoundTripOutbound(r.Context(), &st.out, hopByHop{})
		st.out = http.Request{}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		if f, ok := h1.PassedFields(resp); ok {
			h1.PassFields(w, f)
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	})
}
