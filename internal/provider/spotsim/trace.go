package spotsim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Limits on what a trace file may hold.
const (
	// MaxTraceSteps bounds the steps of one zone (aws3 has 20,158).
	MaxTraceSteps = 10_000_000
	// MaxCapacity bounds one step's capacity.
	MaxCapacity = 1_000_000
	// MaxGap bounds gap_seconds (one day).
	MaxGap = 24 * time.Hour
	// maxTraceBytes bounds a zone file.
	maxTraceBytes = 256 << 20
)

// Unlimited is the capacity of a step in a binary trace whose value says
// capacity was available (aws3: 1 means available, treat as unlimited).
const Unlimited = math.MaxInt32

// ErrTrace is wrapped by every error about a trace's content.
var ErrTrace = errors.New("invalid spot trace")

// ZoneTrace is one zone's capacity over time: Capacity[i] instances fit in
// the zone during [i*Gap, (i+1)*Gap) of trace time.
type ZoneTrace struct {
	Zone     string
	Gap      time.Duration
	Capacity []int
}

// Trace is the capacity of several zones on a common time grid.
type Trace struct {
	// Zones in name order, each with as many steps as Steps.
	Zones []ZoneTrace
	// Gap is the length of one step of trace time.
	Gap time.Duration
	// Steps is the number of steps.
	Steps int
}

// Duration is the trace time the trace covers.
func (t *Trace) Duration() time.Duration { return time.Duration(t.Steps) * t.Gap }

// ZoneNames returns the zones in order.
func (t *Trace) ZoneNames() []string {
	out := make([]string, len(t.Zones))
	for i, z := range t.Zones {
		out[i] = z.Zone
	}
	return out
}

// traceFile is the on-disk format of one zone (the SpotHedge artifact's):
//
//	{"metadata": {"gap_seconds": 300}, "data": [0, 0, 4, 4, 3, ...]}
type traceFile struct {
	Metadata *struct {
		GapSeconds *json.Number `json:"gap_seconds"`
	} `json:"metadata"`
	Data []json.Number `json:"data"`
}

// ParseZone reads one zone file: metadata.gap_seconds (a positive number of
// seconds, at most a day, whole milliseconds) and data (at least one
// capacity, each a whole number between 0 and MaxCapacity). Unknown fields
// are ignored; trailing data after the object is an error. With binary,
// every value above 0 becomes Unlimited (the aws3 convention).
func ParseZone(r io.Reader, zone string, binary bool) (ZoneTrace, error) {
	dec := json.NewDecoder(io.LimitReader(r, maxTraceBytes+1))
	dec.UseNumber()
	var f traceFile
	if err := dec.Decode(&f); err != nil {
		return ZoneTrace{}, fmt.Errorf("%w: zone %s: %v", ErrTrace, zone, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return ZoneTrace{}, fmt.Errorf("%w: zone %s: data after the JSON object", ErrTrace, zone)
	}
	if f.Metadata == nil || f.Metadata.GapSeconds == nil {
		return ZoneTrace{}, fmt.Errorf("%w: zone %s: metadata.gap_seconds is missing", ErrTrace, zone)
	}
	gs, err := f.Metadata.GapSeconds.Float64()
	if err != nil || math.IsNaN(gs) || gs <= 0 || gs > MaxGap.Seconds() {
		return ZoneTrace{}, fmt.Errorf("%w: zone %s: metadata.gap_seconds %q: want seconds in (0, %v]", ErrTrace, zone, f.Metadata.GapSeconds.String(), MaxGap.Seconds())
	}
	gap := time.Duration(math.Round(gs*1000)) * time.Millisecond
	if gap <= 0 {
		return ZoneTrace{}, fmt.Errorf("%w: zone %s: metadata.gap_seconds %q is below a millisecond", ErrTrace, zone, f.Metadata.GapSeconds.String())
	}
	if len(f.Data) == 0 {
		return ZoneTrace{}, fmt.Errorf("%w: zone %s: data is empty", ErrTrace, zone)
	}
	if len(f.Data) > MaxTraceSteps {
		return ZoneTrace{}, fmt.Errorf("%w: zone %s: %d steps, at most %d", ErrTrace, zone, len(f.Data), MaxTraceSteps)
	}
	capacity := make([]int, len(f.Data))
	for i, n := range f.Data {
		v, err := n.Float64()
		if err != nil || math.IsNaN(v) || v < 0 || v > MaxCapacity || v != math.Trunc(v) {
			return ZoneTrace{}, fmt.Errorf("%w: zone %s: data[%d] = %q: want a whole number between 0 and %d", ErrTrace, zone, i, n.String(), MaxCapacity)
		}
		c := int(v)
		if binary && c > 0 {
			c = Unlimited
		}
		capacity[i] = c
	}
	return ZoneTrace{Zone: zone, Gap: gap, Capacity: capacity}, nil
}

// ZoneFromFile names the zone of a trace file: its base name up to the
// first '_' or '.', as in us-east-1f_v100_1.json → us-east-1f.
func ZoneFromFile(path string) string {
	base := filepath.Base(path)
	if i := strings.IndexAny(base, "_."); i > 0 {
		return base[:i]
	}
	return base
}

// LoadTrace reads every *.json file of dir as one zone (named by
// ZoneFromFile). All zones must share one gap; zones of different lengths
// are cut to the shortest. With binary, values above 0 mean unlimited
// capacity (aws3); without, they are instance counts (aws1).
func LoadTrace(dir string, binary bool) (*Trace, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, fmt.Errorf("listing trace files in %s: %w", dir, err)
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("%w: no *.json zone files in %s", ErrTrace, dir)
	}
	sort.Strings(paths)
	zts := make([]ZoneTrace, 0, len(paths))
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("reading trace %s: %w", p, err)
		}
		zt, err := ParseZone(bytes.NewReader(b), ZoneFromFile(p), binary)
		if err != nil {
			return nil, fmt.Errorf("trace %s: %w", p, err)
		}
		zts = append(zts, zt)
	}
	return NewTrace(zts)
}

// NewTrace combines zone traces: one gap for all, distinct zone names,
// sorted by name, cut to the shortest.
func NewTrace(zones []ZoneTrace) (*Trace, error) {
	if len(zones) == 0 {
		return nil, fmt.Errorf("%w: no zones", ErrTrace)
	}
	zs := append([]ZoneTrace(nil), zones...)
	sort.Slice(zs, func(i, j int) bool { return zs[i].Zone < zs[j].Zone })
	t := &Trace{Gap: zs[0].Gap, Steps: len(zs[0].Capacity)}
	for i, z := range zs {
		if z.Zone == "" {
			return nil, fmt.Errorf("%w: a zone has no name", ErrTrace)
		}
		if i > 0 && z.Zone == zs[i-1].Zone {
			return nil, fmt.Errorf("%w: zone %s appears twice", ErrTrace, z.Zone)
		}
		if z.Gap != t.Gap {
			return nil, fmt.Errorf("%w: zone %s has a gap of %v, zone %s of %v; one gap for all", ErrTrace, z.Zone, z.Gap, zs[0].Zone, t.Gap)
		}
		if len(z.Capacity) == 0 {
			return nil, fmt.Errorf("%w: zone %s has no steps", ErrTrace, z.Zone)
		}
		t.Steps = min(t.Steps, len(z.Capacity))
	}
	for i := range zs {
		zs[i].Capacity = zs[i].Capacity[:t.Steps]
	}
	t.Zones = zs
	return t, nil
}
