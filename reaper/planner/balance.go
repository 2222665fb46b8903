package planner

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/reaper"
)

// balance brings a role to its desired count (scale out, scale in) and, at
// the count, replaces bad servers, then expired ones.
func (pl *planner) balance(rs *roleServers) {
	want := pl.desired(rs.role)
	count := pl.count(rs)
	switch {
	case count < want:
		pl.scaleOut(rs, count, want)
	case count > want:
		pl.scaleIn(rs, count, want)
	default:
		allGood := pl.replaceBad(rs)
		if (allGood && !pl.replaceExpired(rs)) || (!allGood && pl.onlyRefreshing(rs)) {
			pl.replaceDrifted(rs)
		}
	}
}

// onlyRefreshing: the role's only work in flight is its refresh's
// replacements and none of its servers is bad, so the refresh's next
// batch may join them.
func (pl *planner) onlyRefreshing(rs *roleServers) bool {
	if !pl.refresh[rs.role.Name].replacing || len(rs.entries) == 0 {
		return false
	}
	for _, s := range rs.free {
		if pl.statesOf[s.ID].Props().Replace {
			return false
		}
	}
	for _, e := range rs.entries {
		if e.Kind != reaperkv.KindReplace || e.Reason != string(reaper.StateDrifted) {
			return false
		}
	}
	return true
}

// refreshSlots is how many more drifted servers the role's refresh may
// replace now: its batch (see refreshBatch) less those in flight.
func (pl *planner) refreshSlots(rs *roleServers) int {
	return pl.refreshBatch(rs, pl.refresh[rs.role.Name]) - len(rs.entries)
}

// count is the role's members in no entry, plus the entries that bring
// one (creates, replacements, claims); standbys are no members.
func (pl *planner) count(rs *roleServers) int {
	n := len(rs.free)
	for _, e := range rs.entries {
		if e.Kind != reaperkv.KindDelete && !e.Standby {
			n++
		}
	}
	return n
}

// worstFirst sorts servers by their state's rank, then oldest first (then
// by name): the order in which servers are scaled in or replaced. Never
// newest first.
func (pl *planner) worstFirst(servers []*reaper.Server) []*reaper.Server {
	out := append([]*reaper.Server(nil), servers...)
	sort.SliceStable(out, func(i, j int) bool {
		a, b := pl.statesOf[out[i].ID].Props().Rank, pl.statesOf[out[j].ID].Props().Rank
		if a != b {
			return a < b
		}
		if !out[i].Created.Equal(out[j].Created) {
			return out[i].Created.Before(out[j].Created)
		}
		return out[i].Name < out[j].Name // never Nova's list order, which varies
	})
	return out
}

// inFlight counts the role's entries that replace or delete, except those
// whose delete the cloud refuses (backing off) or has not carried out
// within cloud_timeout: a locked server or a stuck delete must not stop
// the role's other replacements.
func (pl *planner) inFlight(rs *roleServers) int {
	n := 0
	for _, e := range rs.entries {
		if e.Kind != reaperkv.KindCreate && !e.Standby && !pl.in.Now.Before(pl.in.DeleteBackoff[e.ID]) && !pl.deleteStalled(*e) {
			n++
		}
	}
	return n
}

// scaleOut creates the servers a role lacks, unless the role's part of
// the Nova list is in doubt.
func (pl *planner) scaleOut(rs *roleServers, count, want int) {
	r := rs.role
	if rs.doubt != "" {
		pl.block(planStep{op: string(reaper.OpCreate), role: r.Name, reason: fmt.Sprintf("%d below desired %d", want-count, want)}, held(reaperkv.HoldInDoubt, "%s", rs.doubt),
			"%s: %d below desired %d, but %s; no create", r.Name, want-count, want, rs.doubt)
		return
	}
	if term := pl.in.Now.Sub(pl.in.TermStart); term < r.AbsentGrace.D() && count > 0 {
		pl.wakeAfter(pl.in.TermStart, r.AbsentGrace.D())
		// Found by the soak: a new leader, a list that left a server out
		// and that server's node briefly gone from the catalog made a
		// second server of the same name.
		pl.block(planStep{op: string(reaper.OpCreate), role: r.Name, reason: fmt.Sprintf("%d below desired %d", want-count, want)},
			held(reaperkv.HoldInDoubt, "this leader began %s ago and remembers no earlier list: a server its lists leave out is absent, not gone, for absent_grace %s", term.Round(time.Second), r.AbsentGrace.D()),
			"%s: %d below desired %d, but this leader began %s ago and remembers no earlier list: a server its lists leave out is absent, not gone, for absent_grace %s; no create", r.Name, want-count, want, term.Round(time.Second), r.AbsentGrace.D())
		return
	}
	for i := count; i < want; i++ {
		standby := pl.readyStandby(rs)
		if why := pl.gate(rs, need{create: standby == nil, claim: standby != nil}); why.holds() {
			pl.block(planStep{op: string(reaper.OpCreate), role: r.Name, reason: fmt.Sprintf("%d below desired %d", want-i, want)}, why,
				"%s: %d below desired %d; creates wait: %s", r.Name, want-i, want, why)
			return
		}
		e := pl.newEntry(r, reaperkv.KindCreate, fmt.Sprintf("%d of desired %d", count, want))
		if standby != nil {
			pl.claim(rs, &e, standby)
			pl.add(reaper.OpClaim, e, e.Reason+": claim standby "+standby.Name)
			continue
		}
		e.Phase, e.NewName = reaperkv.PhaseCreating, pl.freeName(r)
		pl.place(rs, &e)
		pl.add(reaper.OpCreate, e, e.Reason)
	}
}

// scaleIn drains the role's surplus servers, worst first; the gate holds
// it while the role's part of the Nova list is in doubt (a surplus may
// then be an illusion). A server in an unknown state is never picked.
func (pl *planner) scaleIn(rs *roleServers, count, want int) {
	r := rs.role
	flying := pl.inFlight(rs)
	surplus, ok := pl.scaleInRepairing(rs, count, want, count-want)
	if !ok {
		return
	}
	order, skipped := pl.scaleInOrder(rs)
	order, skipped = pl.notCooling(rs, order, skipped)
	order = pl.spreadScaleIn(rs, order)
	if len(order) < surplus && len(skipped) > 0 {
		pl.block(planStep{op: reaperkv.PlanScaleIn, role: r.Name, reason: fmt.Sprintf("%d surplus server(s)", surplus)},
			held(reaperkv.HoldWaiting, "%d that may leave: %s", len(order), strings.Join(skipped, ", ")),
			"%s: %d surplus server(s), %d that may leave: %s", r.Name, surplus, len(order), strings.Join(skipped, ", "))
	}
	for _, v := range order {
		if surplus == 0 {
			return
		}
		if flying >= pl.in.Config.MaxInFlight {
			pl.block(planStep{op: reaperkv.PlanScaleIn, role: r.Name, reason: fmt.Sprintf("%d surplus server(s)", surplus)}, held(reaperkv.HoldInFlight, "max_in_flight %d", pl.in.Config.MaxInFlight),
				"%s: %d surplus server(s) wait: max_in_flight %d", r.Name, surplus, pl.in.Config.MaxInFlight)
			return
		}
		if why := pl.gate(rs, need{armed: true, unpaused: true, budget: true, victim: v}); why.holds() {
			pl.block(planStep{op: reaperkv.PlanScaleIn, role: r.Name, host: v.Name, reason: fmt.Sprintf("surplus: %d over desired %d", count-want, want)}, why,
				"%s: scale in of %s waits: %s", r.Name, v.Name, why)
			return
		}
		why := fmt.Sprintf("surplus (%s): %d over desired %d", pl.statesOf[v.ID], count-want, want)
		if _, ok := pl.in.Scaling.ScaleIn[r.Name][v.Name]; ok {
			why = fmt.Sprintf("named for scale-in: %d over desired %d", count-want, want)
		} else if load, ok := pl.hostLoad[r.Name][v.Name]; ok {
			why = fmt.Sprintf("surplus (%s, load %.4g): %d over desired %d", pl.statesOf[v.ID], load, count-want, want)
		}
		e := pl.newEntry(r, reaperkv.KindDelete, why)
		e.Phase, e.OldName, e.OldID = reaperkv.PhaseDraining, v.Name, v.ID
		e.Abortable = pl.abortable(v)
		pl.startDrain(&e, v)
		pl.add(reaper.OpDrain, e, e.Reason)
		flying++
		surplus--
	}
}

// replaceBad replaces the role's servers whose state says so, worst first.
// It reports whether every server of the role is good and nothing is in
// flight, so an expired one may be replaced.
func (pl *planner) replaceBad(rs *roleServers) bool {
	var bad []*reaper.Server
	for _, s := range rs.free {
		if pl.statesOf[s.ID].Props().Replace {
			bad = append(bad, s)
		}
	}
	flying := pl.inFlight(rs)
	for _, s := range pl.worstFirst(bad) {
		if flying >= pl.in.Config.MaxInFlight {
			pl.block(planStep{op: reaperkv.PlanReplace, role: rs.role.Name, host: s.Name, reason: string(pl.statesOf[s.ID])}, held(reaperkv.HoldInFlight, "max_in_flight %d", pl.in.Config.MaxInFlight),
				"%s: replacement of %s waits: max_in_flight %d", rs.role.Name, s.Name, pl.in.Config.MaxInFlight)
			return false
		}
		// Repair before replace: the role's ladder first, where a step
		// of it can help the server (repair.go).
		if step, passed := pl.ladderStart(rs, s); step != "" {
			if !pl.startRepair(rs, s, step, passed) {
				return false
			}
		} else if !pl.replace(rs, s, pl.statesOf[s.ID]) {
			return false
		}
		flying++
	}
	return len(bad) == 0 && len(rs.entries) == 0
}

// replaceExpired replaces the server furthest past its max age, one at a
// time and only when every server of the role serves. It reports whether
// a server is past its max age (replaced now or waiting): a refresh waits
// for it.
func (pl *planner) replaceExpired(rs *roleServers) bool {
	r := rs.role
	if r.MaxAge == 0 {
		return false
	}
	var oldest *reaper.Server
	var cooling []string
	for _, s := range rs.free {
		if !pl.serves(rs, s) {
			return true
		}
		if pl.statesOf[s.ID] != reaper.StateExpired {
			continue
		}
		if why := pl.coolingWhy(rs, s); why != "" {
			cooling = append(cooling, why)
			continue
		}
		if oldest == nil || expiry(r, s).Before(expiry(r, oldest)) {
			oldest = s
		}
	}
	if oldest == nil && len(cooling) > 0 {
		pl.block(planStep{op: reaperkv.PlanRetire, role: r.Name, reason: string(reaper.StateExpired)}, waiting("%s", strings.Join(cooling, "; ")),
			"%s: max-age retirement waits: %s", r.Name, strings.Join(cooling, "; "))
	}
	if oldest != nil {
		pl.replace(rs, oldest, reaper.StateExpired)
	}
	return oldest != nil || len(cooling) > 0
}

// replaceDrifted, for a role whose refresh replaces (refresh: auto, or
// an operator's request running), replaces the oldest of its servers
// built from another boot spec than the refresh's or with none recorded,
// a batch at a time and only when every server of the role serves: an
// instance refresh that never lowers the role's serving count (surge: the
// new server serves before the old one drains; a standby is claimed only
// if it is on the spec). A checkpoint the role's share on the spec reached
// holds the next batch.
func (pl *planner) replaceDrifted(rs *roleServers) {
	r, rr := rs.role, pl.refresh[rs.role.Name]
	if !rr.replacing {
		if rr.hold != "" && pl.offSpec(rs, rr.spec) > 0 {
			pl.block(planStep{op: reaperkv.PlanRefresh, role: r.Name, reason: string(reaper.StateDrifted)}, held(reaperkv.HoldRefreshHalted, "%s", rr.hold),
				"%s: refresh holds: %s", r.Name, rr.hold)
		}
		return
	}
	var drifted []*reaper.Server
	var cooling []string
	for _, s := range rs.free {
		if !pl.serves(rs, s) {
			return
		}
		if s.Metadata[reaper.MetaSpec] == rr.spec {
			continue
		}
		if why := pl.coolingWhy(rs, s); why != "" {
			cooling = append(cooling, why)
			continue
		}
		drifted = append(drifted, s)
	}
	if len(drifted) == 0 && len(cooling) > 0 {
		pl.block(planStep{op: reaperkv.PlanRefresh, role: r.Name, reason: string(reaper.StateDrifted)}, waiting("%s", strings.Join(cooling, "; ")),
			"%s: refresh waits: %s", r.Name, strings.Join(cooling, "; "))
	}
	if len(drifted) == 0 {
		return
	}
	if why := pl.atCheckpoint(rs, rr); why != "" {
		pl.block(planStep{op: reaperkv.PlanRefresh, role: r.Name, reason: string(reaper.StateDrifted)}, waiting("%s", why), "%s: refresh %s", r.Name, why)
		return
	}
	sort.Slice(drifted, func(i, j int) bool {
		a, b := drifted[i], drifted[j]
		return a.Created.Before(b.Created) || (a.Created.Equal(b.Created) && a.Name < b.Name)
	})
	for i := 0; i < len(drifted) && i < pl.refreshSlots(rs); i++ {
		if !pl.replace(rs, drifted[i], reaper.StateDrifted) {
			return
		}
	}
}

// replace starts replacing s: launch before terminate (surge) creates the
// new server first; delete-first drains s at once. False when the gate
// stopped it.
func (pl *planner) replace(rs *roleServers, s *reaper.Server, why reaper.ServerState) bool {
	return pl.replaceAs(rs, s, why, nil, nil, "")
}

// replaceAs is replace; with from, the replacement is that entry (a
// repair whose ladder is over), whose steps ended are recorded with the
// action, and ladder says why the ladder ended.
func (pl *planner) replaceAs(rs *roleServers, s *reaper.Server, why reaper.ServerState, from *reaper.Entry, ended []reaperkv.RepairStep, ladder string) bool {
	r := rs.role
	n := need{armed: true, unpaused: true, create: true, budget: true}
	var standby *reaper.Server
	if r.ReplaceMode == reaper.ModeDeleteFirst {
		n.victim = s
	} else if standby = pl.readyStandby(rs); standby != nil {
		n.create, n.claim = false, true
	}
	if gate := pl.gate(rs, n); gate.holds() {
		pl.block(planStep{op: reaperkv.PlanReplace, role: r.Name, host: s.Name, reason: string(why)}, gate,
			"%s: replacement of %s (%s) waits: %s%s", r.Name, s.Name, why, gate, prefixed("; ", ladder))
		return false
	}
	var e reaper.Entry
	if from != nil {
		e = *from
		e.Kind, e.Mode = reaperkv.KindReplace, r.ReplaceMode
	} else {
		e = pl.newEntry(r, reaperkv.KindReplace, string(why))
	}
	e.OldName, e.OldID = s.Name, s.ID
	// A max-age retirement or a refresh takes a server that serves: a
	// drain that fails may be aborted. A replacement for health deletes.
	e.Abortable = why == reaper.StateExpired || why == reaper.StateDrifted
	if standby != nil {
		pl.claim(rs, &e, standby)
		pl.inEntry[s.ID] = reaper.StateReplacing
		pl.addEnded(reaper.OpClaim, e, fmt.Sprintf("replace %s (%s): claim standby %s%s", s.Name, why, standby.Name, prefixed(": ", ladder)), ended)
		return true
	}
	e.NewName = pl.freeName(r)
	if r.ReplaceMode != reaper.ModeDeleteFirst || pl.serves(rs, s) {
		// The old server is leaving: its zone is counted without it.
		pl.inEntry[s.ID] = reaper.StateReplacing
	}
	pl.place(rs, &e)
	if r.ReplaceMode == reaper.ModeDeleteFirst {
		e.Phase = reaperkv.PhaseDraining
		pl.startDrain(&e, s)
		pl.addEnded(reaper.OpDrain, e, fmt.Sprintf("%s (delete-first)%s", why, prefixed(": ", ladder)), ended)
		return true
	}
	e.Phase = reaperkv.PhaseCreating
	pl.inEntry[s.ID] = reaper.StateReplacing
	pl.addEnded(reaper.OpCreate, e, fmt.Sprintf("replace %s (%s)%s", s.Name, why, prefixed(": ", ladder)), ended)
	return true
}

// addEnded is add, recording the repair steps the action ends.
func (pl *planner) addEnded(op reaper.Op, e reaper.Entry, reason string, ended []reaperkv.RepairStep) {
	pl.add(op, e, reason)
	pl.plan.Actions[len(pl.plan.Actions)-1].Ended = ended
}

// prefixed is sep+s, or "" for an empty s.
func prefixed(sep, s string) string {
	if s == "" {
		return ""
	}
	return sep + s
}
