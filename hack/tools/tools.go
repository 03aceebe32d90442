//go:build tools

// Package tools pins the commands built by hack/envtest.sh so that
// `go mod tidy` keeps their dependencies in this module's go.mod/go.sum.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
)
