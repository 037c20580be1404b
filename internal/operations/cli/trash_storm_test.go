package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
	"github.com/rampart-io/rampart/internal/plumbing/storage/s3test"
)

// A storm of deletes of protected ConfigMaps, the recycle bin in S3, and
// the S3 server killed (SIGKILL) a third of the way through: no delete is
// admitted without its copy. Once the server is back on its data, every
// ConfigMap that is gone has its copy in the bucket; the deletes after the
// kill were refused with 503 (the copy could not be stored) and their
// ConfigMaps are still there.
func TestDeleteStormAdmitsNoDeleteUncapturedWhenTheStoreDies(t *testing.T) {
	srv := s3test.Start(t)
	const bucket = "rampart-recycle-bin"
	srv.Bucket(t, bucket)
	env := clustertest.Start(t, localcluster.Options{RecycleBinStore: srv.Location(bucket, "storm")})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := env.Namespace(t)
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = 1000, 1000
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cms := client.CoreV1().ConfigMaps(ns)

	// Many clients: a refused delete waits out the capture's 4 s.
	const n, workers = 200, 64
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("ledger-%03d", i)
	}
	var mu sync.Mutex
	uids := map[string]types.UID{}
	each(names, workers, func(name string) {
		cm, err := cms.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"rampart.io/protection": "Cascading"}},
			Data:       map[string]string{"name": name, "rows": strings.Repeat("x", 1024)},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Errorf("create %s: %v", name, err)
			return
		}
		mu.Lock()
		uids[name] = cm.UID
		mu.Unlock()
	})
	if t.Failed() {
		t.FailNow()
	}

	// The storm: every ConfigMap deleted once, by many clients at once.
	var admitted atomic.Int64
	var killOnce sync.Once
	killed := make(chan struct{})
	outcome := map[string]error{}
	start := time.Now()
	each(names, workers, func(name string) {
		err := cms.Delete(ctx, name, metav1.DeleteOptions{})
		mu.Lock()
		outcome[name] = err
		mu.Unlock()
		if err == nil && admitted.Add(1) == n/3 {
			// This client stops for the kill; the others go on.
			killOnce.Do(func() {
				srv.Kill()
				t.Logf("S3 server killed after %d deletes admitted, %v into the storm", admitted.Load(), time.Since(start).Round(time.Millisecond))
				close(killed)
			})
		}
	})
	t.Logf("storm of %d deletes by %d clients over in %v", n, workers, time.Since(start).Round(time.Millisecond))
	select {
	case <-killed:
	default:
		t.Fatalf("only %d of %d deletes were admitted: the S3 server was never killed", admitted.Load(), n)
	}

	srv.Restart(t)
	bin, err := env.RecycleBin()
	if err != nil {
		t.Fatal(err)
	}
	listed, err := bin.List(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	copies := map[types.UID]string{}
	for _, l := range listed {
		copies[l.UID] = l.StoreName
	}
	live, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	alive := map[string]types.UID{}
	for _, cm := range live.Items {
		alive[cm.Name] = cm.UID
	}

	var gone, stayed, refused, otherwise []string
	kept := 0
	for _, name := range names {
		err := outcome[name]
		switch {
		case err == nil:
		case apierrors.IsServiceUnavailable(err) && strings.Contains(err.Error(), "could not be stored"):
			refused = append(refused, name)
		default:
			otherwise = append(otherwise, name)
			t.Logf("delete of %s: %v", name, err)
		}
		if uid, ok := alive[name]; ok {
			if uid != uids[name] {
				t.Errorf("%s has UID %s, want %s: made again?", name, uid, uids[name])
			}
			if err == nil {
				t.Errorf("%s: the delete was admitted, and it is still there", name)
			}
			stayed = append(stayed, name)
			continue
		}
		gone = append(gone, name)
		stored, ok := copies[uids[name]]
		if !ok {
			t.Errorf("%s (uid %s) is gone and the bin has no copy of it: a delete admitted uncaptured (delete answered %v)", name, uids[name], err)
			continue
		}
		e, err := bin.Get(ctx, stored)
		var copied corev1.ConfigMap
		if err == nil {
			err = json.Unmarshal(e.Object, &copied)
		}
		if err != nil || copied.Data["name"] != name {
			t.Errorf("%s's copy %s: %v, holding %q; want the ConfigMap as it was", name, stored, err, copied.Data["name"])
			continue
		}
		kept++
	}
	for _, name := range refused {
		if _, ok := alive[name]; !ok {
			t.Errorf("%s: its delete was refused, and it is gone", name)
		}
	}
	if len(refused) == 0 {
		t.Errorf("no delete was refused with 503, could not be stored, after the kill")
	}
	t.Logf("%d ConfigMaps: %d deleted, %d of them with their copy in the bin; %d deletes refused (503, could not be stored), %d refused otherwise; %d ConfigMaps still there",
		n, len(gone), kept, len(refused), len(otherwise), len(stayed))
}

// each calls f on every name from workers goroutines, and waits.
func each(names []string, workers int, f func(name string)) {
	next := make(chan string)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range next {
				f(name)
			}
		}()
	}
	for _, name := range names {
		next <- name
	}
	close(next)
	wg.Wait()
}
