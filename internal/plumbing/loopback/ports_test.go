package loopback

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

func TestFreePortsAreDistinctListenableAndNotEphemeral(t *testing.T) {
	seen := map[int]bool{}
	for range 3 {
		ports, err := FreePorts(40)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ports {
			if seen[p] {
				t.Fatalf("port %d handed out twice", p)
			}
			seen[p] = true
			inRange := false
			for _, r := range outsideEphemeral() {
				inRange = inRange || (p >= r[0] && p <= r[1])
			}
			if !inRange {
				t.Errorf("port %d is in the kernel's ephemeral range or below %d", p, lowest)
			}
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
			if err != nil {
				t.Errorf("port %d: %v", p, err)
				continue
			}
			_ = l.Close()
		}
	}
}

func TestAClaimKeepsAPortFromOtherProcessesUntilItIsStale(t *testing.T) {
	dir := t.TempDir()
	if !claim(dir, 12345) {
		t.Fatal("a free port could not be claimed")
	}
	if claim(dir, 12345) {
		t.Fatal("a port claimed a moment ago was claimed again")
	}
	old := time.Now().Add(-claimFor - time.Minute)
	if err := os.Chtimes(filepath.Join(dir, "12345"), old, old); err != nil {
		t.Fatal(err)
	}
	if !claim(dir, 12345) {
		t.Fatal("a stale claim was not taken over")
	}
}
