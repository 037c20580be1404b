package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"k8s.io/client-go/tools/cache"

	"github.com/rampart-io/rampart/internal/protection/traffic"
)

// A TrafficPolicy written through the gateway applies to the next request
// its writer sends: the answer to the write is held until the gateway's
// policy watch has applied the resourceVersion the API server gave it, so
// that `kubectl apply` of a Route or a Reject policy followed by the
// requests it is about never races the watch (a routed storm sent to the
// other API servers for the few milliseconds the watch lags). The watch
// stays the only way policies change; the fence only waits for it. A
// policy written past this gateway (to the API server, or through another
// replica) applies when the watch brings it, milliseconds later.

// policyFenceTimeout bounds the wait: past it the answer goes out, and
// the policy applies when the watch brings it.
const policyFenceTimeout = 5 * time.Second

// maxFencedBody bounds the answer read to learn its resourceVersion; a
// TrafficPolicy is a few KiB.
const maxFencedBody = 1 << 20

// policyFence is the highest resourceVersion of the TrafficPolicies the
// gateway has applied.
type policyFence struct {
	// only is the one object's name whose writes it fences; empty: every
	// object its watch sees.
	only    string
	mu      sync.Mutex
	applied uint64
	// changed is closed and replaced when applied rises.
	changed chan struct{}
}

func newPolicyFence(only string) *policyFence {
	return &policyFence{only: only, changed: make(chan struct{})}
}

// applied records that the policies now include obj (an object of the
// watch, or the tombstone of a deleted one). The watch delivers changes in
// resourceVersion order, so every change up to obj's is applied too.
func (f *policyFence) apply(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, ok := obj.(interface{ GetResourceVersion() string })
	if !ok {
		return
	}
	rv, err := strconv.ParseUint(m.GetResourceVersion(), 10, 64)
	if err != nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if rv > f.applied {
		f.applied = rv
		close(f.changed)
		f.changed = make(chan struct{})
	}
}

// wait returns once rv is applied (true), or when ctx ends or timeout
// passes (false).
func (f *policyFence) wait(ctx context.Context, rv uint64, timeout time.Duration) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		f.mu.Lock()
		applied, changed := f.applied, f.changed
		f.mu.Unlock()
		if applied >= rv {
			return true
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return false
		case <-deadline.C:
			return false
		}
	}
}

// policyWrite says whether r writes a TrafficPolicy's spec.
func policyWrite(r traffic.Request) bool {
	if !r.IsResource || r.APIGroup != TrafficPolicies.Group || r.Resource != TrafficPolicies.Resource || r.Subresource != "" {
		return false
	}
	switch r.Verb {
	case "create", "update", "patch", "delete":
		return true
	}
	return false
}

// fenceOf is the fence of the writes r may be: a TrafficPolicy's, or the
// etcd space report's (the brake holds from the answer to its write on,
// spacebrake.go); nil for other requests.
func (g *Gateway) fenceOf(r traffic.Request) *policyFence {
	switch {
	case policyWrite(r):
		return g.policyFence
	case g.spaceReportWrite(r):
		return g.space.fence
	}
	return nil
}

// fencePolicyWrite is the proxy's ModifyResponse: the answer to a
// successful write of a TrafficPolicy (or of the etcd space report) waits
// until the gateway applies the resourceVersion it carries. Other answers
// pass untouched.
func (g *Gateway) fencePolicyWrite(resp *http.Response) error {
	x := exchangeOf(resp.Request)
	if x == nil || resp.StatusCode/100 != 2 || resp.Header.Get("Content-Encoding") != "" {
		return nil
	}
	fence := g.fenceOf(x.req)
	if fence == nil {
		return nil
	}
	rest := resp.Body
	body, err := io.ReadAll(io.LimitReader(rest, maxFencedBody))
	if err != nil {
		return err
	}
	if len(body) == maxFencedBody {
		// Larger than any policy: pass it on whole, unread.
		resp.Body = readCloser{io.MultiReader(bytes.NewReader(body), rest), rest}
		return nil
	}
	resp.Body = readCloser{bytes.NewReader(body), rest}
	var obj struct {
		Metadata struct {
			Name            string `json:"name"`
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	if json.Unmarshal(body, &obj) != nil {
		return nil // not JSON (YAML, CBOR) or a Status: nothing to wait for
	}
	rv, err := strconv.ParseUint(obj.Metadata.ResourceVersion, 10, 64)
	if err != nil || fence.only != "" && obj.Metadata.Name != fence.only {
		return nil
	}
	if !fence.wait(resp.Request.Context(), rv, policyFenceTimeout) && resp.Request.Context().Err() == nil {
		g.log.Warn("written through the gateway but not applied yet: answering anyway; it applies when the gateway's watch brings it",
			"path", resp.Request.URL.Path, "resourceVersion", rv, "waited", policyFenceTimeout.String())
	}
	return nil
}

// readCloser reads what was read of a body and closes the body.
type readCloser struct {
	io.Reader
	io.Closer
}
