package restore

import (
	"encoding/json"
	"fmt"
	"strings"

	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	"sigs.k8s.io/structured-merge-diff/v6/typed"
)

// FieldChange is one field a restore changes on a live object.
type FieldChange struct {
	// Path is the field, as .metadata.labels.tier; a list is one field.
	Path string
	// Live and Copy are the field's values as JSON, empty when the field
	// is absent on that side.
	Live, Copy string
}

// String reads as "path: live -> copy".
func (f FieldChange) String() string {
	or := func(s string) string {
		if s == "" {
			return "(absent)"
		}
		return s
	}
	return fmt.Sprintf("%s: %s -> %s", f.Path, or(f.Live), or(f.Copy))
}

// fieldChanges compares two objects field by field with the comparison
// server-side apply makes (structured-merge-diff, the type deduced from
// the objects: maps compared key by key, lists whole), leaves only.
func fieldChanges(live, kept map[string]any) ([]FieldChange, error) {
	lv, err := typed.DeducedParseableType.FromUnstructured(live)
	if err != nil {
		return nil, err
	}
	kv, err := typed.DeducedParseableType.FromUnstructured(kept)
	if err != nil {
		return nil, err
	}
	cmp, err := lv.Compare(kv)
	if err != nil {
		return nil, err
	}
	changed := cmp.Modified.Union(cmp.Added).Union(cmp.Removed)
	var out []FieldChange
	changed.Leaves().Iterate(func(p fieldpath.Path) {
		out = append(out, FieldChange{Path: p.String(), Live: valueAt(live, p), Copy: valueAt(kept, p)})
	})
	return out, nil
}

// valueAt is the JSON of the field at p in obj, or "" if it is absent.
// Deduced paths hold only field names.
func valueAt(obj map[string]any, p fieldpath.Path) string {
	var v any = obj
	for _, pe := range p {
		m, ok := v.(map[string]any)
		if !ok || pe.FieldName == nil {
			return ""
		}
		if v, ok = m[*pe.FieldName]; !ok {
			return ""
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
