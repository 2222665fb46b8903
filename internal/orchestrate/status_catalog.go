package orchestrate

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/exitcode"
)

// catalogView is what the status reads of the Consul catalog.
type catalogView struct {
	// Datacenter is the agent's ("" when unknown).
	Datacenter string
	// Nodes are the catalog's nodes.
	Nodes map[string]bool
	// Checks are each node's checks that do not pass.
	Checks map[string][]nodeCheck
}

// readCatalog reads the catalog's nodes and its checks that do not pass.
func readCatalog(ctx context.Context, e *env) (catalogView, error) {
	v := catalogView{Nodes: map[string]bool{}, Checks: map[string][]nodeCheck{}}
	nodes, _, err := catalogNodes(ctx, e.client, 0)
	if err != nil {
		return v, err
	}
	for _, n := range nodes {
		v.Nodes[n.Node] = true
		v.Datacenter = n.Datacenter
	}
	checks, _, err := healthChecks(ctx, e.client, 0)
	if err != nil {
		return v, err
	}
	for _, c := range checks {
		if c.Status != api.HealthPassing {
			v.Checks[c.Node] = append(v.Checks[c.Node], nodeCheck{Node: c.Node, Name: c.Name, ID: c.CheckID, Status: c.Status, Service: c.ServiceName})
		}
	}
	return v, nil
}

// catalogNodes lists the catalog's nodes, as a blocking query from index
// when it is not 0. A node the token may not read would be missing from
// the screen, as if it had never joined: refused.
func catalogNodes(ctx context.Context, c *api.Client, index uint64) ([]*api.Node, uint64, error) {
	nodes, meta, err := c.Catalog().Nodes((&api.QueryOptions{WaitIndex: index}).WithContext(ctx))
	if err != nil {
		return nil, 0, fmt.Errorf("list catalog nodes: %w", err)
	}
	if meta.ResultsFilteredByACLs {
		return nil, 0, aclHidden("catalog nodes", `node_prefix "" read`)
	}
	return nodes, meta.LastIndex, nil
}

// healthChecks lists every check in the catalog, as catalogNodes does.
func healthChecks(ctx context.Context, c *api.Client, index uint64) (api.HealthChecks, uint64, error) {
	checks, meta, err := c.Health().State(api.HealthAny, (&api.QueryOptions{WaitIndex: index}).WithContext(ctx))
	if err != nil {
		return nil, 0, fmt.Errorf("list health checks: %w", err)
	}
	if meta.ResultsFilteredByACLs {
		return nil, 0, aclHidden("health checks", `node_prefix "" read and service_prefix "" read`)
	}
	return checks, meta.LastIndex, nil
}

// hiddenByACLs is the error of a listing the token's ACLs cut short.
func aclHidden(what, need string) error {
	return exitcode.Wrap(exitcode.Unavailable, errors.New("list "+what+": some are hidden from this token by Consul's ACLs: it needs "+need+" (or use --no-catalog)"))
}

// agentDatacenter is the local agent's datacenter, "" when it cannot be
// read (the token may lack agent read: the screen goes on without it).
func agentDatacenter(c *api.Client) string {
	self, err := c.Agent().Self()
	if err != nil {
		return ""
	}
	dc, _ := self["Config"]["Datacenter"].(string)
	return dc
}
