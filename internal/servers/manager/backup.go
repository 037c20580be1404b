package manager

import (
	"cmp"
	"context"
	"fmt"
	"os"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"

	objbackup "github.com/rampart-io/rampart/internal/operations/backup"
	"github.com/rampart-io/rampart/internal/plumbing/storage"
	"github.com/rampart-io/rampart/internal/protection/recyclebin"
	backupcontroller "github.com/rampart-io/rampart/internal/servers/manager/controller/backup"
)

// backups runs the Backup objects of Rampart's namespace on the leader,
// into --backup-store; without one, each Backup says it cannot run.
func backups(ctx context.Context, mgr ctrl.Manager, o Options, recorder events.EventRecorder) error {
	r := &backupcontroller.Reconciler{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Recorder: recorder, Namespace: o.Namespace, InstalledBy: o.InstalledBy}
	if o.BackupStore != "" {
		openCtx, cancel := context.WithTimeout(ctx, openBinWithin)
		defer cancel()
		store, err := storage.Open(openCtx, o.BackupStore)
		if err != nil {
			return fmt.Errorf("--backup-store: %w", err)
		}
		if d, ok := store.(storage.Dir); ok {
			if err := os.MkdirAll(d.Root, 0o700); err != nil {
				return fmt.Errorf("--backup-store: %w", err)
			}
		}
		r.Location = o.BackupStore
		if s, ok := store.(fmt.Stringer); ok {
			r.Location = s.String()
		}
		creator := &objbackup.Creator{Store: store, RampartVersion: o.Version}
		if keyFile := cmp.Or(o.BackupKeyFile, o.RecycleBinKeyFile); keyFile != "" {
			if creator.Key, err = recyclebin.LoadKey(keyFile); err != nil {
				return fmt.Errorf("--backup-key-file: %w", err)
			}
		}
		// Its own clients: a backup lists every resource, paged, at a
		// pace of its own, and reads discovery fresh (a CRD added a
		// minute ago is backed up too).
		cfg := rest.CopyConfig(mgr.GetConfig())
		cfg.QPS, cfg.Burst = 50, 100
		cfg.WarningHandler = rest.NoWarnings{}
		if creator.Discovery, err = discovery.NewDiscoveryClientForConfig(cfg); err != nil {
			return err
		}
		if creator.Dynamic, err = dynamic.NewForConfig(cfg); err != nil {
			return err
		}
		r.Creator, r.Store = creator, store
		// A snapshot is verified on the store's file system when it has
		// one (no copy across devices), else in the temporary directory.
		tmp := os.TempDir()
		if d, ok := store.(storage.Dir); ok {
			tmp = d.Root
		}
		r.Snapshotter = &backupcontroller.SecretSnapshotter{Reader: mgr.GetAPIReader(), Namespace: o.Namespace, Store: store, TmpDir: tmp}
		r.EtcdSecrets = o.EtcdSnapshotSecrets
	}
	return r.SetupWithManager(mgr)
}
