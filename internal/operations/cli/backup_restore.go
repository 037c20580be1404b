package cli

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/rampart-io/rampart/internal/operations/backup"
	"github.com/rampart-io/rampart/internal/operations/restore"
)

func (o *backupOptions) restoreCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "restore NAME [--namespace NS] [--object KIND/NAME] [--dry-run]",
		Short: "Restore a backup's objects, or one namespace's, or one object; a dry run prints the plan",
		Long: `restore plans, object by object, what putting the backup's objects back
would do to the live cluster:

  create            no live object of that name
  update            the live object differs and --overwrite is given: it is
                    replaced by the backup's copy (keeping its UID)
  unchanged         the live object is as the backup has it
  skipped (exists)  the live object differs: left alone, with the fields
                    that differ (live -> backup)
  skipped (finished) a pod or Job that had finished when it was backed
                    up: created again it would run again (--run-finished
                    restores it anyway)
  conflict          the API server refuses it (invalid, forbidden, an
                    immutable field), the live object is being deleted, or
                    its owner is not restored

and then follows that plan in dependency order (CRDs, namespaces, what
pods name, owners before what they own), each ownerReference pointed at
the owner's new UID, with what the API server sets stripped. Nodes,
events and leases are never restored.

--dry-run asks the API server to validate each create and update
(server-side dry run), changes nothing, and exits non-zero if anything
would conflict. --namespace restores one namespace (and the Namespace and
CRDs it needs); --object KIND/NAME one object, by kind or resource
(deployment/web, configmaps/prices, widgets.example.com/w1).`,
		Example: `  rampart backup restore shop-before-upgrade --namespace shop --dry-run --store /var/lib/rampart/backups
  rampart backup restore shop-before-upgrade --namespace shop --object deployment/web
  rampart backup restore nightly-20261125 --store 's3://backups/rampart?endpoint=https://minio.example:9000&pathStyle=true'`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			store, err := o.openStore(cmd)
			if err != nil {
				return err
			}
			key, err := o.key()
			if err != nil {
				return err
			}
			m, err := backup.ReadManifest(ctx, store, args[0])
			if err != nil {
				return err
			}
			keep, err := o.selectFiles(m)
			if err != nil {
				return err
			}
			_, objs, err := backup.Read(ctx, store, args[0], key, keep)
			if err != nil {
				return err
			}
			if len(objs) == 0 {
				return fmt.Errorf("backup %s holds nothing of what was asked: see rampart backup describe %s", m.Name, m.Name)
			}
			items := make([]restore.Item, 0, len(objs))
			for _, obj := range objs {
				if obj.Data == nil {
					return fmt.Errorf("%s is sealed with key %s, which was not given: give the recycle bin's key with --key-file", obj.File.Described(), obj.File.KeyID)
				}
				items = append(items, obj.Item())
			}
			plan, err := restore.PlanRestore(items, restore.Options{Overwrite: o.force, RunFinished: o.runFinished})
			if err != nil {
				return err
			}
			target, err := restoreTarget(o.flags)
			if err != nil {
				return err
			}
			outcomes, runErr := plan.Run(ctx, target, o.dryRun)
			printPlan(cmd.OutOrStdout(), m.Name, outcomes, o.dryRun)
			if runErr != nil {
				return runErr
			}
			if n := restore.Conflicts(outcomes); n > 0 {
				if o.dryRun {
					return fmt.Errorf("%d of %d objects would conflict: see why above", n, len(outcomes))
				}
				return fmt.Errorf("%d of %d objects not restored: see why above", n, len(outcomes))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&o.object, "object", "", "restore one object, KIND/NAME (in --namespace, if its name is in more than one)")
	cmd.Flags().BoolVar(&o.dryRun, "dry-run", false, "print the plan, have the API server validate it, and change nothing; non-zero exit if anything would conflict")
	cmd.Flags().BoolVar(&o.force, "overwrite", false, "replace live objects that differ from the backup (default: leave them alone)")
	cmd.Flags().BoolVar(&o.runFinished, "run-finished", false, runFinishedHelp)
	return cmd
}

// selectFiles is which of the backup's files --namespace and --object
// name.
func (o *backupOptions) selectFiles(m *backup.Manifest) (func(backup.File) bool, error) {
	ns := *o.flags.Namespace
	restorable := func(f backup.File) bool { return restore.NotRestored(f.GVR().GroupResource()) == "" }
	if o.object != "" {
		typed, name, ok := strings.Cut(o.object, "/")
		if !ok || typed == "" || name == "" {
			return nil, fmt.Errorf("--object %q: name one object as KIND/NAME, e.g. deployment/web", o.object)
		}
		typed = strings.ToLower(typed)
		var matched []backup.File
		for _, f := range m.Files {
			gr := f.GVR().GroupResource()
			kind := strings.ToLower(f.Kind)
			if f.Name == name && (ns == "" || f.Namespace == ns || f.Namespace == "") &&
				(typed == kind || typed == gr.Resource || typed == gr.String() || typed == kind+"."+gr.Group) {
				matched = append(matched, f)
			}
		}
		switch len(matched) {
		case 0:
			where := ""
			if ns != "" {
				where = " in namespace " + ns
			}
			return nil, fmt.Errorf("backup %s holds no %s%s: see rampart backup describe %s -o json", m.Name, o.object, where, m.Name)
		case 1:
		default:
			var which []string
			for _, f := range matched {
				which = append(which, f.Described())
			}
			return nil, fmt.Errorf("--object %s names %d objects (%s): give --namespace, or the resource with its group", o.object, len(matched), strings.Join(which, "; "))
		}
		one := matched[0]
		if !restorable(one) {
			return nil, fmt.Errorf("%s: %s", one.Described(), restore.NotRestored(one.GVR().GroupResource()))
		}
		return func(f backup.File) bool { return f.Path == one.Path }, nil
	}
	if ns == "" {
		return restorable, nil
	}
	// One namespace: its objects, the Namespace, and the CRDs of its
	// custom resources.
	crds := map[string]bool{}
	found := false
	for _, f := range m.Files {
		if f.Namespace == ns {
			found = true
			if f.Group != "" {
				crds[f.Resource+"."+f.Group] = true
			}
		}
	}
	if !found && !slices.ContainsFunc(m.Files, func(f backup.File) bool { return f.Resource == "namespaces" && f.Group == "" && f.Name == ns }) {
		return nil, fmt.Errorf("backup %s holds nothing of namespace %s: see rampart backup describe %s", m.Name, ns, m.Name)
	}
	return func(f backup.File) bool {
		switch {
		case !restorable(f):
			return false
		case f.Namespace == ns:
			return true
		case f.Group == "" && f.Resource == "namespaces":
			return f.Name == ns
		case f.Group == "apiextensions.k8s.io" && f.Resource == "customresourcedefinitions":
			return crds[f.Name]
		}
		return false
	}, nil
}

// printPlan prints each object's action, why, the fields that differ and
// the ownerReferences changed, then the counts.
func printPlan(w io.Writer, name string, outcomes []restore.Outcome, dryRun bool) {
	if dryRun {
		fmt.Fprintf(w, "dry run of the restore of backup %s: nothing is changed\n", name)
	} else {
		fmt.Fprintf(w, "restore of backup %s:\n", name)
	}
	counts := map[restore.Action]int{}
	for _, o := range outcomes {
		counts[o.Action]++
		line := fmt.Sprintf("%-17s %s", o.Action, o.Step.Described())
		if o.UID != "" {
			line += fmt.Sprintf(" (uid %s)", o.UID)
		}
		fmt.Fprintln(w, line)
		if o.Action == restore.Conflict || o.Action == restore.SkippedFinished || (o.Action == restore.Skipped && len(o.Fields) == 0) {
			fmt.Fprintf(w, "%18s%s\n", "", o.Reason)
		}
		for _, f := range o.Fields {
			fmt.Fprintf(w, "%18s~ %s\n", "", f)
		}
		for _, n := range o.Notes {
			fmt.Fprintf(w, "%18s%s\n", "", n)
		}
	}
	fmt.Fprintf(w, "%d create, %d update, %d unchanged, %d skipped (exists), %d skipped (finished), %d conflict\n",
		counts[restore.Create], counts[restore.Update], counts[restore.Unchanged], counts[restore.Skipped], counts[restore.SkippedFinished], counts[restore.Conflict])
	if counts[restore.Skipped] > 0 {
		fmt.Fprintln(w, "skipped objects are live and differ from the backup (fields: live -> backup): left alone; --overwrite replaces them")
	}
}
