package planner

import (
	"fmt"
	"slices"
	"time"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/reaper"
)

// Repair before replace (reaper/repair.go). A server that balance would
// replace for its health (unhealthy, in Nova ERROR, unaccounted) in a role
// with a repair ladder gets a journal entry of kind repair instead: one
// phase per step, each with its start and the end of its grace
// journalled, each begun through the gate (armed, not paused, the hourly
// budget for a reboot or a rebuild, max_in_flight as a replacement). A
// step's cloud call is made once per entry, when the step begins: a new
// leader that finds the phase never asks again. The entry finishes when
// the server serves again; it moves to the next step when the grace ends
// (or Nova refused the call, or the server went to ERROR); after the last
// it becomes the server's replacement, as balance would have made it.

// repairMemory: a server that needs a repair again less than this long
// after a step repaired it starts its ladder at the step after that one:
// a server that flaps is not rebooted every few minutes (one a cycle is
// bounded by the budget, but it would spend it).
const repairMemory = time.Hour

// repairableState: the states a ladder starts from. A suspect server is
// replaced at once (its Puppet failed: nothing of the ladder mends that);
// an expired or drifted one serves, and is retired, not repaired.
func repairableState(st reaper.ServerState) bool {
	return st == reaper.StateUnhealthy || st == reaper.StateError || st == reaper.StateUnaccounted
}

// ladderStart is the first step of s's ladder that can help it, with the
// steps passed over; "" when s is replaced at once.
func (pl *planner) ladderStart(rs *roleServers, s *reaper.Server) (string, []reaperkv.RepairStep) {
	if len(rs.role.Repair) == 0 || !repairableState(pl.statesOf[s.ID]) || pl.in.Suspect[s.Name] {
		return "", nil
	}
	after := ""
	var passed []reaperkv.RepairStep
	if m, ok := pl.plan.Memory.LastRepair[s.ID]; ok && slices.Contains(rs.role.Repair, m.Step) {
		after = m.Step
		passed = append(passed, reaperkv.RepairStep{Step: m.Step, Since: m.At, Until: pl.in.Now, Result: reaperkv.RepairSkipped,
			Why: fmt.Sprintf("a ladder reached it for %s at %s, less than %s ago: this one goes on after it", s.Name, m.At.UTC().Format(time.RFC3339), repairMemory)})
	}
	step, more := pl.nextStep(rs, s, after)
	return step, append(passed, more...)
}

// nextStep is the step of the role's ladder after after ("" for the
// first) that can help s, with those passed over.
func (pl *planner) nextStep(rs *roleServers, s *reaper.Server, after string) (string, []reaperkv.RepairStep) {
	var passed []reaperkv.RepairStep
	for step := rs.role.NextRepair(after); step != ""; step = rs.role.NextRepair(step) {
		why := pl.cannotRepair(rs, s, step)
		if why == "" {
			return step, passed
		}
		passed = append(passed, reaperkv.RepairStep{Step: step, Since: pl.in.Now, Until: pl.in.Now, Result: reaperkv.RepairSkipped, Why: why})
	}
	return "", passed
}

// cannotRepair says why step cannot help s, or "". A rerun needs the
// node's own agent, alive, to run its repair watch; a reboot or a rebuild
// is for a machine whose node does not pass (one in Nova ERROR whose node
// passes is replaced, surge, as before); a rebuild from the role's image
// needs a server built from the role's boot spec (one built from another
// would get the new image with its old user data: it is replaced, on the
// spec, instead).
func (pl *planner) cannotRepair(rs *roleServers, s *reaper.Server, step string) string {
	if step != reaper.RepairRerun && pl.nodeLives(rs, s.Name) {
		// In Nova ERROR past error_grace, its node passing: a reboot or
		// a rebuild would take a serving machine down, where the surge
		// replacement keeps it serving until its replacement does.
		return "its node passes its checks: a " + step + " would take a serving machine down"
	}
	switch step {
	case reaper.RepairRerun:
		switch st := pl.statesOf[s.ID]; {
		case s.Status == reaper.StatusError:
			return "Nova reports it in ERROR: a Puppet run on it cannot mend the machine"
		case st != reaper.StateUnhealthy:
			return "no Consul node of it checks in: nothing runs its repair watch"
		case pl.agentDown(s.Name):
			return "its agent is down (serfHealth critical): nothing runs its repair watch"
		}
	case reaper.RepairRebuild:
		if spec := pl.refresh[rs.role.Name].spec; s.Metadata[reaper.MetaSpec] != spec {
			return fmt.Sprintf("it is not built from the role's boot spec %.12s: a rebuild from its image would keep the old user data; the replacement is built on the spec", spec)
		}
	}
	return ""
}

// agentDown: the node's agent failed Consul's serfHealth check.
func (pl *planner) agentDown(node string) bool {
	for _, c := range pl.byNode[node] {
		if c.CheckID == "serfHealth" && c.Status == reaper.CheckCritical {
			return true
		}
	}
	return false
}

// startRepair begins s's ladder at step, in place of its replacement.
// False when the gate holds it (nothing else of the role is replaced this
// cycle, as for a replacement).
func (pl *planner) startRepair(rs *roleServers, s *reaper.Server, step string, passed []reaperkv.RepairStep) bool {
	st := pl.statesOf[s.ID]
	if why := pl.gate(rs, need{armed: true, unpaused: true, budget: step != reaper.RepairRerun, victim: s}); why.holds() {
		pl.block(planStep{op: reaperkv.PlanRepair, role: rs.role.Name, host: s.Name, reason: string(st) + ": " + step}, why,
			"%s: repair of %s (%s) by %s waits: %s", rs.role.Name, s.Name, st, step, why)
		return false
	}
	e := pl.newEntry(rs.role, reaperkv.KindRepair, string(st))
	e.OldName, e.OldID = s.Name, s.ID
	e.Repair = &reaperkv.RepairState{Tried: passed}
	pl.beginStep(rs, &e, s, step, nil, fmt.Sprintf("%s is %s", s.Name, st))
	return true
}

// beginStep journals step as entry e's phase (OpRepair), spending one of
// the hourly budget for a reboot or a rebuild; ended are the steps whose
// end the action records.
func (pl *planner) beginStep(rs *roleServers, e *reaper.Entry, s *reaper.Server, step string, ended []reaperkv.RepairStep, why string) {
	grace := rs.role.RepairGraceOf(step)
	rp := e.Repair
	rp.Step, rp.Since, rp.Until = step, pl.in.Now, pl.in.Now.Add(grace)
	rp.Asked, rp.Result, rp.Error, rp.Image, rp.Status = time.Time{}, "", "", "", s.Status
	e.Phase = reaperkv.RepairPhase(step)
	if step != reaper.RepairRerun {
		pl.budget--
	}
	pl.inEntry[s.ID] = reaper.StateRepairing
	what := map[string]string{
		reaper.RepairRerun:   "its own repair watch re-runs converge",
		reaper.RepairReboot:  "hard reboot through Nova",
		reaper.RepairRebuild: "rebuild from the role's image through Nova",
	}[step]
	pl.plan.Actions = append(pl.plan.Actions, reaper.Action{Op: reaper.OpRepair, Entry: *e, Ended: ended,
		Reason: fmt.Sprintf("%s: %s %s (%s); it has until %s to serve again", why, step, s.Name, what, rp.Until.UTC().Format(time.RFC3339))})
}

// advanceRepair moves a repair entry on: finished once its server serves
// again, on to the next step (or the replacement) once the step's grace
// is over, Nova refused it or the server went to ERROR, at once when the
// server turned out suspect.
func (pl *planner) advanceRepair(rs *roleServers, e *reaper.Entry, next reaper.Entry, s *reaper.Server) {
	next.Repair = e.Repair.Clone()
	if next.Repair == nil || next.Repair.Step == "" {
		// Written by hand, or cut: the step is taken as over.
		next.Repair = &reaperkv.RepairState{Step: stepOf(e.Phase), Since: e.Updated, Until: e.Updated}
	}
	rp := next.Repair
	if s != nil && pl.count(rs) > pl.desired(rs.role) && !pl.serves(rs, s) {
		// The role is over its count: its scale-in takes this server
		// first (scaleInRepairing), not a serving one.
		rs.repairing = append(rs.repairing, e)
		return
	}
	switch {
	case s == nil && pl.nodeLives(rs, e.OldName):
		pl.block(entryStep(e, reaperkv.PlanRepair, e.OldName), held(reaperkv.HoldInDoubt, "%s is missing from the Nova list but its Consul node passes its checks: the list may be incomplete", e.OldName),
			"%s: %s is missing from the Nova list but its Consul node passes its checks: the list may be incomplete; its repair waits", e.ID, e.OldName)
	case s == nil:
		pl.endRepair(next, reaperkv.RepairAbandoned, e.OldName+" is gone from the Nova list; the role is judged afresh")
	case pl.unknown(s) != "":
		pl.block(entryStep(e, reaperkv.PlanRepair, e.OldName), held(reaperkv.HoldUnknownState, "%s", pl.unknown(s)), "%s: %s waits: %s", e.ID, rp.Step, pl.unknown(s))
	case pl.serves(rs, s) && s.Status == reaper.StatusActive:
		pl.plan.Memory.LastRepair[s.ID] = reaper.RepairMark{Step: rp.Step, At: pl.in.Now}
		pl.endRepair(next, reaperkv.RepairRepaired, fmt.Sprintf("%s serves again: repaired by %s", s.Name, rp.Step))
	case pl.in.Suspect[s.Name]:
		pl.escalate(rs, e, next, s, reaperkv.RepairAbandoned, s.Name+" is suspect (its consistent run failed): no repair mends that, it is replaced")
	case rp.Result == reaperkv.RepairRefused:
		pl.escalate(rs, e, next, s, reaperkv.RepairRefused, fmt.Sprintf("Nova refused the %s of %s: %s", rp.Step, s.Name, rp.Error))
	case s.Status == reaper.StatusError && rp.Step != reaper.RepairRerun && rp.Status != reaper.StatusError:
		pl.escalate(rs, e, next, s, reaperkv.RepairFailed, fmt.Sprintf("%s went to ERROR after its %s (%s)", s.Name, rp.Step, orNone(s.Fault)))
	case pl.in.Now.Before(pl.repairEnd(rp)):
		// The step goes on: nothing to do (the journal line says until when).
	default:
		pl.escalate(rs, e, next, s, reaperkv.RepairFailed, fmt.Sprintf("%s does not serve %s after its %s began", s.Name, pl.in.Now.Sub(rp.Since).Round(time.Second), rp.Step))
	}
}

// repairEnd is when step rp's grace ends: its journalled end, moved on
// by the partition pause as every grace is (health seen during one says
// nothing of a machine).
func (pl *planner) repairEnd(rp *reaperkv.RepairState) time.Time {
	if p := pl.in.Memory.Partitioned; p.After(rp.Since) {
		return p.Add(rp.Until.Sub(rp.Since))
	}
	return rp.Until
}

// endRepair finishes a repair entry: its server serves again, or is gone.
func (pl *planner) endRepair(next reaper.Entry, result, why string) {
	rp := next.Repair
	ended := reaperkv.RepairStep{Step: rp.Step, Since: rp.Since, Until: pl.in.Now, Result: result, Why: why}
	rp.Tried, rp.Step = append(rp.Tried, ended), ""
	pl.plan.Actions = append(pl.plan.Actions, reaper.Action{Op: reaper.OpFinish, Entry: next, Reason: why, Ended: []reaperkv.RepairStep{ended}})
}

// escalate ends the current step with result and begins the next one
// that can help s, through the gate; after the last (or for a suspect
// server at once) the entry becomes s's replacement, as balance would
// have made it.
func (pl *planner) escalate(rs *roleServers, e *reaper.Entry, next reaper.Entry, s *reaper.Server, result, why string) {
	rp := next.Repair
	ended := reaperkv.RepairStep{Step: rp.Step, Since: rp.Since, Until: pl.in.Now, Result: result, Why: why}
	rp.Tried, rp.Step = append(rp.Tried, ended), ""
	step, passed := "", []reaperkv.RepairStep(nil)
	if !pl.in.Suspect[s.Name] {
		step, passed = pl.nextStep(rs, s, ended.Step)
	}
	rp.Tried = append(rp.Tried, passed...)
	if step == "" {
		if pl.replaceAs(rs, s, reaper.ServerState(e.Reason), &next, []reaperkv.RepairStep{ended}, why+"; the repair ladder is over") && len(rs.role.Repair) > 0 {
			// Should the replacement's create fail and its entry go, the
			// server is replaced again, not given a second ladder.
			pl.plan.Memory.LastRepair[s.ID] = reaper.RepairMark{Step: rs.role.Repair[len(rs.role.Repair)-1], At: pl.in.Now}
		}
		return
	}
	if gate := pl.gate(rs, need{armed: true, unpaused: true, budget: true, victim: s}); gate.holds() {
		pl.block(entryStep(e, reaperkv.PlanRepair, e.OldName), gate, "%s: %s; its %s waits: %s", e.ID, why, step, gate)
		return
	}
	pl.beginStep(rs, &next, s, step, []reaperkv.RepairStep{ended}, why)
}

// stepOf is the repair step of phase p ("" for none).
func stepOf(p reaperkv.Phase) string {
	for _, step := range reaperkv.RepairLadder {
		if reaperkv.RepairPhase(step) == p {
			return step
		}
	}
	return ""
}

func orNone(fault string) string {
	if fault == "" {
		return "no fault given"
	}
	return fault
}

// scaleInRepairing drains, for the role's scale-in, the servers its
// repair ladders hold (they do not serve: they go before any server that
// does), each entry becoming the delete of its server; it returns the
// surplus left, and false when the gate held one (nothing else of the role
// is scaled in then). Their entries count in flight already.
func (pl *planner) scaleInRepairing(rs *roleServers, count, want, surplus int) (int, bool) {
	for _, e := range rs.repairing {
		if surplus == 0 {
			break
		}
		s := pl.byID[e.OldID]
		if why := pl.gate(rs, need{armed: true, unpaused: true, budget: true, victim: s}); why.holds() {
			pl.block(planStep{op: reaperkv.PlanScaleIn, role: rs.role.Name, host: e.OldName, reason: fmt.Sprintf("surplus: %d over desired %d", count-want, want)}, why,
				"%s: scale in of %s (in its repair ladder) waits: %s", rs.role.Name, e.OldName, why)
			return surplus, false
		}
		next := *e
		next.Updated, next.Repair = pl.in.Now, e.Repair.Clone()
		why := fmt.Sprintf("surplus (%s, in its repair ladder): %d over desired %d", pl.statesOf[s.ID], count-want, want)
		var ended []reaperkv.RepairStep
		if rp := next.Repair; rp != nil && rp.Step != "" {
			ended = append(ended, reaperkv.RepairStep{Step: rp.Step, Since: rp.Since, Until: pl.in.Now, Result: reaperkv.RepairAbandoned, Why: "the role is over its desired count: scaled in"})
			rp.Tried, rp.Step = append(rp.Tried, ended...), ""
		}
		next.Kind, next.Phase, next.Reason, next.Abortable = reaperkv.KindDelete, reaperkv.PhaseDraining, why, false
		pl.startDrain(&next, s)
		pl.addEnded(reaper.OpDrain, next, why, ended)
		surplus--
	}
	return surplus, true
}
