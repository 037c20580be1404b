package servingcert

import (
	"context"
	"errors"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rampart-io/rampart/internal/plumbing/pki"
)

// CA is the webhook CA, and the CA it replaced, which stays trusted until
// it expires so that certificates it signed keep working during a change.
type CA struct {
	Current *pki.KeyPair
	// Previous is the replaced CA's certificate (PEM), or nil.
	Previous []byte
	// version is the store's version of what was loaded, for Save.
	version string
}

// ErrConflict is returned by Save when the stored CA changed since Load:
// another replica rotated it first.
var ErrConflict = errors.New("the stored webhook CA changed")

// CAStore keeps the CA where every replica of the manager finds it, so that
// they all serve certificates the one registered CA bundle trusts.
type CAStore interface {
	// Load returns the stored CA, or nil if there is none.
	Load(ctx context.Context) (*CA, error)
	// Save stores next in place of prev (nil: there was none), or returns
	// ErrConflict if the stored CA is no longer prev.
	Save(ctx context.Context, next, prev *CA) error
}

// DirStore keeps the CA in a directory: for a single manager.
type DirStore struct{ Dir string }

// Load implements CAStore.
func (d DirStore) Load(context.Context) (*CA, error) {
	kp, err := pki.Load(filepath.Join(d.Dir, caBase))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	prev, _ := os.ReadFile(filepath.Join(d.Dir, previousCA))
	return &CA{Current: kp, Previous: prev}, nil
}

// Save implements CAStore.
func (d DirStore) Save(_ context.Context, next, _ *CA) error {
	if err := os.MkdirAll(d.Dir, 0o700); err != nil {
		return err
	}
	if next.Previous != nil {
		if err := os.WriteFile(filepath.Join(d.Dir, previousCA), next.Previous, 0o644); err != nil {
			return err
		}
	}
	return next.Current.Write(filepath.Join(d.Dir, caBase))
}

// SecretStore keeps the CA in a Secret of the manager's namespace, shared
// by its replicas; optimistic concurrency settles which replica's CA wins.
type SecretStore struct {
	Client    kubernetes.Interface
	Namespace string
	Name      string
}

// Secret keys.
const (
	secretCert     = "ca.crt"
	secretKey      = "ca.key"
	secretPrevious = "ca-previous.crt"
)

// +kubebuilder:rbac:groups="",namespace=rampart-system,resources=secrets,verbs=create
// +kubebuilder:rbac:groups="",namespace=rampart-system,resources=secrets,verbs=get;update,resourceNames=rampart-webhook-ca

// Load implements CAStore.
func (s SecretStore) Load(ctx context.Context) (*CA, error) {
	sec, err := s.Client.CoreV1().Secrets(s.Namespace).Get(ctx, s.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	kp, err := pki.Parse(sec.Data[secretCert], sec.Data[secretKey])
	if err != nil {
		// Unreadable: treated as due, replaced under the same version.
		return &CA{version: sec.ResourceVersion}, nil
	}
	return &CA{Current: kp, Previous: sec.Data[secretPrevious], version: sec.ResourceVersion}, nil
}

// Save implements CAStore.
func (s SecretStore) Save(ctx context.Context, next, prev *CA) error {
	keyPEM, err := next.Current.KeyPEM()
	if err != nil {
		return err
	}
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: s.Namespace, Labels: map[string]string{"app.kubernetes.io/managed-by": "rampart"}},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{secretCert: next.Current.CertPEM(), secretKey: keyPEM},
	}
	if next.Previous != nil {
		sec.Data[secretPrevious] = next.Previous
	}
	secrets := s.Client.CoreV1().Secrets(s.Namespace)
	if prev == nil {
		_, err = secrets.Create(ctx, sec, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return ErrConflict
		}
		return err
	}
	sec.ResourceVersion = prev.version
	_, err = secrets.Update(ctx, sec, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		return ErrConflict
	}
	return err
}
