package manager

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/operations/etcdtool/space"
	"github.com/rampart-io/rampart/internal/plumbing/servingcert"
	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
	"github.com/rampart-io/rampart/internal/protection/clusterview"
	"github.com/rampart-io/rampart/internal/protection/registrar"
	"github.com/rampart-io/rampart/internal/servers/manager/controller/budgetstatus"
	"github.com/rampart-io/rampart/internal/servers/manager/controller/explicitdeletion"
	"github.com/rampart-io/rampart/internal/servers/manager/controller/generatedbudgets"
	"github.com/rampart-io/rampart/internal/servers/manager/controller/quotawatch"
)

// certificates makes the webhook's serving certificate when o asks for
// generated ones: the rotator writes it before the webhook server starts,
// so the server always finds one. It returns the CA bundle to register.
func certificates(ctx context.Context, cfg *rest.Config, o Options) (*servingcert.Rotator, []byte, error) {
	var rotator *servingcert.Rotator
	var caBundle []byte
	if o.GenerateCerts {
		rotator = &servingcert.Rotator{Dir: o.CertDir, Hosts: o.certHosts(), CertValidity: o.CertValidity, Log: o.Log.WithName("servingcert")}
		if o.CASecret != "" {
			cs, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return nil, nil, err
			}
			rotator.Store = servingcert.SecretStore{Client: cs, Namespace: o.Namespace, Name: o.CASecret}
		}
		var err error
		if caBundle, _, err = rotator.Ensure(ctx); err != nil {
			return nil, nil, fmt.Errorf("webhook certificate: %w", err)
		}
	}
	return rotator, caBundle, nil
}

// newManager is the controller-runtime manager with Rampart's options.
func newManager(cfg *rest.Config, o Options, scheme *runtime.Scheme, webhookTLS []func(*tls.Config)) (ctrl.Manager, error) {
	return ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Logger:                  o.Log,
		Metrics:                 metricsOptions(o),
		HealthProbeBindAddress:  o.ProbeAddr,
		LeaderElection:          o.LeaderElection,
		LeaderElectionID:        "rampart-manager",
		LeaderElectionNamespace: o.Namespace,
		// Release the lease on shutdown so a rolling restart hands over at
		// once instead of after the lease duration.
		LeaderElectionReleaseOnCancel: true,
		// The manager reads only its own webhook configuration, and may list
		// and watch no other (RBAC resourceNames match a name selector).
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&admissionregistrationv1.ValidatingWebhookConfiguration{}: {
				Field: fields.OneTermEqualSelector("metadata.name", rampartadmission.ValidatingConfigName)},
		}},
		WebhookServer: webhook.NewServer(webhook.Options{
			Host: o.WebhookHost, Port: o.WebhookPort, CertDir: o.CertDir, TLSOpts: webhookTLS,
		}),
	})
}

// checks are the health and readiness checks: ready once the views have
// synced, the webhook server serves TLS and the configuration is
// registered, from then on the API server can call this replica.
func checks(mgr ctrl.Manager, views *clusterview.Views, server webhookRegistrar, registered <-chan struct{}) error {
	if err := mgr.AddReadyzCheck("clusterview", func(*http.Request) error {
		if !views.HasSynced() {
			return errors.New("cluster view not synced yet")
		}
		return nil
	}); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("webhook", server.Server.StartedChecker()); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("registered", func(*http.Request) error {
		select {
		case <-registered:
			return nil
		default:
			return errors.New("webhook configuration not registered yet")
		}
	}); err != nil {
		return err
	}
	return nil
}

// watchProtections re-registers the webhooks when what they are made
// from changes, and keeps the deletion view's policy counts current.
func watchProtections(ctx context.Context, mgr ctrl.Manager, reg *registrar.Registrar, keeper *registrar.Compiled, views *clusterview.Views, policies cachedPolicies,
	protections []rampartadmission.Protection, log logr.Logger) error {
	// Policy changes recompile and recount at once.
	policyInformer, err := mgr.GetCache().GetInformer(ctx, &v1alpha1.ProtectionPolicy{})
	if err != nil {
		return err
	}
	// The view counts what policies protect, as it does for labels.
	views.Deletion.SetPolicies(func() []v1alpha1.ProtectionPolicy {
		ps, err := policies.List(context.Background())
		if err != nil {
			log.Error(err, "listing ProtectionPolicies for the cluster view")
		}
		return ps
	})
	policyChanged := func() {
		keeper.Poke()
		views.Deletion.Resync()
	}
	if _, err := policyInformer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { policyChanged() },
		UpdateFunc: func(any, any) { policyChanged() },
		DeleteFunc: func(any) { policyChanged() },
	}); err != nil {
		return err
	}
	for _, p := range protections {
		if c, ok := p.(rampartadmission.OwnsCollectors); ok {
			for _, col := range c.Collectors(mgr.GetCache()) {
				if err := metrics.Registry.Register(col); err != nil {
					return err
				}
			}
		}
	}
	// Every object of a protection's kind re-registers when it comes,
	// goes, or its spec changes.
	for _, kind := range rampartadmission.Kinds(protections) {
		inf, err := mgr.GetCache().GetInformer(ctx, kind.New())
		if err != nil {
			return err
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc: func(any) { reg.Poke() },
			// Only a spec change can change a webhook: status updates
			// (every counted delete) need no re-registration.
			UpdateFunc: func(o, n any) {
				if oo, ok := o.(client.Object); !ok || oo.GetGeneration() != n.(client.Object).GetGeneration() {
					reg.Poke()
				}
			},
			DeleteFunc: func(any) { reg.Poke() },
		}); err != nil {
			return err
		}
	}
	return nil
}

// controllers are the controllers the leader runs: the Ready condition of
// every kind whose webhooks Rampart registers, the explicit-deletion
// labels of opted-in workloads' pods, budget status and generated budgets.
func controllers(ctx context.Context, mgr ctrl.Manager, o Options, reg *registrar.Registrar, views *clusterview.Views, scales rampartadmission.Scales,
	recorder events.EventRecorder, protections []rampartadmission.Protection) error {
	// The Ready condition of the kinds whose protection reports it.
	for _, p := range protections {
		if r, ok := p.(rampartadmission.OwnsReady); ok {
			if err := r.Ready(mgr.GetClient(), reg.Registration).SetupWithManager(mgr); err != nil {
				return err
			}
		}
	}
	if err := (&explicitdeletion.Reconciler{Client: mgr.GetClient(), Reader: mgr.GetClient(), View: views.Workloads, Namespaces: views.Namespaces}).SetupWithManager(mgr); err != nil {
		return err
	}
	timeout := o.BudgetDisruptionTimeout
	if timeout <= 0 {
		timeout = DefaultBudgetDisruptionTimeout
	}
	budgets := &budgetstatus.Reconciler{Client: mgr.GetClient(), View: views.Budgets, Scales: scales, Timeout: timeout, Recorder: recorder}
	if err := budgets.SetupWithManager(ctx, mgr, reg.Poke); err != nil {
		return err
	}
	if err := (&generatedbudgets.Reconciler{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Recorder: recorder}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := backups(ctx, mgr, o, recorder); err != nil {
		return err
	}
	if o.EtcdSpaceSecret != "" {
		if err := mgr.Add(&spaceWatch{reader: mgr.GetAPIReader(), client: mgr.GetClient(), namespace: o.Namespace, secret: o.EtcdSpaceSecret,
			every: cmp.Or(o.EtcdSpaceEvery, 30*time.Second), warnShare: cmp.Or(o.EtcdSpaceWarnShare, space.DefaultWarnShare), quota: o.EtcdSpaceQuota,
			log: o.Log.WithName("etcdspace")}); err != nil {
			return err
		}
	}
	return quotawatch.Setup(ctx, mgr, views.Informers, o.Namespace, o.Log.WithName("quotawatch"))
}
