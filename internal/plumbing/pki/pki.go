// Package pki issues the certificates Rampart needs: the local cluster's CAs,
// serving and client certificates, and the manager's webhook certificate.
//
// client-go's certutil only makes self-signed certificates; signing by a CA
// with chosen usages is not exported by any well-kept library, so the few
// lines doing it live here.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// KeyPair is a certificate with its private key.
type KeyPair struct {
	Cert *x509.Certificate
	Key  crypto.Signer
}

// CertPEM is the certificate in PEM form.
func (kp *KeyPair) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: kp.Cert.Raw})
}

// KeyPEM is the private key in PEM form.
func (kp *KeyPair) KeyPEM() ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(kp.Key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// Write stores the pair as base+".crt" and base+".key" (mode 0600).
func (kp *KeyPair) Write(base string) error {
	keyPEM, err := kp.KeyPEM()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(base), 0o700); err != nil {
		return err
	}
	if err := writeAtomic(base+".key", keyPEM, 0o600); err != nil {
		return err
	}
	return writeAtomic(base+".crt", kp.CertPEM(), 0o644)
}

// writeAtomic replaces path in one rename, so a reader watching the file
// never sees half a certificate.
func writeAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// Load reads a pair written by Write.
func Load(base string) (*KeyPair, error) {
	certPEM, err := os.ReadFile(base + ".crt")
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(base + ".key")
	if err != nil {
		return nil, err
	}
	return Parse(certPEM, keyPEM)
}

// Parse decodes a PEM certificate and PKCS#8 key.
func Parse(certPEM, keyPEM []byte) (*KeyPair, error) {
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, errors.New("pki: not a PEM certificate and key")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, err
	}
	key, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, err
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, errors.New("pki: key cannot sign")
	}
	return &KeyPair{Cert: cert, Key: signer}, nil
}

// Request describes a certificate to issue.
type Request struct {
	CommonName   string
	Organization []string
	// Hosts are DNS names or IP addresses; they make it a serving cert.
	Hosts []string
	// Client makes it usable for client authentication.
	Client bool
	// CA makes it a certificate authority.
	CA       bool
	Validity time.Duration
	// Now is the issue time; the certificate is valid from a little before
	// it (a minute, or a tenth of a short validity) to absorb clock skew.
	Now time.Time
}

// NewCA issues a self-signed certificate authority.
func NewCA(commonName string, now time.Time, validity time.Duration) (*KeyPair, error) {
	return issue(Request{CommonName: commonName, CA: true, Validity: validity, Now: now}, nil)
}

// Issue signs a certificate for req with this CA.
func (kp *KeyPair) Issue(req Request) (*KeyPair, error) {
	if !kp.Cert.IsCA {
		return nil, errors.New("pki: issuer is not a CA")
	}
	return issue(req, kp)
}

func issue(req Request, parent *KeyPair) (*KeyPair, error) {
	if req.Validity <= 0 {
		return nil, fmt.Errorf("pki: validity %v must be positive", req.Validity)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: req.CommonName, Organization: req.Organization},
		NotBefore:    req.Now.Add(-min(time.Minute, req.Validity/10)),
		NotAfter:     req.Now.Add(req.Validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	if req.CA {
		tmpl.IsCA = true
		tmpl.BasicConstraintsValid = true
		tmpl.KeyUsage |= x509.KeyUsageCertSign | x509.KeyUsageCRLSign
	}
	for _, h := range req.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	if len(req.Hosts) > 0 {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if req.Client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	signerCert, signerKey := tmpl, crypto.Signer(key)
	if parent != nil {
		signerCert, signerKey = parent.Cert, parent.Key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signerCert, key.Public(), signerKey)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &KeyPair{Cert: cert, Key: key}, nil
}
