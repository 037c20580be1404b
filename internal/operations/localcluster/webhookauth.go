package localcluster

import (
	"encoding/json"
	"os"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"github.com/rampart-io/rampart/internal/plumbing/pki"
)

// Only the API servers may call the manager's webhooks. They present a
// client certificate of a CA of its own, not the cluster CA: the cluster CA
// signs every user's certificate (and CSRs, through the controller
// manager), and none of those users may send admission reviews.
const (
	// webhookClientCA signs the API servers' webhook client certificate;
	// the manager trusts only it (--webhook-client-ca).
	webhookClientCA = "webhook-client-ca"
	// webhookClient is that certificate and key.
	webhookClient = "apiserver-webhook-client"
	// WebhookClientName is its common name, the one the local manager
	// accepts (--webhook-client-names).
	WebhookClientName = "kube-apiserver"
	// admissionConfig and webhookKubeconfig are the API servers'
	// --admission-control-config-file and the kubeconfig it names.
	admissionConfig   = "admission-config.yaml"
	webhookKubeconfig = "kubeconfigs/apiserver-webhooks.kubeconfig"
)

// makeWebhookClientPKI issues the API servers' webhook client certificate
// and writes the admission configuration that makes them present it to
// every manager replica (by URL, host:port) and to any webhook Service
// (*.svc: the chart's rampart-webhook, in the chart's tests).
func (c *Cluster) makeWebhookClientPKI(now time.Time) error {
	ca, err := pki.NewCA("rampart-local-webhook-client-ca", now, certValidity)
	if err != nil {
		return err
	}
	if err := ca.Write(c.pkiFile(webhookClientCA)); err != nil {
		return err
	}
	kp, err := ca.Issue(pki.Request{CommonName: WebhookClientName, Client: true, Now: now, Validity: certValidity})
	if err != nil {
		return err
	}
	if err := kp.Write(c.pkiFile(webhookClient)); err != nil {
		return err
	}
	user := &clientcmdapi.AuthInfo{ClientCertificate: c.pkiFile(webhookClient + ".crt"), ClientKey: c.pkiFile(webhookClient + ".key")}
	kc := clientcmdapi.NewConfig()
	kc.AuthInfos["*.svc"] = user
	for _, mp := range c.ports.managers {
		kc.AuthInfos["127.0.0.1:"+strconv.Itoa(mp.webhook)] = user
	}
	if err := os.MkdirAll(c.path("kubeconfigs"), 0o700); err != nil {
		return err
	}
	if err := clientcmd.WriteToFile(*kc, c.path(webhookKubeconfig)); err != nil {
		return err
	}
	return c.writeAdmissionConfig()
}

// writeAdmissionConfig writes an AdmissionConfiguration that gives both
// webhook admission plugins the webhook kubeconfig.
func (c *Cluster) writeAdmissionConfig() error {
	plugin, err := json.Marshal(map[string]string{
		"apiVersion":     "apiserver.config.k8s.io/v1",
		"kind":           "WebhookAdmissionConfiguration",
		"kubeConfigFile": c.path(webhookKubeconfig),
	})
	if err != nil {
		return err
	}
	cfg := apiserverv1.AdmissionConfiguration{
		TypeMeta: metav1.TypeMeta{APIVersion: apiserverv1.SchemeGroupVersion.String(), Kind: "AdmissionConfiguration"},
	}
	for _, name := range []string{"ValidatingAdmissionWebhook", "MutatingAdmissionWebhook"} {
		cfg.Plugins = append(cfg.Plugins, apiserverv1.AdmissionPluginConfiguration{Name: name, Configuration: &runtime.Unknown{Raw: plugin}})
	}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return err
	}
	return os.WriteFile(c.path(admissionConfig), data, 0o600)
}

// managerClientAuthArgs make a manager replica accept only the API servers.
func (c *Cluster) managerClientAuthArgs() []string {
	return []string{"--webhook-client-ca=" + c.pkiFile(webhookClientCA+".crt"), "--webhook-client-names=" + WebhookClientName}
}
