// Package local is the provider whose instances are OS processes on this
// machine: what `tidegpu up` runs. Each instance is one process (its own
// process group) started from the pool's spec.local.command template, or the
// built-in simulator (`tidegpu sim`) by default, listening on a free
// loopback port.
//
// Everything lives in a state directory:
//
//	StateDir/lock        flock held by the running provider (one run per dir)
//	StateDir/state.json  the live instances: pid, start time, port, ...
//	StateDir/logs/ID.log stdout and stderr of instance ID
//
// Instances outlive the provider on purpose: a run killed with -9 leaves its
// processes and state.json behind, and the next run's Adopt either takes
// them over or stops them. A pid is only trusted together with the process
// start time recorded next to it, so a reused pid is never signalled.
// Every instance also carries ownership tags in its environment
// (TIDEGPU_LOCAL_STATE_DIR=<StateDir>, its id, pool, port, ...), the way a
// cloud instance carries tags, so that Adopt finds, by scanning /proc, the
// instances a run started but did not live to write into state.json.
//
// Exits are seen at once: children are waited for, adopted processes are
// watched through a pidfd (or polled where pidfds are unavailable), and each
// exit is reported as a provider.EventGone. Reclaim plays the spot market's
// part: an interruption notice, then SIGKILL when it runs out, timed by an
// injectable clock. Readiness (whether the server answers HTTP) is the
// engine's business, not this package's.
package local

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/utils/clock"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/provider"
	"github.com/tidegpu/tidegpu/internal/provider/eventq"
)

// Zone is the zone of every local instance.
const Zone = "local"

// DefaultInstanceType is the instance type of a local instance whose
// request and spec name none.
const DefaultInstanceType = "local"

// Defaults of Options.
const (
	DefaultHost      = "127.0.0.1"
	DefaultStopGrace = 5 * time.Second
)

// eventBuffer is the capacity of the Events channel; more events wait in an
// unbounded queue behind it.
const eventBuffer = 256

// Causes prefixed to the Gone message when this provider ended the process.
const (
	causeTerminated = "terminated"
	causeReclaimed  = "reclaimed"
	causeStopped    = "stopped"
)

var (
	// ErrNotFound is returned (wrapped) by Reclaim for an unknown instance.
	ErrNotFound = errors.New("no such instance")
	// ErrClosed is returned (wrapped) by Launch and Adopt after Close or
	// Detach.
	ErrClosed = errors.New("local provider closed")
)

var (
	_ provider.Provider    = (*Provider)(nil)
	_ provider.EventSource = (*Provider)(nil)
	_ provider.Reclaimer   = (*Provider)(nil)
)

// Options configure a Provider.
type Options struct {
	// StateDir holds state.json, lock and logs/<id>.log. Required; created
	// if missing.
	StateDir string
	// SelfExe is the binary of the default command [SelfExe, "sim"].
	// Default os.Executable().
	SelfExe string
	// Host instances listen on and are addressed by. Default 127.0.0.1.
	Host string
	// StopGrace is how long Terminate, Close and Adopt wait after SIGTERM
	// before SIGKILL. Zero or less means 5s. It runs on the real clock,
	// not Clock.
	StopGrace time.Duration
	// Clock times reclaim notices and stamps LaunchedAt and InterruptAt.
	// Default the real clock.
	Clock clock.Clock
	// Logger receives the provider's logs. Default slog.Default().
	Logger *slog.Logger
}

// Provider runs instances as OS processes. It implements provider.Provider,
// provider.EventSource and provider.Reclaimer. Create it with New; call
// Adopt (optionally) before the first Launch, and Close at the end.
type Provider struct {
	stateDir, statePath, logDir string
	selfExe, host               string
	grace                       time.Duration
	clock                       clock.Clock
	log                         *slog.Logger

	// ownerDir is the canonical StateDir (symlinks resolved): the value of
	// the ownership marker envStateDir in every instance's environment.
	ownerDir string

	lockFile *os.File
	events   *eventq.Queue

	// unwatch is closed, and stopW closed, to make watchers of adopted
	// processes return without reporting anything (Detach, or Close giving
	// up). stopR is polled next to each pidfd.
	unwatch      chan struct{}
	unwatchOnce  sync.Once
	stopR, stopW int
	watchers     sync.WaitGroup // watchers of adopted processes

	// noPidfd forces the fallback that polls /proc/<pid>/stat (tests).
	noPidfd bool
	// crashAfterStart, if set and true for an instance id, makes Launch
	// play a kill -9 of this process right after the child started and
	// before anything records it: Launch returns errSimulatedCrash and
	// forgets the child (tests only; the test then calls Detach).
	crashAfterStart func(id string) bool

	// launchMu serializes Launch, Adopt, Close and Detach.
	launchMu sync.Mutex

	mu       sync.Mutex
	procs    map[string]*proc
	tokens   map[string]string // launch token → instance id, while it lives
	launched bool              // Launch was called
	adopted  bool              // Adopt was called
	closed   bool              // Close or Detach was called: no more launches
	released bool              // the lock is (being) given up: no more state writes or events
	previous int               // entries found in state.json by New
	// stopping holds the entries of an earlier run that Adopt is stopping:
	// they stay in the state file until they are gone.
	stopping map[string]stateEntry
}

// proc is one instance's process.
type proc struct {
	inst      provider.Instance
	pid, pgid int
	startTime uint64
	port      int
	command   []string
	token     string
	cmd       *exec.Cmd // nil when adopted

	exited   bool          // the process has exited: never signal it again
	cause    string        // why this provider ended it, if it did
	stopping bool          // SIGTERM sent, SIGKILL scheduled
	done     chan struct{} // closed once it is gone and accounted for
}

// New opens StateDir and takes its lock. It fails, naming the directory,
// when another run holds the lock.
func New(opts Options) (*Provider, error) {
	if opts.StateDir == "" {
		return nil, errors.New("local: Options.StateDir is required")
	}
	dir, err := filepath.Abs(opts.StateDir)
	if err != nil {
		return nil, fmt.Errorf("local: state dir %s: %w", opts.StateDir, err)
	}
	p := &Provider{
		stateDir:  dir,
		statePath: filepath.Join(dir, "state.json"),
		logDir:    filepath.Join(dir, "logs"),
		selfExe:   opts.SelfExe,
		host:      opts.Host,
		grace:     opts.StopGrace,
		clock:     opts.Clock,
		log:       opts.Logger,
		unwatch:   make(chan struct{}),
		procs:     make(map[string]*proc),
		tokens:    make(map[string]string),
		stopping:  make(map[string]stateEntry),
	}
	if p.selfExe == "" {
		if p.selfExe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("local: finding this binary for the default command: %w", err)
		}
	}
	if p.host == "" {
		p.host = DefaultHost
	}
	if p.grace <= 0 {
		p.grace = DefaultStopGrace
	}
	if p.clock == nil {
		p.clock = clock.RealClock{}
	}
	if p.log == nil {
		p.log = slog.Default()
	}
	p.log = p.log.With("provider", tidev1.ProviderLocal)

	if err := os.MkdirAll(p.logDir, 0o755); err != nil {
		return nil, fmt.Errorf("local: state dir %s: %w", dir, err)
	}
	// The marker must name the directory the same way in every run that
	// shares its lock and state file, whatever path led there.
	p.ownerDir = dir
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		p.ownerDir = real
	}
	if p.lockFile, err = lockDir(dir); err != nil {
		return nil, err
	}
	var pipe [2]int
	if err := unix.Pipe2(pipe[:], unix.O_CLOEXEC); err != nil {
		unlockDir(p.lockFile)
		return nil, fmt.Errorf("local: pipe: %w", err)
	}
	p.stopR, p.stopW = pipe[0], pipe[1]
	if entries, err := readStateFile(p.statePath); err == nil {
		p.previous = len(entries)
	}
	p.events = eventq.New(eventBuffer, p.log)
	return p, nil
}

// lockDir takes an exclusive, non-blocking flock on dir/lock and writes
// this process's pid into it for the error message of the next contender.
func lockDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, "lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("local: state dir %s: %w", dir, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		holder := ""
		if b, rerr := os.ReadFile(path); rerr == nil && len(strings.TrimSpace(string(b))) > 0 {
			holder = " (pid " + strings.TrimSpace(string(b)) + ")"
		}
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("local: state dir %s is in use by another tidegpu run%s; stop it or use another state dir", dir, holder)
		}
		return nil, fmt.Errorf("local: locking state dir %s: %w", dir, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

func unlockDir(f *os.File) {
	_ = f.Truncate(0)
	_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
	_ = f.Close()
}

// Name returns "local".
func (p *Provider) Name() string { return tidev1.ProviderLocal }

// Events delivers instance events (Changed on Terminate, Interruption on
// Reclaim with notice, Gone on every exit) until Close or Detach, which
// close the channel.
func (p *Provider) Events() <-chan provider.Event { return p.events.C() }

// Launch starts one instance and returns it Running with its Address. It
// does not wait for the server to answer. The same non-empty req.Token
// returns the same instance while it lives. ctx only bounds the call: the
// process is not tied to it.
func (p *Provider) Launch(ctx context.Context, req provider.LaunchRequest) (provider.Instance, error) {
	if err := ctx.Err(); err != nil {
		return provider.Instance{}, err
	}
	p.launchMu.Lock()
	defer p.launchMu.Unlock()

	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return provider.Instance{}, fmt.Errorf("local: launch: %w", ErrClosed)
	}
	if req.Token != "" {
		if pr := p.procs[p.tokens[req.Token]]; pr != nil {
			inst := cloneInstance(pr.inst)
			p.mu.Unlock()
			return inst, nil
		}
	}
	if !p.launched && !p.adopted && p.previous > 0 {
		p.log.Warn("state.json lists instances of an earlier run but Adopt was not called; they are forgotten and keep running",
			"stateFile", p.statePath, "instances", p.previous)
	}
	p.launched = true
	id, err := p.newIDLocked()
	p.mu.Unlock()
	if err != nil {
		return provider.Instance{}, fmt.Errorf("local: launch: %w", err)
	}

	spec := req.Spec
	if spec == nil {
		spec = &tidev1.TidePoolSpec{}
	}
	var local tidev1.LocalSpec
	if spec.Local != nil {
		local = *spec.Local
	}
	market := req.Market
	if market == "" {
		market = provider.MarketFor(spec.InstanceChargeType)
	}
	if market != provider.MarketSpot && market != provider.MarketOnDemand {
		return provider.Instance{}, fmt.Errorf("local: launch %s: unknown market %q", id, market)
	}
	itype := req.InstanceType
	if itype == "" {
		itype = spec.InstanceType
	}
	if itype == "" {
		itype = DefaultInstanceType
	}
	port, err := p.pickPort()
	if err != nil {
		return provider.Instance{}, fmt.Errorf("local: launch %s: %w", id, err)
	}
	vars := templateVars{Port: port, Host: p.host, InstanceID: id, Pool: req.Pool}
	argv, err := renderCommand(local.Command, p.selfExe, vars)
	if err != nil {
		return provider.Instance{}, fmt.Errorf("local: launch %s: %w", id, err)
	}
	launchedAt := p.clock.Now()
	tags := ownerTags{StateDir: p.ownerDir, LaunchedAt: launchedAt, Market: market, InstanceType: itype}
	env, err := buildEnv(os.Environ(), local.Env, vars, tags)
	if err != nil {
		return provider.Instance{}, fmt.Errorf("local: launch %s: %w", id, err)
	}
	logPath := filepath.Join(p.logDir, id+".log")
	logFile, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return provider.Instance{}, fmt.Errorf("local: launch %s: log file: %w", id, err)
	}
	// Not CommandContext: the instance must outlive ctx (and this process).
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logFile, logFile // files, never pipes: the parent may die
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	logFile.Close() // the child has its own copy
	if err != nil {
		os.Remove(logPath)
		return provider.Instance{}, fmt.Errorf("local: launch %s: starting command %q: %w", id, argv[0], err)
	}
	// From here until writeStateLocked below, only the child's environment
	// says it is ours: a kill -9 of this process in between leaves it out
	// of state.json, and the next run's Adopt finds it by its ownership
	// tags (scanMarked). No intent record is written before Start: it could
	// not hold the pid or start time yet, so the next run would have to find
	// the process by its tags anyway, and the tags exist exactly when the
	// process does (execve sets them), which a file written before or after
	// Start cannot promise.
	if p.crashAfterStart != nil && p.crashAfterStart(id) {
		// Reaped as init reaps the orphans of a dead parent.
		go func() { _ = cmd.Wait() }()
		return provider.Instance{}, fmt.Errorf("local: launch %s: %w", id, errSimulatedCrash)
	}
	pid := cmd.Process.Pid
	st, err := readStat(pid)
	if err != nil {
		// Without a start time it stays out of state.json; a later run
		// can still find it by its tags if /proc is readable by then.
		p.log.Warn("reading the start time of a new instance", "id", id, "pid", pid, "err", err)
	}

	pr := &proc{
		inst: provider.Instance{
			ID:           id,
			Pool:         req.Pool,
			Zone:         Zone,
			InstanceType: itype,
			Market:       market,
			State:        provider.StateRunning,
			PrivateIP:    p.host,
			PublicIP:     p.host,
			Address:      vars.address(),
			LaunchedAt:   launchedAt,
		},
		pid:       pid,
		pgid:      pid, // Setpgid: its own group
		startTime: st.StartTime,
		port:      port,
		command:   argv,
		token:     req.Token,
		cmd:       cmd,
		done:      make(chan struct{}),
	}
	p.mu.Lock()
	p.procs[id] = pr
	if req.Token != "" {
		p.tokens[req.Token] = id
	}
	p.writeStateLocked()
	inst := cloneInstance(pr.inst)
	p.mu.Unlock()
	go p.waitChild(pr)

	p.log.Info("launched instance", "id", id, "pool", req.Pool, "pid", pid, "address", inst.Address,
		"command", strings.Join(argv, " "), "log", logPath)
	return inst, nil
}

// newIDLocked returns an unused "local-" + 8 hex digits id.
func (p *Provider) newIDLocked() (string, error) {
	for {
		var b [4]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", err
		}
		id := "local-" + hex.EncodeToString(b[:])
		if _, taken := p.procs[id]; !taken {
			return id, nil
		}
	}
}

// pickPort returns a free port that no live instance was given: a child
// that has not bound its port yet leaves it free to the kernel.
func (p *Provider) pickPort() (int, error) {
	for range 16 {
		port, err := freePort(p.host)
		if err != nil {
			return 0, err
		}
		p.mu.Lock()
		taken := false
		for _, pr := range p.procs {
			taken = taken || pr.port == port
		}
		p.mu.Unlock()
		if !taken {
			return port, nil
		}
	}
	return 0, fmt.Errorf("no free port on %s that no instance holds", p.host)
}

// freePort returns a port that was free on host a moment ago.
func freePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("finding a free port on %s: %w", host, err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port, nil
}

// waitChild waits for a child to exit and reports it.
func (p *Provider) waitChild(pr *proc) {
	// Wait without reaping first: while the exited leader is a zombie its
	// pid, which is also the group id, cannot be reused, so the rest of the
	// group can still be killed safely.
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pr.pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			if err != nil {
				p.log.Warn("waitid", "id", pr.inst.ID, "pid", pr.pid, "err", err)
			}
			break
		}
	}
	p.mu.Lock()
	pr.exited = true
	released := p.released
	p.mu.Unlock()
	if !released {
		// The instance is the group: take down what it leaves behind.
		_ = kill(pr.pid, pr.pgid, unix.SIGKILL)
	}
	_ = pr.cmd.Wait() // reap; the status is in ProcessState
	status := "exited"
	if ws, ok := pr.cmd.ProcessState.Sys().(syscall.WaitStatus); ok {
		status = describeWait(ws)
	}
	p.gone(pr, status)
}

// gone drops an exited instance, persists that and reports EventGone.
func (p *Provider) gone(pr *proc, status string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	defer close(pr.done)
	pr.exited = true
	if p.released {
		return // another run owns the state now
	}
	if p.procs[pr.inst.ID] == pr {
		delete(p.procs, pr.inst.ID)
	}
	if pr.token != "" && p.tokens[pr.token] == pr.inst.ID {
		delete(p.tokens, pr.token)
	}
	p.writeStateLocked()
	msg := status
	if pr.cause != "" {
		msg = pr.cause + ": " + status
	}
	p.log.Info("instance gone", "id", pr.inst.ID, "pool", pr.inst.Pool, "pid", pr.pid, "status", msg)
	p.events.Push(provider.Event{Type: provider.EventGone, Instance: cloneInstance(pr.inst), Message: msg})
}

// signalLocked signals pr's process group unless it is known to be gone.
func (p *Provider) signalLocked(pr *proc, sig syscall.Signal) {
	if pr.exited {
		return
	}
	// A child cannot be reused before waitChild reaps it, which it does
	// only after marking it exited under p.mu. An adopted process is not
	// ours to reap, so check that its pid still names it.
	if pr.cmd == nil && !sameProcess(pr.pid, pr.startTime) {
		return
	}
	if err := kill(pr.pid, pr.pgid, sig); err != nil {
		p.log.Warn("signalling instance", "id", pr.inst.ID, "pid", pr.pid, "signal", sig, "err", err)
	}
}

// stopLocked starts stopping pr: SIGTERM now, SIGKILL after the grace
// period (real time). It is idempotent.
func (p *Provider) stopLocked(pr *proc, cause string) {
	if pr.exited || pr.stopping {
		return
	}
	pr.stopping = true
	if pr.cause == "" {
		pr.cause = cause
	}
	pr.inst.State = provider.StateTerminating
	if !p.released {
		p.events.Push(provider.Event{Type: provider.EventChanged, Instance: cloneInstance(pr.inst), Message: "terminating"})
	}
	p.signalLocked(pr, unix.SIGTERM)
	go func() {
		t := time.NewTimer(p.grace)
		defer t.Stop()
		select {
		case <-pr.done:
		case <-p.unwatch:
		case <-t.C:
			p.mu.Lock()
			if !p.released && !pr.exited {
				p.log.Info("instance outlived its stop grace; killing it", "id", pr.inst.ID, "grace", p.grace)
				p.signalLocked(pr, unix.SIGKILL)
			}
			p.mu.Unlock()
		}
	}()
}

// Terminate asks the instance to stop: State becomes Terminating (visible in
// List), its process group gets SIGTERM and, after StopGrace, SIGKILL. It
// does not wait; EventGone follows the exit. Unknown or already terminating
// ids are not an error.
func (p *Provider) Terminate(ctx context.Context, id string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pr := p.procs[id]; pr != nil && !p.released {
		p.stopLocked(pr, causeTerminated)
	}
	return nil
}

// List returns the live instances of pool ("" for all), oldest first.
func (p *Provider) List(ctx context.Context, pool string) ([]provider.Instance, error) {
	p.mu.Lock()
	out := make([]provider.Instance, 0, len(p.procs))
	for _, pr := range p.procs {
		if pool == "" || pr.inst.Pool == pool {
			out = append(out, cloneInstance(pr.inst))
		}
	}
	p.mu.Unlock()
	slices.SortFunc(out, func(a, b provider.Instance) int {
		if c := a.LaunchedAt.Compare(b.LaunchedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

// Reclaim plays a spot reclaim. With notice > 0 it sets InterruptAt to
// now+notice, reports EventInterruption at once and SIGKILLs the process
// group when the clock reaches InterruptAt; a second notice for the same
// instance is ignored. With notice <= 0 it SIGKILLs at once. An unknown id
// is an error wrapping ErrNotFound.
func (p *Provider) Reclaim(ctx context.Context, id string, notice time.Duration) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	pr := p.procs[id]
	if pr == nil || p.released {
		return fmt.Errorf("local: reclaim %s: %w", id, ErrNotFound)
	}
	if pr.exited {
		return nil
	}
	if notice <= 0 {
		pr.cause = causeReclaimed
		p.signalLocked(pr, unix.SIGKILL)
		return nil
	}
	if pr.inst.InterruptAt != nil {
		return nil
	}
	at := p.clock.Now().Add(notice)
	pr.inst.InterruptAt = &at
	p.events.Push(provider.Event{
		Type:     provider.EventInterruption,
		Instance: cloneInstance(pr.inst),
		Message:  fmt.Sprintf("spot reclaim notice: killed in %v", notice),
	})
	p.log.Info("reclaim notice", "id", id, "interruptAt", at)
	timer := p.clock.NewTimer(notice)
	go func() {
		select {
		case <-timer.C():
			p.mu.Lock()
			if !p.released {
				pr.cause = causeReclaimed
				p.signalLocked(pr, unix.SIGKILL)
			}
			p.mu.Unlock()
		case <-pr.done:
			timer.Stop()
		case <-p.unwatch:
			timer.Stop()
		}
	}()
	return nil
}

// Close stops every instance (SIGTERM to its process group, SIGKILL after
// StopGrace), waits for the exits, empties the state file, closes the Events
// channel and releases the lock. If ctx ends first, the rest are SIGKILLed
// and left in the state file for the next run's Adopt, and ctx's error is
// returned. Close is idempotent.
func (p *Provider) Close(ctx context.Context) error {
	p.launchMu.Lock()
	defer p.launchMu.Unlock()
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	prs := make([]*proc, 0, len(p.procs))
	for _, pr := range p.procs {
		prs = append(prs, pr)
		p.stopLocked(pr, causeStopped)
	}
	p.mu.Unlock()

	var err error
wait:
	for _, pr := range prs {
		select {
		case <-pr.done:
		case <-ctx.Done():
			err = ctx.Err()
			break wait
		}
	}
	p.mu.Lock()
	if err != nil {
		left := 0
		for _, pr := range p.procs {
			if !pr.exited {
				p.signalLocked(pr, unix.SIGKILL)
				left++
			}
		}
		err = fmt.Errorf("local: close: %d instances still exiting (SIGKILLed, left in %s): %w", left, p.statePath, err)
	} else {
		p.writeStateLocked()
	}
	p.released = true
	p.mu.Unlock()
	p.shutdown()
	return err
}

// Detach stops watching and releases the lock without stopping any process
// and without touching the state file: what a kill -9 of this process
// leaves behind, for a later run's Adopt. It closes the Events channel.
func (p *Provider) Detach() {
	p.launchMu.Lock()
	defer p.launchMu.Unlock()
	p.mu.Lock()
	if p.released {
		p.mu.Unlock()
		return
	}
	p.closed, p.released = true, true
	p.mu.Unlock()
	p.shutdown()
}

// shutdown stops the watchers, closes the Events channel and releases the
// lock. Children keep being reaped quietly (as init would).
func (p *Provider) shutdown() {
	p.stopWatching()
	p.watchers.Wait()
	unix.Close(p.stopR)
	p.events.Close()
	unlockDir(p.lockFile)
}

// stopWatching makes watchers of adopted processes return.
func (p *Provider) stopWatching() {
	p.unwatchOnce.Do(func() {
		close(p.unwatch)
		unix.Close(p.stopW)
	})
}

// writeStateLocked persists the live instances. A failure is logged: the
// instances keep running, but a crash would now forget them.
func (p *Provider) writeStateLocked() {
	if p.released {
		return
	}
	entries := make([]stateEntry, 0, len(p.procs)+len(p.stopping))
	for _, e := range p.stopping {
		entries = append(entries, e)
	}
	for _, pr := range p.procs {
		e := stateEntry{
			ID:           pr.inst.ID,
			Pool:         pr.inst.Pool,
			PID:          pr.pid,
			Port:         pr.port,
			Address:      pr.inst.Address,
			StartTime:    pr.startTime,
			LaunchedAt:   pr.inst.LaunchedAt,
			Market:       pr.inst.Market,
			InstanceType: pr.inst.InstanceType,
			Command:      pr.command,
		}
		if err := e.validate(); err != nil {
			// Never write what Adopt would refuse (e.g. no start time
			// because /proc was unreadable): after a crash only its
			// tags can lead the next run to it.
			p.log.Warn("instance left out of the state file", "id", pr.inst.ID, "err", err)
			continue
		}
		entries = append(entries, e)
	}
	slices.SortFunc(entries, func(a, b stateEntry) int { return strings.Compare(a.ID, b.ID) })
	if err := writeStateFile(p.statePath, entries); err != nil {
		p.log.Error("writing state file; after a crash the next run can find instances by their tags only", "path", p.statePath, "err", err)
	}
}

// cloneInstance copies inst, including what InterruptAt points to.
func cloneInstance(inst provider.Instance) provider.Instance {
	if inst.InterruptAt != nil {
		at := *inst.InterruptAt
		inst.InterruptAt = &at
	}
	return inst
}
