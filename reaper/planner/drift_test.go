package planner

import (
	"strings"
	"testing"
	"time"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
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

// refresh: auto replaces the oldest server not on the role's boot spec,
// one at a time, create-first, only while every server serves and nothing
// else of the role is in flight, and only when armed and unpaused.
func TestRefreshReplacesTheOldestDriftedServer(t *testing.T) {
	auto := func(c *reaper.Config) { c.Roles[0].Refresh = reaper.RefreshAuto }
	fleet := func(cfg *reaper.Config, drifted ...int) ([]reaper.Server, []reaper.Check) {
		ss, cs := healthyFleet("web", 3)
		for i := range ss {
			ss[i].Metadata[reaper.MetaSpec] = cfg.Roles[0].Boot.Digest()
		}
		for _, i := range drifted {
			ss[i].Metadata[reaper.MetaSpec] = "an older spec"
		}
		return ss, cs
	}
	for _, tc := range []struct {
		name     string
		mutate   []func(*reaper.Config)
		drifted  []int
		change   func(in *reaper.Input)
		wantOld  string // "" : no replacement
		wantNote string
	}{
		{name: "every server on the spec: nothing", mutate: []func(*reaper.Config){auto}},
		{name: "two drifted: the oldest, web3, first", mutate: []func(*reaper.Config){auto}, drifted: []int{0, 2}, wantOld: "web3"},
		{name: "refresh off: drift is only reported", drifted: []int{0, 2}},
		{name: "no recorded spec is replaced too", mutate: []func(*reaper.Config){auto}, change: func(in *reaper.Input) { delete(in.Servers[1].Metadata, reaper.MetaSpec) }, wantOld: "web2"},
		{name: "a server not serving: the refresh waits", mutate: []func(*reaper.Config){auto}, drifted: []int{2},
			change: func(in *reaper.Input) { in.Checks = replaceChecks(in.Checks, "web1", crit("web1")) }},
		{name: "disarmed: the refresh waits", mutate: []func(*reaper.Config){auto}, drifted: []int{2},
			change: func(in *reaper.Input) { in.Armed = false }, wantNote: "replacement of web3 (drifted) waits: not armed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := reapertest.Config(t, tc.mutate...)
			ss, cs := fleet(cfg, tc.drifted...)
			in := reaper.Input{Now: t0, Config: cfg, Servers: ss, Checks: cs, Armed: true}
			if tc.change != nil {
				tc.change(&in)
			}
			p := Plan(in)
			var old []string
			for _, a := range p.Actions {
				if a.Op != reaper.OpCreate || a.Entry.OldName == "" || !strings.Contains(a.Reason, "drifted") {
					t.Fatalf("unexpected action %s", a)
				}
				old = append(old, a.Entry.OldName)
			}
			if strings.Join(old, ",") != tc.wantOld {
				t.Fatalf("replaced %v, want %q (blocked %v)", old, tc.wantOld, p.Blocked)
			}
			if tc.wantNote != "" && !strings.Contains(strings.Join(p.Blocked, "\n"), tc.wantNote) {
				t.Fatalf("blocked %v, want a note %q", p.Blocked, tc.wantNote)
			}
		})
	}
}

// With refresh: auto a drifted server is not replaced by a standby of the
// old spec (it would be drifted too): a standby on the spec is claimed,
// and one of another spec is rebuilt.
func TestRefreshClaimsOnlyStandbysOnTheSpec(t *testing.T) {
	cfg := reapertest.Config(t, func(c *reaper.Config) {
		c.Roles[0].Refresh = reaper.RefreshAuto
		c.Roles[0].WarmPool = &reaper.WarmPool{Size: 2}
	})
	spec := cfg.Roles[0].Boot.Digest()
	members, checks := healthyFleet("web", 3)
	for i := range members {
		members[i].Created = t0.Add(-day - time.Duration(i)*time.Hour)
		members[i].Metadata[reaper.MetaSpec] = spec
	}
	members[2].Metadata[reaper.MetaSpec] = "an older spec"
	stale, staleChecks := standby("web4", day)
	stale.Metadata[reaper.MetaSpec] = "an older spec"
	fresh, freshChecks := standby("web5", day)
	fresh.Metadata[reaper.MetaSpec] = spec
	in := reaper.Input{Now: t0, Config: cfg, Armed: true,
		Servers: append(append([]reaper.Server{}, members...), stale, fresh),
		Checks:  append(append(append([]reaper.Check{}, checks...), staleChecks...), freshChecks...)}
	p := Plan(in)
	var claimed, rebuilt string
	for _, a := range p.Actions {
		switch {
		case a.Op == reaper.OpClaim && a.Entry.OldName == "web3":
			claimed = a.Entry.NewName
		case a.Op == reaper.OpDelete && a.Entry.Standby && strings.Contains(a.Reason, "another boot spec"):
			rebuilt = a.Entry.OldName
		}
	}
	if claimed != "web5" || rebuilt != "web4" {
		t.Fatalf("claimed %q for web3 (want web5), rebuilt %q (want web4): %v", claimed, rebuilt, ops(p))
	}
}

// A refresh replaces its drifted servers in batches: desired minus
// refresh_min_healthy_percent of it, at least 1, at most max_in_flight,
// counting the refresh's replacements in flight; any other work in flight
// holds it.
func TestRefreshBatches(t *testing.T) {
	fleet := func(cfg *reaper.Config) ([]reaper.Server, []reaper.Check) {
		ss, cs := healthyFleet("web", 6)
		for i := range ss {
			ss[i].Metadata[reaper.MetaSpec] = "an older spec"
		}
		return ss, cs
	}
	inflight := func(reason string) []reaper.Entry {
		return []reaper.Entry{{ID: "web.1.1", Kind: reaperkv.KindReplace, Role: "web", Reason: reason, Phase: reaperkv.PhaseBooting,
			OldName: "web6", OldID: "id-web6", NewName: "web7", Started: t0.Add(-time.Minute), Updated: t0.Add(-time.Minute)}}
	}
	for _, tc := range []struct {
		name          string
		pct, inFlight int
		journal       []reaper.Entry
		want          string
	}{
		{name: "90% of 6 healthy: one at a time", pct: 90, inFlight: 3, want: "web6"},
		{name: "50% of 6: a batch of 3, capped by max_in_flight 2", pct: 50, inFlight: 2, want: "web6,web5"},
		{name: "50% of 6, max_in_flight 4: a batch of 3", pct: 50, inFlight: 4, want: "web6,web5,web4"},
		{name: "one of the refresh in flight: the batch's second joins it", pct: 50, inFlight: 2, journal: inflight("drifted"), want: "web5"},
		{name: "other work in flight: the refresh waits", pct: 50, inFlight: 2, journal: inflight("unhealthy"), want: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := reapertest.Config(t, func(c *reaper.Config) {
				c.Roles[0].Desired = 6
				c.Roles[0].Refresh = reaper.RefreshAuto
				c.Roles[0].RefreshMinHealthyPercent = tc.pct
				c.MaxInFlight = tc.inFlight
			})
			ss, cs := fleet(cfg)
			if tc.journal != nil {
				ss = append(ss, reaper.Server{ID: "id-web7", Name: "web7", Status: reaper.StatusBuild, Created: t0.Add(-time.Minute),
					Metadata: map[string]string{reaper.MetaRole: "web", reaper.MetaJournal: "web.1.1"}})
			}
			p := Plan(reaper.Input{Now: t0, Config: cfg, Servers: ss, Checks: cs, Armed: true, Journal: tc.journal})
			var got []string
			for _, a := range p.Actions {
				if a.Op == reaper.OpCreate && a.Entry.ID != "web.1.1" && strings.Contains(a.Reason, "drifted") {
					got = append(got, a.Entry.OldName)
				}
			}
			if strings.Join(got, ",") != tc.want {
				t.Fatalf("replaced %v, want %q: %v (blocked %v)", got, tc.want, ops(p), p.Blocked)
			}
		})
	}
}
