package upstream

import (
	"context"
	"net/http"
	"sync"
	"time"
)

// CheckReady asks every server's /readyz, in every pool, each interval until ctx ends and
// records the answers; onChange hears each change of readiness. A
// kube-apiserver answers /readyz with 200 only once its storage, caches
// and post-start hooks are ready, and with 500 as soon as it starts
// shutting down: a better signal than a TCP connect.
func (t *Transport) CheckReady(ctx context.Context, interval time.Duration, onChange func(p *Pool, s *Server, ready bool)) {
	client := t.HealthClient()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		// Concurrently: a server that hangs must not delay the news
		// about the others.
		var wg sync.WaitGroup
		for _, pool := range t.Pools {
			for _, s := range pool.Servers {
				wg.Go(func() {
					ready := probe(ctx, client, s)
					if ctx.Err() != nil {
						return // stopping: a cut probe says nothing about s
					}
					was := s.Available(t.Now())
					pool.Checked(s, ready, t.Now())
					if s.Available(t.Now()) != was && onChange != nil {
						onChange(pool, s, ready)
					}
				})
			}
		}
		wg.Wait()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func probe(ctx context.Context, client *http.Client, s *Server) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL.JoinPath("/readyz").String(), nil)
	if err != nil {
		return false
	}
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
