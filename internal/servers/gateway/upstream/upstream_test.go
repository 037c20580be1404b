package upstream

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"
)

func urls(t *testing.T, ss ...string) []*url.URL {
	var out []*url.URL
	for _, s := range ss {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, u)
	}
	return out
}

var t0 = time.Unix(1_800_000_000, 0)

func TestPickLeastInFlight(t *testing.T) {
	p := NewPool(urls(t, "https://a", "https://b", "https://c"), Defaults, t0)
	a, b, c := p.Servers[0], p.Servers[1], p.Servers[2]
	a.InFlight.Store(5)
	b.InFlight.Store(1)
	c.InFlight.Store(3)
	for range 10 {
		if got := p.Pick(false, t0); got != b {
			t.Fatalf("picked %s with %d in flight, want b with 1", got.URL.Host, got.InFlight.Load())
		}
	}
	// Watches are balanced by streams, not short requests.
	b.Streams.Store(10)
	if got := p.Pick(true, t0); got == b {
		t.Fatal("picked b for a watch although it holds 10 streams and the others none")
	}
}

func TestTiesSpreadOverServers(t *testing.T) {
	p := NewPool(urls(t, "https://a", "https://b"), Defaults, t0)
	seen := map[string]int{}
	for range 10 {
		seen[p.Pick(false, t0).URL.Host]++
	}
	if seen["a"] == 0 || seen["b"] == 0 {
		t.Fatalf("idle servers picked %v: ties all went to one", seen)
	}
}

func TestPassiveEjectionAndSlowStart(t *testing.T) {
	opts := Options{EjectAfter: 3, EjectFor: 10 * time.Second, SlowStart: 10 * time.Second}
	p := NewPool(urls(t, "https://a", "https://b"), opts, t0)
	a, b := p.Servers[0], p.Servers[1]
	p.Failed(a, t0)
	p.Succeeded(a) // a success in between resets the count
	p.Failed(a, t0)
	if p.Failed(a, t0) {
		t.Fatal("ejected after 2 consecutive failures, want 3")
	}
	if !p.Failed(a, t0) {
		t.Fatal("not ejected after 3 consecutive failures")
	}
	for range 5 {
		if got := p.Pick(false, t0.Add(time.Second)); got != b {
			t.Fatal("an ejected server was picked while another is available")
		}
	}
	// Back after EjectFor, at a tenth of its weight: b with 5 in flight
	// still wins over an idle a (score 1/0.1 = 10 > 6).
	back := t0.Add(10 * time.Second)
	b.InFlight.Store(5)
	if got := p.Pick(false, back); got != b {
		t.Fatal("a returning server received a full share at once")
	}
	if w := p.Weight(a, back.Add(5*time.Second)); w < 0.45 || w > 0.55 {
		t.Errorf("weight half-way through slow start = %.2f, want 0.5", w)
	}
	if got := p.Pick(false, back.Add(10*time.Second)); got != a {
		t.Fatal("after slow start the idle server is not preferred")
	}
}

func TestReadinessAndPanicMode(t *testing.T) {
	p := NewPool(urls(t, "https://a", "https://b"), Defaults, t0)
	a, b := p.Servers[0], p.Servers[1]
	p.Checked(a, false, t0)
	if got := p.Pick(false, t0); got != b {
		t.Fatal("a server failing /readyz was picked")
	}
	p.Checked(b, false, t0)
	if got := p.Pick(false, t0); got == nil {
		t.Fatal("no server picked when all fail /readyz: trying one beats refusing every request")
	}
	p.Checked(a, true, t0)
	if w := p.Weight(a, t0); w != 0.1 {
		t.Errorf("a server turning ready starts at weight %.2f, want 0.1", w)
	}
}

// tlsServer is a kube-apiserver stand-in that names itself in answers.
func tlsServer(t *testing.T, name string) *httptest.Server {
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s %s", name, r.Proto, r.URL.Path)
	}))
	s.EnableHTTP2 = true
	s.StartTLS()
	t.Cleanup(s.Close)
	return s
}

func TestTransportTriesAnotherServerWhenOneIsDown(t *testing.T) {
	up := tlsServer(t, "up")
	down := tlsServer(t, "down")
	downURL := down.URL
	down.Close()
	p := NewPool(urls(t, downURL, up.URL), Defaults, t0)
	tr := NewTransport(Pools{p}, up.Client().Transport.(*http.Transport).TLSClientConfig)
	tr.LongRunning = func(r *http.Request) bool { return r.URL.Query().Get("watch") == "true" }
	client := &http.Client{Transport: tr}
	for i, c := range []struct{ path, want string }{
		{"/api/v1/pods", "up HTTP/1.1 /api/v1/pods"},
		{"/api/v1/pods?watch=true", "up HTTP/2.0 /api/v1/pods"},
		{"/api/v1/pods", "up HTTP/1.1 /api/v1/pods"},
		{"/api/v1/pods?watch=true", "up HTTP/2.0 /api/v1/pods"},
	} {
		resp, err := client.Get("https://gateway.invalid" + c.path)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != c.want {
			t.Fatalf("request %d (%s) answered %q, want %q: short requests over HTTP/1.1, long-running ones over HTTP/2, all from the live server", i, c.path, body, c.want)
		}
	}
	if p.Servers[0].Available(time.Now()) {
		t.Error("the server refusing connections was not ejected")
	}
	if n := p.Servers[1].InFlight.Load() + p.Servers[1].Streams.Load(); n != 0 {
		t.Errorf("%d requests still counted in flight after their bodies were closed", n)
	}
}

// Upgraded connections (exec, attach, port-forward) pass through the
// reverse proxy over HTTP/1.1 in both directions.
func TestUpgradedConnectionPassesThroughBothWays(t *testing.T) {
	echo := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "SPDY/3.1" {
			http.Error(w, "want an upgrade", http.StatusBadRequest)
			return
		}
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		fmt.Fprintf(buf, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n")
		buf.Flush()
		line, _ := buf.ReadString('\n')
		fmt.Fprintf(buf, "echo: %s", line)
		buf.Flush()
	}))
	echo.StartTLS()
	defer echo.Close()
	p := NewPool(urls(t, echo.URL), Defaults, t0)
	tr := NewTransport(Pools{p}, echo.Client().Transport.(*http.Transport).TLSClientConfig)
	proxy := httptest.NewServer(&httputil.ReverseProxy{Transport: tr, Rewrite: func(r *httputil.ProxyRequest) {
		r.Out.URL.Scheme, r.Out.URL.Host = "https", "upstream"
	}})
	defer proxy.Close()

	conn, err := net.Dial("tcp", strings.TrimPrefix(proxy.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /api/v1/namespaces/shop/pods/web/exec HTTP/1.1\r\nHost: gw\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n")
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("status %s, want 101", resp.Status)
	}
	fmt.Fprintf(conn, "hello through the gateway\n")
	line, err := r.ReadString('\n')
	if err != nil || line != "echo: hello through the gateway\n" {
		t.Fatalf("read %q, %v through the upgraded connection", line, err)
	}
}

// An API server failing /readyz (starting, or shutting down) leaves
// rotation on the first check, before any request fails on it.
func TestReadyzCheckTakesUnreadyServerOut(t *testing.T) {
	ready := tlsServer(t, "ready")
	unready := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "[-]etcd failed", http.StatusInternalServerError)
	}))
	unready.EnableHTTP2 = true
	unready.StartTLS()
	defer unready.Close()
	p := NewPool(urls(t, unready.URL, ready.URL), Defaults, time.Now())
	tlsConfig := ready.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	tlsConfig.RootCAs.AddCert(unready.Certificate())
	tr := NewTransport(Pools{p}, tlsConfig)
	changed := make(chan *Server, 2)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tr.CheckReady(ctx, time.Hour, func(_ *Pool, s *Server, _ bool) { changed <- s })
	}()
	if s := <-changed; s != p.Servers[0] {
		t.Fatalf("%s changed availability, want the unready server", s.URL)
	}
	cancel()
	<-done
	for range 5 {
		if got := p.Pick(false, time.Now()); got != p.Servers[1] {
			t.Fatal("a server failing /readyz was picked")
		}
	}
}

// A routed request goes to its pool's servers only; with a fallback, a
// pool with no server available sends it to the fallback pool at once, and
// a request that fails on every server of its pool before an answer is
// tried on the fallback's; without one, it fails (the guard has answered
// 503 before it got here, or the pool is the default one).
func TestTransportRoutesToPoolAndFallsBack(t *testing.T) {
	a, b, heavy := tlsServer(t, "a"), tlsServer(t, "b"), tlsServer(t, "heavy")
	tlsConfig := a.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	tlsConfig.RootCAs.AddCert(b.Certificate())
	tlsConfig.RootCAs.AddCert(heavy.Certificate())
	now := time.Now()
	def := NewPool(urls(t, a.URL, b.URL), Defaults, now)
	hp := NewNamedPool("heavy", urls(t, heavy.URL), Defaults, now)
	tr := NewTransport(Pools{def, hp}, tlsConfig)
	fallback := false
	tr.Route = func(r *http.Request) (*Pool, *Pool) {
		if r.URL.Query().Get("pool") == "heavy" {
			if fallback {
				return hp, def
			}
			return hp, nil
		}
		return def, nil
	}
	client := &http.Client{Transport: tr}
	answer := func(path string) (string, error) {
		resp, err := client.Get("https://gateway.invalid" + path)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return strings.Fields(string(body))[0], nil
	}
	for range 10 {
		if got, err := answer("/api/v1/pods?pool=heavy"); err != nil || got != "heavy" {
			t.Fatalf("routed request answered by %q (%v), want heavy", got, err)
		}
		if got, err := answer("/api/v1/configmaps"); err != nil || got == "heavy" {
			t.Fatalf("default request answered by %q (%v), want a or b", got, err)
		}
	}
	if hp.Servers[0].Requests.Load() != 10 || def.Servers[0].Requests.Load()+def.Servers[1].Requests.Load() != 10 {
		t.Errorf("requests by server: heavy %d, a %d, b %d; want 10 and 10 between a and b",
			hp.Servers[0].Requests.Load(), def.Servers[0].Requests.Load(), def.Servers[1].Requests.Load())
	}

	// Down: a crashed server fails before any answer.
	heavy.Close()
	if _, err := answer("/api/v1/pods?pool=heavy"); err == nil {
		t.Fatal("a routed request without fallback was answered by another pool while its own was down")
	}
	fallback = true
	if got, err := answer("/api/v1/pods?pool=heavy"); err != nil || got == "heavy" {
		t.Fatalf("with a fallback, the request failing on its pool got %q, %v; want the default pool's answer", got, err)
	}
	// Out of rotation (ejected after its failures, or failing /readyz):
	// straight to the fallback, without trying it.
	for range Defaults.EjectAfter {
		hp.Failed(hp.Servers[0], time.Now())
	}
	if hp.Available(time.Now()) {
		t.Fatal("heavy still available after its failures")
	}
	before := hp.Servers[0].Requests.Load()
	if got, err := answer("/api/v1/pods?pool=heavy"); err != nil || got == "heavy" {
		t.Fatalf("fell back to %q, %v", got, err)
	}
	if hp.Servers[0].Requests.Load() != before {
		t.Error("a request was sent to the pool that has no server available, though it had a fallback")
	}
}
