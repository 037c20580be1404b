package gateway_test

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
	"github.com/rampart-io/rampart/internal/servers/gateway"
)

// countedGroup is the custom-resource group this package's cluster lets
// the gateway count (`rampart up --gateway-count-custom-resource-groups`).
const countedGroup = "counted.rampart-test.example.com"

// TestUpGrantsTheGatewayItsCountedGroupsOnly: the local gateway is started
// with the groups it may count, and granted list and watch on them, as the
// chart does with gateway.countCustomResourceGroups — and on no other
// custom-resource group.
func TestUpGrantsTheGatewayItsCountedGroupsOnly(t *testing.T) {
	env := clustertest.Get(t)
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(env.PID(localcluster.GatewayName)) + "/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	if want := "--count-custom-resource-groups=" + countedGroup; !strings.Contains(string(cmdline), want) {
		t.Errorf("rampart gateway runs with %q, want it to include %s", strings.ReplaceAll(string(cmdline), "\x00", " "), want)
	}
	for group, want := range map[string]bool{countedGroup: true, "other.rampart-test.example.com": false} {
		for _, verb := range []string{"list", "watch"} {
			r, err := env.Client.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: gateway.RoleName, Groups: []string{"system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Group: group, Resource: "widgets"}}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if r.Status.Allowed != want {
				t.Errorf("the gateway's identity may %s widgets.%s: %v, want %v", verb, group, r.Status.Allowed, want)
			}
		}
	}
}

// TestCountedGroupsAreWhatTheAPIServerServes: CountedGroups and
// CountedCoreResources name every built-in group and core resource the
// pinned kube-apiserver serves with list and watch (but Secrets), so that moving the
// pin to a Kubernetes that serves a new group fails here instead of
// leaving the gateway's LIST guard blind to it.
func TestCountedGroupsAreWhatTheAPIServerServes(t *testing.T) {
	env := clustertest.Get(t)
	crds, err := env.Dynamic.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}).
		List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	custom := map[string]bool{}
	for _, crd := range crds.Items {
		group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
		custom[group] = group != "rampart.io"
	}
	_, lists, err := env.Client.Discovery().ServerGroupsAndResources()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			t.Fatal(err)
		}
		if custom[gv.Group] {
			continue
		}
		for _, r := range l.APIResources {
			if strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "list") || !slices.Contains(r.Verbs, "watch") {
				continue
			}
			switch {
			case gv.Group == "" && r.Name == "secrets":
			case gv.Group == "" && !slices.Contains(gateway.CountedCoreResources, r.Name):
				t.Errorf("kube-apiserver serves the core resource %s with list and watch; CountedCoreResources lacks it", r.Name)
			case gv.Group != "" && !slices.Contains(gateway.CountedGroups, gv.Group):
				t.Errorf("kube-apiserver serves %s.%s with list and watch; CountedGroups lacks %s", r.Name, gv.Group, gv.Group)
			}
		}
	}
}
