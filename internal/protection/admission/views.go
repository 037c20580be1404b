package admission

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/clock"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/protection/budget"
	"github.com/rampart-io/rampart/internal/protection/compiled"
)

// What the pods' protections read of the cluster (Deps: Pods, Nodes,
// Owners, Scales), and the clock their handlers default to.

// PodLabels reads a cached pod's labels (for evictions, whose requests
// carry no pod).
type PodLabels interface {
	PodLabels(namespace, name string) (map[string]string, bool)
}

// NodeHealth says whether a node can run pods now.
type NodeHealth interface {
	// NodeUnavailable says why a node cannot run pods now ("NotReady",
	// "unreachable"), "" for a Ready node or one not seen.
	NodeUnavailable(name string) string
	// NodeCount counts the cluster's nodes, and those NotReady.
	NodeCount() budget.NodeCount
	// Nodes are the cached nodes sel selects (their labels, spec's
	// unschedulable and taints, and Ready condition; read-only).
	Nodes(sel labels.Selector) []*corev1.Node
	// NodeLabels are a node's labels (read-only), nil for a node not seen.
	NodeLabels(name string) map[string]string
}

// OwnerView says from the cache whether an owner is alive (see
// clusterview.Budgets.OwnerAlive).
type OwnerView interface {
	OwnerAlive(ns string, ref metav1.OwnerReference) (alive, known bool)
	// Surplus says from the cache whether pod is one its controller is
	// removing to scale down (see clusterview.Budgets.Surplus).
	Surplus(ns string, ref metav1.OwnerReference, pod string) bool
}

// Scales reads workloads' scale subresources, for any kind that has one
// (custom workloads included).
type Scales struct {
	Dynamic dynamic.Interface
	Mapper  meta.RESTMapper
}

// Scale is a targetRef's pod selector and desired replicas.
func (s Scales) Scale(ctx context.Context, ns string, t *v1alpha1.TargetReference) (string, int32, error) {
	gv, err := schema.ParseGroupVersion(t.APIVersion)
	if err != nil {
		return "", 0, fmt.Errorf("targetRef.apiVersion: %w", err)
	}
	m, err := s.Mapper.RESTMapping(gv.WithKind(t.Kind).GroupKind(), gv.Version)
	if err != nil {
		return "", 0, fmt.Errorf("targetRef %s %s: %w", t.APIVersion, t.Kind, err)
	}
	u, err := s.Dynamic.Resource(m.Resource).Namespace(ns).Get(ctx, t.Name, metav1.GetOptions{}, "scale")
	if err != nil {
		if apierrors.IsNotFound(err) {
			return "", 0, err
		}
		return "", 0, fmt.Errorf("targetRef %s/%s: reading its scale subresource: %w", t.Kind, t.Name, err)
	}
	var sc autoscalingv1.Scale
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &sc); err != nil {
		return "", 0, err
	}
	if sc.Status.Selector == "" {
		return "", 0, fmt.Errorf("targetRef %s/%s has no pod selector in its scale subresource", t.Kind, t.Name)
	}
	return sc.Status.Selector, sc.Spec.Replicas, nil
}

// TargetSelector is the pod selector of a targetRef (the budget
// handler's TargetSelector).
func (s Scales) TargetSelector(ctx context.Context, ns string, t *v1alpha1.TargetReference) (string, error) {
	sel, _, err := s.Scale(ctx, ns, t)
	return sel, err
}

// ClockOrReal is c, or the real clock when c is nil.
func ClockOrReal(c clock.PassiveClock) clock.PassiveClock {
	if c == nil {
		return clock.RealClock{}
	}
	return c
}

// StaticRules say how a ProtectionPolicy's static rules stand, for its
// Ready condition (internal/protection/policy/admit).
type StaticRules struct {
	// Names are the compiled policies the manager keeps for it (none when
	// compiling is off or the policy has no static rule).
	Names []string
	// InForce: every API server enforces them as they are now.
	InForce bool
	// Left are its static rules left to the webhooks, and why.
	Left []compiled.Left
}

// CompiledPolicies says how a ProtectionPolicy's static rules stand
// (registrar.Compiled).
type CompiledPolicies interface {
	PolicyState(context.Context, *v1alpha1.ProtectionPolicy) (StaticRules, error)
}
