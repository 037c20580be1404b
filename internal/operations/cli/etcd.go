package cli

import (
	"context"
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
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rampart-io/rampart/internal/operations/etcdtool/check"
	"github.com/rampart-io/rampart/internal/operations/etcdtool/etcdkey"
	"github.com/rampart-io/rampart/internal/operations/etcdtool/snapshot"
	"github.com/rampart-io/rampart/internal/operations/etcdtool/source"
	"github.com/rampart-io/rampart/internal/operations/etcdtool/usage"
	"github.com/rampart-io/rampart/internal/plumbing/storage"
)

func newEtcdCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "etcd",
		Short: "Look inside etcd: usage, undecodable objects, verified snapshots, space against the quota",
	}
	cmd.AddCommand(newEtcdUsageCommand(), newEtcdCheckCommand(), newEtcdSnapshotCommand(), newEtcdSpaceCommand())
	return cmd
}

// etcdFlags are etcdctl's connection flags, or a snapshot file instead.
type etcdFlags struct {
	source.Client
	snapshot string
}

func (f *etcdFlags) add(cmd *cobra.Command, withSnapshot bool) {
	cmd.Flags().StringSliceVar(&f.Endpoints, "endpoints", nil, "etcd client URLs (https://HOST:2379)")
	cmd.Flags().StringVar(&f.CACert, "cacert", "", "CA bundle that signed etcd's serving certificate")
	cmd.Flags().StringVar(&f.Cert, "cert", "", "client certificate: the API server's etcd client certificate will do unless etcd's authentication is on; then one that may read every key (rampart up: DIR/pki/etcd-reader.crt), or root's (DIR/pki/etcd-root.crt) for snapshot save and space recover")
	cmd.Flags().StringVar(&f.Key, "key", "", "client certificate's key")
	if withSnapshot {
		cmd.Flags().StringVar(&f.snapshot, "snapshot", "", "read this snapshot file (or a member's member/snap/db) instead of a live etcd")
	}
}

func (f *etcdFlags) dial(ctx context.Context) (*clientv3.Client, error) {
	if f.snapshot != "" && len(f.Endpoints) > 0 {
		return nil, errors.New("give --snapshot or --endpoints, not both")
	}
	return f.Dial(ctx)
}

func newEtcdUsageCommand() *cobra.Command {
	var f etcdFlags
	var output, prefix string
	var top, rows int
	cmd := &cobra.Command{
		Use:   "usage",
		Short: "Bytes and counts by resource, namespace and key prefix, history included, and the largest objects",
		Long: `Reads a snapshot file (every revision kept: what compaction would reclaim
shows) or a live etcd (the latest revision of each key) and reports what
fills it. -o folded writes folded stacks for flamegraph.pl or speedscope;
-o html a self-contained flame graph page.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !slices.Contains(usage.Formats, output) {
				return fmt.Errorf("-o %s: use one of %s", output, strings.Join(usage.Formats, ", "))
			}
			var r usage.Report
			if f.snapshot != "" && len(f.Endpoints) == 0 {
				c := usage.NewCounter(true)
				if err := source.WalkSnapshot(f.snapshot, func(e source.Entry) error {
					if !strings.HasPrefix(string(e.Key), prefix) {
						return nil
					}
					return c.Add(e)
				}); err != nil {
					return err
				}
				r = c.Report(f.snapshot, top)
			} else {
				cli, err := f.dial(cmd.Context())
				if err != nil {
					return err
				}
				defer cli.Close()
				c := usage.NewCounter(false)
				if _, err := source.WalkLive(cmd.Context(), cli, prefix, c.Add); err != nil {
					return err
				}
				r = c.Report(strings.Join(f.Endpoints, ","), top)
			}
			return usage.Write(cmd.OutOrStdout(), r, output, rows)
		},
	}
	f.add(cmd, true)
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table, json, folded or html")
	cmd.Flags().StringVar(&prefix, "prefix", "/", "count only keys under this prefix")
	cmd.Flags().IntVar(&top, "top", 20, "number of largest objects to list")
	cmd.Flags().IntVar(&rows, "rows", 30, "rows per table (0: all)")
	return cmd
}

func newEtcdCheckCommand() *cobra.Command {
	var f etcdFlags
	var output, encConfig, prefix string
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Decode every object as the API server would and say how to remove the ones it cannot",
		Long: `Decodes the latest value of every key under /registry/ as kube-apiserver
does: protobuf for built-in types, JSON for custom resources, after
decryption with --encryption-provider-config (the API server's file);
without it, encrypted values are reported "not checked". One undecodable
object makes every LIST of its resource fail. Exits 1 if any is found.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if output != "table" && output != "json" {
				return fmt.Errorf("-o %s: use table or json", output)
			}
			checker, err := check.New(ctx, encConfig)
			if err != nil {
				return err
			}
			var sum check.Summary
			what := f.snapshot
			if f.snapshot != "" && len(f.Endpoints) == 0 {
				sum, err = check.Snapshot(ctx, checker, f.snapshot, prefix)
			} else {
				cli, derr := f.dial(ctx)
				if derr != nil {
					return derr
				}
				defer cli.Close()
				what = strings.Join(f.Endpoints, ",")
				sum, err = check.Live(ctx, checker, cli, prefix)
			}
			if err != nil {
				return err
			}
			rm := check.Removal{Endpoints: f.Endpoints, CACert: f.CACert, Cert: f.Cert, KeyFile: f.Key}
			if output == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				if err := enc.Encode(sum); err != nil {
					return err
				}
			} else {
				writeCheck(cmd.OutOrStdout(), what, sum, rm)
			}
			if sum.Counts[check.Undecodable] > 0 {
				return fmt.Errorf("%d %w", sum.Counts[check.Undecodable], check.ErrUndecodable)
			}
			return nil
		},
	}
	f.add(cmd, true)
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table or json")
	cmd.Flags().StringVar(&encConfig, "encryption-provider-config", "", "the API server's EncryptionConfiguration, to decrypt encrypted values")
	cmd.Flags().StringVar(&prefix, "prefix", etcdkey.Prefix, "check only keys under this prefix (the API server's --etcd-prefix)")
	return cmd
}

func writeCheck(w io.Writer, what string, sum check.Summary, rm check.Removal) {
	fmt.Fprintf(w, "%s at revision %d: %d ok, %d undecodable, %d not checked\n", what, sum.Revision,
		sum.Counts[check.OK], sum.Counts[check.Undecodable], sum.Counts[check.NotChecked])
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	var bad []check.Result
	for _, r := range sum.Problems {
		if r.Status == check.NotChecked {
			fmt.Fprintf(tw, "not checked\t%s\t%s\n", r.Key, r.Reason)
		} else {
			bad = append(bad, r)
		}
	}
	_ = tw.Flush()
	if len(bad) == 0 {
		return
	}
	fmt.Fprintf(w, "\n%d undecodable: the API server fails every LIST of these resources until they are removed.\n", len(bad))
	fmt.Fprintln(w, "First take a snapshot (rampart etcd snapshot save --dir DIR ...) so the values can be recovered; then delete each key in etcd:")
	for _, r := range bad {
		fmt.Fprintf(w, "\n%s\n  reason: %s\n  remove: %s\n", r.Key, r.Reason, rm.Command(r.Key))
	}
}

func newEtcdSnapshotCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "snapshot", Short: "Save and verify etcd snapshots"}
	var f etcdFlags
	var dir, store, name, tmpDir string
	save := &cobra.Command{
		Use:   "save",
		Short: "Save a snapshot to the store, verified: etcd's hash, bbolt's check, the stored copy's checksum",
		Example: `  rampart etcd snapshot save --dir /var/backups/etcd --endpoints https://10.0.0.1:2379 --cacert ca.crt --cert c.crt --key c.key
  AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=... rampart etcd snapshot save --store 's3://backups/etcd?endpoint=https://minio.example:9000&pathStyle=true' ...`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, location, err := openSnapshotStore(cmd.Context(), dir, store)
			if err != nil {
				return err
			}
			// The local copy is verified before it is stored: on the
			// store's file system when it has one, else in --tmp-dir.
			if d, ok := st.(storage.Dir); ok {
				if err := os.MkdirAll(d.Root, 0o700); err != nil {
					return err
				}
				tmpDir = d.Root
			}
			cli, err := f.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer cli.Close()
			if name == "" {
				name = snapshot.DefaultName(time.Now())
			}
			info, err := snapshot.Save(cmd.Context(), cli, st, name, tmpDir)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "saved %s in %s: %d bytes, revision %d, %d revisions kept, sha256 %s (etcd hash ok, bbolt check ok, stored copy reads back)\n",
				info.Name, location, info.Size, info.Revision, info.Revisions, info.SHA256)
			return nil
		},
	}
	f.add(save, false)
	addSnapshotStoreFlags(save, &dir, &store)
	save.Flags().StringVar(&tmpDir, "tmp-dir", os.TempDir(), "where the snapshot is verified before it goes to an S3 store")
	save.Flags().StringVar(&name, "name", "", "object name in the store (default etcd/<time>.db)")
	verify := &cobra.Command{
		Use:   "verify FILE",
		Short: "Verify a snapshot file: etcd's trailing hash, bbolt's consistency check, the revisions it holds",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			info, err := snapshot.Verify(args[0])
			if err != nil {
				return err
			}
			hash := "no etcd hash (a member's db file, not a snapshot)"
			if info.EtcdHash {
				hash = "etcd hash ok"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %d bytes, revision %d, %d revisions kept, compacted at %d, sha256 %s (%s, bbolt check ok)\n",
				args[0], info.Size, info.Revision, info.Revisions, info.CompactedRevision, info.SHA256, hash)
			return nil
		},
	}
	cmd.AddCommand(save, verify, newEtcdSnapshotListCommand(), newEtcdSnapshotGetCommand())
	return cmd
}

// openSnapshotStore opens the store --dir or --store names, and says
// where it is without credentials.
func openSnapshotStore(ctx context.Context, dir, store string) (storage.Store, string, error) {
	location := dir
	switch {
	case dir != "" && store != "":
		return nil, "", errors.New("--dir and --store are both set: give one (--store takes a directory too)")
	case store != "":
		location = store
	case dir == "":
		return nil, "", errors.New("name the store: --dir DIR, or --store DIR or s3://BUCKET/PREFIX?endpoint=https://HOST:PORT (the recycle bin's and backups' kind of store)")
	}
	st, err := storage.Open(ctx, location)
	if err != nil {
		return nil, "", fmt.Errorf("--store: %w", err)
	}
	if s, ok := st.(fmt.Stringer); ok {
		location = s.String() // a bucket's location without its query
	}
	return st, location, nil
}

func addSnapshotStoreFlags(cmd *cobra.Command, dir, store *string) {
	cmd.Flags().StringVar(dir, "dir", "", "directory store for snapshots")
	cmd.Flags().StringVar(store, "store", "", "store for snapshots: a directory or s3://BUCKET/PREFIX?endpoint=https://HOST:PORT&region=NAME&pathStyle=true&caFile=PATH&credentialsFile=PATH&profile=NAME (credentials: credentialsFile, else AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, else ~/.aws/credentials)")
}

func newEtcdSnapshotListCommand() *cobra.Command {
	var dir, store string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the snapshots in a store (scheduled ones are etcd/BACKUP-YYYYMMDD-HHMMSS.db)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, _, err := openSnapshotStore(cmd.Context(), dir, store)
			if err != nil {
				return err
			}
			objs, err := st.List(cmd.Context(), "etcd/")
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tSIZE\tSTORED\tSHA256")
			for _, o := range objs {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", o.Name, size(o.Size), o.Modified.UTC().Format(time.RFC3339), o.SHA256)
			}
			if len(objs) == 0 {
				fmt.Fprintln(tw, "(none)")
			}
			return tw.Flush()
		},
	}
	addSnapshotStoreFlags(cmd, &dir, &store)
	return cmd
}

func newEtcdSnapshotGetCommand() *cobra.Command {
	var dir, store, to string
	cmd := &cobra.Command{
		Use:     "get NAME",
		Short:   "Copy a snapshot out of a store to a file, checked against the store's checksum and verified as verify does",
		Example: `  rampart etcd snapshot get etcd/etcd-hourly-20261125-020000.db --store 's3://backups/cluster-a?endpoint=https://minio.example:9000' --to snap.db`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, location, err := openSnapshotStore(cmd.Context(), dir, store)
			if err != nil {
				return err
			}
			if to == "" {
				to = filepath.Base(args[0])
			}
			if _, err := os.Stat(to); err == nil {
				return fmt.Errorf("%s exists: give another --to", to)
			}
			r, err := st.Get(cmd.Context(), args[0])
			if err != nil {
				return fmt.Errorf("%s in %s: %w (rampart etcd snapshot list shows what is there)", args[0], location, err)
			}
			defer r.Close()
			tmp := to + ".part"
			f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				return err
			}
			defer os.Remove(tmp)
			_, err = io.Copy(f, r) // fails at EOF if the content no longer matches the store's checksum
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("copy out of %s: %w", location, err)
			}
			info, err := snapshot.Verify(tmp)
			if err != nil {
				return err
			}
			if err := os.Rename(tmp, to); err != nil {
				return err
			}
			hash := "no etcd hash"
			if info.EtcdHash {
				hash = "etcd hash ok"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %d bytes, revision %d, %d revisions kept, sha256 %s (store checksum ok, %s, bbolt check ok)\n",
				to, info.Size, info.Revision, info.Revisions, info.SHA256, hash)
			fmt.Fprintf(cmd.OutOrStdout(), "restore it with etcdutl snapshot restore %s --bump-revision 1000000000 --mark-compacted ..., kubelets stopped first (docs/etcd.md: Restoring an etcd snapshot without the kubelet trap)\n", to)
			return nil
		},
	}
	addSnapshotStoreFlags(cmd, &dir, &store)
	cmd.Flags().StringVar(&to, "to", "", "file to write (default: the snapshot's base name, here); never overwritten")
	return cmd
}
