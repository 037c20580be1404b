package localcluster

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rampart-io/rampart/api/v1alpha1"
	chart "github.com/rampart-io/rampart/charts/rampart"
)

// ManagerNamespace is where the local manager keeps its leases and events.
const ManagerNamespace = "rampart-system"

// installRampart does what the Helm chart does in a real cluster: the
// namespace, the CRDs, and the manager's RBAC bound to its user.
func (c *Cluster) installRampart(ctx context.Context) error {
	objs, err := c.chartObjects()
	if err != nil {
		return err
	}
	cl, err := c.applyAll(ctx, objs)
	if err != nil {
		return err
	}
	// CRDs serve only once Established.
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, startTimeout, true, func(ctx context.Context) (bool, error) {
		for _, o := range objs {
			if o.GetKind() != "CustomResourceDefinition" {
				continue
			}
			crd := &unstructured.Unstructured{}
			crd.SetGroupVersionKind(o.GroupVersionKind())
			if err := cl.Get(ctx, client.ObjectKey{Name: o.GetName()}, crd); err != nil {
				return false, nil
			}
			conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
			if !established(conds) {
				return false, nil
			}
		}
		return true, nil
	})
}

// chartObjects are the objects installRampart applies, the namespace
// first.
func (c *Cluster) chartObjects() ([]*unstructured.Unstructured, error) {
	objs, err := manifests()
	if err != nil {
		return nil, err
	}
	objs = append(objs, localBindings()...)
	objs = append(objs, customResourceRights(c.opts.CustomResourceGroups)...)
	objs = append(objs, backupRights(c.opts.BackupStore)...)
	etcdSecret, err := c.etcdSecrets()
	if err != nil {
		return nil, err
	}
	objs = append(objs, etcdSecret...)
	return append(objs, metricsScraper()...), nil
}

// UninstallRampart removes Rampart from the running cluster as `helm
// uninstall` removes the chart, in helm's order (its UninstallOrder): the
// webhook configuration first, then the managers stop (helm deletes their
// Deployment) while every other object installRampart applied is deleted,
// but the CRDs, which helm keeps (and with them every policy and budget),
// and Rampart's namespace, which helm did not create. What the ClusterRole
// rampart-manager owns (everything the managers write when started with
// --webhook-owner-cluster-role=rampart-manager, as the chart starts them)
// goes with it through the garbage collector.
func (c *Cluster) UninstallRampart(ctx context.Context) error {
	objs, err := c.chartObjects()
	if err != nil {
		return err
	}
	cl, err := client.New(c.Config, client.Options{})
	if err != nil {
		return err
	}
	del := func(keep func(kind string) bool) error {
		for _, o := range objs {
			if k := o.GetKind(); k == "Namespace" || k == "CustomResourceDefinition" || !keep(k) {
				continue
			}
			if err := cl.Delete(ctx, o); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("delete %s %s: %w", o.GetKind(), o.GetName(), err)
			}
		}
		return nil
	}
	webhooks := func(kind string) bool { return strings.HasSuffix(kind, "WebhookConfiguration") }
	if err := del(webhooks); err != nil {
		return err
	}
	var wg sync.WaitGroup
	stopped := make([]error, len(c.ports.managers))
	for i := range c.ports.managers {
		wg.Go(func() { stopped[i] = c.StopComponent(ManagerName(i)) })
	}
	err = del(func(kind string) bool { return !webhooks(kind) })
	wg.Wait()
	return errors.Join(append(stopped, err)...)
}

// ReinstallRampart installs Rampart again after UninstallRampart, as
// `helm install` would, and returns once the API server calls its webhook
// and honours the answer.
func (c *Cluster) ReinstallRampart(ctx context.Context) error {
	if err := c.installRampart(ctx); err != nil {
		return err
	}
	for i := range c.ports.managers {
		if err := c.StartManager(ctx, i); err != nil {
			return err
		}
	}
	return c.waitWebhookEnforced(ctx)
}

// RestartManagers restarts the manager replicas one after the other, as
// a rolling restart of the chart's Deployment does: each is stopped
// (SIGTERM, then SIGKILL after 15 s) and started again, and is ready,
// before the next.
func (c *Cluster) RestartManagers(ctx context.Context) error {
	for i := range c.ports.managers {
		if err := c.StopComponent(ManagerName(i)); err != nil {
			return err
		}
		if err := c.StartManager(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

// applyAll server-side applies objs as rampart-up.
func (c *Cluster) applyAll(ctx context.Context, objs []*unstructured.Unstructured) (client.Client, error) {
	cl, err := client.New(c.Config, client.Options{})
	if err != nil {
		return nil, err
	}
	for _, o := range objs {
		if err := cl.Apply(ctx, client.ApplyConfigurationFromUnstructured(o), client.FieldOwner("rampart-up"), client.ForceOwnership); err != nil {
			return nil, fmt.Errorf("apply %s %s: %w", o.GetKind(), o.GetName(), err)
		}
	}
	return cl, nil
}

func established(conds []any) bool {
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}

// manifests decodes the embedded CRDs and RBAC, the namespace first.
func manifests() ([]*unstructured.Unstructured, error) {
	ns := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Namespace",
		"metadata": map[string]any{"name": ManagerNamespace},
	}}
	out := []*unstructured.Unstructured{ns}
	err := fs.WalkDir(chart.Manifests, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") {
			return err
		}
		data, err := chart.Manifests.ReadFile(path)
		if err != nil {
			return err
		}
		objs, err := decodeManifests(path, data)
		for _, u := range objs {
			if u.GetNamespace() == "" && u.GetKind() == "Role" {
				u.SetNamespace(ManagerNamespace)
			}
		}
		out = append(out, objs...)
		return err
	})
	return out, err
}

// decodeManifests decodes the YAML documents of one file.
func decodeManifests(name string, data []byte) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return out, fmt.Errorf("%s: %w", name, err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

// localBindings bind the manager's roles to its local user; in a real
// cluster the chart binds them to the manager's service account.
func localBindings() []*unstructured.Unstructured {
	subject := []any{map[string]any{"kind": "User", "name": ManagerUser, "apiGroup": "rbac.authorization.k8s.io"}}
	bind := func(kind, roleKind, ns string) *unstructured.Unstructured {
		meta := map[string]any{"name": "rampart-manager"}
		if ns != "" {
			meta["namespace"] = ns
		}
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": meta,
			"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": roleKind, "name": "rampart-manager"},
			"subjects": subject,
		}}
	}
	return []*unstructured.Unstructured{
		bind("ClusterRoleBinding", "ClusterRole", ""),
		bind("RoleBinding", "Role", ManagerNamespace),
	}
}

// customResourceRights let the manager list and watch the custom resources
// of groups, as the chart does with manager.customResourceGroups.
func customResourceRights(groups []string) []*unstructured.Unstructured {
	if len(groups) == 0 {
		return nil
	}
	var apiGroups []any
	for _, g := range groups {
		apiGroups = append(apiGroups, g)
	}
	return managerRights("rampart-manager-custom-resources", map[string]any{"apiGroups": apiGroups, "resources": []any{"*"}, "verbs": []any{"list", "watch"}})
}

// backupRights let the manager read every resource for Backups, as the
// chart does with manager.backup.
func backupRights(store string) []*unstructured.Unstructured {
	if store == "" {
		return nil
	}
	return managerRights("rampart-manager-backup", map[string]any{"apiGroups": []any{"*"}, "resources": []any{"*"}, "verbs": []any{"get", "list"}})
}

// EtcdSnapshotSecret is the Secret with the local etcd's endpoint and
// a client certificate that a local cluster makes for Backups with an
// etcdSnapshot (BackupStore): root's, since etcd lets only root take a
// snapshot once its authentication is on (etcdauth.go); the API server's
// without it.
const EtcdSnapshotSecret = "rampart-etcd-snapshot"

// EtcdSpaceSecret is the Secret the managers watch etcd's space with
// (EtcdSpace): the reader's certificate, which may read /registry/ and
// ask etcd's status and alarms, nothing more.
const EtcdSpaceSecret = "rampart-etcd-reader"

// etcdSecrets are EtcdSnapshotSecret and EtcdSpaceSecret as the cluster
// uses them and, as the chart grants them
// (manager.backup.etcdSnapshot.secretNames, manager.etcdSpace.secretName),
// get on each alone, in a Role per use.
func (c *Cluster) etcdSecrets() ([]*unstructured.Unstructured, error) {
	type use struct{ role, secret, user string }
	var uses []use
	if c.opts.BackupStore != "" {
		user := EtcdAPIServerUser
		if c.etcdAuth() {
			user = EtcdRootUser
		}
		uses = append(uses, use{"rampart-manager-etcd-snapshot", EtcdSnapshotSecret, user})
	}
	if c.opts.EtcdSpace && !c.opts.Unprotected {
		user := EtcdAPIServerUser
		if c.etcdAuth() {
			user = EtcdReaderUser
		}
		uses = append(uses, use{"rampart-manager-etcd-space", EtcdSpaceSecret, user})
	}
	var objs []*unstructured.Unstructured
	subjects := []any{map[string]any{"kind": "User", "name": ManagerUser, "apiGroup": "rbac.authorization.k8s.io"}}
	for _, u := range uses {
		id := c.EtcdClient(u.user)
		data := map[string]any{"endpoints": base64.StdEncoding.EncodeToString([]byte(c.EtcdURL()))}
		for key, file := range map[string]string{"ca.crt": id.CACert, "tls.crt": id.Cert, "tls.key": id.Key} {
			b, err := os.ReadFile(file)
			if err != nil {
				return nil, err
			}
			data[key] = base64.StdEncoding.EncodeToString(b)
		}
		rule := map[string]any{"apiGroups": []any{""}, "resources": []any{"secrets"}, "resourceNames": []any{u.secret}, "verbs": []any{"get"}}
		objs = append(objs,
			&unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": u.secret, "namespace": ManagerNamespace}, "data": data}},
			&unstructured.Unstructured{Object: map[string]any{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
				"metadata": map[string]any{"name": u.role, "namespace": ManagerNamespace}, "rules": []any{rule}}},
			&unstructured.Unstructured{Object: map[string]any{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
				"metadata": map[string]any{"name": u.role, "namespace": ManagerNamespace},
				"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": u.role}, "subjects": subjects}})
	}
	return objs, nil
}

// managerRights are a ClusterRole of one rule bound to the manager's user.
func managerRights(name string, rule map[string]any) []*unstructured.Unstructured {
	return []*unstructured.Unstructured{
		{Object: map[string]any{
			"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": map[string]any{"name": name},
			"rules": []any{rule},
		}},
		{Object: map[string]any{
			"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": map[string]any{"name": name},
			"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
			"subjects": []any{map[string]any{"kind": "User", "name": ManagerUser, "apiGroup": "rbac.authorization.k8s.io"}},
		}},
	}
}

// ManagerName is the process name of manager replica i.
func ManagerName(i int) string {
	if i == 0 {
		return "rampart-manager"
	}
	return "rampart-manager-" + strconv.Itoa(i)
}

func (c *Cluster) startManager(ctx context.Context) error {
	for i := range c.ports.managers {
		if err := c.run(ManagerName(i), c.opts.Rampart, c.managerArgs(i)...); err != nil {
			return err
		}
	}
	for i := range c.ports.managers {
		if err := c.waitManagerReady(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) managerArgs(i int) []string {
	var urls []string
	for _, mp := range c.ports.managers {
		urls = append(urls, "https://127.0.0.1:"+strconv.Itoa(mp.webhook))
	}
	mp := c.ports.managers[i]
	// The recycle bin, on by default, shared by the replicas.
	var bin []string
	key := "--recycle-bin-key-file=" + c.pkiFile(RecycleBinKey)
	switch {
	case c.opts.NoRecycleBin:
	case c.opts.RecycleBinStore != "":
		bin = []string{"--recycle-bin-store=" + c.opts.RecycleBinStore, key}
	default:
		bin = []string{"--recycle-bin-dir=" + c.path(RecycleBinDir), key}
	}
	if c.opts.BackupStore != "" {
		bin = append(bin, "--backup-store="+c.opts.BackupStore, "--backup-key-file="+c.pkiFile(RecycleBinKey), "--etcd-snapshot-secrets="+EtcdSnapshotSecret)
	}
	if c.opts.EtcdSpace {
		bin = append(bin, "--etcd-space-secret="+EtcdSpaceSecret)
	}
	args := append([]string{"manager",
		"--kubeconfig=" + c.path(managerID.file),
		"--namespace=" + ManagerNamespace,
		"--webhook-url-host=127.0.0.1",
		"--webhook-bind-host=127.0.0.1",
		"--webhook-port=" + strconv.Itoa(mp.webhook),
		// The API server calls each replica by its own URL (no Service
		// whose endpoints drop a stopping one): a second answers what is
		// in flight.
		"--shutdown-delay=1s",
		"--cert-dir=" + c.path("manager", strconv.Itoa(i), "certs"),
		"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(mp.metrics),
		// As the chart runs it: HTTPS, only for callers allowed to get
		// /metrics (ScrapeManagerMetrics), with a certificate of the
		// local CA.
		"--metrics-secure", "--metrics-cert-dir=" + c.pkiFile("manager-metrics"),
		"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(mp.health),
		// Its messages name rampart up's flags, not the chart's values.
		"--installed-by=rampart-up",
	}, append(append(bin, c.managerClientAuthArgs()...), c.opts.ManagerArgs...)...)
	if len(urls) > 1 {
		args = append(args, "--webhook-replica-urls="+strings.Join(urls, ","))
	}
	if servers := c.APIServerURLs(); len(servers) > 1 {
		args = append(args, "--apiserver-urls="+strings.Join(servers, ","))
	}
	return args
}

func (c *Cluster) waitManagerReady(ctx context.Context, i int) error {
	return c.waitHealthy(ctx, ManagerName(i), "http://127.0.0.1:"+strconv.Itoa(c.ports.managers[i].health)+"/readyz", nil)
}

// StartManager starts manager replica i again after StopComponent or
// KillComponent(ManagerName(i)), on the same ports, and waits until it is
// ready (serving, and its webhook configuration registered).
func (c *Cluster) StartManager(ctx context.Context, i int) error {
	if i < 0 || i >= len(c.ports.managers) {
		return fmt.Errorf("no manager replica %d: the cluster has %d", i, len(c.ports.managers))
	}
	c.forgetStopped(ManagerName(i))
	if err := c.run(ManagerName(i), c.opts.Rampart, c.managerArgs(i)...); err != nil {
		return err
	}
	return c.waitManagerReady(ctx, i)
}

// WebhookURL is manager replica 0's webhook server.
func (c *Cluster) WebhookURL() string {
	return "https://127.0.0.1:" + strconv.Itoa(c.ports.managers[0].webhook)
}

// MetricsURL is manager replica 0's Prometheus endpoint.
func (c *Cluster) MetricsURL() string { return c.ManagerMetricsURL(0) }

// ManagerMetricsURL is manager replica i's Prometheus endpoint: HTTPS,
// for callers allowed to get /metrics (see ScrapeManagerMetrics).
func (c *Cluster) ManagerMetricsURL(i int) string {
	return "https://127.0.0.1:" + strconv.Itoa(c.ports.managers[i].metrics) + "/metrics"
}

// waitWebhookEnforced proves the whole admission path: a protected probe
// object is deleted with dryRun until the API server returns Rampart's
// denial. Registration propagates to the API server through a watch, so a
// ready manager alone does not mean enforcement.
func (c *Cluster) waitWebhookEnforced(ctx context.Context) error {
	cs, err := c.Clientset()
	if err != nil {
		return err
	}
	cms := cs.CoreV1().ConfigMaps(metav1.NamespaceDefault)
	probe := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Name:   "rampart-readiness-probe",
		Labels: map[string]string{v1alpha1.LabelProtection: string(v1alpha1.ProtectionAlways)},
	}}
	if _, err := cms.Create(ctx, probe, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	var last error
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, startTimeout, true, func(ctx context.Context) (bool, error) {
		if err := c.exitedEarly(ManagerName(0)); err != nil {
			return false, err
		}
		last = cms.Delete(ctx, probe.Name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsForbidden(last) && strings.Contains(last.Error(), v1alpha1.LabelProtection), nil
	})
	if err != nil {
		return fmt.Errorf("the API server does not enforce Rampart's webhook (last answer to a protected delete: %v); see %s: %w",
			last, c.path("logs", "rampart-manager.log"), err)
	}
	patch := []byte(`{"metadata":{"labels":{"` + v1alpha1.LabelProtection + `":null}}}`)
	if _, err := cms.Patch(ctx, probe.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return err
	}
	return cms.Delete(ctx, probe.Name, metav1.DeleteOptions{})
}
