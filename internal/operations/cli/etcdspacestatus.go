package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rampart-io/rampart/internal/operations/etcdtool/space"
	"github.com/rampart-io/rampart/internal/servers/manager"
)

// printEtcdSpace shows the leader's last look at etcd's space (manager
// --etcd-space-secret): the level, each member against its quota, and
// the prefixes written most. At NOSPACE the ConfigMap cannot be updated,
// so the look shown is the one before; the look's time says so.
func printEtcdSpace(ctx context.Context, w io.Writer, cs kubernetes.Interface, namespace string) {
	cm, err := cs.CoreV1().ConfigMaps(namespace).Get(ctx, manager.SpaceConfigMap, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		fmt.Fprintf(w, "(not watched: run the manager with --etcd-space-secret; or rampart etcd space status with etcd's flags)\n")
		return
	case err != nil:
		fmt.Fprintf(w, "(cannot read ConfigMap %s/%s: %v)\n", namespace, manager.SpaceConfigMap, err)
		return
	}
	var r manager.SpaceReport
	if err := json.Unmarshal([]byte(cm.Data[manager.SpaceKey]), &r); err != nil {
		fmt.Fprintf(w, "(ConfigMap %s/%s holds no report: %v)\n", namespace, manager.SpaceConfigMap, err)
		return
	}
	if r.Error != "" {
		fmt.Fprintf(w, "cannot look at etcd: %s\n", r.Error)
		return
	}
	fmt.Fprintf(w, "%s at %s: %.0f%% of the quota (warning from %.0f%%)\n%s\n", r.Verdict.Level, r.Space.At.Format("2006-01-02T15:04:05Z07:00"),
		100*r.Verdict.Share, 100*r.WarnShare, space.Describe(r.Space))
	if len(r.Written) > 0 {
		fmt.Fprintf(w, "written most since revision %d:\n", r.Since)
		for _, g := range r.Written {
			fmt.Fprintf(w, "  %s\t%s\t%d keys\n", g.Prefix, space.MiB(g.Bytes), g.Keys)
		}
	}
	if r.Verdict.Level != space.OK {
		fmt.Fprintln(w, "stop what writes there, then rampart etcd space recover --dir DIR (docs/runbooks.md#rampartetcdspacelow)")
	}
}
