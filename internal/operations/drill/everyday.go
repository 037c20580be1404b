package drill

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// Operation is an everyday operation of a cluster's life, run on the
// unprotected and the protected cluster alike and timed: Rampart must never
// make the cluster's own healing slower, nor refuse what it does (issue
// #33, "do no harm"). The protected side carries what a real user applies
// (budgets, explicit-replicas labels, protection of unrelated key objects,
// a flow control on pod deletes), so that the comparison means something.
type Operation struct {
	Name string
	// What says what is done, and what the protected side applies.
	What string
	// Beside runs both sides at once, beside the operations after it
	// (until one that runs Alone): its time is the controllers' timers (a
	// node's grace period), not CPU, and waiting for it alone, once a
	// side, would make the set minutes longer. It needs two local
	// clusters; in one cluster given twice it runs like any other.
	Beside bool
	// Alone restarts or removes Rampart: the operations running beside
	// end first, since Rampart's absence would change their outcome.
	Alone bool
	Run   func(ctx context.Context, t Target) (Timing, error)
}

// Timing is how an operation went on one side.
type Timing struct {
	// Took is the time from the operation's first request until it was
	// done; its timeout when it was not done.
	Took time.Duration `json:"tookNanos"`
	// Done is false when the operation had not finished by its timeout.
	Done bool `json:"done"`
	// Refused counts the requests Rampart refused (or could not be asked
	// about: a failed call to its webhook) that should have passed, by any
	// requester, controllers included; Refusals are examples of them.
	Refused  int      `json:"refused"`
	Refusals []string `json:"refusals,omitempty"`
	// Measured are figures beyond the time, by name with the unit as
	// suffix (pod_deleted_s).
	Measured map[string]float64 `json:"measured,omitempty"`
}

func (t Timing) String() string {
	s := fmt.Sprintf("%.1fs", t.Took.Seconds())
	if !t.Done {
		s = ">" + s + " (not done)"
	}
	return s
}

// boundSlack and boundFactor make an operation's bound: protected time at
// most 1.1× the unprotected time plus 5 s.
const (
	boundFactor = 1.1
	boundSlack  = 5 * time.Second
)

// OperationResult is one operation's timing on both targets.
type OperationResult struct {
	Operation   string `json:"operation"`
	What        string `json:"what"`
	Unprotected Timing `json:"unprotected"`
	Protected   Timing `json:"protected"`
	// Bound is the most the protected side may take.
	Bound    time.Duration `json:"boundNanos"`
	Verdict  string        `json:"verdict"`
	Duration time.Duration `json:"durationNanos"`
}

// Verdicts of an operation.
const (
	VerdictOK       = "ok"
	VerdictNotDone  = "not done"
	VerdictRefused  = "refused"
	VerdictSlower   = "over bound"
	VerdictBaseline = "unprotected not done"
)

// Judge sets the bound and the verdict: the protected side done within
// 1.1× the unprotected time plus 5 s, with nothing refused.
func (r *OperationResult) Judge() {
	r.Bound = time.Duration(math.Round(boundFactor*float64(r.Unprotected.Took))) + boundSlack
	switch {
	case !r.Unprotected.Done:
		r.Verdict = VerdictBaseline
	case !r.Protected.Done:
		r.Verdict = VerdictNotDone
	case r.Protected.Refused > 0:
		r.Verdict = VerdictRefused
	case r.Protected.Took > r.Bound:
		r.Verdict = VerdictSlower
	default:
		r.Verdict = VerdictOK
	}
}

// Everyday are the everyday operations, in the order they run.
func Everyday() []Operation {
	return []Operation{nodeDies, rollingUpdate, drainNode, hpaScale, gitopsPrune, crdRemoval, managerRollingRestart, uninstallMidOperation}
}

// RunOperations runs each operation on the unprotected and the protected
// target. The protected target first gets what a user of Rampart applies
// to the rest of the cluster (keyObjects), removed at the end.
func RunOperations(ctx context.Context, ops []Operation, unprotected, protected Target, progress io.Writer) ([]OperationResult, error) {
	if protected.Protected {
		fmt.Fprintln(progress, "protecting the protected cluster's key objects, as its users would...")
		undo, err := protected.keyObjects(ctx)
		if err != nil {
			return nil, fmt.Errorf("protecting key objects: %w", err)
		}
		defer undo()
	}
	// Two local clusters can run an operation at once; one cluster given
	// twice cannot (both sides would label the same nodes).
	separate := unprotected.Local != nil && protected.Local != nil && unprotected.Local != protected.Local
	results := make([]*OperationResult, len(ops))
	run := func(op Operation, slot **OperationResult, both bool) error {
		start := time.Now()
		r := OperationResult{Operation: op.Name, What: op.What}
		sides := []struct {
			t      Target
			timing *Timing
			name   string
		}{{unprotected, &r.Unprotected, "unprotected"}, {protected, &r.Protected, "protected"}}
		errs := make([]error, len(sides))
		one := func(i int) {
			s := sides[i]
			if *s.timing, errs[i] = op.Run(ctx, s.t); errs[i] != nil {
				errs[i] = fmt.Errorf("operation %s (%s): %w", op.Name, s.name, errs[i])
			}
		}
		if both {
			var wg sync.WaitGroup
			for i := range sides {
				wg.Go(func() { one(i) })
			}
			wg.Wait()
		} else {
			for i, s := range sides {
				fmt.Fprintf(progress, "operation %s (%s)...\n", op.Name, s.name)
				if one(i); errs[i] != nil {
					break
				}
			}
		}
		if err := errors.Join(errs...); err != nil {
			return err
		}
		r.Duration = time.Since(start)
		r.Judge()
		*slot = &r
		return nil
	}
	var beside sync.WaitGroup
	var besideErrs []error
	var mu sync.Mutex
	wait := func() error {
		beside.Wait()
		return errors.Join(besideErrs...)
	}
	var err error
	for i, op := range ops {
		if op.Alone {
			if err = wait(); err != nil {
				break
			}
		}
		if op.Beside && separate {
			fmt.Fprintf(progress, "operation %s (both sides at once, beside the next operations)...\n", op.Name)
			beside.Go(func() {
				if err := run(op, &results[i], true); err != nil {
					mu.Lock()
					besideErrs = append(besideErrs, err)
					mu.Unlock()
				}
			})
			continue
		}
		if err = run(op, &results[i], false); err != nil {
			break
		}
	}
	err = errors.Join(err, wait())
	var out []OperationResult
	for _, r := range results {
		if r != nil {
			out = append(out, *r)
		}
	}
	return out, err
}

// WriteOperationsTable prints the operations' times as a table, the
// refusals seen under it, then the figures they measured.
func WriteOperationsTable(w io.Writer, results []OperationResult) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "OPERATION\tUNPROTECTED\tPROTECTED\tBOUND\tREFUSED\tVERDICT")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.1fs\t%d\t%s\n", r.Operation, r.Unprotected, r.Protected, r.Bound.Seconds(), r.Protected.Refused, r.Verdict)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range results {
		for _, side := range []struct {
			name string
			t    Timing
		}{{"unprotected", r.Unprotected}, {"protected", r.Protected}} {
			if side.t.Refused == 0 {
				continue
			}
			fmt.Fprintf(w, "%s (%s): %d refused", r.Operation, side.name, side.t.Refused)
			for _, m := range side.t.Refusals {
				fmt.Fprintf(w, "\n  %s", m)
			}
			fmt.Fprintln(w)
		}
	}
	var rows []figureRow
	for _, r := range results {
		rows = append(rows, figureRow{r.Operation, r.Unprotected.Measured, r.Protected.Measured})
	}
	return writeFigureRows(w, "OPERATION", rows)
}

// OperationsFailed names the operations that missed their bound.
func OperationsFailed(results []OperationResult) []string {
	var out []string
	for _, r := range results {
		if r.Verdict != VerdictOK {
			out = append(out, r.Operation)
		}
	}
	return out
}

// selectOperations returns the named operations; names that are neither
// drills nor operations are reported by Select.
func selectOperations(names []string) []Operation {
	var out []Operation
	for _, n := range names {
		if i := slices.IndexFunc(Everyday(), func(o Operation) bool { return o.Name == n }); i >= 0 {
			out = append(out, Everyday()[i])
		}
	}
	return out
}

// short is the first line of a refusal, cut to fit a table's note.
func short(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}
