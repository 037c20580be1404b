package admit

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/plumbing/installation"
	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
	"github.com/rampart-io/rampart/internal/protection/ready"
)

// RecycleBinOff is the reason of a RecyclePolicy nothing keeps for.
const RecycleBinOff = "RecycleBinOff"

// turnOn is how to turn the recycle bin on.
var turnOn = installation.Setting{
	Helm:   "set the chart's manager.recycleBin.enabled",
	Up:     "start the cluster with rampart up, which keeps it in DIR/recycle-bin",
	ByHand: "run the manager with --recycle-bin-dir or --recycle-bin-store",
}

// readiness: RecyclePolicies are Ready once their webhook is registered
// as their current spec makes it, so a user sees from when their deletes
// are kept; while the recycle bin is off they are not, saying how to turn
// it on where the manager was installed by installedBy.
func readiness(installedBy installation.Method) ready.Kind[v1alpha1.RecyclePolicy] {
	return ready.Kind[v1alpha1.RecyclePolicy]{
		Status: func(p *v1alpha1.RecyclePolicy) (*[]metav1.Condition, *int64) {
			return &p.Status.Conditions, &p.Status.ObservedGeneration
		},
		Reason: "Keeping",
		Detail: ": each delete it selects is refused unless a copy is stored first",
		Judge: func(_ context.Context, _ *v1alpha1.RecyclePolicy, reg rampartadmission.Registration, _ time.Time) (ready.Verdict, error) {
			if reg.RecycleBin {
				return ready.Verdict{}, nil
			}
			return ready.Verdict{Unready: RecycleBinOff, Why: "the recycle bin is off, so nothing is kept: " + installedBy.Say(turnOn)}, nil
		},
	}
}

// Ready is the controller of the policies' Ready condition.
func (p *Plugin) Ready(c client.Client, reg func() rampartadmission.Registration) rampartadmission.Controller {
	return ready.New(c, reg, readiness(p.InstalledBy))
}
