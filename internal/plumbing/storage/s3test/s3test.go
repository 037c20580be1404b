// Package s3test gives tests a real S3 server, SeaweedFS's weed: the one
// RAMPART_S3_SERVER names (what `make test` sets), else bin/s3/weed, built
// by hack/assets.sh when missing. It serves http and https (a certificate
// from a CA of its own) on free ports, its data in a temporary directory
// thrown away when it stops. Kill and Restart crash it and bring it back on
// its data, as a storage outage would.
package s3test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/rampart-io/rampart/internal/plumbing/loopback"
	"github.com/rampart-io/rampart/internal/plumbing/pki"
)

const (
	// TestBucket is a bucket made at start.
	TestBucket = "rampart-test"
	// AccessKey and SecretKey are the one identity the server knows.
	AccessKey = "rampart-test-access"
	SecretKey = "rampart-test-secret-do-not-log"
	// Region is the region the server answers for.
	Region = "us-east-1"
)

// Server is a running S3 server.
type Server struct {
	// HTTP and HTTPS are its endpoint URLs.
	HTTP, HTTPS string
	// CAFile is the PEM certificate of the CA that signed the https
	// endpoint's certificate.
	CAFile string
	// CredentialsFile is an AWS shared credentials file with AccessKey
	// and SecretKey as its default profile.
	CredentialsFile string

	bin      string
	cmd      *exec.Cmd
	exited   chan struct{}
	dir, log string
	host     string // 127.0.0.1:port, http
	ports    []int
	stopOnce sync.Once
}

// Start starts a server of the test's own, stopped when the test ends (or
// before, by Stop); it skips under -short.
func Start(tb testing.TB) *Server {
	tb.Helper()
	skipShort(tb)
	s, err := start()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if tb.Failed() {
			var b strings.Builder
			s.Tail(&b, 60)
			tb.Log(b.String())
		}
		s.remove()
	})
	return s
}

var (
	sharedOnce sync.Once
	shared     *Server
	sharedErr  error
)

// Shared is one server for the whole test binary, started on first use;
// it skips under -short. Main stops it.
func Shared(tb testing.TB) *Server {
	tb.Helper()
	skipShort(tb)
	sharedOnce.Do(func() { shared, sharedErr = start() })
	if sharedErr != nil {
		tb.Fatal(sharedErr)
	}
	return shared
}

// Main runs the tests, as a TestMain, and stops the shared server, showing
// the end of its log when a test failed.
func Main(m *testing.M) {
	code := m.Run()
	if shared != nil {
		if code != 0 {
			shared.Tail(os.Stderr, 60)
		}
		shared.remove()
	}
	os.Exit(code)
}

func skipShort(tb testing.TB) {
	if testing.Short() {
		tb.Skip("-short: the test starts an S3 server (SeaweedFS)")
	}
}

func weedBinary() (string, error) {
	if p := os.Getenv("RAMPART_S3_SERVER"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("RAMPART_S3_SERVER: %w: build it with make assets", err)
		}
		return p, nil
	}
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..", "..", "..") // internal/plumbing/storage/s3test
	bin := filepath.Join(root, "bin", "s3", "weed")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	cmd := exec.Command("bash", "hack/assets.sh", "s3")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the S3 server (bash hack/assets.sh s3): %v\n%s", err, out)
	}
	return bin, nil
}

func start() (*Server, error) {
	bin, err := weedBinary()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "rampart-s3-test-")
	if err != nil {
		return nil, err
	}
	if err := writeConfig(dir); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	// Free ports can be taken before weed binds them: try again on new ones.
	var errs []error
	for range 3 {
		p, err := loopback.FreePorts(9)
		if err != nil {
			return nil, err
		}
		os.RemoveAll(filepath.Join(dir, "data"))
		s := newServer(bin, dir, p)
		if err = s.launch(); err == nil {
			return s, nil
		}
		errs = append(errs, err)
	}
	os.RemoveAll(dir)
	return nil, errors.Join(errs...)
}

// writeConfig writes into dir the CA, the server's certificate, its one
// identity and the credentials file of that identity.
func writeConfig(dir string) error {
	now := time.Now()
	ca, err := pki.NewCA("rampart S3 test CA", now, time.Hour)
	if err != nil {
		return err
	}
	cert, err := ca.Issue(pki.Request{CommonName: "127.0.0.1", Hosts: []string{"127.0.0.1", "localhost"}, Validity: time.Hour, Now: now})
	if err != nil {
		return err
	}
	if err := cert.Write(filepath.Join(dir, "tls")); err != nil {
		return err
	}
	config := fmt.Sprintf(`{"identities":[{"name":"rampart","credentials":[{"accessKey":%q,"secretKey":%q}],"actions":["Admin","Read","List","Tagging","Write"]}]}`, AccessKey, SecretKey)
	creds := fmt.Sprintf("[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n", AccessKey, SecretKey)
	for name, content := range map[string]string{"ca.crt": string(ca.CertPEM()), "s3.json": config, "credentials": creds} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			return err
		}
	}
	return nil
}

func newServer(bin, dir string, p []int) *Server {
	s := &Server{
		bin: bin, dir: dir, log: filepath.Join(dir, "weed.log"), ports: p,
		host: "127.0.0.1:" + strconv.Itoa(p[6]), HTTPS: "https://127.0.0.1:" + strconv.Itoa(p[8]),
		CAFile: filepath.Join(dir, "ca.crt"), CredentialsFile: filepath.Join(dir, "credentials"),
	}
	s.HTTP = "http://" + s.host
	return s
}

// launch runs weed on s's ports and data directory (made if missing) and
// waits until it serves.
func (s *Server) launch() error {
	data := filepath.Join(s.dir, "data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		return err
	}
	// Appended to: a restarted server's log follows the killed one's.
	logf, err := os.OpenFile(s.log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	p, dir := s.ports, s.dir
	port := func(i int) string { return strconv.Itoa(p[i]) }
	s.exited = make(chan struct{})
	s.cmd = exec.Command(s.bin, "-logtostderr", "server",
		"-dir="+data, "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
		"-master.port="+port(0), "-master.port.grpc="+port(1), "-master.volumeSizeLimitMB=64",
		// One master, no peer to hear from: the default 10 s only delays
		// its leading, at every start.
		"-master.electionTimeout=1s",
		// weed reports usage to its authors unless told not to.
		"-master.telemetry=false",
		"-volume.port="+port(2), "-volume.port.grpc="+port(3),
		"-filer.port="+port(4), "-filer.port.grpc="+port(5), "-filer.localSocket="+filepath.Join(dir, "filer.sock"),
		"-s3", "-s3.port="+port(6), "-s3.port.grpc="+port(7), "-s3.port.https="+port(8),
		"-s3.cert.file="+filepath.Join(dir, "tls.crt"), "-s3.key.file="+filepath.Join(dir, "tls.key"),
		"-s3.config="+filepath.Join(dir, "s3.json"), "-s3.localSocket="+filepath.Join(dir, "s3.sock"),
		"-s3.port.iceberg=0", "-s3.port.lance=0")
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		return err
	}
	cmd, exited := s.cmd, s.exited
	go func() { cmd.Wait(); close(exited) }()
	if err := s.ready(); err != nil {
		var tail bytes.Buffer
		s.Tail(&tail, 30)
		s.kill()
		return fmt.Errorf("%w; weed's log ends:\n%s", err, tail.String())
	}
	return nil
}

// ready waits until TestBucket is made and takes an object.
func (s *Server) ready() error {
	raw, err := s.client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	start := time.Now()
	for {
		err := makeBucket(ctx, raw, TestBucket)
		if err == nil {
			_, err = raw.PutObject(ctx, TestBucket, "ready", strings.NewReader("ready"), 5, minio.PutObjectOptions{})
		}
		if err == nil {
			fmt.Fprintf(os.Stderr, "s3test: SeaweedFS S3 server ready in %v\n", time.Since(start).Round(100*time.Millisecond))
			return raw.RemoveObject(ctx, TestBucket, "ready", minio.RemoveObjectOptions{})
		}
		select {
		case <-s.exited:
			return fmt.Errorf("weed exited: %v", s.cmd.ProcessState)
		case <-ctx.Done():
			return fmt.Errorf("S3 server not ready after %v: %v", time.Since(start).Round(time.Second), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// makeBucket makes a bucket, or finds it made.
func makeBucket(ctx context.Context, c *minio.Client, name string) error {
	err := c.MakeBucket(ctx, name, minio.MakeBucketOptions{})
	if code := minio.ToErrorResponse(err).Code; code == "BucketAlreadyOwnedByYou" || code == "BucketAlreadyExists" {
		return nil
	}
	return err
}

// Stop kills the server and throws its data away; it may be called more
// than once. The CA and credentials files stay until the test ends, so
// that a store opened before fails on the server, not on them.
func (s *Server) Stop() {
	s.stopOnce.Do(func() {
		s.kill()
		os.RemoveAll(filepath.Join(s.dir, "data"))
	})
}

// remove stops the server and removes all its files.
func (s *Server) remove() {
	s.Stop()
	os.RemoveAll(s.dir)
}

// Kill kills the server with SIGKILL, as a crash would, in the middle of
// whatever it was doing; its data stays for Restart. It may be called
// more than once.
func (s *Server) Kill() { s.kill() }

// Restart starts a killed server again on its data, at the same endpoints,
// and waits until it serves: what it acknowledged before the kill is
// there again. It takes about 17 s: weed's master takes no write for 15 s
// after it starts on existing volumes, waiting for them to be reported.
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	s.kill()
	if err := s.launch(); err != nil {
		tb.Fatalf("restart the S3 server: %v", err)
	}
}

func (s *Server) kill() {
	// A graceful stop takes 25 s.
	s.cmd.Process.Kill()
	<-s.exited
	// weed leaves its gRPC sockets in /tmp, named by port.
	for _, p := range s.ports {
		m, _ := filepath.Glob(fmt.Sprintf("/tmp/seaweedfs-*-%d.sock", p))
		for _, f := range m {
			os.Remove(f)
		}
	}
}

// Tail writes the last lines of the server's log to w.
func (s *Server) Tail(w io.Writer, lines int) {
	b, _ := os.ReadFile(s.log)
	l := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	fmt.Fprintf(w, "--- last lines of weed's log (%s)\n%s\n", s.log, strings.Join(l[max(0, len(l)-lines):], "\n"))
}

func (s *Server) client() (*minio.Client, error) {
	return minio.New(s.host, &minio.Options{Creds: credentials.NewStaticV4(AccessKey, SecretKey, ""), Region: Region})
}

// Client reaches the server over http with the server's credentials,
// behind the back of the store under test.
func (s *Server) Client(tb testing.TB) *minio.Client {
	tb.Helper()
	c, err := s.client()
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// Bucket makes a bucket (or finds it made) and returns its location for
// storage.Open: over https, with the CA file and the credentials file.
func (s *Server) Bucket(tb testing.TB, name string) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := makeBucket(ctx, s.Client(tb), name); err != nil {
		tb.Fatalf("make bucket %s: %v", name, err)
	}
	return s.Location(name, "")
}

// Location is the storage.Open location of prefix in bucket: over https,
// with the CA file and the credentials file.
func (s *Server) Location(bucket, prefix string) string {
	q := url.Values{"endpoint": {s.HTTPS}, "caFile": {s.CAFile}, "credentialsFile": {s.CredentialsFile},
		"pathStyle": {"true"}, "region": {Region}}
	return "s3://" + bucket + "/" + strings.Trim(prefix, "/") + "?" + q.Encode()
}
