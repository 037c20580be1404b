package registrar

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rampart-io/rampart/api/v1alpha1"
	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
	"github.com/rampart-io/rampart/internal/protection/compiled"
	"github.com/rampart-io/rampart/internal/protection/policy"
)

// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingadmissionpolicies;validatingadmissionpolicybindings,verbs=get;list;create;patch;delete

// What the manager applies of the compiled policies is labelled so, apart
// from what a user applied from `rampart export policies`, which it never
// touches.
const (
	labelAppliedBy = "rampart.io/applied-by"
	appliedBy      = "manager"
	// probeName is the compiled probe: a policy and a binding that deny
	// only the dry-run creation of one ConfigMap in Rampart's namespace.
	probeName = "probe.compiled.rampart.io"
	// ProbeDenial is its message.
	ProbeDenial = "rampart probe: this API server has loaded Rampart's compiled policies"
	// inForceAnnotation, on the probe policy, records the versions (by
	// hash, per source) that every API server was seen to enforce.
	inForceAnnotation = "rampart.io/in-force"
	// sourceLabels is the key of the label rules in inForceAnnotation.
	sourceLabels = compiled.SourceLabels
)

// Compiled keeps Rampart's static rules compiled to
// ValidatingAdmissionPolicies applied: those of the labels and those of
// every enforced ProtectionPolicy. It records when every API server
// enforces them, so that the Registrar narrows the label webhooks to what
// still needs Rampart (the API server then judges Always and the replicas
// of labelled built-in workloads itself, with no webhook call) and each
// policy's Ready condition says which engine enforces it. Whatever is in
// force holds while Rampart is down.
//
// The API server loads policies from a watch, asynchronously, as it does
// webhook configurations: a policy written is not yet one enforced. So the
// webhooks stay wide until the probe proves the policies loaded: after the
// policies, the probe policy and binding are written with fresh tokens,
// and the dry-run creation of the probe's ConfigMap is refused by an API
// server only once its policy and binding watches have delivered both, and
// so everything written before them.
//
// The explicit-replicas label on custom resources with a scale
// subresource is compiled too (one policy per CRD, kept in step with the
// CRDs), but the label webhook is never narrowed for them: it keeps
// judging their replicas (belt and braces), and the compiled policy holds
// them while Rampart is down.
//
// A ProtectionPolicy's webhooks stay wide: the webhook holds the policy
// from the moment the API accepts it (the compiled policy only once every
// API server has loaded it), counts its denials and records Events. Its
// compiled policies' bindings are owned by it, so that the garbage
// collector ends them with it; the policies themselves are owned like the
// webhook configurations, so that uninstalling Rampart ends them too.
type Compiled struct {
	Client client.Client
	// Cache lists the ProtectionPolicies for PolicyState, which runs on
	// every status reconcile of every policy: the manager's informer
	// cache, so that a burst of policy changes does not become a LIST per
	// policy per change. Nil: Client. The keeper's own rounds list
	// through Client, fresh.
	Cache   client.Reader
	Servers func(ctx context.Context) ([]kubernetes.Interface, error)
	// Namespace is Rampart's, where the probe's ConfigMap would be.
	Namespace string
	Options   compiled.Options
	// CRDs are the cluster's CRDs, and whether the cache holding them has
	// synced: the custom resources with a scale subresource are compiled
	// (Options.Scaled). Nil: none.
	CRDs func() ([]apiextensionsv1.CustomResourceDefinition, bool)
	// Enabled false removes what the manager applied, after widening the
	// webhooks again.
	Enabled bool
	// Registrar is told when the record changes, and widens the webhooks
	// (and waits for every API server) before anything is removed.
	Registrar *Registrar
	Owner     func() *metav1.OwnerReference
	Log       logr.Logger

	kickOnce sync.Once
	kick     chan struct{}
	// leftLogged is what reportLeft last logged.
	leftLogged string
}

// NeedLeaderElection: one replica applies.
func (c *Compiled) NeedLeaderElection() bool { return true }

// Poke has the keeper look again now (a ProtectionPolicy changed) rather
// than at its next round.
func (c *Compiled) Poke() {
	select {
	case c.kicks() <- struct{}{}:
	default:
	}
}

// kicks is made once: Poke (from the policy informer) and Start may call
// it first, concurrently.
func (c *Compiled) kicks() chan struct{} {
	c.kickOnce.Do(func() { c.kick = make(chan struct{}, 1) })
	return c.kick
}

// Start keeps the compiled policies in step until ctx ends.
func (c *Compiled) Start(ctx context.Context) error {
	kick := c.kicks()
	// Compiled from a cache still filling, the custom resources' policies
	// would be removed and made again at every start.
	if err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
		_, synced := c.options()
		return synced, nil
	}); err != nil {
		return nil
	}
	for {
		if err := c.sync(ctx); err != nil && ctx.Err() == nil {
			c.Log.Error(err, "keeping the compiled policies; retrying")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-kick:
		case <-time.After(10 * time.Second):
		}
	}
}

// PolicyKey is a ProtectionPolicy's key in the in-force record.
func PolicyKey(name string) string { return "policy/" + name }

// CRDKey is the key in the in-force record of the explicit-replicas
// label's compiled policy for the custom resource of a CRD.
func CRDKey(crd string) string { return "crd/" + crd }

// options are the compiler's options with the custom resources of the
// CRDs now, and whether the CRD cache has synced.
func (c *Compiled) options() (compiled.Options, bool) {
	o := c.Options
	if c.CRDs == nil {
		return o, true
	}
	crds, synced := c.CRDs()
	o.Scaled, _ = compiled.ScaledResources(crds)
	return o, synced
}

// leftToTheWebhook logs the CRDs with a scale subresource whose replicas
// are not compiled, and why.
func (c *Compiled) leftToTheWebhook() {
	if c.CRDs == nil {
		return
	}
	crds, _ := c.CRDs()
	_, left := compiled.ScaledResources(crds)
	for _, l := range left {
		c.Log.Info("custom resources' replicas left to the webhook (not compiled)", "crd", l.CRD, "why", l.Why)
	}
}

// reportLeft logs the compiled policies left to the webhooks because of
// their names (each policy's Ready condition says so too), when they
// change: at every round they would repeat.
func (c *Compiled) reportLeft(left map[string][]compiled.Left) {
	var all []compiled.Left
	for _, p := range slices.Sorted(maps.Keys(left)) {
		all = append(all, left[p]...)
	}
	if now := fmt.Sprint(all); now != c.leftLogged {
		c.leftLogged = now
		for _, l := range all {
			c.Log.Info("compiled policy left to the webhooks (not applied)", "protectionPolicy", l.Policy, "name", l.Name, "why", l.Why)
		}
	}
}

// compilation is what the manager compiles: every policy to apply, and by
// source the version to record, what each ProtectionPolicy keeps and what
// of it is left to the webhooks.
type compilation struct {
	all    []compiled.Policy
	record map[string]string
	// kept and left are by ProtectionPolicy name.
	kept map[string][]compiled.Policy
	left map[string][]compiled.Left
}

// compile compiles the label rules and every ProtectionPolicy's, with
// override in place of the listed policy of its name (the version a
// caller holds). The label rules take their names first, then the
// policies from the oldest: a policy created later never takes a name
// from one in force (compiled.Names).
func (c *Compiled) compile(ctx context.Context, from client.Reader, override *v1alpha1.ProtectionPolicy) (*compilation, error) {
	out := &compilation{record: map[string]string{}, kept: map[string][]compiled.Policy{}, left: map[string][]compiled.Left{}}
	if !c.Enabled {
		return out, nil
	}
	o, _ := c.options()
	names := compiled.Names{}
	labels, _ := names.Claim("", compiled.LabelRules(o))
	out.all = append(out.all, labels...)
	out.record[sourceLabels] = Hash(labels)
	// Recorded apart from the label rules: a CRD coming or going changes
	// only its own entry, and never widens the label webhooks.
	for i, cp := range compiled.ScaledLabelRules(o) {
		kept, _ := names.Claim("", []compiled.Policy{cp})
		out.all = append(out.all, kept...)
		out.record[CRDKey(o.Scaled[i].CRD)] = Hash(kept)
	}
	var list v1alpha1.ProtectionPolicyList
	if err := from.List(ctx, &list); err != nil {
		return nil, err
	}
	policies := list.Items
	if override != nil {
		i := slices.IndexFunc(policies, func(p v1alpha1.ProtectionPolicy) bool { return p.Name == override.Name })
		if i < 0 {
			policies = append(policies, *override)
		} else {
			policies[i] = *override
		}
	}
	slices.SortStableFunc(policies, func(a, b v1alpha1.ProtectionPolicy) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	for i := range policies {
		p := &policies[i]
		ps, left := names.Claim(p.Name, PolicyRules(p, o))
		out.left[p.Name] = left
		if len(ps) == 0 {
			continue
		}
		// The API server enforces a policy only with its binding: the
		// binding is owned by the ProtectionPolicy (deleting it ends the
		// rule, manager running or not), the policy like the webhook
		// configurations (uninstalling Rampart ends it, though the CRDs
		// and so the ProtectionPolicies stay). Owned by the
		// ProtectionPolicy alone, it outlived helm uninstall.
		owner := metav1.NewControllerRef(p, v1alpha1.GroupVersion.WithKind("ProtectionPolicy"))
		owner.BlockOwnerDeletion = ptr.To(false)
		for _, cp := range ps {
			cp.Binding.SetOwnerReferences([]metav1.OwnerReference{*owner})
		}
		out.all = append(out.all, ps...)
		out.kept[p.Name] = ps
		out.record[PolicyKey(p.Name)] = Hash(ps)
	}
	return out, nil
}

// PolicyRules is what the manager compiles of a ProtectionPolicy: its
// static rules when it is enforced. A Warn-mode policy is left to its
// webhook, which warns already (with both, every warning would show
// twice).
func PolicyRules(p *v1alpha1.ProtectionPolicy, o compiled.Options) []compiled.Policy {
	if !policy.Enforced(p) || p.DeletionTimestamp != nil {
		return nil
	}
	return compiled.FromPolicy(p, o)
}

// PolicyState says how a ProtectionPolicy's static rules stand.
func (c *Compiled) PolicyState(ctx context.Context, p *v1alpha1.ProtectionPolicy) (rampartadmission.StaticRules, error) {
	if o, _ := c.options(); !c.Enabled || len(PolicyRules(p, o)) == 0 {
		return rampartadmission.StaticRules{}, nil
	}
	// Whether its names are free depends on every other source.
	from := c.Cache
	if from == nil {
		from = c.Client
	}
	all, err := c.compile(ctx, from, p)
	if err != nil {
		return rampartadmission.StaticRules{}, err
	}
	st := rampartadmission.StaticRules{Left: all.left[p.Name]}
	ps := all.kept[p.Name]
	if len(ps) == 0 {
		return st, nil
	}
	for _, cp := range ps {
		st.Names = append(st.Names, cp.Policy.Name)
	}
	record, err := readInForce(ctx, c.Client)
	if err != nil {
		return rampartadmission.StaticRules{}, err
	}
	st.InForce = record[PolicyKey(p.Name)] == Hash(ps)
	return st, nil
}

func (c *Compiled) sync(ctx context.Context) error {
	compiledNow, err := c.compile(ctx, c.Client, nil)
	if err != nil {
		return err
	}
	want, wantRecord := compiledNow.all, compiledNow.record
	c.reportLeft(compiledNow.left)
	hash := wantRecord[sourceLabels]
	record, err := readInForce(ctx, c.Client)
	if err != nil {
		return err
	}
	drifted, labelsDrifted, err := c.drifted(ctx, want)
	if err != nil {
		return err
	}
	if maps.Equal(record, wantRecord) && !drifted {
		return nil
	}
	// The label webhooks are narrow while record[sourceLabels] is set:
	// widen them first, on every API server, before the policies they
	// stand in for change (a ProtectionPolicy's compiled policies change
	// behind its webhooks, which stay wide).
	if record[sourceLabels] != "" && (record[sourceLabels] != hash || labelsDrifted) {
		delete(record, sourceLabels)
		if err := c.record(ctx, record); err != nil {
			return err
		}
		if err := c.Registrar.Sync(ctx); err != nil {
			return fmt.Errorf("widening the label webhooks: %w", err)
		}
	}
	if err := c.apply(ctx, want); err != nil {
		return err
	}
	if !c.Enabled {
		return nil
	}
	ptoken, btoken := rampartadmission.NewToken(), rampartadmission.NewToken()
	for _, obj := range probe(c.Namespace, ptoken, btoken) {
		if err := c.applyOne(ctx, obj); err != nil {
			return err
		}
	}
	if err := c.prove(ctx, ptoken, btoken); err != nil {
		return err
	}
	if err := c.record(ctx, wantRecord); err != nil {
		return err
	}
	c.Log.Info("compiled policies in force on every API server", "labels", hash, "sources", len(wantRecord), "policies", len(want))
	c.leftToTheWebhook()
	c.Registrar.Poke()
	return nil
}

// Hash names one version of a set of compiled policies.
func Hash(ps []compiled.Policy) string {
	if len(ps) == 0 {
		return ""
	}
	h := sha256.New()
	for _, p := range ps {
		_ = json.NewEncoder(h).Encode([]any{p.Policy.Name, p.Policy.Spec, p.Binding.Spec})
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// drifted says whether what the manager applied differs from want (a
// policy deleted or edited by hand, one not applied yet, or one no longer
// wanted), and whether the label rules' policies for the built-in kinds
// are among those that differ: only those are behind the narrowed label
// webhooks (those of custom resources are not).
func (c *Compiled) drifted(ctx context.Context, want []compiled.Policy) (anything, labels bool, err error) {
	var have admissionregistrationv1.ValidatingAdmissionPolicyList
	if err := c.Client.List(ctx, &have, client.MatchingLabels{labelAppliedBy: appliedBy}); err != nil {
		return false, false, err
	}
	var bindings admissionregistrationv1.ValidatingAdmissionPolicyBindingList
	if err := c.Client.List(ctx, &bindings, client.MatchingLabels{labelAppliedBy: appliedBy}); err != nil {
		return false, false, err
	}
	type live struct{ spec, name string }
	specs := map[string]live{}
	for _, p := range have.Items {
		if p.Name != probeName {
			specs["p/"+p.Name] = live{specJSON(p.Spec), p.Name}
		}
	}
	for _, b := range bindings.Items {
		if b.Name != probeName {
			specs["b/"+b.Name] = live{specJSON(b.Spec), b.Name}
		}
	}
	differs := func(name string) {
		anything = true
		labels = labels || name == compiled.LabelDeletionName || name == compiled.LabelReplicasName
	}
	for _, p := range want {
		// The API server defaults some fields: compare what was asked for
		// field by field through a round trip of the live object.
		if !covers(specs["p/"+p.Policy.Name].spec, p.Policy.Spec) || !covers(specs["b/"+p.Binding.Name].spec, p.Binding.Spec) {
			differs(p.Policy.Name)
		}
		delete(specs, "p/"+p.Policy.Name)
		delete(specs, "b/"+p.Binding.Name)
	}
	for _, l := range specs {
		differs(l.name)
	}
	return anything, labels, nil
}

func specJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// covers says whether the live spec (JSON) holds every field of want.
func covers(live string, want any) bool {
	if live == "" {
		return false
	}
	var l, w map[string]any
	if json.Unmarshal([]byte(live), &l) != nil || json.Unmarshal([]byte(specJSON(want)), &w) != nil {
		return false
	}
	return subset(w, l)
}

func subset(want, have any) bool {
	switch w := want.(type) {
	case map[string]any:
		h, ok := have.(map[string]any)
		if !ok {
			return false
		}
		for k, v := range w {
			if !subset(v, h[k]) {
				return false
			}
		}
		return true
	case []any:
		h, ok := have.([]any)
		if !ok || len(h) != len(w) {
			return false
		}
		for i := range w {
			if !subset(w[i], h[i]) {
				return false
			}
		}
		return true
	default:
		return specJSON(want) == specJSON(have)
	}
}

// apply makes what the manager applied exactly want (server-side apply,
// owned like the webhook configuration); the probe goes with the rest when
// nothing is wanted.
func (c *Compiled) apply(ctx context.Context, want []compiled.Policy) error {
	keep := map[string]bool{}
	for _, p := range want {
		for _, obj := range []client.Object{p.Policy, p.Binding} {
			if err := c.applyOne(ctx, obj); err != nil {
				return err
			}
		}
		keep[p.Policy.Name] = true
	}
	if len(want) > 0 {
		keep[probeName] = true
	}
	var policies admissionregistrationv1.ValidatingAdmissionPolicyList
	if err := c.Client.List(ctx, &policies, client.MatchingLabels{labelAppliedBy: appliedBy}); err != nil {
		return err
	}
	var bindings admissionregistrationv1.ValidatingAdmissionPolicyBindingList
	if err := c.Client.List(ctx, &bindings, client.MatchingLabels{labelAppliedBy: appliedBy}); err != nil {
		return err
	}
	var stale []client.Object
	for i := range bindings.Items {
		if !keep[bindings.Items[i].Name] {
			stale = append(stale, &bindings.Items[i])
		}
	}
	for i := range policies.Items {
		if !keep[policies.Items[i].Name] {
			stale = append(stale, &policies.Items[i])
		}
	}
	for _, obj := range stale {
		if err := c.Client.Delete(ctx, obj); client.IgnoreNotFound(err) != nil {
			return err
		}
	}
	return nil
}

func (c *Compiled) applyOne(ctx context.Context, obj client.Object) error {
	obj = obj.DeepCopyObject().(client.Object)
	labels := obj.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[labelAppliedBy] = appliedBy
	obj.SetLabels(labels)
	if c.Owner != nil && len(obj.GetOwnerReferences()) == 0 {
		if owner := c.Owner(); owner != nil {
			obj.SetOwnerReferences([]metav1.OwnerReference{*owner})
		}
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return err
	}
	un := &unstructured.Unstructured{Object: u}
	unstructured.RemoveNestedField(un.Object, "metadata", "creationTimestamp")
	unstructured.RemoveNestedField(un.Object, "status")
	return c.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(un), client.FieldOwner("rampart-manager"), client.ForceOwnership)
}

// probe is the probe policy and binding for the tokens: the policy's
// expression holds one, the binding's selector the other.
func probe(namespace, ptoken, btoken string) []client.Object {
	meta := metav1.ObjectMeta{Name: probeName, Labels: map[string]string{compiled.LabelManagedBy: compiled.ManagedBy}}
	typeMeta := func(kind string) metav1.TypeMeta {
		return metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: kind}
	}
	p := &admissionregistrationv1.ValidatingAdmissionPolicy{
		TypeMeta: typeMeta("ValidatingAdmissionPolicy"), ObjectMeta: meta,
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Ignore),
			MatchConstraints: &admissionregistrationv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: namespace}},
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"},
						Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
				}}},
			},
			MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "dry-run", Expression: "request.dryRun == true"}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: fmt.Sprintf("object.metadata.name != %q", probeObject(ptoken)),
				Message:    ProbeDenial,
			}},
		},
	}
	b := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		TypeMeta: typeMeta("ValidatingAdmissionPolicyBinding"), ObjectMeta: *meta.DeepCopy(),
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        probeName,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{
				ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"rampart.io/probe": btoken}},
			},
		},
	}
	return []client.Object{p, b}
}

func probeObject(ptoken string) string { return "rampart-probe-compiled-" + ptoken }

// prove waits until every API server refuses the probe's dry run.
func (c *Compiled) prove(ctx context.Context, ptoken, btoken string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	servers, err := c.Servers(ctx)
	if err != nil {
		return err
	}
	for _, cs := range servers {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: probeObject(ptoken), Namespace: c.Namespace,
			Labels: map[string]string{"rampart.io/probe": btoken}}}
		for delay := 5 * time.Millisecond; ; delay = min(2*delay, time.Second) {
			_, err := cs.CoreV1().ConfigMaps(c.Namespace).Create(ctx, cm, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err != nil && strings.Contains(err.Error(), ProbeDenial) {
				break
			}
			select {
			case <-ctx.Done():
				return errors.New("an API server has not loaded the compiled policies within a minute")
			case <-time.After(delay):
			}
		}
	}
	return nil
}

// record writes what is in force on the probe policy.
func (c *Compiled) record(ctx context.Context, inForce map[string]string) error {
	raw, _ := json.Marshal(inForce)
	p := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	err := c.Client.Get(ctx, client.ObjectKey{Name: probeName}, p)
	if apierrors.IsNotFound(err) {
		return nil // nothing recorded, nothing narrowed
	}
	if err != nil {
		return err
	}
	patch := client.MergeFrom(p.DeepCopy())
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[inForceAnnotation] = string(raw)
	return c.Client.Patch(ctx, p, patch)
}

// InForce is the record on the probe policy p: each source's version
// (Hash) that every API server was seen to enforce, by key (sourceLabels,
// PolicyKey, CRDKey). For tests and tools that must act as soon as a
// compiled policy is loaded.
func InForce(p *admissionregistrationv1.ValidatingAdmissionPolicy) map[string]string {
	out := map[string]string{}
	if raw := p.Annotations[inForceAnnotation]; raw != "" {
		if err := json.Unmarshal([]byte(raw), &out); err != nil {
			return map[string]string{} // unreadable: nothing in force
		}
	}
	return out
}

// ProbePolicyName is the probe policy's name, which holds the record.
const ProbePolicyName = probeName

// readInForce reads the record; none means nothing is in force.
func readInForce(ctx context.Context, c client.Reader) (map[string]string, error) {
	p := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	err := c.Get(ctx, client.ObjectKey{Name: probeName}, p)
	if apierrors.IsNotFound(err) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, err
	}
	return InForce(p), nil
}
