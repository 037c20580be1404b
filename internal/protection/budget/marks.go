package budget

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/resourceversion"
)

// Change marks let a reader of the index know it is as current as the API
// server without writing anything (the fence writes; see Fence). Before the
// API server stores a budget's creation or a change of its spec, the
// objects webhook adds a mark of it (its UID and new generation) to the
// namespace's marks: one budget in the manager's namespace, named
// MarksName(ns), which covers no pod and is never filed. A reader gets
// the marks live (a GET without resourceVersion, which the API server
// serves from etcd, not from its watch cache) and then:
//
//   - waits until the index has filed the marks at that resourceVersion
//     (one watch, ordered by resourceVersion: every budget event before
//     the marks' last write is filed then; it has been, almost always);
//   - reads live each marked budget the index has not filed at its UID
//     and generation (a change accepted a moment ago, or still being
//     stored).
//
// A change accepted before the read left its mark before it was stored,
// so the read sees either its mark, or a newer write of the marks that
// pruned it. A writer prunes only the marks of budgets its own index has
// filed at that generation (so the budget's event came before the pruning
// write, and a reader that has filed the pruning write has filed it), and
// those older than MarkKeptFor that its index has not seen (a creation
// another webhook refused, or a budget deleted since): see Prunable.

// MarksPrefix begins the names of the change marks' budgets; the rest is
// the namespace they are for.
const MarksPrefix = "rampart-changes."

// MarksName is the name of the marks of budget changes in namespace ns.
func MarksName(ns string) string { return MarksPrefix + ns }

// markAnnotationPrefix begins each mark's annotation key; the rest is the
// budget's UID and generation (a budget's name may be longer than an
// annotation's key allows; the value holds it).
const markAnnotationPrefix = "changes.rampart.io/"

// MarksOverflow is the annotation a writer sets, with the time, when the
// marks would grow past MaxMarks (an index far behind, or a storm of
// creations): it removes them, and until MarkKeptFor has passed readers
// list or fence instead (both sure without marks).
const MarksOverflow = markAnnotationPrefix + "overflow"

// MaxMarks is the most marks kept: about 80 bytes each, far from the 1.5
// MiB that etcd stores of one object.
const MaxMarks = 2000

// Overflowed says whether marks with these annotations overflowed less
// than MarkKeptFor before now (see MarksOverflow).
func Overflowed(annotations map[string]string, now time.Time) bool {
	v, ok := annotations[MarksOverflow]
	if !ok {
		return false
	}
	sec, err := strconv.ParseInt(v, 10, 64)
	return err != nil || now.Sub(time.Unix(sec, 0)) < MarkKeptFor
}

// MarkKeptFor is how long a mark of a budget the writer's index has not
// seen is kept: far longer than an API server takes to store a change it
// has admitted (its requests time out after 60 s).
const MarkKeptFor = 5 * time.Minute

// Mark is one budget change: the budget, and the generation of its spec
// the change made.
type Mark struct {
	// Annotation is the mark's annotation key on the marks' budget.
	Annotation string
	Name, UID  string
	Generation int64
	At         time.Time
}

// MarkAnnotation is the annotation (key and value) that marks a change.
func MarkAnnotation(name, uid string, generation int64, at time.Time) (key, value string) {
	return fmt.Sprintf("%s%s.%d", markAnnotationPrefix, uid, generation), fmt.Sprintf("%d %s", at.Unix(), name)
}

// ParseMarks reads the marks in a marks budget's annotations; others are
// ignored, as are marks that do not parse.
func ParseMarks(annotations map[string]string) []Mark {
	var out []Mark
	for k, v := range annotations {
		rest, ok := strings.CutPrefix(k, markAnnotationPrefix)
		if !ok {
			continue
		}
		dot := strings.LastIndexByte(rest, '.')
		at, name, ok := strings.Cut(v, " ")
		if dot <= 0 || !ok || name == "" {
			continue
		}
		gen, err1 := strconv.ParseInt(rest[dot+1:], 10, 64)
		sec, err2 := strconv.ParseInt(at, 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		out = append(out, Mark{Annotation: k, Name: name, UID: rest[:dot], Generation: gen, At: time.Unix(sec, 0)})
	}
	return out
}

// SetMarking turns the change marks on (see MarksName): the objects
// webhook writes them, and a disruption reads them rather than listing
// or fencing. Call it, with SetFence, before the index is fed.
func (x *Index) SetMarking(on bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.marking = on
}

// Marking says whether change marks are written and read.
func (x *Index) Marking() bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.marking && x.fence.Name != ""
}

// MarksKey is the budget holding the marks of namespace ns ("" Name when
// there is no fence, hence no manager's namespace).
func (x *Index) MarksKey(ns string) Key {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if x.fence.Name == "" {
		return Key{}
	}
	return Key{x.fence.Namespace, MarksName(ns)}
}

// marksFor says which namespace's marks budget ns/name holds, if it is one.
// Call with x.mu held.
func (x *Index) marksFor(ns, name string) (string, bool) {
	if x.fence.Name == "" || ns != x.fence.Namespace {
		return "", false
	}
	of, ok := strings.CutPrefix(name, MarksPrefix)
	return of, ok && of != ""
}

// IsOwn says whether budget ns/name is one of the manager's own: the fence
// or a namespace's change marks. Neither covers a pod nor is filed.
func (x *Index) IsOwn(ns, name string) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	_, marks := x.marksFor(ns, name)
	return marks || (x.fence.Name != "" && x.fence == Key{ns, name})
}

type marksSeen struct {
	rv    string
	marks []Mark
}

// sawMarks files namespace of's marks as written at resourceVersion rv.
func (x *Index) sawMarks(of, rv string, annotations map[string]string) {
	marks := ParseMarks(annotations)
	x.mu.Lock()
	defer x.mu.Unlock()
	if old := x.marks[of]; old != nil {
		if c, err := resourceversion.CompareResourceVersion(rv, old.rv); err == nil && c <= 0 {
			return
		}
	}
	x.marks[of] = &marksSeen{rv: rv, marks: marks}
	close(x.marked)
	x.marked = make(chan struct{})
}

func (x *Index) forgetMarks(of string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	delete(x.marks, of)
}

// WaitMarks returns once the index has filed namespace ns's marks at
// resourceVersion rv or later: every budget event before that write is
// filed then.
func (x *Index) WaitMarks(ctx context.Context, ns, rv string) error {
	return waitFiled(ctx, rv, "the change marks of namespace "+ns, func() (string, chan struct{}) {
		x.mu.RLock()
		defer x.mu.RUnlock()
		if m := x.marks[ns]; m != nil {
			return m.rv, x.marked
		}
		return "", x.marked
	})
}

// filedAs is the UID and generation budget ns/name is filed at (filed or
// unresolved). Call with x.mu held.
func (n *nsIndex) filedAs(name string) (uid string, gen int64, ok bool) {
	if e := n.budgets[name]; e != nil {
		return e.uid, e.generation, true
	}
	if u, found := n.unresolved[name]; found {
		return u.uid, u.generation, true
	}
	return "", 0, false
}

// CoveringMarked is Covering, given the marks of ns read live (after
// WaitMarks): keys are the filed budgets that cover the pod, and unsure the
// budgets the caller must read live — those marked at a UID or generation
// the index has not filed, and the targetRef budgets not resolved yet. keys
// leaves those out.
func (x *Index) CoveringMarked(ns string, l map[string]string, marks []Mark) (keys []Key, unsure []string) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	n := x.ns[ns]
	out := map[string]struct{}{}
	for _, m := range marks {
		if n == nil {
			out[m.Name] = struct{}{}
			continue
		}
		if uid, gen, ok := n.filedAs(m.Name); !ok || uid != m.UID || gen < m.Generation {
			out[m.Name] = struct{}{}
		}
	}
	if n != nil {
		for name := range n.unresolved {
			out[name] = struct{}{}
		}
		for _, e := range n.covering(l) {
			if _, skip := out[e.key.Name]; !skip {
				keys = append(keys, e.key)
			}
		}
	}
	for name := range out {
		unsure = append(unsure, name)
	}
	slices.Sort(unsure)
	return keys, unsure
}

// Marks are ns's marks as this index last filed them.
func (x *Index) Marks(ns string) []Mark {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if seen := x.marks[ns]; seen != nil {
		return slices.Clone(seen.marks)
	}
	return nil
}

// Prunable are the annotations of ns's marks (as this index last filed
// them) that a writer may remove: those of budgets filed at the marked UID
// and generation or later, and any older than MarkKeptFor.
func (x *Index) Prunable(ns string, now time.Time) []string {
	x.mu.RLock()
	defer x.mu.RUnlock()
	seen := x.marks[ns]
	if seen == nil {
		return nil
	}
	n := x.ns[ns]
	var out []string
	for _, m := range seen.marks {
		var uid string
		var gen int64
		filed := false
		if n != nil {
			uid, gen, filed = n.filedAs(m.Name)
		}
		if (filed && uid == m.UID && gen >= m.Generation) || now.Sub(m.At) > MarkKeptFor {
			out = append(out, m.Annotation)
		}
	}
	return out
}

// MarkedNamespaces are the namespaces whose marks the index has filed,
// sorted.
func (x *Index) MarkedNamespaces() []string {
	x.mu.RLock()
	defer x.mu.RUnlock()
	out := make([]string, 0, len(x.marks))
	for ns := range x.marks {
		out = append(out, ns)
	}
	slices.Sort(out)
	return out
}
