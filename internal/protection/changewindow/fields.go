package changewindow

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// Changed lists the guarded paths whose values differ between two objects
// (as decoded JSON), with list indexes made concrete, e.g.
// spec.template.spec.containers[1].image. A path absent from both is
// unchanged; absent from one, changed.
func Changed(old, cur map[string]any, paths []string) []string {
	var out []string
	for _, p := range paths {
		steps := parse(p)
		a, b := map[string]any{}, map[string]any{}
		collect(old, steps, "", a)
		collect(cur, steps, "", b)
		for k, v := range a {
			if w, ok := b[k]; !ok || !reflect.DeepEqual(v, w) {
				out = append(out, k)
			}
		}
		for k := range b {
			if _, ok := a[k]; !ok {
				out = append(out, k)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// step is one field of a path, with its list index: -1 none, -2 every.
type step struct {
	field string
	index int
}

const (
	noIndex  = -1
	anyIndex = -2
)

// parse splits "a.b[*].c[2]" into steps. CRD validation guarantees the
// syntax; anything else reads as a plain field name.
func parse(path string) []step {
	var out []step
	for _, part := range strings.Split(path, ".") {
		s := step{field: part, index: noIndex}
		if i := strings.IndexByte(part, '['); i > 0 && strings.HasSuffix(part, "]") {
			s.field = part[:i]
			switch idx := part[i+1 : len(part)-1]; idx {
			case "*":
				s.index = anyIndex
			default:
				if n, err := strconv.Atoi(idx); err == nil {
					s.index = n
				}
			}
		}
		out = append(out, s)
	}
	return out
}

// collect records the values at steps under their concrete paths.
func collect(obj any, steps []step, prefix string, into map[string]any) {
	if len(steps) == 0 {
		into[prefix] = obj
		return
	}
	m, ok := obj.(map[string]any)
	if !ok {
		return
	}
	s := steps[0]
	v, ok := m[s.field]
	if !ok {
		return
	}
	here := s.field
	if prefix != "" {
		here = prefix + "." + s.field
	}
	if s.index == noIndex {
		collect(v, steps[1:], here, into)
		return
	}
	list, ok := v.([]any)
	if !ok {
		return
	}
	for i, item := range list {
		if s.index == anyIndex || s.index == i {
			collect(item, steps[1:], fmt.Sprintf("%s[%d]", here, i), into)
		}
	}
}
