package servingcert

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/rampart-io/rampart/internal/plumbing/pki"
)

func TestRotatorRenewsBeforeExpiry(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := &Rotator{
		Dir: t.TempDir(), Hosts: []string{"127.0.0.1", "rampart-webhook.rampart-system.svc"},
		CAValidity: 90 * time.Hour, CertValidity: 9 * time.Hour,
		Now: func() time.Time { return now },
	}
	bundle, changed, err := r.Ensure(context.Background())
	if err != nil || !changed {
		t.Fatalf("first Ensure: changed=%v err=%v", changed, err)
	}
	first := load(t, r)
	verify(t, bundle, first, now)

	// Within the first two thirds of its life nothing changes.
	now = now.Add(5 * time.Hour)
	if _, changed, err := r.Ensure(context.Background()); err != nil || changed {
		t.Fatalf("Ensure at 5h: changed=%v err=%v", changed, err)
	}

	// Past two thirds the serving certificate is renewed by the same CA.
	now = now.Add(2 * time.Hour)
	bundle2, changed, err := r.Ensure(context.Background())
	if err != nil || !changed {
		t.Fatalf("Ensure at 7h: changed=%v err=%v", changed, err)
	}
	second := load(t, r)
	if second.Cert.SerialNumber.Cmp(first.Cert.SerialNumber) == 0 {
		t.Fatal("serving certificate was not renewed")
	}
	verify(t, bundle2, second, now)

	// Past two thirds of the CA's life the CA is replaced; the bundle keeps
	// the old CA so certificates it signed still verify.
	now = now.Add(55 * time.Hour)
	bundle3, changed, err := r.Ensure(context.Background())
	if err != nil || !changed {
		t.Fatalf("Ensure at 62h: changed=%v err=%v", changed, err)
	}
	third := load(t, r)
	verify(t, bundle3, third, now)
	verify(t, bundle3, second, now.Add(-55*time.Hour+time.Hour))
}

func TestRotatorReissuesForNewHosts(t *testing.T) {
	now := time.Now()
	dir := t.TempDir()
	r := &Rotator{Dir: dir, Hosts: []string{"127.0.0.1"}, Now: func() time.Time { return now }}
	if _, _, err := r.Ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	r.Hosts = []string{"127.0.0.1", "rampart.example"}
	if _, changed, err := r.Ensure(context.Background()); err != nil || !changed {
		t.Fatalf("changed=%v err=%v, want a new certificate for the new host", changed, err)
	}
	if err := load(t, r).Cert.VerifyHostname("rampart.example"); err != nil {
		t.Fatal(err)
	}
}

func load(t *testing.T, r *Rotator) *pki.KeyPair {
	t.Helper()
	kp, err := pki.Load(r.Dir + "/tls")
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

// verify checks the serving certificate against the bundle the API server
// would be given, at time at.
func verify(t *testing.T, bundle []byte, serving *pki.KeyPair, at time.Time) {
	t.Helper()
	verifyHost(t, bundle, serving, at, "127.0.0.1")
}

func verifyHost(t *testing.T, bundle []byte, serving *pki.KeyPair, at time.Time, host string) {
	t.Helper()
	pool := x509.NewCertPool()
	rest := bundle
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		pool.AddCert(c)
	}
	if _, err := serving.Cert.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: at, DNSName: host}); err != nil {
		t.Fatalf("serving certificate does not verify against the bundle: %v", err)
	}
}

// Replicas share the CA through a Secret: whichever stores it first, all
// serve certificates that the one registered bundle trusts.
func TestReplicasShareTheCAThroughASecret(t *testing.T) {
	client := fake.NewClientset()
	store := SecretStore{Client: client, Namespace: "rampart-system", Name: "rampart-webhook-ca"}
	now := time.Now()
	var bundles [][]byte
	var certs []*pki.KeyPair
	for range 3 {
		r := &Rotator{Dir: t.TempDir(), Store: store, Hosts: []string{"rampart-webhook.rampart-system.svc"}, Now: func() time.Time { return now }}
		b, changed, err := r.Ensure(context.Background())
		if err != nil || !changed {
			t.Fatalf("Ensure: changed=%v err=%v", changed, err)
		}
		bundles = append(bundles, b)
		certs = append(certs, load(t, r))
	}
	for i := range certs {
		for j := range bundles {
			verifyHost(t, bundles[j], certs[i], now, "rampart-webhook.rampart-system.svc")
		}
	}
	sec, err := client.CoreV1().Secrets("rampart-system").Get(context.Background(), "rampart-webhook-ca", metav1.GetOptions{})
	if err != nil || len(sec.Data["ca.key"]) == 0 {
		t.Fatalf("CA secret: %v", err)
	}
}

// A replica that finds the stored CA replaced by another reports a change,
// so that it registers the new bundle too.
func TestRotatorNoticesACARotatedElsewhere(t *testing.T) {
	now := time.Now()
	store := SecretStore{Client: fake.NewClientset(), Namespace: "ns", Name: "ca"}
	a := &Rotator{Dir: t.TempDir(), Store: store, Hosts: []string{"h"}, CAValidity: 9 * time.Hour, CertValidity: 3 * time.Hour, Now: func() time.Time { return now }}
	b := &Rotator{Dir: t.TempDir(), Store: store, Hosts: []string{"h"}, CAValidity: 9 * time.Hour, CertValidity: 3 * time.Hour, Now: func() time.Time { return now }}
	for _, r := range []*Rotator{a, b} {
		if _, _, err := r.Ensure(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	now = now.Add(7 * time.Hour) // past two thirds of the CA's life
	if _, changed, err := a.Ensure(context.Background()); err != nil || !changed {
		t.Fatalf("a: changed=%v err=%v", changed, err)
	}
	bundleB, changed, err := b.Ensure(context.Background())
	if err != nil || !changed {
		t.Fatalf("b did not notice the CA a rotated: changed=%v err=%v", changed, err)
	}
	verifyHost(t, bundleB, load(t, a), now, "h")
	verifyHost(t, bundleB, load(t, b), now, "h")
}
