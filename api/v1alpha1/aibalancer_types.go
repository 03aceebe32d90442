package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
)

// ModelSpec names the model the balanced backends serve.
type ModelSpec struct {
	// Name of the model, as clients send it (for example qwen2:0.5b).
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// Version of the model (for ModelBased splits).
	// +optional
	Version string `json:"version,omitempty"`
	// ComputeType is CPU, GPU or TPU.
	// +kubebuilder:validation:Enum=CPU;GPU;TPU
	// +kubebuilder:default=GPU
	// +optional
	ComputeType string `json:"computeType,omitempty"`
}

// Strategy types.
const (
	StrategyResourceBased    = "ResourceBased"
	StrategyPerformanceBased = "PerformanceBased"
	StrategyModelBased       = "ModelBased"
	StrategyLeastLoad        = "LeastLoad"
)

// VersionWeight gives a model version its share of traffic (ModelBased).
type VersionWeight struct {
	// Version of the model.
	Version string `json:"version"`
	// Weight, relative to the other versions.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	Weight int32 `json:"weight"`
}

// StrategySpec says how weights are computed from metrics.
//
// +kubebuilder:validation:XValidation:rule="self.type != 'ModelBased' || size(self.versions) > 0",message="spec.strategy.versions: ModelBased needs at least one version weight"
type StrategySpec struct {
	// Type is ResourceBased (GPU utilisation toward a target),
	// PerformanceBased (latency), ModelBased (version weights) or LeastLoad.
	// +kubebuilder:validation:Enum=ResourceBased;PerformanceBased;ModelBased;LeastLoad
	Type string `json:"type"`
	// Resource is the metric ResourceBased steers, for example gpu.utilization.
	// +optional
	Resource string `json:"resource,omitempty"`
	// Target value of Resource (percent for utilisation) or of latency (ms).
	// +kubebuilder:validation:Minimum=1
	// +optional
	Target int32 `json:"target,omitempty"`
	// Versions and their weights, for ModelBased.
	// +optional
	Versions []VersionWeight `json:"versions,omitempty"`
	// MinWeight is the floor of any backend's weight (the seed uses 10).
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +kubebuilder:default=10
	// +optional
	MinWeight int32 `json:"minWeight,omitempty"`
}

// ScaleSpec bounds the number of replicas.
//
// +kubebuilder:validation:XValidation:rule="self.minReplicas <= self.maxReplicas",message="spec.scale.minReplicas must be <= spec.scale.maxReplicas"
type ScaleSpec struct {
	// MinReplicas is the fewest replicas.
	// +kubebuilder:validation:Minimum=0
	MinReplicas int32 `json:"minReplicas"`
	// MaxReplicas is the most replicas.
	// +kubebuilder:validation:Minimum=1
	MaxReplicas int32 `json:"maxReplicas"`
}

// ServiceSpec names how the balanced backends are exposed.
type ServiceSpec struct {
	// Name of the Service (or Ingress).
	Name string `json:"name"`
	// Port of the inference server.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`
	// Type is Ingress or Service.
	// +kubebuilder:validation:Enum=Ingress;Service
	// +kubebuilder:default=Service
	// +optional
	Type string `json:"type,omitempty"`
}

// AIBalancerSpec is the wanted balancing of a model's backends.
//
// +kubebuilder:validation:XValidation:rule="!has(self.autoscaling) || has(self.scaleTargetRef)",message="spec.autoscaling needs spec.scaleTargetRef (the Deployment or StatefulSet to scale)"
// +kubebuilder:validation:XValidation:rule="has(self.selector) != has(self.poolRef)",message="set exactly one of spec.selector (pods by labels) and spec.poolRef (a TidePool's instances)"
type AIBalancerSpec struct {
	// Model the backends serve.
	Model ModelSpec `json:"model"`
	// Strategy computes weights from metrics.
	Strategy StrategySpec `json:"strategy"`
	// Scale bounds the replicas.
	// +optional
	Scale *ScaleSpec `json:"scale,omitempty"`
	// Service exposes the backends.
	// +optional
	Service *ServiceSpec `json:"service,omitempty"`
	// Selector picks the model's pods by labels.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
	// PoolRef picks a TidePool's instances instead of pods.
	// +optional
	PoolRef *PoolReference `json:"poolRef,omitempty"`

	// ScaleTargetRef is the Deployment or StatefulSet that Autoscaling
	// scales through its scale subresource.
	// +optional
	ScaleTargetRef *ScaleTargetReference `json:"scaleTargetRef,omitempty"`

	// Autoscaling sets the scale target's replicas from the backends'
	// inference signals (the TidePool's autoscaling spec; replicas default
	// to spec.scale).
	// +optional
	Autoscaling *tidev1.AutoscalingSpec `json:"autoscaling,omitempty"`
}

// ScaleTargetReference names a workload with a scale subresource.
type ScaleTargetReference struct {
	// Kind is Deployment or StatefulSet.
	// +kubebuilder:validation:Enum=Deployment;StatefulSet
	Kind string `json:"kind"`
	// Name of the workload in the AIBalancer's namespace.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
}

// PoolReference names a TidePool in the same namespace.
type PoolReference struct {
	// Name of the TidePool.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
}

// BackendWeight is one backend's current share of traffic.
type BackendWeight struct {
	// PodName is the pod (or instance id) of the backend.
	PodName string `json:"podName"`
	// Weight is relative, 0..65535.
	Weight int32 `json:"weight"`
}

// AIBalancerStatus is what the balancer last did.
type AIBalancerStatus struct {
	// ObservedGeneration is the spec generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// CurrentReplicas is the number of backends balanced.
	// +optional
	CurrentReplicas int32 `json:"currentReplicas,omitempty"`
	// CurrentWeights are the weights applied to the gateway.
	// +optional
	CurrentWeights []BackendWeight `json:"currentWeights,omitempty"`
	// LastUpdated is when the weights last changed.
	// +optional
	LastUpdated *metav1.Time `json:"lastUpdated,omitempty"`
	// Autoscaling is the autoscaler's last decision for the scale target.
	// +optional
	Autoscaling *tidev1.AutoscalingStatus `json:"autoscaling,omitempty"`
	// Conditions say whether metrics are fresh and weights applied.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// AIBalancer balances a model's backends on inference signals.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=aib
// +kubebuilder:printcolumn:name="Model",type=string,JSONPath=`.spec.model.name`
// +kubebuilder:printcolumn:name="Strategy",type=string,JSONPath=`.spec.strategy.type`
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.status.currentReplicas`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type AIBalancer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   AIBalancerSpec   `json:"spec,omitempty"`
	Status AIBalancerStatus `json:"status,omitempty"`
}

// AIBalancerList is a list of AIBalancers.
//
// +kubebuilder:object:root=true
type AIBalancerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AIBalancer `json:"items"`
}

func init() {
	SchemeBuilder.Register(&AIBalancer{}, &AIBalancerList{})
}
