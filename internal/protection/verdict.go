package protection

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Verdict is every protection's decision on one request. The admission
// adapter answers it, counts it and records it in one place
// (internal/admission respond), whatever the protection.
type Verdict struct {
	Allowed bool
	// Rule names the rule that decided, a bounded set fit for a metric
	// label ("protection=Always", "flow-control-limit"); empty when no
	// rule objected.
	Rule string
	// Message tells the requester what was decided, why, and how to
	// proceed.
	Message string
	// Code and Reason answer a denial other than 403 Forbidden: a budget
	// answers 429 TooManyRequests, as the Eviction API does for a
	// PodDisruptionBudget, so that kubectl drain and controllers retry.
	Code   int32
	Reason metav1.StatusReason
	// RetryAfter, when set, tells the requester when to retry.
	RetryAfter time.Duration
	// Warn admits what the rule would deny (a Warn-mode policy): the
	// message becomes an admission warning and is counted as one.
	Warn bool
}

// Allow is the verdict of a request no rule objects to.
var Allow = Verdict{Allowed: true}
