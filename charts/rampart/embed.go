// Package chart is Rampart's Helm chart (this directory), embedded so that
// `rampart up` installs exactly what the chart ships: the CRDs and RBAC that
// controller-gen generates here (`make generate`), and the gateway's default
// TrafficPolicies. Helm ignores this file (.helmignore).
package chart

import "embed"

// Manifests are the CRDs (crds/) and the manager's RBAC (files/rbac/).
//
//go:embed crds/*.yaml files/rbac/*.yaml
var Manifests embed.FS

// GatewayPolicies are the default TrafficPolicies of `rampart gateway`,
// installed by the chart with the gateway and applied by `rampart up
// --gateway` (see the file for what they do).
//
//go:embed files/gateway-policies.yaml
var GatewayPolicies []byte

// Alerts are Prometheus alert rules for Rampart's metrics, the chart's
// PrometheusRule.
//
//go:embed files/alerts.yaml
var Alerts []byte
