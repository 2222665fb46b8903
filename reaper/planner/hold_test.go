package planner

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/reaper"
	"github.com/jiocloud/orchestrate/reaper/reapertest"
)

// holdOn is an operator's hold of host (role web) written at t0 less ago,
// for d.
func holdOn(host string, ago, d time.Duration) reaperkv.HoldRecord {
	at := t0.Add(-ago)
	return reaperkv.HoldRecord{Host: host, Role: "web", Reason: "look at the kernel oops", By: "ops@bastion", Time: at, Until: at.Add(d)}
}

// holdMaint is the maintenance check a hold puts on node.
func holdMaint(node string) reaper.Check {
	return reaper.Check{Node: node, CheckID: reaper.MaintNodeCheck, Status: reaper.CheckCritical, Notes: reaperkv.HoldNotesPrefix + " ops@bastion, until ...: look"}
}

// failingWeb3 is web1..web3, web3 critical for an hour, desired 3.
func failingWeb3() ([]reaper.Server, []reaper.Check) {
	servers, checks := healthyFleet("web", 3)
	return servers, replaceChecks(checks, "web3", crit("web3"))
}

// A failing server held for a human is not replaced, repaired or drained:
// the role's count goes without it, so a server is created beside it (a
// plain create, no replacement of it), and its node's maintenance is
// asked. A hold that is over (expired, released), of another server of
// the name, or dated far ahead holds nothing: web3 is replaced (or
// repaired) as any failing server.
func TestHeldServerIsKeptAndReplaced(t *testing.T) {
	released := holdOn("web3", time.Hour, day)
	released.Released, released.ReleasedBy = t0.Add(-time.Minute), "ops"
	otherID := holdOn("web3", time.Hour, day)
	otherID.ID = "id-an-older-web3"
	cases := []struct {
		name    string
		hold    *reaperkv.HoldRecord
		repair  bool
		want    []string
		held    bool
		blocked string
	}{
		{name: "no hold", want: []string{"create web4 for web3"}},
		{name: "held", hold: ptr(holdOn("web3", time.Hour, day)), want: []string{"create web4"}, held: true},
		{name: "held, with a repair ladder", hold: ptr(holdOn("web3", time.Hour, day)), repair: true, want: []string{"create web4"}, held: true},
		{name: "no hold, with a repair ladder", repair: true, want: []string{"repair web3"}},
		{name: "expired", hold: ptr(holdOn("web3", 2*day, day)), want: []string{"create web4 for web3"}},
		{name: "released", hold: &released, want: []string{"create web4 for web3"}},
		{name: "another server of the name", hold: &otherID, want: []string{"create web4 for web3"}},
		{name: "dated an hour ahead", hold: ptr(holdOn("web3", -time.Hour, day)), want: []string{"create web4 for web3"}, blocked: "ahead of the reaper's clock"},
		{name: "dated ahead within the skew", hold: ptr(holdOn("web3", -time.Minute, day)), want: []string{"create web4"}, held: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := reapertest.Config(t, func(c *reaper.Config) {
				if tc.repair {
					c.Roles[0].Repair = []string{reaper.RepairRerun}
				}
			})
			servers, checks := failingWeb3()
			in := reaper.Input{Now: t0, Config: cfg, Servers: servers, Checks: checks, Armed: true,
				Memory: reaper.Memory{Critical: longCrit("web3")}, Holds: map[string]reaperkv.HoldRecord{}}
			if tc.hold != nil {
				in.Holds["web3"] = *tc.hold
			}
			p := Plan(in)
			if got := ops(p); !slices.Equal(got, tc.want) {
				t.Fatalf("actions %v, want %v\nblocked: %q", got, tc.want, p.Blocked)
			}
			v := roleView(t, p, "web")
			if tc.held {
				if len(v.Held) != 1 || v.Held[0].Host != "web3" || v.States[reaperkv.ServerHeld] != 1 || v.Healthy != 2 {
					t.Fatalf("report: held %+v, states %v, healthy %d; want web3 held, 2 serving", v.Held, v.States, v.Healthy)
				}
				if len(p.HoldMaintain) != 1 || p.HoldMaintain[0].Host != "web3" {
					t.Fatalf("hold maintenance asked for %+v, want web3", p.HoldMaintain)
				}
			} else if len(v.Held) != 0 || len(p.HoldMaintain) != 0 {
				t.Fatalf("held %+v, maintenance %+v: want none", v.Held, p.HoldMaintain)
			}
			if tc.blocked != "" && !strings.Contains(strings.Join(p.Blocked, "\n"), tc.blocked) {
				t.Fatalf("blocked %q, want %q", p.Blocked, tc.blocked)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// The held server must not make its role look over its count: web4 (its
// replacement) serves, desired 3, web3 held in the hold's maintenance.
// Nothing is scaled in. Once the hold ends, web3 is judged by its own
// checks (the hold's maintenance is no operator's): the role is one over
// its count, and the surplus taken is web3, the failing one, never a
// healthy server; and the hold's maintenance is ended.
func TestHeldServerIsNoSurplus(t *testing.T) {
	cfg := reapertest.Config(t)
	servers, checks := healthyFleet("web", 4)
	checks = replaceChecks(checks, "web3", crit("web3"), holdMaint("web3"))
	base := reaper.Input{Now: t0, Config: cfg, Servers: servers, Checks: checks, Armed: true, Memory: reaper.Memory{Critical: longCrit("web3")}}

	held := base
	held.Holds = map[string]reaperkv.HoldRecord{"web3": holdOn("web3", time.Hour, day)}
	p := Plan(held)
	if got := ops(p); len(got) != 0 {
		t.Fatalf("held: actions %v, want none (web1, web2, web4 are the role's 3)\nblocked: %q", got, p.Blocked)
	}
	if len(p.HoldMaintain) != 0 || len(p.HoldEnd) != 0 {
		t.Fatalf("held: maintenance asked %v, ended %v; want neither (it is in place)", p.HoldMaintain, p.HoldEnd)
	}

	over := base
	over.Holds = map[string]reaperkv.HoldRecord{"web3": holdOn("web3", 2*day, day)} // expired
	p = Plan(over)
	if got := ops(p); !slices.Equal(got, []string{"drain web3"}) {
		t.Fatalf("hold over: actions %v, want [drain web3] (the failing surplus)\nblocked: %q", got, p.Blocked)
	}
	if !slices.Equal(p.HoldEnd, []string{"web3"}) {
		t.Fatalf("hold over: maintenance ended on %v, want [web3]", p.HoldEnd)
	}
}

// Holds count against the role's max_held (default 1): the oldest hold
// is honoured, the next is named and holds nothing (its server is
// replaced as usual). max_held 0 honours none.
func TestHoldsBeyondMaxHeld(t *testing.T) {
	for _, tc := range []struct {
		name    string
		maxHeld *int
		want    []string
		held    []string
	}{
		// Below its count, the role creates; web3 is replaced once it is
		// at its count again (balance does one or the other a cycle).
		{name: "default 1", want: []string{"create web4"}, held: []string{"web2"}},
		{name: "max_held 2", maxHeld: ptr(2), want: []string{"create web4", "create web5"}, held: []string{"web2", "web3"}},
		{name: "max_held 0", maxHeld: ptr(0), want: []string{"create web4 for web3", "create web5 for web2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := reapertest.Config(t, func(c *reaper.Config) {
				c.Roles[0].MaxHeld = tc.maxHeld
				c.MaxInFlight = 3
				c.PauseRoleFraction, c.PauseFleetFraction = 0.9, 0.9 // two of three failing: no partition here
			})
			servers, checks := healthyFleet("web", 3)
			checks = replaceChecks(checks, "web2", crit("web2"))
			checks = replaceChecks(checks, "web3", crit("web3"))
			in := reaper.Input{Now: t0, Config: cfg, Servers: servers, Checks: checks, Armed: true, Memory: reaper.Memory{Critical: longCrit("web2", "web3")},
				Holds: map[string]reaperkv.HoldRecord{"web2": holdOn("web2", 2*time.Hour, day), "web3": holdOn("web3", time.Hour, day)}}
			p := Plan(in)
			got := ops(p)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("actions %v, want %v\nblocked: %q", got, tc.want, p.Blocked)
			}
			var held []string
			for _, h := range roleView(t, p, "web").Held {
				held = append(held, h.Host)
			}
			if !slices.Equal(held, tc.held) {
				t.Fatalf("held %v, want %v", held, tc.held)
			}
			if len(tc.held) < 2 && !strings.Contains(strings.Join(p.Blocked, "\n"), "not honoured: the role holds") {
				t.Fatalf("blocked %q: want the hold beyond max_held named", p.Blocked)
			}
		})
	}
}

// A hold that would take the role's last serving server out of service,
// or its serving count below min_healthy, waits; a hold of a failing
// server never does.
func TestHoldNeverTakesTheLastServer(t *testing.T) {
	cfg := reapertest.Config(t, func(c *reaper.Config) { c.PauseRoleFraction, c.PauseFleetFraction = 0.9, 0.9 })
	servers, checks := healthyFleet("web", 3)
	checks = replaceChecks(checks, "web2", crit("web2"))
	checks = replaceChecks(checks, "web3", crit("web3"))
	in := reaper.Input{Now: t0, Config: cfg, Servers: servers, Checks: checks, Armed: true, Memory: reaper.Memory{Critical: longCrit("web2", "web3")},
		Holds: map[string]reaperkv.HoldRecord{"web1": holdOn("web1", time.Hour, day)}}
	p := Plan(in)
	if v := roleView(t, p, "web"); len(v.Held) != 0 || v.Healthy != 1 {
		t.Fatalf("held %+v, serving %d: web1, the last serving server, must stay in service", v.Held, v.Healthy)
	}
	if !strings.Contains(strings.Join(p.Blocked, "\n"), "hold of web1 waits: it is the role's last serving server") {
		t.Fatalf("blocked %q", p.Blocked)
	}
	for _, a := range p.HoldMaintain {
		t.Fatalf("maintenance asked for %s", a.Host)
	}

	// min_healthy 2 with web1 and web2 serving: web1 waits too.
	cfg = reapertest.Config(t, func(c *reaper.Config) { c.Roles[0].MinHealthy = 2 })
	servers, checks = healthyFleet("web", 3)
	checks = replaceChecks(checks, "web3", crit("web3"))
	in = reaper.Input{Now: t0, Config: cfg, Servers: servers, Checks: checks, Armed: true, Memory: reaper.Memory{Critical: longCrit("web3")},
		Holds: map[string]reaperkv.HoldRecord{"web1": holdOn("web1", time.Hour, day)}}
	p = Plan(in)
	if v := roleView(t, p, "web"); len(v.Held) != 0 || !strings.Contains(strings.Join(p.Blocked, "\n"), "below min_healthy 2") {
		t.Fatalf("held %+v, blocked %q: want web1's hold waiting for min_healthy", v.Held, p.Blocked)
	}
}

// What an entry in flight would do to a server that becomes held stops:
// a drain (scale-in or replacement) and a delete Nova has not accepted
// end as a restore, a repair ladder ends, and a surge replacement whose
// new server serves finishes without draining the old one. A delete Nova
// accepted goes on.
func TestHoldStopsEntriesInFlight(t *testing.T) {
	hold := map[string]reaperkv.HoldRecord{"web3": holdOn("web3", time.Minute, day)}
	cfg := reapertest.Config(t)
	for _, tc := range []struct {
		name   string
		kind   reaperkv.EntryKind
		reason string
		phase  reaperkv.Phase
		asked  bool
		want   string
	}{
		{name: "scale-in drain", kind: reaperkv.KindDelete, reason: "surplus (healthy): 1 over desired 2", phase: reaperkv.PhaseDraining, want: "restore web3"},
		{name: "replacement drain", kind: reaperkv.KindReplace, reason: string(reaper.StateUnhealthy), phase: reaperkv.PhaseDraining, want: "restore web3"},
		{name: "recorded delete", kind: reaperkv.KindReplace, reason: string(reaper.StateUnhealthy), phase: reaperkv.PhaseDeleting, want: "restore web3"},
		{name: "delete Nova accepted", kind: reaperkv.KindReplace, reason: string(reaper.StateUnhealthy), phase: reaperkv.PhaseDeleting, asked: true},
		{name: "repair", kind: reaperkv.KindRepair, reason: string(reaper.StateUnhealthy), phase: reaperkv.PhaseRepairReboot, want: "finish web3"},
		{name: "surge replacement served", kind: reaperkv.KindReplace, reason: string(reaper.StateUnhealthy), phase: reaperkv.PhaseBooting, want: "finish web4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			servers, checks, e := drainWorld(tc.kind, tc.reason, false, t0.Add(time.Minute))
			e.Phase = tc.phase
			if tc.asked {
				e.DeleteAsked = t0.Add(-time.Second)
			}
			if tc.kind == reaperkv.KindRepair {
				e.Repair = &reaperkv.RepairState{Step: reaper.RepairReboot, Since: t0.Add(-time.Minute), Until: t0.Add(time.Hour)}
			}
			in := reaper.Input{Now: t0, Config: cfg, Servers: servers, Checks: checks, Desired: map[string]int{"web": 2 + len(servers) - 3}, Armed: true,
				Journal: []reaper.Entry{e}, Holds: hold}
			p := Plan(in)
			if got := ops(p); tc.want == "" && slices.Contains(got, "restore web3") {
				t.Fatalf("actions %v: a delete Nova accepted cannot be taken back", got)
			} else if tc.want != "" && (len(got) == 0 || got[0] != tc.want) {
				t.Fatalf("actions %v, want %s first\nblocked: %q", got, tc.want, p.Blocked)
			}
			for _, a := range p.Actions {
				if a.Entry.OldName == "web3" && (a.Op == reaper.OpDrain || a.Op == reaper.OpRepair || (a.Op == reaper.OpDelete && !tc.asked)) {
					t.Fatalf("%s of held web3 planned: %v", a.Op, ops(p))
				}
			}
		})
	}
}

// hold_failures: the reaper holds its role's first failures itself (the
// worst first, within hold_failures and max_held), and a replacement is
// built beside each; a server whose hold ended is not held again (it is
// replaced); nothing is held while the reaper is not armed.
func TestHoldFailures(t *testing.T) {
	cfg := reapertest.Config(t, func(c *reaper.Config) {
		c.Roles[0].HoldFailures, c.Roles[0].MaxHeld = 1, ptr(2)
		c.PauseRoleFraction, c.PauseFleetFraction, c.MaxInFlight = 0.9, 0.9, 3
	})
	servers, checks := healthyFleet("web", 3)
	checks = replaceChecks(checks, "web2", crit("web2"))
	checks = replaceChecks(checks, "web3", crit("web3"))
	in := reaper.Input{Now: t0, Config: cfg, Servers: servers, Checks: checks, Armed: true, Memory: reaper.Memory{Critical: longCrit("web2", "web3")}}
	p := Plan(in)
	if len(p.NewHolds) != 1 {
		t.Fatalf("new holds %+v, want one", p.NewHolds)
	}
	h := p.NewHolds[0]
	if h.Host != "web3" || h.ID != "id-web3" || !h.Auto || h.Until != t0.Add(24*time.Hour) || !strings.Contains(h.Reason, "hold_failures") || h.Check() != nil {
		t.Fatalf("new hold %+v: want web3 (the oldest failing), by the reaper, for the default 24h", h)
	}
	if got := ops(p); !slices.Equal(got, []string{"create web4"}) {
		t.Fatalf("actions %v, want web3's place filled (web2's replacement follows at the count)\nblocked: %q", got, p.Blocked)
	}

	// web3's hold expired: it is not held again; web2, a failure the
	// reaper never held, is.
	in.Holds = map[string]reaperkv.HoldRecord{"web3": {Host: "web3", ID: "id-web3", Role: "web", Reason: "r", By: "reaper", Time: t0.Add(-25 * time.Hour), Until: t0.Add(-time.Hour), Auto: true}}
	p = Plan(in)
	if len(p.NewHolds) != 1 || p.NewHolds[0].Host != "web2" {
		t.Fatalf("new holds %+v, want web2 only (web3 was held once)", p.NewHolds)
	}
	if v := roleView(t, p, "web"); len(v.Held) != 1 || v.Held[0].Host != "web2" {
		t.Fatalf("held %+v, want web2 only", v.Held)
	}

	in.Holds, in.Armed = nil, false
	if p = Plan(in); len(p.NewHolds) != 0 {
		t.Fatalf("not armed: new holds %+v, want none", p.NewHolds)
	}
}

// The hold's maintenance: asked for a held node that lacks it or has a
// drain's, never over an operator's own maintenance (left alone), and
// ended on a node no hold keeps. An unreadable record holds nothing and
// is named.
func TestHoldMaintenance(t *testing.T) {
	cfg := reapertest.Config(t)
	servers, checks := failingWeb3()
	opMaint := reaper.Check{Node: "web3", CheckID: reaper.MaintNodeCheck, Status: reaper.CheckCritical, Notes: "kernel upgrade, back at 3"}
	in := reaper.Input{Now: t0, Config: cfg, Servers: servers, Checks: append(checks, opMaint), Armed: true, Memory: reaper.Memory{Critical: longCrit("web3")},
		Holds: map[string]reaperkv.HoldRecord{"web3": holdOn("web3", time.Hour, day)}}
	if p := Plan(in); len(p.HoldMaintain) != 0 || len(p.HoldEnd) != 0 {
		t.Fatalf("operator's maintenance: asked %v, ended %v; want it left alone", p.HoldMaintain, p.HoldEnd)
	}
	in.Checks = append(checks, holdMaint("web1"))
	in.Holds = nil
	in.HoldProblems = map[string]string{"web1": "reaper/hold/web1: not a hold record (`orchestrate hold` writes one): invalid character"}
	p := Plan(in)
	if !slices.Equal(p.HoldEnd, []string{"web1"}) {
		t.Fatalf("ended %v, want web1's hold maintenance ended (its record is garbage)", p.HoldEnd)
	}
	if !strings.Contains(strings.Join(p.Blocked, "\n"), "web1: reaper/hold/web1: not a hold record") {
		t.Fatalf("blocked %q: want the bad record named", p.Blocked)
	}
	// web1 passes under the hold's maintenance: it serves (its checks say
	// so), and is no surplus nor replaced.
	if v := roleView(t, p, "web"); v.Healthy != 2 {
		t.Fatalf("serving %d, want 2 (web1, web2)", v.Healthy)
	}
}

// A refresh never replaces a held server, and one held off its spec does
// not keep the refresh from finishing: web1..web3 are on the spec, web4
// (held) is not, desired 3 without it.
func TestHeldServerAndRefresh(t *testing.T) {
	in := refreshWorld(t, request(nil), 3, configured, func(c *reaper.Config) { c.Roles[0].Desired = 3 })
	in.Holds = map[string]reaperkv.HoldRecord{"web4": holdOn("web4", time.Hour, day)}
	p := Plan(in)
	if r := replaced(p); len(r) != 0 || len(p.Actions) != 0 {
		t.Fatalf("replaced %v, actions %v: want none\nblocked: %q", r, ops(p), p.Blocked)
	}
	if len(p.Refreshes) != 1 || !p.Refreshes[0].Remove {
		t.Fatalf("refresh writes %+v: want the request done and removed", p.Refreshes)
	}
	// Without the hold web4 is the refresh's to replace.
	in.Holds = nil
	in.Config.Roles[0].Desired = 4
	if r := replaced(Plan(in)); len(r) != 1 || r[0] != "web4" {
		t.Fatalf("without the hold: replaced %v, want [web4]", r)
	}
}

// The partition pause judges the servers the reaper may act on: held
// ones are no evidence either way (an operator chose them), and never
// dilute the share of the rest that looks unhealthy. web1 serves, web2
// and web3 fail, web4 and web5 are held: two of three look unhealthy.
func TestHeldServersAndThePause(t *testing.T) {
	cfg := reapertest.Config(t, func(c *reaper.Config) { c.Roles[0].MaxHeld = ptr(2); c.Roles[0].Desired = 3 })
	servers, checks := healthyFleet("web", 5)
	for _, n := range []string{"web2", "web3", "web4", "web5"} {
		checks = replaceChecks(checks, n, crit(n))
	}
	in := reaper.Input{Now: t0, Config: cfg, Servers: servers, Checks: checks, Armed: true, Memory: reaper.Memory{Critical: longCrit("web2", "web3", "web4", "web5")},
		Holds: map[string]reaperkv.HoldRecord{"web4": holdOn("web4", time.Hour, day), "web5": holdOn("web5", time.Hour, day)}}
	p := Plan(in)
	if !p.Paused || !strings.Contains(p.PauseReason, "2 of 3 servers") {
		t.Fatalf("paused %v (%s): want 2 of 3 unheld servers judged", p.Paused, p.PauseReason)
	}
	if len(roleView(t, p, "web").Held) != 2 {
		t.Fatalf("held %+v", roleView(t, p, "web").Held)
	}
}
