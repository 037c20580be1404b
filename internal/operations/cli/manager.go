package cli

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/plumbing/installation"

	"github.com/rampart-io/rampart/internal/protection/budget"
	"github.com/rampart-io/rampart/internal/protection/recyclebin"
	"github.com/rampart-io/rampart/internal/servers/manager"
)

func newManagerCommand() *cobra.Command {
	o := manager.Options{RecycleBinNamespaceMaxBytes: recyclebin.DefaultNamespaceContentsMax}
	var kubeconfig string
	var exemptSAs []string
	var installedBy string
	marks := true
	zapOpts := zap.Options{}
	cmd := &cobra.Command{
		Use:   "manager",
		Short: "Run the admission webhooks and controllers (the in-cluster server)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := zap.New(zap.UseFlagOptions(&zapOpts))
			ctrl.SetLogger(log)
			o.Log = log
			o.Version = Version
			o.NoBudgetMarks = !marks
			if err := exemptServiceAccounts(&o.ReplicasExempt, exemptSAs); err != nil {
				return err
			}
			installed, err := installation.Parse(installedBy)
			if err != nil {
				return err
			}
			o.InstalledBy = installed
			cfg, err := restConfig(kubeconfig)
			if err != nil {
				return err
			}
			return manager.Run(cmd.Context(), cfg, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig; empty means $KUBECONFIG or the in-cluster service account")
	f.StringVar(&o.Namespace, "namespace", "rampart-system", "the manager's own namespace (leases, never judged)")
	f.StringVar(&o.WebhookHost, "webhook-bind-host", "", "address the webhook server listens on (empty: all)")
	f.IntVar(&o.WebhookPort, "webhook-port", 9443, "webhook server port")
	f.StringVar(&o.WebhookURLHost, "webhook-url-host", "", "register webhooks by URL https://HOST:PORT (local clusters)")
	f.StringSliceVar(&o.WebhookReplicas, "webhook-replica-urls", nil, "base URLs of every local replica's webhook server, this one included (local clusters with several managers)")
	f.StringSliceVar(&o.APIServerURLs, "apiserver-urls", nil, "every kube-apiserver's URL, when default/kubernetes does not list them (local clusters): a protection is admitted once each enforces it")
	f.StringVar(&o.WebhookService, "webhook-service", "", "register webhooks by this Service in --namespace (in a cluster)")
	f.StringVar(&o.WebhookClientCA, "webhook-client-ca", "", "PEM CA file: the webhooks answer only callers with a client certificate it signed, the one the API server presents to webhooks (its admission configuration's kubeConfigFile). Empty: any caller that reaches the port (a warning is logged)")
	f.StringSliceVar(&o.WebhookClientNames, "webhook-client-names", nil, "common or DNS names one of which the client certificate must carry, e.g. kube-apiserver (needs --webhook-client-ca)")
	f.StringVar(&o.WebhookOwner, "webhook-owner-cluster-role", "", "ClusterRole that owns the webhook configurations, so that deleting it (helm uninstall) deletes them")
	f.StringVar(&o.CertDir, "cert-dir", "/tmp/rampart-webhook-certs", "directory with tls.crt and tls.key")
	f.BoolVar(&o.GenerateCerts, "generate-certs", true, "make and renew a CA and serving certificate in --cert-dir and register that CA")
	f.StringVar(&o.CASecret, "ca-secret", "rampart-webhook-ca", "Secret in --namespace holding the generated CA, shared by replicas (empty: keep it in --cert-dir)")
	f.DurationVar(&o.CertValidity, "cert-validity", 30*24*time.Hour, "lifetime of generated serving certificates; renewed after two thirds")
	f.StringVar(&o.MetricsAddr, "metrics-bind-address", ":8080", "Prometheus metrics address ('0' disables)")
	f.BoolVar(&o.MetricsSecure, "metrics-secure", false, "serve metrics over HTTPS, only to callers allowed to get /metrics")
	f.StringVar(&o.MetricsCertDir, "metrics-cert-dir", "", "directory with tls.crt and tls.key for --metrics-secure (empty: a self-signed certificate made at start)")
	f.BoolVar(&o.Profiling, "profiling", false, "serve Go profiles at /debug/pprof/ on the metrics address (with --metrics-secure, to callers allowed to get /debug/pprof/*)")
	f.StringVar(&o.ProbeAddr, "health-probe-bind-address", ":8081", "health and readiness probe address")
	f.BoolVar(&o.LeaderElection, "leader-elect", true, "elect a leader for controllers (webhooks serve on every replica)")
	f.DurationVar(&o.BudgetDisruptionTimeout, "budget-disruption-timeout", manager.DefaultBudgetDisruptionTimeout,
		"how long a disruption a PodUnavailableBudget admitted may go unobserved before the budget gets it back")
	f.DurationVar(&o.ShutdownDelay, "shutdown-delay", 5*time.Second,
		"how long the manager keeps serving webhook calls after SIGTERM, unready, before it stops: calls in flight and those sent before its Service's endpoints drop it are answered, not failed closed (0: stop at once)")
	f.Float64Var(&o.BudgetPartitionThreshold, "budget-partition-threshold", budget.DefaultPartitionThreshold,
		"share of the nodes a PodUnavailableBudget's pods run on that, NotReady at once (two at least), is taken for a partition: pods there are then decided like healthy ones, whatever the budget's unhealthyPodPolicy (kube-controller-manager's --unhealthy-zone-threshold default)")
	f.IntVar(&o.BudgetFenceAbove, "budget-fence-above", budget.DefaultFenceAbove,
		"number of PodUnavailableBudgets in a namespace from which a disruption there is judged after one write of the budget fence (rampart-fence in --namespace) instead of a live list of the namespace's budgets: the list's cost grows with the budgets, the fence's does not")
	f.BoolVar(&marks, "budget-change-marks", true,
		"mark each creation and spec change of a PodUnavailableBudget, before the API server stores it, in its namespace's rampart-changes.NAMESPACE in --namespace, so that a disruption knows the manager has seen every budget accepted before it with one read of those marks, instead of a list of the namespace's budgets or a write of the fence (false: list or fence, as --budget-fence-above says)")
	addReplicasExemptFlags(f, &o.ReplicasExempt, &exemptSAs)
	f.BoolVar(&o.CompiledPolicies, "compiled-policies", true,
		"have the API server enforce the static rules itself as ValidatingAdmissionPolicies kept applied by the leader (the label rules, and each enforced ProtectionPolicy's Always and built-in workloads' replicas), and narrow the label webhooks once every API server does: those rules then hold while Rampart is down")
	f.StringVar(&o.RecycleBinDir, "recycle-bin-dir", "",
		"turn the recycle bin on: keep a copy of every protected object (rampart.io/protection label or ProtectionPolicy) in this directory before its delete is admitted; a delete whose copy cannot be stored is refused (off the cluster's etcd: a local directory, or a volume in a cluster); --recycle-bin-store DIR does the same")
	f.StringVar(&o.RecycleBinStore, "recycle-bin-store", "",
		"turn the recycle bin on, as --recycle-bin-dir, in a directory or an S3-compatible bucket: s3://BUCKET/PREFIX?endpoint=https://HOST:PORT&region=NAME&pathStyle=true&caFile=PATH&credentialsFile=PATH&profile=NAME (all parameters optional; default: AWS S3). "+
			"The credentials come from credentialsFile, else AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, else ~/.aws/credentials; never from the location")
	f.StringVar(&o.RecycleBinKeyFile, "recycle-bin-key-file", "",
		"32-byte key that seals Secrets in the recycle bin (AES-256-GCM); without it, deletes of protected Secrets are refused")
	f.DurationVar(&o.RecycleBinRetention, "recycle-bin-retention", 30*24*time.Hour,
		"how long the recycle bin keeps copies of protected objects (RecyclePolicies set their own retention)")
	f.Var(&byteQuantity{n: &o.RecycleBinNamespaceMaxBytes}, "recycle-bin-namespace-max-size",
		"what the recycle bin keeps of a protected namespace's contents (rampart.io/protection label or ProtectionPolicy on the namespace) as the namespace controller deletes them, per namespace (each replica counts its own share), such as 64Mi; past it the rest goes without a copy, with a ContentsNotKept Event on the namespace; 0 keeps none (RecyclePolicies still keep what they select)")
	f.DurationVar(&o.RecycleBinMaintainEvery, "recycle-bin-maintain-every", manager.DefaultMaintainEvery,
		"how often the leader evicts copies past their retention or size cap and publishes the bin's summary (ConfigMap rampart-recycle-bin, shown by rampart status)")
	f.DurationVar(&o.RecycleBinNotDeletedAfter, "recycle-bin-not-deleted-after", recyclebin.DefaultNotDeletedAfter,
		"how long after its copy was stored an object still alive counts as not deleted (its delete was refused after the copy, e.g. by another webhook); longer than any admission of a delete can take")
	f.StringVar(&o.BackupStore, "backup-store", "",
		"where the leader writes the backups Backup objects in --namespace ask for: a directory or s3://BUCKET/PREFIX?endpoint=... as --recycle-bin-store takes it (the manager then needs to get and list every resource)")
	f.StringVar(&o.BackupKeyFile, "backup-key-file", "",
		"32-byte key that seals Secrets in backups (default: --recycle-bin-key-file); without one, a Backup that would hold a Secret fails, saying so")
	f.StringSliceVar(&o.EtcdSnapshotSecrets, "etcd-snapshot-secrets", nil,
		"the only Secrets in --namespace (keys endpoints, ca.crt, tls.crt, tls.key) that Backups with an etcdSnapshot may name; the manager needs get on each, by name")
	f.StringVar(&o.EtcdSpaceSecret, "etcd-space-secret", "",
		"a Secret in --namespace (keys endpoints, ca.crt, tls.crt, tls.key, as --etcd-snapshot-secrets') with which the leader watches etcd's database against its quota: the rampart_etcd_* metrics and alerts, and rampart status; the manager needs get on it, by name")
	f.DurationVar(&o.EtcdSpaceEvery, "etcd-space-every", 30*time.Second, "how often the leader looks at etcd's space with --etcd-space-secret (each look reads every key's latest value once)")
	f.Float64Var(&o.EtcdSpaceWarnShare, "etcd-space-warn-share", 0.8, "share of etcd's quota from which rampart_etcd_space_warning is 1 (the RampartEtcdSpaceLow alert)")
	f.Int64Var(&o.EtcdSpaceQuota, "etcd-space-quota-bytes", 0, "etcd's --quota-backend-bytes, for members older than etcd 3.6 that do not report it (default etcd's 2 GiB)")
	f.StringVar(&installedBy, "installed-by", "",
		"how the manager was installed, so that denials and conditions name the way out that applies: helm (the chart sets it: chart values), rampart-up (rampart up sets it: its flags), empty (by hand: the manager's flags and RBAC)")
	return cmd
}

// addReplicasExemptFlags are the flags naming who the explicit-replicas
// label never denies: the manager's, and the compiled policies' alike.
func addReplicasExemptFlags(f *pflag.FlagSet, s *v1alpha1.Subjects, serviceAccounts *[]string) {
	f.StringSliceVar(&s.Users, "replicas-exempt-users", nil, "users the rampart.io/explicit-replicas label never denies")
	f.StringSliceVar(&s.Groups, "replicas-exempt-groups", nil, "groups the rampart.io/explicit-replicas label never denies")
	f.StringSliceVar(serviceAccounts, "replicas-exempt-service-accounts", nil,
		"service accounts (NAMESPACE:NAME) the rampart.io/explicit-replicas label never denies, e.g. kube-system:horizontal-pod-autoscaler")
}

// exemptServiceAccounts adds --replicas-exempt-service-accounts to s.
func exemptServiceAccounts(s *v1alpha1.Subjects, flag []string) error {
	for _, sa := range flag {
		ns, name, ok := strings.Cut(sa, ":")
		if !ok || ns == "" || name == "" {
			return fmt.Errorf("--replicas-exempt-service-accounts: %q is not NAMESPACE:NAME", sa)
		}
		s.ServiceAccounts = append(s.ServiceAccounts, v1alpha1.ServiceAccountRef{Namespace: ns, Name: name})
	}
	return nil
}

// byteQuantity is a flag of a size as Kubernetes writes one (64Mi, 1G,
// 0), as the chart's values and RecyclePolicy's maxSize are written.
type byteQuantity struct{ n *int64 }

func (q *byteQuantity) String() string {
	if q.n == nil {
		return ""
	}
	return resource.NewQuantity(*q.n, resource.BinarySI).String()
}

func (q *byteQuantity) Set(s string) error {
	v, err := resource.ParseQuantity(s)
	if err != nil || v.Sign() < 0 {
		return fmt.Errorf("%q is not a size such as 64Mi or 0", s)
	}
	*q.n = v.Value()
	return nil
}

func (*byteQuantity) Type() string { return "size" }
