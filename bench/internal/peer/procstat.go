package peer

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ClkTck is the kernel's USER_HZ, the unit of CPUTicks: 100 on Linux
// (sysconf(_SC_CLK_TCK)).
const ClkTck = 100

// CPUTicks is the user+system time of pid and its direct children (nginx's
// and HAProxy's workers), in ClkTck units, from /proc.
func CPUTicks(pid int) int64 {
	var total int64
	for _, p := range family(pid) {
		st, err := stat(p)
		if err != nil || len(st) < 13 {
			continue
		}
		u, _ := strconv.ParseInt(st[11], 10, 64) // field 14, utime
		s, _ := strconv.ParseInt(st[12], 10, 64) // field 15, stime
		total += u + s
	}
	return total
}

// RSS is the resident set of pid and its direct children, in bytes.
func RSS(pid int) int64 {
	var total int64
	for _, p := range family(pid) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				total += kb * 1024
			}
		}
	}
	return total
}

// LoadAvg is the machine's 1, 5 and 15 minute load averages, for a bench's
// report of how busy the machine was.
func LoadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// MachineCPU is the machine's CPU time since boot, all CPUs, in ClkTck
// units, from /proc/stat's first line: busy and total (total less busy is
// idle and iowait). ok is false when it cannot be read.
func MachineCPU() (busy, total int64, ok bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return ParseCPULine(line)
}

// ParseCPULine parses the aggregate "cpu" line of /proc/stat (proc(5)):
// "cpu user nice system idle iowait irq softirq steal guest guest_nice",
// the last ones absent on older kernels. total sums user to steal (guest
// time is counted in user and nice already), busy is total less idle and
// iowait. ok is false for anything else. Pure.
func ParseCPULine(line string) (busy, total int64, ok bool) {
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0, false
	}
	var v [8]int64
	for i := 0; i < len(v) && i+1 < len(f); i++ {
		n, err := strconv.ParseInt(f[i+1], 10, 64)
		if err != nil || n < 0 {
			return 0, 0, false
		}
		v[i] = n
	}
	for _, n := range v {
		if total+n < total {
			return 0, 0, false // overflow
		}
		total += n
	}
	return total - v[3] - v[4], total, true
}

// family is pid and its direct children.
func family(pid int) []int {
	out := []int{pid}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		c, err := strconv.Atoi(e.Name())
		if err != nil || c == pid {
			continue
		}
		if st, err := stat(c); err == nil && len(st) > 1 && st[1] == strconv.Itoa(pid) {
			out = append(out, c)
		}
	}
	return out
}

// stat returns the fields of /proc/pid/stat after the command, from field
// 3 (state) on.
func stat(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, errors.New("bad stat")
	}
	return strings.Fields(string(b[i+1:])), nil
}
