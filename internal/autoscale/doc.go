// Package autoscale owns the autoscaler's decision logic for a pool: given
// the pool's current size and the metrics observed for it, it says how many
// instances the pool should have and why. It is pure: no I/O, time comes
// from an injected clock, and all state (recommendation history, scale
// events, panic mode, the learned load profile) lives inside the
// Autoscaler and can be exported and imported as JSON so that a restarted
// controller continues where the last one stopped.
//
// The result is the maximum of the active recommenders, clamped to
// [minReplicas, maxReplicas]:
//
//   - reactive: the Kubernetes HorizontalPodAutoscaler (autoscaling/v2)
//     algorithm, reproduced exactly — desired = ceil(current × metric /
//     target) unless the ratio is within the tolerance, the maximum over all
//     metrics, then the behavior's stabilisation windows and rate policies
//     (https://kubernetes.io/docs/concepts/workloads/autoscaling/horizontal-pod-autoscale/#algorithm-details,
//     https://kubernetes.io/docs/concepts/workloads/autoscaling/horizontal-pod-autoscale/#configurable-scaling-behavior,
//     and kubernetes pkg/controller/podautoscaler horizontal.go /
//     replica_calculator.go for the exact semantics);
//   - panic: Knative's panic mode (https://knative.dev/docs/serving/autoscaling/kpa-specific/):
//     when the short panic window says the pool needs at least the panic
//     threshold (200 %) of its ready instances, scale straight to that
//     need, bypassing rate policies, and never scale down until the load
//     has stayed under the threshold for a whole stable window;
//   - predictive: a per-slot (5 min by default) profile of the load over the
//     day or week, learned from the observations, looked up a lead time
//     (the measured cold start) ahead, so instances are ready when the load
//     that usually comes arrives;
//   - burst: standing capacity for the bursts of a trailing window (8 h by
//     default): the load-weighted quantile (0.99) of the per-minute load,
//     at the load one instance serves. It is the lever when bursts are
//     shorter than the cold start, so that nothing launched for a burst is
//     ready in time, and bursts cluster over hours;
//   - schedules: cron windows with a time zone (KEDA's cron scaler model,
//     https://keda.sh/docs/2.17/scalers/cron/) that raise the minimum while
//     they are active.
//
// Missing or stale metrics make their recommender abstain; as in the HPA,
// the pool is never scaled down while a metric is missing.
package autoscale
