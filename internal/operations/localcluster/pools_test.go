package localcluster

import (
	"strings"
	"testing"
)

// TestGatewayPools: --gateway-pool NAME=N gives the last N API servers to
// pool NAME, the next pool the N before, and the rest to the default
// pool, which keeps one at least.
func TestGatewayPools(t *testing.T) {
	c := &Cluster{ports: ports{apiserver: 1000, moreAPIServers: []int{1001, 1002, 1003}},
		pools: []GatewayPool{{Name: "heavy", Servers: 1}, {Name: "batch", Servers: 2}}}
	def, named := c.GatewayPools()
	if strings.Join(def, ",") != "https://127.0.0.1:1000" || len(named) != 2 ||
		named[0].Name != "heavy" || strings.Join(named[0].URLs, ",") != "https://127.0.0.1:1003" ||
		named[1].Name != "batch" || strings.Join(named[1].URLs, ",") != "https://127.0.0.1:1001,https://127.0.0.1:1002" {
		t.Errorf("pools: default %v, named %+v", def, named)
	}
	if args := strings.Join(c.gatewayUpstreamArgs(), " "); args != "--upstreams=https://127.0.0.1:1000 --upstream-pool=heavy=https://127.0.0.1:1003 --upstream-pool=batch=https://127.0.0.1:1001,https://127.0.0.1:1002" {
		t.Errorf("gateway args %q", args)
	}
	if p, err := ParseGatewayPool("heavy=2"); err != nil || p != (GatewayPool{"heavy", 2}) {
		t.Errorf("ParseGatewayPool = %+v, %v", p, err)
	}
	for _, bad := range []string{"heavy", "heavy=two"} {
		if _, err := ParseGatewayPool(bad); err == nil {
			t.Errorf("ParseGatewayPool(%q) accepted", bad)
		}
	}
	for _, tc := range []struct {
		pools      []GatewayPool
		apiServers int
		want       string
	}{
		{[]GatewayPool{{"heavy", 1}}, 2, ""},
		{nil, 1, ""},
		{[]GatewayPool{{"heavy", 1}}, 1, "leave none to the default pool: start more (--apiservers 2)"},
		{[]GatewayPool{{"heavy", 2}, {"batch", 1}}, 3, "the pools take 3 of 3"},
		{[]GatewayPool{{"default", 1}}, 3, "the default pool is the API servers no other pool takes"},
		{[]GatewayPool{{"Heavy", 1}}, 3, "lower-case letters"},
		{[]GatewayPool{{"", 1}}, 3, "lower-case letters"},
		{[]GatewayPool{{"heavy", 0}}, 3, "one API server at least"},
	} {
		err := checkGatewayPools(tc.pools, tc.apiServers)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("checkGatewayPools(%+v, %d) = %v, want %q", tc.pools, tc.apiServers, err, tc.want)
		}
	}
}
