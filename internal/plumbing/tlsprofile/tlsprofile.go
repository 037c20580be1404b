// Package tlsprofile is the TLS policy of Rampart's servers: TLS 1.2 or
// newer, and on TLS 1.2 only the ECDHE suites with AEAD ciphers that the
// CIS Kubernetes Benchmark recommends for kube-apiserver's
// --tls-cipher-suites. Go's defaults still accept CBC suites with SHA-1
// MACs (TLS_ECDHE_*_WITH_AES_*_CBC_SHA), which those recommendations
// exclude. TLS 1.3 suites are all AEAD and not configurable in Go.
package tlsprofile

import (
	"crypto/tls"

	cliflag "k8s.io/component-base/cli/flag"
)

// CipherSuiteNames are the TLS 1.2 suites a Rampart server accepts, by
// their IANA names (as kube-apiserver's --tls-cipher-suites takes them).
var CipherSuiteNames = []string{
	"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
	"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
	"TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
	"TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
	"TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
	"TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
}

// cipherSuites are CipherSuiteNames as crypto/tls IDs, mapped by the same
// table kube-apiserver's flag uses.
var cipherSuites = func() []uint16 {
	ids, err := cliflag.TLSCipherSuites(CipherSuiteNames)
	if err != nil {
		panic("tlsprofile: " + err.Error()) // a typo above; caught by the package's tests
	}
	return ids
}()

// Apply sets the minimum version and the suites on a server's config. It
// has the signature of controller-runtime's TLSOpts.
func Apply(c *tls.Config) {
	c.MinVersion = tls.VersionTLS12
	c.CipherSuites = cipherSuites
}
