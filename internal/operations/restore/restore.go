// Package restore puts kept objects back: the recycle bin's copies of
// deleted objects (`rampart trash restore`) and the objects of a backup
// (`rampart backup restore`) go through the one plan here.
//
// A restore puts objects back in dependency order (CustomResourceDefinitions,
// namespaces, what pods mount and run as, then owners before what they
// own), with what the API server sets stripped, and points each
// ownerReference at the owner as it is now: the owner restored in the same
// run (its new UID), or the live owner of that name. A reference to an
// owner that is gone and not restored is dropped: the garbage collector
// would otherwise delete the restored object again at once, as it does
// after kube-recycle-bin's and Velero's restores (velero#4707).
package restore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/pmezard/go-difflib/difflib"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"
)

// Item is one kept object, whatever kept it.
type Item struct {
	// Resource is the object's resource, at the version Object is in.
	Resource  schema.GroupVersionResource
	Namespace string
	Name      string
	// UID is the UID the object had when it was kept.
	UID types.UID
	// Object is the object as it was (JSON); empty when it could not be
	// opened (a sealed Secret without its key).
	Object json.RawMessage
}

// Described names the item as kubectl does: resource.group/name in
// namespace.
func (i *Item) Described() string {
	gr := i.Resource.GroupResource().String()
	if i.Namespace == "" {
		return gr + "/" + i.Name
	}
	return gr + "/" + i.Name + " in namespace " + i.Namespace
}

// Owners are the ownerReferences of the kept object.
func (i *Item) Owners() []metav1.OwnerReference {
	var m struct {
		Metadata struct {
			OwnerReferences []metav1.OwnerReference `json:"ownerReferences"`
		} `json:"metadata"`
	}
	if json.Unmarshal(i.Object, &m) != nil {
		return nil
	}
	return m.Metadata.OwnerReferences
}

// Step is one object to restore.
type Step struct {
	Item *Item
	// Object is the object to write: what the API server sets and the
	// status stripped, under its new name if any. What a create must not
	// carry besides (a Service's cluster IP, a pod's node) is taken off
	// only when it is created, so that a live object is compared with the
	// copy as it was.
	Object *unstructured.Unstructured
	// Finished says, if the copy is of a pod or Job that had finished,
	// how ("Succeeded", "Complete"): created again it would run again.
	Finished string
}

// Described names the object as it is restored (under its new name, if
// any).
func (s Step) Described() string { return describe(s.Item.Resource, s.Object) }

// Plan is a restore's steps, in the order they run.
type Plan struct {
	Steps []Step

	overwrite bool
}

// Options shape a plan.
type Options struct {
	// AsNewName restores the one object planned under another name.
	AsNewName string
	// Overwrite replaces a live object of the same name that differs from
	// the copy (its UID stays: it is an update); by default it is left
	// alone.
	Overwrite bool
	// RunFinished restores pods and Jobs that had finished when they were
	// kept; by default they are skipped, since a pod or Job created again
	// runs again (a migration, a one-off task, a CronJob's past run).
	RunFinished bool
}

// PlanRestore orders items for a restore and prepares their objects.
func PlanRestore(items []Item, o Options) (*Plan, error) {
	if o.AsNewName != "" && len(items) != 1 {
		return nil, fmt.Errorf("a new name is for one object; %d are planned", len(items))
	}
	seen := map[string]bool{}
	steps := make([]Step, 0, len(items))
	for i := range items {
		it := &items[i]
		key := it.Namespace + "/" + it.Resource.GroupResource().String() + "/" + it.Name
		if seen[key] {
			return nil, fmt.Errorf("two copies of %s are planned: pick one (the newest is listed first)", it.Described())
		}
		seen[key] = true
		obj, finished, err := prepare(it)
		if err != nil {
			return nil, err
		}
		if o.AsNewName != "" {
			obj.SetName(o.AsNewName)
		}
		if o.RunFinished {
			finished = ""
		}
		steps = append(steps, Step{Item: it, Object: obj, Finished: finished})
	}
	ordered, err := order(steps)
	if err != nil {
		return nil, err
	}
	return &Plan{Steps: ordered, overwrite: o.Overwrite}, nil
}

// finishedAs says how a kept pod or Job had finished, from its status:
// a pod Succeeded or Failed, a Job with a true Complete or Failed
// condition; "" if it had not, or is neither.
func finishedAs(gr schema.GroupResource, obj *unstructured.Unstructured) string {
	switch gr {
	case schema.GroupResource{Resource: "pods"}:
		if phase, _, _ := unstructured.NestedString(obj.Object, "status", "phase"); phase == "Succeeded" || phase == "Failed" {
			return phase
		}
	case schema.GroupResource{Group: "batch", Resource: "jobs"}:
		conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if t, _ := m["type"].(string); (t == "Complete" || t == "Failed") && m["status"] == "True" {
				return t
			}
		}
	}
	return ""
}

var (
	namespacesGR = schema.GroupResource{Resource: "namespaces"}
	crdsGR       = schema.GroupResource{Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}
)

// before are what others refer to by name rather than by owner: a pod
// that mounts a ConfigMap, a Secret or a claim, or runs as a service
// account, waits for it, and a role binding names its role.
var before = map[schema.GroupResource]bool{
	{Group: "storage.k8s.io", Resource: "storageclasses"}:                 true,
	{Group: "scheduling.k8s.io", Resource: "priorityclasses"}:             true,
	{Resource: "persistentvolumes"}:                                       true,
	{Resource: "persistentvolumeclaims"}:                                  true,
	{Resource: "secrets"}:                                                 true,
	{Resource: "configmaps"}:                                              true,
	{Resource: "serviceaccounts"}:                                         true,
	{Resource: "limitranges"}:                                             true,
	{Resource: "resourcequotas"}:                                          true,
	{Group: "rbac.authorization.k8s.io", Resource: "clusterroles"}:        true,
	{Group: "rbac.authorization.k8s.io", Resource: "roles"}:               true,
	{Group: "rbac.authorization.k8s.io", Resource: "clusterrolebindings"}: true,
	{Group: "rbac.authorization.k8s.io", Resource: "rolebindings"}:        true,
}

// rank puts what others live in or name first.
func rank(gr schema.GroupResource) int {
	switch {
	case gr == crdsGR:
		return 0
	case gr == namespacesGR:
		return 1
	case before[gr]:
		return 2
	}
	return 3
}

// order sorts steps by rank, then owners before the objects they own
// (Kahn's algorithm over the ownerReferences within the plan), keeping
// the given order otherwise.
func order(steps []Step) ([]Step, error) {
	slices.SortStableFunc(steps, func(a, b Step) int {
		return rank(a.Item.Resource.GroupResource()) - rank(b.Item.Resource.GroupResource())
	})
	byUID := map[types.UID]int{}
	for i, s := range steps {
		byUID[s.Item.UID] = i
	}
	waiting := make([]int, len(steps))
	dependents := make([][]int, len(steps))
	for i, s := range steps {
		for _, ref := range s.Item.Owners() {
			if j, ok := byUID[ref.UID]; ok && j != i {
				waiting[i]++
				dependents[j] = append(dependents[j], i)
			}
		}
	}
	var out []Step
	done := make([]bool, len(steps))
	for len(out) < len(steps) {
		progressed := false
		for i := range steps {
			if done[i] || waiting[i] > 0 {
				continue
			}
			// Keep ranks in order: nothing of a later rank before every
			// step of an earlier one that can go.
			done[i], progressed = true, true
			out = append(out, steps[i])
			for _, d := range dependents[i] {
				waiting[d]--
			}
			break
		}
		if !progressed {
			var stuck []string
			for i := range steps {
				if !done[i] {
					stuck = append(stuck, steps[i].Item.Described())
				}
			}
			return nil, fmt.Errorf("the ownerReferences of %s form a cycle", strings.Join(stuck, ", "))
		}
	}
	return out, nil
}

// serverSet are the metadata fields the API server sets: a create that
// carried them would be refused, or would claim another object's identity.
var serverSet = []string{"uid", "resourceVersion", "creationTimestamp", "generation", "managedFields",
	"deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"}

// stripServerSet removes what the API server sets, and the status.
func stripServerSet(obj *unstructured.Unstructured) {
	for _, f := range serverSet {
		unstructured.RemoveNestedField(obj.Object, "metadata", f)
	}
	unstructured.RemoveNestedField(obj.Object, "status")
}

// prepare is the object to restore from a kept copy, and how it had
// finished (finishedAs), read before the status goes.
func prepare(it *Item) (*unstructured.Unstructured, string, error) {
	if len(it.Object) == 0 {
		return nil, "", fmt.Errorf("%s: the copy holds no object (sealed with a key not given?)", it.Described())
	}
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(it.Object); err != nil {
		return nil, "", fmt.Errorf("%s: %w", it.Described(), err)
	}
	finished := finishedAs(it.Resource.GroupResource(), obj)
	stripServerSet(obj)
	return obj, finished, nil
}

// forCreate is what a create of obj carries: what the cluster gives a new
// object anew is left to it.
func forCreate(gr schema.GroupResource, obj *unstructured.Unstructured) *unstructured.Unstructured {
	obj = obj.DeepCopy()
	switch gr {
	case schema.GroupResource{Resource: "services"}:
		// A cluster IP is allocated anew, unless the Service is headless.
		if ip, _, _ := unstructured.NestedString(obj.Object, "spec", "clusterIP"); ip != "None" {
			unstructured.RemoveNestedField(obj.Object, "spec", "clusterIP")
			unstructured.RemoveNestedField(obj.Object, "spec", "clusterIPs")
		}
	case schema.GroupResource{Resource: "pods"}:
		// Scheduled again: the node it ran on may be gone.
		unstructured.RemoveNestedField(obj.Object, "spec", "nodeName")
	case schema.GroupResource{Group: "batch", Resource: "jobs"}:
		// The API server generates a Job's selector from its new UID and
		// refuses one carried over, unless the user chose it.
		if manual, _, _ := unstructured.NestedBool(obj.Object, "spec", "manualSelector"); !manual {
			unstructured.RemoveNestedField(obj.Object, "spec", "selector")
			for _, l := range []string{"controller-uid", "batch.kubernetes.io/controller-uid"} {
				unstructured.RemoveNestedField(obj.Object, "spec", "template", "metadata", "labels", l)
			}
		}
	}
	return obj
}

// Cluster is what a restore needs of the API server.
type Cluster interface {
	// Live is the live object of that name, if any.
	Live(ctx context.Context, gvr schema.GroupVersionResource, namespace, name string) (*unstructured.Unstructured, bool, error)
	// Owner finds the live owner a reference names (by kind and name in
	// namespace; namespace "" for a cluster-scoped owner) and its UID.
	Owner(ctx context.Context, ref metav1.OwnerReference, namespace string) (types.UID, bool, error)
	// Create creates obj (a server-side dry run when dryRun) and returns
	// it as created.
	Create(ctx context.Context, gvr schema.GroupVersionResource, obj *unstructured.Unstructured, dryRun bool) (*unstructured.Unstructured, error)
	// Update replaces a live object with obj (which carries the live
	// resourceVersion), a server-side dry run when dryRun.
	Update(ctx context.Context, gvr schema.GroupVersionResource, obj *unstructured.Unstructured, dryRun bool) (*unstructured.Unstructured, error)
}

// Lister is what a Cluster may offer besides: every live object of a
// resource in a namespace ("" for cluster-scoped) in one request. A plan
// with many objects of one resource there then reads them once, not one
// GET each.
type Lister interface {
	List(ctx context.Context, gvr schema.GroupVersionResource, namespace string) ([]unstructured.Unstructured, error)
}

// listed answers Live from lists read once per resource and namespace
// that hold two or more of the plan's objects; the rest go to the
// Cluster. An object made by someone else after the list is met by the
// create (AlreadyExists) and left alone, as one made after a GET is.
type listed struct {
	Cluster
	objects map[string]*unstructured.Unstructured
	groups  map[string]bool
}

func liveKey(gvr schema.GroupVersionResource, namespace, name string) string {
	return gvr.String() + "|" + namespace + "|" + name
}

func prefetch(ctx context.Context, c Cluster, steps []Step) (Cluster, error) {
	l, ok := c.(Lister)
	if !ok {
		return c, nil
	}
	count := map[string]int{}
	for _, s := range steps {
		count[liveKey(s.Item.Resource, s.Object.GetNamespace(), "")]++
	}
	out := &listed{Cluster: c, objects: map[string]*unstructured.Unstructured{}, groups: map[string]bool{}}
	done := map[string]bool{}
	for _, s := range steps {
		gvr, ns := s.Item.Resource, s.Object.GetNamespace()
		group := liveKey(gvr, ns, "")
		if count[group] < 2 || done[group] {
			continue
		}
		done[group] = true
		items, err := l.List(ctx, gvr, ns)
		if apierrors.IsNotFound(err) {
			// Not served yet: its CRD comes with this restore.
			continue
		}
		if err != nil {
			return nil, err
		}
		out.groups[group] = true
		for i := range items {
			out.objects[liveKey(gvr, ns, items[i].GetName())] = &items[i]
		}
	}
	return out, nil
}

func (l *listed) Live(ctx context.Context, gvr schema.GroupVersionResource, namespace, name string) (*unstructured.Unstructured, bool, error) {
	if !l.groups[liveKey(gvr, namespace, "")] {
		return l.Cluster.Live(ctx, gvr, namespace, name)
	}
	obj, ok := l.objects[liveKey(gvr, namespace, name)]
	if !ok {
		return nil, false, nil
	}
	return obj.DeepCopy(), true, nil
}

// Action is what a restore does, or would do, with one object.
type Action string

const (
	// Create: no live object of that name; it is created.
	Create Action = "create"
	// Update: a live object differs from the copy and Overwrite is set:
	// it is replaced by the copy, keeping its UID.
	Update Action = "update"
	// Unchanged: the live object is as the copy has it.
	Unchanged Action = "unchanged"
	// Skipped: a live object differs from the copy, or appeared between
	// the restore's look and its create: it is left alone.
	Skipped Action = "skipped (exists)"
	// SkippedFinished: a pod or Job that had finished when it was kept
	// is not created again (it would run again) unless asked
	// (Options.RunFinished).
	SkippedFinished Action = "skipped (finished)"
	// Conflict: the step cannot be done as planned: the API server
	// refuses it (invalid, forbidden, an immutable field), the live
	// object is being deleted, or its owner in the plan was not restored.
	Conflict Action = "conflict"
)

// Outcome is what became, or would become, of one step.
type Outcome struct {
	Step   Step
	Action Action
	// UID is the object's UID now: the new one when it was created (empty
	// in a dry run), the live one otherwise.
	UID types.UID
	// Reason says why an object was left alone or not restored.
	Reason string
	// Diff is how the copy differs from the live object of that name (a
	// unified diff of their YAML, server-set fields left out); Fields the
	// same, field by field. Both empty when none is live, or they are the
	// same.
	Diff   string
	Fields []FieldChange
	// Notes say what was changed on the way (ownerReferences).
	Notes []string
}

// Conflicts counts the outcomes that are conflicts.
func Conflicts(outcomes []Outcome) int {
	n := 0
	for _, o := range outcomes {
		if o.Action == Conflict {
			n++
		}
	}
	return n
}

// run is one Run's memory.
type run struct {
	c      Cluster
	dryRun bool
	// newUIDs maps a restored owner's old UID to its UID now; in a dry
	// run the old one stands in.
	newUIDs map[types.UID]types.UID
	// failed are the old UIDs of objects not restored for a conflict.
	failed map[types.UID]bool
	// dryNamespaces and dryCRDs are what a dry run "created": the API
	// server cannot validate what goes in them (they do not exist).
	dryNamespaces map[string]bool
	dryCRDs       map[schema.GroupResource]bool
}

// Run restores the plan's objects in order, or, with dryRun, asks the API
// server to validate each as a server-side dry run and changes nothing. A
// live object of the same name is overwritten only with Options.Overwrite
// and only if it differs: otherwise that step is skipped and the rest go
// on (an owner skipped is the live one, and its dependents point at it).
// A step the API server refuses is a conflict, and so are the objects it
// would have owned; the rest go on. Run returns an error only when the
// API server cannot be asked (what was restored stays).
func (p *Plan) Run(ctx context.Context, c Cluster, dryRun bool) ([]Outcome, error) {
	c, err := prefetch(ctx, c, p.Steps)
	if err != nil {
		return nil, err
	}
	r := &run{c: c, dryRun: dryRun, newUIDs: map[types.UID]types.UID{}, failed: map[types.UID]bool{},
		dryNamespaces: map[string]bool{}, dryCRDs: map[schema.GroupResource]bool{}}
	var out []Outcome
	for _, s := range p.Steps {
		o, err := r.step(ctx, s, p.overwrite)
		if err != nil {
			return out, err
		}
		if o.Action == Conflict {
			r.failed[s.Item.UID] = true
		}
		out = append(out, o)
	}
	return out, nil
}

func (r *run) step(ctx context.Context, s Step, overwrite bool) (Outcome, error) {
	o := Outcome{Step: s}
	gvr := s.Item.Resource
	for _, ref := range s.Item.Owners() {
		if r.failed[ref.UID] {
			o.Action, o.Reason = Conflict, fmt.Sprintf("its owner %s/%s is not restored (see above)", ref.Kind, ref.Name)
			return o, nil
		}
	}
	live, found, err := r.c.Live(ctx, gvr, s.Object.GetNamespace(), s.Object.GetName())
	if err != nil {
		return o, err
	}
	refs, notes, err := r.relink(ctx, s)
	if err != nil {
		return o, err
	}
	obj := s.Object.DeepCopy()
	obj.SetOwnerReferences(refs)
	o.Notes = notes
	if found {
		r.newUIDs[s.Item.UID] = live.GetUID()
		o.UID = live.GetUID()
		if live.GetDeletionTimestamp() != nil {
			o.Action, o.Reason = Conflict, fmt.Sprintf("%s is being deleted (uid %s): wait until it is gone, then restore again", describe(gvr, obj), live.GetUID())
			return o, nil
		}
		if o.Diff, o.Fields, err = compare(gvr.GroupResource(), live, obj); err != nil {
			return o, err
		}
		switch {
		case len(o.Fields) == 0:
			o.Action, o.Reason = Unchanged, fmt.Sprintf("%s exists (uid %s) as the copy has it", describe(gvr, obj), live.GetUID())
		case !overwrite:
			o.Action, o.Reason = Skipped, fmt.Sprintf("%s exists (uid %s): not overwritten; delete it first, restore under another name, or overwrite it (--overwrite)", describe(gvr, obj), live.GetUID())
		default:
			obj.SetResourceVersion(live.GetResourceVersion())
			obj.SetUID(live.GetUID())
			if _, err := r.c.Update(ctx, gvr, obj, r.dryRun); err != nil {
				return r.refused(o, "overwriting", err)
			}
			o.Action = Update
		}
		return o, nil
	}
	if s.Finished != "" {
		o.Action, o.Reason = SkippedFinished, fmt.Sprintf("%s had finished (%s) when it was kept: created again it would run again; restore it with --run-finished if that is what you want", describe(gvr, obj), s.Finished)
		return o, nil
	}
	if r.dryRun {
		if r.dryNamespaces[obj.GetNamespace()] || r.dryCRDs[gvr.GroupResource()] {
			o.Action = Create
			o.Notes = append(o.Notes, "not validated by the API server: its namespace or CustomResourceDefinition is created by this restore")
			r.newUIDs[s.Item.UID] = s.Item.UID
			return o, nil
		}
	}
	created, err := r.c.Create(ctx, gvr, forCreate(gvr.GroupResource(), obj), r.dryRun)
	if apierrors.IsAlreadyExists(err) {
		// Made meanwhile by someone else (a controller, such as the one
		// that publishes kube-root-ca.crt in every new namespace): left
		// alone, as a live object always is.
		o.Action, o.Reason = Skipped, fmt.Sprintf("%s was created meanwhile by someone else: not overwritten", describe(gvr, obj))
		if live, found, lerr := r.c.Live(ctx, gvr, obj.GetNamespace(), obj.GetName()); lerr == nil && found {
			r.newUIDs[s.Item.UID] = live.GetUID()
			o.UID = live.GetUID()
		}
		return o, nil
	}
	if err != nil {
		return r.refused(o, "creating", err)
	}
	o.Action = Create
	if r.dryRun {
		r.newUIDs[s.Item.UID] = s.Item.UID
		switch gvr.GroupResource() {
		case namespacesGR:
			r.dryNamespaces[obj.GetName()] = true
		case crdsGR:
			group, _, _ := unstructured.NestedString(obj.Object, "spec", "group")
			plural, _, _ := unstructured.NestedString(obj.Object, "spec", "names", "plural")
			r.dryCRDs[schema.GroupResource{Group: group, Resource: plural}] = true
		}
		return o, nil
	}
	o.UID = created.GetUID()
	r.newUIDs[s.Item.UID] = o.UID
	return o, nil
}

// refused makes an API server's refusal of a step a conflict; an error
// that is no answer of the API server ends the run.
func (r *run) refused(o Outcome, doing string, err error) (Outcome, error) {
	if _, ok := err.(apierrors.APIStatus); !ok && !apierrors.IsTimeout(err) {
		return o, fmt.Errorf("%s %s: %w", doing, o.Step.Described(), err)
	}
	o.Action, o.Reason = Conflict, fmt.Sprintf("the API server refuses %s %s: %v", doing, o.Step.Described(), err)
	return o, nil
}

// relink points each ownerReference of s at its owner as it is now.
func (r *run) relink(ctx context.Context, s Step) ([]metav1.OwnerReference, []string, error) {
	var refs []metav1.OwnerReference
	var notes []string
	for _, ref := range s.Object.GetOwnerReferences() {
		if uid, ok := r.newUIDs[ref.UID]; ok {
			if uid != ref.UID {
				notes = append(notes, fmt.Sprintf("owner %s/%s restored as uid %s", ref.Kind, ref.Name, uid))
			}
			ref.UID = uid
			refs = append(refs, ref)
			continue
		}
		uid, live, err := r.c.Owner(ctx, ref, s.Object.GetNamespace())
		if err != nil {
			return nil, nil, err
		}
		switch {
		case live && uid == ref.UID:
		case live:
			notes = append(notes, fmt.Sprintf("owner %s/%s is a newer object (uid %s): pointed at it", ref.Kind, ref.Name, uid))
			ref.UID = uid
		default:
			notes = append(notes, fmt.Sprintf("owner %s/%s is gone and not restored: reference dropped, or the garbage collector would delete the restored object again", ref.Kind, ref.Name))
			continue
		}
		refs = append(refs, ref)
	}
	return refs, notes, nil
}

func describe(gvr schema.GroupVersionResource, obj *unstructured.Unstructured) string {
	d := gvr.GroupResource().String() + "/" + obj.GetName()
	if ns := obj.GetNamespace(); ns != "" {
		d += " in namespace " + ns
	}
	return d
}

// compare is how the object a restore would write differs from the live
// one, without what the API server sets: a unified diff of their YAML,
// and field by field.
func compare(gr schema.GroupResource, live, restored *unstructured.Unstructured) (string, []FieldChange, error) {
	l := live.DeepCopy()
	stripServerSet(l)
	c := restored.DeepCopy()
	stripServerSet(c)
	if gr == (schema.GroupResource{Resource: "secrets"}) {
		hideSecretValues(l)
		hideSecretValues(c)
	}
	fields, err := fieldChanges(l.Object, c.Object)
	if err != nil || len(fields) == 0 {
		return "", nil, err
	}
	a, err := yaml.Marshal(l.Object)
	if err != nil {
		return "", nil, err
	}
	b, err := yaml.Marshal(c.Object)
	if err != nil {
		return "", nil, err
	}
	d, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{A: difflib.SplitLines(string(a)), B: difflib.SplitLines(string(b)),
		FromFile: "live", ToFile: "kept copy", Context: 2})
	return d, fields, err
}

// NotRestored says why objects of a resource are never backed up nor
// restored; "" when they are.
func NotRestored(gr schema.GroupResource) string {
	switch gr {
	case schema.GroupResource{Resource: "nodes"}:
		return "a node registers itself and describes a machine, not an application: a restored Node is one the scheduler believes in with no kubelet behind it"
	case schema.GroupResource{Resource: "events"}, schema.GroupResource{Group: "events.k8s.io", Resource: "events"}:
		return "events are a record of what happened, expired after an hour: restored, they would replay stale history as new"
	case schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}:
		return "leases are leader elections and node heartbeats: an old one restored hands leadership to a holder that may be gone, or marks a dead node alive"
	case schema.GroupResource{Resource: "componentstatuses"}:
		return "computed on each read, not stored"
	}
	if gr.Group == "metrics.k8s.io" {
		return "computed by the metrics server, not stored"
	}
	return ""
}

// hideSecretValues replaces each value of a Secret by a digest of it: a
// diff says which keys differ, and never shows a value on a terminal or in
// a log.
func hideSecretValues(u *unstructured.Unstructured) {
	for _, field := range []string{"data", "stringData"} {
		values, ok, _ := unstructured.NestedMap(u.Object, field)
		if !ok {
			continue
		}
		for k, v := range values {
			sum := sha256.Sum256([]byte(fmt.Sprint(v)))
			values[k] = "(hidden, sha256 " + hex.EncodeToString(sum[:4]) + ")"
		}
		_ = unstructured.SetNestedMap(u.Object, values, field)
	}
}
