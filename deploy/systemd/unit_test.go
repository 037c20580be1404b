// Package systemd_test checks the node guard's systemd unit as systemd
// itself reads it (systemd-analyze verify, from Debian's systemd package,
// which make test-deps installs), and that the flags it starts the guard
// with are the guard's.
package systemd_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
)

const unit = "rampart-node-guard.service"

// TestUnitVerifies runs systemd-analyze verify on the unit as installed
// by its own instructions (/usr/local/bin/rampart, /etc/systemd/system),
// in a root of its own: the binary, the unit, and the host's unit files
// (the targets it orders itself against). verify exits 0 on unknown keys
// and bad values, so any word from it fails the test; a broken copy shows
// that it would.
func TestUnitVerifies(t *testing.T) {
	text, err := os.ReadFile(unit)
	if err != nil {
		t.Fatal(err)
	}
	if out := verify(t, string(text)); out != "" {
		t.Errorf("systemd-analyze verify %s:\n%s", unit, out)
	}
	broken := strings.Replace(string(text), "Restart=always", "Restart=sometimes", 1)
	if out := verify(t, broken); !strings.Contains(out, "sometimes") {
		t.Errorf("systemd-analyze verify passes a unit with Restart=sometimes: the check cannot fail (%q)", out)
	}
}

// TestUnitFlagsAreTheGuards checks that every flag ExecStart passes is
// one `rampart node-guard` takes: a renamed flag would keep the guard
// from starting on every node, and systemd cannot see that.
func TestUnitFlagsAreTheGuards(t *testing.T) {
	text, err := os.ReadFile(unit)
	if err != nil {
		t.Fatal(err)
	}
	_, rampart, err := clustertest.Binaries()
	if err != nil {
		t.Fatal(err)
	}
	help, err := exec.Command(rampart, "node-guard", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("rampart node-guard --help: %v\n%s", err, help)
	}
	start := regexp.MustCompile(`(?s)ExecStart=(.*?)\n[^ ]`).FindStringSubmatch(string(text))
	if start == nil {
		t.Fatalf("%s has no ExecStart", unit)
	}
	flags := regexp.MustCompile(`--([a-z-]+)=`).FindAllStringSubmatch(start[1], -1)
	if len(flags) == 0 {
		t.Fatalf("no flags in ExecStart %q", start[1])
	}
	for _, f := range flags {
		if !strings.Contains(string(help), "--"+f[1]+" ") {
			t.Errorf("ExecStart passes --%s, which rampart node-guard does not take", f[1])
		}
	}
}

// verify installs text as the unit in a fresh root and returns what
// systemd-analyze verify says of it.
func verify(t *testing.T, text string) string {
	t.Helper()
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatal("systemd-analyze not found: make test-deps installs Debian's systemd package")
	}
	_, rampart, err := clustertest.Binaries()
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	for _, d := range []string{"usr/local/bin", "etc/systemd/system", "usr/lib/systemd/system"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin, err := os.ReadFile(rampart)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "usr/local/bin/rampart"), bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/systemd/system", unit), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	// The host's own units: the targets the unit names must exist.
	host, err := filepath.Glob("/usr/lib/systemd/system/*.target")
	if err != nil || len(host) == 0 {
		t.Fatalf("no systemd targets in /usr/lib/systemd/system (%v)", err)
	}
	for _, f := range host {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // a dangling alias
		}
		if err := os.WriteFile(filepath.Join(root, "usr/lib/systemd/system", filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command(analyze, "verify", "--root="+root, "/etc/systemd/system/"+unit).CombinedOutput()
	if err != nil && len(out) == 0 {
		t.Fatalf("systemd-analyze verify: %v", err)
	}
	return strings.TrimSpace(string(out))
}
