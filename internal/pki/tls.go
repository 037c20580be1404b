package pki

import (
	"crypto/tls"
	"fmt"

	cliflag "k8s.io/component-base/cli/flag"
)

// recommendedCipherNames are the TLS 1.2 cipher suites the Kubernetes
// hardening guides (kubeadm's and the CIS benchmark's --tls-cipher-suites
// for kube-apiserver and kubelet) recommend: ECDHE key exchange with an
// AEAD cipher. Go's defaults also accept CBC with SHA-1, which these
// leave out. TLS 1.3's suites are all AEAD and not configurable in Go.
var recommendedCipherNames = []string{
	"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
	"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
	"TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
	"TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
	"TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305",
	"TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
}

// RecommendedCipherSuites are recommendedCipherNames as crypto/tls IDs,
// read by the parser of kube-apiserver's own --tls-cipher-suites flag.
func RecommendedCipherSuites() []uint16 {
	ids, err := cliflag.TLSCipherSuites(recommendedCipherNames)
	if err != nil {
		panic(fmt.Sprintf("pki: a recommended cipher suite is unknown to this Go: %v", err)) // a programming error, caught by tests
	}
	return ids
}

// HardenServerTLS makes c, a server's TLS configuration, accept what
// Kubernetes recommends and nothing weaker: TLS 1.2 or later, and with
// TLS 1.2 only RecommendedCipherSuites. It returns c.
func HardenServerTLS(c *tls.Config) *tls.Config {
	c.MinVersion = tls.VersionTLS12
	c.CipherSuites = RecommendedCipherSuites()
	return c
}
