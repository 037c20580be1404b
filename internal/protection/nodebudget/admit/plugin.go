package admit

import (
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/utils/ptr"

	"github.com/rampart-io/rampart/api/v1alpha1"
	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
	"github.com/rampart-io/rampart/internal/protection/nodebudget"
)

// Plugin is the protection NodeDisruptionBudgets give: a webhook per
// budget on the deletes and updates of the nodes it selects that take a
// node in service out of it.
type Plugin struct {
	rampartadmission.WantsDirect // the ledger's reads and writes
	rampartadmission.WantsRecorder
	rampartadmission.WantsNodes // the selected nodes, from the cluster view
}

// Kind is the kind whose objects are NodeDisruptionBudgets.
const Kind = "NodeDisruptionBudget"

func (*Plugin) Name() string { return "nodedisruptionbudget" }

func (*Plugin) Objects() rampartadmission.ObjectKind {
	return rampartadmission.NewObjectKind[v1alpha1.NodeDisruptionBudget, *v1alpha1.NodeDisruptionBudget, v1alpha1.NodeDisruptionBudgetList](Kind, "nodedisruptionbudgets", false)
}

func (p *Plugin) Routes() []rampartadmission.Route {
	return []rampartadmission.Route{{Path: Prefix, Handler: &Handler{Client: p.Direct, Recorder: p.Recorder, Nodes: p.Nodes},
		WithContext: rampartadmission.PolicyFromPath(Prefix)}}
}

func (*Plugin) Webhooks(reg rampartadmission.Registration, b rampartadmission.Builder) []rampartadmission.Webhook {
	var out []rampartadmission.Webhook
	for _, nb := range rampartadmission.ObjectsOf[*v1alpha1.NodeDisruptionBudget](reg, Kind) {
		rule := rampartadmission.Rule(admissionregistrationv1.Update, "", "nodes")
		rule.Operations = append(rule.Operations, admissionregistrationv1.Delete)
		h := b.Webhook(nb.Name+".nodebudget.rampart.io", Prefix+nb.Name, rule)
		h.ObjectSelector = rampartadmission.OrEverything(nb.Spec.NodeSelector)
		h.MatchConditions = matchConditions
		// Exact means closed: a departure the budget could not count is
		// refused. The match conditions keep everything that heals the
		// cluster (the kubelet, health taints, dead nodes) away from the
		// webhook, so an outage of Rampart delays only cordons, taints and
		// deletes of healthy nodes of the pool.
		h.TimeoutSeconds = ptr.To(int32(10))
		out = append(out, rampartadmission.Own(rampartadmission.OwnerOf(nb), h)...)
	}
	return out
}

// matchConditions let the API server call the webhook only for a request
// that takes an in-service node out of service, and never for what heals
// the cluster: the kubelet's own writes, the lifecycle controller's (and
// the cloud controller's) health taints, and any change to a node already
// NotReady, cordoned or tainted. They hold while Rampart is down: those
// requests never wait on it. The handler judges the same again
// (nodebudget.Leaves), from the node as the request carries it.
var matchConditions = []admissionregistrationv1.MatchCondition{
	{Name: "not-the-kubelet", Expression: "!request.userInfo.username.startsWith('system:node:')"},
	{Name: "node-in-service", Expression: "has(oldObject.status) && has(oldObject.status.conditions) && " +
		"oldObject.status.conditions.exists(c, c.type == 'Ready' && c.status == 'True') && " +
		"!(has(oldObject.spec.unschedulable) && oldObject.spec.unschedulable) && " +
		"!(has(oldObject.spec.taints) && oldObject.spec.taints.exists(t, t.effect == 'NoSchedule' || t.effect == 'NoExecute'))"},
	{Name: "leaves-service", Expression: "request.operation == 'DELETE' || " +
		"(has(object.spec.unschedulable) && object.spec.unschedulable) || " +
		"(has(object.spec.taints) && object.spec.taints.exists(t, (t.effect == 'NoSchedule' || t.effect == 'NoExecute') && " +
		notHealth("t.key") + "))"},
}

// notHealth is the CEL saying key is no health taint's
// (nodebudget.HealthTaintPrefixes).
func notHealth(key string) string {
	var parts []string
	for _, p := range nodebudget.HealthTaintPrefixes {
		parts = append(parts, "!"+key+".startsWith('"+p+"')")
	}
	return strings.Join(parts, " && ")
}
