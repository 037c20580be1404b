package drill

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/operations/restore"
	"github.com/rampart-io/rampart/internal/protection/recyclebin"
)

// LedgerGroup is the API group of etcd-direct-delete's custom resources:
// one name on both sides (it runs on local clusters only, one per side),
// so that the manager may be granted it as a user grants the groups of
// their key custom resources (the chart's manager.customResourceGroups).
const LedgerGroup = "ledgers.drill.rampart.io"

// CustomResourceGroups are the groups the drills' managers must list and
// watch.
var CustomResourceGroups = []string{LedgerGroup}

var recyclePoliciesGVR = schema.GroupVersionResource{Group: "rampart.io", Version: "v1alpha1", Resource: "recyclepolicies"}

// kept is one object a recovery drill sets up and counts back.
type kept struct {
	gvr             schema.GroupVersionResource
	namespace, name string
}

// count is how many of objs exist.
func (t Target) count(ctx context.Context, objs []kept) (int, error) {
	n := 0
	for _, o := range objs {
		r := t.Dynamic.Resource(o.gvr)
		var err error
		if o.namespace == "" {
			_, err = r.Get(ctx, o.name, metav1.GetOptions{})
		} else {
			_, err = r.Namespace(o.namespace).Get(ctx, o.name, metav1.GetOptions{})
		}
		switch {
		case err == nil:
			n++
		case !apierrors.IsNotFound(err):
			return 0, err
		}
	}
	return n, nil
}

// restoreFromBin restores, from the local cluster's recycle bin, the newest
// copy of the named object with what went with it (a namespace's
// contents), as `rampart trash restore --with-dependents` does.
func (t Target) restoreFromBin(ctx context.Context, gr schema.GroupResource, namespace, name string) error {
	bin, err := t.Local.RecycleBin()
	if err != nil {
		return err
	}
	listed, err := bin.List(ctx, namespace)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(listed, func(l recyclebin.Listed) bool { return l.Resource == gr && l.Name == name && l.Namespace == namespace })
	if i < 0 {
		return fmt.Errorf("the recycle bin holds no copy of %s/%s", gr, name)
	}
	e, err := bin.Get(ctx, listed[i].StoreName)
	if err != nil {
		return err
	}
	deps, err := bin.Dependents(ctx, e)
	if err != nil {
		return err
	}
	plan, err := recyclebin.PlanRestore(append([]recyclebin.Entry{e}, deps...), restore.Options{})
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(t.Client.Discovery()))
	_, err = plan.Run(ctx, restore.APICluster{Dynamic: t.Dynamic, Mapper: mapper}, false)
	return err
}

// recyclePolicy creates a RecyclePolicy; it is in force once the create
// returns. It returns how to remove it.
func (t Target) recyclePolicy(ctx context.Context, manifest string) (func(), error) {
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(manifest), &u.Object); err != nil {
		return nil, err
	}
	if _, err := t.Dynamic.Resource(recyclePoliciesGVR).Create(ctx, u, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	return func() {
		_ = t.Dynamic.Resource(recyclePoliciesGVR).Delete(context.Background(), u.GetName(), metav1.DeleteOptions{})
	}, nil
}

// namespaceRestore: a namespace nobody protected is deleted by mistake;
// the recycle bin kept what a RecyclePolicy selects, and a restore brings
// it back with its pods.
var namespaceRestore = Drill{
	Name:     "namespace-restore",
	Incident: "an unprotected namespace with its workloads, ConfigMaps, Secrets and Services is deleted by mistake; without a copy everything is lost (ByteDance: rapid recovery from backup data)",
	Run: func(ctx context.Context, t Target) (Loss, error) {
		ns := t.Prefix + "-restore"
		n := max(30/t.Scale, 2)
		if t.Protected && t.Local == nil {
			return Loss{}, errors.New("namespace-restore restores from the local cluster's recycle bin: run it without --kubeconfig")
		}
		var objs []kept
		core := schema.GroupVersionResource{Version: "v1"}
		objs = append(objs, kept{gvr: core.GroupVersion().WithResource("namespaces"), name: ns})
		loss := Loss{Unit: "objects lost (namespace, workloads, ConfigMaps, Secrets, Services)"}
		if t.Protected {
			stop, err := t.recyclePolicy(ctx, fmt.Sprintf(`apiVersion: rampart.io/v1alpha1
kind: RecyclePolicy
metadata: {name: %s}
spec:
  resources:
  - {apiGroups: [""], resources: [namespaces, configmaps, secrets, services]}
  - {apiGroups: [apps], resources: [deployments]}
  namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: %s}}
  retention: 1h`, ns, ns))
			if err != nil {
				return loss, err
			}
			defer stop()
		}
		if err := t.namespace(ctx, ns, nil); err != nil {
			return loss, err
		}
		defer t.cleanupNamespace(ns)
		for i := range n {
			app := fmt.Sprintf("app-%02d", i)
			if _, err := t.Client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: app}, Data: map[string]string{"mode": "live"}}, metav1.CreateOptions{}); err != nil {
				return loss, err
			}
			if _, err := t.Client.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: app}, StringData: map[string]string{"token": "drill"}}, metav1.CreateOptions{}); err != nil {
				return loss, err
			}
			if _, err := t.Client.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: app},
				Spec: corev1.ServiceSpec{Selector: map[string]string{"app": app}, Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{}); err != nil {
				return loss, err
			}
			if _, err := t.Client.AppsV1().Deployments(ns).Create(ctx, deployment(app, 1, nil), metav1.CreateOptions{}); err != nil {
				return loss, err
			}
			for _, r := range []string{"configmaps", "secrets", "services"} {
				objs = append(objs, kept{gvr: core.GroupVersion().WithResource(r), namespace: ns, name: app})
			}
			objs = append(objs, kept{gvr: schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, namespace: ns, name: app})
		}
		loss.Total = len(objs)
		if err := t.waitRunning(ctx, ns, "", n); err != nil {
			return loss, err
		}
		if err := t.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
			return loss, err
		}
		if err := poll(ctx, settle, func(ctx context.Context) (bool, error) {
			_, err := t.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		}); err != nil {
			return loss, fmt.Errorf("the namespace was never deleted: %w", err)
		}
		loss.Measured = map[string]float64{}
		if t.Protected {
			start := time.Now()
			if err := t.restoreFromBin(ctx, schema.GroupResource{Resource: "namespaces"}, "", ns); err != nil {
				return loss, err
			}
			loss.Measured["restore_seconds"] = seconds(time.Since(start))
			if err := t.waitRunning(ctx, ns, "", n); err != nil {
				return loss, fmt.Errorf("the restored workloads' pods never ran: %w", err)
			}
			loss.Measured["pods_running_again_seconds"] = seconds(time.Since(start))
		}
		back, err := t.count(ctx, objs)
		loss.Lost = loss.Total - back
		return loss, err
	},
}

// etcdDirectDelete: key objects are removed with an etcd client, past
// every admission check. Protected, etcd refuses: only the API server may
// write /registry/ (localcluster/etcdauth.go); and what etcd's root
// deletes anyway, Rampart's watch keeps and a restore brings back.
var etcdDirectDelete = Drill{
	Name:     "etcd-direct-delete",
	Incident: "an administrator deletes key objects straight from etcd (a Namespace's workloads, a CRD's custom resources), bypassing every admission check (ByteDance report, data layer)",
	Run: func(ctx context.Context, t Target) (Loss, error) {
		loss := Loss{Unit: "key objects lost (deleted in etcd)"}
		if t.Local == nil {
			return loss, errors.New("etcd-direct-delete needs the local cluster's etcd: run it without --kubeconfig")
		}
		ns := t.Prefix + "-etcd"
		group := LedgerGroup
		n := max(20/t.Scale, 2)
		if err := t.namespace(ctx, ns, nil); err != nil {
			return loss, err
		}
		defer t.cleanupNamespace(ns)
		c := crd("ledgers", "Ledger", group, nil)
		gvr, err := t.createCRD(ctx, c)
		if err != nil {
			return loss, err
		}
		defer t.cleanupCRD(c.Name)
		protection := t.protection(v1alpha1.ProtectionCascading)
		if err := t.createCustomResources(ctx, gvr, "Ledger", ns, n, func(i int) string { return fmt.Sprintf("ledger-%02d", i) }, protection); err != nil {
			return loss, err
		}
		var objs []kept
		var keys []string
		for i := range n {
			name := fmt.Sprintf("ledger-%02d", i)
			objs = append(objs, kept{gvr: gvr, namespace: ns, name: name})
			keys = append(keys, fmt.Sprintf("/registry/%s/%s/%s/%s", group, gvr.Resource, ns, name))
		}
		deployments := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
		for i := range max(n/4, 1) {
			name := fmt.Sprintf("ledger-api-%d", i)
			if _, err := t.Client.AppsV1().Deployments(ns).Create(ctx, deployment(name, 1, protection), metav1.CreateOptions{}); err != nil {
				return loss, err
			}
			objs = append(objs, kept{gvr: deployments, namespace: ns, name: name})
			keys = append(keys, fmt.Sprintf("/registry/deployments/%s/%s", ns, name))
		}
		loss.Total = len(objs)
		if t.Protected {
			// The leader's watch must hold the objects' last state before
			// they vanish: it holds what the API server lists.
			if err := poll(ctx, time.Minute, func(ctx context.Context) (bool, error) {
				return t.watchedAll(ctx, gvr, deployments)
			}); err != nil {
				return loss, fmt.Errorf("the recycle bin's watch never held the drill's objects: %w", err)
			}
		}
		// The administrator's etcdctl holds a certificate etcd's CA
		// signed, not the API server's: with etcd's authentication on
		// (the protected cluster, as rampart up runs it) etcd refuses.
		refused, err := t.deleteInEtcd(ctx, localcluster.EtcdOperatorUser, keys)
		if err != nil {
			return loss, err
		}
		loss.Measured = map[string]float64{"deletes_refused_by_etcd": float64(len(refused))}
		if len(refused) > 0 {
			loss.Denied = refused[0]
		}
		if t.Protected {
			// Root may still delete (etcd's root holds every right); what
			// it deletes, the recycle bin notices and brings back.
			if refused, err := t.deleteInEtcd(ctx, localcluster.EtcdRootUser, keys); err != nil || len(refused) > 0 {
				return loss, fmt.Errorf("root's deletes in etcd: %v %v", err, refused)
			}
			start := time.Now()
			bin, err := t.Local.RecycleBin()
			if err != nil {
				return loss, err
			}
			// Detected: every object kept as DeletedOutsideAPI.
			var detected []recyclebin.Entry
			err = poll(ctx, time.Minute, func(ctx context.Context) (bool, error) {
				detected = detected[:0]
				listed, err := bin.List(ctx, ns)
				if err != nil {
					return false, err
				}
				for _, l := range listed {
					e, err := bin.Get(ctx, l.StoreName)
					if err == nil && e.How == recyclebin.HowOutsideAPI {
						detected = append(detected, e)
					}
				}
				return len(detected) >= len(objs), nil
			})
			loss.Measured["detected_outside_api"] = float64(len(detected))
			if err != nil {
				return loss, fmt.Errorf("%d of %d deleted objects detected: %w", len(detected), len(objs), err)
			}
			loss.Measured["detect_seconds"] = seconds(time.Since(start))
			plan, err := recyclebin.PlanRestore(detected, restore.Options{})
			if err != nil {
				return loss, err
			}
			mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(t.Client.Discovery()))
			if _, err := plan.Run(ctx, restore.APICluster{Dynamic: t.Dynamic, Mapper: mapper}, false); err != nil {
				return loss, err
			}
			loss.Measured["restored_seconds"] = seconds(time.Since(start))
		}
		back, err := t.count(ctx, objs)
		loss.Lost = loss.Total - back
		return loss, err
	},
}

// watchedAll says whether the leader's outside-API watch holds as many
// labelled objects of each resource as the API server lists.
func (t Target) watchedAll(ctx context.Context, gvrs ...schema.GroupVersionResource) (bool, error) {
	metrics, err := t.Local.ScrapeManagerMetrics(ctx, 0)
	if err != nil {
		return false, nil
	}
	for _, gvr := range gvrs {
		list, err := t.Dynamic.Resource(gvr).List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelProtection})
		if err != nil {
			return false, err
		}
		m := regexp.MustCompile(`(?m)^rampart_recyclebin_watched_objects\{resource="` + regexp.QuoteMeta(gvr.GroupResource().String()) + `",selector="` + regexp.QuoteMeta(v1alpha1.LabelProtection) + `"\} (\S+)$`).FindStringSubmatch(metrics)
		if m == nil {
			return false, nil
		}
		if n, _ := strconv.Atoi(m[1]); n != len(list.Items) {
			return false, nil
		}
	}
	return true, nil
}

func seconds(d time.Duration) float64 { return float64(d.Milliseconds()) / 1000 }

// deleteInEtcd deletes keys in the local etcd as user; a delete etcd
// refuses for want of the right is returned, not an error.
func (t Target) deleteInEtcd(ctx context.Context, user string, keys []string) (refused []string, err error) {
	cli, err := t.dialEtcd(ctx, user)
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	for _, k := range keys {
		if _, err := cli.Delete(ctx, k); err != nil {
			if !strings.Contains(err.Error(), "permission denied") {
				return refused, err
			}
			refused = append(refused, fmt.Sprintf("etcd refused %s's delete of %s: %v", user, k, err))
		}
	}
	return refused, nil
}
