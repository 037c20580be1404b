// Package gensnap writes bbolt files in etcd's layout (a "key" bucket of
// revisions holding mvccpb.KeyValue records, a "meta" bucket) for tests and
// benchmarks of the tools that read snapshots, at any size.
package gensnap

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"

	"google.golang.org/protobuf/proto"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes/scheme"
)

// Spec says what to write.
type Spec struct {
	// Keys is the number of distinct keys, spread over Resources and
	// Namespaces.
	Keys       int
	Namespaces int
	// ValueBytes is the size of each value.
	ValueBytes int
	// Revisions is the number of revisions written per key (at least 1);
	// every DeleteEvery-th key is deleted after them (0: none).
	Revisions   int
	DeleteEvery int
}

// configMapValue is a ConfigMap as the API server stores it (the protobuf
// envelope), at least n bytes long, so that tools which decode values
// (auger's analyze, rampart etcd check) read every one as an object.
func configMapValue(rnd *rand.Rand, n int) ([]byte, error) {
	letters := make([]byte, n)
	for i := range letters {
		letters[i] = byte('a' + rnd.IntN(26))
	}
	enc := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)
	for pad := max(n-64, 0); ; pad++ {
		cm := &corev1.ConfigMap{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Name: "obj"},
			Data:       map[string]string{"d": string(letters[:min(pad, n)])},
		}
		var b bytes.Buffer
		if err := enc.Encode(cm, &b); err != nil {
			return nil, err
		}
		if b.Len() >= n || pad >= n {
			return b.Bytes(), nil
		}
	}
}

// Resources are the resources keys are spread over, in the API server's
// key layout.
var Resources = []string{"configmaps", "secrets", "pods", "events", "deployments", "example.com/widgets"}

// Key is the i-th key of a Spec.
func (s Spec) Key(i int) string {
	return fmt.Sprintf("/registry/%s/ns-%d/obj-%d", Resources[i%len(Resources)], i%max(s.Namespaces, 1), i)
}

// Write writes the file at path and returns the last revision.
func Write(path string, s Spec) (int64, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{NoSync: true, NoFreelistSync: true})
	if err != nil {
		return 0, err
	}
	defer db.Close()
	rnd := rand.New(rand.NewPCG(1, 2))
	value, err := configMapValue(rnd, s.ValueBytes)
	if err != nil {
		return 0, err
	}
	var rev int64
	const batch = 5000
	type op struct {
		key int
		del bool
		ver int64
	}
	var ops []op
	for r := range max(s.Revisions, 1) {
		for k := range s.Keys {
			ops = append(ops, op{key: k, ver: int64(r + 1)})
		}
	}
	if s.DeleteEvery > 0 {
		for k := 0; k < s.Keys; k += s.DeleteEvery {
			ops = append(ops, op{key: k, del: true})
		}
	}
	created := make([]int64, s.Keys)
	for start := 0; start < len(ops); start += batch {
		err := db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("key"))
			if err != nil {
				return err
			}
			b.FillPercent = 1 // revisions only grow
			for _, o := range ops[start:min(start+batch, len(ops))] {
				rev++
				rk := make([]byte, 17, 18)
				binary.BigEndian.PutUint64(rk, uint64(rev))
				rk[8] = '_'
				kv := &mvccpb.KeyValue{Key: []byte(s.Key(o.key)), ModRevision: rev}
				if o.del {
					rk = append(rk, 't')
				} else {
					if created[o.key] == 0 {
						created[o.key] = rev
					}
					kv.CreateRevision, kv.Version, kv.Value = created[o.key], o.ver, value
				}
				v, err := proto.Marshal(kv)
				if err != nil {
					return err
				}
				if err := b.Put(rk, v); err != nil {
					return err
				}
			}
			meta, err := tx.CreateBucketIfNotExists([]byte("meta"))
			if err != nil {
				return err
			}
			ci := make([]byte, 8)
			binary.BigEndian.PutUint64(ci, uint64(rev))
			return meta.Put([]byte("consistent_index"), ci)
		})
		if err != nil {
			return rev, err
		}
	}
	return rev, db.Sync()
}
