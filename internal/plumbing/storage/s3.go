package storage

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"golang.org/x/sync/errgroup"
)

// S3Options says which bucket holds the store and how to reach it.
type S3Options struct {
	// Endpoint is the server's URL: https://host[:port] or
	// http://host[:port]. Empty means AWS S3.
	Endpoint string
	Bucket   string
	// Prefix is the folder in the bucket that holds the store's objects;
	// empty for the whole bucket.
	Prefix string
	// Region is the bucket's region; empty asks the server.
	Region string
	// AccessKeyID and SecretAccessKey are the credentials when set (both);
	// otherwise they come from CredentialsFile when that is set, else from
	// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN),
	// else from ~/.aws/credentials. They are never logged nor put in errors.
	AccessKeyID, SecretAccessKey string
	// CredentialsFile is an AWS shared credentials file, read for Profile
	// (default: AWS_PROFILE, else "default").
	CredentialsFile, Profile string
	// PathStyle addresses the bucket as https://host/bucket, what MinIO,
	// SeaweedFS and Ceph want without wildcard DNS. Otherwise minio-go
	// picks: virtual-hosted (https://bucket.host) for AWS and the clouds it
	// knows, path style elsewhere.
	PathStyle bool
	// CAFile is a PEM bundle of CAs trusted for an https endpoint besides
	// the system's, for a server with a private CA.
	CAFile string
	// PartSize is the size of upload parts (default 64 MiB, at least
	// 5 MiB): a larger object is uploaded in parts, each retried alone.
	PartSize int64
}

// String names the bucket, and leaves the credentials out so that
// printing the options cannot log them.
func (o S3Options) String() string {
	return fmt.Sprintf("s3://%s/%s at %s", o.Bucket, strings.Trim(o.Prefix, "/"), cmp.Or(o.Endpoint, "AWS S3"))
}

const (
	// sumHeader carries an object's SHA-256 (hex), as user metadata.
	sumHeader       = "X-Amz-Meta-Sha256"
	defaultPartSize = 64 << 20
	minPartSize     = 5 << 20 // S3's least part but the last
	maxParts        = 10000   // S3's most parts in one upload
)

// S3 is a Store in an S3-compatible bucket: each object an S3 object, its
// SHA-256 in its user metadata (x-amz-meta-sha256). An S3 PUT is atomic and
// durable once it returns, so Put needs no temporary object.
type S3 struct {
	c        minio.Core
	bucket   string
	prefix   string // "" or ending in "/"
	where    string // for messages: s3://bucket/prefix at endpoint
	partSize int64
}

// NewS3 connects to the bucket o names and checks that it exists.
func NewS3(ctx context.Context, o S3Options) (*S3, error) {
	if o.Bucket == "" {
		return nil, errors.New("no S3 bucket given: name one, as in s3://BUCKET/PREFIX")
	}
	host, secure, err := s3Endpoint(o.Endpoint)
	if err != nil {
		return nil, err
	}
	prefix := strings.Trim(o.Prefix, "/")
	if prefix != "" {
		if prefix, err = cleanName(prefix); err != nil {
			return nil, fmt.Errorf("S3 prefix: %w", err)
		}
		prefix += "/"
	}
	creds, err := s3Credentials(o)
	if err != nil {
		return nil, err
	}
	transport, err := minio.DefaultTransport(secure)
	if err != nil {
		return nil, err
	}
	if o.CAFile != "" {
		if !secure {
			return nil, fmt.Errorf("a CA file (%s) is for an https endpoint, and %s is http: use https or drop the CA file", o.CAFile, o.Endpoint)
		}
		pool, err := caPool(o.CAFile)
		if err != nil {
			return nil, err
		}
		transport.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	lookup := minio.BucketLookupAuto
	if o.PathStyle {
		lookup = minio.BucketLookupPath
	}
	client, err := minio.New(host, &minio.Options{Creds: creds, Secure: secure, Transport: transport, Region: o.Region, BucketLookup: lookup})
	if err != nil {
		return nil, fmt.Errorf("S3 endpoint %s: %w", o.Endpoint, err)
	}
	s := &S3{
		c:        minio.Core{Client: client},
		bucket:   o.Bucket,
		prefix:   prefix,
		where:    "s3://" + o.Bucket + "/" + prefix + " at " + client.EndpointURL().String(),
		partSize: o.PartSize,
	}
	if s.partSize == 0 {
		s.partSize = defaultPartSize
	}
	if s.partSize < minPartSize {
		return nil, fmt.Errorf("S3 part size %d is below S3's least, 5 MiB: raise it", o.PartSize)
	}
	ok, err := client.BucketExists(ctx, o.Bucket)
	if err != nil {
		return nil, s.explain("reach bucket", "", err)
	}
	if !ok {
		return nil, fmt.Errorf("S3 bucket %q does not exist at %s: create it (aws s3 mb s3://%s, or mc mb ALIAS/%s) or name an existing one", o.Bucket, client.EndpointURL(), o.Bucket, o.Bucket)
	}
	return s, nil
}

func (s *S3) String() string { return s.where }

func s3Endpoint(endpoint string) (host string, secure bool, err error) {
	if endpoint == "" {
		return "s3.amazonaws.com", true, nil
	}
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return "", false, fmt.Errorf("S3 endpoint %q: give a URL such as https://s3.example.com or http://127.0.0.1:9000", endpoint)
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
		return "", false, fmt.Errorf("S3 endpoint %q: give only the scheme, host and port (credentials come from the environment, the bucket and prefix from s3://BUCKET/PREFIX)", endpoint)
	}
	return u.Host, u.Scheme == "https", nil
}

// s3Credentials finds the credentials, and refuses to go on without: an
// anonymous client would only meet AccessDenied later.
func s3Credentials(o S3Options) (*credentials.Credentials, error) {
	var p credentials.Provider
	switch {
	case o.AccessKeyID != "" || o.SecretAccessKey != "":
		if o.AccessKeyID == "" || o.SecretAccessKey == "" {
			return nil, errors.New("S3 credentials need both an access key ID and a secret access key")
		}
		p = &credentials.Static{Value: credentials.Value{AccessKeyID: o.AccessKeyID, SecretAccessKey: o.SecretAccessKey, SignerType: credentials.SignatureV4}}
	case o.CredentialsFile != "":
		if _, err := os.Stat(o.CredentialsFile); err != nil {
			return nil, fmt.Errorf("S3 credentials file: %w", err)
		}
		p = &credentials.FileAWSCredentials{Filename: o.CredentialsFile, Profile: o.Profile}
	default:
		p = &credentials.Chain{Providers: []credentials.Provider{&credentials.EnvAWS{}, &credentials.FileAWSCredentials{Profile: o.Profile}}}
	}
	creds := credentials.New(p)
	v, err := creds.GetWithContext(nil)
	if err != nil || v.AccessKeyID == "" || v.SecretAccessKey == "" {
		where := "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or a credentials file (~/.aws/credentials or credentialsFile=PATH)"
		if o.CredentialsFile != "" {
			where = fmt.Sprintf("profile %q of %s", cmp.Or(o.Profile, os.Getenv("AWS_PROFILE"), "default"), o.CredentialsFile)
		}
		return nil, fmt.Errorf("no S3 credentials found: set %s", where)
	}
	return creds, nil
}

func caPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("S3 CA file: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("S3 CA file %s holds no PEM certificate: give the CA's certificate (BEGIN CERTIFICATE)", file)
	}
	return pool, nil
}

// explain turns an S3 error into one that says what to do. A missing object
// wraps fs.ErrNotExist, as Dir's does.
func (s *S3) explain(op, name string, err error) error {
	what := op + " " + s.where
	if name != "" {
		what = op + " " + name + " in " + s.where
	}
	var x509Unknown x509.UnknownAuthorityError
	switch code := minio.ToErrorResponse(err).Code; {
	case code == minio.NoSuchKey:
		return fmt.Errorf("%s: %w", what, fs.ErrNotExist)
	case code == minio.NoSuchBucket:
		return fmt.Errorf("%s: the bucket does not exist: create it, or name an existing one", what)
	case code == "AccessDenied" || code == "InvalidAccessKeyId" || code == "SignatureDoesNotMatch":
		return fmt.Errorf("%s: refused (%s): check the credentials (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or the credentials file) and that they may use this bucket", what, code)
	case errors.As(err, &x509Unknown):
		return fmt.Errorf("%s: %w: if the server's certificate comes from a private CA, give its certificate (caFile=PATH)", what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

func (s *S3) key(name string) (string, error) {
	clean, err := cleanName(name)
	if err != nil {
		return "", err
	}
	return s.prefix + clean, nil
}

// Put hashes r first, since S3 takes the metadata (the SHA-256) before the
// content, then uploads it: in one PUT up to the part size, in parts beyond.
func (s *S3) Put(ctx context.Context, name string, r io.Reader) (Object, error) {
	key, err := s.key(name)
	if err != nil {
		return Object{}, err
	}
	body, sum, done, err := staged(ctx, r)
	if err != nil {
		return Object{}, fmt.Errorf("store %s: %w", name, err)
	}
	defer done()
	opts := minio.PutObjectOptions{UserMetadata: map[string]string{sumHeader: sum}, ContentType: "application/octet-stream"}
	if body.Size() <= s.partSize {
		// The SHA-256 goes in the signed X-Amz-Content-Sha256 header
		// (DisableContentSha256 keeps minio-go from replacing it with
		// chunk signatures): the server refuses a body that differs.
		opts.DisableContentSha256 = true
		_, err = s.c.PutObject(ctx, s.bucket, key, body, body.Size(), "", sum, opts)
	} else {
		err = s.putParts(ctx, key, body, sum, opts)
	}
	if err != nil {
		return Object{}, s.explain("store", name, err)
	}
	info, err := s.c.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return Object{}, s.explain("stat", name, err)
	}
	if info.Metadata.Get(sumHeader) == "" {
		return Object{}, fmt.Errorf("store %s in %s: the server dropped the object's %s metadata, which Rampart needs to check what it reads: use an S3 server that keeps user metadata", name, s.where, sumHeader)
	}
	return Object{Name: name, Size: body.Size(), SHA256: sum, Modified: info.LastModified}, nil
}

// staged hashes r and returns its content as a section that can be read
// again (for the upload and its retries). A reader that can seek and read
// at offsets (a file, a bytes.Reader) is hashed where it is; any other is
// copied to a temporary file on the way.
func staged(ctx context.Context, r io.Reader) (body *io.SectionReader, sum string, done func(), err error) {
	h := sha256.New()
	if rs, ok := r.(interface {
		io.ReadSeeker
		io.ReaderAt
	}); ok {
		start, err := rs.Seek(0, io.SeekCurrent)
		if err != nil {
			return nil, "", nil, err
		}
		n, err := io.Copy(h, ctxReader{ctx, rs})
		if err != nil {
			return nil, "", nil, err
		}
		return io.NewSectionReader(rs, start, n), hex.EncodeToString(h.Sum(nil)), func() {}, nil
	}
	f, err := os.CreateTemp("", "rampart-s3-put-*")
	if err != nil {
		return nil, "", nil, err
	}
	done = func() {
		f.Close()
		os.Remove(f.Name())
	}
	n, err := io.Copy(io.MultiWriter(f, h), ctxReader{ctx, r})
	if err != nil {
		done()
		return nil, "", nil, err
	}
	return io.NewSectionReader(f, 0, n), hex.EncodeToString(h.Sum(nil)), done, nil
}

// putParts uploads body in a multipart upload, each part with its SHA-256
// signed for the server to check, and completes it (the object appears,
// whole) only if the parts hash to sum: a caller's file that changed since
// it was hashed is refused, not stored.
func (s *S3) putParts(ctx context.Context, key string, body *io.SectionReader, sum string, opts minio.PutObjectOptions) (err error) {
	partSize := max(s.partSize, (body.Size()+maxParts-1)/maxParts)
	id, err := s.c.NewMultipartUpload(ctx, s.bucket, key, opts)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			// Even when ctx is done: the parts would otherwise be kept,
			// and billed, until a lifecycle rule removes them.
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			_ = s.c.AbortMultipartUpload(actx, s.bucket, key, id)
		}
	}()
	whole := sha256.New()
	buf := make([]byte, partSize)
	var parts []minio.CompletePart
	for n := 1; ; n++ {
		k, rerr := io.ReadFull(body, buf)
		if rerr == io.EOF {
			break
		}
		if rerr != nil && rerr != io.ErrUnexpectedEOF {
			return rerr
		}
		part := buf[:k]
		whole.Write(part)
		ph := sha256.Sum256(part)
		p, err := s.c.PutObjectPart(ctx, s.bucket, key, id, n, bytes.NewReader(part), int64(k),
			minio.PutObjectPartOptions{Sha256Hex: hex.EncodeToString(ph[:]), DisableContentSha256: true})
		if err != nil {
			return err
		}
		parts = append(parts, minio.CompletePart{PartNumber: n, ETag: p.ETag})
	}
	if got := hex.EncodeToString(whole.Sum(nil)); got != sum {
		return fmt.Errorf("the content changed while it was stored (SHA-256 %s, then %s): store a copy that does not change", sum, got)
	}
	_, err = s.c.CompleteMultipartUpload(ctx, s.bucket, key, id, parts, minio.PutObjectOptions{})
	return err
}

// Get reads the object and its SHA-256 in one GET, so an overwrite cannot
// pair one version's content with another's checksum.
func (s *S3) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	key, err := s.key(name)
	if err != nil {
		return nil, err
	}
	body, info, _, err := s.c.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, s.explain("read", name, err)
	}
	want := info.Metadata.Get(sumHeader)
	if want == "" {
		body.Close()
		return nil, fmt.Errorf("read %s in %s: it has no %s metadata, so it was not stored by Rampart: keep other objects out of the store's prefix", name, s.where, sumHeader)
	}
	return &verifying{r: body, ctx: ctx, h: sha256.New(), want: want, name: name}, nil
}

// headsInFlight bounds List's HEAD requests.
const headsInFlight = 16

// List lists the keys under prefix, then asks each object's SHA-256 with a
// HEAD request (16 at a time): S3's ListObjectsV2 returns no user
// metadata. Size and Modified come from the same HEAD, so the three agree
// when an object is overwritten during the listing; one deleted meanwhile
// is left out.
func (s *S3) List(ctx context.Context, prefix string) ([]Object, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // stops minio-go's listing goroutine on an early return
	var keys []string
	for o := range s.c.Client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.prefix + prefix, Recursive: true}) {
		if o.Err != nil {
			return nil, s.explain("list", prefix, o.Err)
		}
		// A key ending in / is a console's folder marker, not an object.
		if !strings.HasSuffix(o.Key, "/") {
			keys = append(keys, o.Key)
		}
	}
	objs := make([]Object, len(keys))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(headsInFlight)
	for i, key := range keys {
		name := strings.TrimPrefix(key, s.prefix)
		g.Go(func() error {
			info, err := s.c.StatObject(gctx, s.bucket, key, minio.StatObjectOptions{})
			if minio.ToErrorResponse(err).Code == minio.NoSuchKey {
				return nil
			}
			if err != nil {
				return s.explain("stat", name, err)
			}
			sum := info.Metadata.Get(sumHeader)
			if sum == "" {
				return fmt.Errorf("list %s: %s has no %s metadata, so it was not stored by Rampart: keep other objects out of the store's prefix", s.where, name, sumHeader)
			}
			objs[i] = Object{Name: name, Size: info.Size, SHA256: sum, Modified: info.LastModified}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	out := objs[:0]
	for _, o := range objs {
		if o.Name != "" {
			out = append(out, o)
		}
	}
	sortByName(out)
	return out, nil
}

// Delete removes the object; S3 answers a DELETE of a missing key with
// success, so it is idempotent.
func (s *S3) Delete(ctx context.Context, name string) error {
	key, err := s.key(name)
	if err != nil {
		return err
	}
	if err := s.c.RemoveObject(ctx, s.bucket, key, minio.RemoveObjectOptions{}); err != nil && minio.ToErrorResponse(err).Code != minio.NoSuchKey {
		return s.explain("delete", name, err)
	}
	return nil
}
