// Package manager runs `rampart manager`: the controller-runtime manager that
// serves Rampart's admission webhooks on every replica and runs its
// controllers on the elected leader.
package manager

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"net/http/pprof"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/plumbing/installation"
	"github.com/rampart-io/rampart/internal/plumbing/tlsprofile"
	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
	"github.com/rampart-io/rampart/internal/protection/budget"
	budgetadmit "github.com/rampart-io/rampart/internal/protection/budget/admit"
	"github.com/rampart-io/rampart/internal/protection/clusterview"
	"github.com/rampart-io/rampart/internal/protection/compiled"
	"github.com/rampart-io/rampart/internal/protection/protections"
	"github.com/rampart-io/rampart/internal/protection/registrar"
)

// The manager's rights, generated into charts/rampart/files/rbac by `make generate`.
// Webhook configurations: only Rampart's own, which the chart and `rampart
// up` create empty (RBAC cannot limit create to a name); the manager fills
// it in with server-side apply and watches it by name.
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingwebhookconfigurations,verbs=get;update;patch,resourceNames=rampart-validating
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingwebhookconfigurations,verbs=list;watch,resourceNames=rampart-validating
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles,verbs=get,resourceNames=rampart-manager
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=rampart.io,resources=*,verbs=get;list;watch
// +kubebuilder:rbac:groups=rampart.io,resources=*/status,verbs=get;update;patch
// Probes of the webhook configuration are dry-run creations of a ConfigMap.
// +kubebuilder:rbac:groups="",namespace=rampart-system,resources=configmaps,verbs=create
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=rampart-system,resources=leases,verbs=get;list;watch;create;update;patch;delete

// Options configure the manager.
type Options struct {
	// BudgetFenceAbove is the number of budgets in a namespace from which
	// a disruption there is judged through the budget fence rather than a
	// live list of the namespace's budgets (0: budget.DefaultFenceAbove).
	BudgetFenceAbove int
	// NoBudgetMarks turns the budgets' change marks off (see
	// budget.MarksName): disruptions then list or fence always.
	NoBudgetMarks bool
	// Namespace holds the leader-election lease; Rampart's webhooks never
	// judge objects in it.
	Namespace string
	// WebhookHost and WebhookPort are where the webhook server listens.
	WebhookHost string
	WebhookPort int
	// WebhookURLHost, when set, registers the webhooks by URL
	// (https://WebhookURLHost:WebhookPort/...), as in a local cluster.
	// Otherwise they are registered by Service.
	WebhookURLHost string
	// WebhookReplicas are the base URLs of every local replica's webhook
	// server, when several run beside the API server (see
	// admission.Endpoint.Replicas).
	WebhookReplicas []string
	// APIServerURLs are every API server's address, when they are not
	// listed in the default/kubernetes EndpointSlices (a local cluster):
	// a protection is admitted only once each of them enforces it.
	APIServerURLs []string
	// WebhookService is the Service in Namespace fronting the webhook
	// server in a cluster.
	WebhookService string
	// WebhookClientCA is a PEM file of the CA that signs the client
	// certificate the API server presents to webhooks. Set, the webhooks
	// answer only callers with such a certificate; empty, anyone who
	// reaches the port (logged as a warning at start).
	WebhookClientCA string
	// WebhookClientNames, when set, are the common or DNS names one of
	// which that certificate must carry.
	WebhookClientNames []string
	// WebhookOwner, when set, is the ClusterRole that owns the webhook
	// configurations (the chart's rampart-manager): deleting it deletes
	// them.
	WebhookOwner string
	// CertDir holds tls.crt and tls.key. When CertDir has no certificate at
	// start, the manager makes and renews its own (GenerateCerts).
	CertDir       string
	GenerateCerts bool
	// CASecret is the Secret in Namespace that holds the generated CA, so
	// that every replica serves certificates of the one registered CA.
	// Empty keeps the CA in CertDir (a single replica).
	CASecret string
	// CertValidity is the lifetime of generated serving certificates.
	CertValidity time.Duration
	// MetricsAddr and ProbeAddr are the Prometheus and health endpoints.
	MetricsAddr, ProbeAddr string
	// MetricsSecure serves metrics over HTTPS to callers the API server
	// authenticates and allows to get /metrics (in a cluster).
	MetricsSecure bool
	// MetricsCertDir holds tls.crt and tls.key for secure metrics; empty
	// serves a self-signed certificate made at start.
	MetricsCertDir string
	// Profiling serves Go's profiles at /debug/pprof/ on the metrics
	// address, behind the same authentication and authorization as the
	// metrics (get on the non-resource URL /debug/pprof/*).
	Profiling      bool
	LeaderElection bool
	// ReplicasExempt are requesters the explicit-replicas label never
	// denies, e.g. the horizontal-pod-autoscaler's service account.
	ReplicasExempt v1alpha1.Subjects
	// CompiledPolicies has the API server enforce the static rules itself,
	// as ValidatingAdmissionPolicies the manager keeps applied, and
	// narrows the label webhooks once every API server does (registrar.Compiled).
	CompiledPolicies bool
	// BudgetDisruptionTimeout is how long a disruption a budget admitted
	// may stay unobserved before the budget gets it back (the request
	// failed after admission).
	BudgetDisruptionTimeout time.Duration
	// BudgetPartitionThreshold is the share of the nodes a budget's pods
	// run on that, NotReady at once, is a partition: disruptions of pods
	// there are then decided like healthy pods' (0: the default,
	// budget.DefaultPartitionThreshold).
	BudgetPartitionThreshold float64
	// ShutdownDelay is how long the manager keeps serving after it is told
	// to stop, unready meanwhile (see delayStop).
	ShutdownDelay time.Duration
	// RecycleBinDir, when set, turns the recycle bin on: a copy of every
	// protected object is stored there before its delete is admitted.
	// Off the cluster's etcd: a local directory, or a volume in a cluster.
	RecycleBinDir string
	// RecycleBinStore, when set, turns the recycle bin on in a store
	// storage.Open takes: a directory, or s3://BUCKET/PREFIX?PARAMS with
	// the credentials from the environment or a credentials file. At most
	// one of RecycleBinDir and RecycleBinStore is set.
	RecycleBinStore string
	// RecycleBinKeyFile holds the 32-byte key Secrets are sealed with in
	// the recycle bin; without it a protected Secret's delete is refused
	// (a Secret is never kept in clear).
	RecycleBinKeyFile string
	// RecycleBinNotDeletedAfter: see recyclebin.Keeper.NotDeletedAfter.
	RecycleBinNotDeletedAfter time.Duration
	// RecycleBinRetention is how long copies of protected objects (and of
	// RecyclePolicies since deleted) are kept.
	RecycleBinRetention time.Duration
	// RecycleBinNamespaceMaxBytes is what the recycle bin keeps of a
	// protected namespace's contents as the namespace controller deletes
	// them, per namespace and replica; 0 keeps none.
	RecycleBinNamespaceMaxBytes int64
	// RecycleBinMaintainEvery is how often the leader evicts what
	// retention and size caps no longer keep and publishes the summary.
	RecycleBinMaintainEvery time.Duration
	// BackupStore, when set, is where the leader writes the backups
	// Backup objects in Namespace ask for (storage.Open's locations). The
	// manager then needs to read every resource (the chart's
	// manager.backup grants it).
	BackupStore string
	// BackupKeyFile seals Secrets in backups (default: RecycleBinKeyFile);
	// without a key a Backup that would hold a Secret fails, saying so.
	BackupKeyFile string
	// EtcdSnapshotSecrets are the only Secrets in Namespace that Backups
	// with an etcdSnapshot may name (etcd endpoints and client
	// certificate); read by name at each run, never listed.
	EtcdSnapshotSecrets []string
	// EtcdSpaceSecret, when set, is a Secret in Namespace (the keys of an
	// etcdSnapshot's) with which the leader looks at etcd's space every
	// EtcdSpaceEvery: the rampart_etcd_* gauges, ConfigMap
	// rampart-etcd-space for rampart status.
	EtcdSpaceSecret string
	EtcdSpaceEvery  time.Duration
	// EtcdSpaceWarnShare is the share of the quota that raises
	// rampart_etcd_space_warning (default space.DefaultWarnShare).
	EtcdSpaceWarnShare float64
	// EtcdSpaceQuota is assumed for members that do not report theirs
	// (etcd < 3.6).
	EtcdSpaceQuota int64
	// InstalledBy is how the manager was installed (the chart, rampart
	// up, by hand): messages name the way out that applies there.
	InstalledBy installation.Method
	// Version is Rampart's, written in backups' manifests.
	Version string
	Log     logr.Logger
}

// DefaultBudgetDisruptionTimeout bounds how long a budget stays consumed
// by a disruption that was admitted but never happened.
const DefaultBudgetDisruptionTimeout = 30 * time.Second

// Scheme has the built-in types and Rampart's.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

func (o Options) endpoint() rampartadmission.Endpoint {
	return rampartadmission.Endpoint{URLHost: o.WebhookURLHost, Port: o.WebhookPort, Replicas: o.WebhookReplicas,
		Service: o.WebhookService, Namespace: o.Namespace}
}

func (o Options) certHosts() []string {
	if o.WebhookURLHost != "" {
		return []string{o.WebhookURLHost}
	}
	svc := o.WebhookService + "." + o.Namespace + ".svc"
	return []string{svc, svc + ".cluster.local"}
}

// Run runs the manager until ctx ends.
func Run(ctx context.Context, cfg *rest.Config, o Options) error {
	if err := o.validate(); err != nil {
		return err
	}
	// Stop serving only after a drain: see delayStop.
	stopping := new(atomic.Bool)
	ctx = delayStop(ctx, o.ShutdownDelay, stopping, o.Log)
	scheme, err := Scheme()
	if err != nil {
		return err
	}
	// client-go's default of 5 requests a second would make every counted
	// delete (a read and a write of its flow control) wait on the client.
	cfg = rest.CopyConfig(cfg)
	if cfg.QPS == 0 {
		cfg.QPS, cfg.Burst = 200, 400
	}
	rotator, caBundle, err := certificates(ctx, cfg, o)
	if err != nil {
		return err
	}
	webhookTLS, onlyAPIServer, err := webhookClientAuth(o, o.Log.WithName("webhook"))
	if err != nil {
		return err
	}
	mgr, err := newManager(cfg, o, scheme, webhookTLS)
	if err != nil {
		return err
	}
	views, err := clusterview.New(cfg, o.Log.WithName("clusterview"))
	if err != nil {
		return err
	}
	views.InstalledBy = o.InstalledBy
	if err := mgr.Add(views.Informers); err != nil {
		return err
	}
	// The manager's cached client serves reads only after start; the
	// registration and the flow-control counts use a direct one.
	direct, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	// The budget fence orders the budget index against the API server
	// (see budget.Index.SetFence).
	views.Budgets.Index().SetFence(budget.Key{Namespace: o.Namespace, Name: budgetadmit.FenceName}, o.BudgetFenceAbove)
	// The change marks tell it the same with a read (budget.MarksName).
	views.Budgets.Index().SetMarking(!o.NoBudgetMarks)
	bin, err := recycleBin(ctx, cfg, o)
	if err != nil {
		return err
	}
	if bin != nil {
		// Keeping copies before the webhooks that capture them serve.
		if err := mgr.Add(bin); err != nil {
			return err
		}
	}
	w := wired{cfg: cfg, o: o, mgr: mgr, views: views, direct: direct, bin: bin, caBundle: caBundle,
		server: webhookRegistrar{mgr.GetWebhookServer(), onlyAPIServer}}
	reg, err := w.protections(ctx)
	if err != nil {
		return err
	}
	if rotator != nil {
		rotator.OnRotate = func(_ context.Context, bundle []byte) error { reg.SetBundle(bundle); return nil }
		if err := mgr.Add(rotator); err != nil {
			return err
		}
	}
	if err := w.recycleBin(ctx); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("shutdown", func(*http.Request) error {
		if stopping.Load() {
			return errors.New("shutting down: draining webhook calls")
		}
		return nil
	}); err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// validate refuses options the manager cannot run with.
func (o Options) validate() error {
	if o.Namespace == "" {
		return errors.New("--namespace is required")
	}
	if o.WebhookURLHost == "" && o.WebhookService == "" {
		return errors.New("set --webhook-url-host (local) or --webhook-service (in a cluster)")
	}
	if o.BudgetFenceAbove < 0 {
		return fmt.Errorf("--budget-fence-above %d: want a number of budgets, 1 or more (1: always through the fence)", o.BudgetFenceAbove)
	}
	if t := o.BudgetPartitionThreshold; t < 0 || t > 1 {
		return fmt.Errorf("--budget-partition-threshold %v: want a share of the nodes from 0 to 1, such as 0.55", t)
	}
	return nil
}

// wired is what the manager's parts are made from.
type wired struct {
	cfg      *rest.Config
	o        Options
	mgr      ctrl.Manager
	views    *clusterview.Views
	direct   client.Client
	bin      *binRunnable
	caBundle []byte
	server   webhookRegistrar
}

// protections serves the protections, registers their webhooks, keeps
// the compiled policies and runs the controllers; it returns the
// registrar.
func (w wired) protections(ctx context.Context) (*registrar.Registrar, error) {
	mgr, views, o, direct := w.mgr, w.views, w.o, w.direct
	servers, err := apiServers(w.cfg, o)
	if err != nil {
		return nil, err
	}
	policies := cachedPolicies{reader: mgr.GetCache(), live: direct}
	compiledOpts := compiled.Options{OwnNamespace: o.Namespace, ReplicasExempt: o.ReplicasExempt}
	var compiledLabels string
	if o.CompiledPolicies {
		compiledLabels = registrar.Hash(compiled.LabelRules(compiledOpts))
	}
	protections := protections.All()
	reg := registrar.New(registrar.Config{
		CompiledLabels: compiledLabels, CRDs: views.CRDs,
		Client: direct, Reader: mgr.GetCache(), Protections: protections,
		Barrier: rampartadmission.Barrier{Servers: servers, Namespace: o.Namespace},
		Base: rampartadmission.Registration{Endpoint: o.endpoint(), CABundle: w.caBundle, OwnNamespace: o.Namespace, GeneratedBudgets: true,
			RecycleBin: w.bin != nil, NamespaceContents: w.bin != nil && o.RecycleBinNamespaceMaxBytes > 0},
		Log: o.Log.WithName("registration"),
	})
	// The compiled policies are kept from the same caches; the policies'
	// Ready condition reads how far they are. owner is set below, before
	// the manager starts them.
	var owner *metav1.OwnerReference
	keeper := &registrar.Compiled{Client: direct, Cache: mgr.GetCache(), Servers: servers, Namespace: o.Namespace, Options: compiledOpts, CRDs: views.CRDs,
		Enabled: o.CompiledPolicies, Registrar: reg, Owner: func() *metav1.OwnerReference { return owner }, Log: o.Log.WithName("compiled")}
	scales, recorder, err := serveProtections(w.cfg, mgr, w.server, protections, rampartadmission.Deps{
		Cache: mgr.GetCache(), Direct: direct, InForce: reg, Recorder: mgr.GetEventRecorder("rampart"), Mapper: mgr.GetRESTMapper(),
		Policies: policies, Deletion: views.Deletion, ScaleTargets: views.ScaleTargets, Pods: views.Budgets,
		BudgetIndex: views.Budgets.Index(), Nodes: views.Budgets, Owners: views.Budgets, BudgetPartitionThreshold: o.BudgetPartitionThreshold,
		Namespaces: views.Namespaces, ReplicasExempt: o.ReplicasExempt,
		Bin: w.bin.capturer(), NamespaceContentsMax: o.RecycleBinNamespaceMaxBytes, ScaleKeys: views.ScaleTargets, BudgetsSynced: views.Budgets.HasSynced, InstalledBy: o.InstalledBy,
		CompiledPolicies: keeper, OnCRDChange: views.OnCRDChange,
	})
	if err != nil {
		return nil, err
	}
	if err := checks(mgr, views, w.server, reg.Done()); err != nil {
		return nil, err
	}
	if owner, err = webhookOwner(ctx, direct, o.WebhookOwner); err != nil {
		return nil, err
	}
	reg.SetOwner(owner)
	// The leader creates the fence if it is missing, owned as the webhook
	// configuration is.
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		return wait.PollUntilContextCancel(ctx, 5*time.Second, true, func(ctx context.Context) (bool, error) {
			if err := budgetadmit.EnsureFence(ctx, direct, o.Namespace, owner); err != nil {
				o.Log.Info("the budget fence is not there yet; disruptions list their namespace's budgets live meanwhile", "error", err.Error())
				return false, nil
			}
			return true, nil
		})
	})); err != nil {
		return nil, err
	}
	// The leader deletes the change marks of namespaces gone, every ten
	// minutes (see budgetadmit.PruneMarks).
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		wait.UntilWithContext(ctx, func(ctx context.Context) {
			if n, err := budgetadmit.PruneMarks(ctx, direct, views.Budgets.Index()); err != nil {
				o.Log.Info("deleting the budgets' change marks of namespaces gone", "error", err.Error())
			} else if n > 0 {
				o.Log.Info("deleted the budgets' change marks of namespaces gone", "namespaces", n)
			}
		}, 10*time.Minute)
		return nil
	})); err != nil {
		return nil, err
	}
	// A CRD added, changed or removed recompiles its custom resources'
	// replicas at once (and the label webhook's condition reading them).
	views.OnCRDChange(keeper.Poke)
	views.OnCRDChange(reg.Poke)
	if err := watchProtections(ctx, mgr, reg, keeper, views, policies, protections, o.Log); err != nil {
		return nil, err
	}
	if err := controllers(ctx, mgr, o, reg, views, scales, recorder, protections); err != nil {
		return nil, err
	}
	for _, r := range []manager.Runnable{reg, keeper} {
		if err := mgr.Add(r); err != nil {
			return nil, err
		}
	}
	return reg, nil
}

// recycleBin runs the recycle bin's maintainer and outside-API watcher,
// when the bin is on.
func (w wired) recycleBin(ctx context.Context) error {
	if m := w.bin.maintainer(w.direct, w.mgr.GetCache(), w.o); m != nil {
		if err := w.mgr.Add(m); err != nil {
			return err
		}
	}
	outside, err := w.bin.watcher(ctx, w.mgr, w.views, w.mgr.GetEventRecorder("rampart"))
	if err != nil || outside == nil {
		return err
	}
	return w.mgr.Add(outside)
}

// serveProtections serves every protection plugin's routes on the webhook
// server, with deps completed by the clients that read live (labels,
// scales); it returns those for the controllers.
func serveProtections(cfg *rest.Config, mgr ctrl.Manager, server webhookRegistrar, protections []rampartadmission.Protection, deps rampartadmission.Deps) (rampartadmission.Scales, events.EventRecorder, error) {
	meta, err := metadata.NewForConfig(cfg)
	if err != nil {
		return rampartadmission.Scales{}, nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return rampartadmission.Scales{}, nil, err
	}
	deps.Scales = rampartadmission.Scales{Dynamic: dyn, Mapper: mgr.GetRESTMapper()}
	deps.LiveLabels = liveLabels(meta)
	for _, r := range rampartadmission.Routes(rampartadmission.Initialize(protections, deps)) {
		server.Register(r.Path, &webhook.Admission{Handler: r.Handler, WithContextFunc: r.WithContext})
	}
	return deps.Scales, deps.Recorder, nil
}

// webhookRegistrar registers every webhook behind the check that its
// caller is the API server.
type webhookRegistrar struct {
	webhook.Server
	wrap func(http.Handler) http.Handler
}

func (r webhookRegistrar) Register(path string, h http.Handler) { r.Server.Register(path, r.wrap(h)) }

// apiServers are clients of every API server: those named by
// --apiserver-urls, else those listed for the kubernetes Service.
func apiServers(cfg *rest.Config, o Options) (func(context.Context) ([]kubernetes.Interface, error), error) {
	if len(o.APIServerURLs) > 0 {
		return rampartadmission.StaticServers(cfg, o.APIServerURLs)
	}
	if o.WebhookURLHost != "" {
		// A local cluster without the list: its one API server.
		return rampartadmission.StaticServers(cfg, nil)
	}
	return rampartadmission.ClusterServers(cfg)
}

// webhookOwner is the owner reference to ClusterRole name, or nil when name
// is empty.
func webhookOwner(ctx context.Context, c client.Client, name string) (*metav1.OwnerReference, error) {
	if name == "" {
		return nil, nil
	}
	role := &rbacv1.ClusterRole{}
	if err := c.Get(ctx, client.ObjectKey{Name: name}, role); err != nil {
		return nil, fmt.Errorf("--webhook-owner-cluster-role: %w", err)
	}
	return &metav1.OwnerReference{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole", Name: name, UID: role.UID}, nil
}

// metricsOptions serves metrics in plain HTTP (local clusters, where they
// listen on loopback) or, with MetricsSecure, over HTTPS to callers the API
// server authenticates and authorizes for get /metrics (a ServiceMonitor's
// bearer token bound to the chart's rampart-metrics-reader), as kubebuilder
// projects do.
func metricsOptions(o Options) metricsserver.Options {
	opts := metricsserver.Options{BindAddress: o.MetricsAddr}
	if o.Profiling {
		opts.ExtraHandlers = map[string]http.Handler{
			"/debug/pprof/":        http.HandlerFunc(pprof.Index),
			"/debug/pprof/cmdline": http.HandlerFunc(pprof.Cmdline),
			"/debug/pprof/profile": http.HandlerFunc(pprof.Profile),
			"/debug/pprof/symbol":  http.HandlerFunc(pprof.Symbol),
			"/debug/pprof/trace":   http.HandlerFunc(pprof.Trace),
		}
	}
	if o.MetricsSecure {
		opts.SecureServing = true
		opts.FilterProvider = filters.WithAuthenticationAndAuthorization
		opts.TLSOpts = []func(*tls.Config){tlsprofile.Apply}
		opts.CertDir = o.MetricsCertDir
	}
	return opts
}

// delayStop is ctx, ended delay after ctx ends rather than at once, with
// stopping set meanwhile (the readiness check then fails). A replica told
// to stop (a rolling upgrade, a drain of its node) keeps answering the
// webhook calls in flight and those the API server still sends it until
// its Service's endpoints drop it, instead of failing them closed: the
// kube-apiserver's own --shutdown-delay-duration, for the same reason.
// controller-runtime ends the webhook server, and the contexts of the
// requests it is serving, with the manager's context.
func delayStop(ctx context.Context, delay time.Duration, stopping *atomic.Bool, log logr.Logger) context.Context {
	if delay <= 0 {
		return ctx
	}
	out, cancel := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		select {
		case <-ctx.Done():
		case <-out.Done():
			return
		}
		stopping.Store(true)
		log.Info("stopping: serving webhook calls a while longer, unready", "for", delay)
		time.Sleep(delay)
		cancel()
	}()
	return out
}
