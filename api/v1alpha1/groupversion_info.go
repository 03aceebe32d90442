// Package v1alpha1 holds the AIBalancer API of the tidegpu.eja.dev group:
// inference-aware balancing (and, later, autoscaling) of a model's backends,
// in the shape of the seed's AIBalancer operator.
//
// +kubebuilder:object:generate=true
// +groupName=tidegpu.eja.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of the AIBalancer API.
	GroupVersion = schema.GroupVersion{Group: "tidegpu.eja.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this package with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
