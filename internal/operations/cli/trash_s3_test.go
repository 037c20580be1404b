package cli

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
	"github.com/rampart-io/rampart/internal/plumbing/storage/s3test"
)

// The recycle bin in an S3 bucket (SeaweedFS, over https with a private
// CA; the manager reads the credentials from credentialsFile=): a
// protected ConfigMap's copy is in the bucket when its DELETE returns,
// `rampart trash list --store s3://...` lists it and `rampart trash
// restore` brings it back; `rampart status` shows the bucket, never the
// secret. Once the S3 server is down, a protected delete is refused with
// 503, saying the copy could not be stored, and the object stays.
func TestTrashKeepsTheBinInS3(t *testing.T) {
	srv := s3test.Start(t)
	const bucket = "rampart-recycle-bin"
	srv.Bucket(t, bucket)
	location := srv.Location(bucket, "cluster-a")
	env := clustertest.Start(t, localcluster.Options{RecycleBinStore: location, ManagerArgs: []string{"--recycle-bin-maintain-every=1s"}})
	_, rampart, err := clustertest.Binaries()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run := rampartCLI(ctx, t, rampart, env)
	ns := env.Namespace(t)
	cms := env.Client.CoreV1().ConfigMaps(ns)
	cascading := map[string]string{"rampart.io/protection": "Cascading"}
	prices, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "prices", Labels: cascading}, Data: map[string]string{"apple": "3"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := cms.Delete(ctx, "prices", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete of a Cascading ConfigMap with nothing depending on it: %v", err)
	}
	// At once: the copy was stored before the delete was admitted.
	bin, err := env.RecycleBin()
	if err != nil {
		t.Fatal(err)
	}
	listed, err := bin.List(ctx, ns)
	if err != nil || len(listed) != 1 || listed[0].UID != prices.UID {
		t.Fatalf("right after the delete the bin lists %+v, %v; want the one copy of prices (uid %s)", listed, err, prices.UID)
	}
	e, err := bin.Get(ctx, listed[0].StoreName)
	if err != nil {
		t.Fatal(err)
	}
	var kept corev1.ConfigMap
	if err := json.Unmarshal(e.Object, &kept); err != nil || kept.Data["apple"] != "3" {
		t.Fatalf("kept %s (%v), want the ConfigMap as it was", e.Object, err)
	}
	// In the bucket, under the prefix, and not in the cluster's directory.
	var keys []string
	for o := range srv.Client(t).ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: "cluster-a/", Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		keys = append(keys, o.Key)
	}
	if len(keys) == 0 {
		t.Fatalf("bucket %s holds nothing under cluster-a/", bucket)
	}
	if _, err := os.Stat(filepath.Join(env.Dir, localcluster.RecycleBinDir)); !os.IsNotExist(err) {
		t.Errorf("the cluster's recycle-bin directory: %v; want none, the bin being in S3", err)
	}

	if list := run("trash", "list", "--store", location, "-n", ns); !strings.Contains(list, "configmaps/prices") || !strings.Contains(list, string(prices.UID)) {
		t.Errorf("trash list --store lacks configmaps/prices:\n%s", list)
	}
	// The leader's summary names the bucket, not the secret.
	var status string
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		status = run("status", "--rampart-namespace", localcluster.ManagerNamespace)
		return strings.Contains(status, "s3://"+bucket+"/cluster-a/ at "+srv.HTTPS), nil
	}); err != nil {
		t.Errorf("rampart status never showed the bin in s3://%s/cluster-a/:\n%s", bucket, status)
	}
	if strings.Contains(status, s3test.SecretKey) {
		t.Errorf("rampart status shows the S3 secret:\n%s", status)
	}
	t.Log(run("trash", "restore", "--store", location, "-n", ns, "configmap/prices"))
	restored, err := cms.Get(ctx, "prices", metav1.GetOptions{})
	if err != nil || restored.Data["apple"] != "3" {
		t.Fatalf("prices after the restore: %+v, %v", restored, err)
	}

	// The S3 server down: no copy, no delete.
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "ledger", Labels: cascading}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	start := time.Now()
	err = cms.Delete(ctx, "ledger", metav1.DeleteOptions{})
	t.Logf("delete with the S3 server down answered in %v: %v", time.Since(start).Round(time.Millisecond), err)
	if !apierrors.IsServiceUnavailable(err) {
		t.Fatalf("delete with the S3 server down: %v, want 503 Service Unavailable", err)
	}
	if s, ok := err.(apierrors.APIStatus); ok && s.Status().Code != http.StatusServiceUnavailable {
		t.Errorf("status code %d", s.Status().Code)
	}
	for _, want := range []string{`configmap "ledger" in namespace "` + ns + `"`, "could not be stored", "s3://" + bucket + "/cluster-a/"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q lacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), s3test.SecretKey) {
		t.Errorf("the refusal shows the S3 secret: %v", err)
	}
	if _, err := cms.Get(ctx, "ledger", metav1.GetOptions{}); err != nil {
		t.Fatalf("ledger is gone after a refused delete: %v", err)
	}
	logs, _ := filepath.Glob(filepath.Join(env.Dir, "logs", "*.log"))
	for _, f := range logs {
		if b, err := os.ReadFile(f); err == nil && strings.Contains(string(b), s3test.SecretKey) {
			t.Errorf("%s shows the S3 secret", f)
		}
	}
}
