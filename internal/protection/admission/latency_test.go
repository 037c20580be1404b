package admission_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"os"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/rampart-io/rampart/internal/operations/localcluster"

	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
	"github.com/rampart-io/rampart/internal/plumbing/storage/s3test"
)

// BenchmarkDeleteThroughAPIServer measures the latency a client sees for a
// DELETE through the real API server, on three clusters alike but for the
// recycle bin: this package's (the bin in a directory), one with no bin,
// and one with the bin in S3 (SeaweedFS, over https, on this machine). On
// each: a ConfigMap the webhook never sees (no label: the API server's
// objectSelector filters it) and a protected one it judges and admits
// (Cascading, nothing depends on it), whose copy is stored before the
// delete is admitted, or, with no bin, not; on this package's cluster also
// one it denies (Always). Each round deletes one of each in a random
// order, so that the noise of a shared machine falls on all alike. It
// reports p50 and p99 per case; hack/delete-latency.sh prints the ratios.
// With RAMPART_BENCH_PROFILE=FILE it also writes a CPU profile of the
// directory cluster's manager, taken over the first measured rounds.
func BenchmarkDeleteThroughAPIServer(b *testing.B) {
	dir := clustertest.Get(b)
	noBinOpts := clusterOptions()
	noBinOpts.NoRecycleBin = true
	noBin := clustertest.Start(b, noBinOpts)
	srv := s3test.Start(b)
	const bucket = "rampart-recycle-bin"
	srv.Bucket(b, bucket)
	s3Opts := clusterOptions()
	s3Opts.RecycleBinStore = srv.Location(bucket, "bench")
	inS3 := clustertest.Start(b, s3Opts)

	ctx := context.Background()
	cascading := map[string]string{protectionLabel: "Cascading"}
	type deletes struct {
		name   string
		env    *clustertest.Env
		labels map[string]string
		denied bool
		cms    typedcorev1.ConfigMapInterface
		took   []time.Duration
	}
	cases := []*deletes{
		{name: "dir-unlabelled", env: dir},
		{name: "dir-kept", env: dir, labels: cascading},
		{name: "dir-denied", env: dir, labels: map[string]string{protectionLabel: "Always"}, denied: true},
		{name: "nobin-unlabelled", env: noBin},
		{name: "nobin-judged", env: noBin, labels: cascading},
		{name: "s3-unlabelled", env: inS3},
		{name: "s3-kept", env: inS3, labels: cascading},
	}
	namespaces := map[*clustertest.Env]string{}
	for _, c := range cases {
		if namespaces[c.env] == "" {
			namespaces[c.env] = c.env.Namespace(b)
		}
		c.cms = c.env.Client.CoreV1().ConfigMaps(namespaces[c.env])
	}
	round := func(i int, record bool) {
		rand.Shuffle(len(cases), func(x, y int) { cases[x], cases[y] = cases[y], cases[x] })
		for _, c := range cases {
			name := fmt.Sprintf("%s-%d", c.name, i)
			if _, err := c.cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: c.labels}}, metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			err := c.cms.Delete(ctx, name, metav1.DeleteOptions{})
			if record {
				c.took = append(c.took, time.Since(start))
			}
			if (err != nil) != c.denied {
				b.Fatalf("delete of %s: %v", name, err)
			}
		}
	}
	// Connections to the API servers, webhooks and S3 are opened in the
	// first rounds, which are not counted.
	const warmup = 10
	for i := range warmup {
		round(-1-i, false)
	}
	profiled := profileManager(b, dir, os.Getenv("RAMPART_BENCH_PROFILE"))
	i := 0
	for b.Loop() {
		round(i, true)
		i++
	}
	b.StopTimer()
	profiled()
	// Where a kept delete's time goes, from the managers' own metrics
	// (means over every round, warm-up included).
	for name, env := range map[string]*clustertest.Env{"bin in a directory": dir, "no bin": noBin, "bin in S3": inS3} {
		body, err := env.ScrapeManagerMetrics(ctx, 0)
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("%s: deletion webhook handler mean %.2f ms, capture mean %.2f ms", name,
			meanOf(body, `controller_runtime_webhook_latency_seconds_(sum|count)\{webhook="/validate/deletion"\}`),
			meanOf(body, `rampart_recyclebin_capture_duration_seconds_(sum|count)`))
	}

	// What is measured is what is said: a copy of each kept ConfigMap.
	for _, c := range cases {
		if c.name != "dir-kept" && c.name != "s3-kept" {
			continue
		}
		bin, err := c.env.RecycleBin()
		if err != nil {
			b.Fatal(err)
		}
		listed, err := bin.List(ctx, namespaces[c.env])
		if err != nil || len(listed) != warmup+i {
			b.Fatalf("%s: the bin holds %d copies (%v), want %d", c.name, len(listed), err, warmup+i)
		}
	}
	for _, c := range cases {
		slices.Sort(c.took)
		b.ReportMetric(float64(c.took[len(c.took)/2].Microseconds()), c.name+"-p50-us")
		b.ReportMetric(float64(c.took[len(c.took)*99/100].Microseconds()), c.name+"-p99-us")
	}
	b.ReportMetric(0, "ns/op")
}

// profileManager starts taking a CPU profile of env's manager into file
// (nothing when file is empty) and returns the wait for it. The metrics
// scraper's account is allowed to get the profile first.
func profileManager(b *testing.B, env *clustertest.Env, file string) (wait func()) {
	if file == "" {
		return func() {}
	}
	ctx := context.Background()
	rbac := env.Client.RbacV1()
	if _, err := rbac.ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "rampart-bench-profiler"},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/debug/pprof/*"}, Verbs: []string{"get"}}}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		b.Fatal(err)
	}
	if _, err := rbac.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "rampart-bench-profiler"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "rampart-bench-profiler"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: localcluster.MetricsScraper, Namespace: localcluster.ManagerNamespace}}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		prof, err := env.ProfileManager(ctx, 0, 20*time.Second)
		if err == nil {
			err = os.WriteFile(file, prof, 0o644)
		}
		done <- err
	}()
	return func() {
		if err := <-done; err != nil {
			b.Errorf("profile of the manager: %v", err)
		}
	}
}

// meanOf is the mean in milliseconds of the histogram whose _sum and
// _count lines the pattern matches (its group 1 is sum or count) in a
// Prometheus text body; 0 if absent.
func meanOf(body, pattern string) float64 {
	var sum, count float64
	for _, m := range regexp.MustCompile(`(?m)^`+pattern+` (\S+)$`).FindAllStringSubmatch(body, -1) {
		v, _ := strconv.ParseFloat(m[2], 64)
		if m[1] == "sum" {
			sum = v
		} else {
			count = v
		}
	}
	if count == 0 {
		return 0
	}
	return sum / count * 1000
}
