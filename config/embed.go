// Package config holds the manifests controller-gen generates from the API
// types and RBAC markers (crd/, rbac/), embedded so that `rampart up` installs
// exactly what the Helm chart ships.
package config

import "embed"

// Manifests are the CRDs and the manager's RBAC.
//
//go:embed crd/*.yaml rbac/*.yaml
var Manifests embed.FS

// GatewayPolicies are the default TrafficPolicies of `rampart gateway`,
// applied by `rampart up --gateway` (see the file for what they do).
//
//go:embed gateway/default-policies.yaml
var GatewayPolicies []byte
