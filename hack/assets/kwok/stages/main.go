// Command stages prints kwok's own default stages (node initialisation, node
// heartbeat through leases, pod ready/complete/delete) at the pinned kwok
// version, as one kwok configuration file for the local cluster.
package main

import (
	"fmt"
	"strings"

	nodefast "sigs.k8s.io/kwok/kustomize/stage/node/fast"
	heartbeat "sigs.k8s.io/kwok/kustomize/stage/node/heartbeat-with-lease"
	podfast "sigs.k8s.io/kwok/kustomize/stage/pod/fast"
)

func main() {
	docs := []string{
		nodefast.DefaultNodeInit,
		heartbeat.DefaultNodeHeartbeatWithLease,
		podfast.DefaultPodReady,
		podfast.DefaultPodComplete,
		podfast.DefaultPodDelete,
	}
	for i, d := range docs {
		if i > 0 {
			fmt.Println("---")
		}
		fmt.Println(strings.TrimSpace(d))
	}
}
