package planner

import (
	"strings"
	"testing"
	"time"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/reaper"
	"github.com/jiocloud/orchestrate/reaper/reapertest"
)

// standby is a standby of role web created age ago, its node passing and
// in the reaper's standby maintenance.
func standby(name string, age time.Duration) (reaper.Server, []reaper.Check) {
	s := srv(name, age)
	s.Metadata[reaper.MetaStandby] = "web"
	return s, []reaper.Check{pass(name), {Node: name, CheckID: reaper.MaintNodeCheck, Status: reaper.CheckCritical}}
}

// The pool's upkeep decisions, on the pure planner: what a standby's age,
// health and the role's needs make of it.
func TestPoolUpkeep(t *testing.T) {
	pool := func(c *reaper.Config) {
		c.Roles[0].WarmPool = &reaper.WarmPool{Size: 2}
		c.Roles[0].MaxAge = reaper.Duration(10 * day)
		c.Roles[0].MaxAgeJitter = 0
	}
	members, checks := healthyFleet("web", 3)
	for i := range members {
		members[i].Created = t0.Add(-day) // young
	}
	old, oldChecks := standby("web4", 11*day)
	young, youngChecks := standby("web5", day)
	in := reaper.Input{Now: t0, Config: reapertest.Config(t, pool), Armed: true,
		Servers: append(append([]reaper.Server{}, members...), old, young),
		Checks:  append(append(append([]reaper.Check{}, checks...), oldChecks...), youngChecks...)}

	t.Run("a standby past max_age is deleted, never claimed, and a member replaced claims the young one", func(t *testing.T) {
		in := in
		in.Checks = append([]reaper.Check{crit("web1")}, in.Checks[1:]...)
		in.Memory = reaper.Memory{Critical: map[string]time.Time{"web1": t0.Add(-time.Hour)}}
		p := Plan(in)
		var claim, del *reaper.Action
		for i, a := range p.Actions {
			switch a.Op {
			case reaper.OpClaim:
				claim = &p.Actions[i]
			case reaper.OpDelete:
				del = &p.Actions[i]
			}
		}
		if claim == nil || claim.Entry.NewName != "web5" || claim.Entry.OldName != "web1" {
			t.Fatalf("claim %v, want web5 for web1: %v", claim, p.Actions)
		}
		if del == nil || del.Entry.OldName != "web4" || !del.Entry.Standby || del.Reason != "standby past max_age" {
			t.Fatalf("delete %v, want the expired standby web4: %v", del, p.Actions)
		}
		// No refill while web1's replacement is under way: a slot the
		// quota frees is the replacement's.
		if r := p.Roles[0]; r.Count != 3 || r.Pool == nil || r.Pool.States[reaperkv.StandbyReady] != 1 || r.Pool.Creating != 0 || !strings.Contains(r.Pool.Why, "web1") {
			t.Fatalf("role report %+v pool %+v (%s)", r, r.Pool, r.Pool.Why)
		}
	})
	t.Run("a standby that has not validated the current version is not claimed", func(t *testing.T) {
		in := in
		in.Checks = append([]reaper.Check{crit("web1")}, in.Checks[1:]...)
		in.Memory = reaper.Memory{Critical: map[string]time.Time{"web1": t0.Add(-time.Hour)}}
		in.ReportingValidation = map[string]bool{"web2": true, "web3": true, "web5": true}
		in.Validated = map[string]bool{"web2": true, "web3": true}
		p := Plan(in)
		for _, a := range p.Actions {
			if a.Op == reaper.OpClaim {
				t.Fatalf("claimed a standby of an older version: %v", a)
			}
			if a.Op == reaper.OpDelete && a.Entry.OldName == "web5" {
				t.Fatalf("deleted a standby converging in place: %v", a)
			}
		}
		// web4 has not validated either (and is past max_age).
		if p.Roles[0].Pool.States[reaperkv.StandbyConverging] != 2 {
			t.Fatalf("pool %v, want both converging", p.Roles[0].Pool)
		}
	})
	t.Run("a stopped standby of an older version is rebuilt, never claimed", func(t *testing.T) {
		in := in
		in.Config = reapertest.Config(t, pool, func(c *reaper.Config) { c.Roles[0].WarmPool.State = reaper.PoolStopped })
		in.Servers = append([]reaper.Server{}, in.Servers...)
		in.Servers[4] = withStatus(in.Servers[4], reaper.StatusShutoff) // web5, stopped once ready
		in.PoolRecords = map[string]reaperkv.StandbyRecord{"web5": {Role: "web", Host: "web5", ID: "id-web5", State: reaperkv.StandbyStopped}}
		in.ReportingValidation = map[string]bool{"web1": true, "web2": true, "web3": true, "web5": true}
		in.Validated = map[string]bool{"web1": true, "web2": true, "web3": true}
		in.Servers[3].Created = t0.Add(-day) // web4 young: only web5 is stale
		p := Plan(in)
		var del *reaper.Action
		for i, a := range p.Actions {
			if a.Op == reaper.OpClaim {
				t.Fatalf("claimed: %v", a)
			}
			if a.Op == reaper.OpDelete {
				del = &p.Actions[i]
			}
		}
		if del == nil || del.Entry.OldName != "web5" || del.Reason != "stopped standby without a validation of the current version" {
			t.Fatalf("delete %v, want web5 rebuilt: %v", del, p.Actions)
		}
	})
	t.Run("a delete-first replacement whose old server is gone claims a standby", func(t *testing.T) {
		in := in
		in.Config = reapertest.Config(t, pool, func(c *reaper.Config) { c.Roles[0].ReplaceMode = reaper.ModeDeleteFirst })
		in.Servers = append([]reaper.Server{}, in.Servers[1:]...) // web1 deleted
		in.Checks = in.Checks[1:]
		in.Journal = []reaper.Entry{{ID: "web.1.1", Kind: reaperkv.KindReplace, Role: "web", Mode: reaper.ModeDeleteFirst, Phase: reaperkv.PhaseCreating,
			NewName: "web6", Reason: "unhealthy", Started: t0.Add(-time.Minute), Updated: t0.Add(-time.Minute)}}
		p := Plan(in)
		var claims int
		for _, a := range p.Actions {
			switch {
			case a.Op == reaper.OpClaim && a.Entry.ID == "web.1.1" && a.Entry.NewName == "web5" && a.Entry.NewID == "id-web5":
				claims++
			case a.Op == reaper.OpClaim, a.Op == reaper.OpCreate && !a.Entry.Standby:
				t.Fatalf("unexpected %v", a)
			}
		}
		if claims != 1 {
			t.Fatalf("%d claims of web5 by the entry: %v", claims, p.Actions)
		}
		// Once a create was tried, a server may still appear for it: no
		// claim then.
		in.Journal[0].Attempts = 1
		in.Journal[0].Updated = t0.Add(-time.Hour)
		for _, a := range Plan(in).Actions {
			if a.Op == reaper.OpClaim {
				t.Fatalf("claimed after a create attempt: %v", a)
			}
		}
	})
	t.Run("disarmed: the expired standby is not deleted", func(t *testing.T) {
		in := in
		in.Armed = false
		in.ArmKeyWritten = true
		for _, a := range Plan(in).Actions {
			if a.Op == reaper.OpDelete {
				t.Fatalf("deleted while disarmed: %v", a)
			}
		}
	})
	t.Run("standbys count toward no pause", func(t *testing.T) {
		in := in
		// Both standbys critical: 2 of 5 servers would be 40%, under the
		// fleet's 45%; with one member critical too, 3 of 5 would pause.
		in.Checks = append([]reaper.Check{crit("web1")}, in.Checks[1:]...)
		in.Checks = append(in.Checks, crit("web4"), crit("web5"))
		if p := Plan(in); p.Paused {
			t.Fatalf("paused by standbys: %s", p.PauseReason)
		}
	})
}

// The refill never competes with real demand for the project's quota: no
// standby is created while any role has a member awaiting replacement, a
// replacement under way, a member's create not made yet, or fewer members
// than its count.
func TestPoolRefillWaitsForRealDemand(t *testing.T) {
	pool := func(c *reaper.Config) { c.Roles[0].WarmPool = &reaper.WarmPool{Size: 1} }
	members, checks := healthyFleet("web", 3)
	replacing := reaper.Entry{ID: "web.1.1", Kind: reaperkv.KindReplace, Role: "web", Mode: reaper.ModeSurge, Phase: reaperkv.PhaseDraining,
		OldName: "web1", OldID: "id-web1", NewName: "web4", NewID: "id-web4", Reason: "unhealthy",
		Started: t0.Add(-5 * time.Minute), Updated: t0.Add(-time.Minute), DrainUntil: t0.Add(time.Minute)}
	cases := []struct {
		name string
		in   func(*reaper.Input)
		cfg  func(*reaper.Config)
		why  string // "": a standby is created
	}{
		{name: "every role at its count, every member serving: the refill goes on"},
		{name: "a dead member waits behind max_in_flight (a scale in's drain)", why: "member awaiting replacement (web2, unhealthy)",
			in: func(in *reaper.Input) {
				in.Servers = append(in.Servers, srv("web4", time.Hour))
				in.Checks = append(replaceChecks(in.Checks, "web2", crit("web2")), pass("web4"))
				in.Memory = reaper.Memory{Critical: longCrit("web2")}
				in.Journal = []reaper.Entry{{ID: "web.1.3", Kind: reaperkv.KindDelete, Role: "web", Phase: reaperkv.PhaseDraining, OldName: "web4", OldID: "id-web4",
					Reason: "surplus", Started: t0.Add(-time.Minute), Updated: t0.Add(-time.Minute), DrainUntil: t0.Add(time.Minute)}}
			}},
		{name: "a replacement whose new server boots", why: "replacing web1 (entry web.1.1)",
			in: func(in *reaper.Input) {
				e := replacing
				e.Phase, e.DrainUntil = reaperkv.PhaseBooting, time.Time{}
				in.Servers = append(in.Servers, withStatus(srv("web4", time.Minute), reaper.StatusBuild))
				in.Journal = []reaper.Entry{e}
			}},
		{name: "a delete-first replacement whose create failed", why: "replacing web1 (entry web.1.1)",
			cfg: func(c *reaper.Config) { c.Roles[0].ReplaceMode = reaper.ModeDeleteFirst },
			in: func(in *reaper.Input) {
				e := replacing
				e.Mode, e.Phase, e.OldID, e.NewID, e.Attempts, e.DrainUntil = reaper.ModeDeleteFirst, reaperkv.PhaseCreating, "", "", 1, time.Time{}
				in.Servers, in.Checks = in.Servers[1:], in.Checks[1:]
				in.Journal = []reaper.Entry{e}
			}},
		{name: "a member's create not made yet (a failed attempt)", why: "creating web4 (entry web.1.2)",
			in: func(in *reaper.Input) {
				in.Desired = map[string]int{"web": 4}
				in.Journal = []reaper.Entry{{ID: "web.1.2", Kind: reaperkv.KindCreate, Role: "web", Phase: reaperkv.PhaseCreating, NewName: "web4",
					Attempts: 1, Started: t0.Add(-time.Minute), Updated: t0.Add(-20 * time.Second)}}
			}},
		{name: "another role below its count", why: "role db is below its count (0 of 1)",
			in: func(in *reaper.Input) { in.Desired = map[string]int{"db": 1} }},
		{name: "another role's dead member", why: "role db has a member awaiting replacement (db1, unhealthy)",
			in: func(in *reaper.Input) {
				in.Desired = map[string]int{"db": 1}
				in.Servers = append(in.Servers, srv("db1", day))
				in.Checks = append(in.Checks, crit("db1"))
				in.Memory = reaper.Memory{Critical: longCrit("db1")}
			}},
		{name: "a member past max_age", why: "member awaiting replacement (web3, expired)",
			cfg: func(c *reaper.Config) { c.Roles[0].MaxAge, c.Roles[0].MaxAgeJitter = reaper.Duration(10*day), 0 }},
		{name: "a scale in under way: the refill goes on",
			in: func(in *reaper.Input) {
				in.Desired = map[string]int{"web": 2}
				in.Journal = []reaper.Entry{{ID: "web.1.3", Kind: reaperkv.KindDelete, Role: "web", Phase: reaperkv.PhaseDraining, OldName: "web3", OldID: "id-web3",
					Reason: "surplus", Started: t0.Add(-time.Minute), Updated: t0.Add(-time.Minute), DrainUntil: t0.Add(time.Minute)}}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := reapertest.Config(t, pool)
			if tc.cfg != nil {
				cfg = reapertest.Config(t, pool, tc.cfg)
			}
			in := reaper.Input{Now: t0, Config: cfg, Armed: true, Servers: append([]reaper.Server{}, members...), Checks: append([]reaper.Check{}, checks...)}
			if tc.in != nil {
				tc.in(&in)
			}
			p := Plan(in)
			refills := 0
			for _, a := range p.Actions {
				if a.Op == reaper.OpCreate && a.Entry.Standby {
					refills++
				}
			}
			rep := p.Roles[0].Pool
			switch {
			case rep == nil:
				t.Fatal("no pool report")
			case tc.why == "" && refills != 1:
				t.Fatalf("%d refills, want 1 (held: %q); actions %v", refills, rep.Why, p.Actions)
			case tc.why != "" && refills != 0:
				t.Fatalf("a standby created while %s: %v", tc.why, p.Actions)
			case !strings.Contains(rep.Why, tc.why) || (tc.why == "") != (rep.Why == ""):
				t.Fatalf("the pool's report says %q, want %q", rep.Why, tc.why)
			}
		})
	}
}

// A ready standby of a stopped pool is powered off only once it has stayed
// ready for standbySettle: its node's watches re-run the eventual step and
// validation seconds after its first validation, and a power-off cutting
// such a run short left it unvalidated and rebuilt (the lab saw it).
func TestStoppedPoolWaitsForTheStandbyToSettle(t *testing.T) {
	cfg := func(c *reaper.Config) { c.Roles[0].WarmPool = &reaper.WarmPool{Size: 1, State: reaper.PoolStopped} }
	members, checks := healthyFleet("web", 3)
	sb, sbChecks := standby("web4", 3*time.Minute)
	base := reaper.Input{Now: t0, Config: reapertest.Config(t, cfg), Armed: true,
		Servers: append(append([]reaper.Server{}, members...), sb), Checks: append(append([]reaper.Check{}, checks...), sbChecks...)}
	stops := func(p *reaper.Plan) int {
		n := 0
		for _, a := range p.Actions {
			if a.Op == reaper.OpStandbyStop {
				n++
			}
		}
		return n
	}
	p := Plan(base)
	if n := stops(p); n != 0 {
		t.Fatalf("first seen ready: %d stops, want none yet: %v", n, p.Actions)
	}
	next := base
	next.Now, next.Memory = t0.Add(standbySettle-time.Second), p.Memory
	if n := stops(Plan(next)); n != 0 {
		t.Fatalf("ready for less than %s: %d stops, want none", standbySettle, n)
	}
	next.Now = t0.Add(standbySettle)
	if n := stops(Plan(next)); n != 1 {
		t.Fatalf("ready for %s: %d stops, want 1", standbySettle, n)
	}
	// A break in readiness starts the wait again.
	broken := base
	broken.Now, broken.Memory = t0.Add(10*time.Second), p.Memory
	broken.Checks = append(append([]reaper.Check{}, checks...), crit("web4"), sbChecks[1])
	p2 := Plan(broken)
	again := base
	again.Now, again.Memory = t0.Add(standbySettle+time.Second), p2.Memory
	if n := stops(Plan(again)); n != 0 {
		t.Fatalf("ready again just now after a break: %d stops, want none", n)
	}
}
