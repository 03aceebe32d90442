package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Provider names accepted in TidePoolSpec.Provider.
const (
	ProviderTencent = "tencent"
	ProviderAWS     = "aws"
	ProviderLocal   = "local"
	ProviderSim     = "sim"
)

// Charge types accepted in TidePoolSpec.InstanceChargeType (the seed's
// Tencent names; they mean spot and on-demand on every provider).
const (
	ChargeSpot     = "SPOTPAID"
	ChargeOnDemand = "POSTPAID_BY_HOUR"
)

// WakeAnnotation on a TidePool is stamped (with the time, RFC 3339) by a
// standalone gateway whose activator holds a request for the pool while it
// has no ready instance: the operator has the pool's autoscaler evaluate at
// once, so a pool at zero wakes.
const WakeAnnotation = "tidegpu.eja.dev/wake"

// TidePoolSpec is the wanted shape of a pool of inference instances.
//
// The fields of the seed's sample manifest keep their names and meaning;
// credentials are only ever given by reference (see CredentialsSecretRef).
//
// The rules below, and the markers on the fields, mirror
// internal/validation's (which `tidegpu up` applies); test/validation runs
// the same invalid documents through both.
//
// +kubebuilder:validation:XValidation:rule="!has(self.secretId)",fieldPath=".secretId",message="spec.secretId: inline credentials are not accepted: store them in a Secret (keys secretId, secretKey) and set spec.credentialsSecretRef.name"
// +kubebuilder:validation:XValidation:rule="!has(self.secretKey)",fieldPath=".secretKey",message="spec.secretKey: inline credentials are not accepted: store them in a Secret (keys secretId, secretKey) and set spec.credentialsSecretRef.name"
// +kubebuilder:validation:XValidation:rule="self.minimum <= self.maximum",fieldPath=".minimum",message="spec.minimum must be <= spec.maximum: lower minimum or raise maximum"
// +kubebuilder:validation:XValidation:rule="!has(self.replicas) || (self.replicas >= self.minimum && self.replicas <= self.maximum)",fieldPath=".replicas",message="spec.replicas must lie between spec.minimum and spec.maximum: set it in that range or remove it"
// +kubebuilder:validation:XValidation:rule="!has(self.provider) || self.provider != 'sim' || has(self.sim)",fieldPath=".sim",message="spec.sim: required for provider sim: set spec.sim.traceDir to a folder of per-zone spot-capacity traces"
// +kubebuilder:validation:XValidation:rule="!has(self.autoscaling) || !has(self.autoscaling.scaleToZero) || (self.minimum == 0 && (!has(self.autoscaling.minReplicas) || self.autoscaling.minReplicas == 0))",fieldPath=".autoscaling.scaleToZero",message="spec.autoscaling.scaleToZero needs a minimum of 0: set spec.minimum to 0 (and autoscaling.minReplicas to 0 or unset), or remove scaleToZero"
// +kubebuilder:validation:XValidation:rule="!has(self.autoscaling) || self.maximum >= 1",fieldPath=".autoscaling.maxReplicas",message="spec.autoscaling.maxReplicas must be >= 1: autoscaling needs spec.maximum >= 1"
// +kubebuilder:validation:XValidation:rule="!has(self.autoscaling) || (self.minimum <= (has(self.autoscaling.maxReplicas) && self.autoscaling.maxReplicas != 0 && self.autoscaling.maxReplicas < self.maximum ? self.autoscaling.maxReplicas : self.maximum) && (!has(self.autoscaling.minReplicas) || self.autoscaling.minReplicas <= (has(self.autoscaling.maxReplicas) && self.autoscaling.maxReplicas != 0 && self.autoscaling.maxReplicas < self.maximum ? self.autoscaling.maxReplicas : self.maximum)))",fieldPath=".autoscaling.minReplicas",message="spec.autoscaling.minReplicas must be <= maxReplicas: the autoscaler runs between max(minReplicas, spec.minimum) and min(maxReplicas, spec.maximum); lower minReplicas or raise maxReplicas"
// +kubebuilder:validation:XValidation:rule="!has(self.autoscaling) || !has(self.autoscaling.schedules) || self.autoscaling.schedules.all(x, x.minReplicas <= (has(self.autoscaling.maxReplicas) && self.autoscaling.maxReplicas != 0 && self.autoscaling.maxReplicas < self.maximum ? self.autoscaling.maxReplicas : self.maximum))",fieldPath=".autoscaling.schedules",message="spec.autoscaling.schedules[].minReplicas must be <= maxReplicas (min(spec.autoscaling.maxReplicas, spec.maximum)): lower the schedule's minReplicas"
// +kubebuilder:validation:XValidation:rule="!has(self.bootstrap) || !has(self.provider) || self.provider == 'aws' || self.provider == 'tencent'",fieldPath=".bootstrap",message="spec.bootstrap: user data is for cloud instances: use it with provider aws or tencent, or remove it"
type TidePoolSpec struct {
	// Provider selects the cloud provider adapter. Unset means tencent, so the
	// seed's manifest means what it meant; `tidegpu up` defaults to local.
	// +kubebuilder:validation:Enum=tencent;aws;local;sim
	// +kubebuilder:default=tencent
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.provider is immutable: create a new TidePool to move to another provider"
	// +optional
	Provider string `json:"provider,omitempty"`

	// Region is the cloud region (for example ap-singapore or us-east-1).
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.region is immutable: create a new TidePool in the other region"
	// +optional
	Region string `json:"region,omitempty"`

	// Endpoint overrides the provider API's address (a private endpoint, a
	// proxy, or a test double), for example https://cvm.ap-singapore.tencentcloudapi.com.
	// +kubebuilder:validation:Pattern=`^https?://`
	// +optional
	Endpoint string `json:"endpoint,omitempty"`

	// AvailabilityZone is the zone instances are launched in.
	// +optional
	AvailabilityZone string `json:"availabilityZone,omitempty"`

	// InstanceType is the machine type (for example GN7.2XLARGE32 or g5.xlarge).
	// +optional
	InstanceType string `json:"instanceType,omitempty"`

	// Minimum is the low watermark: the pool never holds fewer serving instances.
	// +kubebuilder:validation:Minimum=0
	Minimum int32 `json:"minimum"`

	// Maximum is the high watermark: the pool never holds more serving instances.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	Maximum int32 `json:"maximum"`

	// Replicas is the wanted number of serving instances, between Minimum and
	// Maximum. Unset means Minimum. An autoscaler may set it.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

	// SubnetID is the subnet instances are attached to.
	// +optional
	SubnetID string `json:"subnetId,omitempty"`

	// VpcID is the VPC of SubnetID.
	// +optional
	VpcID string `json:"vpcId,omitempty"`

	// SecurityGroupIDs are attached to every instance.
	// +optional
	SecurityGroupIDs []string `json:"securityGroupIds,omitempty"`

	// ImageID is the pre-baked image (inference server and model inside) the
	// instances boot from.
	// +optional
	ImageID string `json:"imageId,omitempty"`

	// InstanceChargeType is SPOTPAID (spot) or POSTPAID_BY_HOUR (on-demand).
	// +kubebuilder:validation:Enum=SPOTPAID;POSTPAID_BY_HOUR
	// +kubebuilder:default=SPOTPAID
	// +optional
	InstanceChargeType string `json:"instanceChargeType,omitempty"`

	// KongGatewayIP is the address of a Kong gateway whose Admin API
	// (http://IP:8001) receives the pool's targets: an IP address or host
	// name, optionally with :port. Empty means no Kong.
	// +kubebuilder:validation:Pattern=`^(\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?|[0-9A-Fa-f]*:[0-9A-Fa-f:.]+|[0-9A-Za-z]([-0-9A-Za-z.]*[0-9A-Za-z])?(:[0-9]{1,5})?)$`
	// +optional
	KongGatewayIP string `json:"kongGatewayIP,omitempty"`

	// CredentialsSecretRef names a Secret holding the cloud credentials
	// (keys secretId and secretKey for tencent; accessKeyId and
	// secretAccessKey for aws). Unset means the provider's default chain
	// (instance role, IRSA). Plaintext credentials are never accepted in
	// the spec.
	// +optional
	CredentialsSecretRef *SecretReference `json:"credentialsSecretRef,omitempty"`

	// SecretID is refused: it exists only so the API server can say how to
	// pass credentials instead of silently dropping them.
	// +optional
	SecretID *string `json:"secretId,omitempty"`

	// SecretKey is refused, like SecretID.
	// +optional
	SecretKey *string `json:"secretKey,omitempty"`

	// Kong configures the Kong gateway the pool's targets are kept in. Set
	// either this or KongGatewayIP (the seed's field) to use Kong.
	// +optional
	Kong *KongSpec `json:"kong,omitempty"`

	// Serving describes how the inference server on each instance is reached.
	// +optional
	Serving ServingSpec `json:"serving,omitempty"`

	// Local configures the local provider (each instance an OS process).
	// +optional
	Local *LocalSpec `json:"local,omitempty"`

	// Bootstrap is the user data (cloud-init) of each cloud instance (aws,
	// tencent): the agent with its notice URL and token, and the inference
	// server. Unset sends no user data (the image starts everything).
	// +optional
	Bootstrap *BootstrapSpec `json:"bootstrap,omitempty"`

	// Placement spreads the pool over zones and markets like SkyServe's
	// SpotHedge: spare spot instances, an on-demand base, on-demand
	// fallback while spot is short. Unset means every instance in
	// availabilityZone on the market of instanceChargeType.
	// +optional
	Placement *PlacementSpec `json:"placement,omitempty"`

	// Autoscaling sets the wanted size from inference signals between
	// minimum and maximum (HPA algorithm, panic mode, schedules, prediction).
	// +optional
	Autoscaling *AutoscalingSpec `json:"autoscaling,omitempty"`

	// Pricing overrides the price of this pool's instances (local machines,
	// negotiated rates) where the catalog and the provider cannot know it.
	// +optional
	Pricing *PricingSpec `json:"pricing,omitempty"`

	// Budget limits the pool's monthly spend.
	// +optional
	Budget *BudgetSpec `json:"budget,omitempty"`

	// Sim configures the spot-market simulator provider (provider: sim).
	// +optional
	Sim *SimSpec `json:"sim,omitempty"`

	// DrainSeconds bounds how long an instance leaving the pool (scale-down)
	// keeps its in-flight requests before it is terminated. Default 30.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=3600
	// +optional
	DrainSeconds *int32 `json:"drainSeconds,omitempty"`
}

// SecretReference names a Secret in the pool's namespace.
type SecretReference struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
}

// Placement strategies (spec.placement.strategy).
const (
	// StrategyAdaptive learns the market it runs on (how often each zone
	// takes instances back, the notice it gives, this pool's cold and warm
	// starts) and keeps, per round, the spare spot instances, on-demand
	// cover and standby starts that hold spec.placement.availabilityTarget
	// at the lowest expected cost. The default.
	StrategyAdaptive = "Adaptive"
	// StrategyLowestPrice runs spot in the cheapest zones and on-demand
	// only for what spot cannot hold: the cheapest, with a dip at every
	// reclaim that a replacement cannot cover within the notice.
	StrategyLowestPrice = "LowestPrice"
	// StrategyZoneResilient spreads spot over zones and regions (at most
	// half the pool's spot in one zone), keeps on-demand cover for the loss
	// of the fullest zone while spot cannot spread that far, and covers
	// every gap in ready spot at once with a standby start where a standby
	// is kept. Fixed rules, no learning.
	StrategyZoneResilient = "ZoneResilient"
	// StrategyOnDemand runs every instance on-demand.
	StrategyOnDemand = "OnDemand"
)

// DefaultAvailabilityTarget is spec.placement.availabilityTarget's default.
const DefaultAvailabilityTarget = "99.9"

// PlacementSpec configures spot placement across the provider's offerings:
// a named strategy and the few numbers a pool's owner decides.
type PlacementSpec struct {
	// AvailabilityZones limits placement to these zones; empty means every
	// zone the provider offers in the region.
	// +kubebuilder:validation:items:Pattern=`^\S+$`
	// +kubebuilder:validation:items:MaxLength=64
	// +listType=set
	// +optional
	AvailabilityZones []string `json:"availabilityZones,omitempty"`
	// InstanceTypes are further machine types the pool may run on besides
	// spec.instanceType, for example g5.xlarge and g6.xlarge: each of them
	// must serve the pool's model from spec.imageId at a comparable speed,
	// since every instance counts as one serving instance. Placement ranks
	// every type x zone x market by availability and price, so a type the
	// cloud has no capacity for is skipped and the pool fills from another.
	// +kubebuilder:validation:MaxItems=10
	// +kubebuilder:validation:items:Pattern=`^\S+$`
	// +kubebuilder:validation:items:MaxLength=64
	// +listType=set
	// +optional
	InstanceTypes []string `json:"instanceTypes,omitempty"`
	// SubnetIDs maps a zone to the subnet its instances attach to, since a
	// subnet lives in one zone on AWS and on Tencent Cloud; a zone without
	// an entry uses spec.subnetId.
	// +kubebuilder:validation:MaxProperties=64
	// +optional
	SubnetIDs map[string]string `json:"subnetIds,omitempty"`
	// Strategy decides spot, spares, on-demand and standby: Adaptive (the
	// default), LowestPrice, ZoneResilient or OnDemand; docs/guide.md says
	// what each does and when to pick it.
	// +kubebuilder:validation:Enum=Adaptive;LowestPrice;ZoneResilient;OnDemand
	// +optional
	Strategy string `json:"strategy,omitempty"`
	// AvailabilityTarget is the share of time, in percent, that the
	// Adaptive strategy aims to hold the wanted number of instances
	// serving, for example "99.9" (the default) or "99". Other strategies
	// ignore it.
	// +kubebuilder:validation:Pattern=`^(100(\.0+)?|[1-9]?[0-9](\.[0-9]+)?)$`
	// +kubebuilder:validation:XValidation:rule="!self.matches('^0(\\\\.0+)?$')",message="spec.placement.availabilityTarget must be a percentage above 0 and at most 100, such as \"99.9\""
	// +optional
	AvailabilityTarget string `json:"availabilityTarget,omitempty"`
	// OnDemandBase is the number of always-on on-demand instances, part of
	// the wanted count.
	// +kubebuilder:validation:Minimum=0
	// +optional
	OnDemandBase int32 `json:"onDemandBase,omitempty"`
	// Standby is the number of stopped on-demand instances kept as a warm
	// standby, like an EC2 Auto Scaling warm pool: each was launched, became
	// Ready once (image and model on its disk), then was stopped; a stopped
	// instance costs only its storage (spec.pricing.standbyPerHour). When
	// the pool needs on-demand capacity, it starts a standby instance, which
	// serves after a warm start instead of a cold one, and an on-demand
	// instance no longer needed is stopped back into standby. Needs a
	// provider that can stop instances (aws, tencent; sim without
	// processes). Unset: the Adaptive strategy keeps one per spot instance
	// where the provider can stop instances, the others none; 0: none.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	Standby *int32 `json:"standby,omitempty"`
}

// SimSpec configures the spot-market simulator: it replays real spot
// capacity traces (one JSON file per zone) with time compressed, refuses
// spot where a zone is full, preempts with notice, and runs each instance as
// a local simulator process.
type SimSpec struct {
	// TraceDir is a folder of per-zone trace files, for example
	// ../shared/data/spot-traces/aws1.
	// +kubebuilder:validation:MinLength=1
	TraceDir string `json:"traceDir"`
	// Binary reads values as 0/1 availability (the aws3 format) instead of
	// capacities.
	// +optional
	Binary bool `json:"binary,omitempty"`
	// Compression is trace seconds per wall second; default 300.
	// +kubebuilder:validation:Minimum=1
	// +optional
	Compression int32 `json:"compression,omitempty"`
	// NoticeSeconds is the reclaim notice in trace time; default 120.
	// +kubebuilder:validation:Minimum=0
	// +optional
	NoticeSeconds *int32 `json:"noticeSeconds,omitempty"`
}

// PricingSpec gives a pool's own prices per instance-hour, as decimal
// strings such as "3.06".
type PricingSpec struct {
	// OnDemandPerHour is the on-demand (list) price.
	// +kubebuilder:validation:Pattern=`^[0-9]{1,9}(\.[0-9]{1,9})?$`
	// +optional
	OnDemandPerHour string `json:"onDemandPerHour,omitempty"`
	// SpotPerHour is the spot price.
	// +kubebuilder:validation:Pattern=`^[0-9]{1,9}(\.[0-9]{1,9})?$`
	// +optional
	SpotPerHour string `json:"spotPerHour,omitempty"`
	// StandbyPerHour is the price of a stopped standby instance (its
	// disk). Default about 0.011: a 100 GB EBS gp3 volume at 0.08 USD per
	// GB-month (https://aws.amazon.com/ebs/pricing/, us-east-1), 730
	// hours a month.
	// +kubebuilder:validation:Pattern=`^[0-9]{1,9}(\.[0-9]{1,9})?$`
	// +optional
	StandbyPerHour string `json:"standbyPerHour,omitempty"`
	// Currency is an ISO 4217 code; default USD.
	// +kubebuilder:validation:Pattern=`^[A-Z]{3}$`
	// +optional
	Currency string `json:"currency,omitempty"`
}

// Budget actions.
const (
	BudgetAlert        = "Alert"
	BudgetCapAtMinimum = "CapAtMinimum"
)

// BudgetSpec is a monthly spending limit (calendar month, UTC).
type BudgetSpec struct {
	// Monthly is the amount, a decimal string such as "2500".
	// +kubebuilder:validation:Pattern=`^[0-9]{1,9}(\.[0-9]{1,9})?$`
	Monthly string `json:"monthly"`
	// Currency is an ISO 4217 code; default USD.
	// +kubebuilder:validation:Pattern=`^[A-Z]{3}$`
	// +optional
	Currency string `json:"currency,omitempty"`
	// Action on crossing: Alert (condition, event, metric) or CapAtMinimum
	// (also hold the pool at its minimum until the next month).
	// +kubebuilder:validation:Enum=Alert;CapAtMinimum
	// +kubebuilder:default=Alert
	// +optional
	Action string `json:"action,omitempty"`
}

// SecretKeyReference names one key of a Secret in the pool's namespace.
type SecretKeyReference struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// Key in the Secret.
	// +kubebuilder:validation:MinLength=1
	Key string `json:"key"`
}

// KongSpec says how to reach Kong's Admin API and which entities the pool
// owns there. Every name defaults to the seed's.
type KongSpec struct {
	// AdminURL is the Admin API, for example https://kong-admin:8444.
	// Default http://KONG_GATEWAY_IP:8001.
	// +kubebuilder:validation:Pattern=`^https?://`
	// +optional
	AdminURL string `json:"adminURL,omitempty"`
	// TokenSecretRef holds the admin token (sent as Kong-Admin-Token).
	// +optional
	TokenSecretRef *SecretKeyReference `json:"tokenSecretRef,omitempty"`
	// TLSSecretRef holds ca.crt and, for mTLS, tls.crt and tls.key.
	// +optional
	TLSSecretRef *SecretReference `json:"tlsSecretRef,omitempty"`
	// Upstream name; default llama2-YiFlow-upstream.
	// +optional
	Upstream string `json:"upstream,omitempty"`
	// Service name; default ai-YiFlow-proxy.
	// +optional
	Service string `json:"service,omitempty"`
	// ServicePath is the path the service forwards to; default /api/chat.
	// +optional
	ServicePath string `json:"servicePath,omitempty"`
	// Route name; default ollama-chat.
	// +optional
	Route string `json:"route,omitempty"`
	// RoutePaths of the route; default ["~/ollama-chat$"].
	// +optional
	RoutePaths []string `json:"routePaths,omitempty"`
	// ActiveHealthCheckPath turns on Kong's active health checks on this
	// path; passive checks are always on.
	// +optional
	ActiveHealthCheckPath string `json:"activeHealthCheckPath,omitempty"`
}

// ServingSpec describes the inference endpoint on each instance.
type ServingSpec struct {
	// Port the inference server listens on (the seed's demo uses 8080).
	// Ignored by the local provider, which picks a free port.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	Port int32 `json:"port,omitempty"`

	// ReadinessPath is probed with GET until it answers 2xx. Default /healthz
	// for the simulator; use / for Ollama.
	// +kubebuilder:validation:Pattern=`^/`
	// +optional
	ReadinessPath string `json:"readinessPath,omitempty"`

	// Models served by the pool (for model-aware routing).
	// +optional
	Models []string `json:"models,omitempty"`

	// UsePrivateIP registers instances by private instead of public address.
	// +optional
	UsePrivateIP bool `json:"usePrivateIP,omitempty"`

	// Metrics says which metrics the backends serve, for the gateway's
	// balancing signals (default: detected).
	// +optional
	Metrics *ServingMetrics `json:"metrics,omitempty"`
}

// LocalSpec configures the local provider.
type LocalSpec struct {
	// Command is the argv template of an instance. Each argument may use
	// {{.Port}}, {{.Host}}, {{.InstanceID}} and {{.Pool}}; the same values
	// are also passed as TIDEGPU_PORT, TIDEGPU_HOST, TIDEGPU_INSTANCE_ID and
	// TIDEGPU_POOL (and OLLAMA_HOST=host:port). Empty means this binary's
	// built-in simulator (`tidegpu sim`).
	// +kubebuilder:validation:XValidation:rule="size(self) == 0 || !self[0].matches('^\\\\s*$')",message="spec.local.command[0]: the program must not be empty: name it first, for example [\"ollama\", \"serve\"]"
	// +optional
	Command []string `json:"command,omitempty"`

	// Env adds NAME=VALUE entries to each instance's environment.
	// +kubebuilder:validation:items:Pattern=`^[^=]+=`
	// +optional
	Env []string `json:"env,omitempty"`

	// StartTimeoutSeconds bounds how long an instance may take to become
	// ready before it is replaced. Default 60.
	// +kubebuilder:validation:Minimum=1
	// +optional
	StartTimeoutSeconds *int32 `json:"startTimeoutSeconds,omitempty"`
}

// Instance phases as shown in status.
const (
	PhasePending     = "Pending"
	PhaseStarting    = "Starting"
	PhaseReady       = "Ready"
	PhaseDraining    = "Draining"
	PhaseTerminating = "Terminating"
	// PhaseStandby: a stopped on-demand instance kept as a warm standby
	// (spec.placement.standby); it serves nothing and costs its storage.
	PhaseStandby = "Standby"
)

// InstanceStatus is one instance of the pool as last observed.
type InstanceStatus struct {
	// ID is the provider's instance id.
	ID string `json:"id"`
	// Address is host:port of the inference server, empty until known.
	// +optional
	Address string `json:"address,omitempty"`
	// Zone the instance runs in.
	// +optional
	Zone string `json:"zone,omitempty"`
	// Market is spot or on-demand.
	// +optional
	Market string `json:"market,omitempty"`
	// PrivateIP of the instance.
	// +optional
	PrivateIP string `json:"privateIP,omitempty"`
	// PublicIP of the instance.
	// +optional
	PublicIP string `json:"publicIP,omitempty"`
	// Phase is Pending, Starting, Ready, Draining or Terminating.
	Phase string `json:"phase"`
	// Weight is the instance's share of traffic set by an AIBalancer
	// (0: the gateway's default).
	// +optional
	Weight int32 `json:"weight,omitempty"`
	// LaunchedAt is when the instance was launched.
	// +optional
	LaunchedAt metav1.Time `json:"launchedAt,omitempty"`
}

// Condition types of a TidePool.
const (
	ConditionReady             = "Ready"
	ConditionDegraded          = "Degraded"
	ConditionCapacityAvailable = "CapacityAvailable"
	ConditionGatewaySynced     = "GatewaySynced"
	ConditionBudgetExceeded    = "BudgetExceeded"
)

// TidePoolStatus is what was last observed of a pool.
type TidePoolStatus struct {
	// ObservedGeneration is the spec generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Desired is the number of serving instances wanted.
	// +optional
	Desired int32 `json:"desired"`
	// Ready is the number of instances serving traffic.
	// +optional
	Ready int32 `json:"ready"`
	// Spot is the number of live instances on the spot market.
	// +optional
	Spot int32 `json:"spot,omitempty"`
	// Standby is the number of stopped instances kept as a warm standby.
	// +optional
	Standby int32 `json:"standby,omitempty"`
	// Instances of the pool.
	// +optional
	Instances []InstanceStatus `json:"instances,omitempty"`
	// Autoscaling is the autoscaler's last decision.
	// +optional
	Autoscaling *AutoscalingStatus `json:"autoscaling,omitempty"`
	// Conditions say why the pool is or is not Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// TidePool is a pool of inference instances kept at its wanted size on spot
// capacity and fronted by one gateway.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=tp
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=`.status.desired`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.ready`
// +kubebuilder:printcolumn:name="Spot",type=integer,JSONPath=`.status.spot`
// +kubebuilder:printcolumn:name="Provider",type=string,JSONPath=`.spec.provider`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type TidePool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   TidePoolSpec   `json:"spec,omitempty"`
	Status TidePoolStatus `json:"status,omitempty"`
}

// TidePoolList is a list of TidePools.
//
// +kubebuilder:object:root=true
type TidePoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TidePool `json:"items"`
}

func init() {
	SchemeBuilder.Register(&TidePool{}, &TidePoolList{})
}

// DesiredReplicas is the number of serving instances the spec asks for:
// Replicas when set, else Minimum, clamped to [Minimum, Maximum].
func (s *TidePoolSpec) DesiredReplicas() int32 {
	d := s.Minimum
	if s.Replicas != nil {
		d = *s.Replicas
	}
	if d < s.Minimum {
		d = s.Minimum
	}
	if d > s.Maximum {
		d = s.Maximum
	}
	return d
}

// InstanceTypes returns the machine types the pool may run on:
// spec.instanceType first, then spec.placement.instanceTypes, each once,
// empty names left out.
func (s *TidePoolSpec) InstanceTypes() []string {
	var out []string
	add := func(t string) {
		if t == "" {
			return
		}
		for _, have := range out {
			if have == t {
				return
			}
		}
		out = append(out, t)
	}
	add(s.InstanceType)
	if s.Placement != nil {
		for _, t := range s.Placement.InstanceTypes {
			add(t)
		}
	}
	return out
}

// Zones returns the zones the pool may run in: spec.placement.
// availabilityZones when set, else spec.availabilityZone, else none (the
// provider's choice).
func (s *TidePoolSpec) Zones() []string {
	if s.Placement != nil && len(s.Placement.AvailabilityZones) > 0 {
		return s.Placement.AvailabilityZones
	}
	if s.AvailabilityZone != "" {
		return []string{s.AvailabilityZone}
	}
	return nil
}

// SubnetFor returns the subnet for instances in zone: its entry in
// spec.placement.subnetIds, else spec.subnetId.
func (s *TidePoolSpec) SubnetFor(zone string) string {
	if s.Placement != nil {
		if id, ok := s.Placement.SubnetIDs[zone]; ok && id != "" {
			return id
		}
	}
	return s.SubnetID
}
