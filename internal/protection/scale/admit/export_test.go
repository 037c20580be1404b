package admit

// MaxScaleTargets is maxScaleTargets, for the tests.
const MaxScaleTargets = maxScaleTargets
