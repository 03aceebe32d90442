// Package tidepool is the TidePool controller: a thin controller-runtime
// reconciler around the pool engine. The engine (one per provider) does the
// observe → plan → apply work, woken by provider events; the reconciler
// hands it the wanted pools, resolves credentials from Secrets, keeps the
// finalizer, and is the one writer of status, woken through a channel source
// whenever the engine records an event for a pool.
package tidepool

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/prometheus/client_golang/prometheus"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	tideevents "github.com/tidegpu/tidegpu/internal/events"
	"github.com/tidegpu/tidegpu/internal/notice"
	kongreg "github.com/tidegpu/tidegpu/internal/registrar/kong"
)

// Finalizer makes deletion wait until the pool's instances are terminated
// and its gateway targets removed.
const Finalizer = "tidegpu.eja.dev/instances"

// ConditionProviderReady says whether the pool's provider could be set up
// (credentials found, provider known).
const ConditionProviderReady = "ProviderReady"

// Resync is the safety-net period between reconciles of a pool.
const Resync = 30 * time.Second

// +kubebuilder:rbac:groups=tidegpu.eja.dev,resources=tidepools,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=tidegpu.eja.dev,resources=tidepools/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=tidegpu.eja.dev,resources=tidepools/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;create;update
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete

// Reconciler reconciles TidePools.
type Reconciler struct {
	Client   client.Client
	Engines  *Engines
	Recorder *tideevents.Recorder
	Events   events.EventRecorder
	// Registry receives the Kong registrars' metrics (optional).
	Registry prometheus.Registerer
	// NoticeTokens, when set, gets each pool's notice token, which the
	// reconciler generates once and keeps in the Secret
	// <pool>-notice-token owned by the TidePool.
	NoticeTokens NoticeTokens
}

// NoticeTokens is where the pools' notice tokens go (notice.Tokens).
type NoticeTokens interface {
	Set(pool, token string)
	Delete(pool string)
}

// PoolKey is the engine's name for a TidePool: namespace/name.
func PoolKey(nn types.NamespacedName) string { return nn.Namespace + "/" + nn.Name }

func splitKey(key string) (types.NamespacedName, bool) {
	ns, name, ok := strings.Cut(key, "/")
	return types.NamespacedName{Namespace: ns, Name: name}, ok
}

// SetupWithManager registers the controller, the engines and the channel
// source that turns engine events into reconciles.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := mgr.Add(r.Engines); err != nil {
		return err
	}
	if err := mgr.Add(&eventPump{r: r}); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&tidev1.TidePool{}).
		Named("tidepool").
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		WatchesRawSource(source.Channel(r.Engines.rounds, &handler.EnqueueRequestForObject{})).
		Complete(r)
}

// Reconcile hands the pool to its engine and writes what the engine reports
// to status. Level-based: it never depends on which event woke it.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	logger := log.FromContext(ctx)
	key := PoolKey(req.NamespacedName)
	var tp tidev1.TidePool
	if err := r.Client.Get(ctx, req.NamespacedName, &tp); err != nil {
		if apierrors.IsNotFound(err) {
			// Gone without our finalizer (or already finalized).
			if r.NoticeTokens != nil {
				r.NoticeTokens.Delete(key)
			}
			return ctrl.Result{}, r.Engines.Remove(ctx, key)
		}
		return ctrl.Result{}, err
	}

	if !tp.DeletionTimestamp.IsZero() {
		if !controllerutil.ContainsFinalizer(&tp, Finalizer) {
			return ctrl.Result{}, nil
		}
		var err error
		if r.Engines.Has(key) {
			err = r.Engines.Remove(ctx, key)
		} else {
			// Not applied in this process (deleted right after a restart):
			// find its instances through its provider all the same.
			var creds map[string][]byte
			if creds, err = r.credentials(ctx, &tp); err == nil {
				err = r.Engines.Cleanup(ctx, key, &tp, creds)
			}
		}
		if err != nil {
			r.Events.Eventf(&tp, nil, corev1.EventTypeWarning, "CleanupFailed", "Delete", "terminating instances: %v", err)
			return ctrl.Result{}, fmt.Errorf("cleaning up pool %s: %w", key, err)
		}
		r.Events.Eventf(&tp, nil, corev1.EventTypeNormal, "CleanedUp", "Delete", "instances terminated and gateway targets removed")
		// A patch, not an update: a status write racing with this one must
		// not turn the finalizer's removal into a conflict and a backoff.
		before := tp.DeepCopy()
		controllerutil.RemoveFinalizer(&tp, Finalizer)
		return ctrl.Result{}, client.IgnoreNotFound(r.Client.Patch(ctx, &tp, client.MergeFrom(before)))
	}

	if controllerutil.AddFinalizer(&tp, Finalizer) {
		if err := r.Client.Update(ctx, &tp); err != nil {
			return ctrl.Result{}, err
		}
	}

	creds, credErr := r.credentials(ctx, &tp)
	var applyErr error
	if credErr == nil {
		credErr = r.kong(ctx, key, &tp)
	}
	if credErr == nil {
		credErr = r.noticeToken(ctx, key, &tp)
	}
	if credErr == nil {
		applyErr = r.Engines.Apply(ctx, key, &tp, creds)
	}
	base := tp.DeepCopy()
	if view, ok := r.Engines.Status(key); ok {
		tp.Status = StatusFrom(view.Status, tp.Status.Conditions)
	}
	tp.Status.ObservedGeneration = tp.Generation
	now := metav1.Now()
	switch {
	case credErr != nil:
		setCondition(&tp, ConditionProviderReady, metav1.ConditionFalse, "CredentialsUnavailable", credErr.Error(), now)
		setCondition(&tp, tidev1.ConditionReady, metav1.ConditionFalse, "CredentialsUnavailable", credErr.Error(), now)
	case applyErr != nil:
		setCondition(&tp, ConditionProviderReady, metav1.ConditionFalse, "ProviderUnavailable", applyErr.Error(), now)
		setCondition(&tp, tidev1.ConditionReady, metav1.ConditionFalse, "ProviderUnavailable", applyErr.Error(), now)
	default:
		setCondition(&tp, ConditionProviderReady, metav1.ConditionTrue, "Configured", "provider "+tp.Spec.Provider+" configured", now)
	}
	if !equality.Semantic.DeepEqual(base.Status, tp.Status) {
		if err := r.Client.Status().Patch(ctx, &tp, client.MergeFrom(base)); err != nil {
			if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
				return ctrl.Result{RequeueAfter: time.Second}, nil
			}
			return ctrl.Result{}, err
		}
	}
	if credErr != nil || applyErr != nil {
		logger.Info("pool not runnable yet", "pool", key, "credentials", credErr, "provider", applyErr)
		// A Secret may appear or a provider recover: look again with backoff.
		return ctrl.Result{}, errors.Join(credErr, applyErr)
	}
	return ctrl.Result{RequeueAfter: Resync}, nil
}

// credentials reads the Secret the pool references, if any.
func (r *Reconciler) credentials(ctx context.Context, tp *tidev1.TidePool) (map[string][]byte, error) {
	ref := tp.Spec.CredentialsSecretRef
	if ref == nil {
		return nil, nil
	}
	var s corev1.Secret
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: tp.Namespace, Name: ref.Name}, &s); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("spec.credentialsSecretRef: Secret %s/%s not found: create it with the provider's keys", tp.Namespace, ref.Name)
		}
		return nil, fmt.Errorf("reading Secret %s/%s: %w", tp.Namespace, ref.Name, err)
	}
	return s.Data, nil
}

// noticeToken makes sure the pool has its notice token: read from its
// Secret, or generated and stored there (owned by the TidePool, so it goes
// with it). The token itself is never logged nor put in status or events.
func (r *Reconciler) noticeToken(ctx context.Context, pool string, tp *tidev1.TidePool) error {
	if r.NoticeTokens == nil {
		return nil
	}
	nn := types.NamespacedName{Namespace: tp.Namespace, Name: notice.TokenSecretName(tp.Name)}
	var s corev1.Secret
	err := r.Client.Get(ctx, nn, &s)
	if apierrors.IsNotFound(err) {
		s = corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: nn.Namespace, Name: nn.Name,
				Labels: map[string]string{"app.kubernetes.io/managed-by": "tidegpu", "tidegpu.eja.dev/pool": tp.Name}},
			Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{notice.TokenKey: []byte(notice.NewToken())},
		}
		if err := controllerutil.SetControllerReference(tp, &s, r.Client.Scheme()); err != nil {
			return fmt.Errorf("notice token: %w", err)
		}
		if err = r.Client.Create(ctx, &s); apierrors.IsAlreadyExists(err) {
			err = r.Client.Get(ctx, nn, &s)
		}
	}
	if err != nil {
		return fmt.Errorf("notice token: Secret %s: %w", nn, err)
	}
	tok := strings.TrimSpace(string(s.Data[notice.TokenKey]))
	if tok == "" {
		return fmt.Errorf("notice token: Secret %s has no key %q: delete it and the operator makes a new one", nn, notice.TokenKey)
	}
	r.NoticeTokens.Set(pool, tok)
	return nil
}

// kong gives the pool its Kong registrar when its spec asks for one,
// reading the admin token and TLS material from Secrets. The registrar is
// kept while its settings stay the same (it remembers what it ensured).
func (r *Reconciler) kong(ctx context.Context, pool string, tp *tidev1.TidePool) error {
	var sec kongreg.Secrets
	if k := tp.Spec.Kong; k != nil {
		if ref := k.TokenSecretRef; ref != nil {
			data, err := r.secretData(ctx, tp.Namespace, ref.Name, "spec.kong.tokenSecretRef")
			if err != nil {
				return err
			}
			tok, ok := data[ref.Key]
			if !ok {
				return fmt.Errorf("spec.kong.tokenSecretRef: Secret %s has no key %q", ref.Name, ref.Key)
			}
			sec.Token = strings.TrimSpace(string(tok))
		}
		if ref := k.TLSSecretRef; ref != nil {
			data, err := r.secretData(ctx, tp.Namespace, ref.Name, "spec.kong.tlsSecretRef")
			if err != nil {
				return err
			}
			sec.CA, sec.ClientCert, sec.Key = data["ca.crt"], data["tls.crt"], data["tls.key"]
		}
	}
	cfg, ok, err := kongreg.ConfigFromSpec(pool, &tp.Spec, sec)
	if err != nil {
		return err
	}
	if !ok {
		r.Engines.SetRegistrar(pool, nil, "")
		return nil
	}
	fp := fingerprint(cfg, sec)
	if r.Engines.RegistrarFingerprint(pool) == fp {
		return nil
	}
	cfg.Registry = r.Registry
	reg, err := kongreg.New(cfg)
	if err != nil {
		return err
	}
	r.Engines.SetRegistrar(pool, reg, fp)
	return nil
}

func (r *Reconciler) secretData(ctx context.Context, ns, name, field string) (map[string][]byte, error) {
	var s corev1.Secret
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &s); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%s: Secret %s/%s not found", field, ns, name)
		}
		return nil, fmt.Errorf("%s: reading Secret %s/%s: %w", field, ns, name, err)
	}
	return s.Data, nil
}

// fingerprint identifies a Kong configuration without keeping its secrets.
func fingerprint(cfg kongreg.Config, sec kongreg.Secrets) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s|%s|%s|%s|%s|%s|%v|%s|%+v|%+v", cfg.AdminURL, cfg.PoolTag, cfg.Upstream, cfg.Service, cfg.ServicePath,
		cfg.Route, cfg.RoutePaths, sec.Token, cfg.Passive, cfg.Active)
	h.Write(sec.CA)
	h.Write(sec.ClientCert)
	h.Write(sec.Key)
	return hex.EncodeToString(h.Sum(nil))
}

func setCondition(tp *tidev1.TidePool, typ string, status metav1.ConditionStatus, reason, msg string, now metav1.Time) {
	meta.SetStatusCondition(&tp.Status.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason,
		Message: msg, ObservedGeneration: tp.Generation, LastTransitionTime: now})
}

// StatusFrom turns the engine's status into the CR's, keeping the existing
// conditions' transition times when nothing changed and truncating times to
// what the API stores (seconds), so that an unchanged pool writes nothing.
func StatusFrom(engineStatus tidev1.TidePoolStatus, existing []metav1.Condition) tidev1.TidePoolStatus {
	st := *engineStatus.DeepCopy()
	for i := range st.Instances {
		st.Instances[i].LaunchedAt = metav1.NewTime(st.Instances[i].LaunchedAt.Truncate(time.Second))
	}
	conds := append([]metav1.Condition(nil), existing...)
	for _, c := range st.Conditions {
		c.LastTransitionTime = metav1.NewTime(c.LastTransitionTime.Truncate(time.Second))
		meta.SetStatusCondition(&conds, c)
	}
	st.Conditions = conds
	return st
}

// eventPump turns the engine's events into Kubernetes Events on the pool.
// (Reconciles follow the engine's rounds through Engines.rounds, a channel
// source, so status is written after the round that changed it.)
type eventPump struct {
	r *Reconciler
}

// NeedLeaderElection: events come from the leader's engines.
func (p *eventPump) NeedLeaderElection() bool { return true }

// Start pumps events until ctx ends.
func (p *eventPump) Start(ctx context.Context) error {
	ch, cancel := p.r.Recorder.Subscribe(1024)
	defer cancel()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev := <-ch:
			nn, ok := splitKey(ev.Pool)
			if !ok {
				continue
			}
			var tp tidev1.TidePool
			if err := p.r.Client.Get(ctx, nn, &tp); err == nil {
				typ := corev1.EventTypeNormal
				if ev.Type == tideevents.TypeWarning {
					typ = corev1.EventTypeWarning
				}
				p.r.Events.Eventf(&tp, nil, typ, ev.Reason, ev.Reason, "%s", ev.Message)
			}
		}
	}
}
