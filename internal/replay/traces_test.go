package replay

// The trace files here follow the SpotHedge / SkyServe artifact's format
// (EuroSys 2025) as described in /work/shared/data/README.md: one JSON file
// per availability zone, {"metadata": {"gap_seconds": 300}, "data": [...]},
// data[i] the spot instances the zone could hold during the i-th gap; in
// the aws3 traces only 0 or 1, 1 meaning capacity was available
// (unlimited).

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tidegpu/tidegpu/internal/provider/spotsim"
)

// writeZone writes one zone file of the artifact's format in dir.
func writeZone(t *testing.T, dir, name string, gapSeconds float64, data ...int) {
	t.Helper()
	vals := make([]string, len(data))
	for i, v := range data {
		vals[i] = fmt.Sprint(v)
	}
	body := fmt.Sprintf(`{"metadata": {"gap_seconds": %v}, "data": [%s]}`, gapSeconds, strings.Join(vals, ", "))
	if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestLoadTraces(t *testing.T) {
	dir := t.TempDir()
	writeZone(t, dir, "us-east-1a_v100_1.json", 300, 0, 1, 1, 0)
	writeZone(t, dir, "us-east-1b_v100_1.json", 300, 1, 1, 1, 1, 1)
	writeZone(t, dir, "us-west-2c_v100_1.json", 300, 4, 3, 0, 2)
	writeZone(t, dir, "eu-west-1a_x.json", 60, 2, 2) // other gap, not selected
	if err := os.WriteFile(filepath.Join(dir, "README.md"), []byte("not a trace"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "us-east-1a_old.json"), 0o755); err != nil { // a folder: ignored
		t.Fatal(err)
	}
	U := spotsim.Unlimited

	tests := []struct {
		name     string
		zones    []string
		capacity CapacityMode
		mode     CapacityMode
		want     map[string][]int
		steps    int
	}{
		{"auto: only 0 and 1 is binary", []string{"us-east-1b", "us-east-1a"}, CapacityAuto, CapacityBinary,
			map[string][]int{"us-east-1a": {0, U, U, 0}, "us-east-1b": {U, U, U, U}}, 4},
		{"auto: a value above 1 in any selected zone is counts", []string{"us-east-1a", "us-west-2c"}, CapacityAuto, CapacityCount,
			map[string][]int{"us-east-1a": {0, 1, 1, 0}, "us-west-2c": {4, 3, 0, 2}}, 4},
		{"empty mode is auto", []string{"us-east-1a"}, "", CapacityBinary,
			map[string][]int{"us-east-1a": {0, U, U, 0}}, 4},
		{"count forced on a 0/1 file", []string{"us-east-1a"}, CapacityCount, CapacityCount,
			map[string][]int{"us-east-1a": {0, 1, 1, 0}}, 4},
		{"binary forced on counts", []string{"us-west-2c"}, CapacityBinary, CapacityBinary,
			map[string][]int{"us-west-2c": {U, U, 0, U}}, 4},
		{"a subset of the folder's zones, repeats dropped", []string{"us-east-1b", "us-east-1b"}, CapacityAuto, CapacityBinary,
			map[string][]int{"us-east-1b": {U, U, U, U, U}}, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, mode, err := LoadTracesMode(dir, tt.zones, tt.capacity)
			if err != nil {
				t.Fatal(err)
			}
			if mode != tt.mode {
				t.Errorf("mode = %s, want %s", mode, tt.mode)
			}
			if tr.Gap != 5*time.Minute || tr.Steps != tt.steps {
				t.Errorf("gap %v steps %d, want 5m0s and %d", tr.Gap, tr.Steps, tt.steps)
			}
			got := map[string][]int{}
			for _, z := range tr.Zones {
				got[z.Zone] = z.Capacity
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("capacity = %v, want %v", got, tt.want)
			}
			// LoadTraces is the same without the mode.
			tr2, err := LoadTraces(dir, tt.zones, tt.capacity)
			if err != nil || !reflect.DeepEqual(tr, tr2) {
				t.Errorf("LoadTraces = %v, %v; want what LoadTracesMode returned", tr2, err)
			}
		})
	}
}

func TestLoadTracesAnyGap(t *testing.T) {
	dir := t.TempDir()
	writeZone(t, dir, "z1_a.json", 3600, 1, 2, 3)
	writeZone(t, dir, "z2_b.json", 3600, 3, 2)
	tr, mode, err := LoadTracesMode(dir, []string{"z1", "z2"}, CapacityAuto)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Gap != time.Hour || tr.Steps != 2 || mode != CapacityCount {
		t.Errorf("gap %v, steps %d, mode %s: want 1h0m0s, 2 (the shortest) and count", tr.Gap, tr.Steps, mode)
	}
	if got := tr.ZoneNames(); !reflect.DeepEqual(got, []string{"z1", "z2"}) {
		t.Errorf("zones %v", got)
	}
}

func TestLoadTracesErrors(t *testing.T) {
	dir := t.TempDir()
	writeZone(t, dir, "us-east-1a_v100_1.json", 300, 0, 1)
	writeZone(t, dir, "us-east-1c_v100_1.json", 300, 1, 1)
	writeZone(t, dir, "us-east-1c_v100_2.json", 300, 1, 0)
	writeZone(t, dir, "us-east-2a_v100_1.json", 60, 1, 0)
	if err := os.WriteFile(filepath.Join(dir, "us-west-1a_bad.json"), []byte(`{"data": [1]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := t.TempDir()

	tests := []struct {
		name     string
		dir      string
		zones    []string
		capacity CapacityMode
		want     []string // all in the message
	}{
		{"zone missing", dir, []string{"us-east-1a", "us-east-1f"}, CapacityAuto,
			[]string{"zone us-east-1f", dir, "us-east-1f_*.json", "the folder has zones us-east-1a, us-east-1c, us-east-2a, us-west-1a"}},
		{"zone missing from an empty folder", empty, []string{"us-east-1f"}, CapacityAuto,
			[]string{"zone us-east-1f", empty, "no ZONE_*.json files"}},
		{"two files for one zone", dir, []string{"us-east-1c"}, CapacityAuto,
			[]string{"zone us-east-1c", dir, "2 trace files", "us-east-1c_v100_1.json, us-east-1c_v100_2.json", "keep one"}},
		{"gaps differ", dir, []string{"us-east-1a", "us-east-2a"}, CapacityAuto,
			[]string{dir, "us-east-2a", "one gap for all"}},
		{"bad file", dir, []string{"us-west-1a"}, CapacityAuto,
			[]string{"us-west-1a_bad.json", "gap_seconds"}},
		{"no zones", dir, nil, CapacityAuto,
			[]string{"no zones", "spec.placement.availabilityZones"}},
		{"no folder", filepath.Join(dir, "nope"), []string{"us-east-1a"}, CapacityAuto,
			[]string{"nope"}},
		{"bad mode", dir, []string{"us-east-1a"}, "counts",
			[]string{`"counts"`, "auto, count, binary"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LoadTraces(tt.dir, tt.zones, tt.capacity)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
	if _, err := LoadTraces(dir, []string{"us-west-1a"}, CapacityAuto); !errors.Is(err, spotsim.ErrTrace) {
		t.Errorf("a bad file's error %v does not wrap spotsim.ErrTrace", err)
	}
}

func TestTraceZones(t *testing.T) {
	dir := t.TempDir()
	writeZone(t, dir, "b_1.json", 300, 1)
	writeZone(t, dir, "a_1.json", 300, 1)
	writeZone(t, dir, "a_2.json", 300, 1)
	writeZone(t, dir, "nozone.json", 300, 1)
	got, err := TraceZones(dir)
	if err != nil || !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Errorf("TraceZones = %v, %v; want [a b]", got, err)
	}
}

func TestParseCapacityMode(t *testing.T) {
	for in, want := range map[string]CapacityMode{"auto": CapacityAuto, "Count": CapacityCount, " binary ": CapacityBinary} {
		if got, err := ParseCapacityMode(in); err != nil || got != want {
			t.Errorf("ParseCapacityMode(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParseCapacityMode("bool"); err == nil || !strings.Contains(err.Error(), "auto, count, binary") {
		t.Errorf("bad mode: %v", err)
	}
}

// TestLoadTracesSharedData reads the artifact's own traces: aws3 (values
// 0 or 1) is detected as binary, aws1 (0..4) as counts.
func TestLoadTracesSharedData(t *testing.T) {
	root := os.Getenv("TIDEGPU_SPOT_TRACES")
	if root == "" {
		root = filepath.Join("..", "..", "..", "shared", "data", "spot-traces")
	}
	for _, tt := range []struct {
		folder string
		zones  []string
		mode   CapacityMode
		steps  int
	}{
		{"aws3", []string{"us-east-1a", "us-west-2b"}, CapacityBinary, 20158},
		{"aws1", []string{"us-east-1f", "us-east-2a", "us-west-2c"}, CapacityCount, 3156},
	} {
		dir := filepath.Join(root, tt.folder)
		if _, err := os.Stat(dir); err != nil {
			t.Skipf("the SpotHedge traces are not at %s (set TIDEGPU_SPOT_TRACES to the spot-traces folder): %v", dir, err)
		}
		tr, mode, err := LoadTracesMode(dir, tt.zones, CapacityAuto)
		if err != nil {
			t.Fatalf("%s: %v", tt.folder, err)
		}
		if mode != tt.mode || tr.Steps != tt.steps || tr.Gap != 5*time.Minute || len(tr.Zones) != len(tt.zones) {
			t.Errorf("%s: mode %s, %d steps of %v, %d zones; want %s, %d of 5m0s, %d", tt.folder, mode, tr.Steps, tr.Gap, len(tr.Zones), tt.mode, tt.steps, len(tt.zones))
		}
	}
}
