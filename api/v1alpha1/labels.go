package v1alpha1

// The labels and annotations users put on their own objects. They are the
// contract of ../shared/design/architecture.md: renaming one breaks users.
const (
	// LabelProtection marks an object whose DELETE Rampart judges.
	// Values: ProtectionAlways or ProtectionCascading.
	LabelProtection = "rampart.io/protection"

	// LabelExplicitReplicas ("true") makes a change of spec.replicas need
	// AnnotationConfirmReplicas in the same request.
	LabelExplicitReplicas = "rampart.io/explicit-replicas"

	// AnnotationConfirmReplicas carries the new replica count, written in
	// the same request as the new spec.replicas.
	AnnotationConfirmReplicas = "rampart.io/confirm-replicas"

	// LabelExplicitDeletion ("true", on pods): only an explicit API delete may
	// end this pod. The node guard (internal/servers/nodeguard) reads it from the
	// API and refuses the kubelet's kills of pods carrying it. On a
	// workload (Deployment, StatefulSet, DaemonSet, ReplicaSet) it asks the
	// manager to put it on the workload's pods once they run
	// (internal/servers/manager/controller/explicitdeletion).
	LabelExplicitDeletion = "rampart.io/explicit-deletion"

	// ConditionContainersRunning is the pod condition the node guard
	// keeps on the pods labelled LabelExplicitDeletion on its node: True
	// while the runtime runs a regular container of the pod (the guard
	// then refuses the kubelet's kills the API did not ask for), False
	// once none runs. The compiled policy SavedPodsName refuses the
	// node's write of phase Failed while it reads True: the pod the guard
	// saved keeps reading Running, and keeps serving.
	ConditionContainersRunning = "rampart.io/ContainersRunning"

	// AnnotationGeneratePUB ("true", on a workload) asks for a generated
	// PodUnavailableBudget.
	AnnotationGeneratePUB = "rampart.io/generate-pub"

	// AnnotationGeneratePUBMaxUnavailable and AnnotationGeneratePUBMinAvailable
	// size a generated budget (a count or a percentage); without them it
	// takes the workload's rolling-update maxUnavailable, else 25%.
	AnnotationGeneratePUBMaxUnavailable = "rampart.io/generate-pub-max-unavailable"
	AnnotationGeneratePUBMinAvailable   = "rampart.io/generate-pub-min-available"

	// AnnotationGeneratePUBGroupBy (a label key) makes the generated
	// budget apply to each group of the workload's pods (spec.groupBy;
	// a key the pods lack is read from their nodes, e.g.
	// topology.kubernetes.io/zone); AnnotationGeneratePUBMaxGroupsDisrupted
	// caps the groups disrupted at once and AnnotationGeneratePUBGang
	// ("true") makes it a gang budget (spec.gang).
	AnnotationGeneratePUBGroupBy            = "rampart.io/generate-pub-group-by"
	AnnotationGeneratePUBMaxGroupsDisrupted = "rampart.io/generate-pub-max-groups-disrupted"
	AnnotationGeneratePUBGang               = "rampart.io/generate-pub-gang"
)

// ProtectionLevel is the value of LabelProtection or a policy's protection.
// +kubebuilder:validation:Enum=Always;Cascading
type ProtectionLevel string

const (
	// ProtectionAlways denies every DELETE of the object.
	ProtectionAlways ProtectionLevel = "Always"
	// ProtectionCascading denies a DELETE while it would cascade to live
	// dependents.
	ProtectionCascading ProtectionLevel = "Cascading"
)
