package manager

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/rampart-io/rampart/internal/plumbing/tlsprofile"
)

// Only the API server may call the webhooks: a review changes state (a
// budget or a flow control consumed, a breaker tripped, an Event and a
// status entry written), so a forged one is an attack on that state. The
// API server presents a client certificate to webhooks when its admission
// configuration names one (kube-apiserver --admission-control-config-file,
// WebhookAdmissionConfiguration.kubeConfigFile); the webhook server
// verifies it against WebhookClientCA.
//
// The TLS layer verifies a certificate when one is offered (a certificate
// of another CA fails the handshake) and the HTTP layer refuses a request
// without one, with 401 and a reason, as kube-apiserver's own
// authentication does: a handshake that demands a certificate would also
// refuse the manager's readiness probe of its own TLS port.

// refusedReviews counts calls to the webhooks refused before any review
// was read, by reason (two values).
var refusedReviews = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "rampart_webhook_refused_requests_total",
	Help: "Calls to Rampart's webhooks refused because the caller is not the API server: no client certificate of the configured CA, or a name not allowed.",
}, []string{"reason"})

func init() {
	metrics.Registry.MustRegister(refusedReviews)
}

const (
	refusedNoCertificate = "no client certificate"
	refusedName          = "client name not allowed"
)

// webhookClientAuth is the webhook server's TLS options and the wrapper of
// every webhook handler. Without a client CA every caller is served, and
// the manager says so once at start.
func webhookClientAuth(o Options, log logr.Logger) ([]func(*tls.Config), func(http.Handler) http.Handler, error) {
	tlsOpts := []func(*tls.Config){tlsprofile.Apply}
	if o.WebhookClientCA == "" {
		if len(o.WebhookClientNames) > 0 {
			return nil, nil, errors.New("--webhook-client-names needs --webhook-client-ca")
		}
		log.Info("WARNING: --webhook-client-ca is not set: anyone who reaches the webhook port can send admission reviews " +
			"that consume budgets and flow controls. Give the API server a client certificate for webhooks and pass its CA " +
			"(see docs/install-and-operations.md, \"Only the API server may call the webhooks\"), or restrict the port with a NetworkPolicy")
		return tlsOpts, func(h http.Handler) http.Handler { return h }, nil
	}
	data, err := os.ReadFile(o.WebhookClientCA)
	if err != nil {
		return nil, nil, fmt.Errorf("--webhook-client-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, nil, fmt.Errorf("--webhook-client-ca: %s holds no PEM certificate", o.WebhookClientCA)
	}
	tlsOpts = append(tlsOpts, func(c *tls.Config) {
		c.ClientCAs = pool
		c.ClientAuth = tls.VerifyClientCertIfGiven
	})
	names := o.WebhookClientNames
	wrap := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if code, reason := refuseCaller(r.TLS, names); code != 0 {
				refusedReviews.WithLabelValues(reason).Inc()
				http.Error(w, refusalMessage(reason), code)
				return
			}
			h.ServeHTTP(w, r)
		})
	}
	log.Info("webhooks accept only callers with a client certificate of the client CA", "clientCA", o.WebhookClientCA, "names", names)
	return tlsOpts, wrap, nil
}

// refuseCaller decides whether a connection may send reviews: it needs a
// certificate verified against the client CA (crypto/tls has checked the
// chain) and, when names are given, one of them as the certificate's
// common name or a DNS name. It returns 0 to serve the request, or the
// status and reason to refuse it.
func refuseCaller(state *tls.ConnectionState, names []string) (int, string) {
	if state == nil || len(state.VerifiedChains) == 0 || len(state.VerifiedChains[0]) == 0 {
		return http.StatusUnauthorized, refusedNoCertificate
	}
	if len(names) == 0 {
		return 0, ""
	}
	leaf := state.VerifiedChains[0][0]
	if slices.Contains(names, leaf.Subject.CommonName) || slices.ContainsFunc(leaf.DNSNames, func(n string) bool { return slices.Contains(names, n) }) {
		return 0, ""
	}
	return http.StatusForbidden, refusedName
}

func refusalMessage(reason string) string {
	if reason == refusedName {
		return "Rampart's webhooks answer only the API server: the client certificate names none of --webhook-client-names"
	}
	return "Rampart's webhooks answer only the API server: present the client certificate the API server's admission configuration gives webhooks (kubeConfigFile), signed by the CA in --webhook-client-ca"
}
