package drill

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"github.com/rampart-io/rampart/internal/operations/localcluster"
)

// statefulMaintenance: the ByteDance report's next step is protection for
// "businesses with storage state such as Redis and distributed training
// (storage sharding …)". A sharded store (a StatefulSet of 3 per shard,
// quorum 2) and training jobs (a Deployment of workers per job: one worker
// lost is the job's progress lost) run on a node pool; half of the pool is
// drained for maintenance, as kubectl drain does, while a runaway
// controller deletes pods of both. Unprotected, each shard has the
// PodDisruptionBudget Kubernetes offers (maxUnavailable 1): it holds
// evictions, not deletes, and no PodDisruptionBudget can say "the whole job
// or none" (0 blocks the drain forever, 1 lets every job break), so the
// jobs have none. Protected, one PodUnavailableBudget per shard group
// (groupBy shard, maxUnavailable 1, half of the shards at once) and one
// gang budget over the jobs (one job broken at once) judge both. Then the
// store's budget is swapped for one over the whole store (maxUnavailable
// 1) and the other half of the pool drained, to measure how far that shape
// gets within the drill's time. The pods are counted from the API
// server's watch: the loss is the shards that fell below 2 of 3 and the
// jobs broken while the cap was already taken.
var statefulMaintenance = Drill{
	Name: "stateful-maintenance",
	Incident: "half of a node pool is drained while a runaway controller deletes pods of a sharded store (30 shards of 3) " +
		"and of 4 training jobs of 16 workers; a PodDisruptionBudget per shard does not see deletes, " +
		"one budget over the whole store stalls the drain (ByteDance report: storage sharding, distributed training)",
	Run: runStatefulMaintenance,
}

const (
	shardReplicas = 3
	shardQuorum   = 2
	// jobsBrokenAtOnce is the gang budget's maxGroupsDisrupted.
	jobsBrokenAtOnce = 1
	// podStart is how long a pod takes to become Ready: a replacement
	// leaves its shard short meanwhile, as a store replica syncing does.
	podStart = 2 * time.Second
	// runawayEvery is the runaway controller's pace: one pod deleted
	// every 200 ms, chosen at random from those it sees.
	runawayEvery = 200 * time.Millisecond
	// runawayAtLeast is how many deletes the runaway has answered, deleted
	// or refused, before it may stop.
	runawayAtLeast = 20
	// evictRetry is how long the drain waits after a 429, as t.drain
	// (kubectl drain waits 5 s; a shorter wait only favours the drain).
	evictRetry = 500 * time.Millisecond
	drillPool  = "rampart.io/drill-pool"
)

// maintenance is the drill's size at a scale.
type maintenance struct {
	shards, jobs, workers int
	// nodes is the pool; half of it is drained at once.
	nodes int
	// shardsAtOnce is the store budget's maxGroupsDisrupted.
	shardsAtOnce int
	// window is the drill's time: a drain still going then gives up.
	window time.Duration
	// runaway is how long the runaway controller deletes, from the
	// drain's start: then its owners stop it.
	runaway time.Duration
}

// Four jobs, not one: with a single job, a cap of one job broken at once
// admits every first disruption, so only several jobs show the cap.
func maintenanceAt(scale int) maintenance {
	s := time.Duration(max(scale, 1))
	// Long enough for the grouped budgets' drain with room to spare: a
	// job reads broken for the manager's --budget-disruption-timeout
	// (30 s) after its last pod went, so jobs go at most one per 30 s.
	window := time.Minute
	if s == 1 {
		window = 3 * time.Minute
	}
	return maintenance{
		shards: max(30/int(s), 3), jobs: max(4/int(s), 2), workers: max(16/int(s), 2),
		// Every shard's 3 pods on 3 distinct nodes of the half not drained.
		nodes:        max(12/int(s), 6),
		shardsAtOnce: max(30/int(s)/2, 1),
		window:       window,
		runaway:      max(20*time.Second/s, 10*time.Second),
	}
}

// StatefulMaintenanceNodes is how many nodes stateful-maintenance's pool
// takes at a scale: a local cluster for it needs at least as many.
func StatefulMaintenanceNodes(scale int) int { return maintenanceAt(scale).nodes }

func runStatefulMaintenance(ctx context.Context, t Target) (Loss, error) {
	m := maintenanceAt(t.Scale)
	ns := t.Prefix + "-maintenance"
	loss := Loss{Total: m.shards + m.jobs, Unit: fmt.Sprintf("shards below %d of %d or jobs broken beyond %d at once", shardQuorum, shardReplicas, jobsBrokenAtOnce)}
	if err := t.namespace(ctx, ns, nil); err != nil {
		return loss, err
	}
	defer t.cleanupMaintenance(ns)
	pool, err := t.pool(ctx, m.nodes)
	if err != nil {
		return loss, err
	}
	defer t.releasePool(pool)
	if err := t.createStoreAndJobs(ctx, ns, m); err != nil {
		return loss, err
	}
	if t.Protected {
		err = t.protectStoreAndJobs(ctx, ns, m)
	} else {
		err = t.shardDisruptionBudgets(ctx, ns, m)
	}
	if err != nil {
		return loss, err
	}

	run, err := t.maintain(ctx, ns, m, pool[:m.nodes/2])
	if err != nil {
		return loss, err
	}
	loss.Lost = run.shardsBelowQuorum + run.jobsBeyondCap
	loss.Denied = run.refusal
	loss.Measured = run.figures("")
	loss.Measured["window_seconds"] = m.window.Seconds()
	if !t.Protected || t.Scale > 1 {
		// The whole-store comparison below is a full-scale figure (at
		// test scale it adds a minute to make test and says little).
		return loss, nil
	}
	// The same maintenance under one budget over the whole store: one pod
	// of 3×shards at a time. Every pod now runs on the other half, so it
	// drains as many of those nodes as hold the store pods the first
	// drain had: the same work.
	if err := t.budgets().Namespace(ns).Delete(ctx, "store", metav1.DeleteOptions{}); err != nil {
		return loss, err
	}
	if err := t.budget(ctx, ns, "apiVersion: rampart.io/v1alpha1\nkind: PodUnavailableBudget\nmetadata: {name: store-whole}\n"+
		"spec: {selector: {matchLabels: {app: store}}, maxUnavailable: 1}"); err != nil {
		return loss, err
	}
	if err := t.waitBudget(ctx, ns, "store-whole", 1); err != nil {
		return loss, fmt.Errorf("the whole store's budget: %w", err)
	}
	nodes, err := t.nodesHolding(ctx, ns, pool[m.nodes/2:], run.storePods)
	if err != nil {
		return loss, err
	}
	whole, err := t.maintain(ctx, ns, m, nodes)
	if err != nil {
		return loss, err
	}
	for k, v := range whole.figures("whole_store_budget_") {
		loss.Measured[k] = v
	}
	return loss, nil
}

// createStoreAndJobs starts the store, a StatefulSet per shard, and the
// jobs, a Deployment per job, on the drill's pool, and waits until every
// pod is Ready.
func (t Target) createStoreAndJobs(ctx context.Context, ns string, m maintenance) error {
	onPool := func(labels map[string]string, anti *corev1.Affinity) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{localcluster.PodReadyDelayAnnotation: podStart.String()}},
			Spec: corev1.PodSpec{
				Containers:                    []corev1.Container{{Name: "app", Image: "registry.example/" + labels["app"] + ":1"}},
				NodeSelector:                  map[string]string{drillPool: t.Prefix},
				Affinity:                      anti,
				TerminationGracePeriodSeconds: ptr.To[int64](0),
			},
		}
	}
	for i := range m.shards {
		l := map[string]string{"app": "store", "shard": strconv.Itoa(i)}
		// A shard's replicas on distinct nodes, as a store's operator
		// places them: one node lost is one replica lost.
		anti := &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			LabelSelector: &metav1.LabelSelector{MatchLabels: l}, TopologyKey: corev1.LabelHostname,
		}}}}
		ss := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "shard-" + strconv.Itoa(i)}, Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To[int32](shardReplicas), ServiceName: "store", PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector: &metav1.LabelSelector{MatchLabels: l}, Template: onPool(l, anti),
		}}
		if _, err := t.Client.AppsV1().StatefulSets(ns).Create(ctx, ss, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	for j := range m.jobs {
		l := map[string]string{"app": "train", "job": "job-" + strconv.Itoa(j)}
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "job-" + strconv.Itoa(j)}, Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(m.workers)), Selector: &metav1.LabelSelector{MatchLabels: l}, Template: onPool(l, nil),
		}}
		if _, err := t.Client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	return t.waitReady(ctx, ns, "app in (store,train)", m.shards*shardReplicas+m.jobs*m.workers)
}

// shardDisruptionBudgets gives each shard the PodDisruptionBudget
// Kubernetes offers, and waits until the disruption controller has
// computed them (an eviction is refused before).
func (t Target) shardDisruptionBudgets(ctx context.Context, ns string, m maintenance) error {
	pdbs := t.Client.PolicyV1().PodDisruptionBudgets(ns)
	for i := range m.shards {
		pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "shard-" + strconv.Itoa(i)}, Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: ptr.To(intstr.FromInt32(shardReplicas - shardQuorum)),
			Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": "store", "shard": strconv.Itoa(i)}},
		}}
		if _, err := pdbs.Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	return poll(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		list, err := pdbs.List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		computed := 0
		for _, p := range list.Items {
			if p.Status.ObservedGeneration == p.Generation && p.Status.DisruptionsAllowed == shardReplicas-shardQuorum {
				computed++
			}
		}
		return computed == m.shards, nil
	})
}

// protectStoreAndJobs applies the budgets issue #39 is for: per shard,
// with a cap across shards, and per job as a gang.
func (t Target) protectStoreAndJobs(ctx context.Context, ns string, m maintenance) error {
	if err := t.budget(ctx, ns, fmt.Sprintf("apiVersion: rampart.io/v1alpha1\nkind: PodUnavailableBudget\nmetadata: {name: store}\n"+
		"spec: {selector: {matchLabels: {app: store}}, groupBy: {labelKey: shard}, maxUnavailable: %d, maxGroupsDisrupted: %d}",
		shardReplicas-shardQuorum, m.shardsAtOnce)); err != nil {
		return err
	}
	if err := t.budget(ctx, ns, fmt.Sprintf("apiVersion: rampart.io/v1alpha1\nkind: PodUnavailableBudget\nmetadata: {name: train}\n"+
		"spec: {selector: {matchLabels: {app: train}}, groupBy: {labelKey: job}, gang: true, maxGroupsDisrupted: %d}", jobsBrokenAtOnce)); err != nil {
		return err
	}
	for name, pods := range map[string]int64{"store": int64(m.shards * shardReplicas), "train": int64(m.jobs * m.workers)} {
		if err := t.waitGroupsWhole(ctx, ns, name, pods); err != nil {
			return err
		}
	}
	return nil
}

// waitGroupsWhole waits until a grouped budget is Ready and counts every
// one of its pods available and no group disrupted.
func (t Target) waitGroupsWhole(ctx context.Context, ns, name string, pods int64) error {
	var status map[string]any
	err := poll(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		u, err := t.budgets().Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		status, _ = u.Object["status"].(map[string]any)
		available, _ := status["currentAvailable"].(int64)
		disrupted, _ := status["disruptedGroups"].(int64)
		conds, _ := status["conditions"].([]any)
		for _, c := range conds {
			if c, ok := c.(map[string]any); ok && c["type"] == "Ready" && c["status"] == "True" {
				return available == pods && disrupted == 0, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("budget %s/%s never whole (status %v): %w", ns, name, status, err)
	}
	return nil
}

func (t Target) budgets() dynamic.NamespaceableResourceInterface {
	return t.Dynamic.Resource(windowsGVR.GroupVersion().WithResource("podunavailablebudgets"))
}

func (t Target) cleanupMaintenance(ns string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The budgets first: the namespace's deletion of the pods must not
	// wait on them.
	_ = t.budgets().Namespace(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	t.forceDeletePods(ns)
	t.cleanupNamespace(ns)
}

// maintenanceRun is what one drain under the runaway controller did.
type maintenanceRun struct {
	drain             time.Duration
	drained, left     int
	storePods         int
	storeLeft         int
	deleted, refused  int
	refusal           string
	shardsBelowQuorum int
	mostShardsShort   int
	jobBreaks         int
	breaksBeyondCap   int
	jobsBeyondCap     int
	mostJobsBroken    int
}

func (r maintenanceRun) figures(prefix string) map[string]float64 {
	return map[string]float64{
		prefix + "drain_seconds":              seconds(r.drain),
		prefix + "drained_pods":               float64(r.drained),
		prefix + "pods_left_on_drained":       float64(r.left),
		prefix + "store_pods_to_drain":        float64(r.storePods),
		prefix + "store_pods_left_on_drained": float64(r.storeLeft),
		prefix + "runaway_deletes":            float64(r.deleted),
		prefix + "runaway_refused":            float64(r.refused),
		prefix + "shards_below_quorum":        float64(r.shardsBelowQuorum),
		prefix + "most_shards_short":          float64(r.mostShardsShort),
		prefix + "job_breaks":                 float64(r.jobBreaks),
		prefix + "job_breaks_beyond_cap":      float64(r.breaksBeyondCap),
		prefix + "most_jobs_broken_at_once":   float64(r.mostJobsBroken),
	}
}

// maintain drains nodes as kubectl drain does (cordon, evict each pod,
// retry a 429, wait until the pod is gone) until m.window passes, while
// the runaway controller deletes pods for m.runaway; then it uncordons the
// nodes, waits until every pod is Ready again, and returns what the watch
// saw.
func (t Target) maintain(ctx context.Context, ns string, m maintenance, nodes []string) (maintenanceRun, error) {
	var run maintenanceRun
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	w, err := t.watchQuorum(watchCtx, ns, m)
	if err != nil {
		return run, err
	}
	start := time.Now()
	// The runaway stops after m.runaway and runawayAtLeast deletes
	// answered, whichever is later (within the window): on a loaded
	// machine a delete can take seconds, and a runaway that made three
	// deletes shows nothing of what the budgets refuse.
	runawayCtx, stopRunaway := context.WithTimeout(ctx, m.window)
	runaway := make(chan struct{})
	var deleted, refused atomic.Int32
	var refusal atomic.Value
	go func() {
		defer close(runaway)
		defer stopRunaway()
		rng := rand.New(rand.NewPCG(uint64(start.UnixNano()), 39))
		for runawayCtx.Err() == nil && (time.Since(start) < m.runaway || deleted.Load()+refused.Load() < runawayAtLeast) {
			sleep(runawayCtx, runawayEvery)
			pods := w.livePods()
			if len(pods) == 0 {
				continue
			}
			err := t.Client.CoreV1().Pods(ns).Delete(runawayCtx, pods[rng.IntN(len(pods))], metav1.DeleteOptions{})
			switch {
			case err == nil:
				deleted.Add(1)
			case apierrors.IsTooManyRequests(err) || apierrors.IsForbidden(err):
				refused.Add(1)
				refusal.Store(err.Error())
			}
		}
	}()

	all, left, err := t.drainNodes(ctx, ns, nodes, start.Add(m.window))
	run.drain, run.drained = time.Since(start), len(all)-len(left)
	for _, p := range all {
		if p.Labels["app"] == "store" {
			run.storePods++
		}
	}
	for _, p := range left {
		run.left++
		if p.Labels["app"] == "store" {
			run.storeLeft++
		}
	}
	<-runaway
	if err != nil {
		return run, err
	}
	for _, n := range nodes {
		if _, err := t.Client.CoreV1().Nodes().Patch(ctx, n, types.MergePatchType, []byte(`{"spec":{"unschedulable":null}}`), metav1.PatchOptions{}); err != nil {
			return run, err
		}
	}
	if err := t.waitReady(ctx, ns, "app in (store,train)", m.shards*shardReplicas+m.jobs*m.workers); err != nil {
		return run, fmt.Errorf("after the maintenance: %w (%s)", err, t.notReady(ctx, ns))
	}
	// The watch's last events.
	sleep(ctx, time.Second)
	w.result(&run)
	run.deleted, run.refused = int(deleted.Load()), int(refused.Load())
	run.refusal, _ = refusal.Load().(string)
	return run, nil
}

// nodesHolding returns the first of candidates that together hold at
// least want of the store's pods.
func (t Target) nodesHolding(ctx context.Context, ns string, candidates []string, want int) ([]string, error) {
	var out []string
	held := 0
	for _, n := range candidates {
		if held >= want {
			break
		}
		list, err := t.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=store", FieldSelector: "spec.nodeName=" + n})
		if err != nil {
			return nil, err
		}
		out, held = append(out, n), held+len(list.Items)
	}
	return out, nil
}

// drainNodes cordons the nodes and evicts the drill's pods on them, all
// at once, until each is gone or the deadline passes; it returns the pods
// it had to drain and those left.
func (t Target) drainNodes(ctx context.Context, ns string, nodes []string, deadline time.Time) ([]corev1.Pod, []corev1.Pod, error) {
	var pods []corev1.Pod
	for _, n := range nodes {
		if _, err := t.Client.CoreV1().Nodes().Patch(ctx, n, types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{}); err != nil {
			return nil, nil, err
		}
	}
	for _, n := range nodes {
		list, err := t.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n})
		if err != nil {
			return nil, nil, err
		}
		pods = append(pods, list.Items...)
	}
	var wg sync.WaitGroup
	gone := make([]bool, len(pods))
	errs := make([]error, len(pods))
	for i, p := range pods {
		wg.Go(func() { gone[i], errs[i] = t.evictUntilGone(ctx, ns, p.Name, p.UID, deadline) })
	}
	wg.Wait()
	var left []corev1.Pod
	for i := range pods {
		if errs[i] != nil {
			return nil, nil, fmt.Errorf("draining pod %s: %w", pods[i].Name, errs[i])
		}
		if !gone[i] {
			left = append(left, pods[i])
		}
	}
	return pods, left, nil
}

// evictUntilGone evicts a pod, retrying a 429, until the pod of that name
// and UID is gone, and says whether it went before the deadline. A
// StatefulSet's replacement takes the pod's name: as kubectl drain's wait
// does, the UID tells them apart, and the eviction carries it as a
// precondition so that it never lands on the replacement.
func (t Target) evictUntilGone(ctx context.Context, ns, name string, uid types.UID, deadline time.Time) (bool, error) {
	pods := t.Client.CoreV1().Pods(ns)
	for {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err) || err == nil && p.UID != uid:
			return true, nil
		case err != nil:
			return false, err
		case time.Now().After(deadline):
			return false, nil
		case p.DeletionTimestamp != nil:
			sleep(ctx, 200*time.Millisecond)
			continue
		}
		err = pods.EvictV1(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}})
		switch {
		case err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err):
			// Evicted, or gone another way: the next round sees which.
		case apierrors.IsTooManyRequests(err):
			sleep(ctx, evictRetry)
		default:
			return false, err
		}
	}
}

// quorumWatch follows, from the API server's watch of the pods (not from
// Rampart), how many of each shard's and each job's pods are available:
// Ready and not going away.
type quorumWatch struct {
	mu     sync.Mutex
	m      maintenance
	pods   map[string]map[types.UID]bool // "shard=N" or "job=NAME" → pod → available
	live   map[types.UID]string          // pods not going away, by UID → name
	synced bool
	fewest map[string]int // per shard
	broken map[string]bool
	beyond map[string]bool
	run    maintenanceRun
}

func (t Target) watchQuorum(ctx context.Context, ns string, m maintenance) (*quorumWatch, error) {
	w := &quorumWatch{m: m, pods: map[string]map[types.UID]bool{}, live: map[types.UID]string{}, fewest: map[string]int{},
		broken: map[string]bool{}, beyond: map[string]bool{}}
	if err := t.watchPods(ctx, ns, "app in (store,train)", w.set); err != nil {
		return nil, err
	}
	// Measured from the whole list on: every shard and job starts whole.
	w.mu.Lock()
	w.synced = true
	for g := range w.pods {
		w.measure(g)
	}
	w.mu.Unlock()
	return w, nil
}

func (w *quorumWatch) set(p *corev1.Pod, gone bool) {
	g := "job=" + p.Labels["job"]
	if p.Labels["app"] == "store" {
		g = "shard=" + p.Labels["shard"]
	}
	available := !gone && p.DeletionTimestamp == nil && podReady(p)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pods[g] == nil {
		w.pods[g] = map[types.UID]bool{}
	}
	if gone {
		delete(w.pods[g], p.UID)
	} else {
		w.pods[g][p.UID] = available
	}
	if gone || p.DeletionTimestamp != nil {
		delete(w.live, p.UID)
	} else {
		w.live[p.UID] = p.Name
	}
	if w.synced {
		w.measure(g)
	}
}

// measure records group g's change: a shard's fewest available pods and
// the most shards short at once; a job going from whole to broken, and
// whether the cap was taken already.
func (w *quorumWatch) measure(g string) {
	count := func(g string) int {
		n := 0
		for _, a := range w.pods[g] {
			if a {
				n++
			}
		}
		return n
	}
	if strings.HasPrefix(g, "shard=") {
		n := count(g)
		if f, seen := w.fewest[g]; !seen || n < f {
			w.fewest[g] = n
		}
		short := 0
		for s := range w.pods {
			if strings.HasPrefix(s, "shard=") && count(s) < shardReplicas {
				short++
			}
		}
		w.run.mostShardsShort = max(w.run.mostShardsShort, short)
		return
	}
	broken := count(g) < w.m.workers
	if broken && !w.broken[g] {
		others := 0
		for j, b := range w.broken {
			if b && j != g {
				others++
			}
		}
		w.run.jobBreaks++
		if others >= jobsBrokenAtOnce {
			w.run.breaksBeyondCap++
			w.beyond[g] = true
		}
	}
	w.broken[g] = broken
	n := 0
	for _, b := range w.broken {
		if b {
			n++
		}
	}
	w.run.mostJobsBroken = max(w.run.mostJobsBroken, n)
}

// livePods are the names of the pods not going away, as a controller's
// cache would have them.
func (w *quorumWatch) livePods() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]string, 0, len(w.live))
	for _, n := range w.live {
		out = append(out, n)
	}
	return out
}

func (w *quorumWatch) result(run *maintenanceRun) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, f := range w.fewest {
		if f < shardQuorum {
			run.shardsBelowQuorum++
		}
	}
	run.mostShardsShort, run.jobBreaks, run.breaksBeyondCap = w.run.mostShardsShort, w.run.jobBreaks, w.run.breaksBeyondCap
	run.jobsBeyondCap, run.mostJobsBroken = len(w.beyond), w.run.mostJobsBroken
}

// notReady says which of the drill's pods are not Ready and why, for an
// error: the first few, with their phase, node and conditions.
func (t Target) notReady(ctx context.Context, ns string) string {
	pods, err := t.Client.CoreV1().Pods(ns).List(context.WithoutCancel(ctx), metav1.ListOptions{LabelSelector: "app in (store,train)"})
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, p := range pods.Items {
		if podReady(&p) && p.DeletionTimestamp == nil {
			continue
		}
		var conds []string
		for _, c := range p.Status.Conditions {
			conds = append(conds, fmt.Sprintf("%s=%s %s", c.Type, c.Status, c.Message))
		}
		out = append(out, fmt.Sprintf("%s %s on %q deleting=%v [%s]", p.Name, p.Status.Phase, p.Spec.NodeName, p.DeletionTimestamp != nil, strings.Join(conds, "; ")))
	}
	return fmt.Sprintf("%d pods, %d not Ready: %s", len(pods.Items), len(out), strings.Join(out[:min(len(out), 8)], ", "))
}
