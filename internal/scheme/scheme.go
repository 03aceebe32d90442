// Package scheme is the Kubernetes API scheme of TideGPU's roles: the
// built-in types and ours (TidePool, AIBalancer). It is its own small
// package so that the data plane (`tidegpu gateway`, which only watches
// TidePool status) links neither the operator nor its engines and clouds.
package scheme

import (
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	tidev1alpha1 "github.com/tidegpu/tidegpu/api/v1alpha1"
)

// New returns a scheme that knows the built-in types and ours.
func New() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(tidev1.AddToScheme(s))
	utilruntime.Must(tidev1alpha1.AddToScheme(s))
	return s
}
