package h1

import (
	"sync/atomic"
	"testing"
)

type countCloser struct{ n atomic.Int32 }

func (c *countCloser) Close() error { c.n.Add(1); return nil }

// TestConnCtx: what a connection's request context watches is closed once
// when it ends, unless taken back before; nothing is watched after the end.
func TestConnCtx(t *testing.T) {
	tests := []struct {
		name      string
		watch     int // closers handed over
		unwatch   []int
		wantClose []int32
	}{
		{"none", 0, nil, nil},
		{"one, ended", 1, nil, []int32{1}},
		{"two, the first taken back", 2, []int{0}, []int32{0, 1}},
		{"three, the middle taken back", 3, []int{1}, []int32{1, 0, 1}},
		{"all taken back", 2, []int{1, 0}, []int32{0, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := newConnCtx()
			var _ Abortable = x
			cs := make([]*countCloser, tt.watch)
			for i := range cs {
				cs[i] = &countCloser{}
				if !x.Watch(cs[i]) {
					t.Fatalf("Watch %d before the end = false", i)
				}
			}
			for _, i := range tt.unwatch {
				if !x.Unwatch(cs[i]) {
					t.Fatalf("Unwatch %d before the end = false", i)
				}
			}
			x.end()
			if x.Err() == nil {
				t.Fatal("Err = nil after the end")
			}
			<-x.Done()
			for i, c := range cs {
				if got := c.n.Load(); got != tt.wantClose[i] {
					t.Errorf("closer %d closed %d times, want %d", i, got, tt.wantClose[i])
				}
			}
			for i, c := range cs {
				if got := x.Unwatch(c); got {
					t.Errorf("Unwatch %d after the end = true", i)
				}
			}
			late := &countCloser{}
			if x.Watch(late) {
				t.Error("Watch after the end = true")
			}
			x.end()
			for i, c := range cs {
				if got := c.n.Load(); got != tt.wantClose[i] {
					t.Errorf("a second end closed closer %d again (%d)", i, got)
				}
			}
		})
	}
}
