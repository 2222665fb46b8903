package reaper

import (
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
		if r := p.Roles[0]; r.Count != 3 || r.Pool == nil || r.Pool.States[store.StandbyReady] != 1 || r.Pool.Creating != 1 {
			t.Fatalf("role report %+v pool %+v", r, r.Pool)
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
		if del == nil || del.Entry.OldName != "web5" || del.Reason != "stopped standby of an older version" {
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
