package gateway_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
)

// watchLog records, on the clients' side, each request of a set of
// informers and when their watch streams ended.
type watchLog struct {
	mu       sync.Mutex
	requests []string // "relist" or "rewatch", in order
	ended    []time.Time
	errs     []string
}

func (l *watchLog) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripper(func(r *http.Request) (*http.Response, error) {
		q := r.URL.Query()
		kind := "relist" // a LIST, or a watch that asks for the initial events
		if q.Get("watch") == "true" && q.Get("sendInitialEvents") != "true" {
			kind = "rewatch"
		}
		l.mu.Lock()
		l.requests = append(l.requests, kind)
		l.mu.Unlock()
		resp, err := next.RoundTrip(r)
		if err != nil || q.Get("watch") != "true" || resp.StatusCode != http.StatusOK {
			return resp, err
		}
		resp.Body = &notifyingBody{ReadCloser: resp.Body, done: func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.ended = append(l.ended, time.Now())
		}}
		return resp, nil
	})
}

func (l *watchLog) count(kind string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, k := range l.requests {
		if k == kind {
			n++
		}
	}
	return n
}

func (l *watchLog) endedSince(from time.Time) []time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.DeleteFunc(slices.Clone(l.ended), func(at time.Time) bool { return at.Before(from) })
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

type notifyingBody struct {
	io.ReadCloser
	once sync.Once
	done func()
}

func (b *notifyingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.once.Do(b.done)
	}
	return n, err
}

// A gateway stopped with SIGTERM ends its watches over
// --shutdown-watch-spread rather than at once, and each so that the
// informer resumes from its resourceVersion: no informer relists, across
// the stop and the restart, and every one sees what changed meanwhile.
func TestGracefulStopEndsWatchesSpreadWithoutRelist(t *testing.T) {
	env := clustertest.Get(t)
	ns := env.Namespace(t)
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logr.Discard()))
	defer cancel()
	const informersN = 40
	log := &watchLog{}
	var synced []cache.InformerSynced
	var listers []func(name string) bool
	for range informersN {
		cfg := viaGateway(t, env)
		cfg.WrapTransport = log.wrap
		// A connection each, as separate processes would have: a dialer
		// of its own keeps client-go from sharing a cached transport.
		dialer := &net.Dialer{}
		cfg.Dial = dialer.DialContext
		f := informers.NewSharedInformerFactoryWithOptions(clientFor(t, cfg), 0, informers.WithNamespace(ns))
		cms := f.Core().V1().ConfigMaps()
		inf := cms.Informer()
		_ = inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
			log.mu.Lock()
			log.errs = append(log.errs, err.Error())
			log.mu.Unlock()
		})
		synced = append(synced, inf.HasSynced)
		listers = append(listers, func(name string) bool { _, err := cms.Lister().ConfigMaps(ns).Get(name); return err == nil })
		f.StartWithContext(ctx)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		t.Fatal("informers did not sync through the gateway")
	}
	// A watch younger than a second that ends with no event is relisted
	// by client-go whatever the way it ends.
	time.Sleep(2 * time.Second)
	relists := log.count("relist")

	stop := time.Now()
	if err := env.StopComponent(localcluster.GatewayName); err != nil {
		t.Fatal(err)
	}
	stopped := time.Since(stop)
	if _, err := env.Client.CoreV1().ConfigMaps(ns).Create(ctx, configMap("while-down"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := env.StartGateway(ctx); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		for _, seen := range listers {
			if !seen("while-down") {
				return false, nil
			}
		}
		return true, nil
	})
	ended := log.endedSince(stop)
	t.Logf("stop took %v; %d watches ended, first %v last %v after the stop; requests since: %d relists, %d re-watches; errors %q",
		stopped, len(ended), ended[0].Sub(stop), ended[len(ended)-1].Sub(stop), log.count("relist")-relists, log.count("rewatch"), log.errs)
	if err != nil {
		t.Fatal("not every informer saw the configmap created while the gateway was down")
	}
	if n := log.count("relist") - relists; n != 0 {
		t.Errorf("%d informers relisted across a graceful restart of the gateway, want 0", n)
	}
}
