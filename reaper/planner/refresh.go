package planner

import (
	"fmt"
	"time"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/reaper"
)

// roleRefresh is a role's instance refresh as this plan sees it: the boot
// spec the role's servers are built from, whether its drifted servers are
// replaced now and in what batches, and the role's request (`orchestrate
// refresh`) as the plan leaves it.
type roleRefresh struct {
	// configured is the digest of the role's boot spec as configured;
	// spec the one its servers are built from: the configuration's, or
	// the one a rollback rolls back (or is pinned) to.
	configured, spec string
	// enforced: a standby of another spec is rebuilt and never claimed
	// (claimed, it would be drifted): refresh: auto, or a request that is
	// not cancelled.
	enforced bool
	// replacing: drifted servers are replaced now, unless the gate or a
	// checkpoint holds them.
	replacing bool
	// hold says why a request replaces nothing (cancelled, failed, a
	// request that cannot be read).
	hold string
	// minHealthy is the share of the role kept serving, in percent.
	minHealthy int
	// rec is the request as this plan leaves it (nil: none), read its
	// value as read; remove: the plan removes it (done); activity says
	// what changed, for the log and the history.
	rec      *reaperkv.RefreshRecord
	read     reaperkv.RefreshRecord
	remove   bool
	activity string
}

// refreshes sets up each role's refresh, before any entry is advanced:
// a rollback fixes the spec new servers are built from.
func (pl *planner) refreshes(roles []*roleServers) {
	pl.refresh = make(map[string]*roleRefresh, len(roles))
	for _, rs := range roles {
		pl.refresh[rs.role.Name] = pl.setupRefresh(rs.role)
	}
}

// setupRefresh reads role r's request, if any. No request: a role with
// refresh: auto rolls onto its configured spec by itself. A request
// refreshes the role whatever its refresh setting, until it is done
// (removed), cancelled or failed; a rollback's, done, stays and pins the
// role to the spec it rolled back to.
func (pl *planner) setupRefresh(r *reaper.Role) *roleRefresh {
	auto := r.Refresh == reaper.RefreshAuto
	rr := &roleRefresh{configured: r.Boot.Digest(), minHealthy: r.RefreshMinHealthyPercent, enforced: auto}
	rr.spec = rr.configured
	if why, bad := pl.in.RefreshProblems[r.Name]; bad {
		rr.hold = why + ": no drifted server is replaced (refresh: auto too) until `orchestrate refresh` writes a new request"
		return rr
	}
	read, ok := pl.in.Refresh[r.Name]
	if !ok {
		rr.replacing = auto
		return rr
	}
	rec := read
	rr.read, rr.rec = read, &rec
	if rec.MinHealthyPercent > 0 {
		rr.minHealthy = rec.MinHealthyPercent
	}
	if rec.Seen.IsZero() {
		rec.Seen = pl.in.Now
		rr.note("%s requested by %s (%s)", refreshWord(rec), rec.By, rec.Reason)
	}
	switch {
	case !rec.Cancelled.IsZero():
		// Built from the configuration again; only the replacements stop.
		rec.State = reaperkv.RefreshCancelled
		rr.hold = fmt.Sprintf("%s cancelled at %s: no drifted server is replaced (refresh: auto too) until `orchestrate refresh %s` starts one", refreshWord(rec), rec.Cancelled.UTC().Format(time.RFC3339), r.Name)
		return rr
	case rec.Rollback:
		pl.setupRollback(r, rr)
	default:
		rec.Spec = rr.configured
	}
	if rr.hold != "" || rr.remove {
		return rr
	}
	rr.enforced = true
	switch {
	case rec.State == reaperkv.RefreshPinned:
		// Done: the role stays on the spec it rolled back to.
	case rec.Failures > rec.Retries:
		rec.State = reaperkv.RefreshFailed
		rr.hold = fmt.Sprintf("%s failed (%s): `orchestrate refresh continue %s` retries, `orchestrate refresh %s --rollback` rolls back", refreshWord(rec), rec.Detail, r.Name, r.Name)
	default:
		if rec.State != reaperkv.RefreshCheckpoint {
			rec.State = reaperkv.RefreshRunning
		}
		rr.replacing = true
	}
	return rr
}

// setupRollback fixes a rollback's spec: the one before the role's
// current spec, as the reaper recorded it when it was seen. A pinned
// rollback whose spec the configuration names again is over (removed).
func (pl *planner) setupRollback(r *reaper.Role, rr *roleRefresh) {
	rec := rr.rec
	if rec.Spec == "" {
		prev := pl.in.Specs[r.Name].Previous
		if prev == nil {
			rr.fail("no boot spec before the current one is recorded: nothing to roll back to")
			return
		}
		rec.Spec = prev.Digest
	}
	if rec.Spec == rr.configured {
		if rec.State == reaperkv.RefreshPinned {
			rr.remove = true
			rr.note("rollback pin released: the configuration names spec %.12s again", rec.Spec)
		}
		return
	}
	if why := pl.in.SpecProblems[r.Name]; why != "" && rec.State != reaperkv.RefreshPinned {
		rr.fail(why)
		return
	}
	rr.spec = rec.Spec
}

// note adds what changed to the plan's activity for the request.
func (rr *roleRefresh) note(format string, args ...any) {
	if rr.activity != "" {
		rr.activity += "; "
	}
	rr.activity += fmt.Sprintf(format, args...)
}

// fail stops a rollback that cannot start (why): failed at once.
func (rr *roleRefresh) fail(why string) {
	if rr.rec.State != reaperkv.RefreshFailed || rr.rec.Detail != why {
		rr.note("rollback failed: %s", why)
	}
	rr.rec.State, rr.rec.Detail = reaperkv.RefreshFailed, why
	rr.hold = "rollback failed: " + why
}

func refreshWord(rec reaperkv.RefreshRecord) string {
	if rec.Rollback {
		return "rollback"
	}
	return "refresh"
}

// atCheckpoint says why the refresh's next batch waits at a checkpoint,
// or "": the share of the role serving on the spec reached the next
// checkpoint `orchestrate refresh continue` has not passed.
func (pl *planner) atCheckpoint(rs *roleServers, rr *roleRefresh) string {
	rec := rr.rec
	if rec == nil || rec.Continued >= len(rec.Checkpoints) {
		return ""
	}
	cp, want := rec.Checkpoints[rec.Continued], pl.desired(rs.role)
	on := pl.onSpec(rs, rr.spec)
	if on*100 < cp*want {
		if rec.State == reaperkv.RefreshCheckpoint {
			rec.State = reaperkv.RefreshRunning
		}
		return ""
	}
	if rec.State != reaperkv.RefreshCheckpoint {
		rec.State = reaperkv.RefreshCheckpoint
		rr.note("%s at checkpoint %d%%: %d of %d serving on spec %.12s; waits for `orchestrate refresh continue %s`", refreshWord(*rec), cp, on, want, rr.spec, rs.role.Name)
	}
	return fmt.Sprintf("waits at checkpoint %d%% (%d of %d serving on the spec): `orchestrate refresh continue %s`", cp, on, want, rs.role.Name)
}

// onSpec counts the role's servers serving on spec, in no entry (a new
// server counts once its entry is done).
func (pl *planner) onSpec(rs *roleServers, spec string) int {
	n := 0
	for _, s := range rs.free {
		if s.Metadata[reaper.MetaSpec] == spec && pl.serves(rs, s) {
			n++
		}
	}
	return n
}

// refreshFailed records that a replacement of the role's refresh did not
// serve (why): the refresh stops, no batch starts before `orchestrate
// refresh continue`. A role refreshing by itself (refresh: auto) gets a
// request of the reaper's, so that it stops too and an operator sees why.
func (pl *planner) refreshFailed(rs *roleServers, e *reaper.Entry, why string) {
	rr := pl.refresh[rs.role.Name]
	if e.Kind != reaperkv.KindReplace || e.Reason != string(reaper.StateDrifted) || rr == nil {
		return
	}
	if rr.rec == nil {
		rr.rec = &reaperkv.RefreshRecord{Time: pl.in.Now, By: "reaper", Reason: "refresh: auto", Seen: pl.in.Now, Spec: rr.spec}
	}
	rr.rec.Failures++
	rr.rec.State, rr.rec.Detail = reaperkv.RefreshFailed, fmt.Sprintf("replacement %s of %s: %s", e.NewName, e.OldName, why)
	rr.note("%s failed: %s; stopped until `orchestrate refresh continue %s`", refreshWord(*rr.rec), rr.rec.Detail, rs.role.Name)
	rr.replacing = false
}

// finishRefresh ends the role's part of the plan for its refresh: a
// running request with no server left off its spec and no replacement of
// it in flight is done (removed; a rollback's is pinned), and a request
// that changed is written back.
func (pl *planner) finishRefresh(rs *roleServers) {
	rr := pl.refresh[rs.role.Name]
	if rr == nil || rr.rec == nil {
		return
	}
	rec := rr.rec
	running := rec.State == reaperkv.RefreshRunning || rec.State == reaperkv.RefreshCheckpoint
	if running && rr.replacing && pl.offSpec(rs, rr.spec) == 0 && !pl.refreshInFlight(rs) && pl.count(rs) == pl.desired(rs.role) {
		if rec.Rollback {
			rec.State, rec.Detail = reaperkv.RefreshPinned, ""
			rr.note("rollback done: every server serves on spec %.12s; the role stays on it until `orchestrate refresh %s` or the configuration names it", rr.spec, rs.role.Name)
		} else {
			rr.remove = true
			rr.note("refresh done: every server serves on spec %.12s", rr.spec)
		}
	}
	if !rr.remove && refreshUnchanged(rr.read, *rec) {
		return
	}
	if !rr.remove {
		rec.Updated = pl.in.Now
	}
	pl.plan.Refreshes = append(pl.plan.Refreshes, reaper.RefreshWrite{Role: rs.role.Name, Record: *rec, Remove: rr.remove, Activity: rr.activity})
}

// refreshUnchanged: the plan changed nothing the reaper keeps in the
// request.
func refreshUnchanged(a, b reaperkv.RefreshRecord) bool {
	return a.Index == b.Index && a.Seen.Equal(b.Seen) && a.Spec == b.Spec && a.State == b.State && a.Detail == b.Detail && a.Failures == b.Failures && !a.Time.IsZero()
}

// offSpec counts the role's servers built from another spec than spec.
func (pl *planner) offSpec(rs *roleServers, spec string) int {
	n := 0
	for _, s := range rs.all {
		if s.Metadata[reaper.MetaSpec] != spec && !pl.heldIDs[s.ID] {
			// A held server is no refresh's to replace: once its hold
			// ends it is judged afresh (drifted, or a surplus).
			n++
		}
	}
	return n
}

// refreshInFlight: a replacement of the role's refresh is in flight.
func (pl *planner) refreshInFlight(rs *roleServers) bool {
	for _, e := range rs.entries {
		if e.Kind == reaperkv.KindReplace && e.Reason == string(reaper.StateDrifted) {
			return true
		}
	}
	return false
}

// refreshView is the role's refresh in the report, nil when it has none
// (no request, and refresh: auto with nothing drifted).
func (pl *planner) refreshView(rs *roleServers) *reaperkv.RefreshReport {
	rr := pl.refresh[rs.role.Name]
	if rr == nil {
		return nil
	}
	off := pl.offSpec(rs, rr.spec)
	v := &reaperkv.RefreshReport{State: "auto", Spec: rr.spec, OnSpec: pl.onSpec(rs, rr.spec), Desired: pl.desired(rs.role), Remaining: off,
		MinHealthyPercent: rr.minHealthy, Batch: pl.refreshBatch(rs, rr), Why: rr.hold}
	switch {
	case rr.rec != nil:
		v.State, v.Rollback = rr.rec.State, rr.rec.Rollback
		if rr.remove {
			v.State = "done"
		}
		if c := rr.rec.Continued; c < len(rr.rec.Checkpoints) {
			v.Checkpoint = rr.rec.Checkpoints[c]
		}
	case !rr.replacing || off == 0:
		if rr.hold == "" {
			return nil
		}
		v.State = "held"
	}
	return v
}

// refreshBatch is how many drifted servers the refresh replaces at a
// time: the desired count less the min-healthy share of it, at least 1,
// at most max_in_flight.
func (pl *planner) refreshBatch(rs *roleServers, rr *roleRefresh) int {
	want := pl.desired(rs.role)
	batch := want - (want*rr.minHealthy+99)/100
	return min(max(batch, 1), pl.in.Config.MaxInFlight)
}
