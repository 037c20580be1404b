package drill

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/rampart-io/rampart/internal/protection/admission"
)

// rejection is one kind of refusal the API server counted for Rampart: a
// webhook's denial, a failed call to a webhook that fails closed, or a
// compiled policy's denial.
type rejection struct {
	// Hook is the webhook's or the compiled policy's name, without the
	// prefix of a local replica.
	Hook      string
	Operation string
	// Code is the HTTP code the request got.
	Code string
	// Error is the API server's error_type: no_error for a denial,
	// calling_webhook_error when Rampart could not be reached.
	Error string
}

func (r rejection) String() string {
	s := r.Hook
	if r.Operation != "" {
		s += " " + r.Operation
	}
	if r.Code != "" {
		s += " " + r.Code
	}
	if r.Error != "" && r.Error != "no_error" {
		s += " (" + r.Error + ")"
	}
	return s
}

// The API server's counts of refusals by webhooks and by
// ValidatingAdmissionPolicies.
const (
	webhookRejections = "apiserver_admission_webhook_rejection_count"
	policyChecks      = "apiserver_validating_admission_policy_check_total"
)

// rejections reads the API server's counts of Rampart's refusals since it
// started: every requester's, controllers' included, which no client of
// the drill sees and which a webhook that could not be reached records
// nowhere else.
func (t Target) rejections(ctx context.Context) (map[rejection]float64, error) {
	raw, err := t.Client.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the API server's metrics for Rampart's refusals: %w", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	out := map[rejection]float64{}
	for _, m := range families[webhookRejections].GetMetric() {
		l := labels(m.GetLabel())
		if strings.HasSuffix(l["name"], ".rampart.io") {
			out[rejection{Hook: admission.BaseName(l["name"]), Operation: l["operation"], Code: l["rejection_code"], Error: l["error_type"]}] += m.GetCounter().GetValue()
		}
	}
	for _, m := range families[policyChecks].GetMetric() {
		l := labels(m.GetLabel())
		if strings.HasSuffix(l["policy"], ".rampart.io") && l["enforcement_action"] == "deny" {
			out[rejection{Hook: l["policy"], Error: l["error_type"]}] += m.GetCounter().GetValue()
		}
	}
	return out, nil
}

func labels[L interface {
	GetName() string
	GetValue() string
}](pairs []L) map[string]string {
	out := make(map[string]string, len(pairs))
	for _, p := range pairs {
		out[p.GetName()] = p.GetValue()
	}
	return out
}

// refusalWatch counts Rampart's refusals from its start.
type refusalWatch struct {
	t Target
	// scope says whether an audited request belongs to the operation.
	scope func(*auditv1.Event) bool
	// offsets are where the API servers' audit logs ended at the start.
	offsets map[string]int64
	// before are the API server's counts at the start, when there is no
	// audit log to read (a cluster given with --kubeconfig).
	before map[rejection]float64
}

// watchRefusals starts counting Rampart's refusals of requests about
// objects in namespaces, or about the cluster-scoped objects named
// "resource/name" in objects. On a local cluster they are read from the
// API server's audit log, which has every request, its requester and its
// answer: only the operation's own are counted, though others run beside
// it. Elsewhere they are the API server's counts of every refusal.
func (t Target) watchRefusals(ctx context.Context, namespaces []string, objects ...string) (*refusalWatch, error) {
	w := &refusalWatch{t: t, scope: func(e *auditv1.Event) bool {
		ref := e.ObjectRef
		return ref != nil && (slices.Contains(namespaces, ref.Namespace) || ref.Namespace == "" && slices.Contains(objects, ref.Resource+"/"+ref.Name))
	}}
	if t.Local == nil {
		var err error
		w.before, err = t.rejections(ctx)
		return w, err
	}
	files, err := filepath.Glob(filepath.Join(t.Local.Dir, "audit*.log"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("no audit log in %s: %v", t.Local.Dir, err)
	}
	w.offsets = map[string]int64{}
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			return nil, err
		}
		w.offsets[f] = st.Size()
	}
	return w, nil
}

// count returns the refusals since the watch started, but for those
// expected says an operation meets by design (a budget's 429 to an
// eviction, which kubectl drain retries as it retries a
// PodDisruptionBudget's), and examples: each kind of refusal with its
// count, then a few of the messages, with their requesters.
func (w *refusalWatch) count(ctx context.Context, expected func(rejection) bool) (int, []string, error) {
	counts := map[rejection]int{}
	var messages []string
	if w.offsets == nil {
		after, err := w.t.rejections(ctx)
		if err != nil {
			return 0, nil, err
		}
		for r, n := range after {
			counts[r] = int(n - w.before[r])
		}
	} else if err := w.audited(func(r rejection, who, message string) {
		counts[r]++
		if m := who + ": " + short(message); !slices.Contains(messages, m) && len(messages) < 3 {
			messages = append(messages, m)
		}
	}); err != nil {
		return 0, nil, err
	}
	n := 0
	var examples []string
	for _, r := range slices.SortedFunc(maps.Keys(counts), func(a, b rejection) int { return strings.Compare(a.String(), b.String()) }) {
		if counts[r] <= 0 || expected != nil && expected(r) {
			continue
		}
		n += counts[r]
		examples = append(examples, fmt.Sprintf("%d × %s", counts[r], r))
	}
	if n == 0 {
		return 0, nil, nil
	}
	return n, append(examples, messages...), nil
}

// refusedBy finds the webhook or compiled policy of Rampart's that a
// failed request's message names.
var refusedBy = regexp.MustCompile(`(?:webhook "|ValidatingAdmissionPolicy ')([^"']+\.rampart\.io)`)

// audited calls found for every request in scope that the audit logs
// recorded since the watch started and that Rampart refused or could not
// be asked about. Dry runs change nothing and are left out.
func (w *refusalWatch) audited(found func(r rejection, who, message string)) error {
	for f, offset := range w.offsets {
		file, err := os.Open(f)
		if err != nil {
			return err
		}
		if st, err := file.Stat(); err == nil && st.Size() < offset {
			offset = 0 // rotated: what was written since is all there is
		}
		if _, err := file.Seek(offset, io.SeekStart); err != nil {
			file.Close()
			return err
		}
		lines := bufio.NewScanner(file)
		lines.Buffer(make([]byte, 1<<20), 16<<20)
		for lines.Scan() {
			line := lines.Bytes()
			if !bytes.Contains(line, []byte(".rampart.io")) {
				continue
			}
			var e auditv1.Event
			if json.Unmarshal(line, &e) != nil || e.Stage != auditv1.StageResponseComplete || e.ResponseStatus == nil ||
				e.ResponseStatus.Code < 400 || strings.Contains(e.RequestURI, "dryRun=") || !w.scope(&e) {
				continue
			}
			m := refusedBy.FindStringSubmatch(e.ResponseStatus.Message)
			if m == nil {
				continue
			}
			r := rejection{Hook: admission.BaseName(m[1]), Operation: strings.ToUpper(e.Verb), Code: fmt.Sprint(e.ResponseStatus.Code)}
			if strings.Contains(e.ResponseStatus.Message, "failed calling webhook") {
				r.Error = "calling_webhook_error"
			}
			found(r, e.User.Username, e.ResponseStatus.Message)
		}
		file.Close()
		if err := lines.Err(); err != nil {
			return err
		}
	}
	return nil
}

// settle sets tm's refusals; own is an error the operation's own request
// got, which leads the examples when Rampart refused something, and is
// the drill's failure when it did not.
func (w *refusalWatch) settle(ctx context.Context, tm *Timing, own error, expected func(rejection) bool) error {
	n, examples, err := w.count(ctx, expected)
	if err != nil {
		return err
	}
	tm.Refused, tm.Refusals = n, examples
	if own != nil {
		if n == 0 {
			return own
		}
		tm.Refusals = append([]string{short(own.Error())}, examples...)
	}
	return nil
}
