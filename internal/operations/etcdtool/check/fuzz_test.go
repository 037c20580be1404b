package check

import (
	"context"
	"testing"
)

// FuzzCheckValue: whatever bytes etcd holds under a key, Check answers
// with one of its three statuses, never panics, and says why a value is
// undecodable.
func FuzzCheckValue(f *testing.F) {
	c, err := New(context.Background(), "")
	if err != nil {
		f.Fatal(err)
	}
	f.Add("/registry/configmaps/ns/cm", []byte("k8s\x00\n\x0f\n\x02v1\x12\tConfigMap\x12\x1d\n\x0f\n\x02cm\x12\x02ns\x1a\x00\"\x00*\x002\x008\x00B\x00z\x00\x1a\x00\"\x00"))
	f.Add("/registry/configmaps/ns/cm", []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm","namespace":"ns"}}`))
	f.Add("/registry/example.com/widgets/ns/w", []byte(`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w"}}`))
	f.Add("/registry/secrets/ns/s", []byte("k8s:enc:aescbc:v1:key1:\x00\x01"))
	f.Add("/registry/pods/ns/p", []byte("k8s\x00\n"))
	f.Fuzz(func(t *testing.T, key string, value []byte) {
		r := c.Check(context.Background(), key, value)
		switch r.Status {
		case OK, Undecodable, NotChecked:
		default:
			t.Fatalf("status %q for %q", r.Status, key)
		}
		if r.Status == Undecodable && r.Reason == "" {
			t.Fatalf("undecodable %q with no reason", key)
		}
	})
}
