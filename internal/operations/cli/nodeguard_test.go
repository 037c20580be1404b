package cli

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestNodeGuardListenRemovesOnlyAStaleSocket(t *testing.T) {
	dir, err := os.MkdirTemp("", "ngcli") // unix socket paths are short
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "sub", "guard.sock")

	// A socket a guard left behind when it was killed: taken over.
	if err := os.MkdirAll(filepath.Dir(sock), 0o755); err != nil {
		t.Fatal(err)
	}
	stale, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	_ = stale.Close()
	ln, err := listenUnix(sock)
	if err != nil {
		t.Fatalf("stale socket: %v", err)
	}
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o660 {
		t.Fatalf("socket mode %v, %v; want 0660", fi.Mode(), err)
	}

	// A socket that answers is another guard's: refused.
	if _, err := listenUnix(sock); err == nil || !strings.Contains(err.Error(), "another process") {
		t.Fatalf("live socket: %v", err)
	}
	_ = ln.Close()

	// A file that is no socket is never removed.
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := listenUnix(file); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("regular file: %v", err)
	}
	if _, err := os.Stat(file); err != nil {
		t.Fatal("the regular file was removed")
	}
}
