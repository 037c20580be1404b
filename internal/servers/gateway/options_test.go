package gateway

import (
	"strings"
	"testing"

	"k8s.io/client-go/rest"
)

// TestOptionsValidate: every problem is said at once, each naming its
// flag; options New accepts today validate.
func TestOptionsValidate(t *testing.T) {
	for _, c := range []struct {
		name string
		opts Options
		want []string // each in the error; none: valid
	}{
		{name: "zero options: the kubeconfig's server, plain HTTP"},
		{name: "a full configuration", opts: Options{Upstreams: []string{"https://10.0.0.1:6443", "https://10.0.0.2:6443"},
			CertFile: "gw.crt", KeyFile: "gw.key", ClientCAFile: "ca.crt", AccessLogPercent: 100,
			CountResources: []string{"pods", "deployments.apps"}, CountCustomResourceGroups: []string{"cert-manager.io"}, TrafficLogSample: SamplePolicy}},
		{name: "an upstream over HTTP", opts: Options{Upstreams: []string{"https://10.0.0.1:6443", "http://10.0.0.2:8080"}},
			want: []string{`--upstreams: upstream "http://10.0.0.2:8080" is not an https://HOST:PORT URL of a kube-apiserver`}},
		{name: "an upstream with no host", opts: Options{Upstreams: []string{"https://"}}, want: []string{`--upstreams: upstream "https://"`}},
		{name: "a certificate without its key", opts: Options{CertFile: "gw.crt"}, want: []string{"--tls-cert-file and --tls-private-key-file go together"}},
		{name: "a key without its certificate", opts: Options{KeyFile: "gw.key"}, want: []string{"--tls-cert-file and --tls-private-key-file go together"}},
		{name: "a client CA without a serving certificate", opts: Options{ClientCAFile: "ca.crt"},
			want: []string{"a client CA needs a serving certificate: set --tls-cert-file and --tls-private-key-file"}},
		{name: "a percent above 100", opts: Options{AccessLogPercent: 101}, want: []string{"--access-log-percent 101: give a percent, 0 to 100"}},
		{name: "a negative percent", opts: Options{AccessLogPercent: -1}, want: []string{"--access-log-percent -1"}},
		{name: "every group counted", opts: Options{CountCustomResourceGroups: []string{"*"}},
			want: []string{`--count-custom-resource-groups: custom-resource group "*" would let the gateway read every Secret`}},
		{name: "the core group counted", opts: Options{CountCustomResourceGroups: []string{""}}, want: []string{"--count-custom-resource-groups: custom-resource group \"\" is the core group"}},
		{name: "secrets counted", opts: Options{CountResources: []string{"pods", "secrets"}}, want: []string{"--count-resources: the gateway never counts secrets per namespace"}},
		{name: "an unknown sample", opts: Options{TrafficLogSample: "some"}, want: []string{`--traffic-log-sample "some": use all or policy`}},
		{name: "pools", opts: Options{Upstreams: []string{"https://10.0.0.1:6443", "https://10.0.0.2:6443"},
			UpstreamPools: []UpstreamPool{{Name: "heavy", URLs: []string{"https://10.0.0.3:6443"}}, {Name: "batch-2", URLs: []string{"https://10.0.0.4:6443", "https://10.0.0.5:6443"}}}}},
		{name: "a pool named default", opts: Options{UpstreamPools: []UpstreamPool{{Name: "default", URLs: []string{"https://10.0.0.3:6443"}}}},
			want: []string{"--upstream-pool default: the default pool is --upstreams"}},
		{name: "a pool's name no policy can give", opts: Options{UpstreamPools: []UpstreamPool{{Name: "Heavy_1", URLs: []string{"https://10.0.0.3:6443"}}}},
			want: []string{`--upstream-pool "Heavy_1": a pool's name is lower-case letters`}},
		{name: "a pool twice", opts: Options{UpstreamPools: []UpstreamPool{{Name: "heavy", URLs: []string{"https://10.0.0.3:6443"}}, {Name: "heavy", URLs: []string{"https://10.0.0.4:6443"}}}},
			want: []string{"--upstream-pool heavy: given twice"}},
		{name: "an API server in two pools", opts: Options{Upstreams: []string{"https://10.0.0.1:6443"}, UpstreamPools: []UpstreamPool{{Name: "heavy", URLs: []string{"https://10.0.0.1:6443"}}}},
			want: []string{"--upstream-pool heavy: https://10.0.0.1:6443 is in pool default already"}},
		{name: "a pool's API server over HTTP", opts: Options{UpstreamPools: []UpstreamPool{{Name: "heavy", URLs: []string{"http://10.0.0.3:8080"}}}},
			want: []string{`--upstream-pool heavy: upstream "http://10.0.0.3:8080" is not an https://HOST:PORT URL`}},
		{name: "every problem at once", opts: Options{Upstreams: []string{"10.0.0.1"}, KeyFile: "gw.key", ClientCAFile: "ca.crt", AccessLogPercent: 200,
			CountCustomResourceGroups: []string{"*"}, CountResources: []string{"secrets"}, TrafficLogSample: "some"},
			want: []string{"--upstreams", "--tls-cert-file and --tls-private-key-file go together", "a client CA needs a serving certificate",
				"--access-log-percent", "--count-custom-resource-groups", "--count-resources", "--traffic-log-sample"}},
	} {
		err := c.opts.Validate()
		if len(c.want) == 0 {
			if err != nil {
				t.Errorf("%s: %v, want valid", c.name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: valid, want %q", c.name, c.want)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q, want it to say %q", c.name, err, w)
			}
		}
		if lines := strings.Count(err.Error(), "\n") + 1; lines != len(c.want) {
			t.Errorf("%s: %d problems said (%q), want %d", c.name, lines, err, len(c.want))
		}
	}
}

func TestParseUpstreamPool(t *testing.T) {
	p, err := ParseUpstreamPool("heavy=https://10.0.0.3:6443,https://10.0.0.4:6443")
	if err != nil || p.Name != "heavy" || len(p.URLs) != 2 || p.URLs[1] != "https://10.0.0.4:6443" {
		t.Errorf("ParseUpstreamPool = %+v, %v", p, err)
	}
	for _, bad := range []string{"heavy", "=https://10.0.0.3:6443", "heavy="} {
		if _, err := ParseUpstreamPool(bad); err == nil || !strings.Contains(err.Error(), "want NAME=URL[,URL...]") {
			t.Errorf("ParseUpstreamPool(%q) = %v", bad, err)
		}
	}
}

// With no --upstreams the default pool is the kubeconfig's server, which
// a named pool may not take too.
func TestNewRefusesThePoolOfTheKubeconfigsServer(t *testing.T) {
	_, err := New(&rest.Config{Host: "https://10.0.0.1:6443", BearerToken: "gateway"},
		Options{UpstreamPools: []UpstreamPool{{Name: "heavy", URLs: []string{"https://10.0.0.1:6443"}}}})
	if err == nil || !strings.Contains(err.Error(), "https://10.0.0.1:6443 is in pool default already") {
		t.Errorf("New = %v", err)
	}
}
