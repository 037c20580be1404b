// Package compiled turns Rampart's static rules into ValidatingAdmissionPolicies
// and their bindings, so that the API server enforces them itself, in CEL,
// with no webhook call and while Rampart is down.
//
// A rule is static when the request alone decides it: the
// rampart.io/protection=Always label or a policy's protection: Always on a
// DELETE, and explicit replicas on an update of a workload's object (the
// new replicas and the rampart.io/confirm-replicas annotation are both in
// the request): the built-in workloads, and the custom resources whose CRD
// has a scale subresource, their replicas read where the CRD says
// (Options.Scaled, one policy per CRD). What needs the cluster's state
// stays in the webhooks: Cascading (it counts dependents), the scale
// subresource (its requests carry no labels), budgets, flow control and
// change windows.
//
// Each compiled policy says the same as the Go decision in
// internal/protection/deletion and internal/protection/replicas, message
// included; the tests run both decision tables through both engines.
package compiled

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/protection/policy"
)

// Labels on every object this package makes: `kubectl get
// validatingadmissionpolicies -l app.kubernetes.io/managed-by=rampart`.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedBy      = "rampart"
	// LabelSource says what a compiled policy was compiled from: "labels"
	// or the ProtectionPolicy's name.
	LabelSource = "rampart.io/compiled-from"
	// SourceLabels is LabelSource's value for the label rules.
	SourceLabels = "labels"
)

// The names of the label rules' policies: the names of the webhooks they
// stand in for, so a denial reads the same from either engine.
const (
	LabelDeletionName = "deletion.rampart.io"
	LabelReplicasName = "replicas.rampart.io"
)

// Options are what the compiler needs besides the policies.
type Options struct {
	// OwnNamespace is Rampart's namespace, which no rule reaches (as with
	// the webhooks). Empty: none is left out.
	OwnNamespace string
	// ReplicasExempt are requesters the explicit-replicas label never
	// denies (the manager's --replicas-exempt-* flags).
	ReplicasExempt v1alpha1.Subjects
	// Scaled are the custom resources whose explicit replicas are
	// compiled (ScaledResources reads them from CRDs).
	Scaled []ScaledResource
}

// Policy is one compiled ValidatingAdmissionPolicy with its binding (of
// the same name).
type Policy struct {
	Policy  *admissionregistrationv1.ValidatingAdmissionPolicy
	Binding *admissionregistrationv1.ValidatingAdmissionPolicyBinding
}

// Workloads are the built-in kinds whose spec.replicas a compiled policy
// guards (a custom resource's replicas path is in its CRD: state).
var Workloads = []schema.GroupResource{
	{Group: "apps", Resource: "deployments"},
	{Group: "apps", Resource: "replicasets"},
	{Group: "apps", Resource: "statefulsets"},
	{Resource: "replicationcontrollers"},
}

// Compile is every static rule: the label rules (built-in kinds, then
// custom resources), then each policy's, in the order given; and those
// left to the webhooks for their names (Names.Claim).
func Compile(policies []v1alpha1.ProtectionPolicy, o Options) ([]Policy, []Left) {
	names := Names{}
	out, left := names.Claim("", append(LabelRules(o), ScaledLabelRules(o)...))
	for i := range policies {
		kept, l := names.Claim(policies[i].Name, FromPolicy(&policies[i], o))
		out, left = append(out, kept...), append(left, l...)
	}
	return out, left
}

// LabelRules compiles rampart.io/protection=Always and
// rampart.io/explicit-replicas=true on the built-in workloads: the rules
// the manager narrows the label webhooks for once they are in force; and
// rampart.io/explicit-deletion=true on pods the node guard saved
// (SavedPods), which has no webhook.
// ScaledLabelRules are the explicit-replicas label on custom resources.
func LabelRules(o Options) []Policy {
	del := newPolicy(LabelDeletionName, SourceLabels, deleteRules([]v1alpha1.ResourceRule{{APIGroups: []string{"*"}, Resources: []string{"*"}}}), o.notOwn(nil))
	del.Policy.Spec.MatchConstraints.ObjectSelector = labelIn(v1alpha1.LabelProtection, string(v1alpha1.ProtectionAlways))
	del.Policy.Spec.Validations = []admissionregistrationv1.Validation{deletionValidation(labelSource(v1alpha1.LabelProtection))}

	return []Policy{del, labelReplicas(LabelReplicasName, Workloads, workloadReplicas, o), SavedPods(o)}
}

// ScaledLabelRules compiles rampart.io/explicit-replicas=true on each
// custom resource of o.Scaled: one policy per CRD (LabelScaledName).
func ScaledLabelRules(o Options) []Policy {
	var out []Policy
	for _, s := range o.Scaled {
		out = append(out, labelReplicas(LabelScaledName(s.CRD), []schema.GroupResource{s.Resource}, s.path(), o))
	}
	return out
}

// labelReplicas is the explicit-replicas label on grs, whose replicas are
// at path.
func labelReplicas(name string, grs []schema.GroupResource, path replicasPath, o Options) Policy {
	rep := newPolicy(name, SourceLabels, replicaRules(grs), o.notOwn(nil))
	// The API server matches an update's objectSelector against the
	// object before and after: removing the label in the same write does
	// not escape it, as with the webhook.
	rep.Policy.Spec.MatchConstraints.ObjectSelector = labelIn(v1alpha1.LabelExplicitReplicas, "true")
	rep.Policy.Spec.MatchConditions = append([]admissionregistrationv1.MatchCondition{path.changes()}, exemptCondition(o.ReplicasExempt)...)
	rep.Policy.Spec.Variables = append(rep.Policy.Spec.Variables, path.variables()...)
	rep.Policy.Spec.Validations = []admissionregistrationv1.Validation{replicasValidation(v1alpha1.GuardAll, labelSource(v1alpha1.LabelExplicitReplicas))}
	return rep
}

// FromPolicy compiles what of a ProtectionPolicy is static: protection
// Always, and explicit replicas of the built-in workloads and of the
// custom resources of o.Scaled it covers (one compiled policy for the
// built-in ones, one per CRD). Names.Claim then leaves out those whose
// names the API server would not take (ScaledReplicasName of a long
// policy and CRD) or another source holds.
func FromPolicy(p *v1alpha1.ProtectionPolicy, o Options) []Policy {
	var out []Policy
	if p.Spec.Protection == v1alpha1.ProtectionAlways {
		del := newPolicy(DeletionName(p.Name), p.Name, deleteRules(p.Spec.Resources), o.notOwn(p.Spec.NamespaceSelector))
		del.Policy.Spec.MatchConstraints.ObjectSelector = orEverything(p.Spec.ObjectSelector)
		del.Policy.Spec.MatchConditions = exemptCondition(p.Spec.Exempt)
		del.Policy.Spec.Validations = []admissionregistrationv1.Validation{deletionValidation(policySource(p.Name))}
		out = append(out, del.mode(p))
	}
	if guard := policy.Guard(p); guard != "" {
		var covered []schema.GroupResource
		for _, gr := range Workloads {
			if policy.CoversResource(p, gr) {
				covered = append(covered, gr)
			}
		}
		if len(covered) > 0 {
			out = append(out, policyReplicas(ReplicasName(p.Name), p, covered, workloadReplicas, guard, o))
		}
		for _, s := range o.Scaled {
			if policy.CoversResource(p, s.Resource) {
				out = append(out, policyReplicas(ScaledReplicasName(p.Name, s.CRD), p, []schema.GroupResource{s.Resource}, s.path(), guard, o))
			}
		}
	}
	return out
}

// policyReplicas is a policy's explicit replicas on grs, whose replicas
// are at path.
func policyReplicas(name string, p *v1alpha1.ProtectionPolicy, grs []schema.GroupResource, path replicasPath, guard v1alpha1.ReplicaGuard, o Options) Policy {
	rep := newPolicy(name, p.Name, replicaRules(grs), o.notOwn(p.Spec.NamespaceSelector))
	rep.Policy.Spec.MatchConstraints.ObjectSelector = orEverything(p.Spec.ObjectSelector)
	rep.Policy.Spec.MatchConditions = append([]admissionregistrationv1.MatchCondition{path.changes()}, exemptCondition(p.Spec.Exempt)...)
	if sel := selectorCondition(p.Spec.ObjectSelector, "oldObject"); sel != "" {
		// The webhook judges an update by the policy that selected
		// the object before the write; the API server's selector
		// matches before or after.
		rep.Policy.Spec.MatchConditions = append(rep.Policy.Spec.MatchConditions,
			admissionregistrationv1.MatchCondition{Name: "selected-before-the-write", Expression: sel})
	}
	rep.Policy.Spec.Variables = append(rep.Policy.Spec.Variables, path.variables()...)
	rep.Policy.Spec.Validations = []admissionregistrationv1.Validation{replicasValidation(guard, policySource(p.Name))}
	return rep.mode(p)
}

func newPolicy(name, source string, rules []admissionregistrationv1.NamedRuleWithOperations, nsSel *metav1.LabelSelector) Policy {
	meta := metav1.ObjectMeta{Name: name, Labels: map[string]string{LabelManagedBy: ManagedBy, LabelSource: source}}
	typeMeta := func(kind string) metav1.TypeMeta {
		return metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: kind}
	}
	return Policy{
		Policy: &admissionregistrationv1.ValidatingAdmissionPolicy{
			TypeMeta:   typeMeta("ValidatingAdmissionPolicy"),
			ObjectMeta: meta,
			Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
				FailurePolicy: ptr.To(admissionregistrationv1.Fail),
				Variables:     messageVariables(),
				MatchConstraints: &admissionregistrationv1.MatchResources{
					NamespaceSelector: nsSel,
					ResourceRules:     rules,
					MatchPolicy:       ptr.To(admissionregistrationv1.Equivalent),
				},
			},
		},
		Binding: &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
			TypeMeta:   typeMeta("ValidatingAdmissionPolicyBinding"),
			ObjectMeta: *meta.DeepCopy(),
			Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
				PolicyName:        name,
				ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			},
		},
	}
}

// mode makes a Warn-mode policy's compiled policy warn, and never block
// (as its webhooks fail open).
func (c Policy) mode(p *v1alpha1.ProtectionPolicy) Policy {
	if !policy.Enforced(p) {
		c.Policy.Spec.FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
		c.Binding.Spec.ValidationActions = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Warn}
		for i := range c.Policy.Spec.Validations {
			v := &c.Policy.Spec.Validations[i]
			v.MessageExpression = `"rampart (Warn mode): " + ` + v.MessageExpression
		}
	}
	return c
}

func (o Options) notOwn(sel *metav1.LabelSelector) *metav1.LabelSelector {
	out := &metav1.LabelSelector{}
	if sel != nil {
		out = sel.DeepCopy()
	}
	if o.OwnNamespace != "" {
		out.MatchExpressions = append(out.MatchExpressions, metav1.LabelSelectorRequirement{
			Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpNotIn, Values: []string{o.OwnNamespace},
		})
	}
	return out
}

func orEverything(sel *metav1.LabelSelector) *metav1.LabelSelector {
	if sel == nil {
		return &metav1.LabelSelector{}
	}
	return sel.DeepCopy()
}

func labelIn(key, value string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: key, Operator: metav1.LabelSelectorOpIn, Values: []string{value},
	}}}
}

func deleteRules(resources []v1alpha1.ResourceRule) []admissionregistrationv1.NamedRuleWithOperations {
	out := make([]admissionregistrationv1.NamedRuleWithOperations, 0, len(resources))
	for _, r := range resources {
		out = append(out, namedRule(admissionregistrationv1.Delete, r.APIGroups, r.Resources))
	}
	return out
}

// replicaRules are updates of grs, grouped by API group.
func replicaRules(grs []schema.GroupResource) []admissionregistrationv1.NamedRuleWithOperations {
	var out []admissionregistrationv1.NamedRuleWithOperations
	for _, gr := range grs {
		i := slices.IndexFunc(out, func(r admissionregistrationv1.NamedRuleWithOperations) bool { return r.APIGroups[0] == gr.Group })
		if i < 0 {
			out = append(out, namedRule(admissionregistrationv1.Update, []string{gr.Group}, nil))
			i = len(out) - 1
		}
		out[i].Resources = append(out[i].Resources, gr.Resource)
	}
	return out
}

func namedRule(op admissionregistrationv1.OperationType, groups, resources []string) admissionregistrationv1.NamedRuleWithOperations {
	return admissionregistrationv1.NamedRuleWithOperations{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{op},
		Rule: admissionregistrationv1.Rule{
			APIGroups: slices.Clone(groups), APIVersions: []string{"*"}, Resources: slices.Clone(resources),
			Scope: ptr.To(admissionregistrationv1.AllScopes),
		},
	}}
}

// The CEL below builds the Go decisions' messages
// (protection.Object.Describe, Source.Lift, Object.Kubectl) from the
// request, with the variables of messageVariables.
const (
	celRef = "variables.resource"
	celNs  = "variables.kubectlNamespace"
	celObj = "variables.described"
)

// messageVariables name the object as the webhook's denials do: a core
// resource by its kind in lower case (its singular name in discovery),
// others by resource and group. A request about a Namespace carries the
// namespace's own name as its namespace: the object is not in it.
func messageVariables() []admissionregistrationv1.Variable {
	return []admissionregistrationv1.Variable{
		{Name: "resource", Expression: `request.resource.group == "" ? request.kind.kind.lowerAscii() : request.resource.resource + "." + request.resource.group`},
		// A DeleteCollection judges each item with the collection's
		// request: no name, and no namespace when it spans all of them.
		// The old object names it then. (An empty field is absent from
		// request: has() first, or the message fails to evaluate.)
		{Name: "name", Expression: `has(request.name) && request.name != "" ? request.name : oldObject != null && has(oldObject.metadata.name) ? oldObject.metadata.name : ""`},
		{Name: "objectNamespace", Expression: `request.resource.group == "" && request.resource.resource == "namespaces" ? "" : ` +
			`has(request.namespace) && request.namespace != "" ? request.namespace : oldObject != null && has(oldObject.metadata.namespace) ? oldObject.metadata.namespace : ""`},
		{Name: "described", Expression: `variables.resource + " \"" + variables.name + "\"" + (variables.objectNamespace == "" ? "" : " in namespace \"" + variables.objectNamespace + "\"")`},
		{Name: "kubectlNamespace", Expression: `variables.objectNamespace == "" ? "" : "-n " + variables.objectNamespace + " "`},
	}
}

// source is a rule's source as the messages name it: its words and how to
// lift it, in CEL.
type source struct{ name, lift string }

func labelSource(label string) source {
	return source{
		name: "label " + label,
		lift: `"If this is intended, remove the label first: kubectl label " + ` + celNs + ` + ` + celRef + ` + "/" + variables.name + " ` + label + `-"`,
	}
}

func policySource(name string) source {
	return source{
		name: fmt.Sprintf("ProtectionPolicy %q", name),
		lift: strconv.Quote("If this is intended, ask for an exemption in the policy or change it: kubectl edit protectionpolicy " + name),
	}
}

// deletionValidation denies every DELETE it is reached for, with
// deletion.Decide's message for protection Always.
func deletionValidation(s source) admissionregistrationv1.Validation {
	return admissionregistrationv1.Validation{
		Expression: "false",
		Reason:     ptr.To(metav1.StatusReasonForbidden),
		MessageExpression: celObj + ` + ` + strconv.Quote(fmt.Sprintf(" is protected by %s, which forbids deleting it (%s=%s). ",
			s.name, v1alpha1.LabelProtection, v1alpha1.ProtectionAlways)) + ` + ` + s.lift,
	}
}

// replicasPath is where a kind keeps its replicas: the field names from
// the object's root.
type replicasPath struct {
	fields []string
	// custom: a custom resource's, whose spec may be absent and whose
	// field may hold anything its schema lets through; a built-in
	// workload always has a spec, and an integer there.
	custom bool
}

// workloadReplicas is the built-in workloads' spec.replicas.
var workloadReplicas = replicasPath{fields: []string{"spec", "replicas"}}

// at is the replicas of obj (object, oldObject) in CEL, 1 when absent, as
// the webhook reads them (also when a custom resource's field holds no
// integer).
func (p replicasPath) at(obj string) string {
	field := obj + "." + strings.Join(p.fields, ".")
	if !p.custom {
		return "(has(" + field + ") ? " + field + " : 1)"
	}
	var present []string
	for i := range p.fields {
		present = append(present, "has("+obj+"."+strings.Join(p.fields[:i+1], ".")+")")
	}
	return "(" + strings.Join(present, " && ") + " && type(" + field + ") == int ? " + field + " : 1)"
}

// changes leaves out, before any validation or message runs, the writes
// that keep the replicas (most updates of a workload): the API server
// then converts the object once for the condition instead of once for
// each of its three passes (validations, messages, audit annotations).
// The validation admits them anyway.
func (p replicasPath) changes() admissionregistrationv1.MatchCondition {
	return admissionregistrationv1.MatchCondition{Name: "changes-replicas", Expression: p.at("oldObject") + " != " + p.at("object")}
}

func (p replicasPath) variables() []admissionregistrationv1.Variable {
	return []admissionregistrationv1.Variable{
		{Name: "old", Expression: p.at("oldObject")},
		{Name: "new", Expression: p.at("object")},
		{Name: "confirm", Expression: `has(object.metadata.annotations) && "` + v1alpha1.AnnotationConfirmReplicas + `" in object.metadata.annotations ? ` +
			`object.metadata.annotations["` + v1alpha1.AnnotationConfirmReplicas + `"] : ""`},
	}
}

// replicasValidation is replicas.Decide for a write through the object.
func replicasValidation(g v1alpha1.ReplicaGuard, s source) admissionregistrationv1.Validation {
	guarded := map[v1alpha1.ReplicaGuard]string{
		v1alpha1.GuardAll:      "true",
		v1alpha1.GuardDecrease: "variables.new < variables.old",
		v1alpha1.GuardToZero:   "variables.new == 0",
	}[g]
	guardName := map[v1alpha1.ReplicaGuard]string{
		v1alpha1.GuardAll:      "All: every change",
		v1alpha1.GuardDecrease: "Decrease: decreases only",
		v1alpha1.GuardToZero:   "ToZero: scaling to 0 only",
	}[g]
	scale := `"kubectl rampart scale " + ` + celNs + ` + ` + celRef + ` + "/" + variables.name + " --replicas " + string(variables.new)`
	msg := []string{
		`"changing the replicas of " + ` + celObj + ` + " from " + string(variables.old) + " to " + string(variables.new) + ` +
			strconv.Quote(fmt.Sprintf(" needs confirmation (%s, guard %s). ", s.name, guardName)),
		`(variables.confirm == "" ? ` +
			`"Set annotation ` + v1alpha1.AnnotationConfirmReplicas + `=\"" + string(variables.new) + "\" in the same request, or run: " + ` + scale + ` : ` +
			`"The request confirms ` + v1alpha1.AnnotationConfirmReplicas + `=\"" + variables.confirm + "\", which is not the new count " + string(variables.new) + ". Run: " + ` + scale + `)`,
		`". " + ` + s.lift,
	}
	return admissionregistrationv1.Validation{
		Expression: fmt.Sprintf(`variables.old == variables.new || !(%s) || variables.confirm == string(variables.new)`, guarded),
		Reason:     ptr.To(metav1.StatusReasonForbidden),
		// The guard's words are constant: the message needs no second
		// guard expression.
		MessageExpression: strings.Join(msg, " + "),
	}
}

// exemptCondition leaves out requesters the rule never denies.
func exemptCondition(s v1alpha1.Subjects) []admissionregistrationv1.MatchCondition {
	users := slices.Clone(s.Users)
	for _, sa := range s.ServiceAccounts {
		users = append(users, "system:serviceaccount:"+sa.Namespace+":"+sa.Name)
	}
	var terms []string
	if len(users) > 0 {
		terms = append(terms, "request.userInfo.username in "+celList(users))
	}
	if len(s.Groups) > 0 {
		terms = append(terms, "(has(request.userInfo.groups) && request.userInfo.groups.exists(g, g in "+celList(s.Groups)+"))")
	}
	if len(terms) == 0 {
		return nil
	}
	return []admissionregistrationv1.MatchCondition{{Name: "not-exempt", Expression: "!(" + strings.Join(terms, " || ") + ")"}}
}

// selectorCondition is a label selector in CEL over obj's labels ("" for
// an empty or absent selector, which selects everything).
func selectorCondition(sel *metav1.LabelSelector, obj string) string {
	if sel == nil {
		return ""
	}
	labels := obj + ".metadata.labels"
	has := func(k string) string {
		return fmt.Sprintf("(has(%s) && %s in %s)", labels, strconv.Quote(k), labels)
	}
	value := func(k string) string { return fmt.Sprintf("%s[%s]", labels, strconv.Quote(k)) }
	var terms []string
	keys := make([]string, 0, len(sel.MatchLabels))
	for k := range sel.MatchLabels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		terms = append(terms, fmt.Sprintf("(%s && %s == %s)", has(k), value(k), strconv.Quote(sel.MatchLabels[k])))
	}
	for _, e := range sel.MatchExpressions {
		in := fmt.Sprintf("(%s && %s in %s)", has(e.Key), value(e.Key), celList(e.Values))
		switch e.Operator {
		case metav1.LabelSelectorOpIn:
			terms = append(terms, in)
		case metav1.LabelSelectorOpNotIn:
			terms = append(terms, "!"+in)
		case metav1.LabelSelectorOpExists:
			terms = append(terms, has(e.Key))
		case metav1.LabelSelectorOpDoesNotExist:
			terms = append(terms, "!"+has(e.Key))
		}
	}
	return strings.Join(terms, " && ")
}

// celList is a list of string literals. strconv.Quote's escapes are CEL's.
func celList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
