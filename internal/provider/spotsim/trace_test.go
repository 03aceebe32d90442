package spotsim

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseZone(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		binary bool
		gap    time.Duration
		want   []int
		err    string
	}{
		{"aws1 style", `{"metadata": {"gap_seconds": 300}, "data": [0, 0, 4, 4, 3]}`, false, 300 * time.Second, []int{0, 0, 4, 4, 3}, ""},
		{"aws3 style binary", `{"metadata": {"gap_seconds": 300}, "data": [0, 1, 1, 0]}`, true, 300 * time.Second, []int{0, Unlimited, Unlimited, 0}, ""},
		{"counts kept when not binary", `{"metadata": {"gap_seconds": 60}, "data": [1, 0]}`, false, time.Minute, []int{1, 0}, ""},
		{"fractional gap", `{"metadata": {"gap_seconds": 0.5}, "data": [1]}`, false, 500 * time.Millisecond, []int{1}, ""},
		{"whole float values", `{"metadata": {"gap_seconds": 300}, "data": [2.0, 1e0]}`, false, 300 * time.Second, []int{2, 1}, ""},
		{"unknown fields ignored", `{"metadata": {"gap_seconds": 300, "x": 1}, "data": [1], "note": "hi"}`, false, 300 * time.Second, []int{1}, ""},
		{"no metadata", `{"data": [1]}`, false, 0, nil, "gap_seconds is missing"},
		{"no gap", `{"metadata": {}, "data": [1]}`, false, 0, nil, "gap_seconds is missing"},
		{"zero gap", `{"metadata": {"gap_seconds": 0}, "data": [1]}`, false, 0, nil, "gap_seconds"},
		{"negative gap", `{"metadata": {"gap_seconds": -5}, "data": [1]}`, false, 0, nil, "gap_seconds"},
		{"gap above a day", `{"metadata": {"gap_seconds": 90000}, "data": [1]}`, false, 0, nil, "gap_seconds"},
		{"gap below a millisecond", `{"metadata": {"gap_seconds": 0.0001}, "data": [1]}`, false, 0, nil, "below a millisecond"},
		{"empty data", `{"metadata": {"gap_seconds": 300}, "data": []}`, false, 0, nil, "data is empty"},
		{"null data", `{"metadata": {"gap_seconds": 300}, "data": null}`, false, 0, nil, "data is empty"},
		{"negative value", `{"metadata": {"gap_seconds": 300}, "data": [1, -1]}`, false, 0, nil, "data[1]"},
		{"fractional value", `{"metadata": {"gap_seconds": 300}, "data": [1.5]}`, false, 0, nil, "data[0]"},
		{"huge value", `{"metadata": {"gap_seconds": 300}, "data": [1e12]}`, false, 0, nil, "data[0]"},
		{"string value", `{"metadata": {"gap_seconds": 300}, "data": ["x"]}`, false, 0, nil, "invalid spot trace"},
		{"not json", `gap 300`, false, 0, nil, "invalid spot trace"},
		{"trailing data", `{"metadata": {"gap_seconds": 300}, "data": [1]} {}`, false, 0, nil, "data after"},
		{"truncated", `{"metadata": {"gap_seconds": 300}, "data": [1,`, false, 0, nil, "invalid spot trace"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			zt, err := ParseZone(strings.NewReader(tc.in), "z1", tc.binary)
			if tc.err != "" {
				if !errors.Is(err, ErrTrace) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want ErrTrace mentioning %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if zt.Zone != "z1" || zt.Gap != tc.gap || !slices.Equal(zt.Capacity, tc.want) {
				t.Fatalf("got %+v, want gap %v capacity %v", zt, tc.gap, tc.want)
			}
		})
	}
}

func TestZoneFromFile(t *testing.T) {
	tests := map[string]string{
		"us-east-1f_v100_1.json":            "us-east-1f",
		"/data/aws3/us-west-2c_v100_1.json": "us-west-2c",
		"zone-a.json":                       "zone-a",
		"plain":                             "plain",
		"_odd.json":                         "_odd.json",
	}
	for in, want := range tests {
		if got := ZoneFromFile(in); got != want {
			t.Errorf("ZoneFromFile(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestLoadTrace(t *testing.T) {
	write := func(t *testing.T, files map[string]string) string {
		dir := t.TempDir()
		for name, body := range files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	t.Run("zones sorted and cut to the shortest", func(t *testing.T) {
		dir := write(t, map[string]string{
			"b_v100_1.json": `{"metadata": {"gap_seconds": 300}, "data": [1, 2, 3]}`,
			"a_v100_1.json": `{"metadata": {"gap_seconds": 300}, "data": [4, 0]}`,
			"README.md":     "not a trace",
		})
		tr, err := LoadTrace(dir, false)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(tr.ZoneNames(), []string{"a", "b"}) || tr.Steps != 2 || tr.Gap != 300*time.Second ||
			!slices.Equal(tr.Zones[1].Capacity, []int{1, 2}) || tr.Duration() != 10*time.Minute {
			t.Fatalf("trace = %+v", tr)
		}
	})
	for name, files := range map[string]map[string]string{
		"different gaps": {
			"a.json": `{"metadata": {"gap_seconds": 300}, "data": [1]}`,
			"b.json": `{"metadata": {"gap_seconds": 60}, "data": [1]}`,
		},
		"a broken file": {"a.json": `{"metadata": {"gap_seconds": 300}, "data": [-1]}`},
		"no files":      {},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := LoadTrace(write(t, files), false); !errors.Is(err, ErrTrace) {
				t.Fatalf("err = %v, want ErrTrace", err)
			}
		})
	}
	t.Run("duplicate zone", func(t *testing.T) {
		z := ZoneTrace{Zone: "a", Gap: time.Second, Capacity: []int{1}}
		if _, err := NewTrace([]ZoneTrace{z, z}); !errors.Is(err, ErrTrace) {
			t.Fatalf("err = %v", err)
		}
	})
}

func FuzzParseZone(f *testing.F) {
	f.Add([]byte(`{"metadata": {"gap_seconds": 300}, "data": [0, 0, 4, 4, 3]}`), false)
	f.Add([]byte(`{"metadata": {"gap_seconds": 300}, "data": [0, 1]}`), true)
	f.Add([]byte(`{"metadata": {"gap_seconds": 1e-9}, "data": [1.0]}`), false)
	f.Add([]byte(`{"metadata": {"gap_seconds": "300"}, "data": ["4"]}`), false)
	f.Add([]byte(`[]`), false)
	f.Fuzz(func(t *testing.T, b []byte, binary bool) {
		zt, err := ParseZone(strings.NewReader(string(b)), "z", binary)
		if err != nil {
			if !errors.Is(err, ErrTrace) {
				t.Fatalf("error not wrapping ErrTrace: %v", err)
			}
			return
		}
		if zt.Gap <= 0 || zt.Gap > MaxGap {
			t.Fatalf("gap %v out of range", zt.Gap)
		}
		if len(zt.Capacity) == 0 || len(zt.Capacity) > MaxTraceSteps {
			t.Fatalf("%d steps", len(zt.Capacity))
		}
		for i, c := range zt.Capacity {
			if c < 0 || (c > MaxCapacity && c != Unlimited) || (binary && c != 0 && c != Unlimited) {
				t.Fatalf("capacity[%d] = %d", i, c)
			}
		}
		if _, err := NewTrace([]ZoneTrace{zt}); err != nil {
			t.Fatalf("a parsed zone does not make a trace: %v", err)
		}
	})
}
