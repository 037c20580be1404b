package clusterview

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// Namespaces is the view of namespaces' labels and deletion, read by every
// consumer that matches policies or spares a namespace being deleted.
type Namespaces struct {
	informer cache.SharedIndexInformer
}

func (n Namespaces) get(ns string) (metav1.Object, bool) {
	obj, ok, err := n.informer.GetStore().GetByKey(ns)
	if err != nil || !ok {
		return nil, false
	}
	m, err := meta.Accessor(obj)
	return m, err == nil
}

// NamespaceLabels are a namespace's labels; ok is false if it is unknown.
func (n Namespaces) NamespaceLabels(ns string) (map[string]string, bool) {
	m, ok := n.get(ns)
	if !ok {
		return nil, false
	}
	return m.GetLabels(), true
}

// NamespaceTerminating says whether a namespace is being deleted.
func (n Namespaces) NamespaceTerminating(ns string) bool {
	m, ok := n.get(ns)
	return ok && m.GetDeletionTimestamp() != nil
}
