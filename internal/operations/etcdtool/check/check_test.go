package check_test

import (
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apiserver/pkg/server/options/encryptionconfig"
	storagevalue "k8s.io/apiserver/pkg/storage/value"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/rampart-io/rampart/internal/operations/etcdtool/check"
)

func encode(t *testing.T, s runtime.Object) []byte {
	t.Helper()
	s.GetObjectKind().SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind(reflect.TypeOf(s).Elem().Name()))
	var b strings.Builder
	if err := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Encode(s, &b); err != nil {
		t.Fatal(err)
	}
	return []byte(b.String())
}

func encryptionConfig(t *testing.T, provider, secret string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "enc.yaml")
	cfg := `apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
- resources: [secrets]
  providers:
  - ` + provider + `:
      keys:
      - name: key1
        secret: ` + base64.StdEncoding.EncodeToString([]byte(secret)) + `
  - identity: {}
`
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestCheckDecodesAsTheAPIServer(t *testing.T) {
	ctx := context.Background()
	c, err := check.New(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	cm := encode(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "good", Namespace: "default"}})
	for _, tc := range []struct {
		key   string
		value []byte
		want  check.Status
	}{
		{"/registry/secrets/default/s", encode(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "default"}}), check.OK},
		{"/registry/configmaps/default/good", cm, check.OK},
		{"/registry/configmaps/default/bad", append([]byte("k8s\x00"), 0xff, 0xff, 0x01), check.Undecodable},
		{"/registry/configmaps/default/empty", nil, check.Undecodable},
		{"/registry/example.com/widgets/default/w", []byte(`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w"}}`), check.OK},
		{"/registry/example.com/widgets/default/broken", []byte(`{"apiVersion":"example.com/v1","kind":"Widget","metadata":`), check.Undecodable},
		{"/registry/secrets/default/enc", []byte("k8s:enc:aescbc:v1:key1:xxxxxxxx"), check.NotChecked},
	} {
		r := c.Check(ctx, tc.key, tc.value)
		if r.Status != tc.want {
			t.Errorf("%s: %s (%s), want %s", tc.key, r.Status, r.Reason, tc.want)
		}
	}
}

func TestCheckDecryptsWithTheEncryptionConfiguration(t *testing.T) {
	ctx := context.Background()
	const key = "/registry/secrets/default/s"
	plain := encode(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "default"}})
	for _, tc := range []struct{ provider, secret string }{
		{"aescbc", "0123456789abcdef0123456789abcdef"},
		{"aesgcm", "0123456789abcdef0123456789abcdef"},
		{"secretbox", "0123456789abcdef0123456789abcdef"},
	} {
		t.Run(tc.provider, func(t *testing.T) {
			// Encrypt with the API server's own transformers.
			cfg, err := encryptionconfig.LoadEncryptionConfig(ctx, encryptionConfig(t, tc.provider, tc.secret), false, "test")
			if err != nil {
				t.Fatal(err)
			}
			stored, err := encryptionconfig.StaticTransformers(cfg.Transformers).
				TransformerForResource(corev1.Resource("secrets")).TransformToStorage(ctx, plain, storagevalue.DefaultContext(key))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(string(stored), "k8s:enc:"+tc.provider) {
				t.Fatalf("not encrypted: %q", stored[:20])
			}
			c, err := check.New(ctx, encryptionConfig(t, tc.provider, tc.secret))
			if err != nil {
				t.Fatal(err)
			}
			if r := c.Check(ctx, key, stored); r.Status != check.OK || r.Kind != "v1/Secret" {
				t.Fatalf("with the right key: %+v", r)
			}
			wrong, err := check.New(ctx, encryptionConfig(t, tc.provider, "fedcba9876543210fedcba9876543210"))
			if err != nil {
				t.Fatal(err)
			}
			// aescbc has no authentication tag: with a wrong key about one
			// value in 256 passes the padding check and decrypts to
			// garbage. Every value must still be reported undecodable with
			// the decryption named, so try many (each has its own IV).
			for i := 0; i < 2000; i++ {
				if i > 0 {
					if stored, err = encryptionconfig.StaticTransformers(cfg.Transformers).
						TransformerForResource(corev1.Resource("secrets")).TransformToStorage(ctx, plain, storagevalue.DefaultContext(key)); err != nil {
						t.Fatal(err)
					}
				}
				if r := wrong.Check(ctx, key, stored); r.Status != check.Undecodable || !strings.Contains(r.Reason, "cannot decrypt") {
					t.Fatalf("with a wrong key (value %d): %+v", i, r)
				}
			}
		})
	}
}

func TestRemovalCommandQuotesTheKey(t *testing.T) {
	rm := check.Removal{Endpoints: []string{"https://127.0.0.1:2379"}, CACert: "/pki/ca.crt", Cert: "/pki/c.crt", KeyFile: "/pki/c.key"}
	got := rm.Command("/registry/configmaps/ns/it's")
	want := `ETCDCTL_API=3 etcdctl --endpoints=https://127.0.0.1:2379 --cacert=/pki/ca.crt --cert=/pki/c.crt --key=/pki/c.key del -- '/registry/configmaps/ns/it'\''s'`
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}
