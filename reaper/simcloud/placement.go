package simcloud

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/jiocloud/orchestrate/reaper"
)

// DefaultZone is the zone of a server created without one, as Nova's
// default_availability_zone.
const DefaultZone = "nova"

// NoValidHost is Nova's fault for a server no host could take.
const NoValidHost = "No valid host was found. There are not enough hosts available."

// SetZones gives the cloud its availability zones: a create asking for
// another fails as Nova's does (400, the zone is not available). With
// none set, any zone asked for exists.
func (c *Cloud) SetZones(zones ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.zones = append([]string(nil), zones...)
}

// RefuseZone makes every create in zone go to ERROR with Nova's "No valid
// host" fault (refuse true), as a zone out of capacity, or take creates
// again (false).
func (c *Cloud) RefuseZone(zone string, refuse bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refused[zone] = refuse
}

// zoneFor is the zone a create goes to: the one asked for (which must be
// one of the cloud's), else DefaultZone. Caller holds mu.
func (c *Cloud) zoneFor(req reaper.CreateRequest) (string, error) {
	zone := req.Zone
	if zone == "" && req.Role != nil {
		zone = req.Role.Boot.AvailabilityZone
	}
	if zone == "" {
		return DefaultZone, nil
	}
	if len(c.zones) > 0 && !slices.Contains(c.zones, zone) {
		return "", &reaper.CloudError{Class: reaper.Fatal, Op: "create server " + req.Name,
			Err: fmt.Errorf("400 The requested availability zone is not available: %s", zone)}
	}
	return zone, nil
}

// ServerGroup returns one server group; NotFound when there is none.
func (c *Cloud) ServerGroup(ctx context.Context, id string) (reaper.ServerGroup, error) {
	if err := ctx.Err(); err != nil {
		return reaper.ServerGroup{}, &reaper.CloudError{Class: reaper.Transient, Op: "get server group", Err: err}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	g, ok := c.groups[id]
	if !ok {
		return reaper.ServerGroup{}, &reaper.CloudError{Class: reaper.NotFound, Op: "get server group " + id, Err: errors.New("404 not found")}
	}
	return copyGroup(g), nil
}

// FindServerGroups returns the groups named name, by ID.
func (c *Cloud) FindServerGroups(ctx context.Context, name string) ([]reaper.ServerGroup, error) {
	if err := ctx.Err(); err != nil {
		return nil, &reaper.CloudError{Class: reaper.Transient, Op: "list server groups", Err: err}
	}
	var out []reaper.ServerGroup
	for _, g := range c.ServerGroups() {
		if g.Name == name {
			out = append(out, g)
		}
	}
	return out, nil
}

// CreateServerGroup makes a group; Nova takes the two anti-affinity
// policies the reaper uses and affinity, soft-affinity.
func (c *Cloud) CreateServerGroup(ctx context.Context, name, policy string) (reaper.ServerGroup, error) {
	if err := ctx.Err(); err != nil {
		return reaper.ServerGroup{}, &reaper.CloudError{Class: reaper.Transient, Op: "create server group", Err: err}
	}
	switch policy {
	case reaper.PolicyAntiAffinity, reaper.PolicySoftAntiAffinity, "affinity", "soft-affinity":
	default:
		return reaper.ServerGroup{}, &reaper.CloudError{Class: reaper.Fatal, Op: "create server group " + name, Err: fmt.Errorf("400 invalid policy %q", policy)}
	}
	return c.AddServerGroup(name, policy), nil
}

// AddServerGroup makes a group, as an operator (or a leader that died
// before it recorded the group) does.
func (c *Cloud) AddServerGroup(name, policy string) reaper.ServerGroup {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	g := &reaper.ServerGroup{ID: fmt.Sprintf("sim-group-%04d", c.seq), Name: name, Policy: policy}
	c.groups[g.ID] = g
	return copyGroup(g)
}

// DeleteServerGroup removes a group, as `openstack server group delete`
// does (its servers stay, in no group); false when there is none.
func (c *Cloud) DeleteServerGroup(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.groups[id]
	delete(c.groups, id)
	return ok
}

// ServerGroups returns every group, sorted by ID.
func (c *Cloud) ServerGroups() []reaper.ServerGroup {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]reaper.ServerGroup, 0, len(c.groups))
	for _, g := range c.groups {
		out = append(out, copyGroup(g))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func copyGroup(g *reaper.ServerGroup) reaper.ServerGroup {
	out := *g
	out.Members = append([]string(nil), g.Members...)
	return out
}
