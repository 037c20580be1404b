// Package servingcert keeps the manager's webhook serving certificate valid
// when no certificate is supplied: it makes a CA and a serving certificate in
// a directory, renews either before it expires, and reports the CA bundle
// the API server must trust. controller-runtime's webhook server reloads the
// files on change (certwatcher), so a renewal needs no restart.
package servingcert

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/go-logr/logr"

	"github.com/rampart-io/rampart/internal/pki"
)

// File names in Dir. tls.crt and tls.key are controller-runtime's defaults.
const (
	caBase       = "ca"
	previousCA   = "ca-previous.crt"
	servingBase  = "tls"
	defaultCAAge = 365 * 24 * time.Hour
	defaultAge   = 30 * 24 * time.Hour
)

// Rotator owns the certificates in Dir.
type Rotator struct {
	// Dir holds ca.crt/ca.key, ca-previous.crt, tls.crt/tls.key.
	Dir string
	// Hosts are the names and IPs the serving certificate is valid for.
	Hosts []string
	// CAValidity and CertValidity default to a year and 30 days.
	CAValidity, CertValidity time.Duration
	// OnRotate is called with the new CA bundle after a change; the caller
	// re-registers its webhooks with it.
	OnRotate func(ctx context.Context, caBundle []byte) error
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	Log logr.Logger
}

func (r *Rotator) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func (r *Rotator) validity() (ca, cert time.Duration) {
	ca, cert = r.CAValidity, r.CertValidity
	if ca <= 0 {
		ca = defaultCAAge
	}
	if cert <= 0 {
		cert = defaultAge
	}
	return ca, min(cert, ca)
}

// due reports whether a certificate has used two thirds of its life.
func due(c *x509.Certificate, now time.Time) bool {
	life := c.NotAfter.Sub(c.NotBefore)
	return now.After(c.NotAfter.Add(-life / 3))
}

// Ensure makes the files valid for now and returns the CA bundle to
// register, and whether anything changed.
func (r *Rotator) Ensure() (caBundle []byte, changed bool, err error) {
	now := r.now()
	caAge, certAge := r.validity()
	if err := os.MkdirAll(r.Dir, 0o700); err != nil {
		return nil, false, err
	}
	ca, err := pki.Load(filepath.Join(r.Dir, caBase))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		r.Log.Info("replacing unreadable webhook CA", "error", err.Error())
	}
	if ca == nil || due(ca.Cert, now) {
		if ca != nil {
			// The old CA stays trusted until it expires, so serving
			// certificates it signed keep working during the change.
			if err := os.WriteFile(filepath.Join(r.Dir, previousCA), ca.CertPEM(), 0o644); err != nil {
				return nil, false, err
			}
		}
		if ca, err = pki.NewCA("rampart-webhook-ca", now, caAge); err != nil {
			return nil, false, err
		}
		if err := ca.Write(filepath.Join(r.Dir, caBase)); err != nil {
			return nil, false, err
		}
		changed = true
	}
	serving, err := pki.Load(filepath.Join(r.Dir, servingBase))
	if changed || err != nil || due(serving.Cert, now) || serving.Cert.CheckSignatureFrom(ca.Cert) != nil || !covers(serving.Cert, r.Hosts) {
		serving, err = ca.Issue(pki.Request{CommonName: r.Hosts[0], Hosts: r.Hosts, Now: now, Validity: certAge})
		if err != nil {
			return nil, false, err
		}
		if err := serving.Write(filepath.Join(r.Dir, servingBase)); err != nil {
			return nil, false, err
		}
		changed = true
	}
	return r.bundle(ca, now), changed, nil
}

func covers(c *x509.Certificate, hosts []string) bool {
	have := slices.Clone(c.DNSNames)
	for _, ip := range c.IPAddresses {
		have = append(have, ip.String())
	}
	for _, h := range hosts {
		if !slices.Contains(have, h) {
			return false
		}
	}
	return true
}

// bundle is the current CA plus the previous one while it is still valid.
func (r *Rotator) bundle(ca *pki.KeyPair, now time.Time) []byte {
	out := bytes.Clone(ca.CertPEM())
	prev, err := os.ReadFile(filepath.Join(r.Dir, previousCA))
	if err != nil {
		return out
	}
	if b, _ := pem.Decode(prev); b != nil {
		if c, err := x509.ParseCertificate(b.Bytes); err == nil && now.Before(c.NotAfter) {
			out = append(out, prev...)
		}
	}
	return out
}

// Start checks the certificates periodically until ctx ends, calling
// OnRotate after each change. It is a controller-runtime Runnable.
func (r *Rotator) Start(ctx context.Context) error {
	_, certAge := r.validity()
	// Checking ten times per certificate lifetime renews well inside the
	// last third.
	interval := min(max(certAge/10, time.Second), time.Hour)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		bundle, changed, err := r.Ensure()
		if err != nil {
			r.Log.Error(err, "renewing webhook certificate")
			continue
		}
		if !changed || r.OnRotate == nil {
			continue
		}
		r.Log.Info("webhook certificate renewed")
		if err := r.OnRotate(ctx, bundle); err != nil {
			r.Log.Error(err, "registering renewed CA bundle")
		}
	}
}

// NeedLeaderElection is false: every replica serves webhooks with its own
// certificate files.
func (r *Rotator) NeedLeaderElection() bool { return false }

// String helps logs.
func (r *Rotator) String() string { return fmt.Sprintf("servingcert(%s)", r.Dir) }
