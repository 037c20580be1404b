package gateway

import (
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestIdleCounts(t *testing.T) {
	t0 := time.Unix(10000, 0)
	idleAfter := 10 * time.Minute
	gr := func(r string) schema.GroupResource { return schema.GroupResource{Resource: r} }
	resources := map[schema.GroupResource]*namespaceCounts{
		gr("configmaps"): {lastUsed: t0.Add(-11 * time.Minute)},
		gr("secrets"):    {lastUsed: t0.Add(-9 * time.Minute)},
		gr("events"):     {lastUsed: t0.Add(-10 * time.Minute)},
		// Counted from the start (--count-resources), never stopped,
		// even never used.
		gr("pods"): {eager: true},
	}
	for _, tc := range []struct {
		name string
		now  time.Time
		want []string
	}{
		{"unused for 11 and exactly 10 minutes", t0, []string{"configmaps", "events"}},
		{"a minute later secrets too", t0.Add(time.Minute), []string{"configmaps", "events", "secrets"}},
		{"all recently used", t0.Add(-9 * time.Minute), nil},
	} {
		var got []string
		for _, g := range idleCounts(resources, tc.now, idleAfter) {
			got = append(got, g.Resource)
		}
		slices.Sort(got)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: idle %v, want %v", tc.name, got, tc.want)
		}
	}
}
