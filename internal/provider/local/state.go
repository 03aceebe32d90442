package local

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/tidegpu/tidegpu/internal/provider"
)

// stateVersion is the version of the state file format.
const stateVersion = 1

// maxStateSize bounds how much of a state file is read.
const maxStateSize = 16 << 20

// maxPID is the kernel's largest possible pid (PID_MAX_LIMIT on 64-bit).
const maxPID = 1 << 22

// stateFile is StateDir/state.json: what a later run needs to find the
// processes of this one after a crash.
type stateFile struct {
	Version   int          `json:"version"`
	Instances []stateEntry `json:"instances"`
}

// stateEntry is one instance in the state file.
type stateEntry struct {
	ID   string `json:"id"`
	Pool string `json:"pool"`
	PID  int    `json:"pid"`
	Port int    `json:"port"`
	// Address is host:port of the inference server.
	Address string `json:"address"`
	// StartTime is field 22 of /proc/<pid>/stat (clock ticks after boot):
	// a live pid with another start time is a different process.
	StartTime    uint64          `json:"startTime"`
	LaunchedAt   time.Time       `json:"launchedAt"`
	Market       provider.Market `json:"market,omitempty"`
	InstanceType string          `json:"instanceType,omitempty"`
	Command      []string        `json:"command,omitempty"`
}

// validID reports whether id has the form this provider gives: "local-" and
// 8 lowercase hex digits. (IDs name log files, so they are checked.)
func validID(id string) bool {
	const prefix = "local-"
	if len(id) != len(prefix)+8 || id[:len(prefix)] != prefix {
		return false
	}
	for _, c := range []byte(id[len(prefix):]) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func (e *stateEntry) validate() error {
	if !validID(e.ID) {
		return fmt.Errorf("id %q: want local-<8 hex digits>", e.ID)
	}
	if e.PID <= 1 || e.PID > maxPID {
		return fmt.Errorf("%s: pid %d out of range", e.ID, e.PID)
	}
	if e.Port < 1 || e.Port > 65535 {
		return fmt.Errorf("%s: port %d out of range", e.ID, e.Port)
	}
	if e.StartTime == 0 {
		return fmt.Errorf("%s: startTime missing", e.ID)
	}
	host, port, err := net.SplitHostPort(e.Address)
	if err != nil || host == "" || port != strconv.Itoa(e.Port) {
		return fmt.Errorf("%s: address %q does not match port %d", e.ID, e.Address, e.Port)
	}
	switch e.Market {
	case "", provider.MarketSpot, provider.MarketOnDemand:
	default:
		return fmt.Errorf("%s: unknown market %q", e.ID, e.Market)
	}
	return nil
}

// parseState parses and checks a state file. It is strict: a file this
// provider did not write is refused as a whole rather than half trusted,
// since its entries name processes to signal.
func parseState(data []byte) ([]stateEntry, error) {
	var sf stateFile
	if err := json.Unmarshal(data, &sf); err != nil {
		return nil, err
	}
	if sf.Version != stateVersion {
		return nil, fmt.Errorf("version %d, want %d", sf.Version, stateVersion)
	}
	seenID := make(map[string]bool, len(sf.Instances))
	seenPID := make(map[int]bool, len(sf.Instances))
	for i := range sf.Instances {
		e := &sf.Instances[i]
		if err := e.validate(); err != nil {
			return nil, fmt.Errorf("instances[%d]: %w", i, err)
		}
		if seenID[e.ID] {
			return nil, fmt.Errorf("instances[%d]: duplicate id %s", i, e.ID)
		}
		if seenPID[e.PID] {
			return nil, fmt.Errorf("instances[%d]: duplicate pid %d", i, e.PID)
		}
		seenID[e.ID], seenPID[e.PID] = true, true
	}
	return sf.Instances, nil
}

// marshalState renders entries as a state file.
func marshalState(entries []stateEntry) ([]byte, error) {
	if entries == nil {
		entries = []stateEntry{}
	}
	b, err := json.MarshalIndent(stateFile{Version: stateVersion, Instances: entries}, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// readStateFile reads and parses path; a missing file is an empty state.
func readStateFile(path string) ([]stateEntry, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxStateSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxStateSize {
		return nil, fmt.Errorf("larger than %d bytes", maxStateSize)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, nil
	}
	return parseState(data)
}

// writeStateFile replaces path atomically (temporary file and rename) so a
// crash leaves either the old or the new state, never a torn one. It does
// not fsync: the state only has to outlive this process, not the machine
// (a reboot ends the instances too).
func writeStateFile(path string, entries []stateEntry) error {
	data, err := marshalState(entries)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".state-*.tmp")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(data)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o600); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return nil
}
