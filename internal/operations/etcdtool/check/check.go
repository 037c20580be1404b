// Package check decodes etcd values as the API server would and names the
// objects it would fail on: a corrupted value makes every LIST of its
// resource fail, and only a delete in etcd itself removes it.
package check

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apiserver/pkg/server/options/encryptionconfig"
	storagevalue "k8s.io/apiserver/pkg/storage/value"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/rampart-io/rampart/internal/operations/etcdtool/etcdkey"
)

// Status of one value.
type Status string

const (
	OK          Status = "ok"
	Undecodable Status = "undecodable"
	// NotChecked values are encrypted and no EncryptionConfiguration was
	// given.
	NotChecked Status = "not checked"
)

// Result is the verdict on one key's latest value.
type Result struct {
	Key    string `json:"key"`
	Status Status `json:"status"`
	// ModRevision is the revision that wrote the value.
	ModRevision int64 `json:"modRevision,omitempty"`
	// Kind is the decoded object's apiVersion and kind, when known.
	Kind   string `json:"kind,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// encPrefix starts every value an encryption provider wrote.
const encPrefix = "k8s:enc:"

// Checker decodes values.
type Checker struct {
	decoder      runtime.Decoder
	transformers encryptionconfig.StaticTransformers
	groups       map[string]string
}

// New builds a checker; encryptionConfig is the API server's
// --encryption-provider-config file, or "" when there is none.
func New(ctx context.Context, encryptionConfig string) (*Checker, error) {
	c := &Checker{
		decoder: serializer.NewCodecFactory(scheme.Scheme).UniversalDeserializer(),
		groups:  groupsOf(scheme.Scheme),
	}
	if encryptionConfig != "" {
		cfg, err := encryptionconfig.LoadEncryptionConfig(ctx, encryptionConfig, false, "rampart-etcd-check")
		if err != nil {
			return nil, fmt.Errorf("--encryption-provider-config: %w", err)
		}
		c.transformers = cfg.Transformers
	}
	return c, nil
}

// groupsOf maps the resources of keys without a group (/registry/deployments)
// to their API group, as the encryption configuration names them. Where a
// resource is served by several groups, the core group wins, then any but
// the retired extensions group.
func groupsOf(s *runtime.Scheme) map[string]string {
	out := map[string]string{}
	for gvk := range s.AllKnownTypes() {
		if gvk.Version == runtime.APIVersionInternal || strings.HasSuffix(gvk.Kind, "List") || strings.HasSuffix(gvk.Kind, "Options") {
			continue
		}
		plural, _ := meta.UnsafeGuessKindToResource(gvk)
		prev, seen := out[plural.Resource]
		if !seen || (prev != "" && (gvk.Group == "" || prev == "extensions")) {
			out[plural.Resource] = gvk.Group
		}
	}
	return out
}

// Check decodes one value of key.
func (c *Checker) Check(ctx context.Context, key string, value []byte) Result {
	r := Result{Key: key, Status: OK}
	encrypted := "" // the provider that decrypted value, if any
	if strings.HasPrefix(string(value), encPrefix) {
		if c.transformers == nil {
			r.Status, r.Reason = NotChecked, "encrypted ("+provider(value)+"): give --encryption-provider-config to decrypt"
			return r
		}
		plain, _, err := c.transformers.TransformerForResource(c.groupResource(key)).
			TransformFromStorage(ctx, value, storagevalue.DefaultContext(key))
		if err != nil {
			r.Status, r.Reason = Undecodable, "cannot decrypt ("+provider(value)+"): "+err.Error()
			return r
		}
		encrypted, value = provider(value), plain
	}
	obj, gvk, err := c.decoder.Decode(value, nil, nil)
	if err != nil && runtime.IsNotRegisteredError(err) {
		// Custom resources and aggregated types: JSON the API server reads
		// as unstructured, or a protobuf envelope it decodes with a codec
		// this scheme lacks.
		if strings.HasPrefix(string(value), "{") {
			u := &unstructured.Unstructured{}
			obj, gvk, err = unstructured.UnstructuredJSONScheme.Decode(value, nil, u)
		} else {
			err = nil
			r.Reason = "protobuf envelope read; its type is not built in"
		}
	}
	if err != nil {
		r.Status, r.Reason = Undecodable, err.Error()
		if encrypted != "" {
			// aescbc carries no authentication tag: a wrong key passes
			// the padding check about once in 256 and yields garbage, so
			// a value that decrypts but does not decode may be either.
			r.Reason = "cannot decrypt (" + encrypted + "), or decrypted a damaged value: " + err.Error()
		}
		return r
	}
	if gvk != nil {
		r.Kind = gvk.GroupVersion().String() + "/" + gvk.Kind
	}
	if obj != nil {
		if m, err := meta.Accessor(obj); err == nil && m.GetName() != "" && !strings.HasSuffix(key, "/"+m.GetName()) {
			r.Status, r.Reason = Undecodable, fmt.Sprintf("decodes, but names %q, not the key's object", m.GetName())
		}
	}
	return r
}

func (c *Checker) groupResource(key string) schema.GroupResource {
	g, res := etcdkey.Parse(key).GroupResource()
	if g == "" {
		g = c.groups[res]
	}
	return schema.GroupResource{Group: g, Resource: res}
}

// provider names the provider in an encrypted value: k8s:enc:aescbc:v1:key1:…
func provider(v []byte) string {
	parts := strings.SplitN(strings.TrimPrefix(string(v), encPrefix), ":", 4)
	if len(parts) < 3 {
		return "unknown provider"
	}
	return strings.Join(parts[:3], ":")
}

// ErrUndecodable says a check found objects the API server cannot read.
var ErrUndecodable = errors.New("undecodable objects found")

// Removal is how to reach etcd in the delete command printed for each
// undecodable object: etcdctl's flags.
type Removal struct {
	Endpoints             []string
	CACert, Cert, KeyFile string
}

// Command is the exact etcdctl command that removes key.
func (rm Removal) Command(key string) string {
	var b strings.Builder
	b.WriteString("ETCDCTL_API=3 etcdctl")
	if len(rm.Endpoints) > 0 {
		b.WriteString(" --endpoints=" + quote(strings.Join(rm.Endpoints, ",")))
	} else {
		b.WriteString(" --endpoints=https://ETCD:2379")
	}
	for _, f := range [][2]string{{"cacert", rm.CACert}, {"cert", rm.Cert}, {"key", rm.KeyFile}} {
		if f[1] != "" {
			b.WriteString(" --" + f[0] + "=" + quote(f[1]))
		}
	}
	b.WriteString(" del -- " + quote(key))
	return b.String()
}

// quote quotes s for a POSIX shell.
func quote(s string) string {
	if s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/-_.:,=@+", r))
	}) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
