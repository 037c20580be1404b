package drill

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rampart-io/rampart/internal/protection/admission"
	"github.com/rampart-io/rampart/internal/protection/compiled"
)

// deleteStreamRate is the pace of the delete stream: a controller cleaning
// up finished pods.
const deleteStreamRate = 10

// managerRollingRestart: a client deletes pods one by one at a steady pace
// (a controller cleaning up), a refused delete tried again a second later,
// while on the protected side each manager replica is stopped and started
// again in turn, as a rolling restart of its Deployment does. The pods are
// in the flow control's selector, so every delete is judged and counted.
var managerRollingRestart = Operation{
	Name: "manager-rolling-restart",
	What: "a client deletes 200 pods, 10 a second, each refused one again a second later; protected: the pods under the flow control on pod deletes, " +
		"and each manager replica stopped and started in turn from the second second",
	Alone: true,
	Run: func(ctx context.Context, t Target) (Timing, error) {
		var tm Timing
		if t.Protected && t.Local == nil {
			return tm, errors.New("the manager-rolling-restart operation restarts the local managers: run `rampart drill` without --kubeconfig")
		}
		ns := t.Prefix + "-stream"
		n := max(200/t.Scale, 100)
		defer t.cleanupNamespace(ns)
		if err := t.opsNamespace(ctx, ns); err != nil {
			return tm, err
		}
		names := make([]string, n)
		for i := range n {
			names[i] = fmt.Sprintf("job-%04d", i)
		}
		if err := parallel(ctx, names, func(ctx context.Context, name string) error {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "batch"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}}}
			_, err := t.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
			return err
		}); err != nil {
			return tm, err
		}
		if err := t.waitRunning(ctx, ns, "app=batch", n); err != nil {
			return tm, err
		}
		refusals, err := t.watchRefusals(ctx, []string{ns})
		if err != nil {
			return tm, err
		}
		start := time.Now()
		type restart struct {
			took time.Duration
			err  error
		}
		restarted := make(chan restart, 1)
		if t.Protected {
			go func() {
				time.Sleep(2 * time.Second)
				began := time.Now()
				err := t.Local.RestartManagers(ctx)
				restarted <- restart{time.Since(began), err}
			}()
		} else {
			restarted <- restart{}
		}
		retried := 0
		tick := time.NewTicker(time.Second / deleteStreamRate)
		for _, name := range names {
			for {
				<-tick.C
				err := t.Client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{})
				if err == nil || apierrors.IsNotFound(err) {
					break
				}
				if ctx.Err() != nil {
					tick.Stop()
					return tm, ctx.Err()
				}
				retried++
				time.Sleep(time.Second)
			}
		}
		tick.Stop()
		tm.Took, tm.Done = time.Since(start), true
		r := <-restarted
		if r.err != nil {
			return tm, fmt.Errorf("rolling restart: %w", r.err)
		}
		tm.Measured = map[string]float64{"deletes_retried": float64(retried)}
		if t.Protected {
			tm.Measured["restart_s"] = seconds(r.took)
		}
		return tm, refusals.settle(ctx, &tm, nil, nil)
	},
}

// uninstallMidOperation: Rampart is uninstalled a third of the way into a
// rolling update of a Deployment under its generated budget, as `helm
// uninstall` removes the chart, and the rollout must finish as if Rampart
// had never been there: no webhook of Rampart's left to call, nor any of
// its compiled policies. It is installed again afterwards.
var uninstallMidOperation = Operation{
	Name: "uninstall-mid-rollout",
	What: "Rampart is uninstalled (as helm uninstall: managers stopped, the chart's objects deleted, what its ClusterRole owns with them) " +
		"a third of the way into the rolling-update rollout, then installed again; nothing of Rampart's may be left to judge a request",
	Alone: true,
	Run: func(ctx context.Context, t Target) (Timing, error) {
		if t.Protected && t.Local == nil {
			return Timing{}, errors.New("the uninstall-mid-rollout operation uninstalls the local Rampart: run `rampart drill` without --kubeconfig")
		}
		var midway func(context.Context) error
		var leftBehind []string
		if t.Protected {
			midway = func(ctx context.Context) error {
				if err := t.Local.UninstallRampart(ctx); err != nil {
					return err
				}
				var err error
				leftBehind, err = t.rampartLeftBehind(ctx)
				return err
			}
		}
		tm, err := t.timedRollout(ctx, t.Prefix+"-uninstall", midway)
		if err != nil {
			return tm, err
		}
		if t.Protected {
			if len(leftBehind) > 0 {
				tm.Refused += len(leftBehind)
				tm.Refusals = append(tm.Refusals, "left behind by the uninstall: "+strings.Join(leftBehind, ", "))
			}
			if err := t.Local.ReinstallRampart(ctx); err != nil {
				return tm, fmt.Errorf("installing Rampart again: %w", err)
			}
		}
		return tm, nil
	},
}

// rampartLeftBehind waits up to 30 s for the garbage collector to delete
// what the uninstalled chart owned, and names what of Rampart's could
// still judge a request: its webhook configuration, its compiled
// policies, and their bindings but those a ProtectionPolicy owns (the
// CRDs stay, and a policy's binding with its policy, bound to nothing).
func (t Target) rampartLeftBehind(ctx context.Context) ([]string, error) {
	var left []string
	err := poll(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
		left = nil
		reg := t.Client.AdmissionregistrationV1()
		if _, err := reg.ValidatingWebhookConfigurations().Get(ctx, admission.ValidatingConfigName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			left = append(left, "validatingwebhookconfiguration/"+admission.ValidatingConfigName)
		}
		sel := metav1.ListOptions{LabelSelector: compiled.LabelManagedBy + "=" + compiled.ManagedBy}
		policies, err := reg.ValidatingAdmissionPolicies().List(ctx, sel)
		if err != nil {
			return false, err
		}
		for _, p := range policies.Items {
			left = append(left, "validatingadmissionpolicy/"+p.Name)
		}
		bindings, err := reg.ValidatingAdmissionPolicyBindings().List(ctx, sel)
		if err != nil {
			return false, err
		}
		for _, b := range bindings.Items {
			if len(b.OwnerReferences) != 1 || b.OwnerReferences[0].Kind != "ProtectionPolicy" {
				left = append(left, "validatingadmissionpolicybinding/"+b.Name)
			}
		}
		return len(left) == 0, nil
	})
	if err != nil && len(left) == 0 {
		return nil, err
	}
	return left, nil
}
