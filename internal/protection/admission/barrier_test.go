package admission

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// servers answers probes like an API server that has (denies) or has not
// (admits the dry run) loaded the configuration.
func servers(loaded ...bool) func(context.Context) ([]kubernetes.Interface, error) {
	var out []kubernetes.Interface
	for _, l := range loaded {
		cs := fake.NewClientset()
		cs.PrependReactor("create", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
			if l {
				return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "rampart-probe-t",
					errors.New(`admission webhook "r1.probe.rampart.io" denied the request: `+ProbeDenial))
			}
			return false, nil, nil
		})
		out = append(out, cs)
	}
	return func(context.Context) ([]kubernetes.Interface, error) { return out, nil }
}

func TestBarrierWaitsForEveryAPIServer(t *testing.T) {
	b := Barrier{Servers: servers(true, true), Namespace: "rampart-system", Timeout: time.Second}
	if err := b.Wait(context.Background(), "t"); err != nil {
		t.Fatalf("both API servers deny the probe: %v", err)
	}
	b.Servers, b.Timeout = servers(true, false), 100*time.Millisecond
	err := b.Wait(context.Background(), "t")
	if !errors.Is(err, ErrNotLoaded) {
		t.Fatalf("one API server has not loaded it: err = %v, want ErrNotLoaded", err)
	}
	resp := NotLoadedStatus("ProtectionPolicy p", err)
	if resp.Allowed || resp.Result.Code != 503 || !strings.Contains(resp.Result.Message, "ProtectionPolicy p is not in force yet") ||
		!strings.Contains(resp.Result.Message, "retry in a few seconds") {
		t.Errorf("answer = %+v", resp.Result)
	}
}
