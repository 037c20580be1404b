package admission_test

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/rampart-io/rampart/internal/localcluster/clustertest"
)

// The PodUnavailableBudget API (issue #4, started): the API server rejects
// malformed budgets. Admission by budgets is not implemented yet.
func TestMalformedBudgetsAreRejected(t *testing.T) {
	env := clustertest.Get(t)
	ns := env.Namespace(t)
	budgets := env.Dynamic.Resource(schema.GroupVersionResource{Group: "rampart.io", Version: "v1alpha1", Resource: "podunavailablebudgets"}).Namespace(ns)
	create := func(spec string) error {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte("apiVersion: rampart.io/v1alpha1\nkind: PodUnavailableBudget\nmetadata: {generateName: b-}\nspec: "+spec), &u.Object); err != nil {
			t.Fatal(err)
		}
		_, err := budgets.Create(context.Background(), u, metav1.CreateOptions{})
		return err
	}
	for _, ok := range []string{`{selector: {matchLabels: {app: web}}, maxUnavailable: "25%"}`, `{targetRef: {apiVersion: apps/v1, kind: Deployment, name: web}, minAvailable: 2}`} {
		if err := create(ok); err != nil {
			t.Errorf("valid budget %s rejected: %v", ok, err)
		}
	}
	for spec, want := range map[string]string{
		`{maxUnavailable: 1}`: "set exactly one of selector and targetRef",
		`{selector: {}, targetRef: {apiVersion: apps/v1, kind: Deployment, name: w}, maxUnavailable: 1}`: "set exactly one of selector and targetRef",
		`{selector: {}, maxUnavailable: 1, minAvailable: 1}`:                                             "set exactly one of maxUnavailable and minAvailable",
		`{selector: {}, maxUnavailable: "125%"}`:                                                         "a percentage from 0% to 100%",
		`{selector: {}, maxUnavailable: -1}`:                                                             "a count of 0 or more",
		`{selector: {}, maxUnavailable: 1, protectOperations: [Restart]}`:                                `Unsupported value: "Restart"`,
	} {
		if err := create(spec); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), want) {
			t.Errorf("budget %s: err = %v, want Invalid naming %q", spec, err, want)
		}
	}
}
