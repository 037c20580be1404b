package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"sigs.k8s.io/yaml"

	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/operations/restore"
	"github.com/rampart-io/rampart/internal/plumbing/storage"
	"github.com/rampart-io/rampart/internal/protection/recyclebin"
)

// trashOptions are the flags of `rampart trash`.
type trashOptions struct {
	flags          *genericclioptions.ConfigFlags
	dir, keyFile   string
	store          string
	all            bool
	uid            string
	dryRun         bool
	asNewName      string
	withDependents bool
	overwrite      bool
	runFinished    bool
}

func newTrashCommand() *cobra.Command {
	o := &trashOptions{flags: genericclioptions.NewConfigFlags(true)}
	cmd := &cobra.Command{
		Use:   "trash",
		Short: "What the recycle bin kept of deleted objects, and their restore",
		Long: `trash reads the recycle bin's store: every kept copy of a deleted object,
with who deleted it, when and how, and restores copies in dependency order
(a namespace before its contents, an owner before what it owns), pointing
each ownerReference at the owner as it is now so that the garbage
collector does not delete the restored objects again. A live object is
never overwritten.

The bin's store is a directory (--dir DIR or --store DIR) or an
S3-compatible bucket (--store s3://BUCKET/PREFIX?endpoint=...), as the
manager's --recycle-bin-store takes it: the credentials come from
credentialsFile=PATH, else AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY,
else ~/.aws/credentials. Secrets are kept encrypted and are shown or
restored only with the key they were sealed with (--key-file).`,
	}
	o.flags.AddFlags(cmd.PersistentFlags())
	cmd.PersistentFlags().StringVar(&o.dir, "dir", "", "the recycle bin's directory (default: .rampart/recycle-bin, where rampart up keeps it)")
	cmd.PersistentFlags().StringVar(&o.store, "store", "",
		"the recycle bin's store instead of --dir: a directory or s3://BUCKET/PREFIX?endpoint=https://HOST:PORT&region=NAME&pathStyle=true&caFile=PATH&credentialsFile=PATH&profile=NAME")
	cmd.PersistentFlags().StringVar(&o.keyFile, "key-file", "", "the key Secrets were sealed with (32 bytes; default with the default --dir: .rampart/pki/recycle-bin.key)")
	cmd.AddCommand(o.listCommand(), o.showCommand(), o.restoreCommand())
	return cmd
}

func (o *trashOptions) bin(ctx context.Context) (*recyclebin.Bin, error) {
	if o.dir != "" && o.store != "" {
		return nil, errors.New("--dir and --store are both set: give one (--store takes a directory too)")
	}
	if o.dir == "" && o.store == "" {
		// The bin of the cluster `rampart up` started here, if any.
		local := filepath.Join(".rampart", localcluster.RecycleBinDir)
		if _, err := os.Stat(local); err != nil {
			return nil, errors.New("name the recycle bin's store: --dir DIR, or --store DIR or s3://BUCKET/PREFIX?endpoint=... (the default, .rampart/recycle-bin of rampart up, does not exist here)")
		}
		o.dir = local
		if key := filepath.Join(".rampart", "pki", localcluster.RecycleBinKey); o.keyFile == "" {
			if _, err := os.Stat(key); err == nil {
				o.keyFile = key
			}
		}
	}
	flag, location := "--store", o.store
	if o.dir != "" {
		flag, location = "--dir", o.dir
	}
	store, err := storage.Open(ctx, location)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	b := &recyclebin.Bin{Store: store}
	if o.keyFile != "" {
		k, err := recyclebin.LoadKey(o.keyFile)
		if err != nil {
			return nil, err
		}
		b.Key = k
	}
	return b, nil
}

// namespace is -n, or the kubeconfig's namespace; "" with -A.
func (o *trashOptions) namespace() string {
	if o.all {
		return ""
	}
	if ns, _, err := o.flags.ToRawKubeConfigLoader().Namespace(); err == nil && ns != "" {
		return ns
	}
	return "default"
}

func (o *trashOptions) listCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the kept copies, newest first",
		Example: "  rampart trash list --dir /var/lib/rampart/recycle-bin -n shop\n  rampart trash list --dir ./bin -A\n" +
			"  AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=... rampart trash list --store 's3://backups/recycle-bin?endpoint=https://minio.example:9000&pathStyle=true' -A",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := o.bin(cmd.Context())
			if err != nil {
				return err
			}
			return listRecycleBin(cmd.Context(), cmd.OutOrStdout(), b, o.namespace(), time.Now())
		},
	}
	cmd.Flags().BoolVarP(&o.all, "all-namespaces", "A", false, "every namespace, and cluster-scoped objects")
	return cmd
}

// listRecycleBin prints the copies the recycle bin holds in namespace
// (every namespace when empty).
func listRecycleBin(ctx context.Context, w io.Writer, b *recyclebin.Bin, namespace string, now time.Time) error {
	listed, err := b.List(ctx, namespace)
	if err != nil {
		return err
	}
	if len(listed) == 0 {
		fmt.Fprintln(w, "the recycle bin holds nothing here")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DELETED\tNAMESPACE\tOBJECT\tBY\tHOW\tSTATE\tUID")
	for _, l := range listed {
		by, how, state := "?", "?", "?"
		if e, err := b.Get(ctx, l.StoreName); err == nil {
			by, how, state = orDash(e.DeletedBy), e.How, e.State
		}
		fmt.Fprintf(tw, "%s ago\t%s\t%s/%s\t%s\t%s\t%s\t%s\n", now.Sub(l.DeletedAt).Round(time.Second), orDash(l.Namespace), l.Resource, l.Name, by, how, state, l.UID)
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (o *trashOptions) showCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "show RESOURCE/NAME",
		Short:   "Print a kept copy (the newest, or --uid's) as YAML",
		Example: "  rampart trash show --dir ./bin -n shop configmap/prices\n  rampart trash show --store 's3://backups/recycle-bin?region=eu-west-1' -n shop configmap/prices",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := o.bin(cmd.Context())
			if err != nil {
				return err
			}
			e, err := o.find(cmd.Context(), b, args[0])
			if err != nil {
				return err
			}
			out, err := yaml.JSONToYAML(e.Object)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "# %s, uid %s, deleted %s by %s (%s, %s)\n", e.Described(), e.UID, e.DeletedAt.UTC().Format(time.RFC3339), orDash(e.DeletedBy), e.How, e.State)
			_, err = w.Write(out)
			return err
		},
	}
	cmd.Flags().StringVar(&o.uid, "uid", "", "the copy of the object that had this UID (default: the newest)")
	return cmd
}

// resolve turns what a user types (configmap, cm, deployments.apps) into
// the resource the bin files entries under, through the API server's
// discovery when it can be reached.
func (o *trashOptions) resolve(typed string) schema.GroupResource {
	gr := schema.ParseGroupResource(typed)
	mapper, err := o.flags.ToRESTMapper()
	if err != nil {
		return gr
	}
	gvr, err := mapper.ResourceFor(gr.WithVersion(""))
	if err != nil {
		return gr
	}
	return gvr.GroupResource()
}

// find is the newest kept copy of RESOURCE/NAME in the namespace (or the
// one with --uid).
func (o *trashOptions) find(ctx context.Context, b *recyclebin.Bin, arg string) (recyclebin.Entry, error) {
	typed, name, ok := strings.Cut(arg, "/")
	if !ok || name == "" {
		return recyclebin.Entry{}, fmt.Errorf("%q: name an object as RESOURCE/NAME, e.g. configmap/prices", arg)
	}
	gr := o.resolve(typed)
	namespace := o.namespace()
	listed, err := b.List(ctx, "")
	if err != nil {
		return recyclebin.Entry{}, err
	}
	// Cluster-scoped objects are kept with no namespace, whatever -n says.
	for _, l := range listed {
		if l.Resource == gr && l.Name == name && (namespace == "" || l.Namespace == namespace || l.Namespace == "") &&
			(o.uid == "" || string(l.UID) == o.uid) {
			e, err := b.Get(ctx, l.StoreName)
			if err != nil || e.State != recyclebin.StateNotDeleted {
				return e, err
			}
			if o.uid != "" {
				return recyclebin.Entry{}, fmt.Errorf("the copy of %s with uid %s was taken for a delete that then did not happen (refused or failed after the copy): the object was seen alive, and this copy is not a deleted object", e.Described(), e.UID)
			}
			// A copy whose delete did not happen is never offered as
			// deleted: look for an older one.
		}
	}
	return recyclebin.Entry{}, fmt.Errorf("the recycle bin holds no copy of %s/%s in namespace %s (nor cluster-scoped); see rampart trash list", gr, name, namespace)
}

func (o *trashOptions) restoreCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "restore RESOURCE/NAME...",
		Short: "Create kept objects again, owners first, never over a live object",
		Long: `restore creates the newest kept copy of each object named (or --uid's)
with what the API server sets stripped, in dependency order, each
ownerReference pointed at the owner restored in the same run or at the
live owner of that name (dropped when the owner is gone and not restored,
or the garbage collector would delete the object again). An object that
exists is left alone and reported with the diff between it and the copy;
--overwrite replaces it with the copy (an update: it keeps its UID).

--with-dependents also restores, for a namespace, every object kept from it
since its deletion, and for another object, the objects that it owned.
--dry-run sends every create as a server-side dry run: the API server
validates them and nothing is created (objects in a namespace the restore
would create cannot be validated, and say so), and prints the diff of each
live object the restore would leave alone or overwrite.`,
		Example: `  rampart trash restore --dir ./bin namespace/shop --with-dependents --dry-run
  rampart trash restore --dir ./bin -n shop configmap/prices --as-new-name prices-restored
  rampart trash restore --store 's3://backups/recycle-bin?region=eu-west-1&credentialsFile=/etc/rampart/s3' -n shop configmap/prices`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := o.bin(cmd.Context())
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			var entries []recyclebin.Entry
			for _, a := range args {
				e, err := o.find(ctx, b, a)
				if err != nil {
					return err
				}
				entries = append(entries, e)
				if o.withDependents {
					deps, err := b.Dependents(ctx, e)
					if err != nil {
						return err
					}
					entries = append(entries, deps...)
				}
			}
			plan, err := recyclebin.PlanRestore(entries, restore.Options{AsNewName: o.asNewName, Overwrite: o.overwrite, RunFinished: o.runFinished})
			if err != nil {
				return err
			}
			target, err := restoreTarget(o.flags)
			if err != nil {
				return err
			}
			outcomes, runErr := plan.Run(ctx, target, o.dryRun)
			printOutcomes(cmd.OutOrStdout(), outcomes, o.dryRun)
			if n := restore.Conflicts(outcomes); runErr == nil && n > 0 {
				return fmt.Errorf("%d of %d objects not restored: see why above", n, len(outcomes))
			}
			return runErr
		},
	}
	cmd.Flags().StringVar(&o.uid, "uid", "", "the copy of the object that had this UID (default: the newest)")
	cmd.Flags().BoolVar(&o.dryRun, "dry-run", false, "have the API server validate every create, and create nothing")
	cmd.Flags().StringVar(&o.asNewName, "as-new-name", "", "restore the one object named under this name")
	cmd.Flags().BoolVar(&o.withDependents, "with-dependents", false, "also restore a namespace's contents, or what the object owned")
	cmd.Flags().BoolVar(&o.overwrite, "overwrite", false, "replace a live object of the same name with the copy (default: leave it alone and show the diff)")
	cmd.Flags().BoolVar(&o.runFinished, "run-finished", false, runFinishedHelp)
	return cmd
}

func printOutcomes(w io.Writer, outcomes []restore.Outcome, dryRun bool) {
	verb := "created"
	if dryRun {
		verb = "would create"
	}
	replaced := "overwrote"
	if dryRun {
		replaced = "would overwrite"
	}
	for _, o := range outcomes {
		switch {
		case o.Action == restore.Conflict:
			fmt.Fprintf(w, "not restored: %s\n", o.Reason)
		case o.Reason != "":
			fmt.Fprintf(w, "left alone: %s\n", o.Reason)
		case o.Action == restore.Update:
			fmt.Fprintf(w, "%s %s (uid %s)\n", replaced, o.Step.Described(), o.UID)
		case o.UID != "":
			fmt.Fprintf(w, "%s %s (uid %s)\n", verb, o.Step.Described(), o.UID)
		default:
			fmt.Fprintf(w, "%s %s\n", verb, o.Step.Described())
		}
		for _, n := range o.Notes {
			fmt.Fprintf(w, "  %s\n", n)
		}
		if o.Diff != "" {
			fmt.Fprintf(w, "  %s\n", strings.ReplaceAll(strings.TrimSuffix(o.Diff, "\n"), "\n", "\n  "))
		}
	}
	if dryRun {
		fmt.Fprintln(w, "dry run: nothing was created; the API server validated each object but those noted")
	}
}
