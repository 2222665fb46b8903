// Package reapertest holds what the reaper's packages' tests share: a
// valid configuration to start from and a Cloud of function fields.
package reapertest

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/reaper"
)

// Config is a valid config with roles web (desired 3) and db (desired 0,
// used by fleet-wide cases).
func Config(t testing.TB, mutate ...func(*reaper.Config)) *reaper.Config {
	t.Helper()
	c := reaper.DefaultConfig()
	c.Roles = []reaper.Role{
		{Name: "web", Desired: 3, Boot: reaper.BootSpec{Flavor: "m1", Image: "debian", NameTemplate: "web{n}"}},
		{Name: "db", Desired: 0, Boot: reaper.BootSpec{Flavor: "m1", Image: "debian", NameTemplate: "db{n}"}},
	}
	for i := range c.Roles {
		c.Roles[i].ApplyDefaults()
	}
	for _, m := range mutate {
		m(c)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("test config: %v", err)
	}
	return c
}

// GoodYAML is a valid reaper configuration of one role, web, for tests
// to change one line of.
const GoodYAML = `
dry_run: false
interval: 10s
roles:
  - name: web
    desired: 3
    min_healthy: 2
    checks: [serfHealth, "service:nginx"]
    max_age: 168h
    max_age_jitter: 24h
    boot:
      flavor: m1.small
      image: debian-12
      networks: [none]
      name_template: "{role}{n}-prod"
      metadata: {team: infra}
      tags: [orchestrate]
`

// Cloud is a reaper.Cloud of function fields, for tests of pure waiting
// and error-handling decisions (litestream's mock package): a call whose
// field is nil fails.
type Cloud struct {
	ListFunc   func(ctx context.Context) ([]reaper.Server, error)
	GetFunc    func(ctx context.Context, id string) (reaper.Server, error)
	CreateFunc func(ctx context.Context, req reaper.CreateRequest) (reaper.Server, error)
	DeleteFunc func(ctx context.Context, id string) error
}

var _ reaper.Cloud = (*Cloud)(nil)

// errNotSet is the error of a call whose function field is nil.
var errNotSet = errors.New("reapertest.Cloud: no function for this call")

// List calls ListFunc.
func (c *Cloud) List(ctx context.Context) ([]reaper.Server, error) {
	if c.ListFunc == nil {
		return nil, errNotSet
	}
	return c.ListFunc(ctx)
}

// Get calls GetFunc.
func (c *Cloud) Get(ctx context.Context, id string) (reaper.Server, error) {
	if c.GetFunc == nil {
		return reaper.Server{}, errNotSet
	}
	return c.GetFunc(ctx, id)
}

// Create calls CreateFunc.
func (c *Cloud) Create(ctx context.Context, req reaper.CreateRequest) (reaper.Server, error) {
	if c.CreateFunc == nil {
		return reaper.Server{}, errNotSet
	}
	return c.CreateFunc(ctx, req)
}

// Delete calls DeleteFunc.
func (c *Cloud) Delete(ctx context.Context, id string) error {
	if c.DeleteFunc == nil {
		return errNotSet
	}
	return c.DeleteFunc(ctx, id)
}

// UnsetMetadata fails: the fake keeps no metadata.
func (c *Cloud) UnsetMetadata(context.Context, string, string) error { return errNotSet }

// Stop fails: the fake has no power state.
func (c *Cloud) Stop(context.Context, string) error { return errNotSet }

// Start fails: the fake has no power state.
func (c *Cloud) Start(context.Context, string) error { return errNotSet }

// ServerGroup fails: the fake keeps no server groups.
func (c *Cloud) ServerGroup(context.Context, string) (reaper.ServerGroup, error) {
	return reaper.ServerGroup{}, errNotSet
}

// FindServerGroups fails: the fake keeps no server groups.
func (c *Cloud) FindServerGroups(context.Context, string) ([]reaper.ServerGroup, error) {
	return nil, errNotSet
}

// CreateServerGroup fails: the fake keeps no server groups.
func (c *Cloud) CreateServerGroup(context.Context, string, string) (reaper.ServerGroup, error) {
	return reaper.ServerGroup{}, errNotSet
}

// Reboot fails: the fake has no power state.
func (c *Cloud) Reboot(context.Context, string) error { return errNotSet }

// Rebuild fails: the fake has no images.
func (c *Cloud) Rebuild(context.Context, reaper.RebuildRequest) error { return errNotSet }

// HostNames joins the hosts of a report's silent or orphaned list with
// commas, in order.
func HostNames(m []reaperkv.HostMark) string {
	out := make([]string, 0, len(m))
	for _, h := range m {
		out = append(out, h.Host)
	}
	return strings.Join(out, ",")
}
