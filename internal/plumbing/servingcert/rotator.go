// Package servingcert keeps the manager's webhook serving certificate valid
// when no certificate is supplied: it keeps a CA where every replica finds it
// (a Secret, or a directory for a single manager), issues each replica a
// serving certificate in its own directory, renews either before it
// expires, and reports the CA bundle the API server must trust.
// controller-runtime's webhook server reloads the files on change
// (certwatcher), so a renewal needs no restart.
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

	"github.com/rampart-io/rampart/internal/plumbing/pki"
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
	// Dir holds this replica's tls.crt and tls.key.
	Dir string
	// Store keeps the CA; nil means DirStore{Dir}.
	Store CAStore
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

	// lastCA is the serial of the CA last reported, to notice a CA another
	// replica rotated.
	lastCA string
}

func (r *Rotator) store() CAStore {
	if r.Store != nil {
		return r.Store
	}
	return DirStore{Dir: r.Dir}
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

// Ensure makes the CA and this replica's certificate valid for now and
// returns the CA bundle to register, and whether it or the certificate
// changed.
func (r *Rotator) Ensure(ctx context.Context) (caBundle []byte, changed bool, err error) {
	now := r.now()
	caAge, certAge := r.validity()
	if err := os.MkdirAll(r.Dir, 0o700); err != nil {
		return nil, false, err
	}
	ca, err := r.store().Load(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("load webhook CA: %w", err)
	}
	if ca == nil || ca.Current == nil || due(ca.Current.Cert, now) {
		next := &CA{}
		if ca != nil && ca.Current != nil {
			next.Previous = ca.Current.CertPEM()
		}
		if next.Current, err = pki.NewCA("rampart-webhook-ca", now, caAge); err != nil {
			return nil, false, err
		}
		switch err := r.store().Save(ctx, next, ca); {
		case errors.Is(err, ErrConflict):
			// Another replica stored a CA first: use that one.
			if ca, err = r.store().Load(ctx); err != nil || ca == nil || ca.Current == nil {
				return nil, false, fmt.Errorf("load webhook CA after a concurrent rotation: %v", err)
			}
		case err != nil:
			return nil, false, fmt.Errorf("store webhook CA: %w", err)
		default:
			ca = next
		}
	}
	if serial := ca.Current.Cert.SerialNumber.String(); serial != r.lastCA {
		r.lastCA, changed = serial, true
	}
	serving, err := pki.Load(filepath.Join(r.Dir, servingBase))
	if err != nil || due(serving.Cert, now) || serving.Cert.CheckSignatureFrom(ca.Current.Cert) != nil || !covers(serving.Cert, r.Hosts) {
		serving, err = ca.Current.Issue(pki.Request{CommonName: r.Hosts[0], Hosts: r.Hosts, Now: now, Validity: certAge})
		if err != nil {
			return nil, false, err
		}
		if err := serving.Write(filepath.Join(r.Dir, servingBase)); err != nil {
			return nil, false, err
		}
		changed = true
	}
	return bundle(ca, now), changed, nil
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
func bundle(ca *CA, now time.Time) []byte {
	out := bytes.Clone(ca.Current.CertPEM())
	if b, _ := pem.Decode(ca.Previous); b != nil {
		if c, err := x509.ParseCertificate(b.Bytes); err == nil && now.Before(c.NotAfter) {
			out = append(out, ca.Previous...)
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
		bundle, changed, err := r.Ensure(ctx)
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
