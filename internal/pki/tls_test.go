package pki

import (
	"crypto/tls"
	"strings"
	"testing"
)

func TestRecommendedCipherSuitesAreAEADOnly(t *testing.T) {
	ids := RecommendedCipherSuites()
	if len(ids) != len(recommendedCipherNames) {
		t.Fatalf("%d suites for %d names", len(ids), len(recommendedCipherNames))
	}
	insecure := map[uint16]bool{}
	for _, s := range tls.InsecureCipherSuites() {
		insecure[s.ID] = true
	}
	for _, id := range ids {
		name := tls.CipherSuiteName(id)
		if insecure[id] || strings.Contains(name, "CBC") || strings.HasSuffix(name, "_SHA") || !strings.HasPrefix(name, "TLS_ECDHE_") {
			t.Errorf("%s is not an ECDHE AEAD suite", name)
		}
	}
	c := HardenServerTLS(&tls.Config{})
	if c.MinVersion != tls.VersionTLS12 {
		t.Errorf("MinVersion %x, want TLS 1.2", c.MinVersion)
	}
}
