// Command scaleprobe measures, against a running local cluster, what
// hack/scale.sh prints at each step: the webhook's added DELETE latency
// (p50 of deletes it judges and admits over p50 of deletes it never sees),
// how long a Cascading namespace's DELETE takes to be denied, and the
// gateway's overhead (p50 of a GET through the gateway over p50 direct).
// It prints one line of key=value pairs.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "admin kubeconfig (direct to the API server)")
	gatewayKubeconfig := flag.String("gateway-kubeconfig", "", "kubeconfig through the gateway")
	namespace := flag.String("namespace", "scale-probe", "namespace for the probe's config maps")
	cascading := flag.String("cascading-namespace", "", "a namespace labelled Cascading with live pods")
	n := flag.Int("n", 60, "deletes and GETs per measurement")
	flag.Parse()
	if err := run(*kubeconfig, *gatewayKubeconfig, *namespace, *cascading, *n); err != nil {
		fmt.Fprintln(os.Stderr, "scaleprobe:", err)
		os.Exit(1)
	}
}

func client(path string) (*kubernetes.Clientset, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = 1000, 1000
	return kubernetes.NewForConfig(cfg)
}

func p50(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[len(ds)/2]
}

func run(kubeconfig, gatewayKubeconfig, ns, cascading string, n int) error {
	ctx := context.Background()
	cs, err := client(kubeconfig)
	if err != nil {
		return err
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !strings.Contains(err.Error(), "already exists") {
		return err
	}
	cms := cs.CoreV1().ConfigMaps(ns)
	// Interleaved so that load on the machine hits both alike. A config
	// map labelled Cascading with no dependents is judged and admitted.
	var plain, judged []time.Duration
	for i := 0; i < n; i++ {
		for _, labelled := range []bool{false, true} {
			name := fmt.Sprintf("probe-%d-%v-%d", i, labelled, time.Now().UnixNano())
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}
			if labelled {
				cm.Labels = map[string]string{"rampart.io/protection": "Cascading"}
			}
			if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
				return err
			}
			start := time.Now()
			if err := cms.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				return fmt.Errorf("delete %s: %w", name, err)
			}
			if labelled {
				judged = append(judged, time.Since(start))
			} else {
				plain = append(plain, time.Since(start))
			}
		}
	}
	pp, pj := p50(plain), p50(judged)
	out := fmt.Sprintf("delete_p50_ms=%.1f judged_delete_p50_ms=%.1f delete_ratio=%.2f", ms(pp), ms(pj), float64(pj)/float64(pp))
	if cascading != "" {
		var denials []time.Duration
		for i := 0; i < 5; i++ {
			start := time.Now()
			err := cs.CoreV1().Namespaces().Delete(ctx, cascading, metav1.DeleteOptions{})
			d := time.Since(start)
			if err == nil || !strings.Contains(err.Error(), "Cascading") {
				return fmt.Errorf("the DELETE of Cascading namespace %s was not denied: %v", cascading, err)
			}
			denials = append(denials, d)
		}
		out += fmt.Sprintf(" cascading_ns_denial_ms=%.1f", ms(p50(denials)))
	}
	if gatewayKubeconfig != "" {
		gw, err := client(gatewayKubeconfig)
		if err != nil {
			return err
		}
		var direct, through []time.Duration
		for i := 0; i < n; i++ {
			for _, c := range []*kubernetes.Clientset{cs, gw} {
				start := time.Now()
				if _, err := c.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
					return err
				}
				if c == cs {
					direct = append(direct, time.Since(start))
				} else {
					through = append(through, time.Since(start))
				}
			}
		}
		pd, pg := p50(direct), p50(through)
		out += fmt.Sprintf(" get_p50_ms=%.1f gateway_get_p50_ms=%.1f gateway_ratio=%.2f", ms(pd), ms(pg), float64(pg)/float64(pd))
	}
	fmt.Println(out)
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
