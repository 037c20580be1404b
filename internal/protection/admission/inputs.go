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
// A protection declares them by implementing OwnsObjects or OwnsKeys.

// OwnsObjects is a protection made from objects of one kind.
type OwnsObjects interface {
	Objects() ObjectKind
}

// OwnsKeys is a protection scoped by a set of keys.
type OwnsKeys interface {
	Keys() KeySet
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
	// Cached, when set, is the set the protection's views hold (the
	// namespaces holding budgets).
	Cached func() []string
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

// KeysOf is the set ks makes for reg: what its views hold and what reg's
// objects bring, sorted.
func (ks KeySet) KeysOf(reg Registration) []string {
	var keys []string
	if ks.Cached != nil {
		keys = append(keys, ks.Cached()...)
	}
	if ks.OfObjects != nil {
		keys = append(keys, ks.OfObjects(reg)...)
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}
