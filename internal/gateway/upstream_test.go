package gateway

import (
	"context"
	"errors"
	"testing"
)

// TestWaitList runs sequences of add, remove, abandon and revive on one
// backend's list and checks which attempts were cancelled with
// errBackendDown, and what remove reported.
func TestWaitList(t *testing.T) {
	type step struct {
		op string // add, remove, abandon, revive
		w  int    // the attempt, for add and remove
		ok bool   // remove's result
	}
	tests := []struct {
		name      string
		steps     []step
		cancelled []bool // by attempt, at the end
	}{
		{"added and removed: not cancelled", []step{{"add", 0, false}, {"remove", 0, true}}, []bool{false}},
		{"abandoned while listed", []step{{"add", 0, false}, {"add", 1, false}, {"abandon", 0, false}, {"remove", 0, false}, {"remove", 1, false}}, []bool{true, true}},
		{"removed before the abandon", []step{{"add", 0, false}, {"add", 1, false}, {"remove", 1, true}, {"abandon", 0, false}, {"remove", 0, false}}, []bool{true, false}},
		{"the middle one removed", []step{{"add", 0, false}, {"add", 1, false}, {"add", 2, false}, {"remove", 1, true}, {"abandon", 0, false}, {"remove", 0, false}, {"remove", 2, false}}, []bool{true, false, true}},
		{"added while down: cancelled at once", []step{{"abandon", 0, false}, {"add", 0, false}, {"remove", 0, false}}, []bool{true}},
		{"revived: listed again", []step{{"abandon", 0, false}, {"revive", 0, false}, {"add", 0, false}, {"remove", 0, true}}, []bool{false}},
		{"a node reused after an abandon", []step{{"add", 0, false}, {"abandon", 0, false}, {"remove", 0, false}, {"revive", 0, false}, {"add", 1, false}, {"remove", 1, true}}, []bool{true, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var l waitList
			n := len(tt.cancelled)
			nodes := make([]headerWait, n)
			ctxs := make([]*attemptCtx, n)
			for i := range n {
				ctxs[i] = newAttemptCtx(context.Background())
			}
			for i, s := range tt.steps {
				switch s.op {
				case "add":
					l.add(&nodes[s.w], ctxs[s.w])
				case "remove":
					if got := l.remove(&nodes[s.w]); got != s.ok {
						t.Fatalf("step %d: remove(%d) = %v, want %v", i, s.w, got, s.ok)
					}
				case "abandon":
					l.abandon()
				case "revive":
					l.revive()
				}
			}
			for i, want := range tt.cancelled {
				if got := errors.Is(ctxs[i].Cause(), errBackendDown); got != want {
					t.Errorf("attempt %d cancelled with errBackendDown: %v, want %v", i, got, want)
				}
			}
			if l.head != nil {
				t.Error("attempts left on the list")
			}
		})
	}
}
