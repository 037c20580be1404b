package admission_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
)

// Hostile bodies posted straight to the manager's webhook port, with the
// client certificate the API server presents (the webhook refuses any
// other): malformed, truncated, huge and deeply nested reviews, and a
// DELETE of a protected object with its oldObject missing. Each answer is
// an error or a denial, never an allow of the protected object; after
// each the server answers a normal review, and the API server's own calls
// still reach it (a protected Deployment stays undeletable).
func TestHostileReviewsAreRefusedAndTheWebhookStaysHealthy(t *testing.T) {
	env := clustertest.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	d := newDeployment("guarded", 1, map[string]string{protectionLabel: "Always"})
	if _, err := env.Client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	caller := webhookCaller(t, env, apiServerWebhookCert(t, env))
	caller.Timeout = 60 * time.Second
	url := env.WebhookURL() + rampartadmission.DeletionPath

	live, err := env.Client.AppsV1().Deployments(ns).Get(ctx, "guarded", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	normal := deploymentDeleteReview(t, live, "")
	noOld := deploymentDeleteReview(t, live, "omit")
	nullOld := deploymentDeleteReview(t, live, "null")
	nested := func(open, close string, depth int) []byte {
		return []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"n","operation":"DELETE","oldObject":` +
			strings.Repeat(open, depth) + strings.Repeat(close, depth) + `}}`)
	}
	huge := append(append([]byte(nil), normal[:len(normal)-2]...), []byte(`,"padding":"`+strings.Repeat("x", 40<<20)+`"}}`)...)
	bodies := []struct {
		name string
		body []byte
		// noUID: the body names no request, and controller-runtime
		// answers it with an empty allow of no UID, which the API server
		// refuses as the answer to any request it sent.
		noUID bool
	}{
		{"empty", nil, false},
		{"not JSON", []byte("\x00\xff<?xml version='1.0'?><review/>"), false},
		{"a JSON array", []byte(`[1,2,3]`), false},
		{"truncated in half", normal[:len(normal)/2], false},
		{"truncated by one byte", normal[:len(normal)-1], false},
		{"no request", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`), true},
		{"DELETE of the protected object without oldObject", noOld, false},
		{"DELETE of the protected object with oldObject null", nullOld, false},
		{"40 MB", huge, false},
		{"objects nested 100,000 deep", nested(`{"a":`, `}`, 100_000), false},
		{"arrays nested 1,000,000 deep", nested(`[`, `]`, 1_000_000), false},
	}
	for _, b := range bodies {
		t.Run(b.name, func(t *testing.T) {
			code, resp, detail := post(caller, url, b.body)
			if code == 0 {
				t.Fatalf("no answer: %s", detail)
			}
			if resp != nil && resp.Allowed && (!b.noUID || resp.UID != "") {
				t.Fatalf("allowed (HTTP %d): %.300s", code, detail)
			}
			t.Logf("HTTP %d: %.200s", code, detail)
			// The server is still healthy: a normal review is answered,
			// and denied.
			code, resp, detail = post(caller, url, normal)
			if code != http.StatusOK || resp == nil || resp.Allowed || !strings.Contains(resp.Result.Message, "rampart.io/protection=Always") {
				t.Fatalf("a normal review after it got HTTP %d: %.300s", code, detail)
			}
		})
	}
	err = env.Client.AppsV1().Deployments(ns).Delete(ctx, "guarded", metav1.DeleteOptions{})
	mustForbid(t, err, "rampart.io/protection=Always")
}

// deploymentDeleteReview is the API server's DELETE review of d; old
// "omit" leaves oldObject out, "null" sends it as null.
func deploymentDeleteReview(t *testing.T, d *appsv1.Deployment, old string) []byte {
	t.Helper()
	d = d.DeepCopy()
	d.APIVersion, d.Kind = "apps/v1", "Deployment"
	data, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	obj := string(data)
	switch old {
	case "omit":
		obj = ""
	case "null":
		obj = "null"
	}
	body := seedReview("DELETE", metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"},
		metav1.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, "", d.Namespace, d.Name, "", obj,
		`{"kind":"DeleteOptions","apiVersion":"meta.k8s.io/v1","propagationPolicy":"Background"}`)
	if old == "null" {
		body = bytes.Replace(body, []byte(`"options":`), []byte(`"oldObject":null,"options":`), 1)
	}
	return body
}
