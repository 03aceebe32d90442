package tenant

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ReloadInterval is how often `tidegpu gateway` and `tidegpu up` read the
// keys file for a change.
const ReloadInterval = 2 * time.Second

// Reloader re-reads a keys file when its content changes, so that keys are
// added, removed and re-limited without a restart.
//
// It reads the whole file on every tick and compares its SHA-256 with the
// last content it read, rather than watching the file system (fsnotify): a
// Kubernetes Secret mounted as a volume changes by a symlink swap (the file
// is a link through the directory's "..data" link, which the kubelet points
// at a new directory), which an inotify watch on the file does not see and a
// watch on the directory sees as events on other names. A read follows the
// links, so it sees the new content whichever way it came: edited in place,
// renamed over, or swapped. The file is small, and the cost is one read and
// one hash every ReloadInterval.
//
// A file that does not parse is refused: the error (naming the field, never
// a key or a digest) is logged once, and the keys in force stay. A file
// that cannot be read (gone for a moment in an edit) is retried on the next
// tick.
type Reloader struct {
	flag, path string
	logger     *slog.Logger
	seen       [sha256.Size]byte // of the content last read (applied or refused)
	inForce    [sha256.Size]byte // of the content last applied
	failing    string            // the read error last logged
	reloads    *prometheus.CounterVec
}

// NewReloader returns a reloader of the keys file at path; flag names the
// option that gave it, for the errors. Register it with a Prometheus
// registry for tidegpu_gateway_keys_reloads_total.
func NewReloader(flag, path string, logger *slog.Logger) *Reloader {
	if logger == nil {
		logger = slog.Default()
	}
	return &Reloader{flag: flag, path: path, logger: logger,
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidegpu_gateway_keys_reloads_total",
			Help: "Changes of the keys file read while running, by result: applied, or refused (it did not parse; the previous keys stay in force).",
		}, []string{"result"}),
	}
}

// Describe and Collect make the reloader a prometheus.Collector of
// tidegpu_gateway_keys_reloads_total.
func (r *Reloader) Describe(ch chan<- *prometheus.Desc) { r.reloads.Describe(ch) }

// Collect: see Describe.
func (r *Reloader) Collect(ch chan<- prometheus.Metric) { r.reloads.Collect(ch) }

// Load reads and validates the file for the start: an error here stops the
// start (there are no keys in force to fall back to).
func (r *Reloader) Load() (*Keys, error) {
	b, err := os.ReadFile(r.path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.flag, err)
	}
	r.seen = sha256.Sum256(b)
	r.inForce = r.seen
	ks, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", r.flag, r.path, err)
	}
	return ks, nil
}

// Check reads the file once and, if its content changed and parses, gives
// the new keys to apply. It reports whether it did.
func (r *Reloader) Check(apply func(*Keys) error) bool {
	b, err := os.ReadFile(r.path)
	if err != nil {
		if msg := err.Error(); msg != r.failing {
			r.failing = msg
			r.logger.Error("cannot read the keys file; the keys in force stay until it can be read",
				"flag", r.flag, "err", err)
		}
		return false
	}
	r.failing = ""
	sum := sha256.Sum256(b)
	if sum == r.seen {
		return false
	}
	r.seen = sum
	if sum == r.inForce {
		r.logger.Info("keys file is back to the keys in force", "flag", r.flag, "path", r.path)
		return false
	}
	ks, err := Parse(b)
	if err == nil {
		err = apply(ks)
	}
	if err != nil {
		r.reloads.WithLabelValues("refused").Inc()
		r.logger.Error("keys file changed but is refused; the previous keys stay in force until it is fixed",
			"flag", r.flag, "path", r.path, "err", err)
		return false
	}
	r.inForce = sum
	r.reloads.WithLabelValues("applied").Inc()
	r.logger.Info("keys file reloaded", "flag", r.flag, "path", r.path, "keys", ks.Len(), "tenants", len(ks.Tenants()))
	return true
}

// Run calls Check on every tick until ctx ends.
func (r *Reloader) Run(ctx context.Context, tick <-chan time.Time, apply func(*Keys) error) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
			r.Check(apply)
		}
	}
}
