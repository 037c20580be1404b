// Package admissiontest helps the tests of the admission handlers: an
// Event recorder, and the value of a counter the handlers export.
package admissiontest

import (
	"fmt"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Recorder keeps the Events it is given as "TYPE REASON on OBJECT: NOTE".
type Recorder struct {
	mu     sync.Mutex
	events []string
}

// Eventf implements events.EventRecorder.
func (r *Recorder) Eventf(regarding, _ runtime.Object, eventtype, reason, _, note string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	name := ""
	if ref, ok := regarding.(*corev1.ObjectReference); ok {
		name = ref.Kind + " " + ref.Namespace + "/" + ref.Name
	} else if o, ok := regarding.(interface{ GetName() string }); ok {
		name = o.GetName()
	}
	r.events = append(r.events, fmt.Sprintf("%s %s on %s: %s", eventtype, reason, name, fmt.Sprintf(note, args...)))
}

// All are the Events recorded.
func (r *Recorder) All() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.events...)
}

// Counter is the value of the counter name with labels (name, value
// pairs) in controller-runtime's metrics registry, 0 when none.
func Counter(t testing.TB, name string, labels ...string) float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metric:
		for _, m := range f.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, l := range m.GetLabel() {
					if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue metric
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}
