package planner

import (
	"fmt"
	"time"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/reaper"
)

// need is what a step asks of the gate: which safety rules apply to it.
type need struct {
	// armed: the step destroys something; nothing is destroyed while the
	// reaper is disarmed, nor while the role's part of the Nova list is in
	// doubt.
	armed bool
	// unpaused: the step waits while the partition pause holds.
	unpaused bool
	// create: the step creates a server; it waits for the quota backoff,
	// the role's own backoff, and while Nova lists partial records.
	create bool
	// claim: the step claims a standby of the role's warm pool in place
	// of a create: it adds a member as a create does (so it waits while
	// Nova lists partial records) but needs no quota.
	claim bool
	// pool: the step creates a standby; it waits for the warm pools'
	// own backoff too.
	pool bool
	// budget: the step spends one of max_actions_per_hour.
	budget bool
	// victim: the step takes this server out of its role; if it serves,
	// the role must keep a serving server and min_healthy. A server in an
	// unknown state is never a victim.
	victim *reaper.Server
}

// hold is why a step may not start now: the rule, as data, and in words.
// The zero hold lets the step start.
type hold struct {
	why  reaperkv.HoldWhy
	text string
}

// holds says whether the step is held back.
func (h hold) holds() bool { return h.why != "" }

// String is the hold in words.
func (h hold) String() string { return h.text }

// held is a hold for why, in the words of format.
func held(why reaperkv.HoldWhy, format string, args ...any) hold {
	return hold{why: why, text: fmt.Sprintf(format, args...)}
}

// gate says why a step with these needs may not start now, or the zero
// hold when it may. Every step of the planner asks it, so each safety
// rule is written once.
func (pl *planner) gate(rs *roleServers, n need) hold {
	if h := pl.gateRun(rs, n); h.holds() {
		return h
	}
	if n.victim != nil && pl.serves(rs, n.victim) {
		h := pl.servingCount(rs)
		if h <= 1 {
			return held(reaperkv.HoldLastHealthy, "it is the role's last healthy server")
		}
		if h-1 < rs.role.MinHealthy {
			return held(reaperkv.HoldMinHealthy, "the role would go below min_healthy %d", rs.role.MinHealthy)
		}
	}
	return hold{}
}

// gateRun is the gate's rules about the reaper's run, the cloud and the
// budgets (the victim's role's floors aside).
func (pl *planner) gateRun(rs *roleServers, n need) hold {
	switch {
	case n.armed && !pl.plan.Armed:
		return held(reaperkv.HoldDisarmed, "not armed")
	case n.unpaused && pl.plan.Paused:
		return held(reaperkv.HoldPaused, "paused") // the reason is in the plan, once
	case n.armed && rs.doubt != "":
		return held(reaperkv.HoldInDoubt, "%s", rs.doubt)
	case pl.unknown(n.victim) != "":
		return held(reaperkv.HoldUnknownState, "%s", pl.unknown(n.victim))
	case n.create && pl.backedOff(rs.role.Name):
		return held(reaperkv.HoldBackoff, "the create backoff holds (quota, capacity or a failed create)")
	case (n.create || n.claim) && pl.in.Now.Before(pl.in.LaunchBackoff[rs.role.Name]):
		return held(reaperkv.HoldLaunchBackoff, "a launch of the role was abandoned by its on_launch hook: creates and claims wait until %s", pl.in.LaunchBackoff[rs.role.Name].UTC().Format(time.RFC3339))
	case n.create && pl.zonesClosed(rs) != "":
		return held(reaperkv.HoldCapacity, "%s", pl.zonesClosed(rs))
	case n.create && pl.in.ServerGroupProblems[rs.role.Name] != "":
		return held(reaperkv.HoldCapacity, "the role's server group record cannot be read: %s", pl.in.ServerGroupProblems[rs.role.Name])
	case n.pool && pl.in.Now.Before(pl.in.PoolBackoffUntil):
		return held(reaperkv.HoldBackoff, "the warm pool's backoff holds (a quota or capacity error)")
	case (n.create || n.claim) && pl.plan.Partial > 0:
		// A partial record may be a server of this role whose node is
		// not in sight either (a blip, a new leader with no memory of
		// the list): a create could double the role, reuse its name.
		return held(reaperkv.HoldPartialList, "Nova listed %d partial record(s): whose they are is unknown", pl.plan.Partial)
	case (n.create || n.pool) && pl.creates >= pl.in.Config.MaxCreatesPerCycle:
		return held(reaperkv.HoldBudgetCycle, "max_creates_per_cycle (%d) reached: the rest in the next cycles", pl.in.Config.MaxCreatesPerCycle)
	case n.budget && pl.budget <= 0:
		return held(reaperkv.HoldBudgetHour, "max_actions_per_hour (%d) reached", pl.in.Config.MaxActionsPerHour)
	}
	return hold{}
}

// serves says whether s is in service: its state serves (its role's own
// checks pass) and, in a role whose servers report validation, it reports
// validation success for the current version. A replacement finishes, and
// min_healthy counts, by this rule.
func (pl *planner) serves(rs *roleServers, s *reaper.Server) bool {
	return pl.statesOf[s.ID].Serving() && (!rs.validating || pl.in.Validated[s.Name])
}

// backedOff: no creates for role now (quota, or the role's own backoff).
func (pl *planner) backedOff(role string) bool {
	return pl.backoff || pl.in.Now.Before(pl.in.RoleBackoff[role])
}

// servingCount counts the role's serving servers not on their way out,
// nor held by their on_launch hook.
func (pl *planner) servingCount(rs *roleServers) int {
	n := 0
	for _, s := range rs.all {
		if pl.serves(rs, s) && pl.inEntry[s.ID] != reaper.StateDeleting && !pl.hookHeld[s.ID] {
			n++
		}
	}
	return n
}

// unknown says why s, in a state the reaper does not know, is not acted
// on; "" for a known state or no server.
func (pl *planner) unknown(s *reaper.Server) string {
	if s == nil || pl.statesOf[s.ID] != reaper.StateUnknown {
		return ""
	}
	return fmt.Sprintf("Nova reports %s in status %q: a server in an unknown state is never acted on", s.Name, s.Status)
}
