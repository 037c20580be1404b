package admission

import (
	"context"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

// What a protection's webhooks are made from is declared by the
// protection itself, and the registrar, the in-force probe, the manager's
// informers and the Ready controller take it from there:
//
//   - ObjectKind: a kind of object each of which registers webhooks of its
//     own (a ProtectionPolicy, a DeletionFlowControl). The registrar lists
//     them from the cache, re-registers when one's spec changes, puts a new
//     one in force before its creation is admitted (SpecPath), and its
//     Ready condition follows its webhooks.
//   - KeySet: a set of names the webhooks are scoped with that are not
//     objects of the protection's own (the workloads whose scale
//     subresource is guarded, the namespaces holding budgets), computed
//     from the protection's views; a key brought by a request is put in
//     force with InForce.Key.
//
//   - WideningSet: webhooks kept wider for a while than the caches make
//     them (a policy just admitted judges the scale of all its resources
//     until the view lists the workloads it covers), never caught up by
//     the caches: kept until they expire.
//
// A protection declares them by implementing OwnsObjects, OwnsKeys or
// OwnsWidenings.

// OwnsObjects is a protection made from objects of one kind.
type OwnsObjects interface {
	Objects() ObjectKind
}

// OwnsKeys is a protection scoped by a set of keys.
type OwnsKeys interface {
	Keys() KeySet
}

// OwnsWidenings is a protection whose webhooks widen for a while.
type OwnsWidenings interface {
	Widenings() WideningSet
}

// WideningSet is a set of widenings a protection's webhooks are made
// from (Registration.Widenings).
type WideningSet struct {
	// Name names the set in Registration.Widenings and InForce.Widen.
	Name string
	// OfObject, when set, are the widenings an object brings when it is
	// put in force (InForce.Object), kept past its own pending time.
	OfObject func(client.Object) []Widening
}

// Widening is one object's webhooks kept wide for a while: Key, when set,
// says to what (a namespace).
type Widening struct {
	Object client.Object
	Key    string
}

// Widened are reg's widenings of set, each with its object as PT.
func Widened[PT client.Object](reg Registration, set string) []WideningOf[PT] {
	out := make([]WideningOf[PT], 0, len(reg.Widenings[set]))
	for _, w := range reg.Widenings[set] {
		out = append(out, WideningOf[PT]{Object: w.Object.(PT), Key: w.Key})
	}
	return out
}

// WideningOf is a Widening of an object of type PT.
type WideningOf[PT client.Object] struct {
	Object PT
	Key    string
}

// WithWidening is reg with w in its set named set, in place of a widening
// of the same object and key (one object widened twice within its
// pending time, changed twice: two would be two webhooks of one name, and
// the API server refuses the whole configuration).
func (reg Registration) WithWidening(set string, w Widening) Registration {
	out := make(map[string][]Widening, len(reg.Widenings)+1)
	for k, v := range reg.Widenings {
		out[k] = v
	}
	same := func(o Widening) bool {
		return KindOf(o.Object) == KindOf(w.Object) && o.Object.GetNamespace() == w.Object.GetNamespace() &&
			o.Object.GetName() == w.Object.GetName() && o.Key == w.Key
	}
	out[set] = append(slices.DeleteFunc(slices.Clone(out[set]), same), w)
	reg.Widenings = out
	return reg
}

// ObjectKind is a kind of object each of which registers webhooks of its
// own, owned by it (Owner{Kind, Namespace, Name}).
type ObjectKind struct {
	// Kind is the API kind, as in Registration.Objects and owners.
	Kind string
	// Resource is its plural resource name.
	Resource string
	// Namespaced kinds are admitted by the objects webhook, cluster-scoped
	// ones by the spec webhook.
	Namespaced bool
	// New is an empty object of the kind and NewList an empty list.
	New     func() client.Object
	NewList func() client.ObjectList
	// Validate, when set, refuses an object the CRD's schema cannot judge
	// (a ChangeWindow's cron expressions), before anything is registered.
	Validate func(client.Object) error
}

// NewObjectKind declares the kind of T (its API kind named kind, its resource
// resource).
func NewObjectKind[T any, PT interface {
	*T
	client.Object
}, L any, PL interface {
	*L
	client.ObjectList
}](kind, resource string, namespaced bool) ObjectKind {
	return ObjectKind{Kind: kind, Resource: resource, Namespaced: namespaced,
		New: func() client.Object { return PT(new(T)) }, NewList: func() client.ObjectList { return PL(new(L)) }}
}

// List lists the kind's objects from r, sorted by namespace and name (so
// that the configuration made from them is stable).
func (k ObjectKind) List(ctx context.Context, r client.Reader) ([]client.Object, error) {
	list := k.NewList()
	if err := r.List(ctx, list); err != nil {
		return nil, err
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil, err
	}
	out := make([]client.Object, 0, len(items))
	for _, it := range items {
		out = append(out, it.(client.Object))
	}
	slices.SortFunc(out, func(a, b client.Object) int {
		return strings.Compare(a.GetNamespace()+"/"+a.GetName(), b.GetNamespace()+"/"+b.GetName())
	})
	return out, nil
}

// KeySet is a set of keys a protection's webhooks are scoped with.
type KeySet struct {
	// Name names the set in Registration.Keys and in pending marks.
	Name string
	// All, when set, is the whole set for reg: what the protection's
	// views hold (the namespaces holding budgets, the labelled workloads)
	// and what reg's objects bring (the workloads its policies guard).
	All func(reg Registration) []string
	// OfObjects, when set, are the keys the objects of reg bring (the
	// workloads the policies in reg guard): a pending object is marked
	// with them too.
	OfObjects func(reg Registration) []string
	// HasSynced says whether the views hold the whole cluster: a replica
	// whose views are still filling writes no configuration.
	HasSynced func() bool
	// Changes, when set, signals that From may have changed.
	Changes <-chan struct{}
}

// ObjectsOf are reg's objects of kind, as PT.
func ObjectsOf[PT client.Object](reg Registration, kind string) []PT {
	out := make([]PT, 0, len(reg.Objects[kind]))
	for _, o := range reg.Objects[kind] {
		out = append(out, o.(PT))
	}
	return out
}

// scheme knows Rampart's kinds (KindOf).
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = v1alpha1.AddToScheme(s)
	return s
}()

// KindOf is the API kind of one of Rampart's objects.
func KindOf(obj client.Object) string {
	gvk, err := apiutil.GVKForObject(obj, scheme)
	if err != nil {
		return ""
	}
	return gvk.Kind
}

// OwnerOf is the owner of the webhooks obj registers.
func OwnerOf(obj client.Object) Owner {
	return Owner{Kind: KindOf(obj), Namespace: obj.GetNamespace(), Name: obj.GetName()}
}

// With is reg with objs among its objects, each in place of the object
// of the same kind, namespace and name (none is changed in reg).
func (reg Registration) With(objs ...client.Object) Registration {
	out := make(map[string][]client.Object, len(reg.Objects)+len(objs))
	for k, v := range reg.Objects {
		out[k] = v
	}
	for _, obj := range objs {
		kind := KindOf(obj)
		out[kind] = append(slices.DeleteFunc(slices.Clone(out[kind]), func(o client.Object) bool {
			return o.GetNamespace() == obj.GetNamespace() && o.GetName() == obj.GetName()
		}), obj)
	}
	reg.Objects = out
	return reg
}

// WithKeys is reg with keys added to its set named set, sorted and
// without repeats.
func (reg Registration) WithKeys(set string, keys ...string) Registration {
	out := make(map[string][]string, len(reg.Keys)+1)
	for k, v := range reg.Keys {
		out[k] = v
	}
	merged := append(slices.Clone(out[set]), keys...)
	slices.Sort(merged)
	out[set] = slices.Compact(merged)
	reg.Keys = out
	return reg
}

// ObjectWebhooks are the webhooks obj registers under reg, one per local
// replica, as the configuration holds them: what its Ready condition
// waits for.
func ObjectWebhooks(reg Registration, obj client.Object) []admissionregistrationv1.ValidatingWebhook {
	return OwnedWebhooks(reg.With(obj), OwnerOf(obj))
}

// KeysOf is the set ks makes for reg (All), sorted.
func (ks KeySet) KeysOf(reg Registration) []string {
	if ks.All == nil {
		return nil
	}
	keys := slices.Clone(ks.All(reg))
	slices.Sort(keys)
	return slices.Compact(keys)
}
