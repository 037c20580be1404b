//go:build tools

// Package tools records the kubelet of `rampart up --real-nodes`. It is a
// module of its own, not one more import in ../kubernetes, so that adding it
// changed no digest of the control plane's build (hack/assets.sh rebuilds a
// group when its go.mod or go.sum changes).
package tools

import _ "k8s.io/kubernetes/cmd/kubelet"
