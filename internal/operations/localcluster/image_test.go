package localcluster_test

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
)

// The chart's image, as make image writes it, runs on a real node: the
// archive imports into the node's containerd, a pod of it (by the tag
// the archive names, never pulled) runs `rampart version` as the image's
// non-root user with the chart's container restrictions, and its log,
// read through the API server as kubectl logs does, is the version line.
func TestTheImageRunsOnARealNode(t *testing.T) {
	// A cluster of its own: on the package's, the real node would stay
	// for later tests, and the scheduler would place their pods there.
	env := clustertest.Start(t, localcluster.Options{Unprotected: true, Nodes: 1})
	archive, err := clustertest.ImageArchive()
	if err != nil {
		t.Fatal(err)
	}
	tag := archiveTag(t, archive)
	node := env.RealNodes(t, 1)[0]
	ns := env.Namespace(t)
	ctx := context.Background()

	start := time.Now()
	if err := env.ImportImage(ctx, node, archive); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s imported into %s's containerd in %.1fs", tag, node, time.Since(start).Seconds())

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "rampart-version"},
		Spec: corev1.PodSpec{
			NodeName:                     node,
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: ptr.To(false),
			SecurityContext:              &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true)},
			Containers: []corev1.Container{{
				Name: "rampart", Image: tag, ImagePullPolicy: corev1.PullNever,
				Args: []string{"version"},
				SecurityContext: &corev1.SecurityContext{
					ReadOnlyRootFilesystem:   ptr.To(true),
					AllowPrivilegeEscalation: ptr.To(false),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
		},
	}
	if _, err := env.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var last string
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := env.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = podState(got)
		switch got.Status.Phase {
		case corev1.PodSucceeded:
			return true, nil
		case corev1.PodFailed:
			return false, errors.New("pod failed")
		}
		// Never pulled, the image will not appear: no point waiting.
		for _, c := range got.Status.ContainerStatuses {
			if c.State.Waiting != nil && (c.State.Waiting.Reason == "ErrImageNeverPull" || c.State.Waiting.Reason == "InvalidImageName") {
				return false, errors.New("image not found")
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("pod %s of %s did not succeed on %s: %v; %s", pod.Name, tag, node, err, last)
	}
	logs, err := env.Client.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("logs of %s: %v", pod.Name, err)
	}
	// make image tags the image with the version it builds into the binary.
	want := "rampart " + tag[strings.LastIndex(tag, ":")+1:] + "\n"
	if string(logs) != want {
		t.Errorf("the pod of %s logged %q, want %q", tag, logs, want)
	}
	t.Logf("%s ran `rampart version` on %s in %.1fs from the import", tag, node, time.Since(start).Seconds())
}

// archiveTag is the image name an OCI archive gives its one image (its
// index's org.opencontainers.image.ref.name), as a user reads it to write
// a pod.
func archiveTag(t *testing.T, archive string) string {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("%s: no index.json (%v)", archive, err)
		}
		if h.Name != "index.json" {
			continue
		}
		var index struct {
			Manifests []struct {
				Annotations map[string]string `json:"annotations"`
			} `json:"manifests"`
		}
		data, err := io.ReadAll(tr)
		if err == nil {
			err = json.Unmarshal(data, &index)
		}
		if err != nil || len(index.Manifests) != 1 || index.Manifests[0].Annotations["org.opencontainers.image.ref.name"] == "" {
			t.Fatalf("%s's index.json: %v: %s; want one image with a name", archive, err, data)
		}
		return index.Manifests[0].Annotations["org.opencontainers.image.ref.name"]
	}
}

// podState is what a pod's status says of why it has not ended yet.
func podState(p *corev1.Pod) string {
	s := "phase " + string(p.Status.Phase)
	for _, c := range p.Status.ContainerStatuses {
		switch {
		case c.State.Waiting != nil:
			s += "; " + c.Name + " waiting: " + c.State.Waiting.Reason + " " + c.State.Waiting.Message
		case c.State.Terminated != nil:
			s += "; " + c.Name + " terminated: " + c.State.Terminated.Reason + " " + c.State.Terminated.Message
		}
	}
	return s
}
