// Package reapertest holds what the reaper's packages' tests share: a
// valid configuration to start from.
package reapertest

import (
	"testing"

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
