// Package registrar keeps Rampart's webhook configuration in step with the
// protections it is made from, and puts new coverage in force (registered
// and loaded by every API server) before the request that brings it is
// admitted.
package registrar

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
	"github.com/rampart-io/rampart/internal/protection/compiled"
)

// Config is what a Registrar registers from.
type Config struct {
	// Client writes the configuration and reads it live; Reader lists
	// the objects of the protections' kinds (the manager's cache).
	Client client.Client
	Reader client.Reader
	// Protections are the protections the configuration is made from,
	// initialized: their kinds of object (ObjectKind) and key sets
	// (KeySet).
	Protections []rampartadmission.Protection
	// Barrier waits until every API server enforces a configuration
	// (Current: the live token, by default).
	Barrier rampartadmission.Barrier
	// Base is the endpoint and CA part of what is registered.
	Base rampartadmission.Registration
	// CompiledLabels is the version (Hash) of the compiled label rules
	// the manager applies; the label webhooks narrow once the probe's
	// record says every API server enforces it. Empty: never.
	CompiledLabels string
	// CRDs are the cluster's CRDs (the manager's cache): with the label
	// rules in force, the label webhook leaves the confirmed replica
	// changes of custom resources to their compiled policies. Nil: none.
	CRDs func() ([]apiextensionsv1.CustomResourceDefinition, bool)
	Log  logr.Logger
}

// New is a Registrar; add it to the manager (it runs on every replica).
func New(c Config) *Registrar {
	c.Base.Protections = c.Protections
	if c.Barrier.Current == nil {
		c.Barrier.Current = liveToken(c.Client)
	}
	return &Registrar{client: c.Client, reader: c.Reader, protections: c.Protections,
		barrier: c.Barrier, base: c.Base, compiledLabels: c.CompiledLabels, crds: c.CRDs, log: c.Log, done: make(chan struct{}), kick: make(chan struct{}, 1),
		writing: make(chan struct{}, 1)}
}

// Done is closed after the first successful registration: from then on the
// API server can call this replica.
func (r *Registrar) Done() <-chan struct{} { return r.done }

// SetOwner makes owner the owner of the configuration.
func (r *Registrar) SetOwner(owner *metav1.OwnerReference) {
	r.mu.Lock()
	r.base.Owner = owner
	r.mu.Unlock()
	r.Poke()
}

// Registrar keeps the webhook configurations in step with what they are
// made from: the CA bundle and the workloads whose scale subresource is
// guarded. Every replica registers: the configuration is the same from
// each, and a lone replica must not wait for a leader.
type Registrar struct {
	client client.Client
	reader client.Reader
	// protections are read when used: they are initialized after the
	// registrar is made (it is their InForce).
	protections []rampartadmission.Protection
	log         logr.Logger
	// done is closed after the first successful registration.
	done    chan struct{}
	kick    chan struct{}
	barrier rampartadmission.Barrier
	// writing orders this replica's writes of the configuration. It is a
	// channel, not a mutex, so that an admission handler waiting behind a
	// background write gives up at its own deadline (and answers "not in
	// force yet") instead of outliving the API server's webhook timeout.
	writing chan struct{}
	// compiledLabels: see Config.CompiledLabels.
	compiledLabels string
	crds           func() ([]apiextensionsv1.CustomResourceDefinition, bool)
	// viewsSynced, when set, stands for the views' HasSynced (tests).
	viewsSynced func() bool

	mu   sync.Mutex
	base rampartadmission.Registration
	// pending is coverage admitted but maybe not yet in the caches.
	pending []pending
}

func (r *Registrar) NeedLeaderElection() bool { return false }

// SetBundle registers b as the CA bundle of the webhooks.
func (r *Registrar) SetBundle(b []byte) {
	r.mu.Lock()
	r.base.CABundle = b
	r.mu.Unlock()
	r.Poke()
}

// Poke asks for the configuration to be written again from the caches.
func (r *Registrar) Poke() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Registration is the endpoint and CA part of what is registered.
func (r *Registrar) Registration() rampartadmission.Registration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.base
}

// fromCaches is the registration this replica's caches make: every
// object of the protections' kinds, and every key set. A list that fails
// fails it: a configuration written without the objects it could not list
// would drop their webhooks for every replica until the next write.
func (r *Registrar) fromCaches(ctx context.Context) (rampartadmission.Registration, error) {
	reg := r.Registration()
	kinds := rampartadmission.Kinds(r.protections)
	reg.Objects = make(map[string][]client.Object, len(kinds))
	for _, k := range kinds {
		objs, err := k.List(ctx, r.reader)
		if err != nil {
			return reg, fmt.Errorf("listing %s: %w", k.Resource, err) // as kubectl names them
		}
		reg.Objects[k.Kind] = objs
	}
	sets := r.keySets()
	reg.Keys = make(map[string][]string, len(sets))
	for _, ks := range sets {
		reg.Keys[ks.Name] = ks.KeysOf(reg)
	}
	if r.compiledLabels != "" {
		// Read live, after the live configuration (writeOnce): a record
		// withdrawn before a widening write is seen by every later write.
		// Unread, the label webhooks stay wide: safe.
		record, err := readInForce(ctx, r.client)
		if err != nil {
			r.log.Error(err, "reading which compiled policies are in force")
		}
		reg.CompiledLabels = record[sourceLabels] == r.compiledLabels
		if reg.CompiledLabels && r.crds != nil {
			crds, _ := r.crds()
			reg.Scaled, _ = compiled.ScaledResources(crds)
		}
	}
	return reg, nil
}

// synced says whether the views the configuration is made from (the
// workloads guarding their scale, the namespaces holding budgets) hold the
// whole cluster. A replica writing from views still filling would narrow
// the scale and budget webhooks for every replica until another one wrote:
// a starting replica (a rolling upgrade, a restart) must wait.
func (r *Registrar) synced() bool {
	if r.viewsSynced != nil {
		return r.viewsSynced()
	}
	for _, ks := range r.keySets() {
		if ks.HasSynced != nil && !ks.HasSynced() {
			return false
		}
	}
	return true
}

// errNotSynced refuses a write from half-filled views.
var errNotSynced = errors.New("this replica's cluster view is still loading: it writes no webhook configuration until it holds the whole cluster")

// waitSynced waits until the views hold the whole cluster.
func (r *Registrar) waitSynced(ctx context.Context) error {
	for !r.synced() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

func (r *Registrar) Start(ctx context.Context) error {
	if r.waitSynced(ctx) != nil {
		return nil
	}
	delay := 100 * time.Millisecond
	registered := false
	// Marks of pending coverage expire: look again now and then.
	tick := time.NewTicker(pendingFor / 3)
	defer tick.Stop()
	changes := r.keyChanges(ctx)
	for {
		_, err := r.writeInTime(ctx, backgroundWriteTimeout)
		if err != nil {
			r.log.Error(err, "registering webhook configuration; retrying", "in", delay)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(delay):
			}
			delay = min(2*delay, 10*time.Second)
			continue
		}
		if !registered {
			registered = true
			close(r.done)
			r.log.Info("webhook configuration registered", "name", rampartadmission.ValidatingConfigName)
		}
		delay = 100 * time.Millisecond
		select {
		case <-ctx.Done():
			return nil
		case <-r.kick:
		case <-tick.C:
		case <-changes:
			// Coalesce a burst of label changes into one update.
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
}

// keyChanges signals when a key set may have changed (the label of a
// workload guarding its scale).
func (r *Registrar) keyChanges(ctx context.Context) <-chan struct{} {
	out := make(chan struct{}, 1)
	for _, ks := range r.keySets() {
		if ks.Changes == nil {
			continue
		}
		go func(in <-chan struct{}) {
			for {
				select {
				case <-ctx.Done():
					return
				case <-in:
					select {
					case out <- struct{}{}:
					default:
					}
				}
			}
		}(ks.Changes)
	}
	return out
}

// keySets are the protections' key sets.
func (r *Registrar) keySets() []rampartadmission.KeySet {
	return rampartadmission.KeySets(r.protections)
}
