package admit

// For the tests of the Ready condition.
var Guarding = guarding

const (
	CompiledWait = compiledWait
	LeftWait     = leftWait
)
