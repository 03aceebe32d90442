package replay

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// chartGlyphs are the characters of a chart.
type chartGlyphs struct {
	serving, spare, wanted, dip string
	yTick, yLine, corner, xLine string
	xTick                       string
}

var (
	unicodeGlyphs = chartGlyphs{serving: "█", spare: "▒", wanted: "▁", dip: "▲",
		yTick: "┤", yLine: "│", corner: "└", xLine: "─", xTick: "┬"}
	asciiGlyphs = chartGlyphs{serving: "#", spare: "+", wanted: "_", dip: "^",
		yTick: "+", yLine: "|", corner: "+", xLine: "-", xTick: "+"}
)

// Chart draws serving against wanted over time with Unicode block
// characters; ChartASCII draws the same with ASCII only. See chart.
func Chart(series []Sample, width, height int) string {
	return chart(series, width, height, unicodeGlyphs)
}

// ChartASCII is Chart for terminals without Unicode (TERM=dumb, --ascii).
func ChartASCII(series []Sample, width, height int) string {
	return chart(series, width, height, asciiGlyphs)
}

// chartColumn is one column of a chart: a bucket of consecutive samples.
type chartColumn struct {
	at      time.Duration // At of the bucket's first sample
	serving int           // the lowest Serving of the bucket
	wanted  int
	dip     bool // some sample of the bucket served fewer than it wanted
}

// chart draws series as at most width columns (the plot, not counting the
// y axis) and at most height rows (the plot, not counting the x axis, its
// labels and the legend).
//
// The samples are cut into width buckets of consecutive samples (one per
// sample when there are fewer); a column shows the lowest Serving of its
// bucket, since a dip is what matters, as a bar of serving characters up to
// the wanted level and spare characters above it, and the wanted level as
// a line right on top of it. Wanted is the highest Wanted among the
// bucket's samples that served fewer than they wanted, else the lowest of
// the bucket, so a column shows a gap under the wanted line exactly when
// its bucket holds a dip; a dip is also marked under the x axis, so that
// one instance short of 40 shows even when a row stands for several.
//
// y is instances, one per row when they fit, else the fewest whole
// instances per row that fit; x is time with labels in minutes, hours or
// days. Trailing spaces are trimmed; every line ends in a newline.
func chart(series []Sample, width, height int, g chartGlyphs) string {
	if len(series) == 0 {
		return "(no samples to chart)\n"
	}
	width = max(width, 1)
	height = max(height, 2)
	cols := bucketColumns(series, width)

	top := 1
	for _, c := range cols {
		top = max(top, c.serving, c.wanted)
	}
	// One row above the highest level holds the wanted line when it is
	// the highest.
	perRow := (top + height - 2) / (height - 1)
	rowsFor := func(v int) int { return (v + perRow - 1) / perRow }
	hs := make([]int, len(cols))
	hw := make([]int, len(cols))
	rows := 0
	for i, c := range cols {
		hs[i], hw[i] = rowsFor(c.serving), rowsFor(c.wanted)
		if c.dip && hs[i] >= hw[i] {
			hs[i] = hw[i] - 1 // a dip shows even when rounded away
		}
		rows = max(rows, hs[i])
		if hw[i] > 0 && hs[i] <= hw[i] {
			rows = max(rows, hw[i]+1)
		}
	}

	levels := rowsFor(top) // rows that stand for instances
	labelEvery := max(1, (levels+4)/5)
	label := func(row int) string { // row 1 is the lowest
		if row > levels || (levels-row)%labelEvery != 0 {
			return ""
		}
		return strconv.Itoa(row * perRow)
	}
	gutter := len(strconv.Itoa(levels * perRow))

	var b strings.Builder
	line := func(s string) {
		b.WriteString(strings.TrimRight(s, " "))
		b.WriteByte('\n')
	}
	var row strings.Builder
	for r := rows; r >= 1; r-- {
		row.Reset()
		lb := label(r)
		row.WriteString(strings.Repeat(" ", gutter-len(lb)) + lb + " ")
		if lb != "" {
			row.WriteString(g.yTick)
		} else {
			row.WriteString(g.yLine)
		}
		for i := range cols {
			switch {
			case r <= min(hs[i], hw[i]):
				row.WriteString(g.serving)
			case r <= hs[i]:
				row.WriteString(g.spare)
			case r == hw[i]+1 && hw[i] > 0:
				row.WriteString(g.wanted)
			default:
				row.WriteByte(' ')
			}
		}
		line(row.String())
	}

	// The x axis, its ticks and labels.
	ticks := timeTicks(cols)
	row.Reset()
	row.WriteString(strings.Repeat(" ", gutter-1) + "0 " + g.corner)
	for i := range cols {
		if _, ok := ticks[i]; ok {
			row.WriteString(g.xTick)
		} else {
			row.WriteString(g.xLine)
		}
	}
	line(row.String())
	anyDip := false
	for _, c := range cols {
		anyDip = anyDip || c.dip
	}
	if anyDip {
		row.Reset()
		row.WriteString(strings.Repeat(" ", gutter+2))
		for _, c := range cols {
			if c.dip {
				row.WriteString(g.dip)
			} else {
				row.WriteByte(' ')
			}
		}
		line(row.String())
	}
	labels := []byte(strings.Repeat(" ", gutter+2+len(cols)))
	next := 0 // first free position
	for i := range cols {
		text, ok := ticks[i]
		pos := gutter + 2 + i
		if !ok || pos < next || pos+len(text) > len(labels) {
			continue
		}
		copy(labels[pos:], text)
		next = pos + len(text) + 1
	}
	line(string(labels))

	// The legend.
	per := "1 instance"
	if perRow > 1 {
		per = strconv.Itoa(perRow) + " instances"
	}
	legend := fmt.Sprintf("%s serving (lowest in the column)  %s serving above wanted  %s wanted", g.serving, g.spare, g.wanted)
	if anyDip {
		legend += fmt.Sprintf("  %s dip", g.dip)
	}
	line(legend)
	line(fmt.Sprintf("one column = %s, one row = %s", formatSpan(columnSpan(series, len(cols))), per))
	return b.String()
}

// bucketColumns cuts series into min(width, len(series)) buckets of
// consecutive samples.
func bucketColumns(series []Sample, width int) []chartColumn {
	n := len(series)
	ncol := min(width, n)
	cols := make([]chartColumn, ncol)
	for c := range cols {
		lo, hi := c*n/ncol, (c+1)*n/ncol
		col := chartColumn{at: series[lo].At, serving: series[lo].Serving, wanted: series[lo].Wanted}
		shortWanted, anyShort := 0, false
		for _, s := range series[lo:hi] {
			col.serving = min(col.serving, s.Serving)
			col.wanted = min(col.wanted, s.Wanted)
			if s.Serving < s.Wanted {
				anyShort = true
				shortWanted = max(shortWanted, s.Wanted)
			}
		}
		if anyShort {
			col.dip, col.wanted = true, shortWanted
		}
		cols[c] = col
	}
	return cols
}

// sampleStep is the spacing of series (DefaultSample for one sample).
func sampleStep(series []Sample) time.Duration {
	if len(series) > 1 {
		if d := (series[len(series)-1].At - series[0].At) / time.Duration(len(series)-1); d > 0 {
			return d
		}
	}
	return DefaultSample
}

// columnSpan is the trace time one of ncol columns stands for.
func columnSpan(series []Sample, ncol int) time.Duration {
	total := time.Duration(len(series)) * sampleStep(series)
	return total / time.Duration(max(ncol, 1))
}

// tickSteps are the spacings tried for the x axis's labels.
var tickSteps = []time.Duration{
	5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour,
	24 * time.Hour, 48 * time.Hour, 72 * time.Hour, 7 * 24 * time.Hour, 14 * 24 * time.Hour,
	30 * 24 * time.Hour, 60 * 24 * time.Hour, 90 * 24 * time.Hour, 180 * 24 * time.Hour, 365 * 24 * time.Hour,
}

// minTickGap is the fewest columns between two labels.
const minTickGap = 8

// timeTicks places labels at round times: column → label text, in days
// when the chart spans two days or more and the step is whole days, else in
// hours or minutes. The column of time t is the bucket whose first sample
// is the first at or after t.
func timeTicks(cols []chartColumn) map[int]string {
	ticks := map[int]string{}
	if len(cols) == 0 {
		return ticks
	}
	span := time.Duration(0)
	if len(cols) > 1 {
		span = (cols[len(cols)-1].at - cols[0].at) / time.Duration(len(cols)-1)
	}
	step := tickSteps[len(tickSteps)-1]
	for _, s := range tickSteps {
		if span <= 0 || s >= span*minTickGap {
			step = s
			break
		}
	}
	unit, suffix := time.Minute, "m"
	whole := cols[len(cols)-1].at - cols[0].at + span
	switch {
	case step%(24*time.Hour) == 0 && whole >= 48*time.Hour:
		unit, suffix = 24*time.Hour, "d"
	case step%time.Hour == 0:
		unit, suffix = time.Hour, "h"
	}
	first := cols[0].at
	t := (first + step - 1) / step * step
	if first <= 0 {
		t = 0
	}
	c := 0
	for ; ; t += step {
		for c < len(cols) && cols[c].at < t {
			c++
		}
		if c == len(cols) {
			break
		}
		if c > 0 && cols[c].at-t >= span && span > 0 {
			continue // no column starts near t
		}
		ticks[c] = strconv.FormatInt(int64(t/unit), 10) + suffix
		c++
		if c == len(cols) {
			break
		}
	}
	return ticks
}

// formatSpan writes d in whole units: 2d3h, 1h40m, 5m, 30s (minutes from
// an hour up).
func formatSpan(d time.Duration) string {
	d = d.Round(time.Second)
	if d >= time.Hour {
		d = d.Round(time.Minute)
	}
	if d <= 0 {
		return "0s"
	}
	return wholeUnits(d)
}

// FormatDuration writes d in whole units, largest first: 69d23h30m, 2m,
// 1m30s, 0s (below a second as Go does).
func FormatDuration(d time.Duration) string {
	if d < 0 {
		return "-" + FormatDuration(-d)
	}
	if d < time.Second {
		if d == 0 {
			return "0s"
		}
		return d.String()
	}
	return wholeUnits(d.Round(time.Second))
}

// wholeUnits writes d >= 1s in days, hours, minutes and seconds.
func wholeUnits(d time.Duration) string {
	var b strings.Builder
	for _, u := range []struct {
		d time.Duration
		s string
	}{{24 * time.Hour, "d"}, {time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}} {
		if n := d / u.d; n > 0 {
			fmt.Fprintf(&b, "%d%s", n, u.s)
			d -= n * u.d
		}
	}
	return b.String()
}
