package admission

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// ProbePath serves the probe webhook, which denies every request it gets:
// a denial proves that the API server evaluated the probe's match
// condition, that is, that it has loaded the configuration carrying it.
const ProbePath = "/validate/probe"

// probeWebhookName is the probe's webhook; ProbeDenial is its message.
const (
	probeWebhookName = "probe.rampart.io"
	ProbeDenial      = "rampart probe: this API server has loaded Rampart's webhook configuration"
)

// probeName is the ConfigMap name a probe for token dry-runs.
func probeName(token string) string { return "rampart-probe-" + token }

// NewToken is a fresh registration token (see Registration.Token).
func NewToken() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// ProbeWebhook matches only the dry-run creation of ConfigMap
// rampart-probe-TOKEN in Rampart's own namespace (reg.Token): it reaches
// nothing else, so an outage of Rampart blocks nothing through it. The
// probe protection registers it (internal/protection/probe/admit).
func ProbeWebhook(reg Registration, b Builder) admissionregistrationv1.ValidatingWebhook {
	h := b.Webhook(probeWebhookName, ProbePath, Rule(admissionregistrationv1.Create, "", "configmaps"))
	h.Rules[0].Scope = ptr.To(admissionregistrationv1.NamespacedScope)
	h.NamespaceSelector = InNamespaces([]string{reg.OwnNamespace})
	h.SideEffects = ptr.To(admissionregistrationv1.SideEffectClassNone)
	h.MatchConditions = []admissionregistrationv1.MatchCondition{{
		Name:       "token",
		Expression: "request.dryRun == true && request.name == " + strconv.Quote(probeName(reg.Token)),
	}}
	return h
}

// Probe is the probe webhook's handler.
type Probe struct{}

// Handle implements admission.Handler: it always denies.
func (Probe) Handle(context.Context, admission.Request) admission.Response {
	return admission.Denied(ProbeDenial)
}

// Barrier tells when every API server has loaded a given version of
// Rampart's validating webhook configuration. The API server applies
// webhook configurations from a watch, asynchronously: a configuration
// written is not yet one enforced. Each version Rampart writes carries a
// fresh token in the probe webhook's match condition; Wait dry-runs the
// creation of ConfigMap rampart-probe-TOKEN on each API server until the
// probe denies it (that server enforces that version, or a later one) or
// the deadline passes. Code that must not admit a request before its
// protection is enforced registers the protection, then calls Wait with
// the token it registered.
type Barrier struct {
	// Servers are clients of each API server; with one API server, or when
	// they are unknown, the manager's own client.
	Servers func(ctx context.Context) ([]kubernetes.Interface, error)
	// Namespace is Rampart's own, where the probe webhook listens.
	Namespace string
	// Timeout bounds Wait; zero means DefaultBarrierTimeout.
	Timeout time.Duration
	// Current, when set, reads the token of the configuration live now.
	// A later version than the one waited for holds what it held (every
	// write keeps what is marked pending), so Wait follows it rather than
	// waiting for a version no API server will load any more.
	Current func(ctx context.Context) (string, error)
}

// DefaultBarrierTimeout is how long Wait waits for the API servers to load a
// configuration: inside the 15 s that the API server gives a webhook that
// waits on it (InForceTimeout).
const DefaultBarrierTimeout = 12 * time.Second

// ErrNotLoaded says an API server did not load the configuration in time.
var ErrNotLoaded = errors.New("the API server has not yet loaded Rampart's updated webhook configuration; retry in a few seconds")

// Wait returns once every API server has loaded the configuration carrying
// token (or a later one: tokens are checked against the version they came
// with only).
func (b Barrier) Wait(ctx context.Context, token string) error {
	timeout := b.Timeout
	if timeout <= 0 {
		timeout = DefaultBarrierTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	servers, err := b.Servers(ctx)
	if err != nil {
		return fmt.Errorf("finding the API servers: %w", err)
	}
	errs := make(chan error, len(servers))
	for _, s := range servers {
		go func() { errs <- b.waitOne(ctx, s, token) }()
	}
	var first error
	for range servers {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// waitOne probes one API server until it enforces the token. A probe
// request that the probe webhook denies, or that fails calling it (the
// replica that serves it is down), proves the match condition matched.
func (b Barrier) waitOne(ctx context.Context, cs kubernetes.Interface, token string) error {
	delay := 2 * time.Millisecond
	lastRead := time.Now()
	for {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: probeName(token), Namespace: b.Namespace}}
		_, err := cs.CoreV1().ConfigMaps(b.Namespace).Create(ctx, cm, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil && strings.Contains(err.Error(), probeWebhookName) {
			return nil
		}
		if b.Current != nil && time.Since(lastRead) > 100*time.Millisecond {
			lastRead = time.Now()
			if cur, err := b.Current(ctx); err == nil && cur != "" {
				token = cur
			}
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return fmt.Errorf("%w (last probe: %v)", ErrNotLoaded, err)
			}
			return ErrNotLoaded
		case <-time.After(delay):
		}
		delay = min(2*delay, 50*time.Millisecond)
	}
}

// StaticServers are clients of the API servers at urls, with cfg's
// credentials; with no urls, cfg's own server.
func StaticServers(cfg *rest.Config, urls []string) (func(context.Context) ([]kubernetes.Interface, error), error) {
	if len(urls) == 0 {
		urls = []string{""}
	}
	var out []kubernetes.Interface
	for _, u := range urls {
		c := probeConfig(cfg)
		if u != "" {
			c.Host = u
		}
		cs, err := kubernetes.NewForConfig(c)
		if err != nil {
			return nil, err
		}
		out = append(out, cs)
	}
	return func(context.Context) ([]kubernetes.Interface, error) { return out, nil }, nil
}

// probeConfig is cfg for probes: a few dry runs per protection created,
// which must not queue behind the manager's other requests on a client-side
// rate limit.
func probeConfig(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.QPS, c.Burst, c.RateLimiter = -1, 0, nil
	return c
}

// ClusterServers finds the API servers of a cluster in the EndpointSlices
// of default/kubernetes, and reaches each at its address with the name its
// certificate carries (kubernetes.default.svc). When none are listed (a
// cluster whose endpoint reconciler is off), it uses cfg's server alone.
func ClusterServers(cfg *rest.Config) (func(context.Context) ([]kubernetes.Interface, error), error) {
	base, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) ([]kubernetes.Interface, error) {
		slices, err := base.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).List(ctx,
			metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=kubernetes"})
		if err != nil {
			return nil, err
		}
		var out []kubernetes.Interface
		for _, s := range slices.Items {
			for _, p := range s.Ports {
				if p.Port == nil || (p.Name != nil && *p.Name != "https") {
					continue
				}
				for _, e := range s.Endpoints {
					if e.Conditions.Ready != nil && !*e.Conditions.Ready {
						continue
					}
					for _, a := range e.Addresses {
						c := probeConfig(cfg)
						c.Host = "https://" + net.JoinHostPort(a, strconv.Itoa(int(*p.Port)))
						c.ServerName = "kubernetes.default.svc"
						cs, err := kubernetes.NewForConfig(c)
						if err != nil {
							return nil, err
						}
						out = append(out, cs)
					}
				}
			}
		}
		if len(out) == 0 {
			return []kubernetes.Interface{base}, nil
		}
		return out, nil
	}, nil
}

// NotLoadedStatus is the answer of a webhook whose request waited on a
// Barrier in vain: 503, so that clients may retry.
func NotLoadedStatus(what string, err error) admission.Response {
	return admission.Errored(http.StatusServiceUnavailable, fmt.Errorf("%s is not in force yet, so it was not accepted: %w", what, err))
}

// IsProbe says whether a webhook (perhaps with a replica prefix) is the
// probe.
func IsProbe(name string) bool { return BaseName(name) == probeWebhookName }
