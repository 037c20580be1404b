package gateway

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/rampart-io/rampart/internal/servers/gateway/identity"
	"github.com/rampart-io/rampart/internal/servers/gateway/upstream"
)

// Options configure a gateway.
type Options struct {
	// Upstreams are the kube-apiservers' base URLs: the default pool.
	// Empty: the kubeconfig's server.
	Upstreams []string
	// UpstreamPools are named pools of other kube-apiservers, which only
	// the requests of a Route TrafficPolicy naming them reach
	// (--upstream-pool NAME=URL,...).
	UpstreamPools []UpstreamPool
	// CertFile and KeyFile are the gateway's serving certificate.
	CertFile, KeyFile string
	// ClientCAFile verifies client certificates (the cluster's client CA).
	ClientCAFile string
	// HealthInterval is how often each upstream's /readyz is asked.
	HealthInterval time.Duration
	// Upstream and Identity tune balancing and the authentication caches.
	Upstream upstream.Options
	Identity identity.Options
	// AccessLogPercent samples requests no policy matches into the access
	// log (a policy's own accessLogPercent applies to its requests).
	AccessLogPercent int
	// Log receives the access log and events; nil writes JSON to stderr.
	Log *slog.Logger
	// CountResources are counted per namespace for the LIST guard from
	// the start (kubectl's names: "pods", "deployments.apps"); others
	// from their first guarded LIST.
	CountResources []string
	// CountCustomResourceGroups are the custom-resource groups the LIST
	// guard may count per namespace (CustomResourceRole grants them);
	// other custom resources are priced by their cluster-wide count.
	CountCustomResourceGroups []string
	// CountIdleAfter stops counting a resource counted since a guarded
	// request (not a CountResources one) when no guarded LIST or
	// watch-list of it has come for this long. 0: 10 minutes.
	CountIdleAfter time.Duration
	// Name is this replica's name in status.breakers; empty: the host
	// name.
	Name string
	// ShutdownWatchSpread is the time over which a stopping gateway ends
	// its watches, in batches, each cleanly so that its client re-watches
	// from where it was instead of relisting (see drain.go). 0 ends them
	// all at once, still cleanly.
	ShutdownWatchSpread time.Duration
	// TrafficLog receives the traffic log, one JSON line per request
	// (trafficlog.File for a rotated file, or os.Stderr); nil: none.
	// The gateway closes it when Serve returns.
	TrafficLog io.Writer
	// TrafficLogSample is SampleAll (the default) or SamplePolicy.
	TrafficLogSample string
	// Namespace is Rampart's namespace, where the manager publishes its
	// look at etcd's space (ConfigMap rampart-etcd-space) for the brake.
	// Empty: no brake.
	Namespace string
	// EtcdSpaceBrakeShare is the share of etcd's quota (on the fullest
	// member) from which creates from clients outside the control plane
	// are refused (spacebrake.DefaultShare from the command line); 0: no
	// brake.
	EtcdSpaceBrakeShare float64
	// EtcdSpaceBrakeExemptUsers pass the brake besides the control plane,
	// Rampart's service accounts and leases: Rampart's manager when it is
	// not a service account of Namespace.
	EtcdSpaceBrakeExemptUsers []string
}

// UpstreamPool is a named pool of kube-apiservers.
type UpstreamPool struct {
	Name string
	URLs []string
}

// ParseUpstreamPool reads --upstream-pool's NAME=URL,URL,...
func ParseUpstreamPool(s string) (UpstreamPool, error) {
	name, urls, ok := strings.Cut(s, "=")
	if !ok || name == "" || urls == "" {
		return UpstreamPool{}, fmt.Errorf("--upstream-pool %q: want NAME=URL[,URL...], e.g. heavy=https://10.0.0.3:6443", s)
	}
	return UpstreamPool{Name: name, URLs: strings.Split(urls, ",")}, nil
}

// poolName is what a TrafficPolicy's route.pool may be.
var poolName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// CheckPoolName says why name cannot name a pool a TrafficPolicy routes
// to, if it cannot.
func CheckPoolName(name string) error {
	if !poolName.MatchString(name) || len(name) > 63 {
		return errors.New("a pool's name is lower-case letters, digits and '-' (at most 63), as a TrafficPolicy's route.pool")
	}
	return nil
}

// validatePools: names a Route policy can name, none twice, not the
// default pool's; each API server in one pool only, since a server's
// health and load are its pool's.
func (o Options) validatePools() []error {
	var errs []error
	seen := map[string]string{}
	for _, u := range o.Upstreams {
		seen[u] = upstream.DefaultPool
	}
	names := map[string]bool{}
	for _, p := range o.UpstreamPools {
		switch {
		case p.Name == upstream.DefaultPool:
			errs = append(errs, fmt.Errorf("--upstream-pool %s: the default pool is --upstreams; name the pool otherwise", p.Name))
		case CheckPoolName(p.Name) != nil:
			errs = append(errs, fmt.Errorf("--upstream-pool %q: %w", p.Name, CheckPoolName(p.Name)))
		case names[p.Name]:
			errs = append(errs, fmt.Errorf("--upstream-pool %s: given twice; list all its API servers in one flag", p.Name))
		}
		names[p.Name] = true
		if len(p.URLs) == 0 {
			errs = append(errs, fmt.Errorf("--upstream-pool %s: no API server", p.Name))
		}
		for _, u := range p.URLs {
			if _, err := upstreamURL(u); err != nil {
				errs = append(errs, fmt.Errorf("--upstream-pool %s: %w", p.Name, err))
				continue
			}
			if other, ok := seen[u]; ok {
				errs = append(errs, fmt.Errorf("--upstream-pool %s: %s is in pool %s already; an API server belongs to one pool", p.Name, u, other))
			}
			seen[u] = p.Name
		}
	}
	return errs
}

// Validate says what is wrong with the options, every problem at once,
// each naming its flag. New refuses options that do not validate.
func (o Options) Validate() error {
	var errs []error
	for _, s := range o.Upstreams {
		if _, err := upstreamURL(s); err != nil {
			errs = append(errs, fmt.Errorf("--upstreams: %w", err))
		}
	}
	errs = append(errs, o.validatePools()...)
	if (o.CertFile == "") != (o.KeyFile == "") {
		errs = append(errs, errors.New("--tls-cert-file and --tls-private-key-file go together: set both, or neither"))
	}
	if o.ClientCAFile != "" && o.CertFile == "" {
		errs = append(errs, errors.New("a client CA needs a serving certificate: set --tls-cert-file and --tls-private-key-file"))
	}
	if o.AccessLogPercent < 0 || o.AccessLogPercent > 100 {
		errs = append(errs, fmt.Errorf("--access-log-percent %d: give a percent, 0 to 100", o.AccessLogPercent))
	}
	if err := CheckCountGroups(o.CountCustomResourceGroups); err != nil {
		errs = append(errs, fmt.Errorf("--count-custom-resource-groups: %w", err))
	}
	for _, name := range o.CountResources {
		if gr := schema.ParseGroupResource(name); gr == (schema.GroupResource{Resource: "secrets"}) {
			errs = append(errs, errors.New("--count-resources: the gateway never counts secrets per namespace (it may not read them); they are priced by their cluster-wide count"))
		}
	}
	if o.EtcdSpaceBrakeShare < 0 || o.EtcdSpaceBrakeShare > 1 {
		errs = append(errs, fmt.Errorf("--etcd-space-brake-share %v: give a share of etcd's quota, 0 (no brake) to 1", o.EtcdSpaceBrakeShare))
	}
	switch o.TrafficLogSample {
	case "", SampleAll, SamplePolicy:
	default:
		errs = append(errs, fmt.Errorf("--traffic-log-sample %q: use %s or %s", o.TrafficLogSample, SampleAll, SamplePolicy))
	}
	return errors.Join(errs...)
}

// pools are the default pool (Upstreams) and the named ones.
func (o Options) pools(now time.Time) (upstream.Pools, error) {
	urls := func(ss []string) ([]*url.URL, error) {
		var out []*url.URL
		for _, s := range ss {
			u, err := upstreamURL(s)
			if err != nil {
				return nil, err
			}
			out = append(out, u)
		}
		return out, nil
	}
	def, err := urls(o.Upstreams)
	if err != nil {
		return nil, err
	}
	pools := upstream.Pools{upstream.NewPool(def, o.Upstream, now)}
	for _, p := range o.UpstreamPools {
		us, err := urls(p.URLs)
		if err != nil {
			return nil, err
		}
		pools = append(pools, upstream.NewNamedPool(p.Name, us, o.Upstream, now))
	}
	return pools, nil
}

// upstreamURL is an API server's base URL.
func upstreamURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("upstream %q is not an https://HOST:PORT URL of a kube-apiserver", s)
	}
	return u, nil
}

// withDefaults fills what the options leave unset; the upstream is then
// cfg's server.
func (o Options) withDefaults(cfg *rest.Config) Options {
	if o.Log == nil {
		o.Log = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	if o.HealthInterval <= 0 {
		o.HealthInterval = 2 * time.Second
	}
	if o.Upstream == (upstream.Options{}) {
		o.Upstream = upstream.Defaults
	}
	if o.Identity.CacheSize == 0 {
		noAnonymous := o.Identity.NoAnonymous
		o.Identity = identity.Defaults
		o.Identity.NoAnonymous = noAnonymous
	}
	if len(o.Upstreams) == 0 {
		o.Upstreams = []string{cfg.Host}
	}
	if o.Name == "" {
		o.Name, _ = os.Hostname()
	}
	if o.TrafficLogSample == "" {
		o.TrafficLogSample = SampleAll
	}
	return o
}
