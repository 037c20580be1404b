package budget

import (
	"fmt"
	"strings"
	"testing"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

func TestGeneratedSpecWithGroups(t *testing.T) {
	for _, tt := range []struct {
		name        string
		annotations map[string]string
		want, err   string
	}{
		{"by zone, one zone at a time", map[string]string{v1alpha1.AnnotationGeneratePUBGroupBy: "topology.kubernetes.io/zone",
			v1alpha1.AnnotationGeneratePUBMaxGroupsDisrupted: "1", v1alpha1.AnnotationGeneratePUBMaxUnavailable: "25%"},
			"groupBy topology.kubernetes.io/zone, at most 1 groups, maxUnavailable 25%", ""},
		{"a gang", map[string]string{v1alpha1.AnnotationGeneratePUBGroupBy: "job", v1alpha1.AnnotationGeneratePUBMaxGroupsDisrupted: "2",
			v1alpha1.AnnotationGeneratePUBGang: "true"}, "groupBy job, at most 2 groups, gang", ""},
		{"a gang needs a cap", map[string]string{v1alpha1.AnnotationGeneratePUBGroupBy: "job", v1alpha1.AnnotationGeneratePUBGang: "true"},
			"", "rampart.io/generate-pub-gang needs rampart.io/generate-pub-max-groups-disrupted"},
		{"a gang has no size", map[string]string{v1alpha1.AnnotationGeneratePUBGroupBy: "job", v1alpha1.AnnotationGeneratePUBGang: "true",
			v1alpha1.AnnotationGeneratePUBMaxGroupsDisrupted: "1", v1alpha1.AnnotationGeneratePUBMinAvailable: "3"}, "", "a gang budget counts whole groups"},
		{"a cap needs groups", map[string]string{v1alpha1.AnnotationGeneratePUBMaxGroupsDisrupted: "1"}, "", "need rampart.io/generate-pub-group-by"},
		{"a bad cap", map[string]string{v1alpha1.AnnotationGeneratePUBGroupBy: "shard", v1alpha1.AnnotationGeneratePUBMaxGroupsDisrupted: "-1"},
			"", "a count of 0 or more"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			spec, err := GeneratedSpec(tt.annotations, nil)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := "groupBy " + spec.GroupBy.LabelKey
			if spec.MaxGroupsDisrupted != nil {
				got += ", at most " + fmt.Sprint(*spec.MaxGroupsDisrupted) + " groups"
			}
			if spec.Gang {
				got += ", gang"
			}
			if spec.MaxUnavailable != nil {
				got += ", maxUnavailable " + spec.MaxUnavailable.String()
			}
			if got != tt.want {
				t.Fatalf("spec %s, want %s", got, tt.want)
			}
		})
	}
}
