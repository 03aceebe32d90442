package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/config"
	"github.com/tidegpu/tidegpu/internal/provider/spotsim"
	"github.com/tidegpu/tidegpu/internal/replay"
)

// runReplay is the replay engine; tests replace it.
var runReplay = replay.Run

// Chart defaults of `tidegpu replay`.
const (
	defaultChartWidth  = 80 // line width when stdout is not a terminal
	defaultChartHeight = 10
	maxChartWidth      = 1000
	maxChartHeight     = 200
)

// replayFlags are the flags of `tidegpu replay`.
type replayFlags struct {
	file, pool, traces, prices, capacity, output string
	notice, coldStart, warmStart, from, duration time.Duration
	series, ascii                                bool
	chartWidth, chartHeight                      int
}

// NewReplayCommand returns `tidegpu replay`.
func NewReplayCommand() *cobra.Command {
	o := &replayFlags{}
	cmd := &cobra.Command{
		Use:   "replay -f POOL.yaml --traces DIR",
		Short: "Replay a pool on spot-capacity traces: availability, cost and savings before you deploy",
		Long: `Replay a TidePool spec on a folder of spot-capacity traces, through the pool
engine's own decisions on a simulated market and a fake clock, and print what
would have happened: availability (ready >= wanted), dips, cost against all
on-demand, instance-hours by market, preemptions, and a chart of serving
against wanted over time.

-f takes the same TidePool YAML as ` + "`tidegpu up`" + `, checked the same way; with
several pools, --pool picks one. Each zone of the pool (spec.placement.
availabilityZones, else spec.availabilityZone) is read from DIR/ZONE_*.json,
in the SpotHedge artifact's format {"metadata":{"gap_seconds":300},"data":[...]}.
With --capacity auto, files holding only 0s and 1s are availability traces
(1 = capacity available, unlimited), others instance counts.

--prices FILE gives prices per zone as CSV lines zone,market,usd_per_hour
(market spot or on-demand); zones it leaves out are priced from the catalog.

Progress goes to standard error when it is a terminal; -o json prints one
JSON object on standard output (the series only with --series).`,
		Example: `  tidegpu replay -f pool.yaml --traces ../shared/data/spot-traces/aws3
  tidegpu replay -f pools.yaml --pool chat --traces traces/ --prices prices.csv --cold-start 8m
  tidegpu replay -f pool.yaml --traces traces/ --from 240h --duration 168h -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runReplayCommand(cmd, o)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.file, "file", "f", "", "YAML file of TidePool documents, the same as tidegpu up takes (required)")
	f.StringVar(&o.pool, "pool", "", "the TidePool to replay when the file holds several")
	f.StringVar(&o.traces, "traces", "", "folder of per-zone spot-capacity traces ZONE_*.json (required)")
	f.StringVar(&o.prices, "prices", "", "CSV of prices zone,market,usd_per_hour (market spot or on-demand); other zones from the catalog")
	f.DurationVar(&o.notice, "notice", replay.DefaultNotice, "reclaim notice before a spot instance is taken (0: none)")
	f.DurationVar(&o.coldStart, "cold-start", replay.DefaultColdStart, "launch to ready: boot, pull, load the model")
	f.DurationVar(&o.warmStart, "warm-start", replay.DefaultWarmStart, "start of a stopped standby instance to ready")
	f.DurationVar(&o.from, "from", 0, "start this far into the trace")
	f.DurationVar(&o.duration, "duration", 0, "replay this much trace time (0: to the end)")
	f.StringVar(&o.capacity, "capacity", string(replay.CapacityAuto), "how to read trace values: auto, count (instances the zone holds) or binary (0 none, 1 unlimited)")
	f.StringVarP(&o.output, "output", "o", "table", "table or json")
	f.BoolVar(&o.series, "series", false, "with -o json, include the sampled series (every 5m of trace time)")
	f.BoolVar(&o.ascii, "ascii", false, "draw the chart with ASCII only (also when TERM=dumb)")
	f.IntVar(&o.chartWidth, "chart-width", 0, "width of the chart in characters (0: the terminal's, else 80)")
	f.IntVar(&o.chartHeight, "chart-height", defaultChartHeight, "rows of the chart (0: no chart)")
	return cmd
}

// check validates the flags that need no file.
func (o *replayFlags) check() (replay.CapacityMode, error) {
	if o.output != "table" && o.output != "json" {
		return "", fmt.Errorf("--output: %q is not supported: use table or json", o.output)
	}
	if o.file == "" {
		return "", errors.New("-f: required: give the TidePool YAML to replay (-f pool.yaml)")
	}
	if o.traces == "" {
		return "", errors.New("--traces: required: give the folder of ZONE_*.json spot-capacity traces")
	}
	mode, err := replay.ParseCapacityMode(o.capacity)
	if err != nil {
		return "", fmt.Errorf("--capacity: %w", err)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"notice", o.notice}, {"cold-start", o.coldStart}, {"warm-start", o.warmStart}, {"from", o.from}, {"duration", o.duration}} {
		if d.v < 0 {
			return "", fmt.Errorf("--%s %v: must not be negative", d.name, d.v)
		}
	}
	// The engine reads a zero start time as its default: refuse it rather
	// than replay something else than asked.
	if o.coldStart == 0 {
		return "", fmt.Errorf("--cold-start 0: must be greater than 0: an instance takes time to serve (e.g. --cold-start 5m)")
	}
	if o.warmStart == 0 {
		return "", fmt.Errorf("--warm-start 0: must be greater than 0 (e.g. --warm-start 2m)")
	}
	if o.chartWidth < 0 || o.chartWidth > maxChartWidth {
		return "", fmt.Errorf("--chart-width %d: must be between 0 (the terminal's width) and %d", o.chartWidth, maxChartWidth)
	}
	if o.chartHeight < 0 || o.chartHeight > maxChartHeight {
		return "", fmt.Errorf("--chart-height %d: must be between 0 (no chart) and %d", o.chartHeight, maxChartHeight)
	}
	if o.series && o.output != "json" {
		return "", errors.New("--series: only with -o json (the table shows the series as a chart)")
	}
	return mode, nil
}

// replayInputs are what a replay was run on, for the report.
type replayInputs struct {
	Pool, File, Traces, Prices string
	Zones                      []string
	// Capacity is how the trace values were read (count or binary) and
	// Detected whether --capacity auto chose it.
	Capacity replay.CapacityMode
	Detected bool
	// Gap and Steps of the trace; From and Duration the part replayed.
	Gap                          time.Duration
	Steps                        int
	From, Duration               time.Duration
	Notice, ColdStart, WarmStart time.Duration
	PricedZones                  int
}

func runReplayCommand(cmd *cobra.Command, o *replayFlags) error {
	mode, err := o.check()
	if err != nil {
		return err
	}
	pool, err := loadReplayPool(o.file, o.pool)
	if err != nil {
		return err
	}
	zones := pool.Spec.Zones()
	if len(zones) == 0 {
		have := ""
		if zs, err := replay.TraceZones(o.traces); err == nil && len(zs) > 0 {
			have = " (--traces has " + strings.Join(zs, ", ") + ")"
		}
		return fmt.Errorf("%s: TidePool %q names no zone: set spec.placement.availabilityZones (or spec.availabilityZone) to zones of the traces%s",
			o.file, pool.Name, have)
	}
	trace, used, err := replay.LoadTracesMode(o.traces, zones, mode)
	if err != nil {
		return fmt.Errorf("--traces %s: %w", o.traces, err)
	}
	total := trace.Duration()
	if o.from >= total {
		return fmt.Errorf("--from %v: past the end of the trace (%v, %d steps of %v): give a smaller --from", o.from, total, trace.Steps, trace.Gap)
	}
	replayed := total - o.from
	if o.duration > replayed {
		return fmt.Errorf("--duration %v: longer than the trace after --from (%v): give at most %v, or 0 for the rest", o.duration, replayed, replayed)
	}
	if o.duration > 0 {
		replayed = o.duration
	}
	if replayed <= replay.DefaultWarmup {
		return fmt.Errorf("--duration: %v replayed is not longer than the %v warm-up that is not scored: replay more of the trace", replayed, replay.DefaultWarmup)
	}
	var prices map[string]spotsim.ZonePrices
	if o.prices != "" {
		f, err := os.Open(o.prices)
		if err != nil {
			return fmt.Errorf("--prices: %w", err)
		}
		prices, err = replay.ParsePrices(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("--prices %s: %w", o.prices, err)
		}
	}
	in := replayInputs{
		Pool: pool.Name, File: o.file, Traces: o.traces, Prices: o.prices, Zones: trace.ZoneNames(),
		Capacity: used, Detected: mode == replay.CapacityAuto, Gap: trace.Gap, Steps: trace.Steps,
		From: o.from, Duration: replayed, Notice: o.notice, ColdStart: o.coldStart, WarmStart: o.warmStart,
		PricedZones: len(prices),
	}
	notice := o.notice
	if notice == 0 {
		notice = -1 // replay.Options: 0 is the default, negative none
	}
	opts := replay.Options{
		Pool: pool, Trace: trace, Prices: prices, Notice: notice,
		ColdStart: o.coldStart, WarmStart: o.warmStart, From: o.from, Duration: o.duration,
	}
	stderr := cmd.ErrOrStderr()
	var prog *progressLine
	if isTerminal(stderr) {
		prog = newProgressLine(stderr, "replaying "+pool.Name, time.Now)
		opts.Progress = prog.update
	}
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := runReplay(ctx, opts)
	if prog != nil {
		prog.clear()
	}
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("replay interrupted: %w", err)
		}
		return fmt.Errorf("replay: %w", err)
	}
	out := cmd.OutOrStdout()
	if o.output == "json" {
		return writeReplayJSON(out, in, res, o.series)
	}
	view := chartView{height: o.chartHeight, width: o.chartWidth, ascii: o.ascii || os.Getenv("TERM") == "dumb"}
	if view.width == 0 {
		view.width = terminalWidth(out, defaultChartWidth)
	}
	writeReplayTable(out, in, res, view)
	return nil
}

// loadReplayPool reads file as `tidegpu up` does and picks one pool: the
// only one, or the one named name.
func loadReplayPool(file, name string) (*tidev1.TidePool, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("-f: %w", err)
	}
	defer f.Close()
	pools, err := config.Parse(f, file)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(pools))
	for i := range pools {
		names[i] = pools[i].Name
	}
	if name == "" {
		if len(pools) == 1 {
			return &pools[0], nil
		}
		return nil, fmt.Errorf("%s holds %d TidePools (%s): pick one with --pool NAME", file, len(pools), strings.Join(names, ", "))
	}
	for i := range pools {
		if pools[i].Name == name {
			return &pools[i], nil
		}
	}
	return nil, fmt.Errorf("--pool %q: %s has no TidePool of that name: use one of %s", name, file, strings.Join(names, ", "))
}

// terminalWidth is w's width when it is a terminal, else def.
func terminalWidth(w io.Writer, def int) int {
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		if cols, _, err := term.GetSize(int(f.Fd())); err == nil && cols > 20 {
			return min(cols, maxChartWidth)
		}
	}
	return def
}

// progressLine shows a replay's progress as one line rewritten in place.
type progressLine struct {
	mu    sync.Mutex
	w     io.Writer
	label string
	now   func() time.Time
	last  time.Time
	width int // of the line shown; 0: none
}

// progressEvery is the least time between two updates of the line.
const progressEvery = 100 * time.Millisecond

func newProgressLine(w io.Writer, label string, now func() time.Time) *progressLine {
	return &progressLine{w: w, label: label, now: now}
}

// update is replay.Options.Progress.
func (p *progressLine) update(done, total time.Duration) {
	if total <= 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.now()
	if p.width > 0 && done < total && t.Sub(p.last) < progressEvery {
		return
	}
	p.last = t
	pct := 100 * float64(min(max(done, 0), total)) / float64(total)
	s := fmt.Sprintf("%s: %5.1f%% of %s of trace time", p.label, pct, replay.FormatDuration(total))
	pad := max(p.width-len(s), 0)
	fmt.Fprint(p.w, "\r"+s+strings.Repeat(" ", pad))
	p.width = len(s)
}

// clear removes the line (spaces, so that TERM=dumb works too).
func (p *progressLine) clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.width > 0 {
		fmt.Fprint(p.w, "\r"+strings.Repeat(" ", p.width)+"\r")
		p.width = 0
	}
}

// replayReport is the JSON of `tidegpu replay -o json`. Fractions are in
// [0, 1], money in USD, durations Go duration strings (and seconds where
// named so).
type replayReport struct {
	Pool                string        `json:"pool"`
	File                string        `json:"file"`
	Traces              string        `json:"traces"`
	Prices              string        `json:"prices,omitempty"`
	Zones               []string      `json:"zones"`
	Capacity            string        `json:"capacity"`
	Notice              string        `json:"notice"`
	ColdStart           string        `json:"coldStart"`
	WarmStart           string        `json:"warmStart"`
	From                string        `json:"from"`
	Duration            string        `json:"duration"`
	Strategy            string        `json:"strategy"`
	Scored              string        `json:"scored"`
	ScoredSeconds       float64       `json:"scoredSeconds"`
	Availability        float64       `json:"availability"`
	AvailabilityDrained float64       `json:"availabilityDrained"`
	Dips                int           `json:"dips"`
	LongestDip          string        `json:"longestDip"`
	LongestDipSeconds   float64       `json:"longestDipSeconds"`
	Currency            string        `json:"currency"`
	Cost                float64       `json:"cost"`
	OnDemandCost        float64       `json:"onDemandCost"`
	Savings             float64       `json:"savings"`
	Hours               replay.Hours  `json:"hours"`
	Launches            int           `json:"launches"`
	Refused             int           `json:"refused"`
	Preemptions         int           `json:"preemptions"`
	Starts              int           `json:"starts"`
	Stops               int           `json:"stops"`
	Rounds              int           `json:"rounds"`
	Series              []seriesPoint `json:"series,omitempty"`
}

// seriesPoint is a replay.Sample with its time in seconds.
type seriesPoint struct {
	AtSeconds float64 `json:"atSeconds"`
	Wanted    int     `json:"wanted"`
	Serving   int     `json:"serving"`
	Ready     int     `json:"ready"`
	Spot      int     `json:"spot"`
	OnDemand  int     `json:"onDemand"`
	Standby   int     `json:"standby"`
}

func newReplayReport(in replayInputs, res replay.Result, withSeries bool) replayReport {
	zones := in.Zones
	if zones == nil {
		zones = []string{}
	}
	rep := replayReport{
		Pool: in.Pool, File: in.File, Traces: in.Traces, Prices: in.Prices, Zones: zones, Capacity: string(in.Capacity),
		Notice: in.Notice.String(), ColdStart: in.ColdStart.String(), WarmStart: in.WarmStart.String(),
		From: in.From.String(), Duration: in.Duration.String(),
		Strategy: res.Strategy, Scored: res.Scored.String(), ScoredSeconds: res.Scored.Seconds(),
		Availability: res.Availability, AvailabilityDrained: res.AvailabilityDrained,
		Dips: res.Dips, LongestDip: res.LongestDip.String(), LongestDipSeconds: res.LongestDip.Seconds(),
		Currency: spotsim.Currency, Cost: res.Cost, OnDemandCost: res.OnDemandCost, Savings: res.Savings, Hours: res.Hours,
		Launches: res.Launches, Refused: res.Refused, Preemptions: res.Preemptions, Starts: res.Starts, Stops: res.Stops,
		Rounds: res.Rounds,
	}
	if withSeries {
		rep.Series = make([]seriesPoint, len(res.Series))
		for i, s := range res.Series {
			rep.Series[i] = seriesPoint{AtSeconds: s.At.Seconds(), Wanted: s.Wanted, Serving: s.Serving, Ready: s.Ready,
				Spot: s.Spot, OnDemand: s.OnDemand, Standby: s.Standby}
		}
	}
	return rep
}

func writeReplayJSON(w io.Writer, in replayInputs, res replay.Result, withSeries bool) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(newReplayReport(in, res, withSeries))
}

// chartView says how the table output draws its chart.
type chartView struct {
	width, height int // line width; rows (0: no chart)
	ascii         bool
}

// writeReplayTable prints the inputs, the result and the chart. It is pure:
// everything comes from its arguments.
func writeReplayTable(w io.Writer, in replayInputs, res replay.Result, view chartView) {
	zoneWord := "zones"
	if len(in.Zones) == 1 {
		zoneWord = "zone"
	}
	fmt.Fprintf(w, "Replay of TidePool %s (%s) on %d %s of %s\n\n", in.Pool, in.File, len(in.Zones), zoneWord, in.Traces)
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 4, 2, ' ', 0)
	row := func(label, value, note string) {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", label, value, note)
	}
	flush := func() { // the lines, without the padding of empty notes
		tw.Flush()
		for _, l := range strings.SplitAfter(buf.String(), "\n") {
			if l != "" {
				fmt.Fprintln(w, strings.TrimRight(l, " \n"))
			}
		}
		buf.Reset()
	}
	// The zones are no cell of the value column: a long list would push
	// every note to the right.
	fmt.Fprintf(tw, "  zones\t%s\n", strings.Join(in.Zones, ", "))
	row("capacity", string(in.Capacity), capacityNote(in))
	whole := time.Duration(in.Steps) * in.Gap
	part := "the whole trace"
	switch {
	case in.From > 0:
		part = "from " + replay.FormatDuration(in.From) + " into the " + replay.FormatDuration(whole) + " trace"
	case in.Duration < whole:
		part = "the start of the " + replay.FormatDuration(whole) + " trace"
	}
	row("replayed", replay.FormatDuration(in.Duration), fmt.Sprintf("%s (%d steps of %s)", part, in.Steps, replay.FormatDuration(in.Gap)))
	notice := replay.FormatDuration(in.Notice)
	if in.Notice == 0 {
		notice = "none"
	}
	row("notice", notice, "before a spot instance is reclaimed")
	row("cold start", replay.FormatDuration(in.ColdStart), "launch to ready")
	row("warm start", replay.FormatDuration(in.WarmStart), "standby start to ready")
	if in.Prices != "" {
		row("prices", in.Prices, fmt.Sprintf("%d zones; the others from the catalog", in.PricedZones))
	} else {
		row("prices", "catalog", "set per zone with --prices")
	}
	flush()
	fmt.Fprintln(w)

	row("strategy", dash(res.Strategy), "")
	row("scored time", replay.FormatDuration(res.Scored), "after a "+replay.FormatDuration(replay.DefaultWarmup)+" warm-up")
	row("availability", percent(res.Availability), "ready >= wanted, as the engine serves (an instance under notice serves until it is gone)")
	row("availability, drained", percent(res.AvailabilityDrained), "instances under notice drained at the notice")
	longest := ""
	if res.Dips > 0 {
		longest = "longest " + replay.FormatDuration(res.LongestDip)
	}
	row("dips", strconv.Itoa(res.Dips), longest)
	row("cost", money(res.Cost), "")
	row("all on-demand cost", money(res.OnDemandCost), "the wanted instances, all on-demand")
	savings := "-"
	if res.OnDemandCost > 0 {
		savings = percent(res.Savings)
	}
	row("savings", savings, "against all on-demand")
	row("spot hours", hours(res.Hours.Spot), "instance-hours")
	row("on-demand hours", hours(res.Hours.OnDemand), "")
	row("standby hours", hours(res.Hours.Standby), "stopped, paying for the disk")
	row("launches", strconv.Itoa(res.Launches), "")
	row("refused", strconv.Itoa(res.Refused), "spot launches refused for want of capacity")
	row("preemptions", strconv.Itoa(res.Preemptions), "reclaim notices")
	row("starts", strconv.Itoa(res.Starts), "standby instances started")
	row("stops", strconv.Itoa(res.Stops), "instances stopped into standby")
	flush()

	if view.height <= 0 {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Serving vs wanted over time")
	top := 1
	for _, s := range res.Series {
		top = max(top, s.Wanted, s.Serving)
	}
	// The y labels take at most the digits of 2*top (a row stands for
	// fewer instances than top), a space and the axis.
	plot := max(view.width-len(strconv.Itoa(2*top))-2, 10)
	if view.ascii {
		fmt.Fprint(w, replay.ChartASCII(res.Series, plot, view.height))
	} else {
		fmt.Fprint(w, replay.Chart(res.Series, plot, view.height))
	}
}

func capacityNote(in replayInputs) string {
	how := "--capacity " + string(in.Capacity)
	if in.Detected {
		how = "detected"
	}
	if in.Capacity == replay.CapacityBinary {
		if in.Detected {
			how += ": every value is 0 or 1"
		}
		return how + "; 1 = capacity available (unlimited), 0 = none"
	}
	if in.Detected {
		how += ": values above 1"
	}
	return how + "; each value is the instances the zone can hold"
}

func percent(f float64) string { return fmt.Sprintf("%.3f %%", 100*f) }
func money(f float64) string   { return fmt.Sprintf("%.2f %s", f, spotsim.Currency) }
func hours(f float64) string   { return fmt.Sprintf("%.1f", f) }
