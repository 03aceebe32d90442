// Package embedded runs the whole of TideGPU on one machine with no cluster
// (`tidegpu up`): the pool engine over the local provider, the built-in
// gateway and the admin server, wired together and stopped together so that
// no instance process outlives it.
package embedded

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/utils/clock"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/admin"
	"github.com/tidegpu/tidegpu/internal/admin/guard"
	"github.com/tidegpu/tidegpu/internal/cost"
	"github.com/tidegpu/tidegpu/internal/costreport"
	"github.com/tidegpu/tidegpu/internal/dashboard"
	"github.com/tidegpu/tidegpu/internal/engine"
	"github.com/tidegpu/tidegpu/internal/events"
	"github.com/tidegpu/tidegpu/internal/gateway"
	"github.com/tidegpu/tidegpu/internal/market"
	"github.com/tidegpu/tidegpu/internal/metrics"
	"github.com/tidegpu/tidegpu/internal/notify"
	"github.com/tidegpu/tidegpu/internal/provider"
	"github.com/tidegpu/tidegpu/internal/provider/local"
	"github.com/tidegpu/tidegpu/internal/provider/spotsim"
	"github.com/tidegpu/tidegpu/internal/registrar"
	"github.com/tidegpu/tidegpu/internal/registrar/builtin"
	kongreg "github.com/tidegpu/tidegpu/internal/registrar/kong"
	"github.com/tidegpu/tidegpu/internal/tenant"
	"github.com/tidegpu/tidegpu/internal/usage"
)

// Options configure a run.
type Options struct {
	Pools       []tidev1.TidePool
	GatewayAddr string
	AdminAddr   string
	StateDir    string
	AdminToken  string
	// InsecureAdmin serves an AdminAddr beyond loopback without a token
	// (--insecure-admin): something else guards it.
	InsecureAdmin bool
	Policy        string
	// Gateway is the gateway's limits, timeouts and CORS.
	Gateway gateway.Tuning
	// Alerts are the webhooks budget alerts go to (package notify).
	Alerts []notify.Sink
	// CostReport is the schedule of the cost report per tenant to the
	// Alerts' webhooks (package costreport).
	CostReport costreport.Schedule
	// KongSecrets is the Kong admin token and TLS material for pools that
	// use Kong (from files given on the command line).
	KongSecrets kongreg.Secrets
	// ReadyTimeout bounds how long progress is shown before the run goes on
	// without every pool ready (it keeps trying).
	ReadyTimeout time.Duration
	// MetricsFamily is the metric names the gateway reads from the
	// backends' /metrics; the zero Family detects each backend's.
	MetricsFamily metrics.Family
	// NoBackendMetrics balances on the gateway's own measurements only,
	// reading no /metrics.
	NoBackendMetrics bool
	// ActivatorQueue and ActivatorWait bound the requests the gateway holds
	// for a pool at zero while it wakes (0: the gateway's defaults).
	ActivatorQueue int
	ActivatorWait  time.Duration
	// DCGMURL, if set, adds GPU utilisation from NVIDIA dcgm-exporter (see
	// metrics.DCGMOptions.URL) to the backends' metrics, for
	// gpu-utilization autoscaling.
	DCGMURL string
	// Keys, if non-nil, are the API keys the gateway requires (package
	// tenant); nil serves every request without a key.
	Keys *tenant.Keys
	// KeysReload, if non-nil, re-reads Keys' file when it changes while
	// running.
	KeysReload *tenant.Reloader
	// Out receives progress for people; nil discards it.
	Out    io.Writer
	Logger *slog.Logger
}

// Run starts everything, reports progress until the pools are ready, and
// serves until ctx ends; then it stops the gateway, the engine and every
// instance process. Nothing is started when the options are bad.
func Run(ctx context.Context, o Options) error {
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = 2 * time.Minute
	}
	var simSpec *tidev1.SimSpec
	for _, p := range o.Pools {
		switch p.Spec.Provider {
		case tidev1.ProviderLocal:
		case tidev1.ProviderSim:
			if p.Spec.Sim == nil {
				return fmt.Errorf("TidePool %q: spec.sim: required for provider sim (traceDir, compression, noticeSeconds)", p.Name)
			}
			if simSpec != nil && !equalSim(simSpec, p.Spec.Sim) {
				return fmt.Errorf("TidePool %q: spec.sim: every sim pool of one run shares one simulated market: give them the same spec.sim", p.Name)
			}
			simSpec = p.Spec.Sim
		default:
			return fmt.Errorf("TidePool %q: spec.provider: %q is not available in `tidegpu up`: use %q or %q (or run the pool under `tidegpu operator`)",
				p.Name, p.Spec.Provider, tidev1.ProviderLocal, tidev1.ProviderSim)
		}
	}
	var trace *spotsim.Trace
	if simSpec != nil {
		t, err := spotsim.LoadTrace(simSpec.TraceDir, simSpec.Binary)
		if err != nil {
			return fmt.Errorf("spec.sim.traceDir: %w", err)
		}
		trace = t
	}
	// An admin API open to the network needs a token.
	if err := guard.CheckExposure("--admin-addr", o.AdminAddr, o.AdminToken, o.InsecureAdmin); err != nil {
		return err
	}
	// Bind first: a taken port must fail before any instance starts.
	gwLns, err := gateway.Listen(o.GatewayAddr)
	if err != nil {
		return fmt.Errorf("--gateway-addr %s: %w (pick a free address)", o.GatewayAddr, err)
	}
	for _, ln := range gwLns {
		defer ln.Close()
	}
	gwLn := gwLns[0]
	adminLn, err := net.Listen("tcp", o.AdminAddr)
	if err != nil {
		return fmt.Errorf("--admin-addr %s: %w (pick a free address)", o.AdminAddr, err)
	}
	defer adminLn.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	// The backends' own /metrics (queue depth, batch, KV cache, TTFT, in
	// any known family's names) feed the default p2c policy; backends
	// without them (Ollama) fall back to the gateway's own measurements.
	// The recorder gets the gateway and the ledger below, before the
	// gateway serves its first request.
	tokens := &usage.Recorder{}
	waker := &lateWaker{}
	gwOpts := gateway.Options{Policy: o.Policy, Registry: reg, MetricsInterval: 250 * time.Millisecond,
		OnUsage: tokens.StreamUsage, Waker: waker, ActivatorQueue: o.ActivatorQueue, ActivatorWait: o.ActivatorWait}
	o.Gateway.Apply(&gwOpts)
	if !o.NoBackendMetrics {
		// Backends without /metrics that answer Ollama's /api/ps are
		// read for their loaded models, without an error.
		var src metrics.Source = metrics.NewOllama(metrics.NewScrape(metrics.ScrapeOptions{Family: o.MetricsFamily}), metrics.OllamaOptions{})
		if o.DCGMURL != "" {
			d, err := metrics.NewDCGM(src, metrics.DCGMOptions{URL: o.DCGMURL})
			if err != nil {
				return fmt.Errorf("--dcgm-url: %w", err)
			}
			src = d
		}
		defer src.Close()
		gwOpts.Metrics = src
	}
	gw, err := gateway.New(gwOpts)
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	defer gw.Close()

	var gwHandler http.Handler = tokens
	// The keys' monthly budgets are held against the tenants' spend in
	// the ledger (opened below, before the gateway serves).
	spend := &costreport.SpendCache{}
	if o.Keys != nil {
		mw, err := tenant.Middleware(tokens, o.Keys, tenant.Options{ParseUsage: usage.ParseUsage, Registerer: reg, Spend: spend})
		if err != nil {
			return fmt.Errorf("--keys-file: %w", err)
		}
		gwHandler = mw
		if o.KeysReload != nil {
			reg.MustRegister(o.KeysReload)
			ticker := time.NewTicker(tenant.ReloadInterval)
			defer ticker.Stop()
			reloadCtx, stopReload := context.WithCancel(ctx)
			defer stopReload()
			go o.KeysReload.Run(reloadCtx, ticker.C, mw.SetKeys)
		}
	}

	if err := os.MkdirAll(o.StateDir, 0o755); err != nil {
		return fmt.Errorf("--state-dir %s: %w", o.StateDir, err)
	}
	prov, err := local.New(local.Options{StateDir: o.StateDir, Logger: o.Logger})
	if err != nil {
		return fmt.Errorf("local provider: %w", err)
	}
	rec := events.NewRecorder(2000, nil, o.Logger)
	wanted := map[string]bool{}
	for _, p := range o.Pools {
		wanted[p.Name] = true
	}
	// Sim pools' processes belong to the simulated market, which does not
	// survive a restart: only local pools adopt.
	adopted, stopped, err := prov.Adopt(ctx, func(in provider.Instance) bool { return wanted[in.Pool] && !isSim(o.Pools, in.Pool) })
	if err != nil {
		_ = prov.Close(context.Background())
		return fmt.Errorf("adopting the previous run's instances from %s: %w", o.StateDir, err)
	}
	for _, in := range adopted {
		rec.Eventf(events.TypeNormal, "Adopted", in.Pool, in.ID, "adopted %s at %s from a previous run", in.ID, in.Address)
	}
	for _, in := range stopped {
		rec.Eventf(events.TypeNormal, "Orphan", in.Pool, in.ID, "stopped %s of pool %s left by a previous run (pool no longer configured)", in.ID, in.Pool)
	}

	router := registrar.NewRouter(builtin.New(gw))
	for _, p := range o.Pools {
		cfg, ok, err := kongreg.ConfigFromSpec(p.Name, &p.Spec, o.KongSecrets)
		if err != nil {
			_ = prov.Close(context.Background())
			return fmt.Errorf("TidePool %q: %w", p.Name, err)
		}
		if !ok {
			continue
		}
		cfg.Registry = reg
		kr, err := kongreg.New(cfg)
		if err != nil {
			_ = prov.Close(context.Background())
			return fmt.Errorf("TidePool %q: kong: %w", p.Name, err)
		}
		router.Set(p.Name, kr)
		fmt.Fprintf(o.Out, "  pool %s: Kong targets kept at %s\n", p.Name, cfg.AdminURL)
	}
	ledger, saveLedger, err := openLedger(o.StateDir, o.Logger)
	if err != nil {
		_ = prov.Close(context.Background())
		return err
	}
	reg.MustRegister(cost.NewCollector(ledger, cost.CollectorOptions{}))
	engineMetrics := engine.NewMetrics(reg)
	costing := &engine.Costing{Ledger: ledger, Catalog: market.DefaultCatalog(), Live: cost.NewLivePrices()}
	signals := newGatewaySignals(gw)
	newManager := func(p provider.Provider) (*engine.Manager, error) {
		return engine.NewManager(engine.Options{Provider: p, Registrar: router, Recorder: rec,
			Metrics: engineMetrics, Logger: o.Logger, Signals: signals, Costing: costing})
	}
	engineCtx, stopEngine := context.WithCancel(context.Background())
	if len(o.Alerts) > 0 {
		n, err := notify.New(notify.Options{Sinks: o.Alerts, Logger: o.Logger,
			Reasons: []string{notify.DefaultReason, costreport.ReasonTenantAlert, costreport.ReasonReport}})
		if err != nil {
			stopEngine()
			_ = prov.Close(context.Background())
			return err
		}
		ch, unsubscribe := rec.Subscribe(256)
		defer unsubscribe()
		go n.Run(engineCtx, ch)
	}
	var (
		sim       *spotsim.Provider
		localView provider.Provider = prov
		simMgr    *engine.Manager
	)
	if trace != nil {
		compression := float64(300)
		if simSpec.Compression > 0 {
			compression = float64(simSpec.Compression)
		}
		notice := 2 * time.Minute
		if simSpec.NoticeSeconds != nil {
			notice = time.Duration(*simSpec.NoticeSeconds) * time.Second
			if notice == 0 {
				notice = -1 // no notice: the instance ends at once
			}
		}
		sim, err = spotsim.New(spotsim.Options{Trace: trace, Compression: compression, Notice: notice,
			Local: prov, Catalog: market.DefaultCatalog(), Logger: o.Logger})
		if err != nil {
			stopEngine()
			_ = prov.Close(context.Background())
			return fmt.Errorf("spec.sim: %w", err)
		}
		// The simulator reads the local provider's events: the local
		// pools get theirs from it, so that no event reaches the wrong
		// engine.
		localView = localEvents{Provider: prov, events: sim.LocalEvents()}
		go sim.Run(engineCtx)
		if simMgr, err = newManager(sim); err != nil {
			stopEngine()
			_ = prov.Close(context.Background())
			return err
		}
		fmt.Fprintf(o.Out, "  simulated spot market: %d zones from %s, %gx time\n", len(trace.Zones), simSpec.TraceDir, compression)
	}
	localMgr, err := newManager(localView)
	if err != nil {
		stopEngine()
		_ = prov.Close(context.Background())
		return err
	}
	mgrs := managers{localMgr}
	if simMgr != nil {
		mgrs = append(mgrs, simMgr)
	}
	for i := range o.Pools {
		m := localMgr
		if o.Pools[i].Spec.Provider == tidev1.ProviderSim {
			m = mgrs[1]
		}
		m.Apply(&o.Pools[i])
	}
	engineDone := make(chan struct{})
	var engineWG sync.WaitGroup
	for _, m := range mgrs {
		engineWG.Add(1)
		go func(m *engine.Manager) {
			defer engineWG.Done()
			m.Run(engineCtx)
		}(m)
	}
	go func() {
		engineWG.Wait()
		close(engineDone)
	}()
	mgr := mgrs
	waker.set(mgrs)

	sampler := dashboard.NewSampler(dashboard.SamplerOptions{Gatherer: gw.RequestMetrics(), Backends: gw.Backends})
	go sampler.Run(engineCtx)
	go usage.SampleBusy(engineCtx, gw.Backends, 200*time.Millisecond, ledger.BusyStart, ledger.BusyEnd)
	tokens.Next = gw
	tokens.Sink = func(id, model string, prompt, completion int64) {
		ledger.AddTokens(id, model, prompt, completion, time.Now())
	}
	tokens.Use = func(id, _ string, u cost.Use) { ledger.AddUse(id, u) }
	spend.Ledger = ledger
	emit := func(reason, msg string) {
		typ := events.TypeNormal
		if reason == costreport.ReasonTenantAlert {
			typ = events.TypeWarning
		}
		rec.Eventf(typ, reason, "", "", "%s", msg)
	}
	if o.Keys != nil && len(o.Keys.Budgets()) > 0 {
		go costreport.WatchBudgets(engineCtx, clock.RealClock{}, time.Second, o.Keys.Budgets, ledger, emit)
	}
	go costreport.Run(engineCtx, clock.RealClock{}, o.CostReport, ledger, emit)
	gwSrv := o.Gateway.Server(gwHandler)
	adminSrv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: admin.NewHandler(admin.Options{
		Pools: mgr, Events: rec, Backends: gw, Gatherer: reg, Token: o.AdminToken, Ledger: ledger,
		Dashboard: dashboard.Handler(dashboard.Options{Pools: mgr, Events: rec, Sampler: sampler})})}
	serveErr := make(chan error, 3)
	for _, ln := range gwLns {
		go func() { serveErr <- serve(gwSrv, ln, "gateway") }()
	}
	go func() { serveErr <- serve(adminSrv, adminLn, "admin") }()

	gwURL, adminURL := "http://"+gwLn.Addr().String(), "http://"+adminLn.Addr().String()
	fmt.Fprintf(o.Out, "TideGPU starting: %d pool(s), state in %s\n", len(o.Pools), o.StateDir)
	for _, in := range adopted {
		fmt.Fprintf(o.Out, "  adopted %s (pool %s) from the previous run\n", in.ID, in.Pool)
	}
	for _, in := range stopped {
		fmt.Fprintf(o.Out, "  stopped %s (pool %s, no longer configured) left by the previous run\n", in.ID, in.Pool)
	}

	saveDone := make(chan struct{})
	go func() {
		defer close(saveDone)
		t := time.NewTicker(30 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-engineCtx.Done():
				return
			case <-t.C:
				saveLedger()
			}
		}
	}()

	var runErr error
	if waitReady(ctx, mgr, o.Out, o.ReadyTimeout, serveErr, &runErr) {
		fmt.Fprintf(o.Out, "\nTideGPU is up.\n  gateway:   %s   (POST %s/ollama-chat, /api/*, /v1/*)\n  dashboard: %s/\n  admin:     %s/api/v1/pools   metrics: %s/metrics\n  status:    tidegpu status --admin %s\n\n",
			gwURL, gwURL, adminURL, adminURL, adminURL, adminURL)
		fmt.Fprintf(o.Out, "Try:\n  curl -s %s/ollama-chat -d '{\"model\":\"qwen2:0.5b\",\"messages\":[{\"role\":\"user\",\"content\":\"写一首诗\"}],\"stream\":false}'\n", gwURL)
	}
	if runErr == nil {
		select {
		case <-ctx.Done():
		case runErr = <-serveErr:
		}
	}

	// Shut down: stop taking requests, let in-flight ones finish briefly,
	// stop the engine (no more launches), then every instance.
	fmt.Fprintln(o.Out, "\nTideGPU stopping: draining the gateway and stopping instances…")
	shutCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if gwSrv.Shutdown(shutCtx) != nil {
		_ = gwSrv.Close() // streams still open: end them
	}
	stopEngine()
	<-engineDone
	<-saveDone
	if sim != nil {
		sim.Close()
	}
	if err := prov.Close(shutCtx); err != nil {
		runErr = errors.Join(runErr, fmt.Errorf("stopping instances: %w", err))
	}
	// The instances are stopped: their spend ends now, not when the next
	// run first looks.
	stoppedAt := time.Now()
	for _, p := range o.Pools {
		_ = ledger.SyncPool(p.Name, nil, stoppedAt, func(cost.InstanceInfo) (market.Price, market.Price, error) {
			return market.Price{}, market.Price{}, errors.New("no new instances at shutdown")
		})
	}
	saveLedger()
	_ = adminSrv.Shutdown(shutCtx)
	fmt.Fprintln(o.Out, "TideGPU stopped; no instance left running.")
	return runErr
}

// openLedger restores the cost ledger from STATE_DIR/cost.json, so spend
// continues across restarts, and returns a function that saves it
// atomically.
func openLedger(dir string, logger *slog.Logger) (*cost.Ledger, func(), error) {
	l := cost.NewLedger(cost.Options{})
	path := filepath.Join(dir, "cost.json")
	if b, err := os.ReadFile(path); err == nil {
		if err := l.Restore(b); err != nil {
			return nil, nil, fmt.Errorf("restoring the cost ledger from %s: %w (move the file away to start afresh)", path, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("reading %s: %w", path, err)
	}
	save := func() {
		b, err := l.Snapshot()
		if err != nil {
			logger.Warn("saving the cost ledger", "err", err)
			return
		}
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, b, 0o600); err == nil {
			err = os.Rename(tmp, path)
			if err != nil {
				logger.Warn("saving the cost ledger", "err", err)
			}
		} else {
			logger.Warn("saving the cost ledger", "err", err)
		}
	}
	return l, save, nil
}

func serve(s interface{ Serve(net.Listener) error }, ln net.Listener, what string) error {
	if err := s.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("%s server: %w", what, err)
	}
	return nil
}

// waitReady prints each pool's progress until all are ready, ctx ends, a
// server fails or the timeout passes. It reports whether all became ready.
func waitReady(ctx context.Context, mgr managers, out io.Writer, timeout time.Duration, serveErr <-chan error, runErr *error) bool {
	start := time.Now()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	last := ""
	for {
		line, all := progressLine(mgr.Pools())
		if line != last {
			fmt.Fprintf(out, "  [%5.1fs] %s\n", time.Since(start).Seconds(), line)
			last = line
		}
		if all {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case err := <-serveErr:
			*runErr = err
			return false
		case <-deadline.C:
			fmt.Fprintf(out, "  not every pool is ready after %s; still trying (see tidegpu status)\n", timeout)
			return false
		case <-tick.C:
		}
	}
}

func progressLine(pools []engine.PoolView) (string, bool) {
	all := true
	parts := make([]string, 0, len(pools))
	for _, p := range pools {
		st := p.Status
		desired := p.Spec.DesiredReplicas()
		if st.Ready < desired {
			all = false
		}
		phases := map[string]int{}
		for _, in := range st.Instances {
			phases[in.Phase]++
		}
		var ph []string
		for _, k := range []string{tidev1.PhasePending, tidev1.PhaseStarting, tidev1.PhaseDraining, tidev1.PhaseTerminating} {
			if phases[k] > 0 {
				ph = append(ph, fmt.Sprintf("%d %s", phases[k], strings.ToLower(k)))
			}
		}
		s := fmt.Sprintf("pool %s: %d/%d ready", p.Name, st.Ready, desired)
		if len(ph) > 0 {
			s += " (" + strings.Join(ph, ", ") + ")"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; "), all
}

// localEvents is the local provider as the local pools' engine sees it
// when a simulated market shares the provider: its events come through
// the simulator, which keeps those of its own instances. It is a decorator
// that adds only that EventSource; the local provider's other capabilities
// (Reclaimer) are found in it with provider.As.
type localEvents struct {
	provider.Provider
	events <-chan provider.Event
}

var (
	_ provider.Unwrapper   = localEvents{}
	_ provider.EventSource = localEvents{}
)

func (l localEvents) Unwrap() provider.Provider { return l.Provider }

func (l localEvents) Events() <-chan provider.Event { return l.events }
