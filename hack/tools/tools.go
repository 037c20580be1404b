//go:build tools

// Package tools records the generators `make generate` runs.
package tools

import _ "sigs.k8s.io/controller-tools/cmd/controller-gen"
