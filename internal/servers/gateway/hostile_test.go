package gateway_test

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/rest"

	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
	"github.com/rampart-io/rampart/internal/plumbing/pki"
)

// These tests use the gateway only as a client does: the running gateway
// of the package's local cluster, on loopback, through its URL.

// hostileUser is a client certificate for a user with no rights beyond
// system:authenticated, and the HTTP clients that present it through the
// gateway and straight to the API server.
func hostileUser(t *testing.T, env *clustertest.Env) (user string, gateway, direct *http.Client) {
	t.Helper()
	user = "nobody-" + strings.ToLower(rand.String(6))
	ca, err := pki.Load(strings.TrimSuffix(env.PKIFile("ca.crt"), ".crt"))
	if err != nil {
		t.Fatal(err)
	}
	kp, err := ca.Issue(pki.Request{CommonName: user, Client: true, Now: time.Now(), Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	key, err := kp.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	mk := func(host string, caData []byte) *http.Client {
		c, err := rest.HTTPClientFor(&rest.Config{Host: host, TLSClientConfig: rest.TLSClientConfig{CAData: caData, CertData: kp.CertPEM(), KeyData: key}})
		if err != nil {
			t.Fatal(err)
		}
		c.Timeout = 20 * time.Second
		return c
	}
	return user, mk(env.GatewayURL(), ca.CertPEM()), mk(env.Config.Host, env.Config.TLSClientConfig.CAData)
}

// steadyClient is a normal client (the admin, through the gateway) that
// GETs a namespace every 20ms until stopped, and reports its successes.
func steadyClient(t *testing.T, env *clustertest.Env) (stop func() (ok, total int64)) {
	t.Helper()
	cfg := viaGateway(t, env)
	c, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.Timeout = 10 * time.Second
	var okN, total atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			total.Add(1)
			resp, err := c.Get(env.GatewayURL() + "/api/v1/namespaces/default")
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					okN.Add(1)
				} else {
					t.Logf("normal client: HTTP %d", resp.StatusCode)
				}
			} else {
				t.Logf("normal client: %v", err)
			}
		}
	}()
	return func() (int64, int64) {
		close(done)
		wg.Wait()
		return okN.Load(), total.Load()
	}
}

func gatewayAddr(t *testing.T, env *clustertest.Env) string {
	u, err := url.Parse(env.GatewayURL())
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// tlsDial opens a TLS connection to the gateway with no client
// certificate (as an anonymous attacker), offering protos by ALPN.
func tlsDial(addr string, protos ...string) (*tls.Conn, error) {
	d := &net.Dialer{Timeout: 5 * time.Second}
	return tls.DialWithDialer(d, "tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: protos}) //nolint:gosec // the attacker checks nothing
}

// Hostile clients — slow headers, thousands of idle connections, oversized
// headers, malformed HTTP/2 — leave a normal client served (at least 99%
// of its requests succeed throughout), and the gateway answers afresh
// after each.
func TestHostileClientsLeaveNormalClientsServed(t *testing.T) {
	env := clustertest.Get(t)
	addr := gatewayAddr(t, env)
	stop := steadyClient(t, env)
	defer func() {
		ok, total := stop()
		t.Logf("normal client: %d of %d requests succeeded", ok, total)
		if total < 50 || ok*100 < total*99 {
			t.Errorf("normal client: %d of %d requests succeeded, want at least 99%%", ok, total)
		}
	}()
	_, gw, _ := hostileUser(t, env)
	healthy := func(t *testing.T) {
		t.Helper()
		resp, err := gw.Get(env.GatewayURL() + "/version")
		if err != nil {
			t.Fatalf("the gateway no longer answers: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /version after it: HTTP %d", resp.StatusCode)
		}
	}

	t.Run("headers a byte at a time", func(t *testing.T) {
		req := "GET /api/v1/namespaces/default HTTP/1.1\r\nHost: " + addr + "\r\nUser-Agent: slowloris\r\nX-Pad: " + strings.Repeat("a", 200) + "\r\n\r\n"
		var wg sync.WaitGroup
		var answered atomic.Int32
		for i := 0; i < 20; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				conn, err := tlsDial(addr, "http/1.1")
				if err != nil {
					return
				}
				defer conn.Close()
				for j := 0; j < len(req); j++ {
					if _, err := conn.Write([]byte{req[j]}); err != nil {
						return
					}
					time.Sleep(20 * time.Millisecond)
				}
				_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
				if resp, err := http.ReadResponse(bufio.NewReader(conn), nil); err == nil {
					resp.Body.Close()
					// No client certificate: never a 2xx.
					if resp.StatusCode < 300 {
						t.Errorf("an anonymous slow client got HTTP %d", resp.StatusCode)
					}
					answered.Add(1)
				}
			}()
		}
		wg.Wait()
		t.Logf("%d of 20 slow clients were answered once their headers ended", answered.Load())
		healthy(t)
	})

	t.Run("thousands of idle connections", func(t *testing.T) {
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		// 2,500 bare TCP connections that never start TLS, 500 that
		// finish the handshake and send nothing.
		for i := 0; i < 2500; i++ {
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				t.Fatalf("connection %d: %v", i, err)
			}
			conns = append(conns, c)
		}
		for i := 0; i < 500; i++ {
			c, err := tlsDial(addr, "http/1.1")
			if err != nil {
				t.Fatalf("TLS connection %d: %v", i, err)
			}
			conns = append(conns, c)
		}
		time.Sleep(5 * time.Second)
		healthy(t)
	})

	t.Run("oversized headers", func(t *testing.T) {
		// Over HTTP/1.1 (an HTTP/2 client refuses to send past the
		// server's advertised limit): 64 KiB is served, 2 MiB refused.
		for _, size := range []int{64 << 10, 2 << 20} {
			conn, err := tlsDial(addr, "http/1.1")
			if err != nil {
				t.Fatal(err)
			}
			_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
			go func() {
				_, _ = io.WriteString(conn, "GET /version HTTP/1.1\r\nHost: "+addr+"\r\nX-Huge: "+strings.Repeat("h", size)+"\r\n\r\n")
			}()
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Logf("%d-byte header: %v", size, err)
			} else {
				resp.Body.Close()
				t.Logf("%d-byte header: HTTP %d", size, resp.StatusCode)
				if size > 1<<20 && resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
					t.Errorf("a %d-byte header got HTTP %d, want 431", size, resp.StatusCode)
				}
			}
			conn.Close()
		}
		healthy(t)
	})

	t.Run("malformed HTTP/2", func(t *testing.T) {
		frames := [][]byte{
			[]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + "\x00\x00\x00\x04\x00\x00\x00\x00\x00" + "\xff\xff\xff\x01\x05\x00\x00\x00\x01garbage"),
			[]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + "\x00\x00\x06\x04\x00\x00\x00\x00\x01" + "\x00\x03\xff\xff\xff\xff"),                              // SETTINGS on stream 1
			[]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + "\x00\x00\x04\x08\x00\x00\x00\x00\x00" + "\x7f\xff\xff\xff"),                                      // WINDOW_UPDATE overflow
			[]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + "\x00\x00\x03\x01\x05\x00\x00\x00\x01" + "\x82\x86\xbf" + "\x00\x00\x00\x03\x00\x00\x00\x00\x01"), // headers then RST with no code
			[]byte("PRI * HTTP/2.0\r\n\r\n"),
			[]byte("\x16\x03\x01\x00\x05hello"),
		}
		for i, f := range frames {
			conn, err := tlsDial(addr, "h2")
			if err != nil {
				t.Fatalf("frame %d: %v", i, err)
			}
			_, _ = conn.Write(f)
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			n, _ := io.Copy(io.Discard, conn) // until the gateway closes it, or the deadline
			conn.Close()
			t.Logf("malformed HTTP/2 #%d: %d bytes back", i, n)
		}
		healthy(t)
	})
}

// Path tricks and identity-forwarding headers gain no rights: for a user
// with none, every such request through the gateway is refused (never a
// 2xx) wherever the API server itself refuses the plain request, and the
// gateway never answers a path the API server would read differently.
func TestPathTricksAndForwardedIdentitiesGainNoRights(t *testing.T) {
	env := clustertest.Get(t)
	user, gw, direct := hostileUser(t, env)
	paths := []string{
		"/api/v1/namespaces/kube-system/secrets",
		"/api/v1/namespaces/default/configmaps/../../kube-system/secrets",
		"/api/v1/namespaces/default/../kube-system/secrets",
		"/api/v1/namespaces/kube-system%2Fsecrets",
		"/api/v1/namespaces%2Fkube-system%2Fsecrets",
		"/api/v1/namespaces/kube-system/secrets/%2e%2e",
		"//api/v1/secrets",
		"/api//v1/secrets",
		"/./api/v1/secrets",
		"/api/v1/secrets/",
		"/api/v1/secrets?watch=1&timeoutSeconds=1",
		"/apis/rbac.authorization.k8s.io/v1/clusterroles",
		"/api/v1/namespaces/kube-system/pods/x/exec?command=sh",
		"/api/v1/nodes/kwok-node-0/proxy/",
		"/api/%76%31/secrets",
		"/API/v1/secrets",
	}
	headerSets := []map[string]string{
		{},
		{"Impersonate-User": "kubernetes-admin"},
		{"Impersonate-User": "system:admin", "Impersonate-Group": "system:masters"},
		{"Impersonate-Group": "system:masters"},
		{"Impersonate-Uid": "0", "Impersonate-User": "system:serviceaccount:kube-system:generic-garbage-collector"},
		{"Impersonate-Extra-Scopes": "all", "Impersonate-User": user},
		{"X-Remote-User": "kubernetes-admin", "X-Remote-Group": "system:masters"},
		{"X-Remote-User": "system:admin", "X-Remote-Extra-Scopes": "all"},
		{"X-Forwarded-User": "admin", "X-Forwarded-Groups": "system:masters", "X-Forwarded-For": "127.0.0.1"},
		{"Authorization": "Bearer not-a-token"},
		{"Authorization": "Basic YWRtaW46YWRtaW4="},
		{"X-Remote-User": "kubernetes-admin", "Impersonate-User": "kubernetes-admin", "Impersonate-Group": "system:masters"},
	}
	send := func(c *http.Client, base, path string, headers map[string]string) (int, error) {
		req, err := http.NewRequest(http.MethodGet, base, nil)
		if err != nil {
			return 0, err
		}
		// The path is sent as written, not cleaned by the client.
		p, q, _ := strings.Cut(path, "?")
		req.URL.Opaque, req.URL.RawQuery = "//"+req.URL.Host+p, q
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	tried := 0
	for _, h := range headerSets {
		for _, p := range paths {
			got, err := send(gw, env.GatewayURL(), p, h)
			if err != nil {
				t.Errorf("%s %v via the gateway: %v", p, h, err)
				continue
			}
			tried++
			if got >= 200 && got < 300 {
				want, derr := send(direct, env.Config.Host, p, h)
				t.Errorf("%s with %v: HTTP %d through the gateway for %s, who may do nothing (the API server answers %d, %v)", p, h, got, user, want, derr)
			}
		}
	}
	t.Logf("%d hostile requests, none gained a right", tried)
	// The check can fail: the same user, granted nothing, is refused a
	// plain LIST, and the admin is served it.
	if code, _ := send(gw, env.GatewayURL(), "/api/v1/namespaces/kube-system/secrets", nil); code != http.StatusForbidden {
		t.Errorf("a plain LIST of secrets by %s: HTTP %d, want 403", user, code)
	}
	admin, err := rest.HTTPClientFor(viaGateway(t, env))
	if err != nil {
		t.Fatal(err)
	}
	if code, _ := send(admin, env.GatewayURL(), "/api/v1/namespaces/kube-system/configmaps", nil); code != http.StatusOK {
		t.Errorf("the admin's LIST through the gateway: HTTP %d", code)
	}
}
