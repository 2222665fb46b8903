package planner

import (
	"fmt"
	"slices"
	"time"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/internal/store/schema"
	"github.com/jiocloud/orchestrate/reaper"
)

// advance moves one journal entry forward: each phase's step, asked of the
// gate where it creates or destroys.
func (pl *planner) advance(rs *roleServers, e *reaper.Entry) {
	var newS, oldS *reaper.Server
	if e.NewID != "" {
		newS = pl.byID[e.NewID]
	} else {
		newS = pl.createdFor(e.ID)
	}
	if e.OldID != "" {
		oldS = pl.byID[e.OldID]
	}
	next := *e
	next.Updated = pl.in.Now
	if pl.keepHeld(e, next, oldS) {
		return
	}
	switch e.Phase {
	case reaperkv.PhaseCreating:
		pl.advanceCreating(rs, e, next, newS, oldS)
	case reaperkv.PhaseBooting:
		if e.Standby {
			pl.advanceStandby(rs, e, next, newS)
			return
		}
		pl.advanceBooting(rs, e, next, newS, oldS)
	case reaperkv.PhaseDraining:
		pl.advanceDraining(rs, e, next, oldS)
	case reaperkv.PhaseDeleting:
		pl.advanceDeleting(rs, e, next, oldS)
	case reaperkv.PhaseAborting:
		pl.finishAbort(rs, e, next)
	case reaperkv.PhaseLaunchHook:
		pl.advanceLaunchHook(rs, e, next, newS, oldS)
	case reaperkv.PhaseTerminateHook:
		pl.advanceTerminateHook(rs, e, next, oldS)
	case reaperkv.PhaseRepairRerun, reaperkv.PhaseRepairReboot, reaperkv.PhaseRepairRebuild:
		pl.advanceRepair(rs, e, next, oldS)
	case reaperkv.PhaseClaiming:
		// The claim was journalled (and the standby's pool record
		// removed with it): its remaining steps are idempotent.
		pl.add(reaper.OpClaim, next, "finish the recorded claim of "+e.NewName)
	case reaperkv.PhaseRollback:
		if why := pl.deleteWaits(e, e.NewName, newS); why.holds() {
			pl.block(entryStep(e, reaper.OpRollback, e.NewName), why, "%s: rollback of %s waits: %s", e.ID, e.NewName, why)
			return
		}
		pl.add(reaper.OpRollback, next, "finish the recorded rollback")
	default:
		pl.block(entryStep(e, "", ""), held(reaperkv.HoldProblem, "unknown phase %q: left alone", e.Phase), "%s: unknown phase %q: left alone", e.ID, e.Phase)
	}
}

// advanceCreating: adopt the server the entry created, give up a surge
// replacement whose old server recovered, or retry the create.
func (pl *planner) advanceCreating(rs *roleServers, e *reaper.Entry, next reaper.Entry, newS, oldS *reaper.Server) {
	surge := e.Kind == reaperkv.KindReplace && e.Mode == reaper.ModeSurge
	switch {
	case newS != nil:
		next.Phase, next.NewID = reaperkv.PhaseBooting, newS.ID
		pl.add(reaper.OpAdopt, next, "found the server this entry created")
		return
	case surge && oldS != nil && e.Reason != string(reaper.StateExpired) && pl.statesOf[oldS.ID] == reaper.StateHealthy:
		if until := e.Updated.Add(pl.in.Config.CloudTimeout.D()); e.Attempts > 0 && pl.in.Now.Before(until) {
			// A create attempt whose outcome is unknown may still make
			// a server; dropping the entry would leave that server free,
			// over the role's count. It is adopted (then rolled back).
			pl.block(entryStep(e, reaper.OpFinish, e.NewName), waiting("create attempt %d of %s may still make a server: waiting for it until %s", e.Attempts, e.NewName, until.UTC().Format(time.RFC3339)),
				"%s: %s is healthy again, but create attempt %d of %s may still make a server: the entry waits for it until %s", e.ID, e.OldName, e.Attempts, e.NewName, until.UTC().Format(time.RFC3339))
			return
		}
		pl.add(reaper.OpFinish, next, e.OldName+" is healthy again; its replacement is not created")
		return
	}
	if standby := pl.readyStandby(rs); standby != nil && e.Attempts == 0 && !e.Standby {
		// No create was tried, so no server can appear for the entry:
		// a ready standby is claimed instead (a delete-first
		// replacement whose old server is gone).
		if why := pl.gate(rs, need{claim: true, unpaused: surge}); why.holds() {
			pl.block(entryStep(e, reaper.OpClaim, e.NewName), why, "%s: claim of a standby for %s waits: %s", e.ID, e.NewName, why)
			return
		}
		pl.claim(rs, &next, standby)
		pl.add(reaper.OpClaim, next, "claim standby "+standby.Name+" instead of creating "+e.NewName)
		return
	}
	if why := pl.gate(rs, need{create: true, unpaused: surge, pool: e.Standby}); why.holds() {
		pl.block(entryStep(e, reaper.OpCreate, e.NewName), why, "%s: create of %s waits: %s", e.ID, e.NewName, why)
		return
	}
	if at := e.Updated.Add(pl.retryDelay(e.Attempts)); e.Attempts > 0 && pl.in.Now.Before(at) {
		// The last attempt failed without saying whether Nova made the
		// server: it may still appear (and is adopted, above).
		pl.block(entryStep(e, reaper.OpCreate, e.NewName), waiting("retried after %s (attempt %d failed)", at.UTC().Format(time.RFC3339), e.Attempts),
			"%s: create of %s retried after %s (attempt %d failed)", e.ID, e.NewName, at.UTC().Format(time.RFC3339), e.Attempts)
		return
	}
	pl.replaceZone(rs, &next)
	pl.add(reaper.OpCreate, next, "retry create recorded in the journal")
}

// retryDelay is how long after its last attempt a create is tried again:
// one interval, doubling with each attempt, at most quota_backoff_max.
func (pl *planner) retryDelay(attempts int) time.Duration {
	d, limit := pl.in.Config.Interval.D(), pl.in.Config.QuotaBackoffMax.D()
	for i := 1; i < attempts && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

// advanceBooting: finish when the new server serves (draining the old one
// of a replacement), roll back a new server that failed.
func (pl *planner) advanceBooting(rs *roleServers, e *reaper.Entry, next reaper.Entry, newS, oldS *reaper.Server) {
	if newS != nil && newS.Status == reaper.StatusActive {
		pl.capacityBack(rs)
	}
	switch {
	case newS == nil && pl.nodeLives(rs, e.NewName):
		// Missing from a list that may be partial: finishing would make
		// it a free server of the role, over its count.
		pl.block(entryStep(e, reaper.OpFinish, e.NewName), held(reaperkv.HoldInDoubt, "%s is missing from the Nova list but its Consul node passes its checks: the list may be incomplete", e.NewName),
			"%s: %s is missing from the Nova list but its Consul node passes its checks: the list may be incomplete; waiting", e.ID, e.NewName)
	case newS == nil:
		pl.add(reaper.OpFinish, next, "the new server "+e.NewName+" is gone; the role is judged afresh")
	case newS.Status == reaper.StatusError && newS.Fault == "" && pl.in.Now.Sub(pl.since(pl.in.Memory.Faultless, pl.plan.Memory.Faultless, newS.Name)) < faultWait:
		// Nova saves the ERROR state before it writes the fault (its
		// conductor does both in turn): a rollback now would miss "No
		// valid host" and take capacity for a broken server.
		pl.wakeAfter(pl.plan.Memory.Faultless[newS.Name], faultWait)
		pl.block(entryStep(e, reaper.OpRollback, e.NewName), waiting("in ERROR with no fault yet; waiting up to %s for Nova's fault", faultWait),
			"%s: %s is in ERROR with no fault yet; waiting up to %s for Nova's fault", e.ID, e.NewName, faultWait)
	case newS.Status == reaper.StatusError:
		next.Phase = reaperkv.PhaseRollback
		next.Fault = newS.Fault
		if next.Fault == "" {
			next.Fault = "no fault given"
		}
		pl.refreshFailed(rs, e, "Nova put it in ERROR ("+next.Fault+")")
		pl.add(reaper.OpRollback, next, "the new server went to ERROR")
	case pl.statesOf[newS.ID] == reaper.StateProvisionFailed:
		// Its first boot reported failed: a failed create, rolled back
		// (the role's creates back off) rather than waited for until
		// boot_timeout.
		if why := pl.gate(rs, need{unpaused: true, victim: newS}); why.holds() {
			pl.block(entryStep(e, reaper.OpRollback, e.NewName), why, "%s: rollback of %s waits: %s", e.ID, e.NewName, why)
			return
		}
		next.Phase = reaperkv.PhaseRollback
		next.Provision = pl.provisionFailed(newS)
		next.Error = "provisioning failed: " + next.Provision
		pl.refreshFailed(rs, e, next.Error)
		pl.add(reaper.OpRollback, next, e.NewName+" reported its provisioning failed ("+next.Provision+")")
	case !pl.serves(rs, newS) && pl.recovered(rs, e, oldS) != "":
		// The server it replaces came back before the new one served:
		// the new one is the one deleted, never the one that came back.
		if why := pl.gate(rs, need{unpaused: true, victim: newS}); why.holds() {
			pl.block(entryStep(e, reaper.OpRollback, e.NewName), why, "%s: rollback of %s waits: %s", e.ID, e.NewName, why)
			return
		}
		next.Phase = reaperkv.PhaseRollback
		pl.add(reaper.OpRollback, next, pl.recovered(rs, e, oldS)+"; its replacement "+e.NewName+" is not needed")
	case pl.serves(rs, newS):
		pl.advanceServing(rs, e, next, oldS)
	case !e.Claimed.IsZero() && pl.in.Now.Sub(e.Claimed) >= rs.role.WarmPool.ClaimWait():
		// A claimed standby that does not serve is a failed create.
		if why := pl.gate(rs, need{unpaused: true, victim: newS}); why.holds() {
			pl.block(entryStep(e, reaper.OpRollback, e.NewName), why, "%s: rollback of claimed standby %s waits: %s", e.ID, e.NewName, why)
			return
		}
		next.Phase = reaperkv.PhaseRollback
		next.Error = "claimed standby did not serve within claim_timeout"
		pl.refreshFailed(rs, e, next.Error)
		pl.add(reaper.OpRollback, next, "claimed standby "+e.NewName+" did not serve within claim_timeout")
	case e.Claimed.IsZero() && pl.in.Now.Sub(newS.Created) >= rs.role.BootTimeout.D():
		if e.Kind == reaperkv.KindCreate {
			// Left to the rules for unaccounted servers, which need the
			// start gate open.
			pl.add(reaper.OpFinish, next, e.NewName+" did not check in within boot_timeout; judged as unaccounted from now on")
			return
		}
		if why := pl.gate(rs, need{unpaused: true, victim: newS}); why.holds() {
			pl.block(entryStep(e, reaper.OpRollback, e.NewName), why, "%s: rollback of %s waits: %s", e.ID, e.NewName, why)
			return
		}
		next.Phase = reaperkv.PhaseRollback
		next.Error = "did not check in passing within boot_timeout"
		pl.refreshFailed(rs, e, next.Error)
		pl.add(reaper.OpRollback, next, e.NewName+" did not check in passing within boot_timeout")
	}
}

// advanceServing: the entry's new server checks in passing. A role with
// an on_launch hook asks it first (hooks.go). A create,
// or a replacement whose old server is gone, finishes; a replacement whose
// old server passes again finishes keeping both (the role's count decides
// through a scale in); otherwise the old server is drained, when the gate
// allows. A claimed standby's claim is recorded as served whenever the
// entry moves on.
func (pl *planner) advanceServing(rs *roleServers, e *reaper.Entry, next reaper.Entry, oldS *reaper.Server) {
	served := func() {
		// Once: when it first serves (its on_launch hook asked then).
		if !e.Claimed.IsZero() && e.LaunchHook == nil {
			pl.plan.Claims = append(pl.plan.Claims, reaper.PoolClaimDone{Role: e.Role, Claim: reaperkv.PoolClaim{Host: e.NewName, Time: e.Claimed, Serving: pl.in.Now.Sub(e.Claimed)}})
		}
	}
	if rs.role.OnLaunch != nil && e.LaunchHook == nil {
		served()
		pl.askHook(rs, next, schema.HookLaunch, e.NewName+" checked in passing")
		return
	}
	if e.Kind != reaperkv.KindReplace || oldS == nil {
		served()
		pl.add(reaper.OpFinish, next, e.NewName+" checked in passing")
		return
	}
	if pl.heldIDs[oldS.ID] {
		served()
		pl.add(reaper.OpFinish, next, e.NewName+" serves; "+e.OldName+" is held for a human: not drained")
		return
	}
	if why := pl.recovered(rs, e, oldS); why != "" {
		// Both serve: neither is drained for this entry; the role's
		// count decides, through a scale in and its gate.
		served()
		pl.add(reaper.OpFinish, next, why+" and "+e.NewName+" serves: both kept")
		return
	}
	if why := pl.gate(rs, need{armed: true, unpaused: true, budget: true, victim: oldS}); why.holds() {
		pl.block(entryStep(e, reaper.OpDrain, e.OldName), why, "%s: drain of %s waits: %s", e.ID, e.OldName, why)
		return
	}
	served()
	next.Phase = reaperkv.PhaseDraining
	pl.startDrain(&next, oldS)
	pl.add(reaper.OpDrain, next, e.NewName+" checked in passing; draining "+e.OldName)
}

// advanceStandby: a standby's create entry ends once Nova made the
// server ACTIVE (the pool follows its convergence); a standby Nova put in
// ERROR, or still not ACTIVE at boot_timeout, is rolled back.
func (pl *planner) advanceStandby(rs *roleServers, e *reaper.Entry, next reaper.Entry, newS *reaper.Server) {
	switch {
	case newS == nil:
		pl.add(reaper.OpFinish, next, "the standby "+e.NewName+" is gone")
	case newS.Status == reaper.StatusActive:
		pl.add(reaper.OpFinish, next, "standby "+e.NewName+" is ACTIVE: converging in the warm pool")
	case newS.Status == reaper.StatusError || pl.in.Now.Sub(newS.Created) >= rs.role.BootTimeout.D():
		if why := pl.gate(rs, need{unpaused: true}); why.holds() {
			pl.block(entryStep(e, reaper.OpRollback, e.NewName), why, "%s: rollback of standby %s waits: %s", e.ID, e.NewName, why)
			return
		}
		next.Phase, next.Fault = reaperkv.PhaseRollback, newS.Fault
		if newS.Status == reaper.StatusError && next.Fault == "" {
			next.Fault = "no fault given"
		}
		pl.add(reaper.OpRollback, next, "standby "+e.NewName+" did not become ACTIVE")
	}
}

// advanceDraining: delete the old server once the drain period is over,
// after looking at it again: a server replaced for its health that passes
// again is restored, a drain that failed or was not answered may be
// aborted (see drainabort.go), and the gate may hold the delete (then it
// stays in maintenance). A role with an on_terminate hook asks it before
// the delete (hooks.go).
func (pl *planner) advanceDraining(rs *roleServers, e *reaper.Entry, next reaper.Entry, oldS *reaper.Server) {
	if why := pl.recovered(rs, e, oldS); why != "" {
		pl.add(reaper.OpRestore, next, why+": kept")
		return
	}
	answer := pl.drainAnswer(e)
	drained := answer != nil && answer.Drained
	if oldS != nil && !drained && pl.planAbort(rs, e, next, oldS, answer) {
		return
	}
	if oldS != nil && pl.in.Now.Before(e.DrainUntil) && !drained {
		pl.add(reaper.OpMaintain, next, "draining")
		return
	}
	if why := pl.holdDelete(rs, e, oldS); why.holds() {
		pl.block(entryStep(e, reaper.OpDelete, e.OldName), why, "%s: delete of %s waits: %s", e.ID, e.OldName, why)
		pl.add(reaper.OpMaintain, next, "still draining ("+why.text+")")
		return
	}
	var why string
	switch {
	case drained:
		why = fmt.Sprintf("drained: %s answered at %s that its work moved away", answer.By, answer.Time.UTC().Format(time.RFC3339))
	case answer != nil:
		why = fmt.Sprintf("drain timeout over; moving the work away failed (%s: %s)", answer.By, answer.Detail)
	default:
		why = "drain timeout over, no answer"
	}
	if rs.role.OnTerminate != nil && e.TerminateHook == nil {
		pl.askHook(rs, next, schema.HookTerminate, why)
		return
	}
	next.Phase = reaperkv.PhaseDeleting
	pl.add(reaper.OpDelete, next, why)
}

// drainAnswer is the answer to the drain request of entry e's old
// server, nil when none came (or the request is another entry's).
func (pl *planner) drainAnswer(e *reaper.Entry) *schema.DrainAnswer {
	d, ok := pl.in.Scaling.Drains[e.OldName]
	if !ok || d.Entry != e.ID {
		return nil
	}
	return d.Answer
}

// faultWait is how long a new server in Nova ERROR without a fault is
// given for its fault to appear: Nova writes it right after the state, in
// the same conductor call, so seconds are plenty; a minute covers a slow
// database.
const faultWait = time.Minute

// capacityBack records that a server created for the role went ACTIVE:
// the role's exhausted capacity, if any, is over.
func (pl *planner) capacityBack(rs *roleServers) {
	if _, ok := pl.in.Scaling.Capacity[rs.role.Name]; !ok {
		return
	}
	if !slices.Contains(pl.plan.CapacityClear, rs.role.Name) {
		pl.plan.CapacityClear = append(pl.plan.CapacityClear, rs.role.Name)
	}
}

// advanceDeleting finishes a recorded delete (a leader stopped during it),
// with the same second look as a drain's end.
func (pl *planner) advanceDeleting(rs *roleServers, e *reaper.Entry, next reaper.Entry, oldS *reaper.Server) {
	// Once Nova accepted the delete there is no taking it back: the
	// server is going whatever its checks say.
	if why := pl.recovered(rs, e, oldS); why != "" && e.DeleteAsked.IsZero() {
		pl.add(reaper.OpRestore, next, why+": kept")
		return
	}
	if why := pl.holdDelete(rs, e, oldS); why.holds() {
		pl.block(entryStep(e, reaper.OpDelete, e.OldName), why, "%s: delete of %s waits: %s", e.ID, e.OldName, why)
		return
	}
	if why := pl.deleteWaits(e, e.OldName, oldS); why.holds() {
		pl.block(entryStep(e, reaper.OpDelete, e.OldName), why, "%s: delete of %s waits: %s", e.ID, e.OldName, why)
		return
	}
	why := "finish the recorded delete"
	if h := e.TerminateHook; h != nil && h.Result != "" {
		why = resultText(schema.HookTerminate, *h) + "; " + why
	}
	pl.add(reaper.OpDelete, next, why)
}

// deleteWaits says why the delete of an entry's server s is not asked of
// Nova this cycle, or "": the cloud refused it (backoff), or Nova accepted
// it and still lists the server, less than cloud_timeout ago.
func (pl *planner) deleteWaits(e *reaper.Entry, name string, s *reaper.Server) hold {
	if until := pl.in.DeleteBackoff[e.ID]; pl.in.Now.Before(until) {
		return held(reaperkv.HoldBackoff, "the cloud refused or did not carry out the delete of %s; asked again after %s (it does not count against max_in_flight meanwhile)", name, until.UTC().Format(time.RFC3339))
	}
	if s != nil && !e.DeleteAsked.IsZero() && !pl.deleteStalled(*e) {
		return waiting("Nova accepted the delete of %s %s ago and still lists it (status %s); looked at again each cycle, asked again after cloud_timeout", name, pl.in.Now.Sub(e.DeleteAsked).Round(time.Second), s.Status)
	}
	return hold{}
}

// deleteStalled: the entry is deleting (or rolling back) a server whose
// delete Nova accepted cloud_timeout ago or more, and is still open (so
// the server was still there when last looked at).
func (pl *planner) deleteStalled(e reaper.Entry) bool {
	deleting := e.Phase == reaperkv.PhaseDeleting || e.Phase == reaperkv.PhaseRollback
	return deleting && !e.DeleteAsked.IsZero() && pl.in.Now.Sub(e.DeleteAsked) >= pl.in.Config.CloudTimeout.D()
}

// holdDelete says why the delete of an entry's old server may not happen
// now, asked on this cycle's data: disarmed or paused since the drain
// began, or the server missing from the Nova list while its Consul node
// lives (the list may be incomplete: that is no evidence it is gone).
func (pl *planner) holdDelete(rs *roleServers, e *reaper.Entry, oldS *reaper.Server) hold {
	if why := pl.gate(rs, need{armed: true, unpaused: true}); why.holds() {
		return why
	}
	// Once Nova accepted the delete, the server leaving the list is its
	// doing (the delete's own look tells gone from hidden).
	if oldS == nil && e.DeleteAsked.IsZero() && pl.nodeLives(rs, e.OldName) {
		return held(reaperkv.HoldInDoubt, "%s is missing from the Nova list but its Consul node passes its checks: the list may be incomplete", e.OldName)
	}
	if u := pl.unknown(oldS); u != "" {
		return held(reaperkv.HoldUnknownState, "%s", u)
	}
	return hold{}
}

// nodeLives: the Consul node name checks in for its role and passes (the
// reaper's drain maintenance aside).
func (pl *planner) nodeLives(rs *roleServers, name string) bool {
	if name == "" {
		return false
	}
	h := pl.health(rs.role, name, true)
	return h.checkedIn && !h.critical
}

// recovered says why the old server of a replacement made for its health
// (unhealthy or unaccounted, not expired, not in Nova ERROR) is to be
// kept: it passes its counted checks again, the reaper's own drain
// maintenance aside. "" when it is not.
func (pl *planner) recovered(rs *roleServers, e *reaper.Entry, oldS *reaper.Server) string {
	if e.Kind != reaperkv.KindReplace || e.OldName == "" {
		return ""
	}
	if e.Reason != string(reaper.StateUnhealthy) && e.Reason != string(reaper.StateUnaccounted) {
		return ""
	}
	if oldS == nil || oldS.Status == reaper.StatusError {
		return ""
	}
	if h := pl.health(rs.role, oldS.Name, true); h.checkedIn && !h.critical && !h.maintenance {
		return oldS.Name + " passes its checks again"
	}
	return ""
}

// startDrain spends one destructive action on taking s out of its role:
// the entry drains it for the drain period, and later steps of this plan
// (another entry's drain, a scale in) count it as on its way out.
func (pl *planner) startDrain(e *reaper.Entry, s *reaper.Server) {
	pl.budget--
	d := pl.in.Config.DrainPeriod.D()
	if r := pl.in.Config.Role(e.Role); r != nil {
		d = r.DrainTimeout.D()
	}
	e.DrainUntil = pl.in.Now.Add(d)
	pl.inEntry[s.ID] = reaper.StateDeleting
}
