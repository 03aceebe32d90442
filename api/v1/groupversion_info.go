// Package v1 holds the TidePool API of the tidegpu.eja.dev group: the wanted
// shape of a pool of inference instances and what was last observed of it.
// The same types are read from YAML by `tidegpu up` and served as a CRD by
// `tidegpu operator`.
//
// +kubebuilder:object:generate=true
// +groupName=tidegpu.eja.dev
package v1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of the TidePool API.
	GroupVersion = schema.GroupVersion{Group: "tidegpu.eja.dev", Version: "v1"}

	// SchemeBuilder registers the types of this package with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
