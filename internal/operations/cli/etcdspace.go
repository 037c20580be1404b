package cli

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rampart-io/rampart/internal/operations/etcdtool/snapshot"
	"github.com/rampart-io/rampart/internal/operations/etcdtool/source"
	"github.com/rampart-io/rampart/internal/operations/etcdtool/space"
	"github.com/rampart-io/rampart/internal/plumbing/storage"
)

func newEtcdSpaceCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "space", Short: "How full etcd is against its quota, and the way back from NOSPACE"}
	cmd.AddCommand(newEtcdSpaceStatusCommand(), newEtcdSpaceRecoverCommand())
	return cmd
}

func newEtcdSpaceStatusCommand() *cobra.Command {
	var f etcdFlags
	var quota int64
	var warn float64
	var top int
	var since int64
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Each member's database against its quota, the NOSPACE alarm, and the largest key prefixes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			cli, err := f.dial(ctx)
			if err != nil {
				return err
			}
			defer cli.Close()
			s, err := space.Measure(ctx, cli, quota)
			if err != nil {
				return err
			}
			v := space.Assess(s, warn)
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "%s: %.0f%% of the quota (alert from %.0f%%)\n%s\n", v.Level, 100*v.Share, 100*warn, space.Describe(s))
			w := space.NewWrites(since)
			if _, err := source.WalkLive(ctx, cli, "/", w.Add); err != nil {
				return err
			}
			if since == 0 {
				fmt.Fprintln(out, "largest key prefixes (latest values; history shows only in a snapshot: rampart etcd usage --snapshot FILE):")
			} else {
				fmt.Fprintf(out, "key prefixes written most since revision %d (keys created or rewritten, their bytes now):\n", since)
			}
			for _, g := range w.Top(top) {
				fmt.Fprintf(out, "  %-60s %10s  %d keys\n", g.Prefix, space.MiB(g.Bytes), g.Keys)
			}
			if v.Level == space.NoSpace {
				fmt.Fprintln(out, "etcd refuses every write: run rampart etcd space recover --dir DIR (same connection flags); docs/runbooks.md#rampartetcdnospace")
			}
			return nil
		},
	}
	f.add(cmd, false)
	cmd.Flags().Int64Var(&quota, "quota-backend-bytes", 0, "etcd's quota, for members older than etcd 3.6 that do not report it (default etcd's 2 GiB)")
	cmd.Flags().Float64Var(&warn, "warn-share", space.DefaultWarnShare, "share of the quota from which it says Warning")
	cmd.Flags().IntVar(&top, "top", 10, "number of key prefixes to list")
	cmd.Flags().Int64Var(&since, "since", 0, "list the prefixes written most after this revision (a revision an earlier status printed) instead of the largest")
	return cmd
}

func newEtcdSpaceRecoverCommand() *cobra.Command {
	var f etcdFlags
	var dir, store, name, tmpDir string
	var quota int64
	cmd := &cobra.Command{
		Use:   "recover",
		Short: "Bring etcd back from NOSPACE: verified snapshot, compact, defragment each member (leader last), disarm the alarm",
		Long: `recover takes a snapshot into the store and verifies it as snapshot save
does; without a verified snapshot it stops before changing anything. Then
it compacts history to the current revision, defragments the members one
at a time with the leader last (a member serves nothing while it is
defragmented), disarms the NOSPACE alarms, and says at each step what it
did and what it read (each member's database size before and after).`,
		Example: `  rampart etcd space recover --dir /var/backups/etcd --endpoints https://10.0.0.1:2379 --cacert ca.crt --cert c.crt --key c.key`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			cli, err := f.dial(ctx)
			if err != nil {
				return err
			}
			defer cli.Close()
			r := space.Recovery{Quota: quota, TmpDir: tmpDir, Out: cmd.OutOrStdout(), Name: name}
			if dir != "" || store != "" {
				st, location, err := openSnapshotStore(ctx, dir, store)
				if err != nil {
					return fmt.Errorf("refusing to recover: %w: %v", space.ErrNoVerifiedSnapshot, err)
				}
				if d, ok := st.(storage.Dir); ok {
					if err := os.MkdirAll(d.Root, 0o700); err != nil {
						return fmt.Errorf("refusing to recover: %w: --dir: %v", space.ErrNoVerifiedSnapshot, err)
					}
					r.TmpDir = d.Root
				}
				r.Store, r.Location = st, location
			}
			if r.Name == "" {
				r.Name = strings.Replace(snapshot.DefaultName(time.Now()), "etcd/", "etcd/before-recover-", 1)
			}
			_, err = r.Run(ctx, cli)
			if errors.Is(err, space.ErrNoVerifiedSnapshot) {
				return fmt.Errorf("refusing to recover: %w", err)
			}
			return err
		},
	}
	f.add(cmd, false)
	addSnapshotStoreFlags(cmd, &dir, &store)
	cmd.Flags().StringVar(&name, "name", "", "the snapshot's name in the store (default etcd/before-recover-<time>.db)")
	cmd.Flags().StringVar(&tmpDir, "tmp-dir", os.TempDir(), "where the snapshot is verified before it goes to an S3 store")
	cmd.Flags().Int64Var(&quota, "quota-backend-bytes", 0, "etcd's quota, for members older than etcd 3.6 that do not report it (default etcd's 2 GiB)")
	return cmd
}
