package storage_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/rampart-io/rampart/internal/plumbing/storage"
	"github.com/rampart-io/rampart/internal/plumbing/storage/s3test"
)

// The S3 tests run against a real S3 server (s3test): one serves every
// test, over http and https, each test in a prefix of its own.

const (
	s3Bucket = s3test.TestBucket
	s3Access = s3test.AccessKey
	s3Secret = s3test.SecretKey
)

func TestMain(m *testing.M) { s3test.Main(m) }

// s3Server is the shared test server, with the helpers of these tests.
type s3Server struct{ *s3test.Server }

// s3 returns the test server, started on first use.
func s3(t *testing.T) s3Server {
	t.Helper()
	return s3Server{s3test.Shared(t)}
}

// options are those of a store in a prefix of the test's own.
func (s s3Server) options(t *testing.T) storage.S3Options {
	return storage.S3Options{
		Endpoint: s.HTTP, Bucket: s3Bucket, Prefix: "t/" + strings.ReplaceAll(t.Name(), "/", "-"), Region: "us-east-1",
		AccessKeyID: s3Access, SecretAccessKey: s3Secret, PathStyle: true,
	}
}

func (s s3Server) open(t *testing.T, o storage.S3Options) *storage.S3 {
	t.Helper()
	st, err := storage.NewS3(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// smallParts opens a store that uploads in parts of 5 MiB, S3's least, to
// take its multipart path with little data.
func (s s3Server) smallParts(t *testing.T) (*storage.S3, storage.S3Options) {
	o := s.options(t)
	o.PartSize = 5 << 20
	return s.open(t, o), o
}

func TestS3(t *testing.T) {
	srv := s3(t)
	testStore(t, func(t *testing.T) subject {
		o := srv.options(t)
		return subject{store: srv.open(t, o), corrupt: func(t *testing.T, name string, content []byte) {
			ctx, raw, key := context.Background(), srv.Client(t), o.Prefix+"/"+name
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
	for u := range srv.Client(t).ListIncompleteUploads(ctx, s3Bucket, o.Prefix, true) {
		t.Errorf("upload left behind: %+v", u)
	}
}

func TestS3ForeignObjectIsRefused(t *testing.T) {
	srv := s3(t)
	o := srv.options(t)
	s := srv.open(t, o)
	ctx := context.Background()
	if _, err := srv.Client(t).PutObject(ctx, s3Bucket, o.Prefix+"/foreign", strings.NewReader("x"), 1, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "foreign"); err == nil || !strings.Contains(err.Error(), "not stored by Rampart") {
		t.Errorf("Get of an object without a checksum: %v", err)
	}
	if _, err := s.List(ctx, ""); err == nil || !strings.Contains(err.Error(), "not stored by Rampart") {
		t.Errorf("List over an object without a checksum: %v", err)
	}
}

// TestS3KeepsWhatItAcknowledgedAcrossACrash: what a Put returned for is
// there after the server is killed (SIGKILL) and started again on its
// data; while it is down a Put fails, and the same store works again once
// it is back. The recycle bin admits a delete on that word.
func TestS3KeepsWhatItAcknowledgedAcrossACrash(t *testing.T) {
	srv := s3Server{s3test.Start(t)}
	s := srv.open(t, srv.options(t))
	ctx := context.Background()
	for i := range 20 {
		if _, err := s.Put(ctx, fmt.Sprintf("before/%d", i), strings.NewReader(fmt.Sprint("copy ", i))); err != nil {
			t.Fatal(err)
		}
	}
	srv.Kill()
	down, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := s.Put(down, "while-down", strings.NewReader("x")); err == nil {
		t.Fatal("a Put with the server killed succeeded")
	}
	srv.Restart(t)
	for i := range 20 {
		if got, want := read(t, s, fmt.Sprintf("before/%d", i)), fmt.Sprint("copy ", i); got != want {
			t.Errorf("before/%d after the restart: %q, want %q", i, got, want)
		}
	}
	if _, err := s.Put(ctx, "after", strings.NewReader("back")); err != nil {
		t.Fatalf("Put after the restart: %v", err)
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
	// What s3test gives other packages' tests.
	t.Run("TestBucket", func(t *testing.T) { roundTrip(t, srv.Bucket(t, "rampart-open")) })
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
