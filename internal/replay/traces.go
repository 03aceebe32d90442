package replay

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/tidegpu/tidegpu/internal/provider/spotsim"
)

// CapacityMode says how the values of a trace file are read.
type CapacityMode string

// Capacity modes.
const (
	// CapacityAuto reads a folder whose selected files hold only 0s and 1s
	// as availability traces (CapacityBinary), any other as instance
	// counts (CapacityCount).
	CapacityAuto CapacityMode = "auto"
	// CapacityCount reads each value as the number of instances the zone
	// could hold (the aws1 trace).
	CapacityCount CapacityMode = "count"
	// CapacityBinary reads each value above 0 as capacity available,
	// unlimited, and 0 as none (the aws3 trace).
	CapacityBinary CapacityMode = "binary"
)

// CapacityModes are the accepted names, for messages and flag help.
var CapacityModes = []string{string(CapacityAuto), string(CapacityCount), string(CapacityBinary)}

// ParseCapacityMode returns the mode named s (auto, count or binary).
func ParseCapacityMode(s string) (CapacityMode, error) {
	switch m := CapacityMode(strings.ToLower(strings.TrimSpace(s))); m {
	case CapacityAuto, CapacityCount, CapacityBinary:
		return m, nil
	}
	return "", fmt.Errorf("%q is not a capacity mode: use %s", s, strings.Join(CapacityModes, ", "))
}

// maxZoneFileBytes bounds one zone file (spotsim reads at most as much).
const maxZoneFileBytes = 256 << 20

// traceExt is the extension of a zone file.
const traceExt = ".json"

// LoadTraces reads the trace of each of zones from dir, where zone Z's
// capacity is the one file DIR/Z_*.json in the SpotHedge artifact's format
// ({"metadata": {"gap_seconds": 300}, "data": [...]}, see spotsim.ParseZone).
// Other files of dir are ignored, so one folder can serve pools of
// different zones. A zone with no file, or with several, is an error naming
// the zone and the folder. capacity says how the values are read; with
// CapacityAuto see LoadTracesMode.
func LoadTraces(dir string, zones []string, capacity CapacityMode) (*spotsim.Trace, error) {
	t, _, err := LoadTracesMode(dir, zones, capacity)
	return t, err
}

// LoadTracesMode is LoadTraces that also says how the values were read:
// CapacityCount or CapacityBinary, never CapacityAuto. With CapacityAuto
// the files are availability traces (binary) when every value of every
// selected zone file is 0 or 1, else instance counts.
func LoadTracesMode(dir string, zones []string, capacity CapacityMode) (*spotsim.Trace, CapacityMode, error) {
	switch capacity {
	case "":
		capacity = CapacityAuto
	case CapacityAuto, CapacityCount, CapacityBinary:
	default:
		return nil, "", fmt.Errorf("capacity mode %q: use %s", capacity, strings.Join(CapacityModes, ", "))
	}
	zones = uniqueZones(zones)
	if len(zones) == 0 {
		return nil, "", fmt.Errorf("no zones to load from %s: name the pool's zones (spec.placement.availabilityZones or spec.availabilityZone)", dir)
	}
	names, err := jsonFiles(dir)
	if err != nil {
		return nil, "", err
	}
	type raw struct {
		path string
		data []byte
		zt   spotsim.ZoneTrace
	}
	raws := make([]raw, 0, len(zones))
	for _, z := range zones {
		paths := filesOf(dir, names, z)
		switch len(paths) {
		case 0:
			return nil, "", fmt.Errorf("zone %s: no trace file %s in %s%s", z, z+"_*"+traceExt, dir, presentZones(names))
		case 1:
		default:
			return nil, "", fmt.Errorf("zone %s: %d trace files in %s (%s): keep one per zone, or point at another folder",
				z, len(paths), dir, strings.Join(baseNames(paths), ", "))
		}
		b, err := readBounded(paths[0])
		if err != nil {
			return nil, "", err
		}
		// Read as counts first: that is the raw values, which decide the
		// mode under CapacityAuto.
		zt, err := spotsim.ParseZone(bytes.NewReader(b), z, false)
		if err != nil {
			return nil, "", fmt.Errorf("trace %s: %w", paths[0], err)
		}
		raws = append(raws, raw{path: paths[0], data: b, zt: zt})
	}
	mode := capacity
	if mode == CapacityAuto {
		mode = CapacityBinary
		for _, r := range raws {
			if !zeroOrOne(r.zt.Capacity) {
				mode = CapacityCount
				break
			}
		}
	}
	zts := make([]spotsim.ZoneTrace, len(raws))
	for i, r := range raws {
		zts[i] = r.zt
		if mode == CapacityBinary {
			// spotsim's own reading of the binary convention.
			zt, err := spotsim.ParseZone(bytes.NewReader(r.data), r.zt.Zone, true)
			if err != nil {
				return nil, "", fmt.Errorf("trace %s: %w", r.path, err)
			}
			zts[i] = zt
		}
	}
	t, err := spotsim.NewTrace(zts)
	if err != nil {
		return nil, "", fmt.Errorf("traces in %s: %w", dir, err)
	}
	return t, mode, nil
}

// TraceZones lists the zones that have a ZONE_*.json trace file in dir (the
// name up to its first '_', as spotsim.ZoneFromFile), sorted, each once.
func TraceZones(dir string) ([]string, error) {
	names, err := jsonFiles(dir)
	if err != nil {
		return nil, err
	}
	return zonesOf(names), nil
}

// jsonFiles lists the *.json files of dir (not folders, not hidden files).
func jsonFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading the trace folder: %w", err)
	}
	var names []string
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, traceExt) || strings.HasPrefix(name, ".") {
			continue
		}
		names = append(names, name)
	}
	sort.Strings(names)
	return names, nil
}

// filesOf returns the files of names that are zone's: ZONE_*.json.
func filesOf(dir string, names []string, zone string) []string {
	var out []string
	for _, n := range names {
		if strings.HasPrefix(n, zone+"_") {
			out = append(out, filepath.Join(dir, n))
		}
	}
	return out
}

// presentZones names the zones of the folder for a message.
func presentZones(names []string) string {
	zs := zonesOf(names)
	if len(zs) == 0 {
		return " (the folder has no ZONE_*.json files)"
	}
	return " (the folder has zones " + strings.Join(zs, ", ") + ")"
}

// zonesOf returns the zones of ZONE_*.json names (by spotsim.ZoneFromFile),
// sorted, each once.
func zonesOf(names []string) []string {
	seen := map[string]bool{}
	var zs []string
	for _, n := range names {
		if !strings.Contains(n, "_") {
			continue
		}
		z := spotsim.ZoneFromFile(n)
		if z != "" && !seen[z] {
			seen[z] = true
			zs = append(zs, z)
		}
	}
	sort.Strings(zs)
	return zs
}

func baseNames(paths []string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = filepath.Base(p)
	}
	return out
}

func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading trace: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxZoneFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading trace %s: %w", path, err)
	}
	if len(b) > maxZoneFileBytes {
		return nil, fmt.Errorf("trace %s is over %d MiB: a zone file holds one JSON object of capacities", path, maxZoneFileBytes>>20)
	}
	return b, nil
}

func zeroOrOne(vs []int) bool {
	for _, v := range vs {
		if v != 0 && v != 1 {
			return false
		}
	}
	return true
}

// uniqueZones drops empty and repeated names, keeping the first order.
func uniqueZones(zones []string) []string {
	seen := make(map[string]bool, len(zones))
	out := make([]string, 0, len(zones))
	for _, z := range zones {
		if z == "" || seen[z] {
			continue
		}
		seen[z] = true
		out = append(out, z)
	}
	return out
}
