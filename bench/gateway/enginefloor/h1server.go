package main

// -engine h1server: the h1 server in front of raw backend connections.
// The server side is the gateway's (h1.Server: the request's head and
// body read into an *http.Request, the answer written through its
// ResponseWriter); the backend side is -engine raw's (a request written
// by hand, the answer read with headLength, no HTTP client). Beside -engine
// h1 (both sides h1) and -engine raw (neither), it tells how much of the
// h1 engine's cost is its server's and how much its client's.

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
)

// rawBackends keeps idle backend connections, each with its read buffer.
type rawBackends struct {
	addr string
	mu   sync.Mutex
	idle []*rawBackend
}

type rawBackend struct {
	c   net.Conn
	buf [16 << 10]byte
	out bytes.Buffer
}

func (p *rawBackends) get() (*rawBackend, error) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		b := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return b, nil
	}
	p.mu.Unlock()
	c, err := net.Dial("tcp", p.addr)
	if err != nil {
		return nil, err
	}
	return &rawBackend{c: c}, nil
}

func (p *rawBackends) put(b *rawBackend) {
	p.mu.Lock()
	p.idle = append(p.idle, b)
	p.mu.Unlock()
}

// h1ServerRaw is the handler of -engine h1server.
func h1ServerRaw(backend string) http.Handler {
	pool := &rawBackends{addr: backend}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := pool.get()
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		status, ctype, body, err := b.exchange(r, backend)
		if err != nil {
			_ = b.c.Close()
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		h := w.Header()
		if ctype != "" {
			h["Content-Type"] = []string{ctype}
		}
		h["Content-Length"] = []string{strconv.Itoa(len(body))}
		w.WriteHeader(status)
		_, _ = w.Write(body)
		pool.put(b)
	})
}

// exchange sends r (its body read whole) on b and reads the answer: its
// status, Content-Type and body (which b's buffer holds until its next
// exchange).
func (b *rawBackend) exchange(r *http.Request, host string) (int, string, []byte, error) {
	out := &b.out
	out.Reset()
	out.WriteString(r.Method)
	out.WriteByte(' ')
	out.WriteString(r.URL.RequestURI())
	out.WriteString(" HTTP/1.1\r\nHost: ")
	out.WriteString(host)
	if ct := r.Header["Content-Type"]; len(ct) > 0 {
		out.WriteString("\r\nContent-Type: ")
		out.WriteString(ct[0])
	}
	if r.ContentLength > 0 {
		out.WriteString("\r\nContent-Length: ")
		out.WriteString(strconv.FormatInt(r.ContentLength, 10))
	}
	out.WriteString("\r\n\r\n")
	if r.ContentLength > 0 {
		if _, err := io.CopyN(out, r.Body, r.ContentLength); err != nil {
			return 0, "", nil, err
		}
	}
	if _, err := b.c.Write(out.Bytes()); err != nil {
		return 0, "", nil, err
	}
	msg, err := readMessage(b.c.Read, b.buf[:])
	if err != nil {
		return 0, "", nil, err
	}
	end, _ := headLength(msg)
	if len(msg) < 12 {
		return 0, "", nil, errors.New("short status line")
	}
	status, err := strconv.Atoi(string(msg[9:12]))
	if err != nil {
		return 0, "", nil, err
	}
	ctype := ""
	if i := bytes.Index(msg[:end], []byte("\r\nContent-Type: ")); i >= 0 {
		v := msg[i+len("\r\nContent-Type: ") : end]
		if j := bytes.IndexByte(v, '\r'); j >= 0 {
			ctype = string(v[:j])
		}
	}
	return status, ctype, msg[end:], nil
}
