package autoscalebench

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func TestParseTrace(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []float64
		err  bool
	}{
		{"ok", "Time (min),Requests\n0,4033\n1,1980\n2,0\n", []float64{4033, 1980, 0}, false},
		{"crlf and blank lines", "Time (min),Requests\r\n0,1\r\n\r\n1,2.5\r\n", []float64{1, 2.5}, false},
		{"no header", "0,1\n1,2\n", nil, true},
		{"gap", "Time (min),Requests\n0,1\n2,2\n", nil, true},
		{"negative", "Time (min),Requests\n0,-1\n", nil, true},
		{"nan", "Time (min),Requests\n0,NaN\n", nil, true},
		{"missing column", "Time (min),Requests\n0\n", nil, true},
		{"empty", "Time (min),Requests\n", nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseTrace(strings.NewReader(tc.in))
			if tc.err {
				if !errors.Is(err, ErrTrace) {
					t.Fatalf("err = %v, want ErrTrace", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("got %v, want %v", got, tc.want)
				}
			}
		})
	}
}

func FuzzParseTrace(f *testing.F) {
	f.Add("Time (min),Requests\n0,4033\n1,1980\n")
	f.Add("Time (min),Requests\n0,1e308\n1,0x10\n")
	f.Add("time\n0,,\n")
	f.Fuzz(func(t *testing.T, in string) {
		v, err := ParseTrace(strings.NewReader(in))
		if err != nil {
			if !errors.Is(err, ErrTrace) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		for _, x := range v {
			if !(x >= 0) || math.IsInf(x, 0) {
				t.Fatalf("accepted %v", x)
			}
		}
	})
}

func TestTransform(t *testing.T) {
	tr := FitTransform([]float64{16, 81, 625}, 0.25, 10)
	// 625^0.25 = 5 is the peak: scale = 10*60/5 = 120 → 81 → 120*3/60 = 6.
	if got := tr.Rate(81); math.Abs(got-6) > 1e-9 {
		t.Fatalf("rate(81) = %v, want 6", got)
	}
	if got := tr.Rate(625); math.Abs(got-10) > 1e-9 {
		t.Fatalf("peak rate = %v, want 10", got)
	}
}

func TestServiceModel(t *testing.T) {
	m := Model{Slots: 8, BaseService: 2 * time.Second, Slowdown: 1}
	tests := []struct{ n, want float64 }{{0, 2}, {4, 3}, {8, 4}, {16, 4}, {-1, 2}}
	for _, tc := range tests {
		if got := m.ServiceTime(tc.n); got != tc.want {
			t.Fatalf("S(%v) = %v, want %v", tc.n, got, tc.want)
		}
	}
	if got := m.Capacity(); got != 2 {
		t.Fatalf("capacity %v, want 2", got)
	}
}

func simModel() Model {
	return Model{Slots: 8, BaseService: 2 * time.Second, Slowdown: 1, ColdStart: 2 * time.Minute, SLO: 10 * time.Second, Timeout: time.Minute}
}

func TestSimulateSteadyLoad(t *testing.T) {
	// 3 req/s on 2 instances (capacity 4 req/s): everything within the SLO,
	// 2 instances for an hour = 2 instance-hours.
	rates := make([]float64, 60)
	for i := range rates {
		rates[i] = 3
	}
	r := Simulate(Run{Rates: rates, From: 0, To: 60, Start: time.Unix(0, 0), Sync: 15 * time.Second, Initial: 2, Model: simModel(), Scaler: fixedScaler(2)})
	if math.Abs(r.Requests-3*3600) > 1e-6 || r.Attainment() < 0.9999 || r.InstanceHours() != 2 {
		t.Fatalf("result %+v attainment %v", r, r.Attainment())
	}
}

func TestSimulateOverload(t *testing.T) {
	// 6 req/s on one instance (capacity 2): the queue grows, requests time
	// out and attainment collapses.
	rates := make([]float64, 30)
	for i := range rates {
		rates[i] = 6
	}
	r := Simulate(Run{Rates: rates, From: 0, To: 30, Start: time.Unix(0, 0), Sync: 15 * time.Second, Initial: 1, Model: simModel(), Scaler: fixedScaler(1)})
	if r.Attainment() > 0.5 || r.Dropped == 0 {
		t.Fatalf("overload attainment %v dropped %v", r.Attainment(), r.Dropped)
	}
}

// stepScaler asks for `to` instances from `at` on.
type stepScaler struct {
	at     time.Time
	before int32
	to     int32
}

func (s stepScaler) Decide(now time.Time, _, _ int32, _ Window) int32 {
	if now.Before(s.at) {
		return s.before
	}
	return s.to
}

func TestSimulateColdStartAndBilling(t *testing.T) {
	// Scale 1 → 3 at minute 10: the two launches bill from minute 10 but
	// serve only from minute 12 (cold start 2 min). 20 minutes:
	// 1×20 + 2×10 = 40 instance-minutes.
	rates := make([]float64, 20)
	start := time.Unix(0, 0)
	r := Simulate(Run{Rates: rates, From: 0, To: 20, Start: start, Sync: 15 * time.Second, Initial: 1, Model: simModel(),
		Scaler: stepScaler{at: start.Add(10 * time.Minute), before: 1, to: 3}})
	if got := r.InstanceSeconds / 60; math.Abs(got-40) > 0.1 {
		t.Fatalf("instance-minutes %v, want 40", got)
	}
	if r.MaxInstances != 3 || r.ScaleEvents != 1 {
		t.Fatalf("result %+v", r)
	}
}
