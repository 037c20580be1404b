package gateway_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
