package cli

import (
	"fmt"
	"io/fs"
	"net/http"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/rampart-io/rampart/api/v1alpha1"
	chart "github.com/rampart-io/rampart/charts/rampart"
)

// restConfig loads --kubeconfig, else $KUBECONFIG or ~/.kube/config, else
// the in-cluster service account: what kubectl users expect.
func restConfig(kubeconfig string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
}

// operatorRequestTimeout bounds each request of the operator's verbs when
// --request-timeout is not given: in an incident a hung API server or
// gateway must be reported in seconds.
const operatorRequestTimeout = 15 * time.Second

// rampartClient is a client of Rampart's resources for the kubectl-style
// flags of a command. It needs no discovery: behind a gateway whose
// breaker is open, the operator's way out must not depend on anything but
// the rampart.io requests themselves. A refusal (429) is reported at once
// rather than retried for minutes.
func rampartClient(flags *genericclioptions.ConfigFlags) (client.Client, error) {
	cfg, err := flags.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	if flags.Timeout == nil || *flags.Timeout == "" || *flags.Timeout == "0" {
		cfg.Timeout = operatorRequestTimeout
	}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return refusalsNotRetried{rt} })
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	mapper, err := rampartRESTMapper()
	if err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: scheme, Mapper: mapper})
}

// rampartRESTMapper maps Rampart's kinds to resources from the CRDs this
// binary ships, instead of from the API server's discovery.
func rampartRESTMapper() (meta.RESTMapper, error) {
	mapper := meta.NewDefaultRESTMapper([]schema.GroupVersion{v1alpha1.GroupVersion})
	crds, err := fs.Glob(chart.Manifests, "crds/*.yaml")
	if err != nil {
		return nil, err
	}
	for _, name := range crds {
		data, err := chart.Manifests.ReadFile(name)
		if err != nil {
			return nil, err
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(data, &crd); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		scope := meta.RESTScopeRoot
		if crd.Spec.Scope == apiextensionsv1.NamespaceScoped {
			scope = meta.RESTScopeNamespace
		}
		gvk := v1alpha1.GroupVersion.WithKind(crd.Spec.Names.Kind)
		mapper.AddSpecific(gvk, v1alpha1.GroupVersion.WithResource(crd.Spec.Names.Plural),
			v1alpha1.GroupVersion.WithResource(crd.Spec.Names.Singular), scope)
	}
	return mapper, nil
}

// refusalsNotRetried drops Retry-After from 429 answers: client-go retries
// such an answer up to ten times, sleeping as told (over a minute behind
// an open breaker) before it says anything. The operator's verbs are run
// by a person, who is better served by the refusal's reason at once.
type refusalsNotRetried struct{ next http.RoundTripper }

func (r refusalsNotRetried) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	if err == nil && resp.StatusCode == http.StatusTooManyRequests {
		resp.Header.Del("Retry-After")
	}
	return resp, err
}

// explainRefusal says who refused an operator's request and how to get
// past it: the refusal itself names the gateway's rule.
func explainRefusal(flags *genericclioptions.ConfigFlags, err error) error {
	if !apierrors.IsTooManyRequests(err) {
		return err
	}
	server := "the server"
	if cfg, cerr := flags.ToRESTConfig(); cerr == nil {
		server = cfg.Host
	}
	return fmt.Errorf("%s refused the request (429, not retried): %w\n"+
		"If a gateway refuses requests to TrafficPolicies, use a kubeconfig that reaches an API server directly, "+
		"or give TrafficPolicies an Exempt policy (rampart-control-plane does)", server, err)
}
