// Package installation says how this Rampart was installed — by the Helm
// chart, by `rampart up`, or by hand — so that a message naming a setting
// names the one its reader can change: a chart value in a cluster the
// chart installed, a `rampart up` flag on a local cluster, the component's
// own flag (or RBAC) otherwise.
package installation

import "fmt"

// Method is how a component was installed: its --installed-by flag.
type Method string

const (
	// ByHand is a component someone runs with flags of their own: the
	// default, and what a message falls back to.
	ByHand Method = ""
	// Helm is the chart (charts/rampart) in a cluster.
	Helm Method = "helm"
	// Up is the local cluster `rampart up` starts.
	Up Method = "rampart-up"
)

// Parse checks a value of --installed-by.
func Parse(s string) (Method, error) {
	switch m := Method(s); m {
	case ByHand, Helm, Up:
		return m, nil
	}
	return "", fmt.Errorf("--installed-by %q: want %q (the chart), %q (rampart up) or empty (by hand)", s, Helm, Up)
}

// Setting is one way out, as each installation spells it.
type Setting struct {
	// Helm is the chart value to set, e.g. "add G to the chart's
	// manager.customResourceGroups".
	Helm string
	// Up is the `rampart up` flag, e.g. "start the cluster with rampart
	// up --custom-resource-groups G".
	Up string
	// ByHand is the component's own flag or the right to grant.
	ByHand string
}

// Say is the way out s names where m installed Rampart.
func (m Method) Say(s Setting) string {
	switch m {
	case Helm:
		return s.Helm
	case Up:
		return s.Up
	}
	return s.ByHand
}
