package tlsprofile_test

import (
	"crypto/tls"
	"net"
	"testing"
	"time"

	"github.com/rampart-io/rampart/internal/plumbing/pki"
	"github.com/rampart-io/rampart/internal/plumbing/tlsprofile"
)

// handshake runs a TLS handshake between a server configured by
// tlsprofile.Apply and a client offering only suite at TLS 1.2 (or any
// suite at TLS 1.3 when suite is 0).
func handshake(t *testing.T, suite uint16) error {
	t.Helper()
	ca, err := pki.NewCA("test-ca", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := ca.Issue(pki.Request{CommonName: "server", Hosts: []string{"127.0.0.1"}, Now: time.Now(), Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	server := &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{kp.Cert.Raw}, PrivateKey: kp.Key}}}
	tlsprofile.Apply(server)
	client := &tls.Config{InsecureSkipVerify: true} //nolint:gosec // only the suite matters here
	if suite != 0 {
		client.MaxVersion, client.CipherSuites = tls.VersionTLS12, []uint16{suite}
	}
	c1, c2 := net.Pipe()
	defer c1.Close()
	defer c2.Close()
	srvErr := make(chan error, 1)
	go func() { srvErr <- tls.Server(c1, server).Handshake(); c1.Close() }()
	err = tls.Client(c2, client).Handshake()
	if serr := <-srvErr; err == nil {
		err = serr
	}
	return err
}

func TestCBCSHA1SuitesAreRefused(t *testing.T) {
	for _, s := range []uint16{
		tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA,
		tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256,
	} {
		if err := handshake(t, s); err == nil {
			t.Errorf("a client offering only %s completed a handshake", tls.CipherSuiteName(s))
		}
	}
}

func TestRecommendedSuitesAndTLS13Pass(t *testing.T) {
	for _, s := range []uint16{0, tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256} {
		if err := handshake(t, s); err != nil {
			t.Errorf("suite %s: %v", tls.CipherSuiteName(s), err)
		}
	}
}
