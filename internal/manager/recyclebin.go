package manager

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	rampartadmission "github.com/rampart-io/rampart/internal/admission"
	"github.com/rampart-io/rampart/internal/recyclebin"
	"github.com/rampart-io/rampart/internal/storage"
)

func init() { metrics.Registry.MustRegister(recyclebin.Collectors()...) }

// resumeWithin is how far back a starting manager looks for captures a
// previous run left unsettled.
const resumeWithin = 24 * time.Hour

// binRunnable runs the recycle bin's keeper on every replica: each settles
// the captures it made (and, at start, those left unsettled).
type binRunnable struct{ keeper *recyclebin.Keeper }

// recycleBin is the recycle bin the options ask for, or nil.
func recycleBin(cfg *rest.Config, o Options) (*binRunnable, error) {
	if o.RecycleBinDir == "" {
		return nil, nil
	}
	if err := os.MkdirAll(o.RecycleBinDir, 0o700); err != nil {
		return nil, fmt.Errorf("--recycle-bin-dir: %w", err)
	}
	bin := &recyclebin.Bin{Store: storage.Dir{Root: o.RecycleBinDir}}
	if o.RecycleBinKeyFile != "" {
		key, err := recyclebin.LoadKey(o.RecycleBinKeyFile)
		if err != nil {
			return nil, fmt.Errorf("--recycle-bin-key-file: %w", err)
		}
		bin.Key = key
	} else {
		o.Log.Info("the recycle bin has no key (--recycle-bin-key-file): deletes of protected Secrets will be refused, since a Secret is never kept in clear")
	}
	meta, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	log := slog.New(logr.ToSlogHandler(o.Log.WithName("recyclebin")))
	return &binRunnable{keeper: &recyclebin.Keeper{Bin: bin, Alive: recyclebin.MetadataLiveness(meta), Clock: clock.RealClock{}, Log: log,
		NotDeletedAfter: o.RecycleBinNotDeletedAfter}}, nil
}

// capturer is nil (no recycle bin) or the keeper.
func (b *binRunnable) capturer() rampartadmission.Capturer {
	if b == nil {
		return nil
	}
	return b.keeper
}

// Start implements manager.Runnable.
func (b *binRunnable) Start(ctx context.Context) error {
	b.keeper.Start(ctx, resumeWithin)
	<-ctx.Done()
	return nil
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: captures
// happen on every replica.
func (b *binRunnable) NeedLeaderElection() bool { return false }
