package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/rampart-io/rampart/internal/operations/backup"
	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/operations/restore"
	"github.com/rampart-io/rampart/internal/plumbing/storage"
	"github.com/rampart-io/rampart/internal/protection/recyclebin"
)

// backupOptions are the flags of `rampart backup`.
type backupOptions struct {
	flags   *genericclioptions.ConfigFlags
	store   string
	keyFile string
	sel     backup.Selection
	output  string
	object  string
	dryRun  bool
	force   bool
	// runFinished restores pods and Jobs that had finished.
	runFinished bool
}

// runFinishedHelp is --run-finished's help, for backup and trash restores.
const runFinishedHelp = "also restore pods and Jobs that had finished when they were kept (created again, they run again); by default they are skipped"

// localBackupsDir is where `rampart backup` keeps backups by default, beside
// the cluster `rampart up` started here.
const localBackupsDir = "backups"

func newBackupCommand() *cobra.Command {
	o := &backupOptions{flags: genericclioptions.NewConfigFlags(true)}
	cmd := &cobra.Command{
		Use:   "backup",
		Short: "Back up objects to a directory or an S3 bucket, and restore them with a dry run first",
		Long: `backup writes every object of the resources selected (found by discovery,
custom resources included), all read at one revision of etcd, to a
gzipped tar with one file per object and a manifest: the resources and
their counts, each file's SHA-256, the API server's version. Nodes,
events and leases are never backed up nor restored. Secrets are sealed
with the recycle bin's key (--key-file).

The store is a directory or an S3-compatible bucket (--store DIR or
s3://BUCKET/PREFIX?endpoint=...), as the recycle bin's: the credentials
come from credentialsFile=PATH, else AWS_ACCESS_KEY_ID and
AWS_SECRET_ACCESS_KEY, else ~/.aws/credentials.

restore plans first, object by object (create, update, unchanged,
skipped (exists), conflict), with the fields each live object would see
change; --dry-run prints the plan and exits non-zero if anything would
conflict.`,
	}
	o.flags.AddFlags(cmd.PersistentFlags())
	cmd.PersistentFlags().StringVar(&o.store, "store", "",
		"where backups are kept: a directory or s3://BUCKET/PREFIX?endpoint=https://HOST:PORT&region=NAME&pathStyle=true&caFile=PATH&credentialsFile=PATH&profile=NAME (default: .rampart/backups of rampart up)")
	cmd.PersistentFlags().StringVar(&o.keyFile, "key-file", "", "the key Secrets are sealed with, the recycle bin's (32 bytes; default: .rampart/pki/recycle-bin.key of rampart up)")
	cmd.AddCommand(o.createCommand(), o.listCommand(), o.describeCommand(), o.restoreCommand(), o.deleteCommand())
	return cmd
}

func (o *backupOptions) openStore(cmd *cobra.Command) (storage.Store, error) {
	if o.store == "" {
		if _, err := os.Stat(".rampart"); err != nil {
			return nil, errors.New("name the backups' store: --store DIR or s3://BUCKET/PREFIX?endpoint=... (the default, .rampart/backups of rampart up, is not here)")
		}
		o.store = filepath.Join(".rampart", localBackupsDir)
	}
	s, err := storage.Open(cmd.Context(), o.store)
	if err != nil {
		return nil, fmt.Errorf("--store: %w", err)
	}
	return s, nil
}

// key is --key-file's key, or the one rampart up made here; nil if none.
func (o *backupOptions) key() (*recyclebin.Key, error) {
	if o.keyFile == "" {
		local := filepath.Join(".rampart", "pki", localcluster.RecycleBinKey)
		if _, err := os.Stat(local); err != nil {
			return nil, nil
		}
		o.keyFile = local
	}
	return recyclebin.LoadKey(o.keyFile)
}

func (o *backupOptions) createCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "create [NAME]",
		Short: "Back up the objects selected, read at one revision",
		Example: `  rampart backup create shop-before-upgrade --namespaces shop --store /var/lib/rampart/backups
  rampart backup create --namespaces shop,billing -l tier=critical --exclude-resources pods --store 's3://backups/rampart?endpoint=https://minio.example:9000&pathStyle=true'`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := "backup-" + time.Now().UTC().Format("20060102-150405")
			if len(args) == 1 {
				name = args[0]
			}
			if err := backup.ValidName(name); err != nil {
				return err
			}
			if ns := *o.flags.Namespace; ns != "" && !slices.Contains(o.sel.Namespaces, ns) {
				o.sel.Namespaces = append(o.sel.Namespaces, ns)
			}
			store, err := o.openStore(cmd)
			if err != nil {
				return err
			}
			key, err := o.key()
			if err != nil {
				return err
			}
			cfg, err := bulkConfig(o.flags)
			if err != nil {
				return err
			}
			// Discovery read fresh, not from kubectl's cache: a CRD added
			// a minute ago is backed up too.
			disc, err := discovery.NewDiscoveryClientForConfig(cfg)
			if err != nil {
				return err
			}
			dyn, err := dynamic.NewForConfig(cfg)
			if err != nil {
				return err
			}
			c := &backup.Creator{Discovery: disc, Dynamic: dyn, Store: store, Key: key, RampartVersion: Version}
			m, err := c.Create(cmd.Context(), name, o.sel)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "backup %s: %d objects of %d resources at revision %s, %s, in %s, to %s\n",
				m.Name, m.Objects, len(m.Resources), m.ResourceVersion, size(m.Size()), m.Duration().Round(time.Millisecond), o.store)
			for _, w := range m.Warnings {
				fmt.Fprintf(cmd.OutOrStdout(), "warning: %s\n", w)
			}
			return nil
		},
	}
	cmd.Flags().StringSliceVar(&o.sel.Namespaces, "namespaces", nil, "the namespaces to back up (default: all, and then cluster-scoped resources too)")
	cmd.Flags().StringSliceVar(&o.sel.Resources, "resources", nil, "the resources to back up, as resource, resource.group or kind (default: all)")
	cmd.Flags().StringSliceVar(&o.sel.ExcludeResources, "exclude-resources", nil, "resources left out")
	cmd.Flags().StringVarP(&o.sel.LabelSelector, "selector", "l", "", "back up only objects with these labels (the namespaces and CRDs they need come along)")
	return cmd
}

// bulkConfig is the REST config of the kubectl-style flags for a verb that
// makes a request per resource or per object (a backup, a restore):
// client-go's default of 5 requests a second would make one of an idle
// cluster take seconds, and at 50 a restore of 2,000 objects took 80 s;
// the API server's priority and fairness still shares it out. Deprecation
// warnings (v1 Endpoints) are no news to the user.
func bulkConfig(flags *genericclioptions.ConfigFlags) (*rest.Config, error) {
	cfg, err := flags.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = 200, 400
	cfg.WarningHandler = rest.NoWarnings{}
	return cfg, nil
}

// restoreTarget is the cluster a restore writes to, through the
// kubectl-style flags.
func restoreTarget(flags *genericclioptions.ConfigFlags) (restore.APICluster, error) {
	cfg, err := bulkConfig(flags)
	if err != nil {
		return restore.APICluster{}, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return restore.APICluster{}, err
	}
	mapper, err := flags.ToRESTMapper()
	if err != nil {
		return restore.APICluster{}, err
	}
	return restore.APICluster{Dynamic: dyn, Mapper: mapper}, nil
}

func size(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func (o *backupOptions) listCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Short:   "List the backups in the store, oldest first",
		Example: "  rampart backup list --store /var/lib/rampart/backups",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			store, err := o.openStore(cmd)
			if err != nil {
				return err
			}
			ms, err := backup.List(cmd.Context(), store)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if len(ms) == 0 {
				fmt.Fprintf(w, "no backups in %s\n", o.store)
				return nil
			}
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tSTARTED\tDURATION\tOBJECTS\tSIZE\tNAMESPACES")
			for _, m := range ms {
				ns := "(all)"
				if len(m.Selection.Namespaces) > 0 {
					ns = strings.Join(m.Selection.Namespaces, ",")
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", m.Name, m.Started.Format(time.RFC3339), m.Duration().Round(time.Millisecond), m.Objects, size(m.Size()), ns)
			}
			return tw.Flush()
		},
	}
}

func (o *backupOptions) describeCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "describe NAME",
		Short:   "Print what a backup holds: resources and counts, revision, versions",
		Example: "  rampart backup describe shop-before-upgrade --store /var/lib/rampart/backups\n  rampart backup describe shop-before-upgrade -o json",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			store, err := o.openStore(cmd)
			if err != nil {
				return err
			}
			m, err := backup.ReadManifest(cmd.Context(), store, args[0])
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			switch o.output {
			case "json":
				enc := json.NewEncoder(w)
				enc.SetIndent("", "  ")
				return enc.Encode(m)
			case "":
				describeBackup(w, m)
				return nil
			}
			return fmt.Errorf("-o %s: give json, or nothing for text", o.output)
		},
	}
	cmd.Flags().StringVarP(&o.output, "output", "o", "", "json: the whole manifest, every file with its SHA-256")
	return cmd
}

func (o *backupOptions) deleteCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "delete NAME",
		Short:   "Delete a backup from the store (its manifest first, so it is never listed half gone)",
		Example: "  rampart backup delete shop-before-upgrade --store /var/lib/rampart/backups",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			store, err := o.openStore(cmd)
			if err != nil {
				return err
			}
			if _, err := backup.ReadManifest(cmd.Context(), store, args[0]); err != nil {
				return err
			}
			if err := backup.Delete(cmd.Context(), store, args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "backup %s deleted from %s\n", args[0], o.store)
			return nil
		},
	}
}

func describeBackup(w io.Writer, m *backup.Manifest) {
	fmt.Fprintf(w, "Name:             %s\n", m.Name)
	fmt.Fprintf(w, "Format:           %s\n", m.FormatVersion)
	fmt.Fprintf(w, "Started:          %s\n", m.Started.Format(time.RFC3339))
	fmt.Fprintf(w, "Finished:         %s (%s)\n", m.Finished.Format(time.RFC3339), m.Duration().Round(time.Millisecond))
	fmt.Fprintf(w, "API server:       %s\n", m.APIServerVersion)
	fmt.Fprintf(w, "Rampart:          %s\n", m.RampartVersion)
	consistent := "yes, every object as it was at that revision"
	if !m.Consistent {
		consistent = "no: some resources were read later (see warnings)"
	}
	fmt.Fprintf(w, "Revision:         %s (consistent: %s)\n", m.ResourceVersion, consistent)
	ns := "all, and cluster-scoped resources"
	if len(m.Selection.Namespaces) > 0 {
		ns = strings.Join(m.Selection.Namespaces, ", ")
	}
	fmt.Fprintf(w, "Namespaces:       %s\n", ns)
	if len(m.Selection.Resources) > 0 {
		fmt.Fprintf(w, "Resources:        %s\n", strings.Join(m.Selection.Resources, ", "))
	}
	if len(m.Selection.ExcludeResources) > 0 {
		fmt.Fprintf(w, "Excluded:         %s\n", strings.Join(m.Selection.ExcludeResources, ", "))
	}
	if m.Selection.LabelSelector != "" {
		fmt.Fprintf(w, "Selector:         %s\n", m.Selection.LabelSelector)
	}
	fmt.Fprintf(w, "Objects:          %d\n", m.Objects)
	if m.Archive != nil {
		fmt.Fprintf(w, "Archive:          %s, %s, sha256 %s\n", m.Archive.Name, size(m.Archive.Size), m.Archive.SHA256)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nRESOURCE\tVERSION\tKIND\tCOUNT")
	for _, r := range m.Resources {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", r.GVR().GroupResource(), r.Version, r.Kind, r.Count)
	}
	tw.Flush()
	if len(m.Skipped) > 0 {
		fmt.Fprintln(w, "\nNever backed up:")
		for _, s := range m.Skipped {
			fmt.Fprintf(w, "  %s: %s\n", s.Resource, s.Reason)
		}
	}
	for _, warn := range m.Warnings {
		fmt.Fprintf(w, "warning: %s\n", warn)
	}
}
