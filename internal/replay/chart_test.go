package replay

import (
	"strings"
	"testing"
	"time"
)

// series builds samples step apart: wanted cycles through its values,
// serving is given per sample.
func series(step time.Duration, wanted []int, serving ...int) []Sample {
	out := make([]Sample, len(serving))
	for i, s := range serving {
		out[i] = Sample{At: time.Duration(i) * step, Wanted: wanted[i%len(wanted)], Serving: s}
	}
	return out
}

// text strips the leading newline of a raw string literal.
func text(s string) string { return strings.TrimPrefix(s, "\n") }

func TestChart(t *testing.T) {
	tests := []struct {
		name          string
		series        []Sample
		width, height int
		ascii         bool
		want          string
	}{
		{
			name: "steady: the wanted line sits on the bars", series: series(time.Hour, []int{2}, 2, 2, 2, 2), width: 10, height: 4,
			want: text(`
  │▁▁▁▁
2 ┤████
1 ┤████
0 └┬───
   0h
█ serving (lowest in the column)  ▒ serving above wanted  ▁ wanted
one column = 1h, one row = 1 instance
`),
		},
		{
			name: "a dip is a gap under the wanted line, marked", series: series(time.Hour, []int{3}, 3, 3, 1, 3, 3, 3), width: 10, height: 5,
			want: text(`
  │▁▁▁▁▁▁
3 ┤██ ███
2 ┤██ ███
1 ┤██████
0 └┬─────
     ▲
   0h
█ serving (lowest in the column)  ▒ serving above wanted  ▁ wanted  ▲ dip
one column = 1h, one row = 1 instance
`),
		},
		{
			name: "ascii", series: series(time.Hour, []int{3}, 3, 3, 1, 3, 3, 3), width: 10, height: 5, ascii: true,
			want: text(`
  |______
3 +## ###
2 +## ###
1 +######
0 ++-----
     ^
   0h
# serving (lowest in the column)  + serving above wanted  _ wanted  ^ dip
one column = 1h, one row = 1 instance
`),
		},
		{
			name: "buckets show their lowest serving; spare above wanted", series: series(30*time.Minute, []int{2}, 2, 2, 2, 0, 2, 2, 3, 3), width: 4, height: 4,
			want: text(`
3 ┤▁▁▁▒
2 ┤█ ██
1 ┤█ ██
0 └┬───
    ▲
   0h
█ serving (lowest in the column)  ▒ serving above wanted  ▁ wanted  ▲ dip
one column = 1h, one row = 1 instance
`),
		},
		{
			name: "one short of 40 shows when a row is 10 instances", series: series(time.Hour, []int{40}, 40, 40, 39, 40), width: 10, height: 5,
			want: text(`
   │▁▁▁▁
40 ┤██ █
30 ┤████
20 ┤████
10 ┤████
 0 └┬───
      ▲
    0h
█ serving (lowest in the column)  ▒ serving above wanted  ▁ wanted  ▲ dip
one column = 1h, one row = 10 instances
`),
		},
		{
			name: "wanted rising inside a bucket is no dip", series: series(time.Hour, []int{1, 2, 2, 2}, 1, 2, 2, 2), width: 2, height: 4,
			want: text(`
  │ ▁
2 ┤▁█
1 ┤██
0 └┬─
   0h
█ serving (lowest in the column)  ▒ serving above wanted  ▁ wanted
one column = 2h, one row = 1 instance
`),
		},
		{
			name: "days", series: series(5*time.Minute, []int{1}, make14Days(1)...), width: 28, height: 3,
			want: text(`
  │▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁
1 ┤████████████████████████████
0 └┬─────────────┬─────────────
   0d            7d
█ serving (lowest in the column)  ▒ serving above wanted  ▁ wanted
one column = 12h, one row = 1 instance
`),
		},
		{name: "empty", series: nil, width: 10, height: 5, want: "(no samples to chart)\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			render := Chart
			if tt.ascii {
				render = ChartASCII
			}
			got := render(tt.series, tt.width, tt.height)
			if got != tt.want {
				t.Errorf("chart:\n%s\nwant:\n%s", got, tt.want)
			}
		})
	}
}

// make14Days is 14 days of 5-minute samples all serving n.
func make14Days(n int) []int {
	out := make([]int, 14*24*12)
	for i := range out {
		out[i] = n
	}
	return out
}

// TestChartShowsEveryDip: a one-sample dip of one instance in a long
// series (70 days of 5-minute samples, the aws3 trace's length) shows at
// every size: as a gap under the wanted line and as a dip mark.
func TestChartShowsEveryDip(t *testing.T) {
	const n = 20160
	for _, want := range []int{1, 4, 40, 400} {
		for _, at := range []int{0, 1234, n - 1} {
			s := make([]Sample, n)
			for i := range s {
				s[i] = Sample{At: time.Duration(i) * DefaultSample, Wanted: want, Serving: want + 2}
			}
			s[at].Serving = want - 1
			for _, size := range [][2]int{{60, 10}, {8, 2}, {200, 40}} {
				out := ChartASCII(s, size[0], size[1])
				lines := strings.Split(out, "\n")
				var dipLine string
				for _, l := range lines {
					if strings.Contains(l, "^") && !strings.Contains(l, "dip") {
						dipLine = l
					}
				}
				if strings.Count(dipLine, "^") != 1 {
					t.Fatalf("want %d, dip at %d, %dx%d: want one dip mark, got line %q in\n%s", want, at, size[0], size[1], dipLine, out)
				}
				col := strings.Index(dipLine, "^")
				// The column holding the dip has a gap (a space) under the
				// wanted line, somewhere in the plot rows.
				// (Lines are trimmed: past a line's end is a space.)
				gap := false
				for _, l := range lines {
					if strings.Contains(l, "-") {
						break // the x axis
					}
					c := byte(' ')
					if col < len(l) {
						c = l[col]
					}
					if strings.Contains(l, "#") && c == ' ' {
						gap = true
					}
				}
				if !gap {
					t.Fatalf("want %d, dip at %d, %dx%d: no gap in column %d:\n%s", want, at, size[0], size[1], col, out)
				}
			}
			if out := ChartASCII(s, 60, 10); strings.IndexFunc(out, func(r rune) bool { return r > 127 }) >= 0 {
				t.Fatalf("ASCII chart holds non-ASCII:\n%s", out)
			}
		}
	}
}

func TestChartLines(t *testing.T) {
	s := series(time.Hour, []int{3}, 3, 1, 0, 5, 3)
	for _, out := range []string{Chart(s, 3, 4), ChartASCII(s, 40, 20), Chart(s, 1, 1), Chart(s, 0, 0)} {
		if !strings.HasSuffix(out, "\n") {
			t.Errorf("chart does not end in a newline:\n%s", out)
		}
		for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
			if strings.HasSuffix(l, " ") {
				t.Errorf("line %q has trailing spaces", l)
			}
		}
	}
	// Rows: at most height plot rows, plus the axis, the dip marks, the
	// labels and two of legend.
	for _, h := range []int{2, 3, 5, 9} {
		out := Chart(series(time.Hour, []int{7}, 9, 7, 2, 7), 10, h)
		if got := strings.Count(out, "\n"); got > h+5 {
			t.Errorf("height %d: %d lines:\n%s", h, got, out)
		}
	}
}

func TestFormatSpan(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", 30 * time.Second: "30s", 5 * time.Minute: "5m", 100 * time.Minute: "1h40m",
		51*time.Hour + 20*time.Second: "2d3h", 59*time.Minute + 59*time.Second: "59m59s",
	} {
		if got := formatSpan(d); got != want {
			t.Errorf("formatSpan(%v) = %q, want %q", d, got, want)
		}
	}
}
