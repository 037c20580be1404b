package localcluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/rampart-io/rampart/internal/servers/gateway"
	"github.com/rampart-io/rampart/internal/servers/gateway/upstream"
)

// GatewayPool gives the gateway's pool Name the last Servers API servers
// not given to a pool before it (`rampart up --gateway-pool heavy=1`):
// Route TrafficPolicies naming it reach only them.
type GatewayPool struct {
	Name    string
	Servers int
}

// ParseGatewayPool reads --gateway-pool's NAME=N.
func ParseGatewayPool(s string) (GatewayPool, error) {
	name, n, ok := strings.Cut(s, "=")
	servers, err := strconv.Atoi(n)
	if !ok || err != nil {
		return GatewayPool{}, fmt.Errorf("--gateway-pool %q: want NAME=N, e.g. heavy=1 (the last API server in pool heavy)", s)
	}
	return GatewayPool{Name: name, Servers: servers}, nil
}

// checkGatewayPools says what is wrong with pools on apiServers API
// servers: the default pool keeps one at least.
func checkGatewayPools(pools []GatewayPool, apiServers int) error {
	taken := 0
	for _, p := range pools {
		if p.Name == upstream.DefaultPool {
			return errors.New("--gateway-pool default: the default pool is the API servers no other pool takes")
		}
		if err := gateway.CheckPoolName(p.Name); err != nil {
			return fmt.Errorf("--gateway-pool %s: %w", p.Name, err)
		}
		if p.Servers < 1 {
			return fmt.Errorf("--gateway-pool %s=%d: a pool has one API server at least", p.Name, p.Servers)
		}
		taken += p.Servers
	}
	if len(pools) > 0 && taken >= max(apiServers, 1) {
		return fmt.Errorf("--gateway-pool: the pools take %d of %d API servers and leave none to the default pool: start more (--apiservers %d)", taken, max(apiServers, 1), taken+1)
	}
	return nil
}

// GatewayPools are the gateway's pools now: the default pool's API
// servers, and each named pool's, from the last API server backwards.
func (c *Cluster) GatewayPools() (def []string, named []gateway.UpstreamPool) {
	urls := c.APIServerURLs()
	end := len(urls)
	for _, p := range c.pools {
		named = append(named, gateway.UpstreamPool{Name: p.Name, URLs: slices.Clone(urls[end-p.Servers : end])})
		end -= p.Servers
	}
	return urls[:end], named
}

// gatewayUpstreamArgs are the gateway's flags for its pools.
func (c *Cluster) gatewayUpstreamArgs() []string {
	def, named := c.GatewayPools()
	args := []string{"--upstreams=" + strings.Join(def, ",")}
	for _, p := range named {
		args = append(args, "--upstream-pool="+p.Name+"="+strings.Join(p.URLs, ","))
	}
	return args
}

// SetGatewayPools restarts the gateway with pools (nil: every API server
// in the default pool), for a drill that routes on a cluster started
// without them.
func (c *Cluster) SetGatewayPools(ctx context.Context, pools []GatewayPool) error {
	if !c.opts.Gateway {
		return errors.New("the cluster runs no gateway")
	}
	if err := checkGatewayPools(pools, len(c.APIServerURLs())); err != nil {
		return err
	}
	if err := c.StopComponent(GatewayName); err != nil {
		return err
	}
	c.pools = slices.Clone(pools)
	return c.StartGateway(ctx)
}

// AddAPIServers starts n more API servers on the cluster's etcd and waits
// until they are ready. The managers do not wait for them to enforce a
// new protection (they know the API servers of the start): for drills
// that need more API servers than the cluster started with.
func (c *Cluster) AddAPIServers(ctx context.Context, n int) error {
	ports, err := freePorts(n)
	if err != nil {
		return err
	}
	for _, port := range ports {
		c.ports.moreAPIServers = append(c.ports.moreAPIServers, port)
		i := len(c.ports.moreAPIServers)
		if err := c.startAPIServerOn(ctx, APIServerName(i), port, "audit-"+strconv.Itoa(i)+".log"); err != nil {
			return err
		}
	}
	return nil
}

// RemoveAPIServers stops the last n API servers and forgets them; the
// gateway must not send to them any more (SetGatewayPools first).
func (c *Cluster) RemoveAPIServers(n int) error {
	if n > len(c.ports.moreAPIServers) {
		return fmt.Errorf("cannot remove %d API servers: the cluster has %d besides the first", n, len(c.ports.moreAPIServers))
	}
	for range n {
		name := APIServerName(len(c.ports.moreAPIServers))
		if err := c.StopComponent(name); err != nil {
			return err
		}
		c.mu.Lock()
		c.procs = slices.DeleteFunc(c.procs, func(p *Process) bool { return p.Name == name })
		err := writeState(c.Dir, c.procs)
		c.mu.Unlock()
		if err != nil {
			return err
		}
		c.ports.moreAPIServers = c.ports.moreAPIServers[:len(c.ports.moreAPIServers)-1]
	}
	return nil
}
