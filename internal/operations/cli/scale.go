package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

func newScaleCommand() *cobra.Command {
	flags := genericclioptions.NewConfigFlags(true)
	var replicas int64
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "scale KIND/NAME --replicas N",
		Short: "Change a workload's replicas with the confirmation Rampart asks for",
		Long: `scale sets spec.replicas and the rampart.io/confirm-replicas annotation in one
patch, which is what a workload labelled rampart.io/explicit-replicas=true
accepts. It works on any kind with replicas: deployments, statefulsets,
replicasets, replicationcontrollers and custom resources with a scale
subresource.`,
		Example: `  rampart scale -n shop deployment/web --replicas 0
  kubectl rampart scale statefulset/db --replicas 3 --dry-run`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if replicas < 0 {
				return errors.New("--replicas N is required (N >= 0)")
			}
			kind, name, ok := strings.Cut(args[0], "/")
			if !ok || kind == "" || name == "" {
				return fmt.Errorf("%q is not KIND/NAME, e.g. deployment/web", args[0])
			}
			ns, _, err := flags.ToRawKubeConfigLoader().Namespace()
			if err != nil {
				return err
			}
			mapper, err := flags.ToRESTMapper()
			if err != nil {
				return err
			}
			gvr, err := mapper.ResourceFor(schema.ParseGroupResource(kind).WithVersion(""))
			if err != nil {
				return fmt.Errorf("unknown kind %q: %w", kind, err)
			}
			cfg, err := flags.ToRESTConfig()
			if err != nil {
				return err
			}
			path, err := replicasPathOf(cfg, gvr.GroupResource())
			if err != nil {
				return err
			}
			patch, err := confirmedScalePatch(path, replicas)
			if err != nil {
				return err
			}
			dyn, err := dynamic.NewForConfig(cfg)
			if err != nil {
				return err
			}
			opts := metav1.PatchOptions{}
			if dryRun {
				opts.DryRun = []string{metav1.DryRunAll}
			}
			if _, err := dyn.Resource(gvr).Namespace(ns).Patch(cmd.Context(), name, types.MergePatchType, patch, opts); err != nil {
				return err
			}
			suffix := ""
			if dryRun {
				suffix = " (server dry run)"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s/%s scaled to %d, confirmed%s\n", gvr.GroupResource(), name, replicas, suffix)
			return nil
		},
	}
	flags.AddFlags(cmd.Flags())
	cmd.Flags().Int64Var(&replicas, "replicas", -1, "the new number of replicas")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "ask the API server (and Rampart) to judge the change without making it")
	return cmd
}

var builtinReplicas = map[schema.GroupResource]bool{
	{Group: "apps", Resource: "deployments"}:  true,
	{Group: "apps", Resource: "statefulsets"}: true,
	{Group: "apps", Resource: "replicasets"}:  true,
	{Resource: "replicationcontrollers"}:      true,
}

// replicasPathOf is spec.replicas for built-in workloads, or the scale
// subresource's path of a custom resource.
func replicasPathOf(cfg *rest.Config, gr schema.GroupResource) ([]string, error) {
	if builtinReplicas[gr] {
		return []string{"spec", "replicas"}, nil
	}
	ext, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	crd, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(context.TODO(), gr.String(), metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("%s has no replicas to scale", gr)
	}
	for _, v := range crd.Spec.Versions {
		if v.Served && v.Subresources != nil && v.Subresources.Scale != nil {
			return strings.Split(strings.TrimPrefix(v.Subresources.Scale.SpecReplicasPath, "."), "."), nil
		}
	}
	return nil, fmt.Errorf("%s has no scale subresource", gr)
}

// confirmedScalePatch sets the replicas at path and the confirmation
// annotation in one merge patch, so the API server sees both in one write.
func confirmedScalePatch(path []string, replicas int64) ([]byte, error) {
	var leaf any = replicas
	for i := len(path) - 1; i >= 0; i-- {
		leaf = map[string]any{path[i]: leaf}
	}
	p := leaf.(map[string]any)
	p["metadata"] = map[string]any{"annotations": map[string]any{
		v1alpha1.AnnotationConfirmReplicas: strconv.FormatInt(replicas, 10),
	}}
	return json.Marshal(p)
}
