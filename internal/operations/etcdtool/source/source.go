// Package source walks the keys of an etcd store: every revision kept in a
// snapshot file (read-only, straight from bbolt's key bucket), or the
// latest revision of each key of a live etcd through its client API.
// Values are handed to the caller one at a time and never kept, so memory
// does not grow with the size of the values.
package source

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	bolt "go.etcd.io/bbolt"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/encoding/protowire"
)

// Entry is one revision of one key. Key and Value are valid only during
// the callback.
type Entry struct {
	Key         []byte
	Value       []byte
	ModRevision int64
	// Stored is the size of the revision's record: the key, the value and
	// etcd's bookkeeping.
	Stored int
	// Tombstone marks a delete.
	Tombstone bool
}

// keyBucket is etcd's bucket of revisions (server/storage/schema).
var keyBucket = []byte("key")

// revision keys are 8 bytes main revision, '_', 8 bytes sub revision, and
// a trailing 't' on tombstones.
const revBytesLen = 17

// OpenSnapshot opens a snapshot file (or a member's db file) read-only.
func OpenSnapshot(path string) (*bolt.DB, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, err
	}
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("open %s as an etcd snapshot: %w", path, err)
	}
	return db, nil
}

// WalkSnapshot calls fn for every revision in the snapshot, oldest first.
func WalkSnapshot(path string, fn func(Entry) error) error {
	db, err := OpenSnapshot(path)
	if err != nil {
		return err
	}
	defer db.Close()
	return db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(keyBucket)
		if b == nil {
			return fmt.Errorf("%s has no %q bucket: not an etcd v3 snapshot", path, keyBucket)
		}
		return b.ForEach(func(k, v []byte) error {
			if len(k) < revBytesLen {
				return fmt.Errorf("revision key %x is too short", k)
			}
			e, err := decodeKeyValue(v)
			if err != nil {
				return fmt.Errorf("revision %d: %w", binary.BigEndian.Uint64(k), err)
			}
			e.Stored = len(k) + len(v)
			e.Tombstone = len(k) > revBytesLen && k[revBytesLen] == 't'
			if e.ModRevision == 0 {
				e.ModRevision = int64(binary.BigEndian.Uint64(k))
			}
			return fn(e)
		})
	})
}

// decodeKeyValue reads the fields of an mvccpb.KeyValue it needs without
// copying the value (field 1 key, 3 mod_revision, 5 value).
func decodeKeyValue(b []byte) (Entry, error) {
	var e Entry
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return e, protowire.ParseError(n)
		}
		b = b[n:]
		switch {
		case typ == protowire.BytesType && (num == 1 || num == 5):
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return e, protowire.ParseError(n)
			}
			if num == 1 {
				e.Key = v
			} else {
				e.Value = v
			}
			b = b[n:]
		case typ == protowire.VarintType && num == 3:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return e, protowire.ParseError(n)
			}
			e.ModRevision = int64(v)
			b = b[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return e, protowire.ParseError(n)
			}
			b = b[n:]
		}
	}
	return e, nil
}

// pageSize bounds each range request to the live etcd.
const pageSize = 500

// WalkLive calls fn for the latest revision of every key under prefix, in
// pages read at one revision so the walk is a consistent view. It returns
// that revision.
func WalkLive(ctx context.Context, cli *clientv3.Client, prefix string, fn func(Entry) error) (int64, error) {
	end := clientv3.GetPrefixRangeEnd(prefix)
	key := prefix
	var rev int64
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(pageSize)}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := cli.Get(ctx, key, opts...)
		if err != nil {
			return rev, err
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			if err := fn(Entry{Key: kv.Key, Value: kv.Value, ModRevision: kv.ModRevision, Stored: proto.Size(kv)}); err != nil {
				return rev, err
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return rev, nil
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// Client is how to reach a live etcd: the flags of etcdctl, or the PEM
// itself (CAData, CertData, KeyData: from a Secret, never written to disk).
type Client struct {
	Endpoints []string
	CACert    string
	Cert      string
	Key       string

	CAData, CertData, KeyData []byte
}

// Dial connects with TLS client certificates. The caller closes the client.
func (c Client) Dial(ctx context.Context) (*clientv3.Client, error) {
	if len(c.Endpoints) == 0 {
		return nil, errors.New("no etcd endpoint: give --endpoints=https://HOST:2379 (or --snapshot FILE)")
	}
	var tlsCfg *tls.Config
	if len(c.CAData) > 0 || len(c.CertData) > 0 {
		tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12}
		if len(c.CAData) > 0 {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(c.CAData) {
				return nil, errors.New("ca.crt holds no PEM certificate")
			}
			tlsCfg.RootCAs = pool
		}
		pair, err := tls.X509KeyPair(c.CertData, c.KeyData)
		if err != nil {
			return nil, fmt.Errorf("tls.crt/tls.key: %w", err)
		}
		tlsCfg.Certificates = []tls.Certificate{pair}
	} else if c.CACert != "" || c.Cert != "" {
		tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12}
		if c.CACert != "" {
			pem, err := os.ReadFile(c.CACert)
			if err != nil {
				return nil, fmt.Errorf("--cacert: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("--cacert %s holds no PEM certificate", c.CACert)
			}
			tlsCfg.RootCAs = pool
		}
		if c.Cert != "" || c.Key != "" {
			pair, err := tls.LoadX509KeyPair(c.Cert, c.Key)
			if err != nil {
				return nil, fmt.Errorf("--cert/--key: %w", err)
			}
			tlsCfg.Certificates = []tls.Certificate{pair}
		}
	} else {
		for _, e := range c.Endpoints {
			if strings.HasPrefix(e, "https://") {
				return nil, fmt.Errorf("%s is https: give --cacert, --cert and --key", e)
			}
		}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints, TLS: tlsCfg, DialTimeout: 10 * time.Second, Context: ctx, Logger: nopLogger()})
	if err != nil {
		return nil, fmt.Errorf("connect to etcd %v: %w", c.Endpoints, err)
	}
	// Fail now, with the endpoint named, rather than at the first read.
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := cli.Status(sctx, c.Endpoints[0]); err != nil {
		_ = cli.Close()
		if herr := handshake(ctx, c.Endpoints[0], tlsCfg); herr != nil {
			// gRPC retries a refused certificate until the deadline and
			// says only that; the handshake says which certificate.
			return nil, fmt.Errorf("etcd %s: %w", c.Endpoints[0], herr)
		}
		return nil, fmt.Errorf("etcd %s: %w", c.Endpoints[0], err)
	}
	return cli, nil
}

// handshake makes a TLS connection to endpoint as the client would, and
// returns why it fails, if it does.
func handshake(ctx context.Context, endpoint string, cfg *tls.Config) error {
	u, err := url.Parse(endpoint)
	if err != nil || cfg == nil || u.Scheme != "https" {
		return nil
	}
	cfg = cfg.Clone()
	cfg.ServerName = u.Hostname()
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second}, Config: cfg}
	hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := d.DialContext(hctx, "tcp", u.Host)
	if err != nil {
		return fmt.Errorf("TLS handshake: %w (check the CA bundle and the client certificate)", err)
	}
	return conn.Close()
}
