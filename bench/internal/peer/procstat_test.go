package peer

import (
	"strings"
	"testing"
)

// The lines are /proc/stat's aggregate line as proc(5) documents it
// (man7.org/linux/man-pages/man5/proc_stat.5.html): user, nice, system,
// idle, iowait, irq, softirq, steal, guest, guest_nice, in USER_HZ; the
// first is this machine's.
func TestParseCPULine(t *testing.T) {
	for _, tc := range []struct {
		line        string
		busy, total int64
		ok          bool
	}{
		{"cpu  1459271 1344 973719 3640971 7870 0 292532 0 0 0", 1459271 + 1344 + 973719 + 292532, 1459271 + 1344 + 973719 + 3640971 + 7870 + 292532, true},
		// guest time is in user already: not counted twice.
		{"cpu 10 0 5 100 0 0 0 2 7 0", 17, 117, true},
		// A kernel before 2.6.11 stops at iowait.
		{"cpu 10 0 5 100 3", 15, 118, true},
		{"cpu0 10 0 5 100 3 0 0 0 0 0", 0, 0, false},
		{"cpu 10 0 5", 0, 0, false},
		{"cpu 10 x 5 100 3", 0, 0, false},
		{"cpu 10 -1 5 100 3", 0, 0, false},
		{"cpu 9223372036854775807 1 0 0 0", 0, 0, false},
		{"", 0, 0, false},
	} {
		busy, total, ok := ParseCPULine(tc.line)
		if busy != tc.busy || total != tc.total || ok != tc.ok {
			t.Errorf("%q: %d, %d, %v; want %d, %d, %v", tc.line, busy, total, ok, tc.busy, tc.total, tc.ok)
		}
	}
}

func TestMachineCPU(t *testing.T) {
	busy, total, ok := MachineCPU()
	if !ok || busy <= 0 || total < busy {
		t.Errorf("MachineCPU() = %d, %d, %v", busy, total, ok)
	}
}

func FuzzParseCPULine(f *testing.F) {
	f.Add("cpu  1459271 1344 973719 3640971 7870 0 292532 0 0 0")
	f.Add("cpu 10 0 5 100 3")
	f.Add("intr 1 2 3")
	f.Fuzz(func(t *testing.T, line string) {
		busy, total, ok := ParseCPULine(line)
		if !ok {
			if busy != 0 || total != 0 {
				t.Errorf("%q: not ok but %d, %d", line, busy, total)
			}
			return
		}
		if !strings.HasPrefix(strings.TrimSpace(line), "cpu") || busy < 0 || total < busy {
			t.Errorf("%q: %d busy of %d", line, busy, total)
		}
	})
}
