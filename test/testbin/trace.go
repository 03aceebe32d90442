package testbin

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// WriteTrace writes a spot-capacity trace folder in the format of
// ../shared/data/spot-traces (one JSON file per zone, 300 s steps, data[i]
// the zone's capacity in step i) and returns its path.
func WriteTrace(t testing.TB, zones map[string][]int) string {
	t.Helper()
	dir := t.TempDir()
	for zone, data := range zones {
		b, err := json.Marshal(map[string]any{"metadata": map[string]int{"gap_seconds": 300}, "data": data})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, zone+"_v100_1.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// ConstantTrace is WriteTrace with each zone's capacity the same in all of
// its steps.
func ConstantTrace(t testing.TB, steps int, capacity map[string]int) string {
	t.Helper()
	zones := make(map[string][]int, len(capacity))
	for zone, c := range capacity {
		data := make([]int, steps)
		for i := range data {
			data[i] = c
		}
		zones[zone] = data
	}
	return WriteTrace(t, zones)
}
