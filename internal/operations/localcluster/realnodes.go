package localcluster

import (
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/rampart-io/rampart/internal/plumbing/pki"
)

// Real nodes run a real kubelet, containerd and runc on this machine, with
// `rampart node-guard` between the kubelet and containerd, as
// /work/shared/design/real-kubelet describes. Each has a private directory
// under DIR/real-nodes/NAME: containerd's root, state and socket, the
// guard's socket, the kubelet's root, its config and kubeconfig.

// RealNodeLabel is set on every real node (the kubelet registers it).
const RealNodeLabel = "rampart.io/real-node"

// RealNodeImage is the image real nodes run without a registry: busybox
// (Debian's static build), whose entrypoint sleeps. Pods that use it need
// imagePullPolicy: Never. It is also the sandbox (pause) image.
const RealNodeImage = "localhost/busybox:1"

const realNodePauseImage = "localhost/pause:1"

// Host programs real nodes need besides bin/k8s's kubelet and runc, with
// the Debian package that has each.
var realNodeHostNeeds = []struct{ path, pkg string }{
	{"/usr/bin/containerd", "containerd"},
	{"/usr/bin/ctr", "containerd"},
	{"/usr/lib/cni/bridge", "containernetworking-plugins"},
	{"/usr/lib/cni/host-local", "containernetworking-plugins"},
	{"/usr/lib/cni/loopback", "containernetworking-plugins"},
	{"/bin/busybox", "busybox-static"},
}

// CheckRealNodePrerequisites says what this machine lacks to run real
// nodes, and how to get it; nil when nothing.
func CheckRealNodePrerequisites(assets string) error {
	var missing []string
	var pkgs []string
	for _, name := range []string{"kubelet", "runc"} {
		if _, err := os.Stat(filepath.Join(assets, name)); err != nil {
			missing = append(missing, filepath.Join(assets, name)+" (make assets; runc needs libseccomp-dev and pkg-config)")
		}
	}
	for _, n := range realNodeHostNeeds {
		if _, err := os.Stat(n.path); err != nil {
			missing = append(missing, n.path)
			if !strings.Contains(strings.Join(pkgs, " "), n.pkg) {
				pkgs = append(pkgs, n.pkg)
			}
		}
	}
	if len(pkgs) == 0 && !staticBinary("/bin/busybox") {
		// Debian's busybox package is dynamically linked; the image has no
		// libc to run it with.
		missing = append(missing, "/bin/busybox is not statically linked")
		pkgs = append(pkgs, "busybox-static")
	}
	if os.Geteuid() != 0 {
		missing = append(missing, "root (the kubelet, containerd and runc run as root)")
	}
	if len(missing) == 0 {
		return nil
	}
	msg := "real nodes need: " + strings.Join(missing, ", ")
	if len(pkgs) > 0 {
		msg += "; install with: apt-get install " + strings.Join(pkgs, " ")
	}
	return errors.New(msg)
}

func staticBinary(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false
		}
	}
	return true
}

// realNode is what a real node's teardown needs, kept in its directory
// (realnode.json) so that `rampart down`, another process, finds it.
type realNode struct {
	Name string `json:"name"`
	Dir  string `json:"dir"`
	// Short is a short path to Dir (reserveNet's link), which every
	// component is given: a unix socket's path may not pass 104 bytes in
	// containerd (108 in the kernel), and a test's directory is long.
	Short string `json:"short"`
	Runc  string `json:"runc"`
	// Net is the index of the node's bridge (rampartN), subnet and link.
	Net         int `json:"net"`
	KubeletPort int `json:"kubeletPort"`
	HealthzPort int `json:"healthzPort"`
	GuardPort   int `json:"guardPort"`
}

const realNodeRecord = "realnode.json"

// path is a file of the node, by its short path.
func (n *realNode) path(elem ...string) string {
	return filepath.Join(append([]string{n.Short}, elem...)...)
}

func (n *realNode) socket() string      { return n.path("containerd.sock") }
func (n *realNode) guardSocket() string { return n.path("node-guard.sock") }

// Component names of a real node's processes, in start order.
func containerdName(node string) string { return "containerd-" + node }

// NodeGuardName is the component name of a real node's `rampart node-guard`,
// for StopComponent and StartComponent.
func NodeGuardName(node string) string { return "node-guard-" + node }

// KubeletName is the component name of a real node's kubelet, for
// StopComponent and StartComponent.
func KubeletName(node string) string { return "kubelet-" + node }

// RealNodes are the names of the cluster's real nodes.
func (c *Cluster) RealNodes() []string {
	var names []string
	for _, n := range c.realNodes {
		names = append(names, n.Name)
	}
	return names
}

// RealNodeRuntime is the containerd socket of a real node: what the
// kubelet's runtime really runs, asked without the guard in between.
func (c *Cluster) RealNodeRuntime(node string) (string, error) {
	for _, n := range c.realNodes {
		if n.Name == node {
			return n.socket(), nil
		}
	}
	return "", fmt.Errorf("no real node %q (real nodes: %v)", node, c.RealNodes())
}

// AddRealNodes starts n more real nodes, named real-node-N after the
// existing ones, and waits until each is Ready.
func (c *Cluster) AddRealNodes(ctx context.Context, n int) error {
	if n <= 0 {
		return nil
	}
	if err := CheckRealNodePrerequisites(c.opts.Assets); err != nil {
		return err
	}
	if _, err := os.Stat(c.opts.Rampart); err != nil {
		return fmt.Errorf("rampart binary %s is missing (real nodes run rampart node-guard): run `make build`", c.opts.Rampart)
	}
	for range n {
		name := fmt.Sprintf("real-node-%d", len(c.realNodes))
		start := time.Now()
		if err := c.startRealNode(ctx, name); err != nil {
			return fmt.Errorf("real node %s: %w", name, err)
		}
		c.progress("  %-40s %5.1fs", "real node "+name+" Ready", time.Since(start).Seconds())
	}
	return nil
}

func (c *Cluster) startRealNode(ctx context.Context, name string) error {
	dir := c.path("real-nodes", name)
	if err := teardownRealNode(dir); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	p, err := freePorts(3)
	if err != nil {
		return err
	}
	runc, err := filepath.Abs(c.asset("runc"))
	if err != nil {
		return err
	}
	node := &realNode{Name: name, Dir: dir, Runc: runc, KubeletPort: p[0], HealthzPort: p[1], GuardPort: p[2]}
	if node.Net, node.Short, err = reserveNet(dir); err != nil {
		return err
	}
	c.realNodes = append(c.realNodes, node)
	if err := writeJSON(node.path(realNodeRecord), node); err != nil {
		return err
	}
	if err := c.writeRealNodeFiles(node); err != nil {
		return err
	}
	if err := c.run(containerdName(name), "/usr/bin/containerd", "--config", node.path("containerd.toml")); err != nil {
		return err
	}
	if err := c.waitRuntime(ctx, containerdName(name), node.socket()); err != nil {
		return err
	}
	if err := c.importImage(ctx, node); err != nil {
		return err
	}
	if err := c.run(NodeGuardName(name), c.opts.Rampart, "node-guard",
		"--listen", node.guardSocket(),
		"--runtime-endpoint", "unix://"+node.socket(),
		"--node-name", name,
		"--kubeconfig", node.path("kubeconfig"),
		"--metrics-bind-address", "127.0.0.1:"+strconv.Itoa(node.GuardPort),
	); err != nil {
		return err
	}
	if err := c.waitHealthy(ctx, NodeGuardName(name), "http://127.0.0.1:"+strconv.Itoa(node.GuardPort)+"/healthz", nil); err != nil {
		return err
	}
	if err := c.run(KubeletName(name), c.asset("kubelet"), kubeletArgs(node)...); err != nil {
		return err
	}
	return c.waitRealNodeReady(ctx, node)
}

func kubeletArgs(n *realNode) []string {
	return []string{
		"--kubeconfig=" + n.path("kubeconfig"),
		"--config=" + n.path("kubelet-config.yaml"),
		"--hostname-override=" + n.Name,
		"--root-dir=" + n.path("kubelet-root"),
		"--node-labels=" + RealNodeLabel + "=true",
	}
}

// writeRealNodeFiles writes the node's containerd, CNI and kubelet
// configuration, its busybox image and its kubeconfig: a client
// certificate of the local CA for system:node:NAME, which the API
// server's Node authorizer gives the kubelet's rights on its own pods. The
// node guard uses it too: it watches the node's pods and writes Events.
func (c *Cluster) writeRealNodeFiles(n *realNode) error {
	for _, f := range realNodeFiles(n, c.pkiFile("ca.crt")) {
		if err := os.MkdirAll(filepath.Dir(f.path), 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(f.path, []byte(f.content), f.mode); err != nil {
			return err
		}
	}
	if err := writeImage(n.path("busybox.tar"), "/bin/busybox", RealNodeImage, realNodePauseImage); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	ca, err := pki.Load(c.pkiFile("ca"))
	if err != nil {
		return err
	}
	kp, err := ca.Issue(pki.Request{CommonName: "system:node:" + n.Name, Organization: []string{"system:nodes"},
		Client: true, Now: time.Now(), Validity: certValidity})
	if err != nil {
		return err
	}
	return c.writeKubeconfig(filepath.Join("real-nodes", n.Name, "kubeconfig"), ca, kp)
}

// waitRuntime waits until containerd answers the CRI on its socket.
func (c *Cluster) waitRuntime(ctx context.Context, name, socket string) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, startTimeout, true, func(ctx context.Context) (bool, error) {
		if err := c.exitedEarly(name); err != nil {
			return false, err
		}
		rt, err := dialRuntime(socket)
		if err != nil {
			last = err
			return false, nil
		}
		defer rt.close()
		last = rt.ready(ctx)
		return last == nil, nil
	})
	if err != nil && c.exitedEarly(name) == nil {
		return fmt.Errorf("%s not ready on %s (last: %v); see %s: %w", name, socket, last, c.path("logs", name+".log"), err)
	}
	return err
}

// importImage imports the busybox image into the node's containerd.
func (c *Cluster) importImage(ctx context.Context, n *realNode) error {
	return importArchive(ctx, n, n.path("busybox.tar"))
}

// ImportImage imports an image archive (OCI or Docker; make image's
// bin/rampart-image.tar, say) into a real node's containerd under the
// names the archive gives, where pods find it with imagePullPolicy:
// Never: there is no registry here.
func (c *Cluster) ImportImage(ctx context.Context, node, archive string) error {
	for _, n := range c.realNodes {
		if n.Name == node {
			return importArchive(ctx, n, archive)
		}
	}
	return fmt.Errorf("no real node %q (real nodes: %v)", node, c.RealNodes())
}

// importArchive imports into containerd's CRI namespace, unpacked for its
// snapshotter (the CRI plugin runs only unpacked images).
func importArchive(ctx context.Context, n *realNode, archive string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "/usr/bin/ctr", "--address", n.socket(), "-n", "k8s.io",
		"images", "import", "--snapshotter", "native", archive).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr images import %s: %v: %s", archive, err, out)
	}
	return nil
}

func (c *Cluster) waitRealNodeReady(ctx context.Context, n *realNode) error {
	cs, err := c.Clientset()
	if err != nil {
		return err
	}
	healthz := "http://127.0.0.1:" + strconv.Itoa(n.HealthzPort) + "/healthz"
	var last string
	// A cold kubelet takes about 20 s to register and report Ready here.
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, startTimeout, true, func(ctx context.Context) (bool, error) {
		for _, name := range []string{containerdName(n.Name), NodeGuardName(n.Name), KubeletName(n.Name)} {
			if err := c.exitedEarly(name); err != nil {
				return false, err
			}
		}
		resp, err := http.Get(healthz) //nolint:gosec // loopback health probe of a child process
		if err != nil {
			last = "kubelet healthz: " + err.Error()
			return false, nil
		}
		_ = resp.Body.Close()
		node, err := cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = "node registered, not Ready: " + readyMessage(node)
		return NodeReady(node), nil
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("%s (see %s): %w", last, c.path("logs", KubeletName(n.Name)+".log"), err)
	}
	return err
}

func readyMessage(n *corev1.Node) string {
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Reason + ": " + cond.Message
		}
	}
	return "no Ready condition yet"
}

// StartComponent starts again a component StopComponent stopped, with the
// same command line, e.g. a real node's kubelet (KubeletName). It waits
// for nothing; a kubelet's WaitRealNodeReady does.
func (c *Cluster) StartComponent(name string) error {
	for i, p := range c.procs {
		if p.Name != name {
			continue
		}
		if p.alive() {
			return fmt.Errorf("%s still runs (pid %d)", name, p.PID)
		}
		np, err := spawn(c.Dir, c.opts.Detached, name, p.Binary, p.Args...)
		if err != nil {
			return err
		}
		c.procs[i] = np
		return writeState(c.Dir, c.procs)
	}
	return fmt.Errorf("no component %q", name)
}

// WaitRealNodeReady waits until a real node's kubelet answers and the API
// has its node Ready.
func (c *Cluster) WaitRealNodeReady(ctx context.Context, node string) error {
	for _, n := range c.realNodes {
		if n.Name == node {
			return c.waitRealNodeReady(ctx, n)
		}
	}
	return fmt.Errorf("no real node %q", node)
}

func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o600)
}

// RealNodePod is a pod that runs on real nodes without a registry: one
// container of RealNodeImage (it sleeps), never pulled, ended one second
// after a delete (sleep as PID 1 ignores SIGTERM, so the kubelet's
// SIGKILL ends it).
func RealNodePod(name string, labels, nodeSelector map[string]string) *corev1.Pod {
	grace := int64(1)
	automount := false
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			NodeSelector:                  nodeSelector,
			TerminationGracePeriodSeconds: &grace,
			AutomountServiceAccountToken:  &automount,
			Containers:                    []corev1.Container{{Name: "app", Image: RealNodeImage, ImagePullPolicy: corev1.PullNever}},
		},
	}
}

// NodeGuardMetrics reads a real node's node guard's Prometheus metrics
// (its --metrics-bind-address, on loopback).
func (c *Cluster) NodeGuardMetrics(ctx context.Context, node string) (string, error) {
	for _, n := range c.realNodes {
		if n.Name != node {
			continue
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:"+strconv.Itoa(n.GuardPort)+"/metrics", nil)
		if err != nil {
			return "", err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("node guard metrics of %s: %s", node, resp.Status)
		}
		return string(body), err
	}
	return "", fmt.Errorf("no real node %q (real nodes: %v)", node, c.RealNodes())
}
