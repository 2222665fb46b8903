package reaper

import (
	"strings"
	"testing"
	"time"

	"github.com/jiocloud/orchestrate/internal/store"
)

// standby is a standby of role web created age ago, its node passing and
// in the reaper's standby maintenance.
func standby(name string, age time.Duration) (Server, []Check) {
	s := srv(name, age)
	s.Metadata[MetaStandby] = "web"
	return s, []Check{pass(name), {Node: name, CheckID: maintNodeCheck, Status: checkCritical}}
}

// The pool's upkeep decisions, on the pure planner: what a standby's age,
// health and the role's needs make of it.
func TestPoolUpkeep(t *testing.T) {
	pool := func(c *Config) {
		c.Roles[0].WarmPool = &WarmPool{Size: 2}
		c.Roles[0].MaxAge = Duration(10 * day)
		c.Roles[0].MaxAgeJitter = 0
	}
	members, checks := healthyFleet("web", 3)
	for i := range members {
		members[i].Created = t0.Add(-day) // young
	}
	old, oldChecks := standby("web4", 11*day)
	young, youngChecks := standby("web5", day)
	in := Input{Now: t0, Config: testConfig(t, pool), Armed: true,
		Servers: append(append([]Server{}, members...), old, young),
		Checks:  append(append(append([]Check{}, checks...), oldChecks...), youngChecks...)}

	t.Run("a standby past max_age is deleted, never claimed, and a member replaced claims the young one", func(t *testing.T) {
		in := in
		in.Checks = append([]Check{crit("web1")}, in.Checks[1:]...)
		in.Memory = Memory{Critical: map[string]time.Time{"web1": t0.Add(-time.Hour)}}
		p := in.Plan()
		var claim, del *Action
		for i, a := range p.Actions {
			switch a.Op {
			case OpClaim:
				claim = &p.Actions[i]
			case OpDelete:
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
		if r := p.Roles[0]; r.Count != 3 || r.Pool == nil || r.Pool.States[store.StandbyReady] != 1 || r.Pool.Creating != 0 || !strings.Contains(r.Pool.Why, "web1") {
			t.Fatalf("role report %+v pool %+v (%s)", r, r.Pool, r.Pool.Why)
		}
	})
	t.Run("a standby that has not validated the current version is not claimed", func(t *testing.T) {
		in := in
		in.Checks = append([]Check{crit("web1")}, in.Checks[1:]...)
		in.Memory = Memory{Critical: map[string]time.Time{"web1": t0.Add(-time.Hour)}}
		in.ReportingValidation = map[string]bool{"web2": true, "web3": true, "web5": true}
		in.Validated = map[string]bool{"web2": true, "web3": true}
		p := in.Plan()
		for _, a := range p.Actions {
			if a.Op == OpClaim {
				t.Fatalf("claimed a standby of an older version: %v", a)
			}
			if a.Op == OpDelete && a.Entry.OldName == "web5" {
				t.Fatalf("deleted a standby converging in place: %v", a)
			}
		}
		// web4 has not validated either (and is past max_age).
		if p.Roles[0].Pool.States[store.StandbyConverging] != 2 {
			t.Fatalf("pool %v, want both converging", p.Roles[0].Pool)
		}
	})
	t.Run("a stopped standby of an older version is rebuilt, never claimed", func(t *testing.T) {
		in := in
		in.Config = testConfig(t, pool, func(c *Config) { c.Roles[0].WarmPool.State = PoolStopped })
		in.Servers = append([]Server{}, in.Servers...)
		in.Servers[4] = withStatus(in.Servers[4], StatusShutoff) // web5, stopped once ready
		in.PoolRecords = map[string]store.StandbyRecord{"web5": {Role: "web", Host: "web5", ID: "id-web5", State: store.StandbyStopped}}
		in.ReportingValidation = map[string]bool{"web1": true, "web2": true, "web3": true, "web5": true}
		in.Validated = map[string]bool{"web1": true, "web2": true, "web3": true}
		in.Servers[3].Created = t0.Add(-day) // web4 young: only web5 is stale
		p := in.Plan()
		var del *Action
		for i, a := range p.Actions {
			if a.Op == OpClaim {
				t.Fatalf("claimed: %v", a)
			}
			if a.Op == OpDelete {
				del = &p.Actions[i]
			}
		}
		if del == nil || del.Entry.OldName != "web5" || del.Reason != "stopped standby without a validation of the current version" {
			t.Fatalf("delete %v, want web5 rebuilt: %v", del, p.Actions)
		}
	})
	t.Run("a delete-first replacement whose old server is gone claims a standby", func(t *testing.T) {
		in := in
		in.Config = testConfig(t, pool, func(c *Config) { c.Roles[0].ReplaceMode = ModeDeleteFirst })
		in.Servers = append([]Server{}, in.Servers[1:]...) // web1 deleted
		in.Checks = in.Checks[1:]
		in.Journal = []Entry{{ID: "web.1.1", Kind: store.KindReplace, Role: "web", Mode: ModeDeleteFirst, Phase: store.PhaseCreating,
			NewName: "web6", Reason: "unhealthy", Started: t0.Add(-time.Minute), Updated: t0.Add(-time.Minute)}}
		p := in.Plan()
		var claims int
		for _, a := range p.Actions {
			switch {
			case a.Op == OpClaim && a.Entry.ID == "web.1.1" && a.Entry.NewName == "web5" && a.Entry.NewID == "id-web5":
				claims++
			case a.Op == OpClaim, a.Op == OpCreate && !a.Entry.Standby:
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
		for _, a := range in.Plan().Actions {
			if a.Op == OpClaim {
				t.Fatalf("claimed after a create attempt: %v", a)
			}
		}
	})
	t.Run("disarmed: the expired standby is not deleted", func(t *testing.T) {
		in := in
		in.Armed = false
		in.ArmKeyWritten = true
		for _, a := range in.Plan().Actions {
			if a.Op == OpDelete {
				t.Fatalf("deleted while disarmed: %v", a)
			}
		}
	})
	t.Run("standbys count toward no pause", func(t *testing.T) {
		in := in
		// Both standbys critical: 2 of 5 servers would be 40%, under the
		// fleet's 45%; with one member critical too, 3 of 5 would pause.
		in.Checks = append([]Check{crit("web1")}, in.Checks[1:]...)
		in.Checks = append(in.Checks, crit("web4"), crit("web5"))
		if p := in.Plan(); p.Paused {
			t.Fatalf("paused by standbys: %s", p.PauseReason)
		}
	})
}

// The refill never competes with real demand for the project's quota: no
// standby is created while any role has a member awaiting replacement, a
// replacement under way, a member's create not made yet, or fewer members
// than its count.
func TestPoolRefillWaitsForRealDemand(t *testing.T) {
	pool := func(c *Config) { c.Roles[0].WarmPool = &WarmPool{Size: 1} }
	members, checks := healthyFleet("web", 3)
	replacing := Entry{ID: "web.1.1", Kind: store.KindReplace, Role: "web", Mode: ModeSurge, Phase: store.PhaseDraining,
		OldName: "web1", OldID: "id-web1", NewName: "web4", NewID: "id-web4", Reason: "unhealthy",
		Started: t0.Add(-5 * time.Minute), Updated: t0.Add(-time.Minute), DrainUntil: t0.Add(time.Minute)}
	cases := []struct {
		name string
		in   func(*Input)
		cfg  func(*Config)
		why  string // "": a standby is created
	}{
		{name: "every role at its count, every member serving: the refill goes on"},
		{name: "a dead member waits behind max_in_flight (a scale in's drain)", why: "member awaiting replacement (web2, unhealthy)",
			in: func(in *Input) {
				in.Servers = append(in.Servers, srv("web4", time.Hour))
				in.Checks = append(replaceChecks(in.Checks, "web2", crit("web2")), pass("web4"))
				in.Memory = Memory{Critical: longCrit("web2")}
				in.Journal = []Entry{{ID: "web.1.3", Kind: store.KindDelete, Role: "web", Phase: store.PhaseDraining, OldName: "web4", OldID: "id-web4",
					Reason: "surplus", Started: t0.Add(-time.Minute), Updated: t0.Add(-time.Minute), DrainUntil: t0.Add(time.Minute)}}
			}},
		{name: "a replacement whose new server boots", why: "replacing web1 (entry web.1.1)",
			in: func(in *Input) {
				e := replacing
				e.Phase, e.DrainUntil = store.PhaseBooting, time.Time{}
				in.Servers = append(in.Servers, withStatus(srv("web4", time.Minute), StatusBuild))
				in.Journal = []Entry{e}
			}},
		{name: "a delete-first replacement whose create failed", why: "replacing web1 (entry web.1.1)",
			cfg: func(c *Config) { c.Roles[0].ReplaceMode = ModeDeleteFirst },
			in: func(in *Input) {
				e := replacing
				e.Mode, e.Phase, e.OldID, e.NewID, e.Attempts, e.DrainUntil = ModeDeleteFirst, store.PhaseCreating, "", "", 1, time.Time{}
				in.Servers, in.Checks = in.Servers[1:], in.Checks[1:]
				in.Journal = []Entry{e}
			}},
		{name: "a member's create not made yet (a failed attempt)", why: "creating web4 (entry web.1.2)",
			in: func(in *Input) {
				in.Desired = map[string]int{"web": 4}
				in.Journal = []Entry{{ID: "web.1.2", Kind: store.KindCreate, Role: "web", Phase: store.PhaseCreating, NewName: "web4",
					Attempts: 1, Started: t0.Add(-time.Minute), Updated: t0.Add(-20 * time.Second)}}
			}},
		{name: "another role below its count", why: "role db is below its count (0 of 1)",
			in: func(in *Input) { in.Desired = map[string]int{"db": 1} }},
		{name: "another role's dead member", why: "role db has a member awaiting replacement (db1, unhealthy)",
			in: func(in *Input) {
				in.Desired = map[string]int{"db": 1}
				in.Servers = append(in.Servers, srv("db1", day))
				in.Checks = append(in.Checks, crit("db1"))
				in.Memory = Memory{Critical: longCrit("db1")}
			}},
		{name: "a member past max_age", why: "member awaiting replacement (web3, expired)",
			cfg: func(c *Config) { c.Roles[0].MaxAge, c.Roles[0].MaxAgeJitter = Duration(10*day), 0 }},
		{name: "a scale in under way: the refill goes on",
			in: func(in *Input) {
				in.Desired = map[string]int{"web": 2}
				in.Journal = []Entry{{ID: "web.1.3", Kind: store.KindDelete, Role: "web", Phase: store.PhaseDraining, OldName: "web3", OldID: "id-web3",
					Reason: "surplus", Started: t0.Add(-time.Minute), Updated: t0.Add(-time.Minute), DrainUntil: t0.Add(time.Minute)}}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, pool)
			if tc.cfg != nil {
				cfg = testConfig(t, pool, tc.cfg)
			}
			in := Input{Now: t0, Config: cfg, Armed: true, Servers: append([]Server{}, members...), Checks: append([]Check{}, checks...)}
			if tc.in != nil {
				tc.in(&in)
			}
			p := in.Plan()
			refills := 0
			for _, a := range p.Actions {
				if a.Op == OpCreate && a.Entry.Standby {
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
	cfg := func(c *Config) { c.Roles[0].WarmPool = &WarmPool{Size: 1, State: PoolStopped} }
	members, checks := healthyFleet("web", 3)
	sb, sbChecks := standby("web4", 3*time.Minute)
	base := Input{Now: t0, Config: testConfig(t, cfg), Armed: true,
		Servers: append(append([]Server{}, members...), sb), Checks: append(append([]Check{}, checks...), sbChecks...)}
	stops := func(p *Plan) int {
		n := 0
		for _, a := range p.Actions {
			if a.Op == OpStandbyStop {
				n++
			}
		}
		return n
	}
	p := base.Plan()
	if n := stops(p); n != 0 {
		t.Fatalf("first seen ready: %d stops, want none yet: %v", n, p.Actions)
	}
	next := base
	next.Now, next.Memory = t0.Add(standbySettle-time.Second), p.Memory
	if n := stops(next.Plan()); n != 0 {
		t.Fatalf("ready for less than %s: %d stops, want none", standbySettle, n)
	}
	next.Now = t0.Add(standbySettle)
	if n := stops(next.Plan()); n != 1 {
		t.Fatalf("ready for %s: %d stops, want 1", standbySettle, n)
	}
	// A break in readiness starts the wait again.
	broken := base
	broken.Now, broken.Memory = t0.Add(10*time.Second), p.Memory
	broken.Checks = append(append([]Check{}, checks...), crit("web4"), sbChecks[1])
	p2 := broken.Plan()
	again := base
	again.Now, again.Memory = t0.Add(standbySettle+time.Second), p2.Memory
	if n := stops(again.Plan()); n != 0 {
		t.Fatalf("ready again just now after a break: %d stops, want none", n)
	}
}
