package storage_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
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

	"github.com/rampart-io/rampart/internal/pki"
	"github.com/rampart-io/rampart/internal/storage"
)

// The S3 tests run against a real S3 server, SeaweedFS's weed: the one
// RAMPART_S3_SERVER names (what `make test` sets), else bin/s3/weed, built
// by hack/assets.sh when missing. One server serves every test, over http
// and https, each test in a prefix of its own.

const (
	s3Bucket = "rampart-test"
	s3Access = "rampart-test-access"
	s3Secret = "rampart-test-secret-do-not-log"
)

type s3Server struct {
	cmd         *exec.Cmd
	exited      chan struct{}
	dir, log    string
	host        string // 127.0.0.1:port, http
	HTTP, HTTPS string // endpoint URLs
	CAFile      string
	ports       []int
}

var (
	serverOnce sync.Once
	server     *s3Server
	serverErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if server != nil {
		if code != 0 {
			server.tail(os.Stderr, 60)
		}
		server.stop()
	}
	os.Exit(code)
}

// s3 returns the test server, started on first use.
func s3(t *testing.T) *s3Server {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: the S3 tests start an S3 server (SeaweedFS)")
	}
	serverOnce.Do(func() { server, serverErr = startS3() })
	if serverErr != nil {
		t.Fatal(serverErr)
	}
	return server
}

func weedBinary() (string, error) {
	if p := os.Getenv("RAMPART_S3_SERVER"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("RAMPART_S3_SERVER: %w: build it with make assets", err)
		}
		return p, nil
	}
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
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

func startS3() (*s3Server, error) {
	bin, err := weedBinary()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "rampart-s3-test-")
	if err != nil {
		return nil, err
	}
	now := time.Now()
	ca, err := pki.NewCA("rampart storage test CA", now, time.Hour)
	if err != nil {
		return nil, err
	}
	cert, err := ca.Issue(pki.Request{CommonName: "127.0.0.1", Hosts: []string{"127.0.0.1", "localhost"}, Validity: time.Hour, Now: now})
	if err != nil {
		return nil, err
	}
	if err := cert.Write(filepath.Join(dir, "tls")); err != nil {
		return nil, err
	}
	caFile := filepath.Join(dir, "ca.crt")
	config := fmt.Sprintf(`{"identities":[{"name":"rampart","credentials":[{"accessKey":%q,"secretKey":%q}],"actions":["Admin","Read","List","Tagging","Write"]}]}`, s3Access, s3Secret)
	if err := os.WriteFile(caFile, ca.CertPEM(), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "s3.json"), []byte(config), 0o600); err != nil {
		return nil, err
	}
	// Free ports can be taken before weed binds them: try again on new ones.
	var errs []error
	for range 3 {
		s, err := launch(bin, dir, caFile)
		if err == nil {
			return s, nil
		}
		errs = append(errs, err)
	}
	os.RemoveAll(dir)
	return nil, errors.Join(errs...)
}

func launch(bin, dir, caFile string) (*s3Server, error) {
	p, err := freePorts(9)
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	os.RemoveAll(data)
	if err := os.MkdirAll(data, 0o700); err != nil {
		return nil, err
	}
	s := &s3Server{
		dir: dir, log: filepath.Join(dir, "weed.log"), exited: make(chan struct{}), ports: p,
		host: "127.0.0.1:" + strconv.Itoa(p[6]), HTTPS: "https://127.0.0.1:" + strconv.Itoa(p[8]), CAFile: caFile,
	}
	s.HTTP = "http://" + s.host
	logf, err := os.Create(s.log)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	port := func(i int) string { return strconv.Itoa(p[i]) }
	s.cmd = exec.Command(bin, "-logtostderr", "server",
		"-dir="+data, "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
		"-master.port="+port(0), "-master.port.grpc="+port(1), "-master.volumeSizeLimitMB=64",
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
		return nil, err
	}
	go func() { s.cmd.Wait(); close(s.exited) }()
	if err := s.ready(); err != nil {
		var tail bytes.Buffer
		s.tail(&tail, 30)
		s.stop()
		return nil, fmt.Errorf("%w; weed's log ends:\n%s", err, tail.String())
	}
	return s, nil
}

func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// ready waits until the bucket is made and takes an object.
func (s *s3Server) ready() error {
	raw, err := s.rawClient()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	start := time.Now()
	for {
		err := raw.MakeBucket(ctx, s3Bucket, minio.MakeBucketOptions{})
		if code := minio.ToErrorResponse(err).Code; code == "BucketAlreadyOwnedByYou" || code == "BucketAlreadyExists" {
			err = nil
		}
		if err == nil {
			_, err = raw.PutObject(ctx, s3Bucket, "ready", strings.NewReader("ready"), 5, minio.PutObjectOptions{})
		}
		if err == nil {
			fmt.Fprintf(os.Stderr, "storage tests: SeaweedFS S3 server ready in %v\n", time.Since(start).Round(100*time.Millisecond))
			return raw.RemoveObject(ctx, s3Bucket, "ready", minio.RemoveObjectOptions{})
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

func (s *s3Server) stop() {
	// Killed: its data is thrown away, and a graceful stop takes 25 s.
	s.cmd.Process.Kill()
	<-s.exited
	// weed leaves its gRPC sockets in /tmp, named by port.
	for _, p := range s.ports {
		if m, _ := filepath.Glob(fmt.Sprintf("/tmp/seaweedfs-*-%d.sock", p)); len(m) > 0 {
			for _, f := range m {
				os.Remove(f)
			}
		}
	}
	os.RemoveAll(s.dir)
}

func (s *s3Server) tail(w io.Writer, lines int) {
	b, _ := os.ReadFile(s.log)
	l := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	fmt.Fprintf(w, "--- last lines of weed's log (%s)\n%s\n", s.log, strings.Join(l[max(0, len(l)-lines):], "\n"))
}

// rawClient reaches the server behind the store's back.
func (s *s3Server) rawClient() (*minio.Client, error) {
	return minio.New(s.host, &minio.Options{Creds: credentials.NewStaticV4(s3Access, s3Secret, ""), Region: "us-east-1"})
}

func (s *s3Server) raw(t *testing.T) *minio.Client {
	t.Helper()
	c, err := s.rawClient()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// options are those of a store in a prefix of the test's own.
func (s *s3Server) options(t *testing.T) storage.S3Options {
	return storage.S3Options{
		Endpoint: s.HTTP, Bucket: s3Bucket, Prefix: "t/" + strings.ReplaceAll(t.Name(), "/", "-"), Region: "us-east-1",
		AccessKeyID: s3Access, SecretAccessKey: s3Secret, PathStyle: true,
	}
}

func (s *s3Server) open(t *testing.T, o storage.S3Options) *storage.S3 {
	t.Helper()
	st, err := storage.NewS3(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// smallParts opens a store that uploads in parts of 5 MiB, S3's least, to
// take its multipart path with little data.
func (s *s3Server) smallParts(t *testing.T) (*storage.S3, storage.S3Options) {
	o := s.options(t)
	o.PartSize = 5 << 20
	return s.open(t, o), o
}

func TestS3(t *testing.T) {
	srv := s3(t)
	testStore(t, func(t *testing.T) subject {
		o := srv.options(t)
		return subject{store: srv.open(t, o), corrupt: func(t *testing.T, name string, content []byte) {
			ctx, raw, key := context.Background(), srv.raw(t), o.Prefix+"/"+name
			info, err := raw.StatObject(ctx, s3Bucket, key, minio.StatObjectOptions{})
			if err != nil {
				t.Fatal(err)
			}
			meta := map[string]string{"X-Amz-Meta-Sha256": info.Metadata.Get("X-Amz-Meta-Sha256")}
			if _, err := raw.PutObject(ctx, s3Bucket, key, bytes.NewReader(content), int64(len(content)), minio.PutObjectOptions{UserMetadata: meta}); err != nil {
				t.Fatal(err)
			}
		}}
	})
}

// TestS3Parts stores objects larger than a part in a multipart upload, from
// a reader that seeks and from one that does not (copied to a temporary
// file first).
func TestS3Parts(t *testing.T) {
	srv := s3(t)
	s, _ := srv.smallParts(t)
	ctx := context.Background()
	content := make([]byte, 11<<20+3)
	for i := range content {
		content[i] = byte(i * 7 / 3)
	}
	for name, r := range map[string]io.Reader{
		"seekable": bytes.NewReader(content),
		"streamed": io.MultiReader(bytes.NewReader(content[:1000]), bytes.NewReader(content[1000:])),
	} {
		obj, err := s.Put(ctx, name, r)
		if err != nil {
			t.Fatal(err)
		}
		if obj.Size != int64(len(content)) || obj.SHA256 != sum(string(content)) {
			t.Errorf("%s stored as %+v", name, obj)
		}
		if got := read(t, s, name); got != string(content) {
			t.Errorf("%s read back %d bytes, not the %d stored", name, len(got), len(content))
		}
	}
	list, err := s.List(ctx, "")
	if err != nil || names(list) != "seekable streamed" || list[0].SHA256 != sum(string(content)) || list[1].Size != int64(len(content)) {
		t.Fatalf("listed %+v, %v", list, err)
	}
}

// shifty reads one content for the hash pass (Read) and another for the
// upload (ReadAt): a file that changed while it was stored.
type shifty struct {
	*bytes.Reader
	later []byte
}

func (s shifty) ReadAt(p []byte, off int64) (int, error) {
	return bytes.NewReader(s.later).ReadAt(p, off)
}

// TestS3RefusesContentChangedWhileStored: what is stored is what was
// hashed, or nothing: the server checks a single PUT's signed SHA-256, and
// a multipart upload is completed only if its parts hash right.
func TestS3RefusesContentChangedWhileStored(t *testing.T) {
	srv := s3(t)
	s, o := srv.smallParts(t)
	ctx := context.Background()
	for name, size := range map[string]int{"single": 1 << 20, "parts": 6 << 20} {
		before, after := bytes.Repeat([]byte("a"), size), bytes.Repeat([]byte("b"), size)
		if _, err := s.Put(ctx, name, shifty{bytes.NewReader(before), after}); err == nil {
			t.Errorf("%s: content changed during Put was stored", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
		if _, err := s.Get(ctx, name); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: Get after a refused Put: %v, want fs.ErrNotExist", name, err)
		}
	}
	// No upload is left behind, to be billed.
	for u := range srv.raw(t).ListIncompleteUploads(ctx, s3Bucket, o.Prefix, true) {
		t.Errorf("upload left behind: %+v", u)
	}
}

func TestS3ForeignObjectIsRefused(t *testing.T) {
	srv := s3(t)
	o := srv.options(t)
	s := srv.open(t, o)
	ctx := context.Background()
	if _, err := srv.raw(t).PutObject(ctx, s3Bucket, o.Prefix+"/foreign", strings.NewReader("x"), 1, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "foreign"); err == nil || !strings.Contains(err.Error(), "not stored by Rampart") {
		t.Errorf("Get of an object without a checksum: %v", err)
	}
	if _, err := s.List(ctx, ""); err == nil || !strings.Contains(err.Error(), "not stored by Rampart") {
		t.Errorf("List over an object without a checksum: %v", err)
	}
}

// TestS3TLS reaches the server over https, its certificate from a private
// CA given as the CA file; without that file the error says to give it.
func TestS3TLS(t *testing.T) {
	srv := s3(t)
	o := srv.options(t)
	o.Endpoint, o.CAFile = srv.HTTPS, srv.CAFile
	s := srv.open(t, o)
	if _, err := s.Put(context.Background(), "a", strings.NewReader("over TLS")); err != nil {
		t.Fatal(err)
	}
	if got := read(t, s, "a"); got != "over TLS" {
		t.Fatalf("read %q", got)
	}
	o.CAFile = ""
	if _, err := storage.NewS3(context.Background(), o); err == nil || !strings.Contains(err.Error(), "caFile=PATH") {
		t.Fatalf("without the CA file: %v", err)
	}
}

// TestS3ConnectErrors: NewS3 says what to fix, and never shows the secret.
func TestS3ConnectErrors(t *testing.T) {
	srv := s3(t)
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_ACCESS_KEY", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	t.Setenv("AWS_SECRET_KEY", "")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	for _, c := range []struct {
		name   string
		change func(o *storage.S3Options)
		want   string
	}{
		{"missing bucket", func(o *storage.S3Options) { o.Bucket = "no-such-bucket" }, `bucket "no-such-bucket" does not exist`},
		{"wrong secret", func(o *storage.S3Options) { o.SecretAccessKey = "wrong-" + s3Secret }, "check the credentials"},
		{"no credentials", func(o *storage.S3Options) { o.AccessKeyID, o.SecretAccessKey = "", "" }, "no S3 credentials found: set AWS_ACCESS_KEY_ID"},
		{"endpoint with a path", func(o *storage.S3Options) { o.Endpoint += "/bucket" }, "give only the scheme, host and port"},
		{"endpoint not a URL", func(o *storage.S3Options) { o.Endpoint = "127.0.0.1:9000" }, "give a URL such as"},
		{"CA file over http", func(o *storage.S3Options) { o.CAFile = srv.CAFile }, "is for an https endpoint"},
		{"small parts", func(o *storage.S3Options) { o.PartSize = 1 << 20 }, "below S3's least"},
	} {
		o := srv.options(t)
		c.change(&o)
		_, err := storage.NewS3(context.Background(), o)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), s3Secret) {
			t.Errorf("%s: the error shows the secret: %v", c.name, err)
		}
	}
}

func TestOpen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	if s, err := storage.Open(ctx, dir); err != nil || s != (storage.Dir{Root: dir}) {
		t.Fatalf("Open(%s) = %#v, %v", dir, s, err)
	}
	for _, c := range []struct{ location, want string }{
		{"", "no store given"},
		{"gs://bucket/x", "unknown scheme gs://"},
		{"s3://key:" + s3Secret + "@bucket/x", "credentials do not go in the location"},
		{"s3://bucket/x?pathstyle=true", `unknown parameter "pathstyle"; the parameters are endpoint, region, pathStyle`},
		{"s3://bucket/x?secretKey=" + s3Secret, `unknown parameter "secretKey"`},
		{"s3://bucket/x?pathStyle=maybe", "pathStyle=maybe: give true or false"},
		{"s3:///x", "no S3 bucket given"},
		{"s3://bucket/x?endpoint=ftp://host", "give a URL such as"},
	} {
		_, err := storage.Open(ctx, c.location)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Open(%q): %v, want %q", c.location, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), s3Secret) {
			t.Errorf("Open(%q): the error shows the secret: %v", c.location, err)
		}
	}

	srv := s3(t)
	q := "?endpoint=" + srv.HTTPS + "&caFile=" + srv.CAFile + "&pathStyle=true"
	t.Run("Environment", func(t *testing.T) {
		t.Setenv("AWS_ACCESS_KEY_ID", s3Access)
		t.Setenv("AWS_SECRET_ACCESS_KEY", s3Secret)
		roundTrip(t, "s3://"+s3Bucket+"/t/open-env"+q+"&region=us-east-1")
	})
	t.Run("CredentialsFile", func(t *testing.T) {
		t.Setenv("AWS_ACCESS_KEY_ID", "")
		t.Setenv("AWS_SECRET_ACCESS_KEY", "")
		file := filepath.Join(t.TempDir(), "credentials")
		creds := fmt.Sprintf("[default]\naws_access_key_id = wrong\naws_secret_access_key = wrong\n\n[rampart]\naws_access_key_id = %s\naws_secret_access_key = %s\n", s3Access, s3Secret)
		if err := os.WriteFile(file, []byte(creds), 0o600); err != nil {
			t.Fatal(err)
		}
		// No region: minio-go asks the server.
		roundTrip(t, "s3://"+s3Bucket+"/t/open-file"+q+"&credentialsFile="+file+"&profile=rampart")
	})
}

func roundTrip(t *testing.T, location string) {
	t.Helper()
	ctx := context.Background()
	s, err := storage.Open(ctx, location)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.(*storage.S3); !ok {
		t.Fatalf("Open(%s) gave a %T", location, s)
	}
	if _, err := s.Put(ctx, "x", strings.NewReader("opened")); err != nil {
		t.Fatal(err)
	}
	if got := read(t, s, "x"); got != "opened" {
		t.Fatalf("read %q", got)
	}
}

func TestS3OptionsPrintNoSecret(t *testing.T) {
	o := storage.S3Options{Bucket: "b", Prefix: "p", AccessKeyID: s3Access, SecretAccessKey: s3Secret}
	for _, s := range []string{fmt.Sprint(o), fmt.Sprintf("%+v", o), fmt.Sprintf("%v", &o)} {
		if strings.Contains(s, s3Secret) || s != "s3://b/p at AWS S3" {
			t.Errorf("printed options: %s", s)
		}
	}
}
