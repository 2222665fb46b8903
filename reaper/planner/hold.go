package planner

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/reaper"
)

// Holds (reaperkv.HoldRecord): a held server is its role's in no count.
// It leaves the role's free servers before anything counts them, so its
// replacement is built and it is never a victim (scale-in, replacement,
// max-age retirement, refresh, repair); its state is StateHeld, which
// does not serve. What its checks say is still classified (and
// remembered), so once the hold ends it is judged at once, as any server.

// heldServer is one server a hold is honoured for this plan.
type heldServer struct {
	server *reaper.Server
	record reaperkv.HoldRecord
}

// honourHolds honours the active hold records of each role's servers,
// oldest first, up to the role's max_held. A record of a later server of
// the same name, one dated further ahead than MaxHoldSkew, one beyond the
// cap, or one that would take the role's last serving server out of
// service (or go below min_healthy) holds nothing, and is named in the
// plan. Records that cannot be read are named too.
func (pl *planner) honourHolds(roles []*roleServers) {
	now := pl.in.Now
	for _, host := range sortedHosts(pl.in.HoldProblems) {
		pl.block(planStep{op: reaperkv.PlanHold, host: host}, held(reaperkv.HoldProblem, "%s", pl.in.HoldProblems[host]),
			"%s: %s; it holds nothing (`orchestrate hold release %s`, or `orchestrate hold` again, writes a good one)", host, pl.in.HoldProblems[host], host)
	}
	for _, rs := range roles {
		var want []*reaper.Server
		for _, s := range rs.all {
			rec, ok := pl.holdOf(s)
			if !ok || !rec.Active(now) {
				continue
			}
			if rec.Time.After(now.Add(reaperkv.MaxHoldSkew)) {
				pl.block(planStep{op: reaperkv.PlanHold, role: rs.role.Name, host: s.Name, reason: rec.Reason}, held(reaperkv.HoldProblem, "dated %s ahead of the reaper's clock", rec.Time.Sub(now).Round(time.Second)),
					"%s: hold of %s not honoured: it is dated %s, %s ahead of the reaper's clock (a clock that far off, or a record not written now)", rs.role.Name, s.Name, rec.Time.UTC().Format(time.RFC3339), rec.Time.Sub(now).Round(time.Second))
				continue
			}
			want = append(want, s)
		}
		sort.SliceStable(want, func(i, j int) bool {
			a, b := pl.in.Holds[want[i].Name], pl.in.Holds[want[j].Name]
			return a.Time.Before(b.Time) || (a.Time.Equal(b.Time) && want[i].Name < want[j].Name)
		})
		for _, s := range want {
			rec := pl.in.Holds[s.Name]
			if n := len(rs.held); n >= rs.role.HeldCap() {
				pl.block(planStep{op: reaperkv.PlanHold, role: rs.role.Name, host: s.Name, reason: rec.Reason}, held(reaperkv.HoldMaxHeld, "the role holds %d of its max_held %d", n, rs.role.HeldCap()),
					"%s: hold of %s not honoured: the role holds %d of its max_held %d%s", rs.role.Name, s.Name, n, rs.role.HeldCap(), prefixed(": ", heldNames(rs.held)))
				continue
			}
			if why := pl.holdTakesService(rs, s); why.holds() {
				pl.block(planStep{op: reaperkv.PlanHold, role: rs.role.Name, host: s.Name, reason: rec.Reason}, why, "%s: hold of %s waits: %s", rs.role.Name, s.Name, why)
				continue
			}
			pl.holdServer(rs, s, rec)
		}
	}
}

// holdOf is server s's hold record: one of its name whose ID, when it
// names one, is s's.
func (pl *planner) holdOf(s *reaper.Server) (reaperkv.HoldRecord, bool) {
	rec, ok := pl.in.Holds[s.Name]
	if !ok || (rec.ID != "" && rec.ID != s.ID) {
		return reaperkv.HoldRecord{}, false
	}
	return rec, true
}

// holdTakesService says why holding s now would make the role's service
// worse, or "": a server that serves leaves service when held, so it may
// not be the role's last serving server, nor take it below min_healthy.
// One that does not serve (the usual case: a failure) may always be held.
func (pl *planner) holdTakesService(rs *roleServers, s *reaper.Server) hold {
	if !pl.serves(rs, s) {
		return hold{}
	}
	n := pl.servingCount(rs)
	if pl.inEntry[s.ID] != reaper.StateDeleting && !pl.hookHeld[s.ID] {
		n-- // servingCount counted it
	}
	switch {
	case n < 1:
		return held(reaperkv.HoldLastHealthy, "it is the role's last serving server (a hold takes it out of service)")
	case n < rs.role.MinHealthy:
		return held(reaperkv.HoldMinHealthy, "holding it, which takes it out of service, would leave the role %d serving, below min_healthy %d", n, rs.role.MinHealthy)
	}
	return hold{}
}

// holdServer makes s held for this plan: its state, out of the free servers,
// and its node's maintenance asked when it lacks it.
func (pl *planner) holdServer(rs *roleServers, s *reaper.Server, rec reaperkv.HoldRecord) {
	pl.statesOf[s.ID] = reaper.StateHeld
	pl.heldIDs[s.ID] = true
	rs.held = append(rs.held, heldServer{server: s, record: rec})
	rs.free = slices.DeleteFunc(rs.free, func(f *reaper.Server) bool { return f.ID == s.ID })
	if _, node := pl.byNode[s.Name]; node && !pl.holdMaintained(s.Name) && !pl.operatorMaintenance(s.Name) {
		pl.plan.HoldMaintain = append(pl.plan.HoldMaintain, rec)
	}
}

// holdFailures, for a role with hold_failures, holds its failing servers
// (suspect or unhealthy: those balance would replace for their health)
// instead of replacing them, worst first, while fewer than hold_failures
// of its holds are the reaper's own and the role is under max_held. A
// server that ever had a hold record (expired, released) is not held
// again. Holding takes a server out of service and builds a replacement:
// it waits while the reaper is not armed, is paused, or doubts the
// role's part of the Nova list.
func (pl *planner) holdFailures(roles []*roleServers) {
	for _, rs := range roles {
		r := rs.role
		if r.HoldFailures == 0 {
			continue
		}
		auto := 0
		for _, h := range rs.held {
			if h.record.Auto {
				auto++
			}
		}
		for _, s := range pl.worstFirst(rs.free) {
			st := pl.statesOf[s.ID]
			if st != reaper.StateSuspect && st != reaper.StateUnhealthy {
				continue
			}
			if _, ok := pl.in.Holds[s.Name]; ok {
				continue // held before: judged as any server now
			}
			if auto >= r.HoldFailures || len(rs.held) >= r.HeldCap() {
				break
			}
			if why := pl.gate(rs, need{armed: true, unpaused: true}); why.holds() {
				pl.block(planStep{op: reaperkv.PlanHold, role: r.Name, host: s.Name, reason: "hold_failures: " + string(st)}, why, "%s: hold_failures: hold of %s waits: %s", r.Name, s.Name, why)
				break
			}
			rec := reaperkv.HoldRecord{Host: s.Name, ID: s.ID, Role: r.Name, Reason: fmt.Sprintf("%s (%s)", r.HoldReason, st),
				By: "reaper", Time: pl.in.Now.UTC(), Until: pl.in.Now.Add(r.AutoHoldFor()).UTC(), Auto: true}
			pl.plan.NewHolds = append(pl.plan.NewHolds, rec)
			pl.holdServer(rs, s, rec)
			auto++
		}
	}
}

// endHoldMaintenance asks the end of every hold maintenance (a node
// maintenance check whose notes start with HoldNotesPrefix) that no
// honoured hold keeps: the hold was released or expired, went over the
// cap, or its record was removed by hand.
func (pl *planner) endHoldMaintenance() {
	kept := map[string]bool{}
	for id := range pl.heldIDs {
		kept[pl.byID[id].Name] = true
	}
	var end []string
	for node := range pl.byNode {
		if pl.holdMaintained(node) && !kept[node] {
			end = append(end, node)
		}
	}
	sort.Strings(end)
	pl.plan.HoldEnd = end
}

// holdMaintained: node has the maintenance check a hold puts on it.
func (sn *snapshot) holdMaintained(node string) bool {
	for _, c := range sn.byNode[node] {
		if c.CheckID == reaper.MaintNodeCheck && isHoldMaintenance(c) {
			return true
		}
	}
	return false
}

// operatorMaintenance: node is in a maintenance that is neither the
// reaper's (a drain's, whose notes start with "reaper:") nor a hold's:
// the operator's, left alone.
func (sn *snapshot) operatorMaintenance(node string) bool {
	for _, c := range sn.byNode[node] {
		if c.CheckID == reaper.MaintNodeCheck && !isHoldMaintenance(c) && !strings.HasPrefix(c.Notes, "reaper:") {
			return true
		}
	}
	return false
}

// isHoldMaintenance: c is the node maintenance check of a hold.
func isHoldMaintenance(c reaper.Check) bool {
	return c.CheckID == reaper.MaintNodeCheck && strings.HasPrefix(c.Notes, reaperkv.HoldNotesPrefix)
}

// keepHeld stops what an entry would do to its held old server: a drain,
// a terminate hook or a delete Nova has not accepted is ended as a
// restore (the server stays, and the hold's maintenance follows), a
// repair ladder ends. It reports whether it took the entry's step.
func (pl *planner) keepHeld(e *reaper.Entry, next reaper.Entry, oldS *reaper.Server) bool {
	if oldS == nil || !pl.heldIDs[oldS.ID] {
		return false
	}
	switch e.Phase {
	case reaperkv.PhaseDraining, reaperkv.PhaseTerminateHook:
		pl.add(reaper.OpRestore, next, oldS.Name+" is held for a human: kept")
		return true
	case reaperkv.PhaseDeleting:
		if !e.DeleteAsked.IsZero() {
			return false // Nova accepted the delete: it is going
		}
		pl.add(reaper.OpRestore, next, oldS.Name+" is held for a human: kept")
		return true
	case reaperkv.PhaseRepairRerun, reaperkv.PhaseRepairReboot, reaperkv.PhaseRepairRebuild:
		next.Repair = e.Repair.Clone()
		if next.Repair == nil || next.Repair.Step == "" {
			next.Repair = &reaperkv.RepairState{Step: stepOf(e.Phase), Since: e.Updated, Until: e.Updated}
		}
		pl.endRepair(next, reaperkv.RepairAbandoned, oldS.Name+" is held for a human: its repair ends")
		return true
	}
	return false
}

// heldView is the role's honoured holds, for its report.
func heldView(rs *roleServers) []reaperkv.HoldRecord {
	out := make([]reaperkv.HoldRecord, 0, len(rs.held))
	for _, h := range rs.held {
		out = append(out, h.record)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Host < out[j].Host })
	return out
}

// heldNames lists held servers' names, for a message.
func heldNames(held []heldServer) string {
	names := make([]string, len(held))
	for i, h := range held {
		names[i] = h.server.Name
	}
	return strings.Join(names, ", ")
}
