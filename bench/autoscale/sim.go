// Package autoscalebench replays a request-rate trace against a simulated
// pool of inference instances driven by an autoscaler, to compare
// autoscaling policies on SLO attainment and instance-hours (issue 6). It
// owns the trace reader, the rate transform and a discrete-time fluid
// simulation of the pool; the decisions come from internal/autoscale.
package autoscalebench

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// ErrTrace is wrapped by every trace parsing error.
var ErrTrace = errors.New("bad request trace")

// maxTraceMinutes bounds a trace (a year of minutes).
const maxTraceMinutes = 366 * 1440

// ParseTrace reads a "Time (min),Requests" CSV: one row per minute,
// minutes 0, 1, 2, ... in order, requests a non-negative number. It returns
// requests per minute indexed by minute.
func ParseTrace(r io.Reader) ([]float64, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), 4096)
	var out []float64
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if line == 1 {
			if !strings.HasPrefix(strings.ToLower(text), "time") {
				return nil, fmt.Errorf("%w: line 1: want the header \"Time (min),Requests\", got %q", ErrTrace, clip(text))
			}
			continue
		}
		if text == "" {
			continue
		}
		minStr, reqStr, ok := strings.Cut(text, ",")
		if !ok {
			return nil, fmt.Errorf("%w: line %d: want \"minute,requests\", got %q", ErrTrace, line, clip(text))
		}
		m, err := strconv.Atoi(strings.TrimSpace(minStr))
		if err != nil || m != len(out) {
			return nil, fmt.Errorf("%w: line %d: minute %q, want %d (rows must be consecutive from 0)", ErrTrace, line, clip(minStr), len(out))
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(reqStr), 64)
		if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
			return nil, fmt.Errorf("%w: line %d: requests %q is not a non-negative number", ErrTrace, line, clip(reqStr))
		}
		if len(out) >= maxTraceMinutes {
			return nil, fmt.Errorf("%w: more than %d minutes", ErrTrace, maxTraceMinutes)
		}
		out = append(out, v)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: line %d: %v", ErrTrace, line+1, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no data rows", ErrTrace)
	}
	return out, nil
}

func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// Transform maps a trace value (requests per minute) to an arrival rate in
// requests per second: Scale × v^Exponent / 60. An exponent below 1
// compresses the trace's dynamic range (the MAF trace spans five orders of
// magnitude) while keeping the order and timing of every burst.
type Transform struct {
	Exponent float64
	Scale    float64
}

// Rate is the arrival rate (requests/s) for trace value v.
func (t Transform) Rate(v float64) float64 { return t.Scale * math.Pow(v, t.Exponent) / 60 }

// FitTransform returns the transform with the given exponent whose largest
// rate over values equals peak requests/s.
func FitTransform(values []float64, exponent, peak float64) Transform {
	m := 0.0
	for _, v := range values {
		m = max(m, math.Pow(v, exponent))
	}
	if m == 0 {
		return Transform{Exponent: exponent, Scale: 0}
	}
	return Transform{Exponent: exponent, Scale: peak * 60 / m}
}

// Model is the pool's performance model.
type Model struct {
	// Slots is how many requests one instance serves at once (its batch).
	Slots int
	// BaseService is a request's service time on an idle instance.
	BaseService time.Duration
	// Slowdown: service time grows linearly with the busy share of the
	// slots, to BaseService × (1 + Slowdown) when all are busy.
	Slowdown float64
	// ColdStart is how long a launched instance takes to serve.
	ColdStart time.Duration
	// SLO is the latency (queueing + service) a request must not exceed.
	SLO time.Duration
	// Timeout drops a request that waited this long in the queue.
	Timeout time.Duration
}

// ServiceTime is the service time (seconds) with n requests in service on
// one instance.
func (m Model) ServiceTime(n float64) float64 {
	busy := min(max(n/float64(m.Slots), 0), 1)
	return m.BaseService.Seconds() * (1 + m.Slowdown*busy)
}

// Capacity is one instance's throughput (requests/s) with all slots busy.
func (m Model) Capacity() float64 {
	return float64(m.Slots) / m.ServiceTime(float64(m.Slots))
}

// Window is what the metrics source saw over the last minute, one value per
// second, oldest first, the newest at now.
type Window struct {
	// Concurrency is the number of requests in service or queued.
	Concurrency []float64
	// Arrivals is the arrival rate (requests/s).
	Arrivals []float64
}

// Scaler decides the pool size. Decide is called every sync period.
type Scaler interface {
	Decide(now time.Time, current, ready int32, w Window) int32
}

// Result is what one simulation measured inside its scoring window.
type Result struct {
	Requests        float64 // arrived
	Good            float64 // served within the SLO
	Dropped         float64 // timed out in the queue
	InstanceSeconds float64 // billed: from launch to removal
	MaxInstances    int32
	ScaleEvents     int
}

// Attainment is the share of requests served within the SLO.
func (r Result) Attainment() float64 {
	if r.Requests == 0 {
		return 1
	}
	return r.Good / r.Requests
}

// InstanceHours billed in the scoring window.
func (r Result) InstanceHours() float64 { return r.InstanceSeconds / 3600 }

// Run describes one simulation.
type Run struct {
	// Rates are arrival rates (requests/s), one per minute of the trace.
	Rates []float64
	// From and To bound the simulated minutes [From, To); ScoreFrom is the
	// first minute measured (earlier minutes warm up the autoscaler).
	From, To, ScoreFrom int
	// Start is the wall-clock time of minute 0.
	Start time.Time
	// Sync is the autoscaler's evaluation period.
	Sync time.Duration
	// Initial is the pool size at From (all ready).
	Initial int32
	Model   Model
	Scaler  Scaler
}

type cohort struct {
	at    int // arrival second
	count float64
}

// Simulate runs the discrete-time fluid model in 1 s steps:
//
//   - arrivals: the minute's rate, spread evenly over its seconds, join a
//     FIFO queue at the gateway;
//   - service: the requests in service complete at rate N / S(N/k) with k
//     ready instances (processor sharing with the load spread evenly);
//   - admission: queued requests take free slots (k × Slots − N) in FIFO
//     order; a request's latency is its wait plus S at the load after the
//     second's admissions; waits beyond Timeout drop the request;
//   - scaling: every Sync the scaler's decision is applied at once:
//     launches become ready after ColdStart; a scale-down cancels starting
//     instances first, then removes ready ones, whose in-flight requests
//     finish there (billing stops at removal).
func Simulate(r Run) Result {
	var (
		res      Result
		ready    int32   = r.Initial
		starting []int   // second at which each starting instance is ready
		inServ   float64 // requests in service on ready instances
		draining float64 // requests finishing on removed instances
		queue    []cohort
		conc     = make([]float64, 0, 60)
		arr      = make([]float64, 0, 60)
		syncSec  = max(int(r.Sync/time.Second), 1)
		cold     = int(r.Model.ColdStart / time.Second)
		timeout  = int(r.Model.Timeout / time.Second)
		slo      = r.Model.SLO.Seconds()
		slots    = float64(r.Model.Slots)
	)
	for sec := r.From * 60; sec < r.To*60; sec++ {
		scoring := sec >= r.ScoreFrom*60
		// Instances finishing their cold start.
		kept := starting[:0]
		for _, at := range starting {
			if at <= sec {
				ready++
			} else {
				kept = append(kept, at)
			}
		}
		starting = kept

		// Completions.
		if ready > 0 && inServ > 0 {
			inServ -= inServ / r.Model.ServiceTime(inServ/float64(ready))
		}
		if draining > 0 {
			draining -= draining / r.Model.ServiceTime(0)
			if draining < 1e-6 {
				draining = 0
			}
		}

		// Arrivals.
		if a := r.Rates[sec/60]; a > 0 {
			queue = append(queue, cohort{at: sec, count: a})
			if scoring {
				res.Requests += a
			}
		}

		// Admissions in FIFO order.
		free := float64(ready)*slots - inServ
		type admitted struct {
			wait  int
			count float64
			score bool
		}
		var adm []admitted
		for free > 1e-9 && len(queue) > 0 {
			c := &queue[0]
			n := min(c.count, free)
			adm = append(adm, admitted{sec - c.at, n, c.at >= r.ScoreFrom*60})
			inServ += n
			free -= n
			c.count -= n
			if c.count <= 1e-9 {
				queue = queue[1:]
			}
		}
		if len(adm) > 0 {
			s := r.Model.ServiceTime(inServ / float64(max(ready, 1)))
			for _, a := range adm {
				if a.score && float64(a.wait)+s <= slo {
					res.Good += a.count
				}
			}
		}
		// Time-outs.
		for len(queue) > 0 && sec-queue[0].at >= timeout {
			if queue[0].at >= r.ScoreFrom*60 {
				res.Dropped += queue[0].count
			}
			queue = queue[1:]
		}

		// The concurrency the metrics source would report.
		q := 0.0
		for _, c := range queue {
			q += c.count
		}
		conc = push(conc, inServ+q)
		arr = push(arr, r.Rates[sec/60])

		total := ready + int32(len(starting))
		if scoring {
			res.InstanceSeconds += float64(total)
			res.MaxInstances = max(res.MaxInstances, total)
		}

		// Autoscaler.
		if sec%syncSec == 0 {
			now := r.Start.Add(time.Duration(sec) * time.Second)
			want := max(r.Scaler.Decide(now, total, ready, Window{Concurrency: conc, Arrivals: arr}), 0)
			if want != total && scoring {
				res.ScaleEvents++
			}
			for ; total < want; total++ {
				starting = append(starting, sec+cold)
			}
			for ; total > want && len(starting) > 0; total-- {
				starting = starting[:len(starting)-1]
			}
			if total > want && ready > 0 {
				remove := min(total-want, ready)
				moved := inServ * float64(remove) / float64(ready)
				inServ -= moved
				draining += moved
				ready -= remove
			}
		}
	}
	return res
}

// push appends v to a window of at most 60 values.
func push(w []float64, v float64) []float64 {
	if len(w) == 60 {
		copy(w, w[1:])
		w = w[:59]
	}
	return append(w, v)
}
