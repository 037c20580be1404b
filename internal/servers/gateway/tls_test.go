package gateway

import (
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"testing"
	"time"

	"github.com/rampart-io/rampart/internal/plumbing/pki"
)

// The gateway's client-facing TLS takes only the cipher suites Kubernetes
// recommends (issue 24): a client offering nothing but CBC with SHA-1 (or
// TLS below 1.2) cannot connect; a current client can.
func TestGatewayRefusesCBCSHA1AndOldTLS(t *testing.T) {
	ca, err := pki.NewCA("tls-test-ca", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	serving, err := ca.Issue(pki.Request{CommonName: "gw", Hosts: []string{"127.0.0.1"}, Now: time.Now(), Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := serving.Write(dir + "/gw"); err != nil {
		t.Fatal(err)
	}
	addr := startGateway(t, ca, fakeAPIServer(t, ca).URL, Options{Log: slog.New(slog.DiscardHandler), CertFile: dir + "/gw.crt", KeyFile: dir + "/gw.key"}, nil)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM())
	dial := func(c *tls.Config) error {
		c.RootCAs, c.ServerName = roots, "127.0.0.1"
		conn, err := tls.Dial("tcp", addr, c)
		if err == nil {
			_ = conn.Close()
		}
		return err
	}
	if err := dial(&tls.Config{}); err != nil {
		t.Fatalf("a current client cannot connect: %v", err)
	}
	if err := dial(&tls.Config{MaxVersion: tls.VersionTLS12}); err != nil {
		t.Fatalf("a TLS 1.2 client with the default suites cannot connect: %v", err)
	}
	cbcSHA1 := []uint16{
		tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA,
		tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA,
		tls.TLS_RSA_WITH_AES_128_CBC_SHA, tls.TLS_RSA_WITH_AES_256_CBC_SHA,
	}
	if err := dial(&tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: cbcSHA1}); err == nil {
		t.Error("a client offering only CBC-SHA1 suites connected; want a handshake failure")
	}
	if err := dial(&tls.Config{MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11}); err == nil {
		t.Error("a TLS 1.1 client connected; want a handshake failure")
	}
}
