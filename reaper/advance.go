package reaper

import "github.com/jiocloud/orchestrate/internal/store"

// advance moves one journal entry forward: each phase's step, asked of the
// gate where it creates or destroys.
func (pl *planner) advance(rs *roleServers, e *Entry) {
	var newS, oldS *Server
	if e.NewID != "" {
		newS = pl.byID[e.NewID]
	} else {
		newS = pl.byJournalID[e.ID]
	}
	if e.OldID != "" {
		oldS = pl.byID[e.OldID]
	}
	next := *e
	next.Updated = pl.in.Now
	switch e.Phase {
	case store.PhaseCreating:
		pl.advanceCreating(rs, e, next, newS, oldS)
	case store.PhaseBooting:
		pl.advanceBooting(rs, e, next, newS, oldS)
	case store.PhaseDraining:
		pl.advanceDraining(rs, e, next, oldS)
	case store.PhaseDeleting:
		pl.add(OpDelete, next, "finish the recorded delete")
	case store.PhaseRollback:
		pl.add(OpRollback, next, "finish the recorded rollback")
	default:
		pl.block("%s: unknown phase %q: left alone", e.ID, e.Phase)
	}
}

// advanceCreating: adopt the server the entry created, give up a surge
// replacement whose old server recovered, or retry the create.
func (pl *planner) advanceCreating(rs *roleServers, e *Entry, next Entry, newS, oldS *Server) {
	surge := e.Kind == store.KindReplace && e.Mode == ModeSurge
	switch {
	case newS != nil:
		next.Phase, next.NewID = store.PhaseBooting, newS.ID
		pl.add(OpAdopt, next, "found the server this entry created")
		return
	case surge && oldS != nil && e.Reason != string(StateExpired) && pl.statesOf[oldS.ID] == StateHealthy:
		pl.add(OpFinish, next, e.OldName+" is healthy again; its replacement is not created")
		return
	}
	if why := pl.gate(rs, need{create: true, unpaused: surge}); why != "" {
		pl.block("%s: create of %s waits: %s", e.ID, e.NewName, why)
		return
	}
	pl.add(OpCreate, next, "retry create recorded in the journal")
}

// advanceBooting: finish when the new server serves (draining the old one
// of a replacement), roll back a new server that failed.
func (pl *planner) advanceBooting(rs *roleServers, e *Entry, next Entry, newS, oldS *Server) {
	switch {
	case newS == nil:
		pl.add(OpFinish, next, "the new server "+e.NewName+" is gone; the role is judged afresh")
	case newS.Status == StatusError:
		next.Phase = store.PhaseRollback
		pl.add(OpRollback, next, "the new server went to ERROR")
	case pl.statesOf[newS.ID].Serving():
		if e.Kind != store.KindReplace || oldS == nil {
			pl.add(OpFinish, next, e.NewName+" checked in passing")
			return
		}
		if why := pl.gate(rs, need{armed: true, unpaused: true, budget: true, victim: oldS}); why != "" {
			pl.block("%s: drain of %s waits: %s", e.ID, e.OldName, why)
			return
		}
		next.Phase = store.PhaseDraining
		pl.startDrain(&next, oldS)
		pl.add(OpDrain, next, e.NewName+" checked in passing; draining "+e.OldName)
	case pl.in.Now.Sub(newS.Created) >= rs.role.BootTimeout.D():
		if e.Kind == store.KindCreate {
			// Left to the rules for unaccounted servers, which need the
			// start gate open.
			pl.add(OpFinish, next, e.NewName+" did not check in within boot_timeout; judged as unaccounted from now on")
			return
		}
		if why := pl.gate(rs, need{unpaused: true}); why != "" {
			pl.block("%s: rollback of %s waits: %s", e.ID, e.NewName, why)
			return
		}
		next.Phase = store.PhaseRollback
		next.Error = "did not check in passing within boot_timeout"
		pl.add(OpRollback, next, e.NewName+" did not check in passing within boot_timeout")
	}
}

// advanceDraining: delete the old server once the drain period is over,
// unless the gate holds it (then it stays in maintenance).
func (pl *planner) advanceDraining(rs *roleServers, e *Entry, next Entry, oldS *Server) {
	if oldS != nil && pl.in.Now.Before(e.DrainUntil) {
		pl.add(OpMaintain, next, "draining")
		return
	}
	if oldS != nil {
		// Disarmed or paused while it drained: destroy nothing.
		if why := pl.gate(rs, need{armed: true, unpaused: true}); why != "" {
			pl.block("%s: delete of %s waits: %s", e.ID, e.OldName, why)
			pl.add(OpMaintain, next, "still draining ("+why+")")
			return
		}
	}
	next.Phase = store.PhaseDeleting
	pl.add(OpDelete, next, "drain period over")
}

// startDrain spends one destructive action on taking s out of its role:
// the entry drains it for the drain period, and later steps of this plan
// (another entry's drain, a scale in) count it as on its way out.
func (pl *planner) startDrain(e *Entry, s *Server) {
	pl.budget--
	e.DrainUntil = pl.in.Now.Add(pl.in.Config.DrainPeriod.D())
	pl.inEntry[s.ID] = StateDeleting
}
