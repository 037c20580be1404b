package gateway

import (
	"io"
	"net/http"
	"slices"
	"sync"
	"time"
)

// How a stopping gateway ends watches matters more than when. client-go's
// reflector (v0.36, tools/cache/reflector.go) resumes from its
// resourceVersion when a watch stream ends cleanly (end of stream, or a
// reset or GOAWAY that reads as one), and backs off on "connection
// refused"; but it relists, a full LIST or watch-list of everything it
// watches, when the stream ends with an error: an HTTP/2 RST_STREAM, which
// is what a cancelled proxied request becomes (httputil.ReverseProxy
// panics with http.ErrAbortHandler and the server resets the stream), or
// a re-watch answered by anything but 429 or a refused connection.
//
// So the gateway ends each watch the way the API server's own timeout
// does: the upstream body reads io.EOF, the proxy finishes the response,
// the client sees the end of the stream. And it does not end them all at
// once: batches spread over Options.ShutdownWatchSpread, oldest first (a
// watch younger than a second that ends with no event is taken for a
// broken one, and relisted), so that the re-watches reach the other
// replicas, or the restarted gateway, as a trickle.

// streamKey carries a long-running request's stream from forward to the
// transport, which attaches the upstream body to it.
type streamKey struct{}

// stream is one long-running request in flight.
type stream struct {
	started time.Time
	mu      sync.Mutex
	body    io.Closer // the upstream body once the response has come
	ended   bool
}

// end makes the proxy's next read of the upstream body, or the one under
// way, return io.EOF.
func (s *stream) end() {
	s.mu.Lock()
	s.ended = true
	body := s.body
	s.mu.Unlock()
	if body != nil {
		_ = body.Close()
	}
}

func (s *stream) hasEnded() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended
}

// endableBody is an upstream body whose reads return io.EOF once its
// stream is ended: closing the body unblocks the read under way with an
// error, which the proxy must not see as one.
type endableBody struct {
	io.ReadCloser
	s *stream
}

func (b endableBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && b.s.hasEnded() {
		return n, io.EOF
	}
	return n, err
}

// streams are the long-running requests in flight.
type streams struct {
	mu   sync.Mutex
	open map[*stream]struct{}
}

func (ss *streams) add(now time.Time) (*stream, func()) {
	s := &stream{started: now}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.open == nil {
		ss.open = map[*stream]struct{}{}
	}
	ss.open[s] = struct{}{}
	return s, func() {
		ss.mu.Lock()
		defer ss.mu.Unlock()
		delete(ss.open, s)
	}
}

// endOldest ends the share of the streaming watches that falls to this
// batch, batchesLeft counting this one, oldest first, and returns how many
// it ended. A request whose response has not come yet has nothing to end
// cleanly; the last resort (stopLong) cancels it.
func (ss *streams) endOldest(batchesLeft int) int {
	ss.mu.Lock()
	var live []*stream
	for s := range ss.open {
		s.mu.Lock()
		if s.body != nil && !s.ended {
			live = append(live, s)
		}
		s.mu.Unlock()
	}
	ss.mu.Unlock()
	slices.SortFunc(live, func(a, b *stream) int { return a.started.Compare(b.started) })
	n := batchSize(len(live), batchesLeft)
	for _, s := range live[:n] {
		s.end()
	}
	return n
}

// batchSize spreads what is left evenly over the batches left, so that
// watches that start during the drain are ended too, and the last batch
// ends everything.
func batchSize(left, batchesLeft int) int {
	if batchesLeft <= 1 {
		return left
	}
	return (left + batchesLeft - 1) / batchesLeft
}

// drainBatch is how often a stopping gateway ends a batch of watches.
const drainBatch = 100 * time.Millisecond

// endStreams ends every streaming watch in batches over spread.
func (g *Gateway) endStreams(spread time.Duration) {
	batches := max(int(spread/drainBatch), 1)
	tick := time.NewTicker(drainBatch)
	defer tick.Stop()
	ended := 0
	for left := batches; left > 0; left-- {
		ended += g.streams.endOldest(left)
		if left > 1 {
			<-tick.C
		}
	}
	g.log.Info("watches ended for shutdown", "watches", ended, "over", spread.String())
}

// endableTransport attaches the upstream body of a long-running request to
// its stream, so that a stopping gateway can end it cleanly.
type endableTransport struct{ next http.RoundTripper }

func (t endableTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(r)
	s, ok := r.Context().Value(streamKey{}).(*stream)
	// An upgraded connection (exec, attach, port-forward) is hijacked by
	// the proxy, which needs its body as it is.
	if err != nil || !ok || resp.StatusCode == http.StatusSwitchingProtocols {
		return resp, err
	}
	s.mu.Lock()
	s.body = resp.Body
	s.mu.Unlock()
	resp.Body = endableBody{ReadCloser: resp.Body, s: s}
	return resp, nil
}
