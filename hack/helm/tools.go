//go:build tools

// Package tools pins the helm CLI as a dependency of this module.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
