package operator

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegpu/tidegpu/internal/cost"
	"github.com/tidegpu/tidegpu/internal/usage"
)

// ledgerKey and seqsKey are the data keys of the ledger's ConfigMap: the
// ledger, and the gateway replicas' last usage batches counted in it
// (saved together, so that a batch is counted once across a restart).
const (
	ledgerKey = "ledger.json"
	seqsKey   = "usage-seqs.json"
)

// ledgerStore keeps the cost ledger in a ConfigMap, so spend survives
// operator restarts and leader changes. It restores once at start and
// saves every interval and on stop. Only the leader runs it.
type ledgerStore struct {
	client client.Client
	reader client.Reader
	ledger *cost.Ledger
	usage  *usage.Ingest
	// restored is set once the ledger is restored (or found absent): the
	// usage ingest waits for it.
	restored *atomic.Bool
	name     types.NamespacedName
	interval time.Duration
	logger   *slog.Logger
}

// NeedLeaderElection: the leader's engines feed the ledger.
func (s *ledgerStore) NeedLeaderElection() bool { return true }

// Start restores, then saves until ctx ends.
func (s *ledgerStore) Start(ctx context.Context) error {
	var cm corev1.ConfigMap
	err := s.reader.Get(ctx, s.name, &cm)
	switch {
	case err == nil:
		if b, ok := cm.BinaryData[ledgerKey]; ok {
			if err := s.ledger.Restore(b); err != nil {
				s.logger.Error("restoring the cost ledger: starting afresh", "configmap", s.name, "err", err)
			} else if seqs, ok := cm.BinaryData[seqsKey]; ok {
				if err := s.usage.Restore(seqs); err != nil {
					s.logger.Error("restoring the gateway replicas' usage seqs: a batch resent now may count twice", "configmap", s.name, "err", err)
				}
			}
		}
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("reading the cost ledger ConfigMap %s: %w", s.name, err)
	}
	s.restored.Store(true)
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			s.save(sctx)
			cancel()
			return nil
		case <-t.C:
			s.save(ctx)
		}
	}
}

func (s *ledgerStore) save(ctx context.Context) {
	b, seqs, err := s.usage.Snapshot(s.ledger.Snapshot)
	if err != nil {
		s.logger.Warn("snapshotting the cost ledger", "err", err)
		return
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.name.Namespace, Name: s.name.Name,
		Labels: map[string]string{"app.kubernetes.io/part-of": "tidegpu"}}}
	var cur corev1.ConfigMap
	err = s.reader.Get(ctx, s.name, &cur)
	switch {
	case apierrors.IsNotFound(err):
		cm.BinaryData = map[string][]byte{ledgerKey: b, seqsKey: seqs}
		err = s.client.Create(ctx, cm)
	case err == nil:
		cur.BinaryData = map[string][]byte{ledgerKey: b, seqsKey: seqs}
		err = s.client.Update(ctx, &cur)
	}
	if err != nil {
		s.logger.Warn("saving the cost ledger", "configmap", s.name, "err", err)
	}
}
