package manager

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net/http"
	"testing"
)

func TestRefuseCaller(t *testing.T) {
	verified := func(cn string, dns ...string) *tls.ConnectionState {
		return &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{{Subject: pkix.Name{CommonName: cn}, DNSNames: dns}}}}
	}
	for _, c := range []struct {
		name   string
		state  *tls.ConnectionState
		names  []string
		code   int
		reason string
	}{
		{"plain HTTP", nil, nil, http.StatusUnauthorized, refusedNoCertificate},
		{"TLS without a certificate", &tls.ConnectionState{}, nil, http.StatusUnauthorized, refusedNoCertificate},
		{"an unverified certificate", &tls.ConnectionState{PeerCertificates: []*x509.Certificate{{}}}, nil, http.StatusUnauthorized, refusedNoCertificate},
		{"a verified certificate, no names asked", verified("anything"), nil, 0, ""},
		{"the allowed common name", verified("kube-apiserver"), []string{"kube-apiserver"}, 0, ""},
		{"an allowed DNS name", verified("x", "apiserver.example"), []string{"kube-apiserver", "apiserver.example"}, 0, ""},
		{"another name of the CA", verified("rampart-admin"), []string{"kube-apiserver"}, http.StatusForbidden, refusedName},
	} {
		code, reason := refuseCaller(c.state, c.names)
		if code != c.code || reason != c.reason {
			t.Errorf("%s: (%d, %q), want (%d, %q)", c.name, code, reason, c.code, c.reason)
		}
	}
}
