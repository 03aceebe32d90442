package local

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tidegpu/tidegpu/internal/provider"
)

// Ownership tags: every instance carries them in its environment, set by
// buildEnv at exec time, the way a cloud instance carries its tags. The
// marker envStateDir=<canonical StateDir> says "owned by the run on this
// state dir"; with TIDEGPU_INSTANCE_ID, TIDEGPU_POOL, TIDEGPU_PORT and
// TIDEGPU_HOST it is enough to rebuild the instance when state.json does
// not list it (the controller died between Start and the state write).
//
// /proc/<pid>/environ holds the environment the program was started with by
// execve(2); later putenv calls do not show there, so the tags cannot drift
// (https://man7.org/linux/man-pages/man5/proc_pid_environ.5.html).
const (
	envStateDir     = "TIDEGPU_LOCAL_STATE_DIR"
	envLaunchedAt   = "TIDEGPU_LOCAL_LAUNCHED_AT"
	envMarket       = "TIDEGPU_LOCAL_MARKET"
	envInstanceType = "TIDEGPU_LOCAL_INSTANCE_TYPE"

	envPort       = "TIDEGPU_PORT"
	envHost       = "TIDEGPU_HOST"
	envInstanceID = "TIDEGPU_INSTANCE_ID"
	envPool       = "TIDEGPU_POOL"
)

// ownerTags are the ownership tags Launch gives an instance on top of its
// templateVars.
type ownerTags struct {
	StateDir     string
	LaunchedAt   time.Time
	Market       provider.Market
	InstanceType string
}

// parseEnviron parses the content of /proc/<pid>/environ: NAME=VALUE
// entries separated (and perhaps ended) by NUL bytes. Entries without '='
// or with an empty name are skipped. When a name occurs twice the first
// wins, as for getenv(3) and Go's os.Getenv.
func parseEnviron(b []byte) map[string]string {
	env := make(map[string]string)
	for len(b) > 0 {
		var kv []byte
		if i := bytes.IndexByte(b, 0); i >= 0 {
			kv, b = b[:i], b[i+1:]
		} else {
			kv, b = b, nil
		}
		name, value, ok := bytes.Cut(kv, []byte{'='})
		if !ok || len(name) == 0 {
			continue
		}
		if _, dup := env[string(name)]; !dup {
			env[string(name)] = string(value)
		}
	}
	return env
}

// marked reports whether env carries the ownership marker of stateDir,
// exactly: the same canonical path, nothing more or less.
func marked(env map[string]string, stateDir string) bool {
	v, ok := env[envStateDir]
	return ok && v == stateDir
}

// envEntry rebuilds the state entry of an instance from its ownership tags
// (everything but PID, StartTime and Command, which /proc gives). It fails,
// saying what is wrong, when the tags do not describe an instance this
// provider could have launched.
func envEntry(env map[string]string) (stateEntry, error) {
	e := stateEntry{ID: env[envInstanceID]}
	if !validID(e.ID) {
		return stateEntry{}, fmt.Errorf("%s %q: want local-<8 hex digits>", envInstanceID, e.ID)
	}
	var ok bool
	if e.Pool, ok = env[envPool]; !ok {
		return stateEntry{}, fmt.Errorf("%s: %s missing", e.ID, envPool)
	}
	port, err := strconv.Atoi(env[envPort])
	if err != nil || port < 1 || port > 65535 {
		return stateEntry{}, fmt.Errorf("%s: %s %q is not a port", e.ID, envPort, env[envPort])
	}
	host := env[envHost]
	if host == "" {
		return stateEntry{}, fmt.Errorf("%s: %s missing", e.ID, envHost)
	}
	e.Port, e.Address = port, net.JoinHostPort(host, strconv.Itoa(port))
	if e.LaunchedAt, err = time.Parse(time.RFC3339Nano, env[envLaunchedAt]); err != nil {
		return stateEntry{}, fmt.Errorf("%s: %s: %w", e.ID, envLaunchedAt, err)
	}
	switch m := provider.Market(env[envMarket]); m {
	case provider.MarketSpot, provider.MarketOnDemand:
		e.Market = m
	default:
		return stateEntry{}, fmt.Errorf("%s: %s %q: want %s or %s", e.ID, envMarket, m, provider.MarketSpot, provider.MarketOnDemand)
	}
	e.InstanceType = env[envInstanceType]
	if e.InstanceType == "" {
		e.InstanceType = DefaultInstanceType
	}
	return e, nil
}

// markedProc is a live process that carries this state dir's marker.
type markedProc struct {
	PID, PGRP int
	StartTime uint64
	// ID is its TIDEGPU_INSTANCE_ID when that is a valid id, else "".
	ID string
	// Entry is the instance its tags describe (PID and StartTime set) when
	// Err is nil.
	Entry stateEntry
	// Err says why its tags do not describe an instance.
	Err error
}

// leader reports whether the process leads its own group, as every process
// Launch starts does (Setpgid).
func (m markedProc) leader() bool { return m.PID == m.PGRP }

// scanGuard lists the processes a scan must never return, whatever their
// environment says: this process, its ancestors and its process group (an
// instance is always in a group of its own), and init.
type scanGuard struct {
	self, pgrp int
	ancestors  map[int]bool
}

// newScanGuard builds the guard of the process self whose group is pgrp,
// reading its ancestors from root.
func newScanGuard(root string, self, pgrp int) scanGuard {
	g := scanGuard{self: self, pgrp: pgrp, ancestors: map[int]bool{}}
	pid := self
	for range 4096 { // a bound against a looping fake /proc
		st, err := readStatAt(root, pid)
		if err != nil || st.PPID <= 1 || g.ancestors[st.PPID] {
			break
		}
		g.ancestors[st.PPID] = true
		pid = st.PPID
	}
	return g
}

func (g scanGuard) excludes(pid int, st procStat) bool {
	return pid <= 1 || pid == g.self || g.ancestors[pid] || st.PGRP == g.pgrp
}

// scanMarked lists the live processes under root (/proc) whose environment
// carries the marker of stateDir, except those g excludes. Only the
// numbered entries of root are read: they are the processes (thread-group
// leaders); threads have /proc/<tid> too but getdents never lists them
// (https://man7.org/linux/man-pages/man5/proc_tid.5.html), so each process
// is seen once. A process whose stat or environ cannot be read (another
// user's: a PTRACE_MODE_READ_FSCREDS check, see proc_pid_environ(5)) or
// that exits meanwhile is skipped silently. Zombies are skipped: their
// environ reads empty and they cannot be signalled. Only an error listing
// root itself is returned.
func scanMarked(root, stateDir string, g scanGuard) ([]markedProc, error) {
	dents, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", root, err)
	}
	var out []markedProc
	for _, d := range dents {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || pid <= 0 || strconv.Itoa(pid) != d.Name() {
			continue // self, thread-self, sys, ...
		}
		st, err := readStatAt(root, pid)
		if err != nil || st.State == 'Z' || st.State == 'X' || g.excludes(pid, st) {
			continue
		}
		b, err := os.ReadFile(root + "/" + d.Name() + "/environ")
		if err != nil || !bytes.Contains(b, []byte(envStateDir+"=")) {
			continue
		}
		env := parseEnviron(b)
		if !marked(env, stateDir) {
			continue
		}
		// The environ read must be of the process whose stat was read: if
		// the pid was reused in between, the start times differ.
		again, err := readStatAt(root, pid)
		if err != nil || again.StartTime != st.StartTime {
			continue
		}
		m := markedProc{PID: pid, PGRP: st.PGRP, StartTime: st.StartTime}
		if id := env[envInstanceID]; validID(id) {
			m.ID = id
		}
		m.Entry, m.Err = envEntry(env)
		if m.Err == nil {
			m.Entry.PID, m.Entry.StartTime = pid, st.StartTime
			m.Entry.Command = readCmdline(root, pid)
			m.Err = m.Entry.validate()
		}
		out = append(out, m)
	}
	return out, nil
}

// readCmdline returns the argv of pid, or nil. It only informs state.json.
func readCmdline(root string, pid int) []string {
	b, err := os.ReadFile(root + "/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
}

// planOrphans sorts the marked processes an Adopt scan found, given the
// state entries whose processes were claimed (alive, same start time):
//
//   - the processes of claimed entries are the state's business: dropped;
//   - per instance id not claimed from the state file, the oldest group
//     leader with valid tags is the instance: it goes to instances, to be
//     offered to keep like a state entry;
//   - everything else (other members of an instance's group or session,
//     leftovers whose leader is gone, processes whose tags are invalid) goes
//     to rest: the caller leaves those of kept instances alone and stops the
//     others, so no process with the marker outlives Adopt unaccounted for.
//
// Both lists come sorted by id, then start time, then pid.
func planOrphans(found []markedProc, claimed []stateEntry) (instances, rest []markedProc) {
	type key struct {
		pid   int
		start uint64
	}
	claimedProc := make(map[key]bool, len(claimed))
	claimedID := make(map[string]bool, len(claimed))
	for _, e := range claimed {
		claimedProc[key{e.PID, e.StartTime}] = true
		claimedID[e.ID] = true
	}
	sorted := slices.Clone(found)
	slices.SortFunc(sorted, func(a, b markedProc) int {
		if c := strings.Compare(a.ID, b.ID); c != 0 {
			return c
		}
		if a.StartTime != b.StartTime {
			if a.StartTime < b.StartTime {
				return -1
			}
			return 1
		}
		return a.PID - b.PID
	})
	chosen := map[string]bool{}
	for _, m := range sorted {
		switch {
		case claimedProc[key{m.PID, m.StartTime}]:
		case m.Err == nil && m.leader() && !claimedID[m.ID] && !chosen[m.ID]:
			chosen[m.ID] = true
			instances = append(instances, m)
		default:
			rest = append(rest, m)
		}
	}
	return instances, rest
}

// errSimulatedCrash is what Launch returns when the crashAfterStart test
// hook plays a kill -9 of the controller right after Start.
var errSimulatedCrash = errors.New("simulated crash between start and the state write (test hook)")
