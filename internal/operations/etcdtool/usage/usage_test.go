package usage_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rampart-io/rampart/internal/operations/etcdtool/gensnap"
	"github.com/rampart-io/rampart/internal/operations/etcdtool/source"
	"github.com/rampart-io/rampart/internal/operations/etcdtool/usage"
)

func scan(t testing.TB, path string) usage.Report {
	t.Helper()
	c := usage.NewCounter(true)
	if err := source.WalkSnapshot(path, c.Add); err != nil {
		t.Fatal(err)
	}
	return c.Report(path, 5)
}

func TestUsageCountsLatestAndHistory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "snap.db")
	// 60 keys over 6 resources and 3 namespaces, 3 revisions each of 100
	// bytes, every 10th key deleted afterwards.
	spec := gensnap.Spec{Keys: 60, Namespaces: 3, ValueBytes: 100, Revisions: 3, DeleteEvery: 10}
	rev, err := gensnap.Write(path, spec)
	if err != nil {
		t.Fatal(err)
	}
	r := scan(t, path)
	if r.Revision != rev || rev != 60*3+6 {
		t.Fatalf("revision %d, want %d", r.Revision, 60*3+6)
	}
	if r.Total.Keys != 54 || r.Total.Revisions != 186 {
		t.Fatalf("total %+v: want 54 live keys, 186 revisions", r.Total)
	}
	keyLen := int64(len(spec.Key(1)))
	if r.Total.LatestBytes < 54*(100+keyLen-2) || r.Total.AllBytes <= r.Total.LatestBytes*3 {
		t.Fatalf("bytes: latest %d, all %d", r.Total.LatestBytes, r.Total.AllBytes)
	}
	byName := map[string]usage.Group{}
	for _, g := range r.Resources {
		byName[g.Name] = g
	}
	// Keys 0, 6, 12, ... are configmaps: 10 of them, deletes at 0, 30.
	if g := byName["configmaps"]; g.Keys != 8 || g.Revisions != 32 {
		t.Fatalf("configmaps %+v: want 8 live keys, 32 revisions", g)
	}
	if g := byName["example.com/widgets"]; g.Keys != 10 {
		t.Fatalf("custom resource grouped as %+v", r.Resources)
	}
	if len(r.Namespaces) != 3 || r.Namespaces[0].Keys+r.Namespaces[1].Keys+r.Namespaces[2].Keys != 54 {
		t.Fatalf("namespaces %+v", r.Namespaces)
	}
	if len(r.Largest) != 5 || r.Largest[0].Bytes < r.Largest[4].Bytes {
		t.Fatalf("largest %+v", r.Largest)
	}
	var out bytes.Buffer
	if err := usage.Write(&out, r, "folded", 0); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "etcd;configmaps;ns-0 ") {
		t.Fatalf("folded stacks lack configmaps in ns-0:\n%s", out.String())
	}
	out.Reset()
	if err := usage.Write(&out, r, "json", 0); err != nil {
		t.Fatal(err)
	}
	var back usage.Report
	if err := json.Unmarshal(out.Bytes(), &back); err != nil || back.Total != r.Total {
		t.Fatalf("json round trip: %v %+v", err, back.Total)
	}
	out.Reset()
	if err := usage.Write(&out, r, "table", 3); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "54 keys") || !strings.Contains(out.String(), "(3 more)") {
		t.Fatalf("table:\n%s", out.String())
	}
}

func TestUsageRejectsAFileThatIsNotASnapshot(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x")
	if err := os.WriteFile(path, []byte("not bbolt"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := source.WalkSnapshot(path, func(source.Entry) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "as an etcd snapshot") {
		t.Fatalf("err = %v", err)
	}
}

// TestFlameGraphRendersInABrowser opens the HTML page in headless Chromium
// and reads the DOM the page's script built.
func TestFlameGraphRendersInABrowser(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium is not installed (apt-get install -y chromium)")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "snap.db")
	if _, err := gensnap.Write(path, gensnap.Spec{Keys: 120, Namespaces: 4, ValueBytes: 300, Revisions: 1}); err != nil {
		t.Fatal(err)
	}
	var page bytes.Buffer
	if err := usage.Write(&page, scan(t, path), "html", 0); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(page.String(), "http://") && !strings.Contains(page.String(), "http://www.w3.org/2000/svg") {
		t.Fatal("the page refers to the network")
	}
	html := filepath.Join(dir, "usage.html")
	if err := os.WriteFile(html, page.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu",
		"--user-data-dir="+filepath.Join(dir, "profile"), "--dump-dom", "file://"+html)
	dom, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	// Before the script runs the svg is empty: every frame below was drawn
	// by it. 1 root + 6 resources + 6*4 namespaces... each resource sees
	// only the namespaces its keys fall in (i%6 and i%4 share parity: 2).
	frames := strings.Count(string(dom), `class="frame"`)
	if want := 1 + 6 + 6*2; frames != want {
		t.Fatalf("rendered %d frames, want %d:\n%s", frames, want, dom)
	}
	for _, want := range []string{`data-name="configmaps"`, `data-name="example.com/widgets"`, `data-name="ns-3"`, "<title>etcd — "} {
		if !strings.Contains(string(dom), want) {
			t.Errorf("rendered page lacks %s", want)
		}
	}
	if t.Failed() {
		t.Log(string(dom))
	}
}

// BenchmarkEtcdUsage reads a generated snapshot of ETCD_USAGE_BENCH_MB
// megabytes (default 16; hack/etcd-usage-bench.sh runs 1024) and reports
// throughput and the heap the scan kept.
func BenchmarkEtcdUsage(b *testing.B) {
	mb := 16
	if v := os.Getenv("ETCD_USAGE_BENCH_MB"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			b.Fatalf("ETCD_USAGE_BENCH_MB=%q: %v", v, err)
		}
		mb = n
	}
	path := os.Getenv("ETCD_USAGE_BENCH_FILE")
	if path == "" {
		path = filepath.Join(b.TempDir(), "snap.db")
		if err := WriteBenchSnapshot(path, mb); err != nil {
			b.Fatal(err)
		}
	}
	st, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(st.Size())
	b.ResetTimer()
	var c *usage.Counter
	for b.Loop() {
		c = usage.NewCounter(true)
		if err := source.WalkSnapshot(path, c.Add); err != nil {
			b.Fatal(err)
		}
		if r := c.Report(path, 20); r.Total.Keys == 0 {
			b.Fatal("no keys")
		}
	}
	b.StopTimer()
	// What the scan holds at its end: the per-key records, no values. The
	// file itself is mapped by bbolt, page cache rather than heap.
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	b.ReportMetric(float64(m.HeapAlloc)/(1<<20), "heap-MB")
	b.ReportMetric(float64(st.Size())/(1<<20), "file-MB")
	runtime.KeepAlive(c)
}

// WriteBenchSnapshot writes about mb megabytes: values of 2 KiB, 4
// revisions per key, as a busy cluster's history looks before compaction.
func WriteBenchSnapshot(path string, mb int) error {
	const value, revs = 2048, 4
	keys := mb << 20 / (value + 200) / revs
	_, err := gensnap.Write(path, gensnap.Spec{Keys: keys, Namespaces: 50, ValueBytes: value, Revisions: revs, DeleteEvery: 20})
	return err
}

// TestWriteBenchSnapshot writes the benchmark's snapshot to
// ETCD_USAGE_BENCH_WRITE for hack/etcd-usage-bench.sh, so that rampart and
// auger read the same file; it skips otherwise.
func TestWriteBenchSnapshot(t *testing.T) {
	path := os.Getenv("ETCD_USAGE_BENCH_WRITE")
	if path == "" {
		t.Skip("set ETCD_USAGE_BENCH_WRITE=FILE (and ETCD_USAGE_BENCH_MB) to write the benchmark snapshot")
	}
	mb, err := strconv.Atoi(os.Getenv("ETCD_USAGE_BENCH_MB"))
	if err != nil {
		t.Fatalf("ETCD_USAGE_BENCH_MB: %v", err)
	}
	if err := WriteBenchSnapshot(path, mb); err != nil {
		t.Fatal(err)
	}
}
