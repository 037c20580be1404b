package localcluster

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/rampart-io/rampart/internal/plumbing/pki"
	"github.com/rampart-io/rampart/internal/plumbing/storage"
	"github.com/rampart-io/rampart/internal/protection/recyclebin"
)

// A local cluster lives for days at most; a year leaves no expiry to manage.
const certValidity = 365 * 24 * time.Hour

// identity is a client of the API server: a kubeconfig with a client
// certificate whose CN is the user and O the groups.
type identity struct {
	file   string
	user   string
	groups []string
}

// The component identities. Controller-manager and scheduler use the users
// the API server's bootstrap RBAC policy grants exactly their rights; the
// manager gets only the ClusterRole Rampart ships.
var (
	adminID      = identity{"kubeconfig", "rampart-admin", []string{"system:masters"}}
	kcmID        = identity{"kubeconfigs/kube-controller-manager.kubeconfig", "system:kube-controller-manager", nil}
	schedulerID  = identity{"kubeconfigs/kube-scheduler.kubeconfig", "system:kube-scheduler", nil}
	kwokID       = identity{"kubeconfigs/kwok.kubeconfig", "kwok", []string{"system:masters"}}
	managerID    = identity{"kubeconfigs/rampart-manager.kubeconfig", ManagerUser, nil}
	apiserverEtc = identity{"", EtcdAPIServerUser, nil}
)

// ManagerUser is the user name of the local manager's client certificate,
// bound to the manager's ClusterRole.
const ManagerUser = "rampart-manager"

// makePKI writes the cluster CA, the etcd CA, serving certificates, the
// service-account signing key and one kubeconfig per identity.
func (c *Cluster) makePKI(now time.Time) error {
	p := c.path("pki")
	ca, err := pki.NewCA("rampart-local-ca", now, certValidity)
	if err != nil {
		return err
	}
	if err := ca.Write(filepath.Join(p, "ca")); err != nil {
		return err
	}
	etcdCA, err := pki.NewCA("rampart-local-etcd-ca", now, certValidity)
	if err != nil {
		return err
	}
	if err := etcdCA.Write(filepath.Join(p, "etcd-ca")); err != nil {
		return err
	}
	issue := []struct {
		by   *pki.KeyPair
		base string
		req  pki.Request
	}{
		{etcdCA, "etcd-server", pki.Request{CommonName: "etcd", Hosts: []string{"127.0.0.1", "localhost"}, Client: true}},
		{etcdCA, "etcd-client", pki.Request{CommonName: apiserverEtc.user, Client: true}},
		// etcd's other users (etcdauth.go): the common name is the user.
		{etcdCA, "etcd-root", pki.Request{CommonName: EtcdRootUser, Client: true}},
		{etcdCA, "etcd-reader", pki.Request{CommonName: EtcdReaderUser, Client: true}},
		{etcdCA, "etcd-operator", pki.Request{CommonName: EtcdOperatorUser, Client: true}},
		{ca, "apiserver", pki.Request{CommonName: "kube-apiserver", Hosts: []string{
			"127.0.0.1", "localhost", "10.0.0.1", "kubernetes", "kubernetes.default",
			"kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}}},
		// How the API server authenticates to real nodes' kubelets (logs,
		// exec, port-forward); they accept only this CA's clients.
		{ca, "apiserver-kubelet-client", pki.Request{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"system:masters"}, Client: true}},
	}
	for _, i := range issue {
		i.req.Now, i.req.Validity = now, certValidity
		kp, err := i.by.Issue(i.req)
		if err != nil {
			return err
		}
		if err := kp.Write(filepath.Join(p, i.base)); err != nil {
			return err
		}
	}
	if err := writeServiceAccountKey(filepath.Join(p, "sa.key")); err != nil {
		return err
	}
	kwok := kwokID
	if c.opts.Gateway && c.opts.ComponentsViaGateway {
		kwok.groups = []string{GatewayAdminsGroup} // the gateway does not forward system:masters
	}
	for _, id := range []identity{adminID, kcmID, schedulerID, kwok, managerID} {
		kp, err := ca.Issue(pki.Request{CommonName: id.user, Organization: id.groups, Client: true, Now: now, Validity: certValidity})
		if err != nil {
			return err
		}
		if err := c.writeKubeconfig(id.file, ca, kp); err != nil {
			return err
		}
	}
	metrics, err := ca.Issue(pki.Request{CommonName: "rampart-manager-metrics", Hosts: []string{"127.0.0.1", "localhost"}, Now: now, Validity: certValidity})
	if err != nil {
		return err
	}
	if err := metrics.Write(filepath.Join(p, "manager-metrics", "tls")); err != nil {
		return err
	}
	if err := c.makeWebhookClientPKI(now); err != nil {
		return err
	}
	if err := writeRecycleBinKey(c.pkiFile(RecycleBinKey)); err != nil {
		return err
	}
	return c.makeGatewayPKI(ca, now)
}

// RecycleBinKey is the file in pki/ with the key the recycle bin seals
// Secrets with.
const RecycleBinKey = "recycle-bin.key"

// RecycleBinDir is the recycle bin's directory under the cluster's.
const RecycleBinDir = "recycle-bin"

// writeRecycleBinKey writes 32 random bytes, the AES-256 key, unless the
// file exists: a new key would leave the Secrets kept so far sealed for
// good.
func writeRecycleBinKey(path string) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return err
	}
	return os.WriteFile(path, key, 0o600)
}

func writeServiceAccountKey(path string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600)
}

func (c *Cluster) writeKubeconfig(file string, ca, client *pki.KeyPair) error {
	keyPEM, err := client.KeyPEM()
	if err != nil {
		return err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["rampart-local"] = &clientcmdapi.Cluster{
		Server:                   c.serverFor(file),
		CertificateAuthorityData: ca.CertPEM(),
	}
	cfg.AuthInfos[client.Cert.Subject.CommonName] = &clientcmdapi.AuthInfo{
		ClientCertificateData: client.CertPEM(),
		ClientKeyData:         keyPEM,
	}
	cfg.Contexts["rampart-local"] = &clientcmdapi.Context{Cluster: "rampart-local", AuthInfo: client.Cert.Subject.CommonName}
	cfg.CurrentContext = "rampart-local"
	path := c.path(file)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return clientcmd.WriteToFile(*cfg, path)
}

// RecycleBin is the recycle bin the cluster's managers keep, with its key.
func (c *Cluster) RecycleBin() (*recyclebin.Bin, error) {
	if c.opts.NoRecycleBin {
		return nil, errors.New("the cluster's managers keep no recycle bin (Options.NoRecycleBin)")
	}
	key, err := recyclebin.LoadKey(c.pkiFile(RecycleBinKey))
	if err != nil {
		return nil, err
	}
	if c.opts.RecycleBinStore == "" {
		return &recyclebin.Bin{Store: storage.Dir{Root: c.path(RecycleBinDir)}, Key: key}, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store, err := storage.Open(ctx, c.opts.RecycleBinStore)
	if err != nil {
		return nil, err
	}
	return &recyclebin.Bin{Store: store, Key: key}, nil
}
