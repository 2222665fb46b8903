package planner

import (
	"fmt"
	"sort"
	"time"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/reaper"
)

// splitStandbys moves the servers that are standbys of their role out of
// its members, before anything counts them. A server with the standby
// mark that an entry claimed is a member (the claim is finishing); one a
// standby entry creates or deletes belongs to that entry, neither a member
// nor a standby.
func (pl *planner) splitStandbys(roles []*roleServers) {
	claimed, pooled := map[string]bool{}, map[string]bool{}
	for _, e := range pl.in.Journal {
		switch {
		case !e.Claimed.IsZero():
			claimed[e.NewID] = true
		case e.Standby:
			pooled[e.NewID], pooled[e.OldID], pooled["journal:"+e.ID] = true, true, true
		}
	}
	for _, rs := range roles {
		members := rs.all[:0]
		for _, s := range rs.all {
			_, marked := s.Metadata[reaper.MetaStandby]
			switch {
			case !marked || claimed[s.ID]:
				members = append(members, s)
			case pooled[s.ID] || pooled["journal:"+s.Metadata[reaper.MetaJournal]]:
				// The entry's own server.
			default:
				rs.standbys = append(rs.standbys, s)
			}
		}
		rs.all = members
		sort.Slice(rs.standbys, func(i, j int) bool { return rs.standbys[i].Created.Before(rs.standbys[j].Created) })
	}
}

// standbyState says where a standby is: building (not ACTIVE yet), ready
// (its role's checks pass, its own drain maintenance aside, and it
// validated the current version in a role that validates), converging,
// or failed (Nova ERROR, a status the reaper cannot act on, or not ready
// boot_timeout after create).
func (pl *planner) standbyState(rs *roleServers, s *reaper.Server) string {
	switch {
	case s.Status == reaper.StatusShutoff:
		// Powered off by the reaper once ready (its record says so), or
		// by someone else, when it is of no known use.
		if rec, ok := pl.in.PoolRecords[s.Name]; ok && rec.ID == s.ID && (rec.State == reaperkv.StandbyReady || rec.State == reaperkv.StandbyStopped) {
			return reaperkv.StandbyStopped
		}
		return reaperkv.StandbyFailed
	case s.Status == reaper.StatusBuild && pl.in.Now.Sub(s.Created) < rs.role.BootTimeout.D():
		pl.wakeAfter(s.Created, rs.role.BootTimeout.D())
		return reaperkv.StandbyBuilding
	case s.Status == reaper.StatusActive:
		h := pl.health(rs.role, s.Name, true)
		if h.checkedIn && !h.critical && !h.maintenance && (!rs.validating || pl.in.Validated[s.Name]) {
			return reaperkv.StandbyReady
		}
		if pl.in.Now.Sub(s.Created) < rs.role.BootTimeout.D() {
			pl.wakeAfter(s.Created, rs.role.BootTimeout.D())
			return reaperkv.StandbyConverging
		}
		if h.checkedIn && !h.critical && !h.maintenance {
			// It passes but has not validated the current version (a
			// new version is out): it converges in place; not claimed
			// meanwhile.
			return reaperkv.StandbyConverging
		}
		// Converged once, failing now: failed only once its checks have
		// failed for critical_grace without a break (a flap is not a
		// death, for a standby as for a member).
		if !h.maintenance {
			if since := pl.since(pl.in.Memory.Critical, pl.plan.Memory.Critical, s.Name); pl.in.Now.Sub(since) < rs.role.CriticalGrace.D() {
				pl.wakeAfter(since, rs.role.CriticalGrace.D())
				return reaperkv.StandbyConverging
			}
		}
	}
	return reaperkv.StandbyFailed
}

// standbySettle is how long a standby of a stopped pool stays ready, without
// a break, before it is powered off. Its first validation is not the end of
// its first boot: the node's watches re-run the eventual step and validation
// as the data they read settles, seconds later. A power-off in the middle
// cut such a run short, leaving the standby without a validation of the
// version, so it was rebuilt at once (found in the lab).
const standbySettle = 30 * time.Second

// settled says whether standby s has been ready for standbySettle (by its
// Nova ID; a new leader starts the wait again).
func (pl *planner) settled(s *reaper.Server) bool {
	since := pl.since(pl.in.Memory.Ready, pl.plan.Memory.Ready, s.ID)
	pl.wakeAfter(since, standbySettle)
	return pl.in.Now.Sub(since) >= standbySettle
}

// readyStandby returns the role's oldest ready standby not yet claimed
// in this plan, or nil. While the role's spec is enforced (refresh: auto,
// or a refresh request), a standby of another boot spec is never ready:
// claimed, it would be drifted (it is rebuilt instead).
func (pl *planner) readyStandby(rs *roleServers) *reaper.Server {
	spec := ""
	if rr := pl.refresh[rs.role.Name]; rr.enforced {
		spec = rr.spec
	}
	var ready []*reaper.Server
	for _, s := range rs.standbys {
		if spec != "" && s.Metadata[reaper.MetaSpec] != spec {
			continue
		}
		if rec, ok := pl.holdOf(s); ok && rec.Active(pl.in.Now) {
			continue // held for a human: never claimed
		}
		expired := rs.role.MaxAge > 0 && !pl.in.Now.Before(expiry(rs.role, s))
		if st := pl.standbyState(rs, s); !expired && (st == reaperkv.StandbyReady || (st == reaperkv.StandbyStopped && !pl.olderVersion(rs, s))) {
			ready = append(ready, s)
		}
	}
	return pl.preferZone(rs, ready)
}

// olderVersion reports whether s is a stopped standby of a role that
// reports validation which has not validated the current version: it
// converged an older one before it was stopped.
func (pl *planner) olderVersion(rs *roleServers, s *reaper.Server) bool {
	return s.Status == reaper.StatusShutoff && rs.validating && !pl.in.Validated[s.Name] && pl.standbyState(rs, s) == reaperkv.StandbyStopped
}

// claim makes e take standby s instead of creating a server: s leaves the
// pool for the rest of the plan, and the entry's server is s.
func (pl *planner) claim(rs *roleServers, e *reaper.Entry, s *reaper.Server) {
	for i, p := range rs.standbys {
		if p == s {
			rs.standbys = append(rs.standbys[:i:i], rs.standbys[i+1:]...)
			break
		}
	}
	e.Phase, e.NewName, e.NewID, e.Claimed = reaperkv.PhaseClaiming, s.Name, s.ID, pl.in.Now
	e.Zone = s.Zone
	pl.countPlaced(rs, e.Zone, false)
	pl.inEntry[s.ID] = reaper.StateNew
}

// refillHeld says why no standby may be created this cycle, or "": any
// role has a member awaiting replacement (a state that is replaced, or
// past max_age), a replacement under way, a create of a member not made
// yet, or fewer members than its count. The quota is the project's: a
// slot a delete frees goes to real demand, never to the pool first.
func (pl *planner) refillHeld(roles []*roleServers) string {
	for _, rs := range roles {
		r := rs.role
		for _, e := range rs.entries {
			switch {
			case e.Standby || e.Kind == reaperkv.KindDelete:
			case e.Kind == reaperkv.KindReplace:
				return fmt.Sprintf("role %s is replacing %s (entry %s)", r.Name, e.OldName, e.ID)
			case e.Phase == reaperkv.PhaseCreating || e.Phase == reaperkv.PhaseClaiming:
				return fmt.Sprintf("role %s is creating %s (entry %s)", r.Name, e.NewName, e.ID)
			}
		}
		for _, s := range pl.worstFirst(rs.free) {
			if st := pl.statesOf[s.ID]; st.Props().Replace || st == reaper.StateExpired {
				return fmt.Sprintf("role %s has a member awaiting replacement (%s, %s)", r.Name, s.Name, st)
			}
		}
		if n, want := pl.count(rs), pl.desired(r); n < want {
			return fmt.Sprintf("role %s is below its count (%d of %d)", r.Name, n, want)
		}
	}
	return ""
}

// pool keeps the role's warm pool after the role's own work: it keeps the
// standbys' nodes in maintenance, deletes failed standbys (and standbys
// over the size) one at a time, and creates one standby at a time while
// the pool is short, never while any role needs a server (short says
// why: see refillHeld), nor while the pool's backoff or a create gate
// holds.
func (pl *planner) pool(rs *roleServers, short string) {
	size := rs.role.PoolSize()
	var creating, deleting int
	for _, e := range rs.entries {
		switch {
		case e.Standby && e.Kind == reaperkv.KindCreate:
			creating++
		case e.Standby:
			deleting++
		}
	}
	if size == 0 && len(rs.standbys) == 0 && creating == 0 && deleting == 0 {
		return
	}
	rep := &reaperkv.PoolReport{Size: size, States: map[string]int{}, Creating: creating}
	for _, e := range rs.entries {
		// A standby being created keeps the record its create wrote.
		if s := pl.byID[e.NewID]; e.Standby && e.Kind == reaperkv.KindCreate && s != nil {
			pl.plan.Standbys = append(pl.plan.Standbys, reaperkv.StandbyRecord{Role: rs.role.Name, Host: s.Name, ID: s.ID, State: reaperkv.StandbyBuilding, Created: s.Created})
		}
	}
	var failed []*reaper.Server
	for _, s := range rs.standbys {
		st := pl.standbyState(rs, s)
		rep.States[st]++
		pl.plan.Standbys = append(pl.plan.Standbys, reaperkv.StandbyRecord{Role: rs.role.Name, Host: s.Name, ID: s.ID, State: st, Created: s.Created})
		if st == reaperkv.StandbyFailed {
			failed = append(failed, s)
			continue
		}
		if st == reaperkv.StandbyReady && rs.role.WarmPool != nil && rs.role.WarmPool.State == reaper.PoolStopped && pl.settled(s) {
			pl.add(reaper.OpStandbyStop, reaper.Entry{Role: rs.role.Name, OldName: s.Name, OldID: s.ID, Started: s.Created}, "ready standby of a stopped warm pool: powered off until claimed")
		}
		if _, node := pl.byNode[s.Name]; node && !pl.inMaintenance(s.Name) {
			pl.add(reaper.OpStandbyMaintain, reaper.Entry{Role: rs.role.Name, OldName: s.Name, OldID: s.ID}, "standby of the warm pool: kept out of DNS")
		}
	}
	rs.pool = rep
	have := len(rs.standbys) + creating
	stale, staleWhy := pl.staleStandbys(rs, deleting)
	switch {
	case deleting > 0:
		// One standby deleted at a time.
	case len(failed) > 0:
		pl.deleteStandby(rs, failed[0], "standby failed (Nova ERROR, or not converged within boot_timeout)")
	case len(stale) > 0 && creating == 0:
		// A flush, or standbys past max_age: one standby at a time, each replaced (by the refill)
		// before the next goes, so the pool keeps its other standbys.
		pl.deleteStandby(rs, stale[0], staleWhy[0])
	case have > size && creating == 0:
		victim := rs.standbys[0] // the oldest; a not-ready one first
		for _, s := range rs.standbys {
			if pl.standbyState(rs, s) != reaperkv.StandbyReady {
				victim = s
				break
			}
		}
		pl.deleteStandby(rs, victim, fmt.Sprintf("warm pool over its size %d", size))
	}
	if have < size {
		pl.refill(rs, have, creating, short)
	}
}

// staleStandbys lists the role's standbys to rebuild, with why: made
// before a pool flush request, past max_age, or stopped on an older
// version. A new flush request is acknowledged (stamped with this
// reaper's clock) and carried out from the next cycle; one with nothing
// left to rebuild, and no standby delete under way, is done.
func (pl *planner) staleStandbys(rs *roleServers, deleting int) (stale []*reaper.Server, staleWhy []string) {
	flush, flushing := pl.in.PoolFlush[rs.role.Name]
	if flushing && flush.Seen.IsZero() {
		// Acknowledged first (by this reaper's clock); carried out from
		// the next cycle.
		flush.Seen = pl.in.Now
		pl.plan.FlushSeen = append(pl.plan.FlushSeen, reaper.PoolFlush{Role: rs.role.Name, Record: flush})
		flushing = false
	}
	flushed := 0
	for _, s := range rs.standbys {
		switch {
		case flushing && s.Created.Before(flush.Seen):
			stale = append(stale, s)
			staleWhy = append(staleWhy, fmt.Sprintf("pool flush requested by %s, seen at %s", flush.By, flush.Seen.UTC().Format(time.RFC3339)))
			flushed++
		case rs.role.MaxAge > 0 && !pl.in.Now.Before(expiry(rs.role, s)):
			// A standby expires as a member does; replaced before it
			// could be claimed at its age.
			stale = append(stale, s)
			staleWhy = append(staleWhy, "standby past max_age")
		case pl.refresh[rs.role.Name].enforced && s.Metadata[reaper.MetaSpec] != pl.refresh[rs.role.Name].spec:
			// Claimed, it would be drifted: rebuilt on the refresh's spec.
			stale = append(stale, s)
			staleWhy = append(staleWhy, "standby built from another boot spec (a refresh)")
		case pl.olderVersion(rs, s):
			// Powered off, it cannot converge to the new version in
			// place as a running standby does: rebuilt.
			stale = append(stale, s)
			staleWhy = append(staleWhy, "stopped standby without a validation of the current version")
		}
	}
	if flushing && flushed == 0 && deleting == 0 {
		pl.plan.FlushDone = append(pl.plan.FlushDone, reaper.PoolFlush{Role: rs.role.Name, Record: flush})
	}
	return stale, staleWhy
}

// refill creates one standby for the role's short pool (have of its
// size, creating of them being created), unless short says why no
// standby may be created (see refillHeld), the role's Nova list is in
// doubt, or the gate holds creates; why goes in the pool's report.
func (pl *planner) refill(rs *roleServers, have, creating int, short string) {
	why := short
	if why == "" {
		why = rs.doubt
	}
	if why == "" && creating > 0 {
		return // one at a time; not held back
	}
	if why == "" {
		why = pl.gate(rs, need{create: true, pool: true}).text
	}
	if why != "" {
		rs.pool.Why = why
		return
	}
	e := pl.newEntry(rs.role, reaperkv.KindCreate, fmt.Sprintf("warm pool refill: %d of %d", have, rs.role.PoolSize()))
	e.Phase, e.NewName, e.Standby = reaperkv.PhaseCreating, pl.freeName(rs.role), true
	pl.place(rs, &e)
	rs.pool.Creating++
	pl.add(reaper.OpCreate, e, e.Reason)
}

// deleteStandby deletes standby s through a journal entry; it serves
// nothing, so it spends no budget and needs no min_healthy, but a
// disarmed or paused reaper deletes nothing.
func (pl *planner) deleteStandby(rs *roleServers, s *reaper.Server, why string) {
	if g := pl.gate(rs, need{armed: true, unpaused: true, victim: s}); g.holds() {
		pl.block(planStep{op: string(reaper.OpDelete), role: rs.role.Name, host: s.Name, reason: why}, g, "%s: delete of standby %s waits: %s", rs.role.Name, s.Name, g)
		return
	}
	e := pl.newEntry(rs.role, reaperkv.KindDelete, why)
	e.Phase, e.OldName, e.OldID, e.Standby = reaperkv.PhaseDeleting, s.Name, s.ID, true
	pl.add(reaper.OpDelete, e, why)
}

// inMaintenance reports whether node has Consul's node maintenance check.
func (sn *snapshot) inMaintenance(node string) bool {
	for _, c := range sn.byNode[node] {
		if c.CheckID == reaper.MaintNodeCheck {
			return true
		}
	}
	return false
}
