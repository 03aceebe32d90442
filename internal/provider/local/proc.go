package local

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// pollInterval is how often a process without a pidfd is checked.
const pollInterval = 200 * time.Millisecond

// procStat is what this package needs of /proc/<pid>/stat.
type procStat struct {
	State     byte   // field 3: R, S, D, Z, X, ...
	PPID      int    // field 4: parent process id
	PGRP      int    // field 5: process group id
	StartTime uint64 // field 22: start time in clock ticks after boot
}

// parseStat parses the content of /proc/<pid>/stat. The command name
// (field 2) is in parentheses and may itself hold spaces and parentheses,
// so fields are counted from the last ')'.
func parseStat(b []byte) (procStat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, errors.New("no ')' in stat")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3, so field n is f[n-3].
	if len(f) < 22-3+1 {
		return procStat{}, fmt.Errorf("stat has %d fields after the name, want at least 20", len(f))
	}
	if len(f[0]) != 1 {
		return procStat{}, fmt.Errorf("bad state %q", f[0])
	}
	ppid, err := strconv.Atoi(f[4-3])
	if err != nil {
		return procStat{}, fmt.Errorf("bad ppid: %w", err)
	}
	pgrp, err := strconv.Atoi(f[5-3])
	if err != nil {
		return procStat{}, fmt.Errorf("bad pgrp: %w", err)
	}
	start, err := strconv.ParseUint(f[22-3], 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("bad starttime: %w", err)
	}
	return procStat{State: f[0][0], PPID: ppid, PGRP: pgrp, StartTime: start}, nil
}

// procRoot is where procfs is mounted.
const procRoot = "/proc"

// readStat reads /proc/<pid>/stat.
func readStat(pid int) (procStat, error) { return readStatAt(procRoot, pid) }

// readStatAt reads <root>/<pid>/stat (root is /proc, or a fake one in
// tests).
func readStatAt(root string, pid int) (procStat, error) {
	b, err := os.ReadFile(root + "/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	return parseStat(b)
}

// sameProcess reports whether pid is a live (not zombie) process that
// started at startTime, i.e. the very process recorded, not a reuse of its
// pid.
func sameProcess(pid int, startTime uint64) bool {
	st, err := readStat(pid)
	if err != nil {
		return false
	}
	return st.StartTime == startTime && st.State != 'Z' && st.State != 'X'
}

// describeWait says how a child ended.
func describeWait(ws syscall.WaitStatus) string {
	switch {
	case ws.Exited():
		return fmt.Sprintf("exited with status %d", ws.ExitStatus())
	case ws.Signaled():
		s := fmt.Sprintf("killed by signal %d (%v)", int(ws.Signal()), ws.Signal())
		if ws.CoreDump() {
			s += ", core dumped"
		}
		return s
	default:
		return fmt.Sprintf("ended (wait status %#x)", uint32(ws))
	}
}

// statusAdopted is the Gone message of a process that is not a child of
// this run: its exit status went to its real parent.
const statusAdopted = "exited (not a child of this run, status unknown)"

// kill sends sig to the process group pgid when the process is its
// group's leader (always so for processes this package starts), else to
// pid alone. ESRCH (already gone) is not an error. Callers make sure pid
// still names the recorded process.
func kill(pid, pgid int, sig syscall.Signal) error {
	target := pid
	if pgid == pid {
		target = -pgid
	}
	if err := unix.Kill(target, sig); err != nil && !errors.Is(err, unix.ESRCH) {
		return err
	}
	return nil
}

// pidfdOpen opens a pidfd for pid; -1 with a nil error means pidfds are not
// available here (old kernel, seccomp) and the caller should poll instead.
func pidfdOpen(pid int) (int, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	switch {
	case err == nil:
		return fd, nil
	case errors.Is(err, unix.ESRCH):
		return -1, err
	default: // ENOSYS, EPERM (seccomp), EINVAL, ...
		return -1, nil
	}
}

// waitPidfd blocks until the process of pidfd exits (true) or stopR, the
// read end of a pipe, becomes readable or hung up (false). An unexpected
// poll error is returned so the caller can fall back to polling.
func waitPidfd(pidfd, stopR int) (bool, error) {
	fds := []unix.PollFd{
		{Fd: int32(pidfd), Events: unix.POLLIN},
		{Fd: int32(stopR), Events: unix.POLLIN},
	}
	for {
		fds[0].Revents, fds[1].Revents = 0, 0
		_, err := unix.Poll(fds, -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return false, err
		}
		if fds[0].Revents != 0 {
			return true, nil
		}
		if fds[1].Revents != 0 {
			return false, nil
		}
	}
}
