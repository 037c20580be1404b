package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/protection/recyclebin"
	"github.com/rampart-io/rampart/internal/servers/manager"
)

// printRecycleBin shows the summary the manager's leader publishes (the bin
// itself is off the cluster, where status cannot read it) and the
// RecyclePolicies.
func printRecycleBin(ctx context.Context, w io.Writer, cs kubernetes.Interface, cl client.Client, namespace string) {
	cm, err := cs.CoreV1().ConfigMaps(namespace).Get(ctx, manager.SummaryConfigMap, metav1.GetOptions{})
	var s struct {
		recyclebin.Summary
		Location string `json:"location"`
	}
	switch {
	case apierrors.IsNotFound(err):
		fmt.Fprintf(w, "(off, or no summary yet: the manager publishes one in ConfigMap %s/%s each minute once run with --recycle-bin-dir)\n", namespace, manager.SummaryConfigMap)
	case err != nil:
		fmt.Fprintf(w, "(cannot read ConfigMap %s/%s: %v)\n", namespace, manager.SummaryConfigMap, err)
	case json.Unmarshal([]byte(cm.Data[manager.SummaryKey]), &s) != nil:
		fmt.Fprintf(w, "(ConfigMap %s/%s holds no summary)\n", namespace, manager.SummaryConfigMap)
	default:
		newest := "-"
		if !s.Newest.IsZero() {
			newest = duration.HumanDuration(time.Since(s.Newest)) + " ago"
		}
		fmt.Fprintf(w, "STORE\tCOPIES\tBYTES\tBY STATE\tBY HOW\tNEWEST DELETE\tAS OF\n")
		fmt.Fprintf(w, "%s\t%d\t%d\t%s\t%s\t%s\t%s ago\n", s.Location, s.Entries, s.Bytes, counts(s.ByState), counts(s.ByHow), newest,
			duration.HumanDuration(time.Since(s.At)))
	}
	var policies v1alpha1.RecyclePolicyList
	if err := cl.List(ctx, &policies); err != nil {
		fmt.Fprintf(w, "(cannot list RecyclePolicies: %v)\n", err)
		return
	}
	if len(policies.Items) == 0 {
		fmt.Fprintln(w, "RecyclePolicies: none (protected objects are kept all the same)")
		return
	}
	fmt.Fprintln(w, "RECYCLE POLICY\tRESOURCES\tRETENTION\tMAX SIZE\tREADY")
	for _, p := range policies.Items {
		var res []string
		for _, r := range p.Spec.Resources {
			group := strings.Join(r.APIGroups, "|")
			for _, name := range r.Resources {
				if group != "" {
					name += "." + group
				}
				res = append(res, name)
			}
		}
		size := "-"
		if p.Spec.MaxSize != nil {
			size = p.Spec.MaxSize.String()
		}
		ready := "Unknown"
		for _, c := range p.Status.Conditions {
			if c.Type == "Ready" {
				ready = string(c.Status) + " (" + c.Reason + ")"
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", p.Name, strings.Join(res, ","), dash(p.Spec.Retention), size, ready)
	}
}

// counts renders a map of counts as "Deleted=3 NotDeleted=1".
func counts(m map[string]int) string {
	if len(m) == 0 {
		return "-"
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(out, " ")
}
