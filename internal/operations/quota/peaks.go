package quota

import (
	"encoding/json"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Peaks are the per-namespace peaks of pod use over a sliding window, kept
// in two buckets of half a window each: the peak over the window is the
// larger of the two. That is constant space per namespace, and a peak
// leaves the window between half a window and a whole one after it
// happened.
type Peaks struct {
	// Window is how long a peak counts.
	Window time.Duration `json:"window"`
	// Start is when the current bucket began.
	Start    time.Time                      `json:"start"`
	Current  map[string]corev1.ResourceList `json:"current,omitempty"`
	Previous map[string]corev1.ResourceList `json:"previous,omitempty"`
}

// MaxNamespaces bounds what Peaks holds, so that its encoding stays well
// inside a ConfigMap's 1 MiB: about 300 bytes a namespace.
const MaxNamespaces = 2000

// DefaultWindow is the window peaks are tracked over.
const DefaultWindow = 14 * 24 * time.Hour

// Observe records one sample of every namespace's use at now and says
// whether any peak rose or a bucket rotated (what is worth writing).
func (p *Peaks) Observe(now time.Time, sample map[string]corev1.ResourceList) bool {
	if p.Window <= 0 {
		p.Window = DefaultWindow
	}
	changed := false
	if p.Start.IsZero() || now.Sub(p.Start) >= p.Window/2 || now.Before(p.Start) {
		// After a whole window without samples, the current bucket is
		// out of the window too.
		stale := !p.Start.IsZero() && now.Sub(p.Start) >= p.Window
		p.Previous, p.Current, p.Start = p.Current, nil, now
		if stale {
			p.Previous = nil
		}
		changed = true
	}
	if p.Current == nil {
		p.Current = map[string]corev1.ResourceList{}
	}
	names := make([]string, 0, len(sample))
	for ns := range sample {
		names = append(names, ns)
	}
	// Deterministic when over the bound: namespaces already held first,
	// then by name.
	slices.Sort(names)
	for _, ns := range names {
		cur, ok := p.Current[ns]
		if !ok && len(p.Current) >= MaxNamespaces {
			continue
		}
		next := Max(cur, sample[ns])
		if !ok || !equal(cur, next) {
			p.Current[ns] = next
			changed = true
		}
	}
	return changed
}

// Peak is a namespace's peak over the window, or nil when none was seen.
func (p *Peaks) Peak(ns string) corev1.ResourceList {
	cur, okC := p.Current[ns]
	prev, okP := p.Previous[ns]
	if !okC && !okP {
		return nil
	}
	return Max(cur, prev)
}

func equal(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for n, q := range a {
		if o, ok := b[n]; !ok || q.Cmp(o) != 0 {
			return false
		}
	}
	return true
}

// PeaksKey is the key of the encoded peaks in their ConfigMap.
const PeaksKey = "peaks.json"

// PeaksConfigMap is the ConfigMap in Rampart's namespace the manager keeps
// the peaks in.
const PeaksConfigMap = "rampart-quota-peaks"

// Encode is the peaks' stored form.
func (p *Peaks) Encode() (string, error) {
	b, err := json.Marshal(p)
	return string(b), err
}

// DecodePeaks reads the stored form; empty gives empty peaks.
func DecodePeaks(s string) (*Peaks, error) {
	p := &Peaks{}
	if s == "" {
		return p, nil
	}
	if err := json.Unmarshal([]byte(s), p); err != nil {
		return nil, err
	}
	return p, nil
}
