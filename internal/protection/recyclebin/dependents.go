package recyclebin

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// Dependents are the newest kept copies of what went with e: for a
// namespace, every object kept from it since it was deleted; for another
// object, what it owned, directly or not.
func (b *Bin) Dependents(ctx context.Context, e Entry) ([]Entry, error) {
	isNamespace := e.Resource.GroupResource() == schema.GroupResource{Resource: "namespaces"}
	scope := e.Namespace
	if isNamespace {
		scope = e.Name
	}
	if scope == "" {
		return nil, nil // a cluster-scoped owner: its dependents may be anywhere; name them
	}
	listed, err := b.List(ctx, scope)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var kept []Entry
	for _, l := range listed { // newest first: the first copy of each object wins
		key := l.Resource.String() + "/" + l.Name
		if seen[key] || l.UID == e.UID || l.DeletedAt.Before(e.DeletedAt.Add(-time.Second)) {
			continue
		}
		c, err := b.Get(ctx, l.StoreName)
		if err != nil {
			return nil, err
		}
		if c.State == StateNotDeleted {
			continue // never deleted: an older copy may stand for it
		}
		seen[key] = true
		kept = append(kept, c)
	}
	if isNamespace {
		return kept, nil
	}
	// What e owned, transitively.
	owned := map[types.UID]bool{e.UID: true}
	var out []Entry
	for grew := true; grew; {
		grew = false
		for _, c := range kept {
			if owned[c.UID] {
				continue
			}
			for _, ref := range c.Owners() {
				if owned[ref.UID] {
					owned[c.UID], grew = true, true
					out = append(out, c)
					break
				}
			}
		}
	}
	return out, nil
}
