package recyclebin

import (
	"context"
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

// A restore puts kept objects back in dependency order (namespaces, then
// CustomResourceDefinitions, then owners before what they own), with what
// the API server sets stripped, and points each ownerReference at the
// owner as it is now: the owner restored in the same run (its new UID), or
// the live owner of that name. A reference to an owner that is gone and
// not restored is dropped: the garbage collector would otherwise delete
// the restored object again at once, as it does after kube-recycle-bin's
// and Velero's restores (velero#4707).

// Step is one object to create.
type Step struct {
	Entry  *Entry
	Object *unstructured.Unstructured
}

// Described names the object as it is created (under its new name, if
// any).
func (s Step) Described() string { return describe(s.Entry.Resource, s.Object) }

// Plan is a restore's steps, in the order they run.
type Plan struct {
	Steps []Step

	overwrite bool
}

// PlanOptions shape a plan.
type PlanOptions struct {
	// AsNewName restores the one object planned under another name.
	AsNewName string
	// Overwrite replaces a live object of the same name with the copy
	// (its UID stays: it is an update); by default it is left alone.
	Overwrite bool
}

// PlanRestore orders entries for a restore and prepares their objects.
func PlanRestore(entries []Entry, o PlanOptions) (*Plan, error) {
	if o.AsNewName != "" && len(entries) != 1 {
		return nil, fmt.Errorf("a new name is for one object; %d are planned", len(entries))
	}
	seen := map[string]bool{}
	steps := make([]Step, 0, len(entries))
	for i := range entries {
		e := &entries[i]
		key := e.Namespace + "/" + e.Resource.GroupResource().String() + "/" + e.Name
		if seen[key] {
			return nil, fmt.Errorf("two copies of %s are planned: pick one (the newest is listed first)", e.Described())
		}
		seen[key] = true
		obj, err := prepare(e)
		if err != nil {
			return nil, err
		}
		if o.AsNewName != "" {
			obj.SetName(o.AsNewName)
		}
		steps = append(steps, Step{Entry: e, Object: obj})
	}
	ordered, err := order(steps)
	if err != nil {
		return nil, err
	}
	return &Plan{Steps: ordered, overwrite: o.Overwrite}, nil
}

// rank puts what others live in first.
func rank(gr schema.GroupResource) int {
	switch gr {
	case schema.GroupResource{Resource: "namespaces"}:
		return 0
	case schema.GroupResource{Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}:
		return 1
	}
	return 2
}

// order sorts steps by rank, then owners before the objects they own
// (Kahn's algorithm over the ownerReferences within the plan), keeping
// the given order otherwise.
func order(steps []Step) ([]Step, error) {
	slices.SortStableFunc(steps, func(a, b Step) int {
		return rank(a.Entry.Resource.GroupResource()) - rank(b.Entry.Resource.GroupResource())
	})
	byUID := map[types.UID]int{}
	for i, s := range steps {
		byUID[s.Entry.UID] = i
	}
	waiting := make([]int, len(steps))
	dependents := make([][]int, len(steps))
	for i, s := range steps {
		for _, ref := range s.Entry.Owners() {
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
					stuck = append(stuck, steps[i].Entry.Described())
				}
			}
			return nil, fmt.Errorf("the ownerReferences of %s form a cycle", strings.Join(stuck, ", "))
		}
	}
	return out, nil
}

// Owners are the ownerReferences of the kept object.
func (e *Entry) Owners() []metav1.OwnerReference {
	var m struct {
		Metadata struct {
			OwnerReferences []metav1.OwnerReference `json:"ownerReferences"`
		} `json:"metadata"`
	}
	if json.Unmarshal(e.Object, &m) != nil {
		return nil
	}
	return m.Metadata.OwnerReferences
}

// serverSet are the metadata fields the API server sets: a create that
// carried them would be refused, or would claim another object's identity.
var serverSet = []string{"uid", "resourceVersion", "creationTimestamp", "generation", "managedFields",
	"deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"}

// prepare is the object to create from a kept copy.
func prepare(e *Entry) (*unstructured.Unstructured, error) {
	if len(e.Object) == 0 {
		return nil, fmt.Errorf("%s: the copy holds no object (sealed with a key the recycle bin lacks?)", e.Described())
	}
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(e.Object); err != nil {
		return nil, fmt.Errorf("%s: %w", e.Described(), err)
	}
	for _, f := range serverSet {
		unstructured.RemoveNestedField(obj.Object, "metadata", f)
	}
	unstructured.RemoveNestedField(obj.Object, "status")
	switch e.Resource.GroupResource() {
	case schema.GroupResource{Resource: "services"}:
		// A cluster IP is allocated anew, unless the Service is headless.
		if ip, _, _ := unstructured.NestedString(obj.Object, "spec", "clusterIP"); ip != "None" {
			unstructured.RemoveNestedField(obj.Object, "spec", "clusterIP")
			unstructured.RemoveNestedField(obj.Object, "spec", "clusterIPs")
		}
	case schema.GroupResource{Resource: "pods"}:
		// Scheduled again: the node it ran on may be gone.
		unstructured.RemoveNestedField(obj.Object, "spec", "nodeName")
	}
	return obj, nil
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

// Outcome is what became of one step.
type Outcome struct {
	Step Step
	// Created is set when the object was created (or would be, in a dry
	// run); UID is its new UID (empty in a dry run).
	Created bool
	UID     types.UID
	// Refused says why the step was not run (a live object of that name).
	Refused string
	// Replaced is set when a live object was overwritten (Overwrite), or
	// would be in a dry run.
	Replaced bool
	// Diff is how the kept copy differs from the live object of that
	// name (a unified diff of their YAML, server-set fields left out);
	// empty when none is live, or they are the same.
	Diff string
	// Notes say what was changed on the way (ownerReferences).
	Notes []string
}

// Run creates the plan's objects in order. A live object of the same name
// is overwritten only with PlanOptions.Overwrite: otherwise that step is
// refused and the rest go on (an owner refused for that reason is the
// live one, and its dependents point at it). Either way the outcome holds
// the diff between the live object and the copy. An error from the API
// server ends the run; what was created stays.
func (p *Plan) Run(ctx context.Context, c Cluster, dryRun bool) ([]Outcome, error) {
	// newUIDs maps a restored owner's old UID to its UID now; in a dry run
	// the old one stands in.
	newUIDs := map[types.UID]types.UID{}
	// dryNamespaces are the namespaces a dry run "created": the API server
	// cannot validate what goes in them (they do not exist).
	dryNamespaces := map[string]bool{}
	var out []Outcome
	for _, s := range p.Steps {
		o := Outcome{Step: s}
		gvr := s.Entry.Resource
		live, found, err := c.Live(ctx, gvr, s.Object.GetNamespace(), s.Object.GetName())
		if err != nil {
			return out, err
		}
		refs, notes, err := p.relink(ctx, c, s, newUIDs)
		if err != nil {
			return out, err
		}
		obj := s.Object.DeepCopy()
		obj.SetOwnerReferences(refs)
		o.Notes = notes
		if found {
			newUIDs[s.Entry.UID] = live.GetUID()
			if o.Diff, err = diff(live, obj); err != nil {
				return out, err
			}
			if !p.overwrite {
				o.Refused = fmt.Sprintf("%s exists (uid %s): not overwritten; delete it first, restore under another name, or overwrite it (--overwrite)", describe(gvr, s.Object), live.GetUID())
				out = append(out, o)
				continue
			}
			obj.SetResourceVersion(live.GetResourceVersion())
			obj.SetUID(live.GetUID())
			if _, err := c.Update(ctx, gvr, obj, dryRun); err != nil {
				return out, fmt.Errorf("overwriting %s: %w", describe(gvr, obj), err)
			}
			o.Replaced, o.UID = true, live.GetUID()
			out = append(out, o)
			continue
		}
		if dryRun && dryNamespaces[obj.GetNamespace()] {
			o.Created = true
			o.Notes = append(o.Notes, "not validated by the API server: its namespace is created by this restore")
			newUIDs[s.Entry.UID] = s.Entry.UID
			out = append(out, o)
			continue
		}
		created, err := c.Create(ctx, gvr, obj, dryRun)
		if apierrors.IsAlreadyExists(err) {
			// Made meanwhile by someone else (a controller, such as the
			// one that publishes kube-root-ca.crt in every new
			// namespace): left alone, as a live object always is.
			o.Refused = fmt.Sprintf("%s was created meanwhile by someone else: not overwritten", describe(gvr, obj))
			if live, found, lerr := c.Live(ctx, gvr, obj.GetNamespace(), obj.GetName()); lerr == nil && found {
				newUIDs[s.Entry.UID] = live.GetUID()
			}
			out = append(out, o)
			continue
		}
		if err != nil {
			return out, fmt.Errorf("creating %s: %w", describe(gvr, obj), err)
		}
		o.Created = true
		if dryRun {
			newUIDs[s.Entry.UID] = s.Entry.UID
			if gvr.GroupResource() == (schema.GroupResource{Resource: "namespaces"}) {
				dryNamespaces[obj.GetName()] = true
			}
		} else {
			o.UID = created.GetUID()
			newUIDs[s.Entry.UID] = o.UID
		}
		out = append(out, o)
	}
	return out, nil
}

// relink points each ownerReference of s at its owner as it is now.
func (p *Plan) relink(ctx context.Context, c Cluster, s Step, newUIDs map[types.UID]types.UID) ([]metav1.OwnerReference, []string, error) {
	var refs []metav1.OwnerReference
	var notes []string
	for _, ref := range s.Object.GetOwnerReferences() {
		if uid, ok := newUIDs[ref.UID]; ok {
			if uid != ref.UID {
				notes = append(notes, fmt.Sprintf("owner %s/%s restored as uid %s", ref.Kind, ref.Name, uid))
			}
			ref.UID = uid
			refs = append(refs, ref)
			continue
		}
		uid, live, err := c.Owner(ctx, ref, s.Object.GetNamespace())
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

// diff is a unified diff from the live object to the one a restore would
// write, both as YAML without what the API server sets.
func diff(live, restored *unstructured.Unstructured) (string, error) {
	text := func(u *unstructured.Unstructured) (string, error) {
		c := u.DeepCopy()
		for _, f := range serverSet {
			unstructured.RemoveNestedField(c.Object, "metadata", f)
		}
		unstructured.RemoveNestedField(c.Object, "status")
		b, err := yaml.Marshal(c.Object)
		return string(b), err
	}
	a, err := text(live)
	if err != nil {
		return "", err
	}
	b, err := text(restored)
	if err != nil {
		return "", err
	}
	if a == b {
		return "", nil
	}
	return difflib.GetUnifiedDiffString(difflib.UnifiedDiff{A: difflib.SplitLines(a), B: difflib.SplitLines(b),
		FromFile: "live", ToFile: "kept copy", Context: 2})
}
