package localcluster

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// stopCluster stops a cluster's processes. With real nodes, the kubelets
// stop first (so that nothing starts pods again), then each node's pods
// are ended through containerd itself (it tears down their networks and
// mounts; the containers would outlive containerd otherwise), then the
// rest stops, and what is left of each node is cleaned: runc containers,
// shims, the kubelet's tmpfs mounts, the bridge.
func stopCluster(dir string, procs []*Process) error {
	nodes := realNodeDirs(dir)
	if len(nodes) == 0 {
		return stopAll(procs)
	}
	var kubelets, rest []*Process
	for _, p := range procs {
		if strings.HasPrefix(p.Name, "kubelet-") {
			kubelets = append(kubelets, p)
		} else {
			rest = append(rest, p)
		}
	}
	errs := []error{stopAll(kubelets)}
	for _, n := range nodes {
		drainRealNode(n)
	}
	errs = append(errs, stopAll(rest))
	for _, n := range nodes {
		errs = append(errs, cleanupRealNode(n))
	}
	return errors.Join(errs...)
}

// realNodeDirs are the directories of the real nodes recorded in dir.
func realNodeDirs(dir string) []string {
	found, _ := filepath.Glob(filepath.Join(dir, "real-nodes", "*", realNodeRecord))
	var out []string
	for _, f := range found {
		out = append(out, filepath.Dir(f))
	}
	return out
}

func readRealNode(dir string) (*realNode, error) {
	var n realNode
	return &n, readJSON(filepath.Join(dir, realNodeRecord), &n)
}

// drainRealNode ends every pod of a node through its containerd, if it
// still answers; cleanupRealNode catches what this misses.
func drainRealNode(dir string) {
	n, err := readRealNode(dir)
	if err != nil {
		return
	}
	rt, err := dialRuntime(n.socket())
	if err != nil {
		return
	}
	defer rt.close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if rt.ready(ctx) != nil {
		return
	}
	_ = rt.removeAllPods(ctx)
}

// teardownRealNode drains and cleans a node directory a previous cluster
// may have left, before a new node takes it.
func teardownRealNode(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, realNodeRecord)); err != nil {
		return nil
	}
	drainRealNode(dir)
	return cleanupRealNode(dir)
}

// cleanupRealNode, once containerd has stopped: deletes the containers
// runc still has, kills the node's shims, unmounts everything under the
// node's directory (the kubelet's projected-volume tmpfs mounts, the
// sandboxes' shm), deletes its bridge and releases its subnet.
func cleanupRealNode(dir string) error {
	n, err := readRealNode(dir)
	if err != nil {
		return err
	}
	var errs []error
	runcRoot := filepath.Join(dir, "runc", "k8s.io")
	if out, err := exec.Command(n.Runc, "--root", runcRoot, "list", "-q").Output(); err == nil {
		for _, id := range strings.Fields(string(out)) {
			if out, err := exec.Command(n.Runc, "--root", runcRoot, "delete", "--force", id).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("runc delete %s: %v: %s", id, err, out))
			}
		}
	}
	killShims(n.socket())
	errs = append(errs, unmountUnder(dir))
	if _, err := net.InterfaceByName(n.bridge()); err == nil {
		if out, err := exec.Command("ip", "link", "delete", n.bridge()).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("ip link delete %s: %v: %s", n.bridge(), err, out))
		}
	}
	releaseNet(n.Net, dir)
	return errors.Join(errs...)
}

func (n *realNode) bridge() string { return "rampart" + strconv.Itoa(n.Net) }

// killShims kills the containerd shims started for the containerd at
// socket: they outlive it, one per pod, each named with its -address.
func killShims(socket string) {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range procs {
		cmdline, err := os.ReadFile(f)
		if err != nil || !bytes.Contains(cmdline, []byte("containerd-shim")) {
			continue
		}
		if !bytes.Contains(cmdline, []byte("\x00-address\x00"+socket+"\x00")) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(f))); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// unmountUnder unmounts every mount point under dir, deepest first
// (detached: a mount still busy goes when its last user does).
func unmountUnder(dir string) error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	defer f.Close()
	var points []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		if strings.HasPrefix(mp, dir+"/") {
			points = append(points, mp)
		}
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	var errs []error
	for _, mp := range points {
		if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", mp, err))
		}
	}
	return errors.Join(errs...)
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// netReservations holds one link per index in use on this machine,
// /run/rampart-real-nodes/N -> the node directory that holds it: clusters
// of different test packages run side by side, and two nodes on one bridge
// and subnet would hand out the same pod IPs. The link is also the node's
// short path. Under /run, so a reboot frees them.
const netReservations = "/run/rampart-real-nodes"

// reserveNet picks a free index in 0..249 for the node at dir (bridge
// rampartN, subnet 10.88.N.0/24) and returns it with the link to dir.
func reserveNet(dir string) (int, string, error) {
	if err := os.MkdirAll(netReservations, 0o700); err != nil {
		return 0, "", err
	}
	sweepStaleNodes()
	h := fnv.New32a()
	_, _ = h.Write([]byte(dir))
	first := int(h.Sum32() % 250)
	for i := range 250 {
		k := (first + i) % 250
		path := filepath.Join(netReservations, strconv.Itoa(k))
		err := os.Symlink(dir, path)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return 0, "", err
		}
		return k, path, nil
	}
	return 0, "", fmt.Errorf("no free subnet for a real node: %s holds 250 reservations", netReservations)
}

// sweepStaleNodes cleans up after real nodes whose cluster died without
// stopping them (a test binary killed: containerd dies with it, the
// containers and shims do not) and frees their reservations.
func sweepStaleNodes() {
	links, _ := filepath.Glob(filepath.Join(netReservations, "*"))
	for _, path := range links {
		if !staleReservation(path) {
			continue
		}
		if owner, err := os.Readlink(path); err == nil {
			_ = cleanupRealNode(owner)
		}
		_ = os.Remove(path)
	}
}

// staleReservation: its node directory is gone, or has had no containerd
// answering for a while (a cluster that crashed without cleaning up).
func staleReservation(path string) bool {
	owner, err := os.Readlink(path)
	if err != nil {
		return false
	}
	if _, err := os.Stat(owner); err != nil {
		return true
	}
	fi, err := os.Lstat(path)
	if err != nil || time.Since(fi.ModTime()) < 2*time.Minute {
		return false
	}
	c, err := net.DialTimeout("unix", filepath.Join(path, "containerd.sock"), time.Second)
	if err != nil {
		return true
	}
	_ = c.Close()
	return false
}

func releaseNet(k int, dir string) {
	path := filepath.Join(netReservations, strconv.Itoa(k))
	if owner, err := os.Readlink(path); err == nil && owner == dir {
		_ = os.Remove(path)
	}
}
