package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/rampart-io/rampart/internal/pki"
)

// fakeAPIServer answers what the gateway itself asks (readiness, the
// TrafficPolicy list and watch) and, for the test, an upgraded exec
// stream that echoes one line and reports the identity it was sent.
func fakeAPIServer(t *testing.T, ca *pki.KeyPair) *httptest.Server {
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
	self, err := ca.Issue(pki.Request{CommonName: "rampart-gateway", Client: true, Now: now, Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	selfKey, _ := self.KeyPEM()
	cfg := &rest.Config{Host: upstream.URL, TLSClientConfig: rest.TLSClientConfig{CAData: ca.CertPEM(), CertData: self.CertPEM(), KeyData: selfKey}}
	g, err := New(cfg, Options{Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- g.Serve(ctx, ln) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()

	conn, err := net.Dial("tcp", ln.Addr().String())
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

	conn2, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close()
	fmt.Fprintf(conn2, "POST /api/v1/namespaces/shop/pods/web/exec?command=sh HTTP/1.1\r\nHost: gw\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n")
	r = bufio.NewReader(conn2)
	if resp, err = http.ReadResponse(r, nil); err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("exec upgrade through the gateway: %v %v, want 101", resp, err)
	}
	fmt.Fprintf(conn2, "echo hi\n")
	line, err := r.ReadString('\n')
	want := `as system:anonymous [system:unauthenticated], authorization "": echo hi` + "\n"
	if err != nil || line != want {
		t.Fatalf("through the upgraded stream: %q, %v\nwant %q", line, err, want)
	}
}
