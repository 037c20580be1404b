package admit

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rampart-io/rampart/api/v1alpha1"
	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
	"github.com/rampart-io/rampart/internal/protection/changewindow"
	"github.com/rampart-io/rampart/internal/protection/ready"
)

// readiness: ChangeWindows are Ready once their webhook is registered; their status
// also says whether they are open and when they next open and close, and
// they are looked at again just after that change (at least hourly).
var readiness = ready.Kind[v1alpha1.ChangeWindow]{
	Status: func(cw *v1alpha1.ChangeWindow) (*[]metav1.Condition, *int64) {
		return &cw.Status.Conditions, &cw.Status.ObservedGeneration
	},
	Reason: "Enforced",
	Judge:  judgeWindow,
}

// judgeWindow sets whether cw is open and when it next changes; a
// schedule that does not compile is Invalid.
func judgeWindow(_ context.Context, cw *v1alpha1.ChangeWindow, _ rampartadmission.Registration, now time.Time) (ready.Verdict, error) {
	later := time.Hour
	w, err := changewindow.Compile(cw.Spec, now)
	if err != nil {
		return ready.Verdict{Unready: "Invalid", Why: err.Error(), Later: later}, nil
	}
	cw.Status.Open, _ = w.Open(now)
	nextOpen, nextClose := w.Next(now)
	cw.Status.NextOpen, cw.Status.NextClose = metaTime(nextOpen), metaTime(nextClose)
	for _, t := range []*time.Time{nextOpen, nextClose} {
		if t != nil && t.Sub(now) < later {
			later = t.Sub(now) + time.Second
		}
	}
	return ready.Verdict{Later: later}, nil
}

func metaTime(t *time.Time) *metav1.Time {
	if t == nil {
		return nil
	}
	m := metav1.NewTime(*t)
	return &m
}

// Ready is the controller of the windows' Ready condition.
func (*Plugin) Ready(c client.Client, reg func() rampartadmission.Registration) rampartadmission.Controller {
	return ready.New(c, reg, readiness)
}
