package novatest

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servergroups"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/pagination"
)

// The cloud's availability zones and server groups. scripts/nova runs
// three compute hosts on the fake driver, each alone in a zone (a host
// aggregate): nova-e2e in e2e-az1, nova-e2e-2 in e2e-az2, nova-e2e-3 in
// e2e-az3; the env file lists them as NOVA_E2E_ZONES.

// GroupMicroversion is the first compute microversion whose server groups
// have one policy (and rules), as the reaper asks for them.
const GroupMicroversion = "2.64"

// Zones returns the cloud's availability zones, one compute host each,
// from the env file; the test fails when the env file predates them.
func (c *Cloud) Zones(t testing.TB) []string {
	t.Helper()
	z := c.auth["NOVA_E2E_ZONES"]
	if z == "" {
		t.Fatalf("novatest: %s lists no NOVA_E2E_ZONES: rerun `make nova-up` (it adds the compute hosts nova-e2e-2 and -3 and their zones)", c.EnvFile)
	}
	return strings.Split(z, ",")
}

// groupClient is a compute client of the test's user at GroupMicroversion.
func (c *Cloud) groupClient(t testing.TB) *gophercloud.ServiceClient {
	sc := c.Compute(t)
	sc.Microversion = GroupMicroversion
	return sc
}

// CreateServerGroup makes a server group in the test's project, as an
// operator would; it goes with the project.
func (c *Cloud) CreateServerGroup(t testing.TB, name, policy string) *servergroups.ServerGroup {
	t.Helper()
	ctx, cancel := withTimeout(t, callTimeout)
	defer cancel()
	g, err := servergroups.Create(ctx, c.groupClient(t), servergroups.CreateOpts{Name: name, Policy: policy}).Extract()
	if err != nil {
		t.Fatalf("novatest: create server group %s: %v", name, err)
	}
	return g
}

// ServerGroup reads one of the project's server groups (its policy and
// members); nil when Nova has none of that ID.
func (c *Cloud) ServerGroup(t testing.TB, id string) *servergroups.ServerGroup {
	t.Helper()
	ctx, cancel := withTimeout(t, callTimeout)
	defer cancel()
	g, err := servergroups.Get(ctx, c.groupClient(t), id).Extract()
	if gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		return nil
	}
	if err != nil {
		t.Fatalf("novatest: get server group %s: %v", id, err)
	}
	return g
}

// ServerGroups lists the project's server groups.
func (c *Cloud) ServerGroups(t testing.TB) []servergroups.ServerGroup {
	t.Helper()
	ctx, cancel := withTimeout(t, callTimeout)
	defer cancel()
	var out []servergroups.ServerGroup
	err := servergroups.List(c.groupClient(t), nil).EachPage(ctx, func(_ context.Context, p pagination.Page) (bool, error) {
		gs, err := servergroups.ExtractServerGroups(p)
		out = append(out, gs...)
		return true, err
	})
	if err != nil {
		t.Fatalf("novatest: list server groups: %v", err)
	}
	return out
}

// DeleteServerGroup deletes a server group, as `openstack server group
// delete` does (its servers stay); gone already is fine.
func (c *Cloud) DeleteServerGroup(t testing.TB, id string) {
	t.Helper()
	ctx, cancel := withTimeout(t, callTimeout)
	defer cancel()
	if err := servergroups.Delete(ctx, c.groupClient(t), id).ExtractErr(); err != nil && !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		t.Errorf("novatest: delete server group %s: %v", id, err)
	}
}

// CreateServerIn boots a server as CreateServer does, in zone and server
// group (either may be empty), and waits for it to be ACTIVE.
func (c *Cloud) CreateServerIn(t testing.TB, name, zone, group string) *servers.Server {
	t.Helper()
	ctx, cancel := withTimeout(t, callTimeout)
	defer cancel()
	opts := c.CreateOpts(name, nil)
	opts.AvailabilityZone = zone
	var hints servers.SchedulerHintOptsBuilder
	if group != "" {
		hints = servers.SchedulerHintOpts{Group: group}
	}
	s, err := servers.Create(ctx, c.Compute(t), opts, hints).Extract()
	if err != nil {
		t.Fatalf("novatest: create server %s in zone %q, group %q: %v", name, zone, group, err)
	}
	return c.WaitForStatus(t, s.ID, "ACTIVE")
}

// ServerHost is the compute host a server runs on (an admin's view).
func (c *Cloud) ServerHost(t testing.TB, id string) string {
	t.Helper()
	ctx, cancel := withTimeout(t, callTimeout)
	defer cancel()
	s, err := servers.Get(ctx, c.AdminCompute(t), id).Extract()
	if err != nil {
		t.Fatalf("novatest: get server %s as admin: %v", id, err)
	}
	return s.Host
}

// deleteServerGroups removes the project's server groups (Nova keeps a
// deleted project's groups otherwise).
func (c *Cloud) deleteServerGroups(t testing.TB) {
	t.Helper()
	for _, g := range c.ServerGroups(t) {
		c.DeleteServerGroup(t, g.ID)
	}
}
