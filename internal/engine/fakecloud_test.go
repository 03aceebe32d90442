package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fakeclock "k8s.io/utils/clock/testing"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/events"
	"github.com/tidegpu/tidegpu/internal/provider"
	"github.com/tidegpu/tidegpu/internal/registrar"
)

// fakeCloud is a recording fake provider (after Karpenter's fake cloud
// provider): it keeps instances in memory on a fake clock, records every
// call, honours launch tokens as EC2 does (a launch with a token already
// used returns that launch's instance), and fails the next calls with
// the errors it is told.
type fakeCloud struct {
	clk *fakeclock.FakeClock

	mu      sync.Mutex
	n       int
	insts   map[string]*provider.Instance
	byToken map[string]string
	// hidden: made by a launch whose answer was lost, and not listed
	// until a launch with its token returns it (List is eventually
	// consistent, as EC2's DescribeInstances).
	hidden map[string]bool
	offers []provider.Offering
	calls  []string
	tokens []string // the token of every Launch call

	// Errors to return from the next calls, first first.
	nextLaunch, nextTerminate, nextStart, nextStop []fault
}

// fault is one injected error; lost: the call takes effect but the error
// is returned (the answer was lost).
type fault struct {
	err  error
	lost bool
}

var (
	_ provider.Provider       = (*fakeCloud)(nil)
	_ provider.OfferingSource = (*fakeCloud)(nil)
	_ provider.Stopper        = (*fakeCloud)(nil)
)

func newFakeCloud(clk *fakeclock.FakeClock, offers ...provider.Offering) *fakeCloud {
	return &fakeCloud{clk: clk, insts: map[string]*provider.Instance{}, byToken: map[string]string{}, hidden: map[string]bool{}, offers: offers}
}

func (f *fakeCloud) Name() string { return "fake" }

func pop(q *[]fault) (fault, bool) {
	if len(*q) == 0 {
		return fault{}, false
	}
	x := (*q)[0]
	*q = (*q)[1:]
	return x, true
}

func (f *fakeCloud) record(format string, args ...any) {
	f.calls = append(f.calls, fmt.Sprintf(format, args...))
}

func (f *fakeCloud) Launch(_ context.Context, req provider.LaunchRequest) (provider.Instance, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("launch %s %s", req.Market, req.Zone)
	f.tokens = append(f.tokens, req.Token)
	if id, ok := f.byToken[req.Token]; ok && f.insts[id] != nil {
		delete(f.hidden, id)
		return *f.insts[id], nil
	}
	x, failing := pop(&f.nextLaunch)
	if failing && !x.lost {
		return provider.Instance{}, x.err
	}
	f.n++
	in := &provider.Instance{ID: fmt.Sprintf("i-%d", f.n), Pool: req.Pool, Zone: req.Zone, InstanceType: req.InstanceType,
		Market: req.Market, State: provider.StateRunning, Address: fmt.Sprintf("10.0.0.%d:8000", f.n), LaunchedAt: f.clk.Now()}
	f.insts[in.ID] = in
	f.byToken[req.Token] = in.ID
	if failing {
		f.hidden[in.ID] = true
		return provider.Instance{}, x.err
	}
	return *in, nil
}

func (f *fakeCloud) Terminate(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("terminate %s", id)
	x, failing := pop(&f.nextTerminate)
	if failing && !x.lost {
		return x.err
	}
	delete(f.insts, id)
	return x.err
}

func (f *fakeCloud) List(_ context.Context, pool string) ([]provider.Instance, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []provider.Instance
	for id, in := range f.insts {
		if in.Pool == pool && !f.hidden[id] {
			out = append(out, *in)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

func (f *fakeCloud) Offerings(context.Context, *tidev1.TidePoolSpec) ([]provider.Offering, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("offerings")
	return append([]provider.Offering(nil), f.offers...), nil
}

func (f *fakeCloud) Stop(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("stop %s", id)
	if x, failing := pop(&f.nextStop); failing {
		return x.err
	}
	if in := f.insts[id]; in != nil {
		in.State = provider.StateStopped
	}
	return nil
}

func (f *fakeCloud) Start(_ context.Context, id string) (provider.Instance, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("start %s", id)
	if x, failing := pop(&f.nextStart); failing {
		return provider.Instance{}, x.err
	}
	in := f.insts[id]
	if in == nil {
		return provider.Instance{}, errors.New("no such instance")
	}
	in.State = provider.StateRunning
	return *in, nil
}

// add puts a running instance of pool into the cloud.
func (f *fakeCloud) add(in provider.Instance) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.insts[in.ID] = &in
}

// notice gives an instance a reclaim notice and returns the event.
func (f *fakeCloud) notice(id string, at time.Time) provider.Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	in := f.insts[id]
	in.InterruptAt = &at
	return provider.Event{Type: provider.EventInterruption, Instance: *in}
}

// takeCalls returns the calls recorded since the last takeCalls, without
// the offering look-ups.
func (f *fakeCloud) takeCalls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.calls {
		if c != "offerings" {
			out = append(out, c)
		}
	}
	f.calls = nil
	return out
}

// gateway is a recording registrar that reports requests in flight.
type gateway struct {
	mu       sync.Mutex
	targets  []string
	inFlight int
}

func (g *gateway) Sync(_ context.Context, _ string, ts []registrar.Target) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.targets = g.targets[:0]
	for _, t := range ts {
		g.targets = append(g.targets, t.ID)
	}
	return nil
}

func (g *gateway) InFlight(string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.inFlight
}

func (g *gateway) now() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.targets...)
}

// loop is a pool driven round by round on a fake clock.
type loop struct {
	t     *testing.T
	clk   *fakeclock.FakeClock
	cloud *fakeCloud
	gw    *gateway
	rec   *events.Recorder
	drv   *Driver
}

func newLoop(t *testing.T, spec tidev1.TidePoolSpec, offers ...provider.Offering) *loop {
	t.Helper()
	clk := fakeclock.NewFakeClock(t0)
	l := &loop{t: t, clk: clk, cloud: newFakeCloud(clk, offers...), gw: &gateway{inFlight: -1}}
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	l.rec = events.NewRecorder(1000, clk, discard)
	drv, err := NewDriver(Options{Provider: l.cloud, Registrar: l.gw, Recorder: l.rec, Clock: clk, Logger: discard},
		&tidev1.TidePool{ObjectMeta: metav1.ObjectMeta{Name: "p", Generation: 1}, Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	l.drv = drv
	return l
}

// round runs one round and returns when the pool wants the next.
func (l *loop) round() time.Duration { return l.drv.Round(context.Background()) }

// readyAll marks every awaited instance ready.
func (l *loop) readyAll() {
	for _, in := range l.drv.Awaiting() {
		l.drv.MarkReady(in.ID)
	}
}

func (l *loop) setSpec(spec tidev1.TidePoolSpec) {
	l.drv.m.Apply(&tidev1.TidePool{ObjectMeta: metav1.ObjectMeta{Name: "p", Generation: 2}, Spec: spec})
}

func (l *loop) events(reason string) []string {
	var out []string
	for _, e := range l.rec.List(0, "p") {
		if e.Reason == reason {
			out = append(out, e.Message)
		}
	}
	return out
}
