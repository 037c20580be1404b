// Package backup writes and reads object backups: every object of the
// resources selected, read at one revision of etcd, in a gzipped tar with
// one file per object and a manifest (what, how many, each file's SHA-256,
// the API server's version), kept in a storage.Store (a directory or an
// S3-compatible bucket, like the recycle bin). Secrets are sealed with the
// recycle bin's key. A backup's objects are restored through
// internal/operations/restore.
package backup

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// FormatVersion names the archive's layout; a reader refuses another.
const FormatVersion = "rampart.io/backup/v1"

// Manifest says what a backup holds. It is the archive's last file, and
// is stored again beside the archive (with Archive set) so that listing
// backups reads no archive.
type Manifest struct {
	FormatVersion    string    `json:"formatVersion"`
	Name             string    `json:"name"`
	RampartVersion   string    `json:"rampartVersion"`
	APIServerVersion string    `json:"apiServerVersion"`
	Started          time.Time `json:"started"`
	Finished         time.Time `json:"finished"`
	Selection        Selection `json:"selection"`
	// Owner is the Backup object (NAMESPACE/NAME) that made it on its
	// schedule; empty for `rampart backup create`. Its retention prunes
	// only its own.
	Owner string `json:"owner,omitempty"`
	// ResourceVersion is the etcd revision every list was read at: the
	// objects are as they all were at one moment.
	ResourceVersion string `json:"resourceVersion"`
	// Consistent is false when some resource could not be read at
	// ResourceVersion (see its own resourceVersion, and Warnings).
	Consistent bool       `json:"consistent"`
	Resources  []Resource `json:"resources"`
	// Skipped are the resources discovered but not backed up, and why.
	Skipped  []Skipped `json:"skipped,omitempty"`
	Warnings []string  `json:"warnings,omitempty"`
	Objects  int       `json:"objects"`
	Files    []File    `json:"files"`
	// Archive is the stored archive; set in the copy beside it only.
	Archive *Archive `json:"archive,omitempty"`
}

// Selection is what a backup was asked to hold.
type Selection struct {
	// Namespaces are the namespaces backed up; empty for all, and then
	// every cluster-scoped resource too.
	Namespaces []string `json:"namespaces,omitempty"`
	// Resources are the resources backed up (resource or resource.group);
	// empty for all.
	Resources []string `json:"resources,omitempty"`
	// ExcludeResources are left out.
	ExcludeResources []string `json:"excludeResources,omitempty"`
	// LabelSelector selects objects by label (not the Namespaces and
	// CustomResourceDefinitions the selected objects live in).
	LabelSelector string `json:"labelSelector,omitempty"`
}

// Resource is one resource backed up.
type Resource struct {
	Group      string `json:"group,omitempty"`
	Version    string `json:"version"`
	Resource   string `json:"resource"`
	Kind       string `json:"kind"`
	Namespaced bool   `json:"namespaced"`
	Count      int    `json:"count"`
	// ResourceVersion is the revision its list was read at.
	ResourceVersion string `json:"resourceVersion"`
}

// GVR is the resource's group, version and resource.
func (r Resource) GVR() schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: r.Group, Version: r.Version, Resource: r.Resource}
}

// Skipped is a resource not backed up.
type Skipped struct {
	Resource string `json:"resource"`
	Reason   string `json:"reason"`
}

// File is one object in the archive.
type File struct {
	Path      string    `json:"path"`
	SHA256    string    `json:"sha256"`
	Size      int64     `json:"size"`
	Group     string    `json:"group,omitempty"`
	Version   string    `json:"version"`
	Resource  string    `json:"resource"`
	Kind      string    `json:"kind"`
	Namespace string    `json:"namespace,omitempty"`
	Name      string    `json:"name"`
	UID       types.UID `json:"uid"`
	// KeyID names the key a sealed object (a Secret) was sealed with.
	KeyID string `json:"keyID,omitempty"`
}

// GVR is the file's object's group, version and resource.
func (f File) GVR() schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: f.Group, Version: f.Version, Resource: f.Resource}
}

// Described names the object as kubectl does.
func (f File) Described() string {
	d := f.GVR().GroupResource().String() + "/" + f.Name
	if f.Namespace != "" {
		d += " in namespace " + f.Namespace
	}
	return d
}

// Archive is where the archive is stored, its size and SHA-256.
type Archive struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Size is the stored archive's size, 0 if unknown.
func (m *Manifest) Size() int64 {
	if m.Archive == nil {
		return 0
	}
	return m.Archive.Size
}

// Duration is how long the backup took.
func (m *Manifest) Duration() time.Duration { return m.Finished.Sub(m.Started) }

func (m *Manifest) check() error {
	if m.FormatVersion != FormatVersion {
		return fmt.Errorf("backup %s is in format %q; this rampart reads %q", m.Name, m.FormatVersion, FormatVersion)
	}
	return nil
}
