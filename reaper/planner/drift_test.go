package planner

import (
	"testing"

	"github.com/jiocloud/orchestrate/reaper"
	"github.com/jiocloud/orchestrate/reaper/reapertest"
)

// A role's report counts its servers built from another boot spec
// (drifted) and those with none recorded; neither is a reason to act.
func TestDriftIsCountedNotActedOn(t *testing.T) {
	cfg := reapertest.Config(t)
	spec := cfg.Roles[0].Boot.Digest()
	servers, checks := healthyFleet("web", 3)
	servers[0].Metadata[reaper.MetaSpec] = spec
	servers[1].Metadata[reaper.MetaSpec] = "0123456789abcdef" // an older spec
	in := reaper.Input{Now: t0, Config: cfg, Servers: servers, Checks: checks, Armed: true}
	p := Plan(in)
	r := p.Roles[0]
	if r.Spec != spec || r.Drifted != 1 || r.SpecUnknown != 1 {
		t.Fatalf("role report: spec %q drifted %d unknown %d, want %q, 1, 1", r.Spec, r.Drifted, r.SpecUnknown, spec)
	}
	if len(p.Actions) != 0 {
		t.Fatalf("actions %v: drift alone is no reason to act", ops(p))
	}
}
