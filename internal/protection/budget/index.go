package budget

import (
	"slices"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

// Key names a budget.
type Key struct{ Namespace, Name string }

func (k Key) String() string { return k.Namespace + "/" + k.Name }

// Pod is what the budget arithmetic reads of a pod.
type Pod struct {
	Name string
	// UID tells a StatefulSet's new pod from the old one of its name.
	UID    string
	Labels map[string]string
	// Ready is the pod's Ready condition.
	Ready bool
	// Gone is true for a pod that is terminating or has terminated.
	Gone    bool
	Created time.Time
	// Controller is the pod's controller owner (kind/name), "" for none.
	Controller string
	// Node is the node the pod is bound to, "" while it is not scheduled.
	Node string
	// NodeLabels are its node's labels when the pod was filed (a group
	// key the pod lacks is read there; read-only, shared with the cache).
	NodeLabels map[string]string
}

// Available is a pod counted as available: Ready and not going away.
func (p Pod) Available() bool { return p.Ready && !p.Gone }

// Index finds the budgets that cover a pod, and the pods a budget covers.
// Finding a pod's budgets costs the same with 10 budgets in its namespace
// or 10,000: each budget is filed under one label pair its selector
// requires (key=value), so a pod looks only at the budgets filed under its
// own labels. Only budgets whose selector requires no single pair (e.g.
// only set-based expressions) are scanned. It is fed by informer events;
// every method is safe for concurrent use.
type Index struct {
	mu sync.RWMutex
	ns map[string]*nsIndex

	// fence is the budget whose writes order this index's reads (see
	// Fence); it is never filed. fenceRV is the newest resourceVersion of
	// it filed, and fenced is closed and replaced when it changes.
	fence      Key
	fenceAbove int
	fenceRV    string
	fenced     chan struct{}

	// marking turns the change marks on (see MarksName); marks are the
	// marks filed, by the namespace they are for, and marked is closed
	// and replaced when they change.
	marking bool
	marks   map[string]*marksSeen
	marked  chan struct{}
}

type nsIndex struct {
	budgets map[string]*entry
	// byPair files each budget under one "key=value" its selector needs.
	byPair map[string]map[*entry]struct{}
	// scan are the budgets with no such pair.
	scan map[*entry]struct{}
	pods map[string]*podEntry
	// unresolved are the targetRef budgets whose selector is not known
	// yet, or known for an older spec: not filed, or filed as they were.
	unresolved map[string]seenAs
}

// seenAs is the UID and generation a budget was last seen at.
type seenAs struct {
	uid        string
	generation int64
}

type entry struct {
	key        Key
	uid        string
	generation int64
	selector   labels.Selector
	ignored    labels.Selector
	pair       string
	pods       map[string]*podEntry
	// groupBy is the budget's groupBy label key ("" for none), and
	// groupPods counts its pods by group.
	groupBy   string
	groupPods map[string]int32
}

func (e *entry) add(p *podEntry) {
	e.pods[p.Name] = p
	if g, placed := placedGroup(e.groupBy, p.Pod); e.groupBy != "" && placed {
		e.groupPods[g]++
	}
}

func (e *entry) drop(p *podEntry) {
	if _, ok := e.pods[p.Name]; !ok {
		return
	}
	delete(e.pods, p.Name)
	if g, placed := placedGroup(e.groupBy, p.Pod); e.groupBy != "" && placed {
		if e.groupPods[g]--; e.groupPods[g] <= 0 {
			delete(e.groupPods, g)
		}
	}
}

type podEntry struct {
	Pod
	budgets []*entry
}

// NewIndex returns an empty index.
func NewIndex() *Index {
	return &Index{ns: map[string]*nsIndex{}, fenced: make(chan struct{}), marks: map[string]*marksSeen{}, marked: make(chan struct{})}
}

func (x *Index) namespace(ns string) *nsIndex {
	n := x.ns[ns]
	if n == nil {
		n = &nsIndex{budgets: map[string]*entry{}, byPair: map[string]map[*entry]struct{}{},
			scan: map[*entry]struct{}{}, pods: map[string]*podEntry{}, unresolved: map[string]seenAs{}}
		x.ns[ns] = n
	}
	return n
}

// Selectors are a budget's pod selector and ignored-pod selector; ok is
// false while a targetRef budget's selector is not resolved yet (the
// controller writes it to status.selector).
func Selectors(b *v1alpha1.PodUnavailableBudget) (sel, ignored labels.Selector, ok bool, err error) {
	switch {
	case b.Spec.Selector != nil:
		sel, err = metav1.LabelSelectorAsSelector(b.Spec.Selector)
	case b.Status.Selector != "":
		sel, err = labels.Parse(b.Status.Selector)
	default:
		return nil, nil, false, nil
	}
	if err != nil {
		return nil, nil, false, err
	}
	if b.Spec.IgnoredPodSelector != nil {
		if ignored, err = metav1.LabelSelectorAsSelector(b.Spec.IgnoredPodSelector); err != nil {
			return nil, nil, false, err
		}
	}
	return sel, ignored, true, nil
}

// CoversLabels says whether a budget covers a pod with labels l, from the
// budget alone (for a budget not filed in an index yet). A targetRef
// budget whose selector is not resolved covers nothing.
func CoversLabels(b *v1alpha1.PodUnavailableBudget, l map[string]string) (bool, error) {
	sel, ignored, ok, err := Selectors(b)
	if err != nil || !ok {
		return false, err
	}
	e := &entry{selector: sel, ignored: ignored}
	return e.covers(l), nil
}

// SetBudget files or refiles a budget and says whether the pods it
// covers may have changed. A budget whose selector cannot be resolved yet
// covers nothing.
func (x *Index) SetBudget(b *v1alpha1.PodUnavailableBudget) (changed bool) {
	if x.IsFence(b.Namespace, b.Name) {
		x.sawFence(b.ResourceVersion)
		return false
	}
	x.mu.RLock()
	of, marks := x.marksFor(b.Namespace, b.Name)
	x.mu.RUnlock()
	if marks {
		x.sawMarks(of, b.ResourceVersion, b.Annotations)
		return false
	}
	sel, ignored, ok, err := Selectors(b)
	x.mu.Lock()
	defer x.mu.Unlock()
	n := x.namespace(b.Namespace)
	// A targetRef whose selector is not written yet, or was written for
	// an older spec (the target may have changed): read live by a reader.
	if (!ok && err == nil) || (b.Spec.TargetRef != nil && b.Status.ObservedGeneration != b.Generation) {
		n.unresolved[b.Name] = seenAs{string(b.UID), b.Generation}
	} else {
		delete(n.unresolved, b.Name)
	}
	if old := n.budgets[b.Name]; old != nil {
		if ok && err == nil && old.selector.String() == sel.String() && selString(old.ignored) == selString(ignored) && old.groupBy == groupBy(b) {
			old.uid, old.generation = string(b.UID), b.Generation
			return false // same pods as before
		}
		n.remove(old)
		changed = true
	}
	if !ok || err != nil {
		return changed
	}
	e := &entry{key: Key{b.Namespace, b.Name}, uid: string(b.UID), generation: b.Generation, selector: sel, ignored: ignored, pods: map[string]*podEntry{},
		groupBy: groupBy(b), groupPods: map[string]int32{}}
	n.budgets[b.Name] = e
	e.pair = n.choosePair(sel)
	if e.pair == "" {
		n.scan[e] = struct{}{}
	} else {
		if n.byPair[e.pair] == nil {
			n.byPair[e.pair] = map[*entry]struct{}{}
		}
		n.byPair[e.pair][e] = struct{}{}
	}
	for _, p := range n.pods {
		if e.covers(p.Labels) {
			e.add(p)
			p.budgets = insertSorted(p.budgets, e)
		}
	}
	return true
}

func groupBy(b *v1alpha1.PodUnavailableBudget) string {
	if Grouped(b.Spec) {
		return b.Spec.GroupBy.LabelKey
	}
	return ""
}

func selString(s labels.Selector) string {
	if s == nil {
		return ""
	}
	return s.String()
}

// DeleteBudget forgets a budget.
func (x *Index) DeleteBudget(k Key) {
	if x.IsFence(k.Namespace, k.Name) {
		return
	}
	x.mu.RLock()
	of, marks := x.marksFor(k.Namespace, k.Name)
	x.mu.RUnlock()
	if marks {
		x.forgetMarks(of)
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if n := x.ns[k.Namespace]; n != nil {
		delete(n.unresolved, k.Name)
		if e := n.budgets[k.Name]; e != nil {
			n.remove(e)
		}
	}
}

func (n *nsIndex) remove(e *entry) {
	delete(n.budgets, e.key.Name)
	delete(n.scan, e)
	if m := n.byPair[e.pair]; m != nil {
		delete(m, e)
		if len(m) == 0 {
			delete(n.byPair, e.pair)
		}
	}
	for _, p := range e.pods {
		p.budgets = slices.DeleteFunc(p.budgets, func(o *entry) bool { return o == e })
	}
}

// choosePair picks, of the pairs the selector requires, the one filed
// under by the fewest budgets so far.
func (n *nsIndex) choosePair(sel labels.Selector) string {
	reqs, _ := sel.Requirements()
	best, size := "", -1
	for _, r := range reqs {
		vals := r.Values().UnsortedList()
		if len(vals) != 1 || (r.Operator() != selection.Equals && r.Operator() != selection.DoubleEquals && r.Operator() != selection.In) {
			continue
		}
		pair := r.Key() + "=" + vals[0]
		if s := len(n.byPair[pair]); size < 0 || s < size {
			best, size = pair, s
		}
	}
	return best
}

func (e *entry) covers(l map[string]string) bool {
	set := labels.Set(l)
	return e.selector.Matches(set) && (e.ignored == nil || e.ignored.Empty() || !e.ignored.Matches(set))
}

func insertSorted(es []*entry, e *entry) []*entry {
	i, found := slices.BinarySearchFunc(es, e, func(a, b *entry) int { return strings.Compare(a.key.Name, b.key.Name) })
	if found {
		return es
	}
	return slices.Insert(es, i, e)
}

// candidates are the budgets of a namespace that may cover labels l.
func (n *nsIndex) covering(l map[string]string) []*entry {
	var out []*entry
	for k, v := range l {
		for e := range n.byPair[k+"="+v] {
			if e.covers(l) {
				out = insertSorted(out, e)
			}
		}
	}
	for e := range n.scan {
		if e.covers(l) {
			out = insertSorted(out, e)
		}
	}
	return out
}

// Covering are the budgets, by name, that cover a pod with these labels in
// ns. It reads the labels given, not the cached pod: a request's own
// object is newer than any cache.
func (x *Index) Covering(ns string, l map[string]string) []Key {
	x.mu.RLock()
	defer x.mu.RUnlock()
	n := x.ns[ns]
	if n == nil {
		return nil
	}
	es := n.covering(l)
	out := make([]Key, len(es))
	for i, e := range es {
		out[i] = e.key
	}
	return out
}

// HasBudgets says whether ns holds any budget.
func (x *Index) HasBudgets(ns string) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.ns[ns] != nil && len(x.ns[ns].budgets) > 0
}

// Namespaces are the namespaces holding budgets, sorted.
func (x *Index) Namespaces() []string {
	x.mu.RLock()
	defer x.mu.RUnlock()
	var out []string
	for ns, n := range x.ns {
		if len(n.budgets) > 0 {
			out = append(out, ns)
		}
	}
	slices.Sort(out)
	return out
}

// SetPod records a pod (added or changed) and returns the budgets that
// cover it now and those that covered it before, so that both can be
// recomputed.
func (x *Index) SetPod(ns string, p Pod) (now, before []Key) {
	x.mu.Lock()
	defer x.mu.Unlock()
	n := x.namespace(ns)
	cur := n.pods[p.Name]
	if cur == nil {
		cur = &podEntry{}
		n.pods[p.Name] = cur
	}
	for _, e := range cur.budgets {
		before = append(before, e.key)
		e.drop(cur)
	}
	cur.Pod = p
	cur.budgets = n.covering(p.Labels)
	for _, e := range cur.budgets {
		e.add(cur)
		now = append(now, e.key)
	}
	return now, before
}

// DeletePod forgets a pod and returns the budgets that covered it.
func (x *Index) DeletePod(ns, name string) []Key {
	x.mu.Lock()
	defer x.mu.Unlock()
	n := x.ns[ns]
	if n == nil || n.pods[name] == nil {
		return nil
	}
	p := n.pods[name]
	delete(n.pods, name)
	var out []Key
	for _, e := range p.budgets {
		e.drop(p)
		out = append(out, e.key)
	}
	if len(n.pods) == 0 && len(n.budgets) == 0 && len(n.unresolved) == 0 {
		delete(x.ns, ns)
	}
	return out
}

// Pod is the recorded pod, if any.
func (x *Index) Pod(ns, name string) (Pod, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if n := x.ns[ns]; n != nil {
		if p := n.pods[name]; p != nil {
			return p.Pod, true
		}
	}
	return Pod{}, false
}

// Pods are the pods a budget covers, sorted by name; ok is false when
// the budget is not indexed (unknown, or its selector is not resolved).
func (x *Index) Pods(k Key) (pods []Pod, ok bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	n := x.ns[k.Namespace]
	if n == nil || n.budgets[k.Name] == nil {
		return nil, false
	}
	e := n.budgets[k.Name]
	out := make([]Pod, 0, len(e.pods))
	for _, p := range e.pods {
		out = append(out, p.Pod)
	}
	slices.SortFunc(out, func(a, b Pod) int { return strings.Compare(a.Name, b.Name) })
	return out, true
}

// GroupPods is how many pods the budget k has in a group (see GroupOf).
func (x *Index) GroupPods(k Key, group string) int32 {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if n := x.ns[k.Namespace]; n != nil {
		if e := n.budgets[k.Name]; e != nil {
			return e.groupPods[group]
		}
	}
	return 0
}

// CoveringFiled is Covering, with every budget filed in ns and the
// generation (metadata.generation) it was filed at, read at the same
// instant: a budget missing from filed (or filed at an older generation)
// is one the answer may have missed.
func (x *Index) CoveringFiled(ns string, l map[string]string) (keys []Key, filed map[string]int64) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	filed = map[string]int64{}
	n := x.ns[ns]
	if n == nil {
		return nil, filed
	}
	for name, e := range n.budgets {
		filed[name] = e.generation
	}
	for _, e := range n.covering(l) {
		keys = append(keys, e.key)
	}
	return keys, filed
}

// CoveringUnresolved is Covering, with the budgets of ns whose selector
// is not resolved for their current spec (they may cover the pod or not:
// the caller reads them), read at the same instant; keys leaves those out.
func (x *Index) CoveringUnresolved(ns string, l map[string]string) (keys []Key, unresolved []string) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	n := x.ns[ns]
	if n == nil {
		return nil, nil
	}
	for _, e := range n.covering(l) {
		if _, ok := n.unresolved[e.key.Name]; !ok {
			keys = append(keys, e.key)
		}
	}
	for name := range n.unresolved {
		unresolved = append(unresolved, name)
	}
	slices.Sort(unresolved)
	return keys, unresolved
}

// Count is how many budgets ns holds, filed or not resolved yet.
func (x *Index) Count(ns string) int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if n := x.ns[ns]; n != nil {
		return len(n.budgets) + len(n.unresolved) // at most twice what is there: it picks a path, no more
	}
	return 0
}

// Keys are the budgets of ns, sorted by name.
func (x *Index) Keys(ns string) []Key {
	x.mu.RLock()
	defer x.mu.RUnlock()
	n := x.ns[ns]
	if n == nil {
		return nil
	}
	out := make([]Key, 0, len(n.budgets))
	for name := range n.budgets {
		out = append(out, Key{ns, name})
	}
	slices.SortFunc(out, func(a, b Key) int { return strings.Compare(a.Name, b.Name) })
	return out
}
