package nodeguard

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

// The labels the kubelet puts on every sandbox and container it creates
// (k8s.io/kubelet/pkg/types/labels.go; copied, not imported, to keep that
// module out of go.mod for four strings).
const (
	labelPodName       = "io.kubernetes.pod.name"
	labelPodNamespace  = "io.kubernetes.pod.namespace"
	labelPodUID        = "io.kubernetes.pod.uid"
	labelContainerName = "io.kubernetes.container.name"
)

func podRefOf(labels map[string]string) PodRef {
	return PodRef{UID: types.UID(labels[labelPodUID]), Namespace: labels[labelPodNamespace], Name: labels[labelPodName]}
}

// entry is what the guard remembers of one runtime ID: whose it is, and
// what the runtime's status may not say again (the image a container was
// created from, as the pod spec named it).
type entry struct {
	Pod PodRef
	// For containers.
	SandboxID    string
	Container    string
	CreatedImage string
	// For sandboxes: the pod's labels at creation carried the label.
	Protected bool
}

// index maps sandbox and container IDs to pods. It is built from the
// runtime's lists at start, kept current from the RunPodSandbox and
// CreateContainer calls that pass through, filled on a miss, and entries
// go when a Remove succeeds. It is a cache of identity only: whether a
// container runs is always asked of the runtime when it matters.
type index struct {
	mu   sync.RWMutex
	byID map[string]entry
}

func newIndex() *index { return &index{byID: map[string]entry{}} }

func (x *index) get(id string) (entry, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	e, ok := x.byID[id]
	return e, ok
}

func (x *index) put(id string, e entry) {
	if id == "" || e.Pod.UID == "" {
		return // not a pod's: nothing to remember
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if old, ok := x.byID[id]; ok && e.CreatedImage == "" {
		e.CreatedImage = old.CreatedImage // a status that lacks it must not erase what the create said
	}
	x.byID[id] = e
}

// drop forgets an ID and, for a sandbox, its containers.
func (x *index) drop(id string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	delete(x.byID, id)
	for cid, e := range x.byID {
		if e.SandboxID == id {
			delete(x.byID, cid)
		}
	}
}

func (x *index) len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.byID)
}

// rebuild reads every sandbox and container the runtime has.
func (x *index) rebuild(ctx context.Context, rt runtimeapi.RuntimeServiceClient) error {
	sbs, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return err
	}
	cs, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		return err
	}
	fresh := map[string]entry{}
	for _, sb := range sbs.GetItems() {
		if e := sandboxEntry(sb.GetLabels()); e.Pod.UID != "" {
			fresh[sb.GetId()] = e
		}
	}
	for _, c := range cs.GetContainers() {
		if e := containerEntry(c); e.Pod.UID != "" {
			fresh[c.GetId()] = e
		}
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	for id, e := range fresh {
		if old, ok := x.byID[id]; ok && e.CreatedImage == "" {
			e.CreatedImage = old.CreatedImage
		}
		x.byID[id] = e
	}
	return nil
}

// sandboxEntry reads the kubelet's labels only: a sandbox made by hand
// (crictl runp) has metadata but is no pod of the API's.
func sandboxEntry(labels map[string]string) entry {
	return entry{Pod: podRefOf(labels), Protected: labels[v1alpha1.LabelExplicitDeletion] == "true"}
}

func containerEntry(c *runtimeapi.Container) entry {
	return entry{Pod: podRefOf(c.GetLabels()), SandboxID: c.GetPodSandboxId(),
		Container: containerName(c.GetLabels(), c.GetMetadata()), CreatedImage: c.GetImage().GetUserSpecifiedImage()}
}

func containerName(labels map[string]string, md *runtimeapi.ContainerMetadata) string {
	if n := labels[labelContainerName]; n != "" {
		return n
	}
	return md.GetName()
}
