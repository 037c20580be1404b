package space

import (
	"time"
)

// ReportConfigMap is the ConfigMap, in Rampart's namespace, where the
// manager's leader publishes its last look at etcd's space: rampart
// status shows it, and the gateway's brake reads it.
const ReportConfigMap = "rampart-etcd-space"

// ReportKey is the ConfigMap's key holding the Report as JSON.
const ReportKey = "space.json"

// Report is one look at etcd's space, as the leader publishes it.
type Report struct {
	Verdict Verdict `json:"verdict"`
	Space   Space   `json:"space"`
	// Written are the prefixes written most since the previous look.
	Written []Grown `json:"written"`
	// Since is that look's revision.
	Since     int64   `json:"since"`
	WarnShare float64 `json:"warnShare"`
	Error     string  `json:"error,omitempty"`
	// At is when the look was published, Every how often the leader
	// looks: a reader takes a report older than a few Every for one the
	// leader no longer keeps (no leader, or etcd refusing its writes).
	At    time.Time     `json:"at,omitzero"`
	Every time.Duration `json:"every,omitempty"`
}

// Measured says whether the report holds a verdict on the members' sizes
// (a look that failed before measuring holds none).
func (r Report) Measured() bool { return r.Verdict.Level != "" }

// Taken is when the report was published, or, for a report written
// before reports carried it, when the members were measured.
func (r Report) Taken() time.Time {
	if !r.At.IsZero() {
		return r.At
	}
	return r.Space.At
}
