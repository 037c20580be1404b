package admission

// Guards is what the deletion and replicas handlers read, which both the
// labels (internal/protection/labels/admit) and the ProtectionPolicies
// (internal/protection/policy/admit) serve: here, beside the handlers,
// because both embed it.
type Guards struct {
	WantsDeletionView
	WantsScaleTargets
	WantsPolicies
	WantsRecorder
	WantsMapper
	WantsInForce
	WantsReplicas
	WantsBin
}

// DeletionHandler is the deletion handler over what g was given.
func (g *Guards) DeletionHandler() *Deletion {
	return &Deletion{View: g.Deletion, Policies: g.Policies, Recorder: g.Recorder, Mapper: g.Mapper, Bin: g.Bin}
}

// ReplicasHandler is the replicas handler over what g was given.
func (g *Guards) ReplicasHandler() *Replicas {
	return &Replicas{View: g.ScaleTargets, Policies: g.Policies, Exempt: g.ReplicasExempt, Recorder: g.Recorder,
		InForce: g.InForce, LiveLabels: g.LiveLabels, Mapper: g.Mapper}
}
