package trafficprofile

import (
	"slices"
	"strings"
)

// The kinds of client.
const (
	// KindControlPlane: kube-controller-manager, kube-scheduler, the API
	// server itself, and the service accounts of kube-system (the
	// controllers of kube-controller-manager with
	// --use-service-account-credentials, the cluster's add-ons).
	KindControlPlane = "control-plane"
	// KindNode: kubelets (system:node:NAME) and kube-proxy.
	KindNode = "node"
	// KindServiceAccount: any other service account.
	KindServiceAccount = "service-account"
	// KindUser: everyone else (people, scripts, CI).
	KindUser = "user"
)

var controlPlaneUsers = []string{
	"system:kube-controller-manager", "system:kube-scheduler", "system:apiserver",
	"system:cloud-controller-manager", "system:volume-scheduler",
}

// Classify names the kind of a client and, for the control plane and
// nodes, the component ("kube-scheduler", "deployment-controller",
// "kubelet").
func Classify(user string, groups []string) (kind, component string) {
	switch {
	case slices.Contains(controlPlaneUsers, user):
		return KindControlPlane, strings.TrimPrefix(user, "system:")
	case strings.HasPrefix(user, "system:node:") || slices.Contains(groups, "system:nodes"):
		return KindNode, "kubelet"
	case user == "system:kube-proxy":
		return KindNode, "kube-proxy"
	case strings.HasPrefix(user, "system:serviceaccount:kube-system:"):
		return KindControlPlane, strings.TrimPrefix(user, "system:serviceaccount:kube-system:")
	case strings.HasPrefix(user, "system:serviceaccount:"):
		return KindServiceAccount, ""
	}
	return KindUser, ""
}

// Exempt says whether a kind of client is the cluster's own, which
// suggested policies never limit: limiting it would make the storm worse
// (controllers falling behind, nodes taken for dead).
func Exempt(kind string) bool { return kind == KindControlPlane || kind == KindNode }
