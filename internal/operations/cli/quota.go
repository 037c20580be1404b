package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"sigs.k8s.io/yaml"

	"github.com/rampart-io/rampart/internal/operations/quota"
)

func newQuotaCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "quota",
		Short: "ResourceQuotas sized from what namespaces really use",
	}
	cmd.AddCommand(newQuotaPlanCommand())
	return cmd
}

type quotaPlanOptions struct {
	selector         string
	all, diff, apply bool
	margin           float64
	rampartNamespace string
}

func newQuotaPlanCommand() *cobra.Command {
	flags := genericclioptions.NewConfigFlags(true)
	var o quotaPlanOptions
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Propose a ResourceQuota and a LimitRange per namespace from observed use",
		Long: `plan proposes, for each selected namespace (-n, -l selector on namespaces,
or -A), a ResourceQuota named rampart capping pods, CPU and memory requests
and limits, and the counts of configmaps, secrets, services, claims,
deployments and jobs; and a LimitRange named rampart whose container
defaults let pods without requests or limits in once the quota exists.

Sizes are the larger of the peak the manager tracked (kept in the ConfigMap
rampart-quota-peaks in Rampart's namespace, over a 14-day window) and the
use now, plus --margin, rounded up (CPU to 100m, memory to 64Mi).

It prints YAML to apply; --diff compares with the quotas in place;
--apply applies both objects server-side (field manager rampart).`,
		Example: `  rampart quota plan -n shop
  rampart quota plan -A --diff
  rampart quota plan -l team=payments --margin 0.3 --apply`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.diff && o.apply {
				return errors.New("--diff and --apply: choose one (see the diff first, then apply)")
			}
			if o.margin < 0 {
				return fmt.Errorf("--margin %v: must be 0 or more (0.2 is 20%%)", o.margin)
			}
			cfg, err := flags.ToRESTConfig()
			if err != nil {
				return err
			}
			cfg.QPS, cfg.Burst = 100, 200
			cs, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return err
			}
			md, err := metadata.NewForConfig(cfg)
			if err != nil {
				return err
			}
			namespaces, err := selectedNamespaces(cmd.Context(), cs, flags, o)
			if err != nil {
				return err
			}
			return planQuotas(cmd.Context(), cmd.OutOrStdout(), cs, md, namespaces, o)
		},
	}
	flags.AddFlags(cmd.Flags())
	f := cmd.Flags()
	f.StringVarP(&o.selector, "selector", "l", "", "plan the namespaces with these labels")
	f.BoolVarP(&o.all, "all-namespaces", "A", false, "plan every namespace")
	f.Float64Var(&o.margin, "margin", quota.DefaultMargin, "headroom above the observed peak (0.2 is 20%)")
	f.BoolVar(&o.diff, "diff", false, "show how the plan differs from the quotas in place")
	f.BoolVar(&o.apply, "apply", false, "apply the plan server-side (field manager rampart)")
	f.StringVar(&o.rampartNamespace, "rampart-namespace", "rampart-system", "where the manager keeps the peaks")
	return cmd
}

func selectedNamespaces(ctx context.Context, cs kubernetes.Interface, flags *genericclioptions.ConfigFlags, o quotaPlanOptions) ([]string, error) {
	if !o.all && o.selector == "" {
		ns, _, err := flags.ToRawKubeConfigLoader().Namespace()
		return []string{ns}, err
	}
	list, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: o.selector})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, ns := range list.Items {
		// Quotas on the control plane's own namespaces would cap the
		// cluster itself.
		if ns.Name == "kube-system" || ns.Name == "kube-public" || ns.Name == "kube-node-lease" || ns.Name == o.rampartNamespace {
			continue
		}
		out = append(out, ns.Name)
	}
	slices.Sort(out)
	return out, nil
}

// storedPeaks are the manager's peaks; none when it has written none or
// this user may not read them.
func storedPeaks(ctx context.Context, cs kubernetes.Interface, ns string) (*quota.Peaks, string) {
	cm, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, quota.PeaksConfigMap, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return &quota.Peaks{}, "the manager has tracked no peaks yet"
		}
		return &quota.Peaks{}, fmt.Sprintf("peaks unreadable (%v)", err)
	}
	p, err := quota.DecodePeaks(cm.Data[quota.PeaksKey])
	if err != nil {
		return &quota.Peaks{}, fmt.Sprintf("peaks unreadable (%v)", err)
	}
	return p, ""
}

func planQuotas(ctx context.Context, out io.Writer, cs kubernetes.Interface, md metadata.Interface, namespaces []string, o quotaPlanOptions) error {
	peaks, note := storedPeaks(ctx, cs, o.rampartNamespace)
	if note != "" {
		fmt.Fprintf(out, "# %s: sizes come from the use now\n", note)
	}
	for _, ns := range namespaces {
		obs, err := quota.Observe(ctx, cs, md, ns)
		if err != nil {
			return err
		}
		obs.Peak = peaks.Peak(ns)
		plan := quota.PlanFor(obs, o.margin)
		from := "the use now"
		if plan.FromPeak {
			from = fmt.Sprintf("the peak over %s and the use now", peaks.Window)
		}
		switch {
		case o.diff:
			inPlace, err := cs.CoreV1().ResourceQuotas(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			lines := quota.Diff(plan.Quota.Spec.Hard, inPlace.Items)
			fmt.Fprintf(out, "namespace %s (from %s, +%.0f%%):\n", ns, from, o.margin*100)
			if len(lines) == 0 {
				fmt.Fprintln(out, "  (no change)")
			}
			for _, l := range lines {
				fmt.Fprintln(out, "  "+l)
			}
		case o.apply:
			if err := quota.Apply(ctx, cs, plan); err != nil {
				return err
			}
			fmt.Fprintf(out, "namespace %s: resourcequota/%s and limitrange/%s applied (from %s, +%.0f%%)\n", ns, quota.Name, quota.Name, from, o.margin*100)
		default:
			fmt.Fprintf(out, "# namespace %s: from %s, +%.0f%%\n", ns, from, o.margin*100)
			for _, obj := range []runtime.Object{plan.LimitRange, plan.Quota} {
				b, err := manifest(obj)
				if err != nil {
					return err
				}
				fmt.Fprintf(out, "---\n%s", b)
			}
		}
	}
	return nil
}

// manifest is obj as YAML without the empty status and timestamp.
func manifest(obj runtime.Object) ([]byte, error) {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	delete(u, "status")
	unstructured.RemoveNestedField(u, "metadata", "creationTimestamp")
	return yaml.Marshal(u)
}

// closestToQuota prints the namespaces nearest their quotas (rampart status).
func closestToQuota(ctx context.Context, out io.Writer, cs kubernetes.Interface, n int) error {
	list, err := cs.CoreV1().ResourceQuotas(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "NAMESPACE\tQUOTA\tRESOURCE\tUSED\tHARD\tUSED/HARD")
	rows := quota.Closest(list.Items, n)
	for _, r := range rows {
		fmt.Fprintf(out, "%s\t%s\t%s\t%s\t%s\t%.0f%%\n", r.Namespace, r.Quota, r.Resource, r.Used.String(), r.Hard.String(), r.Value*100)
	}
	if len(rows) == 0 {
		fmt.Fprintln(out, "(no ResourceQuotas; propose some: rampart quota plan -A)")
	}
	return nil
}
