package backup

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"

	"github.com/rampart-io/rampart/internal/operations/restore"
	"github.com/rampart-io/rampart/internal/plumbing/storage"
	"github.com/rampart-io/rampart/internal/protection/recyclebin"
)

// Creator writes backups of one cluster to one store.
type Creator struct {
	Discovery discovery.DiscoveryInterface
	Dynamic   dynamic.Interface
	Store     storage.Store
	// Key seals Secrets (the recycle bin's key); with none, a backup
	// that would hold a Secret is refused: a Secret is never stored in
	// clear.
	Key *recyclebin.Key
	// RampartVersion is written in the manifest.
	RampartVersion string
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// PageSize is the number of objects per list request (500 if 0).
	PageSize int64
}

var (
	secretsGR    = schema.GroupResource{Resource: "secrets"}
	namespacesGR = schema.GroupResource{Resource: "namespaces"}
	crdsGR       = schema.GroupResource{Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}
)

// ValidName checks a backup's name: a DNS label, so that it is good as a
// folder, an S3 key and an object's name.
func ValidName(name string) error {
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		return fmt.Errorf("backup name %q: %s", name, strings.Join(errs, "; "))
	}
	return nil
}

// candidate is a resource discovery offers.
type candidate struct {
	gvr        schema.GroupVersionResource
	kind       string
	namespaced bool
}

// discover finds every resource the API server can list, at its
// preferred version, custom resources included; and what was skipped.
func (c *Creator) discover(sel Selection) ([]candidate, []Skipped, []string, error) {
	lists, err := c.Discovery.ServerPreferredResources()
	var warnings []string
	if err != nil {
		var failed *discovery.ErrGroupDiscoveryFailed
		if !errors.As(err, &failed) || len(lists) == 0 {
			return nil, nil, nil, fmt.Errorf("discovering the API server's resources: %w", err)
		}
		// An aggregated API that is down: back up the rest, and say so.
		for gv, gerr := range failed.Groups {
			warnings = append(warnings, fmt.Sprintf("%s not backed up: its discovery failed: %v", gv, gerr))
		}
	}
	want := map[string]bool{}
	for _, r := range sel.Resources {
		want[strings.ToLower(r)] = true
	}
	exclude := map[string]bool{}
	for _, r := range sel.ExcludeResources {
		exclude[strings.ToLower(r)] = true
	}
	matches := func(set map[string]bool, gr schema.GroupResource, kind string) bool {
		return set[gr.String()] || set[gr.Resource] || set[strings.ToLower(kind)] || set[strings.ToLower(kind)+"."+gr.Group]
	}
	var out []candidate
	var skipped []Skipped
	seen := map[schema.GroupResource]bool{}
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			continue
		}
		for _, r := range l.APIResources {
			if strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "list") {
				continue // a subresource, or nothing to read
			}
			gr := gv.WithResource(r.Name).GroupResource()
			if seen[gr] {
				continue
			}
			seen[gr] = true
			if reason := restore.NotRestored(gr); reason != "" {
				skipped = append(skipped, Skipped{Resource: gr.String(), Reason: reason})
				continue
			}
			if !slices.Contains(r.Verbs, "create") {
				skipped = append(skipped, Skipped{Resource: gr.String(), Reason: "the API server creates none: nothing to restore"})
				continue
			}
			if matches(exclude, gr, r.Kind) {
				continue
			}
			named := matches(want, gr, r.Kind)
			if len(want) > 0 && !named && gr != namespacesGR && gr != crdsGR {
				continue
			}
			if len(sel.Namespaces) > 0 && !r.Namespaced && !named && gr != namespacesGR && gr != crdsGR {
				continue // cluster-scoped: only when all namespaces are backed up, or named
			}
			out = append(out, candidate{gvr: gv.WithResource(r.Name), kind: r.Kind, namespaced: r.Namespaced})
		}
	}
	for r := range want {
		if !slices.ContainsFunc(out, func(c candidate) bool { return matches(map[string]bool{r: true}, c.gvr.GroupResource(), c.kind) }) {
			return nil, nil, nil, fmt.Errorf("--resources %s: the API server serves no such resource that can be backed up (see kubectl api-resources)", r)
		}
	}
	slices.SortFunc(out, func(a, b candidate) int { return strings.Compare(a.gvr.String(), b.gvr.String()) })
	return out, skipped, warnings, nil
}

// Create writes the backup name of what sel selects, and returns its
// manifest (with Archive set). A backup of that name must not exist.
func (c *Creator) Create(ctx context.Context, name string, sel Selection) (*Manifest, error) {
	return c.CreateFor(ctx, "", name, sel)
}

// CreateFor is Create for a Backup object, owner (NAMESPACE/NAME).
func (c *Creator) CreateFor(ctx context.Context, owner, name string, sel Selection) (*Manifest, error) {
	if err := ValidName(name); err != nil {
		return nil, err
	}
	if _, err := ReadManifest(ctx, c.Store, name); err == nil {
		return nil, fmt.Errorf("backup %s exists: pick another name, or delete it first", name)
	}
	selector, err := labels.Parse(sel.LabelSelector)
	if err != nil {
		return nil, fmt.Errorf("label selector %q: %w", sel.LabelSelector, err)
	}
	now := c.Now
	if now == nil {
		now = time.Now
	}
	m := &Manifest{FormatVersion: FormatVersion, Name: name, RampartVersion: c.RampartVersion, Started: now().UTC(), Selection: sel, Owner: owner, Consistent: true}
	if v, err := c.Discovery.ServerVersion(); err == nil {
		m.APIServerVersion = v.GitVersion
	} else {
		return nil, fmt.Errorf("asking the API server's version: %w", err)
	}
	candidates, skipped, warnings, err := c.discover(sel)
	if err != nil {
		return nil, err
	}
	m.Skipped, m.Warnings = skipped, warnings
	// One revision for every list: the first list is a quorum read at the
	// newest; the rest read exactly that revision, so that an owner and
	// what it owns, a Deployment and its ReplicaSets, are as they were at
	// one moment.
	nsList, err := c.Dynamic.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return nil, fmt.Errorf("reading the current revision: %w", err)
	}
	m.ResourceVersion = nsList.GetResourceVersion()

	pr, pw := io.Pipe()
	archiveName := ArchiveName(name)
	type putResult struct {
		obj storage.Object
		err error
	}
	done := make(chan putResult, 1)
	go func() {
		obj, err := c.Store.Put(ctx, archiveName, pr)
		pr.CloseWithError(err)
		done <- putResult{obj, err}
	}()
	werr := c.write(ctx, pw, m, candidates, selector, now)
	pw.CloseWithError(werr)
	put := <-done
	if werr != nil {
		_ = c.Store.Delete(context.WithoutCancel(ctx), archiveName)
		return nil, werr
	}
	if put.err != nil {
		return nil, fmt.Errorf("storing %s: %w", archiveName, put.err)
	}
	m.Archive = &Archive{Name: archiveName, Size: put.obj.Size, SHA256: put.obj.SHA256}
	// The manifest beside the archive, last: a backup is listed only once
	// its archive is whole.
	raw, err := marshalManifest(m)
	if err != nil {
		return nil, err
	}
	if _, err := c.Store.Put(ctx, manifestName(name), strings.NewReader(string(raw))); err != nil {
		return nil, fmt.Errorf("storing the manifest of %s: %w", name, err)
	}
	return m, nil
}

// write writes the archive: one file per object, the manifest last.
func (c *Creator) write(ctx context.Context, w io.Writer, m *Manifest, candidates []candidate, selector labels.Selector, now func() time.Time) error {
	gz := gzip.NewWriter(w)
	tw := tar.NewWriter(gz)
	addFile := func(name string, data []byte) (string, error) {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o600, Size: int64(len(data)), ModTime: m.Started, Typeflag: tar.TypeReg}); err != nil {
			return "", err
		}
		if _, err := tw.Write(data); err != nil {
			return "", err
		}
		sum := sha256.Sum256(data)
		return hex.EncodeToString(sum[:]), nil
	}
	namespaces := map[string]bool{}
	for _, ns := range m.Selection.Namespaces {
		namespaces[ns] = true
	}
	// Custom resources found, by group/resource: the CRDs they need come
	// along when only some namespaces are backed up.
	found := map[schema.GroupResource]bool{}
	// Namespaces some object backed up lives in: they come along too.
	used := map[string]bool{}
	// CRDs and namespaces go last so that what was found decides which.
	slices.SortStableFunc(candidates, func(a, b candidate) int {
		last := func(c candidate) int {
			if gr := c.gvr.GroupResource(); gr == crdsGR || gr == namespacesGR {
				return 1
			}
			return 0
		}
		return last(a) - last(b)
	})
	for _, cand := range candidates {
		gr := cand.gvr.GroupResource()
		items, rv, err := c.list(ctx, cand, m)
		if err != nil {
			return err
		}
		count := 0
		for _, u := range items {
			keep := true
			switch {
			case gr == namespacesGR && len(namespaces) > 0:
				keep = namespaces[u.GetName()]
			case gr == namespacesGR:
				keep = used[u.GetName()] || selector.Matches(labels.Set(u.GetLabels()))
			case gr == crdsGR:
				group, _, _ := unstructured.NestedString(u.Object, "spec", "group")
				plural, _, _ := unstructured.NestedString(u.Object, "spec", "names", "plural")
				keep = found[schema.GroupResource{Group: group, Resource: plural}]
				if len(namespaces) == 0 {
					keep = keep || selector.Matches(labels.Set(u.GetLabels()))
				}
			default:
				keep = (!cand.namespaced || len(namespaces) == 0 || namespaces[u.GetNamespace()]) && selector.Matches(labels.Set(u.GetLabels()))
			}
			if !keep {
				continue
			}
			if u.GetNamespace() != "" {
				used[u.GetNamespace()] = true
			}
			f, data, err := c.file(cand, &u)
			if err != nil {
				return err
			}
			if f.SHA256, err = addFile(f.Path, data); err != nil {
				return err
			}
			f.Size = int64(len(data))
			m.Files = append(m.Files, f)
			count++
		}
		if count == 0 {
			continue
		}
		found[gr] = true
		m.Resources = append(m.Resources, Resource{Group: cand.gvr.Group, Version: cand.gvr.Version, Resource: cand.gvr.Resource,
			Kind: cand.kind, Namespaced: cand.namespaced, Count: count, ResourceVersion: rv})
		m.Objects += count
	}
	if len(namespaces) > 0 {
		for ns := range namespaces {
			if !slices.ContainsFunc(m.Files, func(f File) bool { return f.Resource == "namespaces" && f.Group == "" && f.Name == ns }) {
				return fmt.Errorf("namespace %s does not exist (at revision %s)", ns, m.ResourceVersion)
			}
		}
	}
	m.Finished = now().UTC()
	raw, err := marshalManifest(m)
	if err != nil {
		return err
	}
	if _, err := addFile(ManifestFile, raw); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return gz.Close()
}

// list reads every object of a resource at the backup's revision, page by
// page. A revision the API server has compacted away (a long backup) is
// read again at the newest, and the manifest says the backup is not one
// moment any more.
func (c *Creator) list(ctx context.Context, cand candidate, m *Manifest) ([]unstructured.Unstructured, string, error) {
	page := c.PageSize
	if page == 0 {
		page = 500
	}
	read := func(rv string) ([]unstructured.Unstructured, string, error) {
		opts := metav1.ListOptions{Limit: page}
		if rv != "" {
			opts.ResourceVersion, opts.ResourceVersionMatch = rv, metav1.ResourceVersionMatchExact
		}
		var items []unstructured.Unstructured
		listRV := rv
		for {
			l, err := c.Dynamic.Resource(cand.gvr).List(ctx, opts)
			if err != nil {
				return nil, "", err
			}
			items = append(items, l.Items...)
			if listRV == "" {
				listRV = l.GetResourceVersion()
			}
			if l.GetContinue() == "" {
				return items, listRV, nil
			}
			// A continued list is read at the first page's revision.
			opts = metav1.ListOptions{Limit: page, Continue: l.GetContinue()}
		}
	}
	items, rv, err := read(m.ResourceVersion)
	if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) || apierrors.IsBadRequest(err) {
		// Compacted away, or a resource served by another storage (an
		// aggregated API server) that knows no such revision.
		m.Consistent = false
		m.Warnings = append(m.Warnings, fmt.Sprintf("%s read at a later revision than %s: %v", cand.gvr.GroupResource(), m.ResourceVersion, err))
		items, rv, err = read("")
	}
	if apierrors.IsForbidden(err) {
		// Never a backup silently without a resource: say how to leave it
		// out on purpose.
		return nil, "", fmt.Errorf("listing %s: %w: use credentials that may list it, or leave it out (--exclude-resources %s)", cand.gvr.GroupResource(), err, cand.gvr.GroupResource())
	}
	if err != nil {
		return nil, "", fmt.Errorf("listing %s: %w", cand.gvr.GroupResource(), err)
	}
	return items, rv, nil
}

// file is an object's file in the archive: its JSON, sealed for a Secret.
func (c *Creator) file(cand candidate, u *unstructured.Unstructured) (File, []byte, error) {
	f := File{Group: cand.gvr.Group, Version: cand.gvr.Version, Resource: cand.gvr.Resource, Kind: cand.kind,
		Namespace: u.GetNamespace(), Name: u.GetName(), UID: u.GetUID()}
	f.Path = objectPath(f)
	data, err := u.MarshalJSON()
	if err != nil {
		return f, nil, err
	}
	if cand.gvr.GroupResource() == secretsGR {
		if c.Key == nil {
			return f, nil, fmt.Errorf("%s: a Secret is backed up only encrypted, and no key was given: give the recycle bin's key (rampart backup --key-file; the manager's --backup-key-file), or leave Secrets out (--exclude-resources secrets; a Backup's spec.excludeResources)", f.Described())
		}
		if data, err = c.Key.Seal(data, []byte(f.UID)); err != nil {
			return f, nil, err
		}
		f.KeyID = c.Key.ID()
		f.Path += sealedSuffix
	}
	return f, data, nil
}

// clusterScope stands for "no namespace" in a path (no namespace can be
// called so: an underscore is not allowed in one).
const clusterScope = "_cluster"

const sealedSuffix = ".sealed"

// ManifestFile is the manifest's name in the archive.
const ManifestFile = "manifest.json"

func objectPath(f File) string {
	ns := f.Namespace
	if ns == "" {
		ns = clusterScope
	}
	return path.Join("objects", ns, f.GVR().GroupResource().String(), f.Name+".json")
}
