package registrar

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
)

// A protection holds from the moment the API accepts the request that
// creates it. The webhooks that enforce policies, windows, flow controls
// and the scale subresource are registered from caches, asynchronously; so
// the request that creates one of these (or adds the explicit-replicas
// label) is itself judged by a webhook that registers the coverage it
// brings as pending, writes the configuration, and waits on a Barrier
// until every API server enforces it, before admitting the request.
//
// Every replica registers from its own caches, which may lag behind the
// request another replica just admitted. So pending coverage is recorded
// in the configuration itself (annotation pendingAnnotation: what, until
// when) and every replica keeps what is marked there until the mark
// expires, by which time its caches hold the object (or the request was
// not persisted after all, and the coverage may go). Writes carry the
// resourceVersion read, so that two replicas never overwrite each other.

const (
	// pendingAnnotation holds the pending marks: key → RFC 3339 expiry.
	pendingAnnotation = "rampart.io/pending"
	// tokenAnnotation is the token of the configuration's probe webhook.
	tokenAnnotation = "rampart.io/registration-token"
	// pendingFor is how long coverage admitted but not yet in the caches is
	// kept: far more than a watch takes to deliver it.
	pendingFor = 30 * time.Second
)

// pending is coverage a request brings before the caches have it: a key
// of a key set (a scale target, a namespace holding budgets), an object
// of a protection's kind (a policy, a window, a flow control) or a
// widening, of one of the kinds below.
type pending struct {
	until time.Time
	kind  *pendingKind
	// set names the key set of a pending key, the widening set of a
	// widening.
	set string
	key string
	obj client.Object
}

// pendingKind is what one kind of pending coverage does to a registration.
type pendingKind struct {
	// in says whether reg holds what p brings.
	in func(reg rampartadmission.Registration, p pending) bool
	// add puts p into reg in place of what reg says about the same object.
	add func(reg *rampartadmission.Registration, p pending)
	// keyed pending coverage is marked as set/key; the rest by the
	// webhooks it owns and the keys it brings.
	keyed bool
}

var (
	// A key of a key set: a workload gaining the explicit-replicas label,
	// a namespace whose first budget is being admitted.
	pendingKey = &pendingKind{keyed: true,
		in: func(reg rampartadmission.Registration, p pending) bool {
			return slices.Contains(reg.Keys[p.set], p.key)
		},
		add: func(reg *rampartadmission.Registration, p pending) {
			*reg = reg.WithKeys(p.set, p.key)
		}}
	// An object of a protection's kind: in the caches once they hold the
	// same object (UID) at the same or a later generation.
	pendingObject = &pendingKind{
		in: func(reg rampartadmission.Registration, p pending) bool {
			for _, o := range reg.Objects[rampartadmission.KindOf(p.obj)] {
				if o.GetNamespace() == p.obj.GetNamespace() && o.GetName() == p.obj.GetName() {
					return o.GetUID() == p.obj.GetUID() && o.GetGeneration() >= p.obj.GetGeneration()
				}
			}
			return false
		},
		add: func(reg *rampartadmission.Registration, p pending) {
			*reg = reg.With(p.obj)
		}}
	// A widening of a protection's webhooks (a namespace just relabelled
	// into a policy, whose labels the API servers' caches may lag; a
	// policy guarding replicas whose covered workloads the view may not
	// list yet): never in the caches, kept until it expires. The newest
	// in place of any earlier of the same object and key (changed twice
	// within pendingFor): two would be two webhooks of one name.
	pendingWidening = &pendingKind{
		in: func(rampartadmission.Registration, pending) bool { return false },
		add: func(reg *rampartadmission.Registration, p pending) {
			*reg = reg.WithWidening(p.set, rampartadmission.Widening{Object: p.obj, Key: p.key})
		}}
)

// caughtUp says whether the caches hold what p brings.
func caughtUp(p pending, reg rampartadmission.Registration) bool { return p.kind.in(reg, p) }

// withPending is reg with the pending coverage in place of what the caches
// say about the same objects, and the keys the pending objects bring.
func withPending(reg rampartadmission.Registration, ps []pending, sets []rampartadmission.KeySet) rampartadmission.Registration {
	var objs []client.Object
	for _, p := range ps {
		p.kind.add(&reg, p)
		if p.kind == pendingObject {
			objs = append(objs, p.obj)
		}
	}
	only := rampartadmission.Registration{}.With(objs...)
	for _, ks := range sets {
		if ks.OfObjects != nil {
			reg = reg.WithKeys(ks.Name, ks.OfObjects(only)...)
		}
	}
	return reg
}

// pendingMarks are the keys under which p's coverage is marked: its
// webhooks' base names and the keys it brings.
func pendingMarks(base rampartadmission.Registration, p pending, sets []rampartadmission.KeySet) []string {
	if p.kind.keyed {
		return []string{p.set + "/" + p.key}
	}
	one := rampartadmission.Registration{Endpoint: base.Endpoint, OwnNamespace: base.OwnNamespace, Protections: base.Protections}
	p.kind.add(&one, p)
	var out []string
	for _, h := range rampartadmission.Webhooks(one) {
		if h.Owner != (rampartadmission.Owner{}) {
			out = append(out, "webhook/"+h.Name)
		}
	}
	if p.kind == pendingObject {
		for _, ks := range sets {
			if ks.OfObjects == nil {
				continue
			}
			for _, k := range ks.OfObjects(one) {
				out = append(out, ks.Name+"/"+k)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// liveMarks are the unexpired marks of a live configuration.
func liveMarks(live *admissionregistrationv1.ValidatingWebhookConfiguration, now time.Time) map[string]time.Time {
	out := map[string]time.Time{}
	raw := live.Annotations[pendingAnnotation]
	if raw == "" {
		return out
	}
	var m map[string]string
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		return out
	}
	for k, v := range m {
		if t, err := time.Parse(time.RFC3339Nano, v); err == nil && t.After(now) {
			out[k] = t
		}
	}
	return out
}

// mergeLive makes the configuration to write: want, plus what the live
// configuration holds under unexpired marks that are not this replica's
// own (another replica admitted it; this replica's caches may not have it
// yet). It returns the marks to write too.
func mergeLive(reg rampartadmission.Registration, sets []string, own map[string]time.Time, live *admissionregistrationv1.ValidatingWebhookConfiguration, now time.Time) (*admissionregistrationv1.ValidatingWebhookConfiguration, map[string]time.Time) {
	marks := map[string]time.Time{}
	var keepHooks []string
	if live != nil {
		for k, t := range liveMarks(live, now) {
			marks[k] = t
			if _, mine := own[k]; mine {
				continue
			}
			set, key, _ := strings.Cut(k, "/")
			switch {
			case slices.Contains(sets, set):
				reg = reg.WithKeys(set, key)
			case set == "webhook":
				keepHooks = append(keepHooks, key)
			}
		}
	}
	for k, t := range own {
		if t.After(marks[k]) {
			marks[k] = t
		}
	}
	want := rampartadmission.ValidatingConfig(reg)
	if len(keepHooks) > 0 {
		hooks := slices.DeleteFunc(want.Webhooks, func(h admissionregistrationv1.ValidatingWebhook) bool {
			return slices.Contains(keepHooks, rampartadmission.BaseName(h.Name))
		})
		for _, h := range live.Webhooks {
			if slices.Contains(keepHooks, rampartadmission.BaseName(h.Name)) {
				hooks = append(hooks, h)
			}
		}
		want.Webhooks = hooks
	}
	return want, marks
}

// sameReach says whether two lists of webhooks reach the same requests the
// same way, ignoring the probe and what the API server defaults.
func sameReach(a, b []admissionregistrationv1.ValidatingWebhook) bool {
	type reach struct {
		Name          string
		URL           *string
		Service       *admissionregistrationv1.ServiceReference
		CABundle      []byte
		Rules         []admissionregistrationv1.RuleWithOperations
		NS, Obj       any
		FailurePolicy any
		Conditions    []admissionregistrationv1.MatchCondition
		Timeout       *int32
	}
	key := func(hs []admissionregistrationv1.ValidatingWebhook) map[string]reach {
		out := map[string]reach{}
		for _, h := range hs {
			if rampartadmission.IsProbe(h.Name) {
				continue
			}
			r := reach{Name: h.Name, URL: h.ClientConfig.URL, CABundle: h.ClientConfig.CABundle, Rules: h.Rules,
				NS: h.NamespaceSelector, Obj: h.ObjectSelector, FailurePolicy: h.FailurePolicy, Conditions: h.MatchConditions, Timeout: h.TimeoutSeconds}
			if s := h.ClientConfig.Service; s != nil {
				r.Service = &admissionregistrationv1.ServiceReference{Namespace: s.Namespace, Name: s.Name, Path: s.Path, Port: s.Port}
			}
			out[h.Name] = r
		}
		return out
	}
	return equality.Semantic.DeepEqual(key(a), key(b))
}

func encodeMarks(m map[string]time.Time) string {
	if len(m) == 0 {
		return ""
	}
	out := map[string]string{}
	for k, t := range m {
		out[k] = t.UTC().Format(time.RFC3339Nano)
	}
	b, _ := json.Marshal(out)
	return string(b)
}

// errStale is a write lost to another replica's: read again.
var errStale = errors.New("webhook configuration changed meanwhile")

// write registers the configuration this replica wants merged with what
// is live, if it differs, and returns the token of the configuration now
// live. It retries when another replica wrote meanwhile.
func (r *Registrar) write(ctx context.Context, force bool) (string, error) {
	for attempt := 0; ; attempt++ {
		token, err := r.writeOnce(ctx, force)
		if !errors.Is(err, errStale) || attempt >= 20 {
			return token, err
		}
	}
}

func (r *Registrar) writeOnce(ctx context.Context, force bool) (string, error) {
	if !r.synced() {
		return "", errNotSynced
	}
	now := time.Now()
	live := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := r.client.Get(ctx, client.ObjectKey{Name: rampartadmission.ValidatingConfigName}, live); apierrors.IsNotFound(err) {
		live = nil
	} else if err != nil {
		return "", err
	}
	reg, own, err := r.desired(ctx, now)
	if err != nil {
		return "", err
	}
	want, marks := mergeLive(reg, r.setNames(), own, live, now)
	if live != nil && !force && sameReach(live.Webhooks, want.Webhooks) && live.Annotations[pendingAnnotation] == encodeMarks(marks) &&
		live.Annotations[tokenAnnotation] != "" {
		return Token(live), nil
	}
	reg.Token = rampartadmission.NewToken()
	tokened := rampartadmission.ValidatingConfig(reg)
	for _, h := range tokened.Webhooks {
		if rampartadmission.IsProbe(h.Name) {
			want.Webhooks = append(want.Webhooks, h)
		}
	}
	want.Annotations = map[string]string{tokenAnnotation: reg.Token}
	if m := encodeMarks(marks); m != "" {
		want.Annotations[pendingAnnotation] = m
	}
	if live != nil {
		want.ResourceVersion = live.ResourceVersion
	}
	if err := rampartadmission.Register(ctx, r.client, reg, want); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
			return "", errStale
		}
		return "", err
	}
	r.log.V(1).Info("webhook configuration registered", "webhooks", len(want.Webhooks), "pending", len(marks))
	return reg.Token, nil
}

// desired is what this replica's caches and own pending coverage make,
// and the marks of that pending coverage. Pending coverage the caches now
// hold, or that expired, is forgotten.
func (r *Registrar) desired(ctx context.Context, now time.Time) (rampartadmission.Registration, map[string]time.Time, error) {
	reg, err := r.fromCaches(ctx)
	if err != nil {
		return reg, nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pending = slices.DeleteFunc(r.pending, func(p pending) bool { return !p.until.After(now) || caughtUp(p, reg) })
	own := map[string]time.Time{}
	for _, p := range r.pending {
		for _, k := range pendingMarks(reg, p, r.keySets()) {
			own[k] = p.until
		}
	}
	return withPending(reg, r.pending, r.keySets()), own, nil
}

// setNames are the names of the key sets.
func (r *Registrar) setNames() []string {
	var out []string
	for _, ks := range r.keySets() {
		out = append(out, ks.Name)
	}
	return out
}

// Ensure puts the coverage p brings in force before it returns: it
// registers it with what is already registered, and waits until every API
// server enforces the result. Admission handlers call it before admitting
// a request that creates a protection.
func (r *Registrar) Ensure(ctx context.Context, p pending) error {
	// Answer inside the webhook's timeout, with a message of our own.
	ctx, cancel := context.WithTimeout(ctx, rampartadmission.DefaultBarrierTimeout+time.Second)
	defer cancel()
	p.until = time.Now().Add(pendingFor)
	r.mu.Lock()
	r.pending = append(r.pending, p)
	r.mu.Unlock()
	return r.Sync(ctx)
}

// Sync registers what this replica knows now and waits until every API
// server enforces it.
func (r *Registrar) Sync(ctx context.Context) error {
	token, err := r.writeInTime(ctx, 0)
	if err != nil {
		return err
	}
	return r.barrier.Wait(ctx, token)
}

// backgroundWriteTimeout bounds a write of the registration loop, so that
// it never holds the configuration for long (conflicts with other replicas
// are retried inside a write).
const backgroundWriteTimeout = 30 * time.Second

// writeInTime writes the configuration once this replica's previous write
// is done, within ctx (and timeout, when not zero).
func (r *Registrar) writeInTime(ctx context.Context, timeout time.Duration) (string, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	select {
	case r.writing <- struct{}{}:
	case <-ctx.Done():
		return "", fmt.Errorf("waiting for this replica's previous write of the webhook configuration: %w", ctx.Err())
	}
	defer func() { <-r.writing }()
	return r.write(ctx, false)
}

// The registrar is the admission handlers' InForce.
var _ rampartadmission.InForce = (*Registrar)(nil)

// Key puts key of the key set named set in force (a scale target, a
// namespace whose first budget is admitted).
func (r *Registrar) Key(ctx context.Context, set, key string) error {
	return r.Ensure(ctx, pending{kind: pendingKey, set: set, key: key})
}

// Object puts the webhooks obj registers in force. One that registers
// none under this registration (a RecyclePolicy with the recycle bin off)
// has nothing to wait for.
func (r *Registrar) Object(ctx context.Context, obj client.Object) error {
	// The widenings obj brings (a policy guarding replicas: the view
	// listing the workloads it guards may lag) are written with it.
	for _, ws := range rampartadmission.Declared(r.protections, rampartadmission.OwnsWidenings.Widenings) {
		if ws.OfObject == nil {
			continue
		}
		for _, w := range ws.OfObject(obj) {
			r.mu.Lock()
			r.pending = append(r.pending, pending{kind: pendingWidening, set: ws.Name, obj: w.Object, key: w.Key, until: time.Now().Add(pendingFor)})
			r.mu.Unlock()
		}
	}
	if len(rampartadmission.ObjectWebhooks(r.Registration(), obj)) == 0 {
		return nil
	}
	return r.Ensure(ctx, pending{kind: pendingObject, obj: obj})
}

// Widen puts w of the widening set named set in force and keeps it for
// pendingFor.
func (r *Registrar) Widen(ctx context.Context, set string, w rampartadmission.Widening) error {
	return r.Ensure(ctx, pending{kind: pendingWidening, set: set, obj: w.Object, key: w.Key})
}

// liveToken reads the token of the configuration live now.
// Token is the token of a written configuration's probe webhook: pass it
// to a Barrier to wait until every API server has loaded that version.
func Token(cfg *admissionregistrationv1.ValidatingWebhookConfiguration) string {
	return cfg.Annotations[tokenAnnotation]
}

func liveToken(c client.Client) func(context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		live := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		if err := c.Get(ctx, client.ObjectKey{Name: rampartadmission.ValidatingConfigName}, live); err != nil {
			return "", err
		}
		return Token(live), nil
	}
}
