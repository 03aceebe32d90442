package local

import (
	"encoding/json"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tidegpu/tidegpu/internal/provider"
)

func TestRenderCommand(t *testing.T) {
	v := templateVars{Port: 8123, Host: "127.0.0.1", InstanceID: "local-0a1b2c3d", Pool: "chat"}
	tests := []struct {
		name    string
		tmpl    []string
		selfExe string
		want    []string
		wantErr string
	}{
		{name: "empty means the built-in simulator", tmpl: nil, selfExe: "/usr/bin/tidegpu", want: []string{"/usr/bin/tidegpu", "sim"}},
		{name: "empty without a binary", tmpl: []string{}, wantErr: "tidegpu binary is unknown"},
		{name: "plain arguments pass through", tmpl: []string{"ollama", "serve"}, want: []string{"ollama", "serve"}},
		{
			name: "every variable",
			tmpl: []string{"srv", "--listen={{.Host}}:{{.Port}}", "--name={{.InstanceID}}", "{{.Pool}}"},
			want: []string{"srv", "--listen=127.0.0.1:8123", "--name=local-0a1b2c3d", "chat"},
		},
		{name: "template in the program name", tmpl: []string{"/opt/{{.Pool}}/bin/serve"}, want: []string{"/opt/chat/bin/serve"}},
		{name: "braces without a template are literal", tmpl: []string{"echo", "{not a template}"}, want: []string{"echo", "{not a template}"}},
		{name: "unknown field", tmpl: []string{"srv", "--x={{.Model}}"}, wantErr: `command[1] "--x={{.Model}}"`},
		{name: "parse error", tmpl: []string{"srv", "{{.Port"}, wantErr: "command[1]"},
		{name: "empty program name", tmpl: []string{"{{if false}}x{{end}}", "a"}, wantErr: "empty program name"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := renderCommand(tc.tmpl, tc.selfExe, v)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestBuildEnv(t *testing.T) {
	v := templateVars{Port: 9000, Host: "127.0.0.1", InstanceID: "local-00000001", Pool: "p"}
	tags := ownerTags{
		StateDir:     "/var/lib/tidegpu",
		LaunchedAt:   time.Date(2026, 3, 1, 12, 0, 0, 5, time.UTC),
		Market:       provider.MarketOnDemand,
		InstanceType: "g5.xlarge",
	}
	own := []string{
		"TIDEGPU_PORT=9000",
		"TIDEGPU_HOST=127.0.0.1",
		"TIDEGPU_INSTANCE_ID=local-00000001",
		"TIDEGPU_POOL=p",
		"OLLAMA_HOST=127.0.0.1:9000",
		"TIDEGPU_LOCAL_STATE_DIR=/var/lib/tidegpu",
		"TIDEGPU_LOCAL_LAUNCHED_AT=2026-03-01T12:00:00.000000005Z",
		"TIDEGPU_LOCAL_MARKET=on-demand",
		"TIDEGPU_LOCAL_INSTANCE_TYPE=g5.xlarge",
	}
	tests := []struct {
		name        string
		base, extra []string
		want        []string
		wantErr     string
	}{
		{name: "nothing given", want: own},
		{
			name:  "base then extra then own",
			base:  []string{"PATH=/bin", "HOME=/root"},
			extra: []string{"OLLAMA_MODELS=/models"},
			want:  append([]string{"PATH=/bin", "HOME=/root", "OLLAMA_MODELS=/models"}, own...),
		},
		{
			name:  "extra overrides base in place",
			base:  []string{"A=1", "B=2"},
			extra: []string{"A=3"},
			want:  append([]string{"A=3", "B=2"}, own...),
		},
		{
			name:  "own variables win over base and extra",
			base:  []string{"TIDEGPU_PORT=1", "X=y"},
			extra: []string{"OLLAMA_HOST=0.0.0.0:11434"},
			want:  append([]string{"TIDEGPU_PORT=9000", "X=y", "OLLAMA_HOST=127.0.0.1:9000", own[1], own[2], own[3]}, own[5:]...),
		},
		{
			name:  "the ownership marker cannot be forged or dropped",
			base:  []string{"TIDEGPU_LOCAL_STATE_DIR=/elsewhere"},
			extra: []string{"TIDEGPU_LOCAL_STATE_DIR=", "TIDEGPU_LOCAL_MARKET=spot"},
			want:  append(append([]string{own[5], own[7]}, own[:5]...), own[6], own[8]),
		},
		{name: "empty value is fine", extra: []string{"EMPTY="}, want: append([]string{"EMPTY="}, own...)},
		{name: "value with =", extra: []string{"ARGS=a=b"}, want: append([]string{"ARGS=a=b"}, own...)},
		{name: "odd base entries pass through", base: []string{"=C:=C:\\", "weird"}, want: append([]string{"=C:=C:\\", "weird"}, own...)},
		{name: "extra without =", extra: []string{"OK=1", "NOPE"}, wantErr: `env[1] "NOPE"`},
		{name: "extra with empty name", extra: []string{"=x"}, wantErr: "env[0]"},
		{name: "extra with NUL", extra: []string{"A=b\x00c"}, wantErr: "env[0]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := buildEnv(tc.base, tc.extra, v, tags)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestDescribeWait(t *testing.T) {
	tests := []struct {
		ws   syscall.WaitStatus
		want string
	}{
		{0, "exited with status 0"},
		{3 << 8, "exited with status 3"},
		{syscall.WaitStatus(syscall.SIGKILL), "killed by signal 9 (killed)"},
		{syscall.WaitStatus(syscall.SIGTERM), "killed by signal 15 (terminated)"},
		{syscall.WaitStatus(syscall.SIGSEGV) | 0x80, "killed by signal 11 (segmentation fault), core dumped"},
	}
	for _, tc := range tests {
		if got := describeWait(tc.ws); got != tc.want {
			t.Errorf("describeWait(%#x) = %q, want %q", uint32(tc.ws), got, tc.want)
		}
	}
}

func TestParseStat(t *testing.T) {
	// Fields 3.. of a real stat line; starttime (field 22) is 987654.
	rest := "S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10 18446744073709551615"
	tests := []struct {
		name    string
		in      string
		want    procStat
		wantErr bool
	}{
		{name: "plain", in: "4242 (sleep) " + rest, want: procStat{State: 'S', PPID: 1, PGRP: 4242, StartTime: 987654}},
		{name: "name with spaces and parens", in: "4242 (a) b (c)) " + rest, want: procStat{State: 'S', PPID: 1, PGRP: 4242, StartTime: 987654}},
		{name: "zombie", in: "7 (x) Z" + rest[1:], want: procStat{State: 'Z', PPID: 1, PGRP: 4242, StartTime: 987654}},
		{name: "bad ppid", in: "4242 (x) S x" + rest[3:], wantErr: true},
		{name: "no name", in: "4242 sleep " + rest, wantErr: true},
		{name: "truncated", in: "4242 (sleep) S 1 2 3", wantErr: true},
		{name: "bad starttime", in: "4242 (x) " + strings.Replace(rest, "987654", "-1", 1), wantErr: true},
		{name: "bad state", in: "4242 (x) SS" + rest[1:], wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseStat([]byte(tc.in))
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if err == nil && got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func validStateEntry() stateEntry {
	return stateEntry{
		ID: "local-0123abcd", Pool: "chat", PID: 4242, Port: 40000, Address: "127.0.0.1:40000",
		StartTime: 987654, LaunchedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		Market: provider.MarketSpot, InstanceType: "local", Command: []string{"tidegpu", "sim"},
	}
}

func TestParseState(t *testing.T) {
	mutate := func(f func(*stateEntry)) []byte {
		e := validStateEntry()
		f(&e)
		b, _ := json.Marshal(stateFile{Version: stateVersion, Instances: []stateEntry{e}})
		return b
	}
	two := func(f func(*stateEntry)) []byte {
		a, b := validStateEntry(), validStateEntry()
		f(&b)
		out, _ := json.Marshal(stateFile{Version: stateVersion, Instances: []stateEntry{a, b}})
		return out
	}
	tests := []struct {
		name    string
		in      []byte
		want    int
		wantErr string
	}{
		{name: "valid", in: mutate(func(*stateEntry) {}), want: 1},
		{name: "empty list", in: []byte(`{"version":1,"instances":[]}`), want: 0},
		{name: "null list", in: []byte(`{"version":1,"instances":null}`), want: 0},
		{name: "unknown fields are tolerated", in: []byte(`{"version":1,"instances":[],"future":true}`), want: 0},
		{name: "not json", in: []byte("garbage"), wantErr: "invalid character"},
		{name: "wrong version", in: []byte(`{"version":2,"instances":[]}`), wantErr: "version 2"},
		{name: "missing version", in: []byte(`{"instances":[]}`), wantErr: "version 0"},
		{name: "pid 1", in: mutate(func(e *stateEntry) { e.PID = 1 }), wantErr: "pid 1"},
		{name: "pid 0", in: mutate(func(e *stateEntry) { e.PID = 0 }), wantErr: "pid 0"},
		{name: "negative pid", in: mutate(func(e *stateEntry) { e.PID = -5 }), wantErr: "pid -5"},
		{name: "huge pid", in: mutate(func(e *stateEntry) { e.PID = 1 << 30 }), wantErr: "out of range"},
		{name: "bad id", in: mutate(func(e *stateEntry) { e.ID = "../../etc/passwd" }), wantErr: "id"},
		{name: "bad port", in: mutate(func(e *stateEntry) { e.Port = 70000 }), wantErr: "port"},
		{name: "address and port disagree", in: mutate(func(e *stateEntry) { e.Address = "127.0.0.1:1" }), wantErr: "address"},
		{name: "no start time", in: mutate(func(e *stateEntry) { e.StartTime = 0 }), wantErr: "startTime"},
		{name: "bad market", in: mutate(func(e *stateEntry) { e.Market = "reserved" }), wantErr: "market"},
		{name: "duplicate id", in: two(func(e *stateEntry) { e.PID = 4243 }), wantErr: "duplicate id"},
		{name: "duplicate pid", in: two(func(e *stateEntry) { e.ID = "local-0123abce" }), wantErr: "duplicate pid"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseState(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != tc.want {
				t.Fatalf("got %d entries, want %d", len(got), tc.want)
			}
		})
	}
}

// FuzzParseState feeds arbitrary bytes to the parser of the state file (read
// at start from disk, so outside input): it must not panic, and whatever it
// accepts must satisfy the invariants the signalling code relies on and
// survive a write/read round trip unchanged.
func FuzzParseState(f *testing.F) {
	valid, _ := marshalState([]stateEntry{validStateEntry()})
	f.Add(valid)
	f.Add([]byte(`{"version":1,"instances":[]}`))
	f.Add([]byte(`{"version":1,"instances":[{"id":"local-00000000","pid":-1}]}`))
	f.Add([]byte(`{"version":1,"instances":[{"id":"local-00000000","pid":2,"port":1,"address":"[::1]:1","startTime":1}]}`))
	f.Add([]byte(`{"version":1,"instances":[{"pid":1e99}]}`))
	f.Add([]byte(`null`))
	f.Add([]byte(``))
	f.Fuzz(func(t *testing.T, data []byte) {
		entries, err := parseState(data)
		if err != nil {
			return
		}
		ids := map[string]bool{}
		for _, e := range entries {
			if e.PID <= 1 || e.PID > maxPID || e.Port < 1 || e.Port > 65535 || e.StartTime == 0 || !validID(e.ID) || ids[e.ID] {
				t.Fatalf("accepted an invalid entry %+v", e)
			}
			ids[e.ID] = true
		}
		out, err := marshalState(entries)
		if err != nil {
			t.Fatalf("marshal accepted entries: %v", err)
		}
		again, err := parseState(out)
		if err != nil {
			t.Fatalf("re-parse of written state: %v\n%s", err, out)
		}
		out2, _ := marshalState(again)
		if string(out) != string(out2) {
			t.Fatalf("round trip changed the state:\n%s\n%s", out, out2)
		}
	})
}
