package manager

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rampart-io/rampart/api/v1alpha1"
	rampartadmission "github.com/rampart-io/rampart/internal/admission"
	"github.com/rampart-io/rampart/internal/protection/policy"
)

// A protection holds from the moment the API accepts the request that
// creates it. The webhooks that enforce policies, windows, flow controls
// and the scale subresource are registered from caches, asynchronously; so
// the request that creates one of these (or adds the explicit-replicas
// label) is itself judged by a webhook that registers the coverage it
// brings as pending, writes the configuration, and waits on a Barrier
// until every API server enforces it, before admitting the request.
//
// Every replica registers from its own caches, which may lag behind the
// request another replica just admitted. So pending coverage is recorded
// in the configuration itself (annotation pendingAnnotation: what, until
// when) and every replica keeps what is marked there until the mark
// expires, by which time its caches hold the object (or the request was
// not persisted after all, and the coverage may go). Writes carry the
// resourceVersion read, so that two replicas never overwrite each other.

const (
	// pendingAnnotation holds the pending marks: key → RFC 3339 expiry.
	pendingAnnotation = "rampart.io/pending"
	// tokenAnnotation is the token of the configuration's probe webhook.
	tokenAnnotation = "rampart.io/registration-token"
	// pendingFor is how long coverage admitted but not yet in the caches is
	// kept: far more than a watch takes to deliver it.
	pendingFor = 30 * time.Second
)

// pending is coverage a request brings before the caches have it: one of
// a scale target, a policy, a window or a flow control.
type pending struct {
	until       time.Time
	scaleTarget string
	policy      *v1alpha1.ProtectionPolicy
	window      *v1alpha1.ChangeWindow
	flowControl *v1alpha1.DeletionFlowControl
	// budgetNamespace is a namespace whose first budget is being admitted.
	budgetNamespace string
	// scaleWidening is a policy guarding replicas whose covered workloads
	// the view may not list yet: kept until it expires.
	scaleWidening *v1alpha1.ProtectionPolicy
}

// caughtUp says whether the caches hold what p brings (same object, same or
// later generation).
func caughtUp(p pending, reg rampartadmission.Registration) bool {
	newer := func(uid, cuid string, gen, cgen int64) bool { return uid == cuid && cgen >= gen }
	switch {
	case p.scaleTarget != "":
		return slices.Contains(reg.ScaleTargets, p.scaleTarget)
	case p.budgetNamespace != "":
		return slices.Contains(reg.BudgetNamespaces, p.budgetNamespace)
	case p.policy != nil:
		for _, c := range reg.Policies {
			if c.Name == p.policy.Name {
				return newer(string(p.policy.UID), string(c.UID), p.policy.Generation, c.Generation)
			}
		}
	case p.window != nil:
		for _, c := range reg.Windows {
			if c.Namespace == p.window.Namespace && c.Name == p.window.Name {
				return newer(string(p.window.UID), string(c.UID), p.window.Generation, c.Generation)
			}
		}
	case p.flowControl != nil:
		for _, c := range reg.FlowControls {
			if c.Name == p.flowControl.Name {
				return newer(string(p.flowControl.UID), string(c.UID), p.flowControl.Generation, c.Generation)
			}
		}
	}
	return false
}

// withPending is reg with the pending coverage in place of what the caches
// say about the same objects.
func withPending(reg rampartadmission.Registration, ps []pending) rampartadmission.Registration {
	reg.Policies = slices.Clone(reg.Policies)
	reg.Windows = slices.Clone(reg.Windows)
	reg.FlowControls = slices.Clone(reg.FlowControls)
	reg.ScaleTargets = slices.Clone(reg.ScaleTargets)
	for _, p := range ps {
		switch {
		case p.scaleTarget != "":
			reg.ScaleTargets = append(reg.ScaleTargets, p.scaleTarget)
		case p.budgetNamespace != "":
			reg.BudgetNamespaces = addNamespace(reg.BudgetNamespaces, p.budgetNamespace)
		case p.policy != nil:
			reg.Policies = slices.DeleteFunc(reg.Policies, func(c v1alpha1.ProtectionPolicy) bool { return c.Name == p.policy.Name })
			reg.Policies = append(reg.Policies, *p.policy)
		case p.window != nil:
			reg.Windows = slices.DeleteFunc(reg.Windows, func(c v1alpha1.ChangeWindow) bool {
				return c.Namespace == p.window.Namespace && c.Name == p.window.Name
			})
			reg.Windows = append(reg.Windows, *p.window)
		case p.flowControl != nil:
			reg.FlowControls = slices.DeleteFunc(reg.FlowControls, func(c v1alpha1.DeletionFlowControl) bool { return c.Name == p.flowControl.Name })
			reg.FlowControls = append(reg.FlowControls, *p.flowControl)
		case p.scaleWidening != nil:
			reg.ScaleWidening = append(slices.Clone(reg.ScaleWidening), *p.scaleWidening)
		}
	}
	slices.Sort(reg.ScaleTargets)
	reg.ScaleTargets = slices.Compact(reg.ScaleTargets)
	return reg
}

// pendingMarks are the keys under which p's coverage is marked: its
// webhooks' base names and the scale targets it adds.
func pendingMarks(base rampartadmission.Registration, p pending, targets func([]v1alpha1.ProtectionPolicy) []string) []string {
	one := rampartadmission.Registration{Endpoint: base.Endpoint, OwnNamespace: base.OwnNamespace}
	switch {
	case p.scaleTarget != "":
		return []string{"scale/" + p.scaleTarget}
	case p.budgetNamespace != "":
		return []string{"budgets/" + p.budgetNamespace}
	case p.policy != nil:
		one.Policies = []v1alpha1.ProtectionPolicy{*p.policy}
	case p.window != nil:
		one.Windows = []v1alpha1.ChangeWindow{*p.window}
	case p.flowControl != nil:
		one.FlowControls = []v1alpha1.DeletionFlowControl{*p.flowControl}
	case p.scaleWidening != nil:
		one.ScaleWidening = []v1alpha1.ProtectionPolicy{*p.scaleWidening}
	}
	var out []string
	for _, h := range rampartadmission.Webhooks(one) {
		if h.Owner != (rampartadmission.Owner{}) {
			out = append(out, "webhook/"+h.Name)
		}
	}
	if p.policy != nil && targets != nil {
		for _, t := range targets([]v1alpha1.ProtectionPolicy{*p.policy}) {
			out = append(out, "scale/"+t)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// liveMarks are the unexpired marks of a live configuration.
func liveMarks(live *admissionregistrationv1.ValidatingWebhookConfiguration, now time.Time) map[string]time.Time {
	out := map[string]time.Time{}
	raw := live.Annotations[pendingAnnotation]
	if raw == "" {
		return out
	}
	var m map[string]string
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		return out
	}
	for k, v := range m {
		if t, err := time.Parse(time.RFC3339Nano, v); err == nil && t.After(now) {
			out[k] = t
		}
	}
	return out
}

// mergeLive makes the configuration to write: want, plus what the live
// configuration holds under unexpired marks that are not this replica's
// own (another replica admitted it; this replica's caches may not have it
// yet). It returns the marks to write too.
func mergeLive(reg rampartadmission.Registration, own map[string]time.Time, live *admissionregistrationv1.ValidatingWebhookConfiguration, now time.Time) (*admissionregistrationv1.ValidatingWebhookConfiguration, map[string]time.Time) {
	marks := map[string]time.Time{}
	var keepHooks []string
	if live != nil {
		for k, t := range liveMarks(live, now) {
			marks[k] = t
			if _, mine := own[k]; mine {
				continue
			}
			if target, ok := strings.CutPrefix(k, "scale/"); ok && !slices.Contains(reg.ScaleTargets, target) {
				reg.ScaleTargets = append(slices.Clone(reg.ScaleTargets), target)
			} else if ns, ok := strings.CutPrefix(k, "budgets/"); ok {
				reg.BudgetNamespaces = addNamespace(reg.BudgetNamespaces, ns)
			} else if name, ok := strings.CutPrefix(k, "webhook/"); ok {
				keepHooks = append(keepHooks, name)
			}
		}
	}
	for k, t := range own {
		if t.After(marks[k]) {
			marks[k] = t
		}
	}
	slices.Sort(reg.ScaleTargets)
	want := rampartadmission.ValidatingConfig(reg)
	if len(keepHooks) > 0 {
		hooks := slices.DeleteFunc(want.Webhooks, func(h admissionregistrationv1.ValidatingWebhook) bool {
			return slices.Contains(keepHooks, rampartadmission.BaseName(h.Name))
		})
		for _, h := range live.Webhooks {
			if slices.Contains(keepHooks, rampartadmission.BaseName(h.Name)) {
				hooks = append(hooks, h)
			}
		}
		want.Webhooks = hooks
	}
	return want, marks
}

// sameReach says whether two lists of webhooks reach the same requests the
// same way, ignoring the probe and what the API server defaults.
func sameReach(a, b []admissionregistrationv1.ValidatingWebhook) bool {
	type reach struct {
		Name          string
		URL           *string
		Service       *admissionregistrationv1.ServiceReference
		CABundle      []byte
		Rules         []admissionregistrationv1.RuleWithOperations
		NS, Obj       any
		FailurePolicy any
		Conditions    []admissionregistrationv1.MatchCondition
		Timeout       *int32
	}
	key := func(hs []admissionregistrationv1.ValidatingWebhook) map[string]reach {
		out := map[string]reach{}
		for _, h := range hs {
			if rampartadmission.IsProbe(h.Name) {
				continue
			}
			r := reach{Name: h.Name, URL: h.ClientConfig.URL, CABundle: h.ClientConfig.CABundle, Rules: h.Rules,
				NS: h.NamespaceSelector, Obj: h.ObjectSelector, FailurePolicy: h.FailurePolicy, Conditions: h.MatchConditions, Timeout: h.TimeoutSeconds}
			if s := h.ClientConfig.Service; s != nil {
				r.Service = &admissionregistrationv1.ServiceReference{Namespace: s.Namespace, Name: s.Name, Path: s.Path, Port: s.Port}
			}
			out[h.Name] = r
		}
		return out
	}
	return equality.Semantic.DeepEqual(key(a), key(b))
}

func encodeMarks(m map[string]time.Time) string {
	if len(m) == 0 {
		return ""
	}
	out := map[string]string{}
	for k, t := range m {
		out[k] = t.UTC().Format(time.RFC3339Nano)
	}
	b, _ := json.Marshal(out)
	return string(b)
}

// errStale is a write lost to another replica's: read again.
var errStale = errors.New("webhook configuration changed meanwhile")

// write registers the configuration this replica wants merged with what
// is live, if it differs, and returns the token of the configuration now
// live. It retries when another replica wrote meanwhile.
func (r *registrar) write(ctx context.Context, force bool) (string, error) {
	for attempt := 0; ; attempt++ {
		token, err := r.writeOnce(ctx, force)
		if !errors.Is(err, errStale) || attempt >= 20 {
			return token, err
		}
	}
}

func (r *registrar) writeOnce(ctx context.Context, force bool) (string, error) {
	now := time.Now()
	live := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := r.client.Get(ctx, client.ObjectKey{Name: rampartadmission.ValidatingConfigName}, live); apierrors.IsNotFound(err) {
		live = nil
	} else if err != nil {
		return "", err
	}
	reg, own := r.desired(ctx, now)
	want, marks := mergeLive(reg, own, live, now)
	if live != nil && !force && sameReach(live.Webhooks, want.Webhooks) && live.Annotations[pendingAnnotation] == encodeMarks(marks) &&
		live.Annotations[tokenAnnotation] != "" {
		return live.Annotations[tokenAnnotation], nil
	}
	reg.Token = rampartadmission.NewToken()
	tokened := rampartadmission.ValidatingConfig(reg)
	for _, h := range tokened.Webhooks {
		if rampartadmission.IsProbe(h.Name) {
			want.Webhooks = append(want.Webhooks, h)
		}
	}
	want.Annotations = map[string]string{tokenAnnotation: reg.Token}
	if m := encodeMarks(marks); m != "" {
		want.Annotations[pendingAnnotation] = m
	}
	if live != nil {
		want.ResourceVersion = live.ResourceVersion
	}
	if err := rampartadmission.Register(ctx, r.client, reg, want); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
			return "", errStale
		}
		return "", err
	}
	r.log.V(1).Info("webhook configuration registered", "policies", len(reg.Policies), "scaleTargets", len(reg.ScaleTargets), "pending", len(marks))
	return reg.Token, nil
}

// desired is what this replica's caches and own pending coverage make,
// and the marks of that pending coverage. Pending coverage the caches now
// hold, or that expired, is forgotten.
func (r *registrar) desired(ctx context.Context, now time.Time) (rampartadmission.Registration, map[string]time.Time) {
	reg := r.fromCaches(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pending = slices.DeleteFunc(r.pending, func(p pending) bool { return !p.until.After(now) || caughtUp(p, reg) })
	own := map[string]time.Time{}
	targets := func(ps []v1alpha1.ProtectionPolicy) []string { return r.views.ScaleTargets.Targets(ps) }
	for _, p := range r.pending {
		for _, k := range pendingMarks(reg, p, targets) {
			own[k] = p.until
		}
	}
	merged := withPending(reg, r.pending)
	merged.ScaleTargets = append(merged.ScaleTargets, r.views.ScaleTargets.Targets(pendingPolicies(r.pending))...)
	slices.Sort(merged.ScaleTargets)
	merged.ScaleTargets = slices.Compact(merged.ScaleTargets)
	return merged, own
}

func pendingPolicies(ps []pending) []v1alpha1.ProtectionPolicy {
	var out []v1alpha1.ProtectionPolicy
	for _, p := range ps {
		if p.policy != nil {
			out = append(out, *p.policy)
		}
	}
	return out
}

// Ensure puts the coverage p brings in force before it returns: it
// registers it with what is already registered, and waits until every API
// server enforces the result. Admission handlers call it before admitting
// a request that creates a protection.
func (r *registrar) Ensure(ctx context.Context, p pending) error {
	// Answer inside the webhook's timeout, with a message of our own.
	ctx, cancel := context.WithTimeout(ctx, rampartadmission.DefaultBarrierTimeout+time.Second)
	defer cancel()
	p.until = time.Now().Add(pendingFor)
	r.mu.Lock()
	r.pending = append(r.pending, p)
	r.mu.Unlock()
	return r.Sync(ctx)
}

// Sync registers what this replica knows now and waits until every API
// server enforces it.
func (r *registrar) Sync(ctx context.Context) error {
	r.writeMu.Lock()
	token, err := r.write(ctx, false)
	r.writeMu.Unlock()
	if err != nil {
		return err
	}
	return r.barrier.Wait(ctx, token)
}

// The registrar is the admission handlers' InForce.
var _ rampartadmission.InForce = (*registrar)(nil)

// BudgetNamespace puts the budget webhooks in force for every pod of ns
// (the admission of a PodUnavailableBudget waits for it).
func (r *registrar) BudgetNamespace(ctx context.Context, ns string) error {
	return r.Ensure(ctx, pending{budgetNamespace: ns})
}

// addNamespace is namespaces with ns, sorted, without changing namespaces.
func addNamespace(namespaces []string, ns string) []string {
	if slices.Contains(namespaces, ns) {
		return namespaces
	}
	out := append(slices.Clone(namespaces), ns)
	slices.Sort(out)
	return out
}

func (r *registrar) ScaleTarget(ctx context.Context, target string) error {
	return r.Ensure(ctx, pending{scaleTarget: target})
}

func (r *registrar) Policy(ctx context.Context, p *v1alpha1.ProtectionPolicy) error {
	if policy.Guard(p) != "" {
		r.mu.Lock()
		r.pending = append(r.pending, pending{scaleWidening: p, until: time.Now().Add(pendingFor)})
		r.mu.Unlock()
	}
	return r.Ensure(ctx, pending{policy: p})
}

func (r *registrar) Window(ctx context.Context, w *v1alpha1.ChangeWindow) error {
	return r.Ensure(ctx, pending{window: w})
}

func (r *registrar) FlowControl(ctx context.Context, f *v1alpha1.DeletionFlowControl) error {
	return r.Ensure(ctx, pending{flowControl: f})
}

// liveToken reads the token of the configuration live now.
func liveToken(c client.Client) func(context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		live := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		if err := c.Get(ctx, client.ObjectKey{Name: rampartadmission.ValidatingConfigName}, live); err != nil {
			return "", err
		}
		return live.Annotations[tokenAnnotation], nil
	}
}
