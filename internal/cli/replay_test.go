package cli

// The trace files written here follow the SpotHedge / SkyServe artifact's
// format (EuroSys 2025) as described in /work/shared/data/README.md: one
// JSON file per zone, {"metadata": {"gap_seconds": 300}, "data": [...]},
// data[i] the spot instances the zone could hold during the i-th gap (aws3:
// only 0 or 1, 1 meaning capacity available, unlimited).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tidegpu/tidegpu/internal/provider/spotsim"
	"github.com/tidegpu/tidegpu/internal/replay"
)

const replayPools = `apiVersion: tidegpu.eja.dev/v1
kind: TidePool
metadata:
  name: chat
spec:
  provider: aws
  region: us-east-1
  instanceType: p3.2xlarge
  minimum: 4
  maximum: 4
  placement:
    availabilityZones: [us-east-1a, us-east-1c]
---
apiVersion: tidegpu.eja.dev/v1
kind: TidePool
metadata:
  name: batch
spec:
  provider: aws
  region: us-west-2
  instanceType: p3.2xlarge
  availabilityZone: us-west-2c
  minimum: 2
  maximum: 2
`

// replayFixture writes a pools file, a single-pool file and a trace folder
// of 12 hours (144 steps of 300 s) per zone: us-east-1a and us-east-1c
// 0/1, us-west-2c counts, us-east-2a with no pool.
func replayFixture(t *testing.T) (pools, single, traces string) {
	t.Helper()
	dir := t.TempDir()
	pools = filepath.Join(dir, "pools.yaml")
	single = filepath.Join(dir, "chat.yaml")
	if err := os.WriteFile(pools, []byte(replayPools), 0o644); err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(replayPools, "---\n")
	if err := os.WriteFile(single, []byte(first), 0o644); err != nil {
		t.Fatal(err)
	}
	traces = filepath.Join(dir, "traces")
	if err := os.Mkdir(traces, 0o755); err != nil {
		t.Fatal(err)
	}
	zone := func(name string, v func(i int) int) {
		vals := make([]string, 144)
		for i := range vals {
			vals[i] = fmt.Sprint(v(i))
		}
		body := `{"metadata": {"gap_seconds": 300}, "data": [` + strings.Join(vals, ",") + `]}`
		if err := os.WriteFile(filepath.Join(traces, name+"_v100_1.json"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	zone("us-east-1a", func(i int) int { return 1 - i%2 })
	zone("us-east-1c", func(int) int { return 1 })
	zone("us-west-2c", func(i int) int { return i % 4 })
	zone("us-east-2a", func(int) int { return 3 })
	return pools, single, traces
}

// fakeRun replaces the replay engine for a test: it records the options
// and returns res.
func fakeRun(t *testing.T, res replay.Result, err error) *replay.Options {
	t.Helper()
	var got replay.Options
	prev := runReplay
	runReplay = func(_ context.Context, o replay.Options) (replay.Result, error) {
		got = o
		if o.Progress != nil {
			o.Progress(0, time.Hour)
			o.Progress(time.Hour, time.Hour)
		}
		return res, err
	}
	t.Cleanup(func() { runReplay = prev })
	return &got
}

func execReplay(args ...string) (stdout, stderr string, err error) {
	cmd := NewReplayCommand()
	cmd.SilenceUsage = true // as under the root command
	cmd.SetArgs(args)
	var out, errb bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errb)
	err = cmd.Execute()
	return out.String(), errb.String(), err
}

func TestReplayCommandFlagValidation(t *testing.T) {
	pools, single, traces := replayFixture(t)
	dir := filepath.Dir(pools)
	badPrices := filepath.Join(dir, "bad.csv")
	if err := os.WriteFile(badPrices, []byte("zone,market,usd_per_hour\nus-east-1a,ondemand,3.06\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	noZones := filepath.Join(dir, "nozones.yaml")
	if err := os.WriteFile(noZones, []byte(strings.ReplaceAll(strings.SplitN(replayPools, "---\n", 2)[1], "  availabilityZone: us-west-2c\n", "")), 0o644); err != nil {
		t.Fatal(err)
	}
	invalid := filepath.Join(dir, "invalid.yaml")
	if err := os.WriteFile(invalid, []byte(strings.Replace(replayPools, "minimum: 4", "minimum: 9", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	base := []string{"-f", single, "--traces", traces}
	with := func(extra ...string) []string { return append(append([]string{}, base...), extra...) }
	fakeRun(t, replay.Result{}, nil)
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"--traces", traces}, []string{"-f", "required"}},
		{[]string{"-f", single}, []string{"--traces", "required"}},
		{with("-o", "yaml"), []string{"--output", "table or json"}},
		{with("--capacity", "bits"), []string{"--capacity", "auto, count, binary"}},
		{with("--notice", "-1s"), []string{"--notice", "negative"}},
		{with("--cold-start", "-5m"), []string{"--cold-start", "negative"}},
		{with("--warm-start", "-2m"), []string{"--warm-start", "negative"}},
		{with("--from", "-1h"), []string{"--from", "negative"}},
		{with("--duration", "-1h"), []string{"--duration", "negative"}},
		{with("--cold-start", "0"), []string{"--cold-start", "greater than 0"}},
		{with("--warm-start", "0s"), []string{"--warm-start", "greater than 0"}},
		{with("--notice", "soon"), []string{"notice"}},
		{with("--from", "12h"), []string{"--from", "past the end of the trace (12h0m0s"}},
		{with("--from", "2h", "--duration", "11h"), []string{"--duration", "give at most 10h0m0s"}},
		{with("--duration", "30m"), []string{"--duration", "warm-up"}},
		{with("--chart-height", "-1"), []string{"--chart-height"}},
		{with("--chart-width", "100000"), []string{"--chart-width"}},
		{with("--series"), []string{"--series", "-o json"}},
		{with("--prices", filepath.Join(dir, "none.csv")), []string{"--prices", "none.csv"}},
		{with("--prices", badPrices), []string{"--prices", "bad.csv", "line 2", "market", "spot or on-demand"}},
		{[]string{"-f", filepath.Join(dir, "none.yaml"), "--traces", traces}, []string{"-f", "none.yaml"}},
		{[]string{"-f", invalid, "--traces", traces, "--pool", "chat"}, []string{"spec.minimum", "spec.maximum"}},
		{[]string{"-f", noZones, "--traces", traces}, []string{"names no zone", "spec.placement.availabilityZones", "us-east-1a, us-east-1c, us-east-2a, us-west-2c"}},
		{[]string{"-f", single, "--traces", filepath.Join(dir, "nope")}, []string{"--traces", "nope"}},
		{[]string{"-f", pools, "--pool", "chat", "--traces", t.TempDir()}, []string{"--traces", "zone us-east-1a", "no ZONE_*.json files"}},
		{with("extra"), []string{"extra"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			_, _, err := execReplay(tt.args...)
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
}

func TestReplayPoolSelection(t *testing.T) {
	pools, single, traces := replayFixture(t)
	got := fakeRun(t, replay.Result{Strategy: "placement"}, nil)

	_, _, err := execReplay("-f", pools, "--traces", traces)
	if err == nil || !strings.Contains(err.Error(), "holds 2 TidePools (chat, batch)") || !strings.Contains(err.Error(), "--pool NAME") {
		t.Errorf("two pools, no --pool: %v", err)
	}
	_, _, err = execReplay("-f", pools, "--traces", traces, "--pool", "web")
	if err == nil || !strings.Contains(err.Error(), `--pool "web"`) || !strings.Contains(err.Error(), "chat, batch") {
		t.Errorf("--pool web: %v", err)
	}
	_, _, err = execReplay("-f", single, "--traces", traces, "--pool", "batch")
	if err == nil || !strings.Contains(err.Error(), "use one of chat") {
		t.Errorf("--pool batch of a file of chat: %v", err)
	}

	for _, tt := range []struct {
		args  []string
		pool  string
		zones []string
		cap   float64 // a step's capacity in the first zone
	}{
		{[]string{"-f", single}, "chat", []string{"us-east-1a", "us-east-1c"}, spotsim.Unlimited},
		{[]string{"-f", pools, "--pool", "chat"}, "chat", []string{"us-east-1a", "us-east-1c"}, spotsim.Unlimited},
		{[]string{"-f", pools, "--pool", "batch"}, "batch", []string{"us-west-2c"}, 0},
	} {
		*got = replay.Options{}
		if _, _, err := execReplay(append(tt.args, "--traces", traces)...); err != nil {
			t.Fatalf("%v: %v", tt.args, err)
		}
		if got.Pool == nil || got.Pool.Name != tt.pool {
			t.Fatalf("%v: replayed %v, want pool %s", tt.args, got.Pool, tt.pool)
		}
		if zs := got.Trace.ZoneNames(); !reflect.DeepEqual(zs, tt.zones) {
			t.Errorf("%v: trace zones %v, want %v (only the pool's)", tt.args, zs, tt.zones)
		}
		if c := got.Trace.Zones[0].Capacity[0]; float64(c) != tt.cap {
			t.Errorf("%v: first capacity %d, want %v", tt.args, c, tt.cap)
		}
	}
}

func TestReplayOptions(t *testing.T) {
	_, single, traces := replayFixture(t)
	prices := filepath.Join(filepath.Dir(single), "prices.csv")
	if err := os.WriteFile(prices, []byte("# test\nzone,market,usd_per_hour\nus-east-1a,spot,0.9\nus-east-1a,on-demand,3.06\nus-east-1c,spot,1.1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got := fakeRun(t, replay.Result{}, nil)

	if _, _, err := execReplay("-f", single, "--traces", traces); err != nil {
		t.Fatal(err)
	}
	want := replay.Options{Notice: 2 * time.Minute, ColdStart: 5 * time.Minute, WarmStart: 2 * time.Minute}
	if got.Notice != want.Notice || got.ColdStart != want.ColdStart || got.WarmStart != want.WarmStart || got.From != 0 || got.Duration != 0 || got.Prices != nil {
		t.Errorf("defaults: %+v", *got)
	}
	if got.Progress != nil {
		t.Error("progress asked for while stderr is not a terminal")
	}

	if _, _, err := execReplay("-f", single, "--traces", traces, "--notice", "0", "--cold-start", "8m", "--warm-start", "90s",
		"--from", "1h", "--duration", "6h", "--prices", prices, "--capacity", "count"); err != nil {
		t.Fatal(err)
	}
	if got.Notice >= 0 {
		t.Errorf("--notice 0 gave Options.Notice %v, want negative (none)", got.Notice)
	}
	if got.ColdStart != 8*time.Minute || got.WarmStart != 90*time.Second || got.From != time.Hour || got.Duration != 6*time.Hour {
		t.Errorf("options %+v", *got)
	}
	wantPrices := map[string]spotsim.ZonePrices{"us-east-1a": {Spot: 0.9, OnDemand: 3.06}, "us-east-1c": {Spot: 1.1}}
	if !reflect.DeepEqual(got.Prices, wantPrices) {
		t.Errorf("prices %v, want %v", got.Prices, wantPrices)
	}
	if c := got.Trace.Zones[0].Capacity[0]; c != 1 {
		t.Errorf("--capacity count: capacity %d, want 1", c)
	}

	// An error of the engine is the command's, and nothing is printed.
	fakeRun(t, replay.Result{}, fmt.Errorf("%w: zone us-east-1a: no spot price", replay.ErrOptions))
	out, _, err := execReplay("-f", single, "--traces", traces)
	if err == nil || !strings.Contains(err.Error(), "replay: invalid replay options: zone us-east-1a") || out != "" {
		t.Errorf("engine error: %v, output %q", err, out)
	}
}

// sampleReplay is a hand-made result over 12 hours of 5-minute samples
// with one dip.
func sampleReplay() (replayInputs, replay.Result) {
	in := replayInputs{
		Pool: "chat", File: "pool.yaml", Traces: "traces/aws3", Zones: []string{"us-east-1a", "us-east-1c"},
		Capacity: replay.CapacityBinary, Detected: true, Gap: 5 * time.Minute, Steps: 144, Duration: 12 * time.Hour,
		Notice: 2 * time.Minute, ColdStart: 5 * time.Minute, WarmStart: 2 * time.Minute,
	}
	series := make([]replay.Sample, 144)
	for i := range series {
		series[i] = replay.Sample{At: time.Duration(i) * 5 * time.Minute, Wanted: 4, Serving: 6, Ready: 6, Spot: 6}
	}
	for i := 60; i < 63; i++ {
		series[i].Serving, series[i].Ready = 2, 2
	}
	res := replay.Result{
		Strategy: "placement", Scored: 11*time.Hour + 30*time.Minute, Availability: 0.9782608, AvailabilityDrained: 0.97101,
		Dips: 1, LongestDip: 15 * time.Minute, Cost: 41.4, OnDemandCost: 140.76, Savings: 1 - 41.4/140.76,
		Hours: replay.Hours{Spot: 66.5, OnDemand: 2.25, Standby: 0}, Launches: 9, Refused: 2, Preemptions: 3, Starts: 0, Stops: 0,
		Rounds: 420, Series: series,
	}
	return in, res
}

func TestWriteReplayTable(t *testing.T) {
	in, res := sampleReplay()
	var b bytes.Buffer
	writeReplayTable(&b, in, res, chartView{width: 60, height: 8})
	out := b.String()
	want := `Replay of TidePool chat (pool.yaml) on 2 zones of traces/aws3

  zones       us-east-1a, us-east-1c
  capacity    binary   detected: every value is 0 or 1; 1 = capacity available (unlimited), 0 = none
  replayed    12h      the whole trace (144 steps of 5m)
  notice      2m       before a spot instance is reclaimed
  cold start  5m       launch to ready
  warm start  2m       standby start to ready
  prices      catalog  set per zone with --prices

  strategy               placement
  scored time            11h30m      after a 30m warm-up
  availability           97.826 %    ready >= wanted, as the engine serves (an instance under notice serves until it is gone)
  availability, drained  97.101 %    instances under notice drained at the notice
  dips                   1           longest 15m
  cost                   41.40 USD
  all on-demand cost     140.76 USD  the wanted instances, all on-demand
  savings                70.588 %    against all on-demand
  spot hours             66.5        instance-hours
  on-demand hours        2.2
  standby hours          0.0         stopped, paying for the disk
  launches               9
  refused                2           spot launches refused for want of capacity
  preemptions            3           reclaim notices
  starts                 0           standby instances started
  stops                  0           instances stopped into standby

Serving vs wanted over time
`
	if !strings.HasPrefix(out, want) {
		t.Errorf("table:\n%s\nwant it to start with:\n%s", out, want)
	}
	chart := strings.TrimPrefix(out, want)
	if chart != replay.Chart(res.Series, 60-len("12")-2, 8) {
		t.Errorf("the chart is not replay.Chart of the series:\n%s", chart)
	}
	if !strings.Contains(chart, "▲") {
		t.Errorf("the dip does not show:\n%s", chart)
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasSuffix(l, " ") {
			t.Errorf("trailing spaces: %q", l)
		}
	}

	// ASCII, a count trace chosen by flag, part of the trace, no notice,
	// prices from a file, no on-demand cost, no chart.
	in.Capacity, in.Detected, in.From, in.Duration, in.Notice = replay.CapacityCount, false, time.Hour, 6*time.Hour, 0
	in.Prices, in.PricedZones = "prices.csv", 2
	res.OnDemandCost, res.Dips = 0, 0
	b.Reset()
	writeReplayTable(&b, in, res, chartView{width: 60, height: 8, ascii: true})
	out = b.String()
	words := strings.Join(strings.Fields(out), " ") // the columns' padding aside
	for _, w := range []string{
		"capacity count --capacity count; each value is the instances the zone can hold",
		"replayed 6h from 1h into the 12h trace (144 steps of 5m)",
		"notice none",
		"prices prices.csv 2 zones; the others from the catalog",
		"savings - against all on-demand",
		"dips 0 cost",
		"# serving (lowest in the column)",
	} {
		if !strings.Contains(words, w) {
			t.Errorf("table does not say %q:\n%s", w, out)
		}
	}
	if strings.IndexFunc(out[strings.Index(out, "Serving vs"):], func(r rune) bool { return r > 127 }) >= 0 {
		t.Errorf("--ascii chart holds non-ASCII:\n%s", out)
	}
	b.Reset()
	writeReplayTable(&b, in, res, chartView{width: 60, height: 0})
	if strings.Contains(b.String(), "Serving vs") {
		t.Errorf("--chart-height 0 drew a chart:\n%s", b.String())
	}
}

func TestWriteReplayJSON(t *testing.T) {
	in, res := sampleReplay()
	for _, withSeries := range []bool{false, true} {
		var b bytes.Buffer
		if err := writeReplayJSON(&b, in, res, withSeries); err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b.Bytes(), &m); err != nil {
			t.Fatalf("not one JSON object: %v\n%s", err, b.String())
		}
		want := map[string]any{
			"pool": "chat", "availability": 0.9782608, "availabilityDrained": 0.97101, "savings": 1 - 41.4/140.76,
			"cost": 41.4, "onDemandCost": 140.76, "dips": 1.0, "longestDip": "15m0s", "longestDipSeconds": 900.0,
			"hours": map[string]any{"spot": 66.5, "onDemand": 2.25, "standby": 0.0}, "strategy": "placement",
			"preemptions": 3.0, "launches": 9.0, "refused": 2.0, "starts": 0.0, "stops": 0.0, "scoredSeconds": 41400.0,
			"zones": []any{"us-east-1a", "us-east-1c"}, "capacity": "binary",
			"notice": "2m0s", "coldStart": "5m0s", "warmStart": "2m0s", "currency": "USD",
		}
		for k, v := range want {
			if !reflect.DeepEqual(m[k], v) {
				t.Errorf("%s = %#v, want %#v", k, m[k], v)
			}
		}
		series, has := m["series"].([]any)
		if has != withSeries {
			t.Fatalf("series present %v with --series %v", has, withSeries)
		}
		if withSeries {
			if len(series) != 144 {
				t.Fatalf("%d samples, want 144", len(series))
			}
			p := series[61].(map[string]any)
			if p["atSeconds"] != 61*300.0 || p["serving"] != 2.0 || p["wanted"] != 4.0 {
				t.Errorf("sample 61 = %v", p)
			}
		}
	}
}

// TestReplayCommandOutput runs the command end to end on the fake engine:
// stdout holds the table or exactly one JSON object, stderr nothing (it is
// not a terminal).
func TestReplayCommandOutput(t *testing.T) {
	_, single, traces := replayFixture(t)
	_, res := sampleReplay()
	fakeRun(t, res, nil)

	out, errOut, err := execReplay("-f", single, "--traces", traces, "-o", "json", "--notice", "0")
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(strings.NewReader(out))
	var rep map[string]any
	if err := dec.Decode(&rep); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, out)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		t.Errorf("more than one JSON value on stdout:\n%s", out)
	}
	if rep["notice"] != "0s" || rep["capacity"] != "binary" || rep["series"] != nil || errOut != "" {
		t.Errorf("notice %v, capacity %v, series %v, stderr %q", rep["notice"], rep["capacity"], rep["series"] != nil, errOut)
	}

	t.Setenv("TERM", "dumb")
	out, errOut, err = execReplay("-f", single, "--traces", traces, "--chart-width", "50")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "availability           97.826 %") || !strings.Contains(out, "# serving") || errOut != "" {
		t.Errorf("table (TERM=dumb: ASCII):\n%s\nstderr %q", out, errOut)
	}
	_, chart, _ := strings.Cut(out, "Serving vs wanted over time\n")
	for _, l := range strings.Split(chart, "\n") {
		if len(l) > 50 && !strings.Contains(l, "serving (lowest") {
			t.Errorf("chart line longer than --chart-width 50: %q", l)
		}
	}
}

func TestProgressLine(t *testing.T) {
	var b bytes.Buffer
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := newProgressLine(&b, "replaying chat", func() time.Time { return now })
	total := 70 * 24 * time.Hour
	p.update(0, total)
	p.update(total/10, total) // too soon: skipped
	now = now.Add(time.Second)
	p.update(total/4, total)
	p.update(total, total) // the end always shows
	p.clear()
	want := "\rreplaying chat:   0.0% of 70d of trace time" +
		"\rreplaying chat:  25.0% of 70d of trace time" +
		"\rreplaying chat: 100.0% of 70d of trace time" +
		"\r" + strings.Repeat(" ", len("replaying chat: 100.0% of 70d of trace time")) + "\r"
	if b.String() != want {
		t.Errorf("progress:\n%q\nwant\n%q", b.String(), want)
	}
	p.update(time.Hour, 0) // no total: nothing
	p.clear()              // nothing shown: nothing
	if b.String() != want {
		t.Errorf("more written: %q", strings.TrimPrefix(b.String(), want))
	}
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", 500 * time.Millisecond: "500ms", 90 * time.Second: "1m30s", 2 * time.Minute: "2m",
		1679*time.Hour + 20*time.Minute: "69d23h20m", -time.Minute: "-1m",
	} {
		if got := replay.FormatDuration(d); got != want {
			t.Errorf("replay.FormatDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestRootHasReplay(t *testing.T) {
	cmd, _, err := NewRootCommand().Find([]string{"replay"})
	if err != nil || cmd.Name() != "replay" {
		t.Fatalf("tidegpu replay is not registered: %v", err)
	}
}
