// Package verdict is the one vocabulary of Rampart's decisions: whatever
// admits or refuses something — a protection at admission, a gateway
// guard, its limiter or breaker, the node guard — answers a Verdict, with
// the same fields and the same meaning.
//
// A decision says what was decided and why, never how to say it: there
// is no HTTP status, admission StatusReason or gRPC code here. Each
// adapter maps a refusal to its transport, from its Refusal:
//
//	Refusal       admission (respond)  gateway (refuse)  node guard (grpcCode)
//	Forbidden     403                  403               FailedPrecondition
//	Throttled     429                  429               FailedPrecondition
//	Unavailable   503                  503               Unavailable
//	Unauthorized  401                  401               FailedPrecondition
//	Invalid       400                  400               FailedPrecondition
//
// This package imports nothing of Rampart, so that both sides, the
// admission protections and the gateway's traffic and breaker packages,
// can use it without importing each other.
//
// Every decision type is a Verdict, or embeds one and adds what only its
// adapter needs (the node guard's Hold, the limiter's release of an
// in-flight slot). One shared type rather than like-named fields in
// several: the compiler, not a convention, keeps the vocabulary one, and
// a verdict passes from a decision to its adapter (a gateway guard
// returns the limiter's verdict as it is) without being copied field by
// field.
package verdict

import "time"

// Verdict is a decision on one request.
type Verdict struct {
	// Allowed admits the request.
	Allowed bool
	// Reason is why, as a short name from a bounded set, fit for a
	// metric label and a log key ("protection=Always", "rate",
	// "NotAskedToEnd"): the rule that refused, or that allowed where an
	// allowance is worth naming. It may be empty.
	Reason string
	// Message tells the requester what was decided, why, and how to
	// proceed.
	Message string
	// RetryAfter, when set, tells the requester when to retry.
	RetryAfter time.Duration
	// Refusal says what kind of refusal it is, for the adapter to answer
	// with its transport's code; the zero value is Forbidden.
	Refusal Refusal
}

// Allow is the verdict of a request nothing objects to.
var Allow = Verdict{Allowed: true}

// Refusal is the kind of a refusal: what the requester can do about it.
type Refusal uint8

const (
	// Forbidden: a rule refuses the request as it is; retrying it
	// unchanged fails until the state of things or the rule changes.
	Forbidden Refusal = iota
	// Throttled: a budget or a limit is used up for now; retrying later,
	// after RetryAfter when set, may succeed. Kubernetes clients retry
	// it by themselves (kubectl drain, client-go).
	Throttled
	// Unavailable: what the decision needs (a store, a review, the API
	// server) cannot be reached; retrying once it is back may succeed.
	Unavailable
	// Unauthorized: who the requester is could not be established.
	Unauthorized
	// Invalid: the request is malformed.
	Invalid
)
