package local

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tidegpu/tidegpu/internal/provider"
)

// Adopt takes over what an earlier run, killed without Close, left behind:
// the instances in the state file, and the instances it started but did
// not live to write there, found by their ownership tags (a scan of /proc
// for processes whose environment carries TIDEGPU_LOCAL_STATE_DIR=<this
// StateDir>, like a cloud provider's garbage collection by tags).
//
// Each state entry whose pid is alive with the recorded start time, and
// each tagged process leading its own group that the state file misses
// (rebuilt from its tags: id, pool, port, host, launch time, market, type;
// the start time from /proc/<pid>/stat), is passed to keep: if keep
// returns true (or keep is nil) the process is adopted (listed, watched
// through a pidfd, and Terminate and Reclaim work on it); otherwise it is
// stopped (SIGTERM to its group, SIGKILL after StopGrace) and waited for;
// it stays in the state file until it is gone. Entries whose process is
// gone, or whose pid now names another process, are dropped without any
// signal. Any other tagged process (a leftover of an instance that is not
// adopted: a child that left its group, a member whose leader is gone, a
// process with broken tags) is stopped the same way and waited for, but is
// not an instance and not returned. This process, its ancestors and its
// process group are never touched; processes whose environment cannot be
// read (other users') are skipped. Adopt rewrites the state file with the
// adopted instances.
//
// Adopt must be called at most once, before the first Launch. An unreadable
// or invalid state file is an error (naming the file) and nothing is
// signalled.
func (p *Provider) Adopt(ctx context.Context, keep func(provider.Instance) bool) (adopted, stopped []provider.Instance, err error) {
	p.launchMu.Lock()
	defer p.launchMu.Unlock()
	p.mu.Lock()
	switch {
	case p.closed:
		err = fmt.Errorf("local: adopt: %w", ErrClosed)
	case p.launched:
		err = errors.New("local: adopt must be called before the first Launch")
	case p.adopted:
		err = errors.New("local: adopt was already called")
	}
	p.adopted = true
	p.mu.Unlock()
	if err != nil {
		return nil, nil, err
	}

	entries, err := readStateFile(p.statePath)
	if err != nil {
		return nil, nil, fmt.Errorf("local: adopt: state file %s: %w (move it away to start afresh; the processes it lists are then left alone)", p.statePath, err)
	}

	var cands []*candidate
	var claimed []stateEntry
	for _, e := range entries {
		c, why := p.claim(e)
		if c == nil {
			p.log.Info("dropping instance of an earlier run", "id", e.ID, "pid", e.PID, "reason", why)
			continue
		}
		cands = append(cands, c)
		claimed = append(claimed, e)
	}

	// Then what the state file misses. Adopt runs before any Launch of
	// this run, so every tagged process is an earlier run's.
	found, err := scanMarked(procRoot, p.ownerDir, newScanGuard(procRoot, os.Getpid(), syscall.Getpgrp()))
	if err != nil {
		p.log.Warn("cannot look for instances missing from the state file", "err", err)
	}
	orphans, rest := planOrphans(found, claimed)
	for _, m := range orphans {
		c, why := p.claim(m.Entry)
		if c == nil {
			p.log.Info("dropping unrecorded instance of an earlier run", "id", m.ID, "pid", m.PID, "reason", why)
			continue
		}
		p.log.Info("found an instance of an earlier run missing from the state file", "id", m.ID, "pool", m.Entry.Pool, "pid", m.PID)
		cands = append(cands, c)
	}

	var keepers, stoppers []*candidate
	kept := map[string]bool{}
	for _, c := range cands {
		if keep == nil || keep(cloneInstance(c.inst)) {
			keepers = append(keepers, c)
			kept[c.entry.ID] = true
		} else {
			stoppers = append(stoppers, c)
		}
	}
	var strays []*candidate
	for _, m := range rest {
		if m.ID != "" && kept[m.ID] {
			continue // part of an adopted instance
		}
		c, _ := p.claim(stateEntry{ID: m.ID, PID: m.PID, StartTime: m.StartTime})
		if c == nil {
			continue // gone meanwhile
		}
		c.stray = true
		strays = append(strays, c)
	}

	p.mu.Lock()
	for _, c := range stoppers {
		p.stopping[c.entry.ID] = c.entry
	}
	for _, c := range keepers {
		pr := &proc{
			inst:      c.inst,
			pid:       c.entry.PID,
			pgid:      c.pgid,
			startTime: c.entry.StartTime,
			port:      c.entry.Port,
			command:   c.entry.Command,
			done:      make(chan struct{}),
		}
		p.procs[pr.inst.ID] = pr
		p.watchers.Add(1)
		go p.watchAdopted(pr, c.pidfd)
		adopted = append(adopted, cloneInstance(pr.inst))
		p.log.Info("adopted instance", "id", pr.inst.ID, "pool", pr.inst.Pool, "pid", pr.pid, "address", pr.inst.Address)
	}
	p.writeStateLocked()
	p.mu.Unlock()

	all := append(slices.Clip(stoppers), strays...)
	errs := make([]error, len(all))
	var wg sync.WaitGroup
	for i, c := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = p.stopForeign(ctx, c)
			if errs[i] == nil && !c.stray {
				p.mu.Lock()
				delete(p.stopping, c.entry.ID)
				p.writeStateLocked()
				p.mu.Unlock()
			}
		}()
		if !c.stray {
			stopped = append(stopped, cloneInstance(c.inst))
		}
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return adopted, stopped, fmt.Errorf("local: adopt: stopping instances of an earlier run: %w", err)
	}
	return adopted, stopped, nil
}

// candidate is a state entry, or a tagged process, that is still there.
type candidate struct {
	entry stateEntry
	inst  provider.Instance
	pgid  int
	pidfd int // -1: poll instead
	// stray: a tagged process that is not an instance (see Adopt); only
	// entry.ID (maybe ""), PID and StartTime are set.
	stray bool
}

// claim checks that e's process still runs (same pid and start time) and
// opens a pidfd on it. It returns nil and the reason when it does not.
func (p *Provider) claim(e stateEntry) (*candidate, string) {
	st, err := readStat(e.PID)
	switch {
	case err != nil:
		return nil, "not running"
	case st.State == 'Z' || st.State == 'X':
		return nil, "exited"
	case st.StartTime != e.StartTime:
		return nil, "pid now names another process (start time differs)"
	case e.PID == os.Getpid():
		return nil, "pid is this process"
	case st.PGRP == syscall.Getpgrp():
		return nil, "in this process's group"
	}
	pidfd := -1
	if !p.noPidfd {
		if pidfd, err = pidfdOpen(e.PID); err != nil {
			return nil, "not running"
		}
	}
	// Checked again now that the pidfd pins the process: if the pid still
	// has the start time, the pidfd refers to the recorded process.
	if !sameProcess(e.PID, e.StartTime) {
		if pidfd >= 0 {
			unix.Close(pidfd)
		}
		return nil, "exited"
	}
	return &candidate{entry: e, inst: instanceFromEntry(e), pgid: st.PGRP, pidfd: pidfd}, ""
}

// instanceFromEntry rebuilds the Instance of a state entry.
func instanceFromEntry(e stateEntry) provider.Instance {
	host, _, _ := net.SplitHostPort(e.Address)
	inst := provider.Instance{
		ID:           e.ID,
		Pool:         e.Pool,
		Zone:         Zone,
		InstanceType: e.InstanceType,
		Market:       e.Market,
		State:        provider.StateRunning,
		PrivateIP:    host,
		PublicIP:     host,
		Address:      e.Address,
		LaunchedAt:   e.LaunchedAt,
	}
	if inst.InstanceType == "" {
		inst.InstanceType = DefaultInstanceType
	}
	if inst.Market == "" {
		inst.Market = provider.MarketSpot
	}
	return inst
}

// watchAdopted reports the exit of an adopted process. It owns pidfd.
func (p *Provider) watchAdopted(pr *proc, pidfd int) {
	defer p.watchers.Done()
	exited := p.waitGone(pr.pid, pr.startTime, pidfd)
	if pidfd >= 0 {
		unix.Close(pidfd)
	}
	if exited {
		p.gone(pr, statusAdopted)
	}
}

// stopForeign stops a process of an earlier run that is not adopted:
// SIGTERM to its group, SIGKILL after the grace period, and waits for it.
func (p *Provider) stopForeign(ctx context.Context, c *candidate) error {
	pid, start := c.entry.PID, c.entry.StartTime
	gone := make(chan struct{})
	p.watchers.Add(1)
	go func() {
		defer p.watchers.Done()
		defer close(gone)
		p.waitGone(pid, start, c.pidfd)
		if c.pidfd >= 0 {
			unix.Close(c.pidfd)
		}
	}()
	signal := func(sig syscall.Signal) {
		if !sameProcess(pid, start) {
			return
		}
		if err := kill(pid, c.pgid, sig); err != nil {
			p.log.Warn("signalling instance of an earlier run", "id", c.entry.ID, "pid", pid, "signal", sig, "err", err)
		}
	}
	if c.stray {
		p.log.Info("stopping a leftover process of an earlier run's instance", "id", c.entry.ID, "pid", pid)
	} else {
		p.log.Info("stopping instance of an earlier run", "id", c.entry.ID, "pool", c.entry.Pool, "pid", pid)
	}
	signal(unix.SIGTERM)
	t := time.NewTimer(p.grace)
	defer t.Stop()
	select {
	case <-gone:
		return nil
	case <-ctx.Done():
		signal(unix.SIGKILL)
		return fmt.Errorf("%s (pid %d): %w", c.entry.ID, pid, ctx.Err())
	case <-t.C:
	}
	p.log.Info("instance outlived its stop grace; killing it", "id", c.entry.ID, "pid", pid, "grace", p.grace)
	signal(unix.SIGKILL)
	select {
	case <-gone:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s (pid %d): %w", c.entry.ID, pid, ctx.Err())
	}
}

// waitGone blocks until the process (pid, startTime) is gone (true) or
// watching stops (false). With a pidfd it sleeps in poll; without one it
// checks the pid every pollInterval.
func (p *Provider) waitGone(pid int, startTime uint64, pidfd int) bool {
	if pidfd >= 0 {
		exited, err := waitPidfd(pidfd, p.stopR)
		if err == nil {
			return exited
		}
		p.log.Warn("poll on pidfd failed; polling the pid instead", "pid", pid, "err", err)
	}
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		if !sameProcess(pid, startTime) {
			return true
		}
		select {
		case <-t.C:
		case <-p.unwatch:
			return false
		}
	}
}
