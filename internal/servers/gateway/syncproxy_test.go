package gateway

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"sync"
)

// syncTransport is a measuring stand-in for BenchmarkProxyOverhead, not a
// transport to ship: HTTP/1.1 to one upstream with no read and write loop
// goroutines per connection (net/http's Transport hands each request to
// two), the request written and the answer read by the calling goroutine
// with the standard library's Request.Write and ReadResponse, connections
// kept in a plain stack. It shows what those hand-offs cost; it lacks what
// the Transport does besides (retrying on a connection the server closed
// while idle, upgrades, timeouts, idle limits).
type syncTransport struct {
	addr string
	conf *tls.Config
	mu   sync.Mutex
	idle []*syncConn
}

type syncConn struct {
	c  net.Conn
	br *bufio.Reader
	bw *bufio.Writer
}

func (t *syncTransport) get() (*syncConn, error) {
	t.mu.Lock()
	if n := len(t.idle); n > 0 {
		sc := t.idle[n-1]
		t.idle = t.idle[:n-1]
		t.mu.Unlock()
		return sc, nil
	}
	t.mu.Unlock()
	c, err := tls.Dial("tcp", t.addr, t.conf)
	if err != nil {
		return nil, err
	}
	return &syncConn{c: c, br: bufio.NewReaderSize(c, 32<<10), bw: bufio.NewWriterSize(c, 4<<10)}, nil
}

type syncBody struct {
	io.ReadCloser
	t    *syncTransport
	sc   *syncConn
	eof  bool
	once sync.Once
}

func (b *syncBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

func (b *syncBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(func() {
		if b.eof && err == nil {
			b.t.mu.Lock()
			b.t.idle = append(b.t.idle, b.sc)
			b.t.mu.Unlock()
		} else {
			b.sc.c.Close()
		}
	})
	return err
}

func (t *syncTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	sc, err := t.get()
	if err != nil {
		return nil, err
	}
	if err := req.Write(sc.bw); err != nil {
		sc.c.Close()
		return nil, err
	}
	if err := sc.bw.Flush(); err != nil {
		sc.c.Close()
		return nil, err
	}
	resp, err := http.ReadResponse(sc.br, req)
	if err != nil {
		sc.c.Close()
		return nil, err
	}
	resp.Body = &syncBody{ReadCloser: resp.Body, t: t, sc: sc}
	return resp, nil
}
