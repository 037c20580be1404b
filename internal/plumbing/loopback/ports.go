// Package loopback hands out loopback ports for the components a local
// cluster or a test server starts, which bind them later, sometimes a
// minute later (a gateway starts after the API servers are ready).
//
// Asking the kernel for a free port (listening on 127.0.0.1:0, then
// closing) is not enough here: until the component binds it, the kernel
// gives the same port to the next process that listens on port 0 — the
// test servers of other packages that make test runs beside, each
// listening on :0 — and a cluster's gateway failed to start with "address
// already in use". So ports are chosen outside the kernel's ephemeral
// range, where nothing is handed out on its own, and claimed across
// processes by a file created exclusively in a shared folder. No library
// does this (net and httptest only listen on :0), hence this package.
package loopback

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// claimFor is how long a claim keeps a port from other processes: far
// longer than a component takes to bind it once chosen. A port bound by
// then stays out of reach anyway: nobody can listen on it.
const claimFor = 15 * time.Minute

// lowest is the lowest port handed out: below it are the well-known and
// registered services a developer's machine may run.
const lowest = 10000

var (
	mu     sync.Mutex
	handed = map[int]bool{}
)

// FreePorts returns n distinct loopback ports nothing listened on a moment
// ago, claimed for this process.
func FreePorts(n int) ([]int, error) {
	mu.Lock()
	defer mu.Unlock()
	ranges := outsideEphemeral()
	total := 0
	for _, r := range ranges {
		total += r[1] - r[0] + 1
	}
	dir := filepath.Join(os.TempDir(), "rampart-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, fmt.Errorf("loopback ports: %w", err)
	}
	out := make([]int, 0, n)
	for tries := 0; len(out) < n; tries++ {
		if tries > 100*n+1000 {
			return nil, fmt.Errorf("loopback ports: found %d free of the %d wanted in %d tries", len(out), n, tries)
		}
		p := pick(ranges, total)
		if handed[p] || !claim(dir, p) {
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		_ = l.Close()
		handed[p] = true
		out = append(out, p)
	}
	return out, nil
}

func pick(ranges [][2]int, total int) int {
	i := rand.IntN(total)
	for _, r := range ranges {
		if size := r[1] - r[0] + 1; i >= size {
			i -= size
			continue
		}
		return r[0] + i
	}
	return ranges[len(ranges)-1][1]
}

// claim creates dir/PORT exclusively; a claim older than claimFor is
// stale (its process is done with it, or gone) and is taken over.
func claim(dir string, port int) bool {
	name := filepath.Join(dir, strconv.Itoa(port))
	for range 2 {
		f, err := os.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o666)
		if err == nil {
			_ = f.Close()
			return true
		}
		if !errors.Is(err, fs.ErrExist) {
			return false
		}
		st, err := os.Stat(name)
		if err != nil || time.Since(st.ModTime()) < claimFor {
			return false
		}
		_ = os.Remove(name)
	}
	return false
}

// outsideEphemeral is the ports from lowest to 65535 less the kernel's
// ephemeral range (Linux's net.ipv4.ip_local_port_range; 32768-60999 when
// it cannot be read).
func outsideEphemeral() [][2]int {
	lo, hi := 32768, 60999
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			l, err1 := strconv.Atoi(f[0])
			h, err2 := strconv.Atoi(f[1])
			if err1 == nil && err2 == nil && l <= h {
				lo, hi = l, h
			}
		}
	}
	var rs [][2]int
	if lo-1 >= lowest+1000 {
		rs = append(rs, [2]int{lowest, lo - 1})
	}
	if hi+1 <= 65535-1000 {
		rs = append(rs, [2]int{hi + 1, 65535})
	}
	if len(rs) == 0 {
		// The whole range is ephemeral: take the kernel's ports anyway.
		rs = append(rs, [2]int{lowest, 65535})
	}
	return rs
}
