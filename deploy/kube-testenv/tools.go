//go:build tools

// Package tools names the binaries build-apiserver.sh builds, so `go mod tidy`
// keeps their dependencies in go.sum.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
)
