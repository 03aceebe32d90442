package operator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/market"
	"github.com/tidegpu/tidegpu/internal/provider"
	"github.com/tidegpu/tidegpu/internal/provider/local"
	"github.com/tidegpu/tidegpu/internal/provider/spotsim"
)

// simMarket is one simulated spot market run by the operator: the
// simulator replaying spec.sim's traces, and the local provider whose
// processes are its instances. Pools with the same spec.sim share it (and
// its capacity), like pools of one region share a cloud.
//
// A market lives as long as the operator process: it has no memory across
// restarts, so the instances a previous operator left in its state folder
// are stopped when it starts, and the pools launch afresh.
type simMarket struct {
	*spotsim.Provider
	procs *local.Provider
}

// simKey names the market of a spec.sim.
func simKey(s *tidev1.SimSpec) string {
	notice := int32(-1)
	if s.NoticeSeconds != nil {
		notice = *s.NoticeSeconds
	}
	return fmt.Sprintf("sim/%s/binary=%t/x%d/notice=%d", s.TraceDir, s.Binary, s.Compression, notice)
}

// newSimMarket loads the traces and starts an empty market whose instance
// processes are kept under stateDir/sim-<hash of key>.
func newSimMarket(ctx context.Context, stateDir, key string, s *tidev1.SimSpec, logger *slog.Logger) (*simMarket, error) {
	trace, err := spotsim.LoadTrace(s.TraceDir, s.Binary)
	if err != nil {
		return nil, fmt.Errorf("spec.sim.traceDir: %w (the folder must be readable by the operator: mount it into its Pod)", err)
	}
	sum := sha256.Sum256([]byte(key))
	dir := filepath.Join(stateDir, "sim-"+hex.EncodeToString(sum[:6]))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("--state-dir %s: %w", stateDir, err)
	}
	procs, err := local.New(local.Options{StateDir: dir, Logger: logger})
	if err != nil {
		return nil, err
	}
	// The market starts empty: whatever a previous operator left is stopped.
	if _, stopped, err := procs.Adopt(ctx, func(provider.Instance) bool { return false }); err != nil {
		_ = procs.Close(context.Background())
		return nil, fmt.Errorf("stopping the previous run's simulated instances: %w", err)
	} else if len(stopped) > 0 {
		logger.Info("stopped simulated instances left by a previous run", "market", key, "count", len(stopped))
	}
	compression := float64(300)
	if s.Compression > 0 {
		compression = float64(s.Compression)
	}
	notice := spotsim.DefaultNotice
	if s.NoticeSeconds != nil {
		notice = time.Duration(*s.NoticeSeconds) * time.Second
		if notice == 0 {
			notice = -1 // no notice: the instance ends at once
		}
	}
	sim, err := spotsim.New(spotsim.Options{Trace: trace, Compression: compression, Notice: notice,
		Local: procs, Catalog: market.DefaultCatalog(), Logger: logger})
	if err != nil {
		_ = procs.Close(context.Background())
		return nil, fmt.Errorf("spec.sim: %w", err)
	}
	return &simMarket{Provider: sim, procs: procs}, nil
}

// Shutdown ends the market and stops its instance processes.
func (m *simMarket) Shutdown(ctx context.Context) error {
	m.Provider.Close()
	return m.procs.Close(ctx)
}
