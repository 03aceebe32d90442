package h1

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (a, b net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	a, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// pairs are the connections a sock is made on: a socket, read and written
// with the raw system calls where there are some, and a pipe, through its
// net.Conn.
var pairs = []struct {
	name string
	make func(t *testing.T) (net.Conn, net.Conn)
	raw  bool
}{
	{"tcp", tcpPair, rawSockets},
	{"pipe", func(t *testing.T) (net.Conn, net.Conn) {
		a, b := net.Pipe()
		t.Cleanup(func() { a.Close(); b.Close() })
		return a, b
	}, false},
}

func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i>>8)
	}
	return b
}

func TestSockCarriesBytesBothWays(t *testing.T) {
	for _, p := range pairs {
		t.Run(p.name, func(t *testing.T) {
			a, b := p.make(t)
			s := newSock(a)
			if got := s.raw; got != p.raw {
				t.Fatalf("raw system calls: %v, want %v", got, p.raw)
			}
			// More than the socket buffers hold: the write waits for the
			// reader, the reads come in pieces.
			want := pattern(4 << 20)
			errc := make(chan error, 1)
			go func() {
				n, err := s.Write(want)
				if err == nil && n != len(want) {
					err = io.ErrShortWrite
				}
				errc <- err
			}()
			got := make([]byte, len(want))
			if _, err := io.ReadFull(b, got); err != nil {
				t.Fatal(err)
			}
			if err := <-errc; err != nil {
				t.Fatalf("Write: %v", err)
			}
			if !bytes.Equal(got, want) {
				t.Fatal("the bytes written are not the bytes read")
			}

			go func() {
				_, err := b.Write(want)
				errc <- err
			}()
			back, err := io.ReadAll(io.LimitReader(s, int64(len(want))))
			if err != nil {
				t.Fatal(err)
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(back, want) {
				t.Fatal("the bytes read are not the bytes written")
			}

			b.Close()
			if n, err := s.Read(make([]byte, 8)); n != 0 || err != io.EOF {
				t.Fatalf("Read after the peer closed: %d, %v; want 0, EOF", n, err)
			}
		})
	}
}

func TestSockWriteBuffers(t *testing.T) {
	// Empty buffers among full ones, more buffers than one writev takes,
	// more bytes than the socket holds.
	cases := []struct {
		name  string
		sizes []int
	}{
		{"one", []int{5}},
		{"chunk", []int{3, 100, 2}},
		{"empty ones", []int{0, 7, 0, 0, 9, 0}},
		{"more than one writev", []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}},
		{"larger than the socket", []int{1 << 20, 3, 2 << 20, 0, 1 << 19}},
		{"none", nil},
	}
	for _, p := range pairs {
		for _, c := range cases {
			t.Run(p.name+"/"+c.name, func(t *testing.T) {
				a, b := p.make(t)
				s := newSock(a)
				var bufs net.Buffers
				var want []byte
				for i, n := range c.sizes {
					x := pattern(n + i)[i:]
					bufs = append(bufs, x)
					want = append(want, x...)
				}
				type result struct {
					n   int64
					err error
				}
				res := make(chan result, 1)
				go func() {
					n, err := s.writeBuffers(&bufs)
					res <- result{n, err}
				}()
				// The reader takes everything until the writer is done
				// (a pipe's empty write waits for a read too).
				got := make([]byte, len(want))
				read := make(chan error, 1)
				go func() {
					_, err := io.ReadFull(b, got)
					if err == nil {
						_, err = io.Copy(io.Discard, b)
					}
					read <- err
				}()
				r := <-res
				a.Close()
				if err := <-read; err != nil {
					t.Fatal(err)
				}
				if r.err != nil || r.n != int64(len(want)) {
					t.Fatalf("writeBuffers: %d, %v; want %d, nil", r.n, r.err, len(want))
				}
				if !bytes.Equal(got, want) {
					t.Fatal("the bytes read are not the buffers written")
				}
				if len(bufs) != 0 {
					t.Fatalf("%d buffers left, want them all consumed", len(bufs))
				}
			})
		}
	}
}

func TestSockErrorsNameTheCall(t *testing.T) {
	for _, p := range pairs {
		t.Run(p.name, func(t *testing.T) {
			a, _ := p.make(t)
			s := newSock(a)
			_ = a.SetReadDeadline(time.Now().Add(-time.Second))
			_, err := s.Read(make([]byte, 8))
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("Read past the deadline: %v, want a timeout", err)
			}
			if oe := (*net.OpError)(nil); errors.As(err, &oe) && oe.Op != "read" {
				t.Fatalf("Read's error names %q, want read", oe.Op)
			}
			a.Close()
			_, err = s.Write([]byte("x"))
			if !errors.Is(err, net.ErrClosed) && !errors.Is(err, io.ErrClosedPipe) {
				t.Fatalf("Write on a closed connection: %v, want it closed", err)
			}
			if oe := (*net.OpError)(nil); errors.As(err, &oe) && oe.Op != "write" {
				t.Fatalf("Write's error names %q, want write", oe.Op)
			}
		})
	}
}

func TestSockWriteToAPeerGone(t *testing.T) {
	// A peer that closed at once (no linger) reset the connection: the
	// writes fail (ECONNRESET, then EPIPE) and raise no SIGPIPE.
	a, b := tcpPair(t)
	if err := b.(*net.TCPConn).SetLinger(0); err != nil {
		t.Fatal(err)
	}
	b.Close()
	s := newSock(a)
	chunk := pattern(64 << 10)
	var err error
	for i := 0; i < 1000 && err == nil; i++ {
		_, err = s.Write(chunk)
		if err == nil {
			bufs := net.Buffers{chunk[:10], chunk[10:]}
			_, err = s.writeBuffers(&bufs)
		}
	}
	if err == nil {
		t.Fatal("writes to a reset connection kept succeeding")
	}
}

func TestConsume(t *testing.T) {
	cases := []struct {
		sizes []int
		n     int
		want  []int
	}{
		{[]int{3, 4}, 0, []int{3, 4}},
		{[]int{3, 4}, 2, []int{1, 4}},
		{[]int{3, 4}, 3, []int{4}},
		{[]int{3, 4}, 5, []int{2}},
		{[]int{3, 4}, 7, nil},
		{[]int{0, 3}, 1, []int{2}},
	}
	for _, c := range cases {
		var bufs net.Buffers
		for _, n := range c.sizes {
			bufs = append(bufs, make([]byte, n))
		}
		consume(&bufs, c.n)
		var got []int
		for _, b := range bufs {
			got = append(got, len(b))
		}
		if len(got) != len(c.want) {
			t.Fatalf("consume(%v, %d) left %v, want %v", c.sizes, c.n, got, c.want)
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Fatalf("consume(%v, %d) left %v, want %v", c.sizes, c.n, got, c.want)
			}
		}
	}
}
