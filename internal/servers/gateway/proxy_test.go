package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/rampart-io/rampart/internal/plumbing/pki"
	"github.com/rampart-io/rampart/internal/plumbing/trafficlog"
)

// fakeAPIServer answers what the gateway itself asks (readiness, the
// TrafficPolicy list and watch) and, for the test, an upgraded exec
// stream that echoes one line and reports the identity it was sent.
func fakeAPIServer(t testing.TB, ca *pki.KeyPair) *httptest.Server {
	t.Helper()
	serving, err := ca.Issue(pki.Request{CommonName: "kube-apiserver", Hosts: []string{"127.0.0.1"}, Now: time.Now(), Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	key, _ := serving.KeyPEM()
	pair, err := tls.X509KeyPair(serving.CertPEM(), key)
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/readyz":
			fmt.Fprint(w, "ok")
		case strings.HasSuffix(r.URL.Path, "/trafficpolicies") && r.URL.Query().Get("watch") == "true":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			// client-go lists by watch: no policies, then the end of the
			// initial events.
			fmt.Fprint(w, `{"type":"BOOKMARK","object":{"kind":"TrafficPolicy","apiVersion":"rampart.io/v1alpha1","metadata":{"resourceVersion":"1","annotations":{"k8s.io/initial-events-end":"true"}}}}`+"\n")
			_ = http.NewResponseController(w).Flush()
			<-r.Context().Done()
		case strings.HasSuffix(r.URL.Path, "/trafficpolicies"):
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"kind":"TrafficPolicyList","apiVersion":"rampart.io/v1alpha1","metadata":{"resourceVersion":"1"},"items":[]}`)
		case r.URL.Path == "/api/v1/namespaces/bench/configmaps" && r.URL.Query().Has("broken"):
			// Says gzip, is not.
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Encoding", "gzip")
			_, _ = w.Write([]byte("\x1f\x8b not gzip at all {\"items\":[{}]}"))
		case r.URL.Path == "/api/v1/namespaces/bench/configmaps":
			// A LIST of n small items, streamed.
			n, _ := strconv.Atoi(r.URL.Query().Get("n"))
			w.Header().Set("Content-Type", "application/json")
			bw := bufio.NewWriter(w)
			fmt.Fprint(bw, `{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":[`)
			for i := range n {
				if i > 0 {
					_ = bw.WriteByte(',')
				}
				fmt.Fprintf(bw, `{"metadata":{"name":"cm-%d","annotations":{"x":"]}\"items\":["}}}`, i)
			}
			fmt.Fprint(bw, `]}`)
			_ = bw.Flush()
		case strings.HasPrefix(r.URL.Path, "/api/v1/namespaces/bench/configmaps/"):
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(benchObject)
		case strings.HasSuffix(r.URL.Path, "/exec") && r.Header.Get("Upgrade") != "":
			conn, buf, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close()
			fmt.Fprintf(buf, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\n", r.Header.Get("Upgrade"))
			buf.Flush()
			line, _ := buf.ReadString('\n')
			fmt.Fprintf(buf, "as %s %v, authorization %q: %s", r.Header.Get("Impersonate-User"), r.Header.Values("Impersonate-Group"), r.Header.Get("Authorization"), line)
			buf.Flush()
		default:
			http.NotFound(w, r)
		}
	}))
	// HTTP/2, as kube-apiserver offers it: the direct GETs of
	// BenchmarkProxyOverhead then speak what client-go speaks in a
	// cluster (without it they fell back to HTTP/1.1, and direct looked
	// cheaper than a client of the real API server pays); the gateway's
	// upstream leg chooses HTTP/1.1 for short requests itself.
	s.EnableHTTP2 = true
	s.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	s.StartTLS()
	t.Cleanup(s.Close)
	return s
}

// An exec stream (an upgraded connection) passes through the gateway both
// ways, forwarded as the client the gateway authenticated (here an
// anonymous one) and without the client's Authorization header.
func TestUpgradedExecStreamPassesThroughGateway(t *testing.T) {
	now := time.Now()
	ca, err := pki.NewCA("test-ca", now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	upstream := fakeAPIServer(t, ca)
	addr := startGateway(t, ca, upstream.URL, Options{Log: slog.New(slog.DiscardHandler)}, nil)

	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /api/v1/namespaces/shop/pods/web/exec?command=sh HTTP/1.1\r\nHost: gw\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"+
		"Impersonate-User: rampart-admin\r\nAuthorization: Basic ZXZlOmV2ZQ==\r\n\r\n")
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("basic auth answered %s, want 401: the gateway accepts certificates and bearer tokens", resp.Status)
	}
	_, _ = io.Copy(io.Discard, resp.Body)

	if got, want := execEcho(t, addr), `as system:anonymous [system:unauthenticated], authorization "": echo hi`+"\n"; got != want {
		t.Fatalf("through the upgraded stream: %q\nwant %q", got, want)
	}
}

// A gateway that authenticates with a token (a service account's, in a
// cluster) sends it, never the client's, with the impersonation.
func TestGatewayWithTokenForwardsItsOwnToken(t *testing.T) {
	ca, err := pki.NewCA("test-ca", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	upstream := fakeAPIServer(t, ca)
	addr := startGateway(t, ca, upstream.URL, Options{Log: slog.New(slog.DiscardHandler)}, func(c *rest.Config) {
		c.CertData, c.KeyData, c.BearerToken = nil, nil, "gateway-token"
	})
	if got, want := execEcho(t, addr), `as system:anonymous [system:unauthenticated], authorization "Bearer gateway-token": echo hi`+"\n"; got != want {
		t.Fatalf("through the upgraded stream: %q\nwant %q", got, want)
	}
}

// execEcho opens an exec stream through the gateway at addr, sends a line
// and returns what the stand-in API server echoes.
func execEcho(t *testing.T, addr string) string {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /api/v1/namespaces/shop/pods/web/exec?command=sh HTTP/1.1\r\nHost: gw\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n")
	r := bufio.NewReader(conn)
	if resp, err := http.ReadResponse(r, nil); err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("exec upgrade through the gateway: %v %v, want 101", resp, err)
	}
	fmt.Fprintf(conn, "echo hi\n")
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return line
}

// startGateway runs a gateway in front of upstream, with its own client
// certificate from ca, until the test ends, and returns its address.
func startGateway(t testing.TB, ca *pki.KeyPair, upstream string, opts Options, adjust func(*rest.Config)) string {
	t.Helper()
	self, err := ca.Issue(pki.Request{CommonName: "rampart-gateway", Client: true, Now: time.Now(), Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	selfKey, _ := self.KeyPEM()
	cfg := &rest.Config{Host: upstream, TLSClientConfig: rest.TLSClientConfig{CAData: ca.CertPEM(), CertData: self.CertPEM(), KeyData: selfKey}}
	if adjust != nil {
		adjust(cfg)
	}
	// Everything the gateway starts, in New (its watches, its upstream
	// connections) and in Serve, carries the label side=gateway, so a
	// CPU profile tells the gateway's own time from the client's and the
	// stand-in API server's (hack/gateway-cpu.sh).
	labels := pprof.Labels("side", "gateway")
	var g *Gateway
	pprof.Do(context.Background(), labels, func(context.Context) { g, err = New(cfg, opts) })
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go pprof.Do(ctx, labels, func(ctx context.Context) { done <- g.Serve(ctx, ln) })
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return ln.Addr().String()
}

// A LIST of hundreds of thousands of objects is counted as it streams,
// and an answer that lies about its encoding is passed on uncounted: the
// gateway serves on, and its traffic log says what it could.
func TestTrafficLogCountsHugeListsAndSurvivesBrokenOnes(t *testing.T) {
	ca, err := pki.NewCA("test-ca", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	upstream := fakeAPIServer(t, ca)
	logPath := t.TempDir() + "/traffic.log"
	addr := startGateway(t, ca, upstream.URL, Options{Log: slog.New(slog.DiscardHandler), TrafficLog: trafficlog.File(logPath, 10, 1)}, nil)
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	const huge = 300000
	sent := map[string]int64{}
	for _, q := range []string{"n=" + strconv.Itoa(huge), "broken=1", "n=0"} {
		resp, err := client.Get("http://" + addr + "/api/v1/namespaces/bench/configmaps?" + q)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %s", q, resp.Status)
		}
		sent[q] = n
	}
	if resp, err := client.Get("http://" + addr + "/api/v1/namespaces/bench/configmaps/bench"); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the gateway after a broken answer: %v %v", resp, err)
	}
	want := map[string]string{
		"n=" + strconv.Itoa(huge): fmt.Sprintf(`"responseBytes":%d,"objects":%d,`, sent["n="+strconv.Itoa(huge)], huge),
		"broken=1":                fmt.Sprintf(`"responseBytes":%d,"verdict"`, sent["broken=1"]),
		"n=0":                     fmt.Sprintf(`"responseBytes":%d,"objects":0,`, sent["n=0"]),
	}
	var log []byte
	deadline := time.Now().Add(10 * time.Second)
	for {
		log, _ = os.ReadFile(logPath)
		if strings.Count(string(log), "\n") >= 4 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	lines := strings.Split(strings.TrimSpace(string(log)), "\n")
	if len(lines) != 4 {
		t.Fatalf("traffic log:\n%s\nwant 4 lines", log)
	}
	for i, q := range []string{"n=" + strconv.Itoa(huge), "broken=1", "n=0"} {
		if !strings.Contains(lines[i], `"verb":"list"`) || !strings.Contains(lines[i], `"code":200`) || !strings.Contains(lines[i], want[q]) {
			t.Errorf("line for ?%s: %s\nwant %s", q, lines[i], want[q])
		}
	}
	if !strings.Contains(lines[3], `"verb":"get"`) || strings.Contains(lines[3], `"objects"`) {
		t.Errorf("GET line: %s", lines[3])
	}
}

var benchObject = []byte(`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"bench","namespace":"bench","uid":"6f1c1a52-7c1e-4a43-9b0e-1b2b1c0d9e11","resourceVersion":"12345","creationTimestamp":"2026-11-22T08:00:00Z"},"data":{"config":"` + strings.Repeat("x", 800) + `"}}`)

// BenchmarkProxyOverhead measures what the gateway itself costs a GET,
// free of any API server's noise: the same small object from a stand-in
// API server, directly and through the gateway (TLS on both sides, HTTP/2
// from the client, as deployed), and through a gateway writing its traffic log.
// Compare the ns/op: the gateway's own machine time per GET is
// gateway/parallel minus direct/parallel.
func BenchmarkProxyOverhead(b *testing.B) {
	ca, err := pki.NewCA("bench-ca", time.Now(), time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	upstream := fakeAPIServer(b, ca)
	serving, err := ca.Issue(pki.Request{CommonName: "gw", Hosts: []string{"127.0.0.1"}, Now: time.Now(), Validity: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	if err := serving.Write(dir + "/gw"); err != nil {
		b.Fatal(err)
	}
	gw := startGateway(b, ca, upstream.URL, Options{Log: slog.New(slog.DiscardHandler), CertFile: dir + "/gw.crt", KeyFile: dir + "/gw.key"}, nil)
	// The same gateway with every request written to a traffic log file.
	logged := startGateway(b, ca, upstream.URL, Options{Log: slog.New(slog.DiscardHandler), CertFile: dir + "/gw.crt", KeyFile: dir + "/gw.key",
		TrafficLog: trafficlog.File(dir+"/traffic.log", 100, 1)}, nil)
	client, err := rest.HTTPClientFor(&rest.Config{Host: upstream.URL, TLSClientConfig: rest.TLSClientConfig{CAData: ca.CertPEM()}})
	if err != nil {
		b.Fatal(err)
	}
	get := func(b *testing.B, url string) bool {
		resp, err := client.Get(url)
		if err != nil {
			b.Error(err)
			return false
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Errorf("%s: %s", url, resp.Status)
			return false
		}
		return true
	}
	// The floor of any proxy that ends TLS: a pipe that decrypts and
	// encrypts again and reads nothing (no HTTP), each client connection
	// on a connection of its own to the stand-in API server.
	pipe := startTLSPipe(b, ca, dir+"/gw.crt", dir+"/gw.key", strings.TrimPrefix(upstream.URL, "https://"))
	// And the floor of a proxy built on net/http as the gateway is: a bare
	// httputil.ReverseProxy behind an HTTP/2 server, its upstream leg over
	// HTTP/1.1 as the gateway's short requests go, and nothing else.
	bare := startBareReverseProxy(b, ca, dir+"/gw.crt", dir+"/gw.key", upstream.URL, false)
	// The same with an upstream leg that hands nothing to other
	// goroutines: what net/http's client loops cost.
	bareSync := startBareReverseProxy(b, ca, dir+"/gw.crt", dir+"/gw.key", upstream.URL, true)
	for _, target := range []struct{ name, base string }{{"direct", upstream.URL}, {"gateway", "https://" + gw}, {"gateway-traffic-log", "https://" + logged}, {"tls-pipe", "https://" + pipe}, {"reverseproxy", "https://" + bare}, {"reverseproxy-sync", "https://" + bareSync}} {
		url := target.base + "/api/v1/namespaces/bench/configmaps/bench"
		// One request at a time: ns/op is the latency.
		b.Run(target.name+"/sequential", func(b *testing.B) {
			for b.Loop() {
				if !get(b, url) {
					return
				}
			}
		})
		// Many at a time: ns/op is the machine time per request.
		b.Run(target.name+"/parallel", func(b *testing.B) {
			b.SetParallelism(4)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if !get(b, url) {
						return
					}
				}
			})
		})
	}
}

// startTLSPipe serves TLS with the certificate in certFile and keyFile and
// copies each connection's bytes, in both directions, to a TLS connection
// of its own to upstream, offering the protocol the client chose (so
// HTTP/2 goes through end to end). Its goroutines carry the label
// side=gateway, as the gateway's do, for hack/gateway-cpu.sh.
func startTLSPipe(t testing.TB, ca *pki.KeyPair, certFile, keyFile, upstream string) string {
	t.Helper()
	pair, roots := proxyTLS(t, ca, certFile, keyFile)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}, NextProtos: []string{"h2", "http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	serve := func(c net.Conn) {
		defer c.Close()
		in := c.(*tls.Conn)
		if err := in.Handshake(); err != nil {
			return
		}
		out, err := tls.Dial("tcp", upstream, &tls.Config{RootCAs: roots, NextProtos: []string{in.ConnectionState().NegotiatedProtocol}})
		if err != nil {
			return
		}
		defer out.Close()
		go func() { _, _ = io.Copy(in, out); _ = in.Close() }()
		_, _ = io.Copy(out, in)
	}
	go pprof.Do(context.Background(), pprof.Labels("side", "gateway"), func(context.Context) {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serve(c)
		}
	})
	return ln.Addr().String()
}

// startBareReverseProxy serves, over TLS and HTTP/2, an
// httputil.ReverseProxy to upstream whose transport speaks HTTP/1.1 (net/http's,
// or syncTransport when syncUpstream is true), under the label side=gateway, and
// returns its address.
func startBareReverseProxy(t testing.TB, ca *pki.KeyPair, certFile, keyFile, upstream string, syncUpstream bool) string {
	t.Helper()
	pair, roots := proxyTLS(t, ca, certFile, keyFile)
	target, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, Protocols: &protocols, MaxIdleConnsPerHost: 600, DisableCompression: true}
	if syncUpstream {
		proxy.Transport = &syncTransport{addr: target.Host, conf: &tls.Config{RootCAs: roots, NextProtos: []string{"http/1.1"}}}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: proxy, TLSConfig: &tls.Config{Certificates: []tls.Certificate{pair}}}
	go pprof.Do(context.Background(), pprof.Labels("side", "gateway"), func(context.Context) { _ = srv.ServeTLS(ln, "", "") })
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// proxyTLS loads a stand-in proxy's serving pair and the roots it trusts
// the stand-in API server by.
func proxyTLS(t testing.TB, ca *pki.KeyPair, certFile, keyFile string) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM())
	return pair, roots
}
