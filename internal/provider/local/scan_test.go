package local

import (
	"maps"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidegpu/tidegpu/internal/provider"
)

func TestParseEnviron(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want map[string]string
	}{
		{name: "empty", in: "", want: map[string]string{}},
		{name: "trailing NUL", in: "A=1\x00B=2\x00", want: map[string]string{"A": "1", "B": "2"}},
		{name: "no trailing NUL", in: "A=1\x00B=2", want: map[string]string{"A": "1", "B": "2"}},
		{name: "empty value", in: "A=\x00", want: map[string]string{"A": ""}},
		{name: "value with =", in: "A=b=c\x00", want: map[string]string{"A": "b=c"}},
		{name: "first occurrence wins", in: "A=1\x00A=2\x00", want: map[string]string{"A": "1"}},
		{name: "no = is skipped", in: "junk\x00A=1", want: map[string]string{"A": "1"}},
		{name: "empty name is skipped", in: "=x\x00\x00\x00A=1", want: map[string]string{"A": "1"}},
		{name: "names are case sensitive", in: "a=1\x00A=2", want: map[string]string{"a": "1", "A": "2"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := parseEnviron([]byte(tc.in)); !maps.Equal(got, tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestMarked(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want bool
	}{
		{name: "exact", env: map[string]string{envStateDir: "/s/d"}, want: true},
		{name: "absent", env: map[string]string{}, want: false},
		{name: "empty", env: map[string]string{envStateDir: ""}, want: false},
		{name: "trailing slash", env: map[string]string{envStateDir: "/s/d/"}, want: false},
		{name: "parent", env: map[string]string{envStateDir: "/s"}, want: false},
		{name: "sibling with the same prefix", env: map[string]string{envStateDir: "/s/d2"}, want: false},
		{name: "other case", env: map[string]string{envStateDir: "/S/D"}, want: false},
	}
	for _, tc := range tests {
		if got := marked(tc.env, "/s/d"); got != tc.want {
			t.Errorf("%s: marked = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// launchEnv is the environment Launch gives an instance with these values,
// as parseEnviron sees it.
func launchEnv(t testing.TB, v templateVars, tags ownerTags) map[string]string {
	t.Helper()
	env, err := buildEnv([]string{"PATH=/bin"}, nil, v, tags)
	if err != nil {
		t.Fatal(err)
	}
	return parseEnviron([]byte(strings.Join(env, "\x00") + "\x00"))
}

func TestEnvEntry(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.FixedZone("CET", 3600))
	v := templateVars{Port: 41000, Host: "127.0.0.1", InstanceID: "local-00c0ffee", Pool: "chat"}
	tags := ownerTags{StateDir: "/s", LaunchedAt: at, Market: provider.MarketOnDemand, InstanceType: "g5.xlarge"}
	want := stateEntry{
		ID: "local-00c0ffee", Pool: "chat", Port: 41000, Address: "127.0.0.1:41000",
		LaunchedAt: at, Market: provider.MarketOnDemand, InstanceType: "g5.xlarge",
	}
	with := func(k, val string) map[string]string {
		env := launchEnv(t, v, tags)
		env[k] = val
		return env
	}
	without := func(k string) map[string]string {
		env := launchEnv(t, v, tags)
		delete(env, k)
		return env
	}
	tests := []struct {
		name    string
		env     map[string]string
		want    stateEntry
		wantErr string
	}{
		{name: "what Launch sets reads back", env: launchEnv(t, v, tags), want: want},
		{name: "empty pool", env: with(envPool, ""), want: func() stateEntry { e := want; e.Pool = ""; return e }()},
		{name: "empty type means the default", env: with(envInstanceType, ""), want: func() stateEntry { e := want; e.InstanceType = DefaultInstanceType; return e }()},
		{name: "IPv6 host", env: with(envHost, "::1"), want: func() stateEntry { e := want; e.Address = "[::1]:41000"; return e }()},
		{name: "no id", env: without(envInstanceID), wantErr: envInstanceID},
		{name: "bad id", env: with(envInstanceID, "../etc"), wantErr: envInstanceID},
		{name: "no pool", env: without(envPool), wantErr: envPool},
		{name: "no port", env: without(envPort), wantErr: envPort},
		{name: "port 0", env: with(envPort, "0"), wantErr: envPort},
		{name: "port too big", env: with(envPort, "65536"), wantErr: envPort},
		{name: "port not a number", env: with(envPort, "80x"), wantErr: envPort},
		{name: "no host", env: without(envHost), wantErr: envHost},
		{name: "no launch time", env: without(envLaunchedAt), wantErr: envLaunchedAt},
		{name: "bad launch time", env: with(envLaunchedAt, "yesterday"), wantErr: envLaunchedAt},
		{name: "no market", env: without(envMarket), wantErr: envMarket},
		{name: "bad market", env: with(envMarket, "reserved"), wantErr: "reserved"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := envEntry(tc.env)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !got.LaunchedAt.Equal(tc.want.LaunchedAt) {
				t.Errorf("LaunchedAt %v, want %v", got.LaunchedAt, tc.want.LaunchedAt)
			}
			got.LaunchedAt, tc.want.LaunchedAt = time.Time{}, time.Time{}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// FuzzEnviron feeds arbitrary bytes as /proc/<pid>/environ (written by
// whatever process runs, so outside input): parsing must not panic, must
// keep every name and value free of NUL and every name free of '='; an
// entry rebuilt from it must be one Launch could have made, and the
// environment Launch would give that entry must read back the same.
func FuzzEnviron(f *testing.F) {
	v := templateVars{Port: 41000, Host: "127.0.0.1", InstanceID: "local-00c0ffee", Pool: "chat"}
	good, _ := buildEnv(nil, nil, v, ownerTags{StateDir: "/s", LaunchedAt: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC), Market: provider.MarketSpot})
	f.Add([]byte(strings.Join(good, "\x00") + "\x00"))
	f.Add([]byte("A=1\x00A=2\x00=x\x00junk"))
	f.Add([]byte(envInstanceID + "=local-00000001\x00" + envPool + "=\x00" + envPort + "=1\x00" + envHost + "=[\x00" +
		envLaunchedAt + "=2026-01-01T00:00:00+01:00\x00" + envMarket + "=spot"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		env := parseEnviron(data)
		for k, val := range env {
			if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(val, 0) {
				t.Fatalf("bad entry %q=%q", k, val)
			}
		}
		e, err := envEntry(env)
		if err != nil {
			return
		}
		e.PID, e.StartTime = 4242, 1
		if err := e.validate(); err != nil {
			return // scanMarked refuses it too
		}
		host, _, _ := net.SplitHostPort(e.Address)
		v := templateVars{Port: e.Port, Host: host, InstanceID: e.ID, Pool: e.Pool}
		tags := ownerTags{StateDir: "/s", LaunchedAt: e.LaunchedAt, Market: e.Market, InstanceType: e.InstanceType}
		again, err := envEntry(launchEnv(t, v, tags))
		if err != nil {
			t.Fatalf("the environment of an accepted entry does not read back: %v", err)
		}
		again.PID, again.StartTime = e.PID, e.StartTime
		if !again.LaunchedAt.Equal(e.LaunchedAt) {
			t.Fatalf("launch time %v read back as %v", e.LaunchedAt, again.LaunchedAt)
		}
		again.LaunchedAt = e.LaunchedAt
		if !reflect.DeepEqual(again, e) {
			t.Fatalf("round trip changed the entry:\n%+v\n%+v", e, again)
		}
	})
}

func TestPlanOrphans(t *testing.T) {
	entry := func(id string, pid int, start uint64) stateEntry {
		e := validStateEntry()
		e.ID, e.PID, e.StartTime = id, pid, start
		return e
	}
	mp := func(id string, pid, pgrp int, start uint64) markedProc {
		return markedProc{PID: pid, PGRP: pgrp, StartTime: start, ID: id, Entry: entry(id, pid, start)}
	}
	broken := func(id string, pid, pgrp int, start uint64) markedProc {
		m := mp(id, pid, pgrp, start)
		m.Err = os.ErrInvalid
		return m
	}
	pids := func(ms []markedProc) []int {
		out := []int{}
		for _, m := range ms {
			out = append(out, m.PID)
		}
		return out
	}
	const a, b = "local-0000000a", "local-0000000b"
	tests := []struct {
		name      string
		found     []markedProc
		claimed   []stateEntry
		instances []int
		rest      []int
	}{
		{name: "nothing", instances: []int{}, rest: []int{}},
		{name: "an unrecorded leader is an instance", found: []markedProc{mp(a, 10, 10, 5)}, instances: []int{10}, rest: []int{}},
		{
			name:      "a recorded process is the state's business",
			found:     []markedProc{mp(a, 10, 10, 5)},
			claimed:   []stateEntry{entry(a, 10, 5)},
			instances: []int{}, rest: []int{},
		},
		{
			name:      "same pid with another start time is another process",
			found:     []markedProc{mp(b, 10, 10, 6)},
			claimed:   []stateEntry{entry(a, 10, 5)},
			instances: []int{10}, rest: []int{},
		},
		{
			name:      "members of a recorded instance are left to the caller",
			found:     []markedProc{mp(a, 10, 10, 5), mp(a, 11, 10, 7), mp(a, 12, 12, 8)},
			claimed:   []stateEntry{entry(a, 10, 5)},
			instances: []int{}, rest: []int{11, 12},
		},
		{
			name:      "the oldest leader of an id is the instance",
			found:     []markedProc{mp(a, 30, 30, 9), mp(a, 20, 20, 5), mp(a, 21, 20, 6)},
			instances: []int{20}, rest: []int{21, 30},
		},
		{
			name:      "same start time: the lower pid",
			found:     []markedProc{mp(a, 31, 31, 5), mp(a, 30, 30, 5)},
			instances: []int{30}, rest: []int{31},
		},
		{
			name:      "a member whose leader is gone is not an instance",
			found:     []markedProc{mp(a, 21, 20, 6)},
			instances: []int{}, rest: []int{21},
		},
		{
			name:      "broken tags are never an instance",
			found:     []markedProc{broken(a, 20, 20, 5), mp(a, 40, 40, 9), broken("", 50, 50, 1)},
			instances: []int{40}, rest: []int{50, 20},
		},
		{
			name:      "several ids, sorted by id",
			found:     []markedProc{mp(b, 60, 60, 1), mp(a, 70, 70, 2), mp(b, 61, 60, 3)},
			instances: []int{70, 60}, rest: []int{61},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			inst, rest := planOrphans(tc.found, tc.claimed)
			if got := pids(inst); !slices.Equal(got, tc.instances) {
				t.Errorf("instances %v, want %v", got, tc.instances)
			}
			if got := pids(rest); !slices.Equal(got, tc.rest) {
				t.Errorf("rest %v, want %v", got, tc.rest)
			}
		})
	}
}

// fakeProc writes a /proc-like tree: per pid a stat line with the given
// state, ppid, pgrp and start time, an environ and a cmdline.
type fakeProc struct {
	root string
	t    *testing.T
}

func (f fakeProc) add(pid int, state byte, ppid, pgrp int, start uint64, env []string, cmdline string) {
	f.t.Helper()
	dir := filepath.Join(f.root, strconv.Itoa(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		f.t.Fatal(err)
	}
	stat := strconv.Itoa(pid) + " (x y) " + string(state) + " " + strconv.Itoa(ppid) + " " + strconv.Itoa(pgrp) +
		" 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 " + strconv.FormatUint(start, 10) + " 0 0"
	files := map[string]string{"stat": stat, "cmdline": cmdline}
	if env != nil {
		files["environ"] = strings.Join(env, "\x00") + "\x00"
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			f.t.Fatal(err)
		}
	}
}

func TestScanMarked(t *testing.T) {
	root := t.TempDir()
	fp := fakeProc{root: root, t: t}
	v := func(id string, port int) templateVars {
		return templateVars{Port: port, Host: "127.0.0.1", InstanceID: id, Pool: "chat"}
	}
	tags := ownerTags{StateDir: "/s", LaunchedAt: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC), Market: provider.MarketSpot, InstanceType: "t"}
	env := func(id string, port int, extra ...string) []string {
		e, err := buildEnv(nil, extra, v(id, port), tags)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	mine := env("local-00000001", 41001)
	// This process (100) is in group 90, child of 50, child of 10, child of 1.
	fp.add(1, 'S', 0, 1, 1, mine, "init")
	fp.add(10, 'S', 1, 10, 2, mine, "grandparent")
	fp.add(50, 'S', 10, 50, 3, mine, "parent")
	fp.add(100, 'R', 50, 90, 4, mine, "self")
	fp.add(101, 'S', 100, 90, 5, mine, "in my group")
	fp.add(200, 'S', 1, 200, 6, mine, "tidegpu\x00sim\x00")                                                  // found
	fp.add(201, 'S', 200, 200, 7, mine, "member")                                                            // found (a member)
	fp.add(202, 'Z', 1, 202, 8, mine, "zombie")                                                              // exited
	fp.add(203, 'S', 1, 203, 9, nil, "no environ")                                                           // unreadable
	fp.add(204, 'S', 1, 204, 10, env("local-00000004", 41004, envStateDir+"=/elsewhere"), "")                // the spec cannot forge it ...
	fp.add(205, 'S', 1, 205, 11, append([]string{envStateDir + "=/other"}, mine...), "")                     // ... and the first occurrence counts
	fp.add(206, 'S', 1, 206, 12, []string{envStateDir + "=/s/", envInstanceID + "=local-00000006"}, "")      // not exact
	fp.add(207, 'S', 1, 207, 13, []string{envStateDir + "=/s", envInstanceID + "=local-00000007"}, "")       // found, broken tags
	fp.add(208, 'S', 1, 208, 14, []string{envStateDir + "=/s", envInstanceID + "=nope", envPort + "=1"}, "") // found, broken id
	fp.add(209, 'S', 1, 209, 0, env("local-00000009", 41009), "")                                            // start time 0: invalid
	if err := os.MkdirAll(filepath.Join(root, "210", "environ"), 0o755); err != nil {                        // read error
		t.Fatal(err)
	}
	fp.add(211, 'S', 1, 211, 16, nil, "")
	if err := os.Remove(filepath.Join(root, "211", "stat")); err != nil { // gone between readdir and stat
		t.Fatal(err)
	}
	for _, name := range []string{"self", "0200", "sys"} {
		if err := os.MkdirAll(filepath.Join(root, name), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "0200", "environ"), []byte(envStateDir+"=/s"), 0o644); err != nil {
		t.Fatal(err)
	}

	g := newScanGuard(root, 100, 90)
	if want := map[int]bool{50: true, 10: true}; !maps.Equal(g.ancestors, want) {
		t.Fatalf("ancestors %v, want %v", g.ancestors, want)
	}
	found, err := scanMarked(root, "/s", g)
	if err != nil {
		t.Fatal(err)
	}
	byPID := map[int]markedProc{}
	for _, m := range found {
		byPID[m.PID] = m
	}
	got := slices.Sorted(maps.Keys(byPID))
	if want := []int{200, 201, 204, 207, 208, 209}; !slices.Equal(got, want) {
		t.Fatalf("found pids %v, want %v", got, want)
	}
	m := byPID[200]
	want := stateEntry{
		ID: "local-00000001", Pool: "chat", PID: 200, Port: 41001, Address: "127.0.0.1:41001", StartTime: 6,
		LaunchedAt: tags.LaunchedAt, Market: provider.MarketSpot, InstanceType: "t", Command: []string{"tidegpu", "sim"},
	}
	if m.Err != nil || m.PGRP != 200 || m.ID != want.ID || !reflect.DeepEqual(m.Entry, want) {
		t.Errorf("pid 200: %+v, want entry %+v", m, want)
	}
	if m := byPID[201]; m.Err != nil || m.PGRP != 200 || m.leader() || m.ID != "local-00000001" {
		t.Errorf("pid 201: %+v", m)
	}
	if m := byPID[204]; m.Err != nil || m.ID != "local-00000004" {
		t.Errorf("pid 204: %+v", m)
	}
	if m := byPID[207]; m.Err == nil || m.ID != "local-00000007" {
		t.Errorf("pid 207: %+v, want broken tags with its id", m)
	}
	if m := byPID[208]; m.Err == nil || m.ID != "" {
		t.Errorf("pid 208: %+v, want broken tags and no id", m)
	}
	if m := byPID[209]; m.Err == nil || !strings.Contains(m.Err.Error(), "startTime") {
		t.Errorf("pid 209: %+v, want an invalid entry", m)
	}

	if _, err := scanMarked(filepath.Join(root, "missing"), "/s", g); err == nil {
		t.Error("scan of a missing root: no error")
	}
}

// BenchmarkScanMarked measures one scan of the real /proc (what Adopt adds
// to a start).
func BenchmarkScanMarked(b *testing.B) {
	g := newScanGuard(procRoot, os.Getpid(), -1)
	for b.Loop() {
		if _, err := scanMarked(procRoot, "/nonexistent/tidegpu-bench", g); err != nil {
			b.Fatal(err)
		}
	}
}
