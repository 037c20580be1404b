package localcluster

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"time"
)

type nodeFile struct {
	path, content string
	mode          os.FileMode
}

// realNodeFiles are a real node's configuration files, from the recipe
// that works on these machines (/work/shared/design/real-kubelet).
func realNodeFiles(n *realNode, ca string) []nodeFile {
	r := strings.NewReplacer("$CA", ca, "$DIR", n.Short, "$RUNC", n.Runc, "$NET", strconv.Itoa(n.Net),
		"$KUBELET_PORT", strconv.Itoa(n.KubeletPort), "$HEALTHZ_PORT", strconv.Itoa(n.HealthzPort))
	return []nodeFile{
		{n.path("containerd.toml"), r.Replace(containerdConfig), 0o600},
		{n.path("cni-conf", "10-rampart.conflist"), r.Replace(cniConfig), 0o600},
		{n.path("kubelet-config.yaml"), r.Replace(kubeletConfig), 0o600},
	}
}

// containerdConfig keeps everything of containerd's under the node's
// directory, so that several run side by side (runc's state too: Root).
// restrict_oom_score_adj: this machine may not lower oom_score_adj, and
// runc fails every sandbox without it. The native snapshotter needs no
// overlay mounts.
const containerdConfig = `version = 2
root = "$DIR/root"
state = "$DIR/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "$DIR/containerd.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "$DIR/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/pause:1"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$DIR/cni-conf"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      BinaryName = "$RUNC"
      Root = "$DIR/runc"
`

// cniConfig gives each node a bridge and a /24 of its own (reserveNet),
// with its IP leases in its directory.
const cniConfig = `{"cniVersion":"1.0.0","name":"rampart-local","plugins":[
 {"type":"bridge","bridge":"rampart$NET","isGateway":true,"ipMasq":false,
  "ipam":{"type":"host-local","dataDir":"$DIR/cni-ipam","ranges":[[{"subnet":"10.88.$NET.0/24"}]]}},
 {"type":"loopback"}]}
`

// kubeletConfig: this machine has cgroup v1 and no systemd (cgroupfs,
// failCgroupV1: false, no per-QoS cgroups), may not reserve node resources
// or evict; the ports and the pod logs directory are the node's own. The
// runtime endpoint is the node guard, not containerd. It serves on the
// node's address (the API server's logs and exec reach it there) to
// clients of the cluster CA, who are authorised by the API server.
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
failSwapOn: false
failCgroupV1: false
cgroupsPerQOS: false
enforceNodeAllocatable: []
authentication: {anonymous: {enabled: false}, webhook: {enabled: true}, x509: {clientCAFile: "$CA"}}
authorization: {mode: Webhook}
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $HEALTHZ_PORT
containerRuntimeEndpoint: unix://$DIR/node-guard.sock
podLogsDir: $DIR/pod-logs
staticPodPath: ""
serializeImagePulls: false
evictionHard: {}
localStorageCapacityIsolation: false
`

// writeImage writes an OCI image archive for `ctr images import`: one
// uncompressed layer with the static busybox at /bin/busybox and links
// for a few applets, whose entrypoint sleeps, under each of names.
func writeImage(path, busybox string, names ...string) error {
	bin, err := os.ReadFile(busybox)
	if err != nil {
		return err
	}
	var layer bytes.Buffer
	lw := tar.NewWriter(&layer)
	mtime := time.Unix(0, 0)
	if err := lw.WriteHeader(&tar.Header{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: mtime}); err != nil {
		return err
	}
	if err := lw.WriteHeader(&tar.Header{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(bin)), ModTime: mtime}); err != nil {
		return err
	}
	if _, err := lw.Write(bin); err != nil {
		return err
	}
	for _, applet := range []string{"sh", "sleep", "true", "cat", "echo", "ls", "ps", "kill"} {
		if err := lw.WriteHeader(&tar.Header{Name: "bin/" + applet, Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777, ModTime: mtime}); err != nil {
			return err
		}
	}
	if err := lw.Close(); err != nil {
		return err
	}
	layerDigest := digest(layer.Bytes())
	config, err := json.Marshal(map[string]any{
		"architecture": "amd64", "os": "linux",
		"config": map[string]any{"Entrypoint": []string{"/bin/sleep", "100000"}, "Env": []string{"PATH=/bin"}},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{layerDigest}},
	})
	if err != nil {
		return err
	}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        descriptor("application/vnd.oci.image.config.v1+json", config),
		"layers":        []any{descriptor("application/vnd.oci.image.layer.v1.tar", layer.Bytes())},
	})
	if err != nil {
		return err
	}
	var manifests []any
	for _, name := range names {
		d := descriptor("application/vnd.oci.image.manifest.v1+json", manifest)
		d["annotations"] = map[string]string{"io.containerd.image.name": name, "org.opencontainers.image.ref.name": name[strings.LastIndex(name, ":")+1:]}
		manifests = append(manifests, d)
	}
	index, err := json.Marshal(map[string]any{"schemaVersion": 2, "manifests": manifests})
	if err != nil {
		return err
	}
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	files := []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
		{blob(layer.Bytes()), layer.Bytes()},
		{blob(config), config},
		{blob(manifest), manifest},
	}
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(f.data)), ModTime: mtime}); err != nil {
			return err
		}
		if _, err := tw.Write(f.data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return os.WriteFile(path, out.Bytes(), 0o600)
}

func digest(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func blob(data []byte) string {
	return "blobs/sha256/" + strings.TrimPrefix(digest(data), "sha256:")
}

func descriptor(mediaType string, data []byte) map[string]any {
	return map[string]any{"mediaType": mediaType, "digest": digest(data), "size": len(data)}
}
