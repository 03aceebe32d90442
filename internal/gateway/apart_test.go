package gateway

import (
	"sync"
	"testing"
	"time"
)

// heldJob is a serveJob that waits for release and then tells done.
type heldJob struct {
	release <-chan struct{}
	done    *sync.WaitGroup
}

func (j heldJob) serveOn() {
	<-j.release
	j.done.Done()
}

func (p *serveWorkers) idleCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}

func (p *serveWorkers) startedCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.started
}

// TestServeWorkersKeepAtMostMax: concurrent jobs get goroutines of their
// own; once done, at most max stay for the next jobs, which start none.
func TestServeWorkersKeepAtMostMax(t *testing.T) {
	p := &serveWorkers{max: 2}
	release := make(chan struct{})
	var done sync.WaitGroup
	for range 5 {
		done.Add(1)
		p.run(heldJob{release, &done})
	}
	if n := p.startedCount(); n != 5 {
		t.Fatalf("%d goroutines for 5 jobs at once, want 5", n)
	}
	close(release)
	done.Wait()
	poll(t, 5*time.Second, "two workers idle", func() bool { return p.idleCount() == 2 })
	for range 10 { // one after the other: the kept workers serve them
		done.Add(1)
		p.run(heldJob{release, &done})
		done.Wait()
		poll(t, 5*time.Second, "the worker back", func() bool { return p.idleCount() == 2 })
	}
	if n := p.startedCount(); n != 5 {
		t.Errorf("%d goroutines started, want still 5: the kept ones serve later jobs", n)
	}
	p.close()
	if n := p.idleCount(); n != 0 {
		t.Errorf("%d idle after close", n)
	}
	// After close a job still runs, on a goroutine that then ends.
	done.Add(1)
	p.run(heldJob{release, &done})
	done.Wait()
	if n := p.idleCount(); n != 0 {
		t.Errorf("%d idle after a job run once closed", n)
	}
}
