package daemon

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/reaper"
	"github.com/jiocloud/orchestrate/reaper/planner"
)

const (
	// budgetWindow is the sliding window of max_actions_per_hour.
	budgetWindow = time.Hour
	// maxBlockedReported caps the blocked actions written to the state
	// key: a fleet-wide pause blocks one action per server, and the key
	// must stay readable in `orchestrate status` and well under Consul's
	// 512 KiB limit on a value, whatever the fleet's size.
	maxBlockedReported = 100
	// armReason is recorded when the reaper opens the start gate itself.
	armReason = "every role reached its desired count with validation success"
)

// Cycle runs one observe-plan-act round as the holder of session. It is
// exported for tests and for a one-shot run; Run calls it every interval.
// Successive calls with one session share the leader's memory.
func (r *Reaper) Cycle(ctx context.Context, session string) *reaper.Plan {
	if r.term == nil || r.term.session != session {
		r.term = newTerm(session, r.now())
	}
	return r.cycle(ctx, r.term)
}

// cycle observes, plans, carries out the plan, and reports it.
func (r *Reaper) cycle(ctx context.Context, t *leaderTerm) *reaper.Plan {
	start := r.now()
	r.status.startCycle()
	obs, err := r.observe(ctx)
	if err != nil {
		r.cycleSkipped(ctx, t, start, err)
		return nil
	}
	obs.specProblems, obs.specErrs = r.keepSpecs(ctx, t, obs.keys)
	plan := r.plan(t, obs, start)
	errs := r.act(ctx, t, plan, obs, start)
	r.report(ctx, t, plan, obs.keys.Entries, errs)
	r.metrics.fleetCycle(r.cfg, plan, obs.fleet)
	return plan
}

// plan runs the planner on what was observed, keeps its memory for the
// next cycle, and logs what changed since the last one.
func (r *Reaper) plan(t *leaderTerm, obs *observation, start time.Time) *reaper.Plan {
	t.seedAutoscale(obs.keys.Report)
	t.capacity = obs.scaling.Capacity
	in := reaper.Input{
		Now: start, Config: r.cfg, Servers: obs.servers, Checks: obs.checks,
		Desired: obs.desired, Journal: obs.keys.Entries, Armed: obs.keys.Armed != nil,
		ArmKeyWritten: obs.keys.ArmKeyWritten, ArmProblem: obs.keys.ArmProblem,
		Validated: obs.validated, ReportingValidation: obs.reporting, Recorded: withTokens(obs.recorded, obs.keys.Tokens), Suspect: obs.suspect, ProvisionFailed: obs.provisionFailed, HostRecords: obs.hostRecords, TooManyRecords: obs.tooMany, Memory: t.memory, Destructive: obs.keys.Destructive,
		BackoffUntil: t.quota.until, PoolBackoffUntil: t.pool.until, PoolFlush: obs.keys.Flush, PoolFlushProblems: obs.keys.FlushProblems, PoolRecords: poolByHost(obs.keys.Pool), RoleBackoff: t.roleBackoffs(), DeleteBackoff: t.deleteBackoffs(obs.keys.Entries),
		TermStart: t.started,
		Scaling:   obs.scaling, Metrics: obs.metrics, Autoscale: t.autoscale,
		DrainAborts: obs.keys.Cooloff, DrainAbortProblems: obs.keys.CooloffProblems,
		Refresh: obs.keys.Refresh, RefreshProblems: obs.keys.RefreshProblems, Specs: obs.keys.Specs, SpecProblems: obs.specProblems,
		Hooks: obs.hooks, LaunchBackoff: t.launchBackoffs(),
		ZoneBackoff: t.zoneBackoffs(), ServerGroups: obs.keys.ServerGroups, ServerGroupProblems: obs.keys.ServerGroupProblems,
		Holds: obs.keys.Holds, HoldProblems: obs.keys.HoldProblems,
	}
	t.groups = maps.Clone(obs.keys.ServerGroups)
	if t.groups == nil {
		t.groups = map[string]reaperkv.ServerGroupRecord{}
	}
	plan := planner.Plan(in)
	if t.lastCycleErr != "" {
		r.log.Info("cycle data readable again")
		t.lastCycleErr = ""
	}
	t.memory = plan.Memory
	r.noteDecisions(t, plan)
	r.noteHolds(t, plan)
	r.noteSilent(t, plan)
	r.noteHeld(t, plan, obs.keys.Report)
	if plan.PauseReason != t.lastPause {
		if plan.Paused {
			r.log.Warn("pausing destructive actions", "reason", plan.PauseReason)
			r.record(t, reaperkv.Activity{Kind: reaperkv.ActivityPause, Reason: plan.PauseReason, Result: "done"})
		} else {
			r.log.Info("pause over: destructive actions allowed again")
			r.record(t, reaperkv.Activity{Kind: reaperkv.ActivityResume, Reason: "pause over: destructive actions allowed again", Result: "done"})
		}
		t.lastPause = plan.PauseReason
	}
	if plan.NotArmedReason != t.lastNotArmed {
		if plan.NotArmedReason != "" {
			r.log.Info("start gate closed", "reason", plan.NotArmedReason)
		}
		t.lastNotArmed = plan.NotArmedReason
	}
	return plan
}

// act opens the start gate if the plan says so and carries out the plan's
// actions (or logs them in a dry run); it returns what went wrong.
func (r *Reaper) act(ctx context.Context, t *leaderTerm, plan *reaper.Plan, obs *observation, start time.Time) []string {
	dry := r.cfg.IsDryRun()
	errs := obs.specErrs
	if plan.ArmNow && !dry {
		if err := r.journal.Arm(ctx, t.session, reaper.Armed{Time: start, By: r.id, Reason: armReason}); err != nil {
			errs = append(errs, "arm: "+err.Error())
		} else {
			r.log.Info("start gate open: " + armReason)
			r.record(t, reaperkv.Activity{Kind: reaperkv.ActivityArm, Reason: armReason, Result: "done"})
		}
	}
	errs = append(errs, r.applyScaling(ctx, t, plan, dry)...)
	errs = append(errs, r.runActions(ctx, t, plan, obs, start, dry)...)
	errs = append(errs, r.applyHolds(ctx, t, plan, dry)...)
	if ctx.Err() == nil {
		if err := r.journal.SyncPool(ctx, t.session, plan.Standbys, obs.keys.Pool); err != nil {
			errs = append(errs, "warm pool records: "+err.Error())
		}
	}
	if ctx.Err() == nil && !dry {
		if err := r.endCooloffs(ctx, t, plan.CooloffEnded); err != nil {
			errs = append(errs, "aborted-drain records: "+err.Error())
		}
		if err := r.sweepHooks(ctx, t, plan.HookSweep); err != nil {
			errs = append(errs, "lifecycle hook records: "+err.Error())
		}
		if err := r.pruneDeparted(ctx, t, obs.keys.Departed, start); err != nil {
			errs = append(errs, "departed records: "+err.Error())
		}
	}
	errs = append(errs, r.recordFlushes(ctx, t, plan, dry)...)
	errs = append(errs, r.writeRefreshes(ctx, t, plan, dry)...)
	if ctx.Err() == nil && !dry {
		errs = append(errs, r.sweepTokens(ctx, t, obs, start)...)
		errs = append(errs, r.renewGrants(ctx, obs, start)...)
	}
	t.noteClaims(plan.Claims, start)
	r.flushHistory(ctx, t)
	return errs
}

// runActions carries out the plan's actions in order, within the hour's
// destructive budget, and returns what failed. A dry run only logs each
// one; a create held back by a backoff (the role's, or the pool's for a
// standby) is skipped; one the cloud accepted but has not carried out is
// looked at again next cycle; the end of ctx, or a failure that says the
// leadership is lost, stops the rest.
func (r *Reaper) runActions(ctx context.Context, t *leaderTerm, plan *reaper.Plan, obs *observation, start time.Time, dry bool) []string {
	var errs []string
	budget := recent(obs.keys.Destructive, start)
	for _, a := range plan.Actions {
		if dry {
			r.log.Info("dry run: would "+string(a.Op), "role", a.Entry.Role, "action", a.String(), "entry", a.Entry.ID)
			r.metrics.action(a.Op, "dry_run")
			continue
		}
		if ctx.Err() != nil {
			break
		}
		if a.Op == reaper.OpCreate && (t.createHeldBack(a.Entry.Role, a.Entry.Zone, start) || (a.Entry.Standby && start.Before(t.pool.until))) {
			r.metrics.action(a.Op, "skipped")
			continue
		}
		err := r.execute(ctx, t, a, &budget)
		if errors.Is(err, errPending) {
			r.metrics.action(a.Op, "pending")
			r.recordAction(t, a, "pending", nil)
			r.log.Info(string(a.Op)+": accepted, not carried out yet; looked at again each cycle", "role", a.Entry.Role, "action", a.String(), "entry", a.Entry.ID)
			continue
		}
		if err != nil {
			r.metrics.action(a.Op, "failed")
			r.recordAction(t, a, "failed", err)
			var refused *refusedError
			if !errors.As(err, &refused) || refused.first {
				r.log.Error("action failed", "action", a.String(), "entry", a.Entry.ID, "err", err)
			}
			errs = append(errs, a.String()+": "+err.Error())
			if errors.Is(err, ErrNotLeader) {
				break
			}
			continue
		}
		r.metrics.action(a.Op, "done")
		r.recordAction(t, a, "done", nil)
		if a.Op != reaper.OpRepair { // counted at its intent
			r.repairCounted(a)
		}
		if a.Op != reaper.OpMaintain && a.Op != reaper.OpAbort { // an abort logs its own line
			r.log.Info(string(a.Op), "role", a.Entry.Role, "action", a.String(), "entry", a.Entry.ID)
		}
		if r.opts.afterAction != nil {
			r.opts.afterAction(a)
		}
	}
	return errs
}

// recordFlushes writes back the warm pool flush requests: one the plan
// acknowledges (FlushSeen) is stamped, one it carried out (FlushDone) is
// deleted. Nothing is written in a dry run or once ctx ended; it returns
// what failed.
func (r *Reaper) recordFlushes(ctx context.Context, t *leaderTerm, plan *reaper.Plan, dry bool) []string {
	var errs []string
	for i, f := range append(plan.FlushSeen[:len(plan.FlushSeen):len(plan.FlushSeen)], plan.FlushDone...) {
		if dry || ctx.Err() != nil {
			break
		}
		done := i >= len(plan.FlushSeen)
		msg := "warm pool flush: replacing every standby made before now, one at a time"
		if done {
			msg = "warm pool flushed: every standby made before the request was replaced"
		}
		if err := r.journal.Flush(ctx, t.session, f, done); err != nil {
			errs = append(errs, "pool flush of "+f.Role+": "+err.Error())
		} else {
			r.log.Info(msg, "role", f.Role, "requested_by", f.Record.By, "reason", f.Record.Reason)
		}
	}
	return errs
}

// report writes the cycle's state key, metrics and heartbeat status.
func (r *Reaper) report(ctx context.Context, t *leaderTerm, plan *reaper.Plan, journal []reaper.Entry, errs []string) {
	now := r.now()
	st := r.state(t, plan, journal, now, errs)
	if ctx.Err() == nil {
		if err := r.journal.PutState(ctx, t.session, st); err != nil {
			r.log.Warn("write state", "err", err)
		}
	}
	if ctx.Err() == nil && now.Sub(t.rang) >= r.cfg.HeartbeatInterval.D() {
		// Rung in a dry run too: it changes nothing but the nodes'
		// heartbeat records, and a dry run reports silent hosts as well.
		if err := r.journal.RingHeartbeat(ctx, t.session, r.id, now); err != nil {
			r.log.Warn("ring the heartbeat", "err", err)
		} else {
			t.rang = now
		}
	}
	roleLeft := map[string]time.Duration{}
	for role, b := range t.roleBackoff {
		roleLeft[role] = b.until.Sub(now)
	}
	for role, b := range t.launchBackoff {
		roleLeft[role] = max(roleLeft[role], b.until.Sub(now))
	}
	r.metrics.cycle(plan, r.cfg.IsDryRun(), t.quota.until.Sub(now), roleLeft, r.status.sinceCycleStart(), now)
	zoneLeft := map[[2]string]time.Duration{}
	for role, zones := range t.zoneBackoff {
		for z, b := range zones {
			zoneLeft[[2]string{role, z}] = b.until.Sub(now)
		}
	}
	r.metrics.zones(zoneLeft)
	var exhausted []string
	for _, rr := range plan.Roles {
		if c, ok := t.capacity[rr.Name]; ok {
			exhausted = append(exhausted, fmt.Sprintf("role %s since %s (%s: %s)", rr.Name, c.Since.Format(time.RFC3339), c.Class, c.Reason))
		}
	}
	r.status.setCapacity(strings.Join(exhausted, "; "))
	r.status.endCycle(errs)
}

// cycleSkipped reports a cycle that took no action: its data could not be read.
func (r *Reaper) cycleSkipped(ctx context.Context, t *leaderTerm, start time.Time, err error) {
	if ctx.Err() != nil {
		return // stopping, or lost the lock: not a failure of the data
	}
	// One line per change of the problem, not per cycle.
	if err.Error() != t.lastCycleErr {
		r.log.Error("cycle skipped: no action on data that could not be read", "err", err)
	} else {
		r.log.Debug("cycle skipped again", "err", err)
	}
	t.lastCycleErr = err.Error()
	r.metrics.cycleSkipped(r.cfg.IsDryRun(), r.status.sinceCycleStart(), r.now())
	r.status.endCycle([]string{err.Error()})
	st := &reaperkv.ReaperReport{Time: start, Leader: r.id, DryRun: r.cfg.IsDryRun(), Interval: r.cfg.Interval.D(),
		Planned: []string{}, Actions: []reaperkv.PlanAction{}, Errors: []string{"cycle skipped: " + err.Error()}}
	if perr := r.journal.PutState(ctx, t.session, st); perr != nil {
		r.log.Debug("write state", "err", perr)
	}
}

// poolByHost indexes the standby records by host.
func poolByHost(recs map[string]reaperkv.StandbyRecord) map[string]reaperkv.StandbyRecord {
	out := make(map[string]reaperkv.StandbyRecord, len(recs))
	for _, rec := range recs {
		out[rec.Host] = rec
	}
	return out
}

// recent is the destructive actions started within the budget window.
func recent(ts []time.Time, now time.Time) []time.Time {
	out := []time.Time{}
	for _, t := range ts {
		if now.Sub(t) < budgetWindow {
			out = append(out, t)
		}
	}
	return out
}

// state is the report of one cycle, for the state key.
func (r *Reaper) state(t *leaderTerm, p *reaper.Plan, journal []reaper.Entry, now time.Time, errs []string) *reaperkv.ReaperReport {
	st := &reaperkv.ReaperReport{
		Time: now, Leader: r.id, DryRun: r.cfg.IsDryRun(), Interval: r.cfg.Interval.D(),
		Armed: p.Armed, NotArmedReason: p.NotArmedReason, Paused: p.Paused, PauseReason: p.PauseReason,
		Roles: p.Roles, Unassigned: p.Unassigned, Blocked: p.Blocked, Journal: journal, Errors: errs,
		Terms: t.termsNow(r.id, now),
	}
	r.noteChurn(st.Terms)
	if now.Before(t.quota.until) {
		st.BackoffUntil, st.BackoffReason = t.quota.until, t.quota.reason
	}
	for role, b := range t.roleBackoff {
		if now.Before(b.until) {
			if st.RoleBackoff == nil {
				st.RoleBackoff = map[string]reaperkv.RoleBackoff{}
			}
			st.RoleBackoff[role] = reaperkv.RoleBackoff{Until: b.until, Reason: b.reason}
		}
	}
	for role, b := range t.launchBackoff {
		if now.Before(b.until) {
			if st.LaunchBackoff == nil {
				st.LaunchBackoff = map[string]reaperkv.RoleBackoff{}
			}
			st.LaunchBackoff[role] = reaperkv.RoleBackoff{Until: b.until, Reason: b.reason, Step: b.step}
		}
	}
	// The capacity records as they stand after this cycle's creates.
	st.Roles = append([]reaperkv.RoleReport(nil), st.Roles...)
	t.zoneReport(st.Roles, now)
	for i := range st.Roles {
		if pool := st.Roles[i].Pool; pool != nil {
			c := *pool
			c.Claims = t.claims[st.Roles[i].Name]
			st.Roles[i].Pool = &c
		}
		st.Roles[i].Capacity = nil
		if c, ok := t.capacity[st.Roles[i].Name]; ok {
			st.Roles[i].Capacity = &c
		}
	}
	st.Planned, st.Actions = plannedActions(p)
	if len(st.Blocked) > maxBlockedReported {
		st.Blocked = append(st.Blocked[:maxBlockedReported], fmt.Sprintf("... and %d more", len(p.Blocked)-maxBlockedReported))
	}
	st.Actions = append(st.Actions, p.Held[:min(len(p.Held), maxBlockedReported)]...)
	return st
}

// plannedActions is the plan's actions (maintenance re-asserted aside)
// and desired counts changed, as the report's lines and as data.
func plannedActions(p *reaper.Plan) ([]string, []reaperkv.PlanAction) {
	lines, acts := []string{}, []reaperkv.PlanAction{}
	for _, a := range p.Actions {
		if a.Op == reaper.OpMaintain {
			continue
		}
		lines = append(lines, a.String())
		acts = append(acts, reaperkv.PlanAction{Op: string(a.Op), Role: a.Entry.Role, Host: a.Target(), Reason: a.Reason, Text: a.String()})
	}
	for _, c := range p.Scale {
		lines = append(lines, c.String())
		acts = append(acts, reaperkv.PlanAction{Op: reaperkv.PlanScale, Role: c.Role, Reason: fmt.Sprintf("from %d to %d: %s", c.From, c.To, c.Reason), Text: c.String()})
	}
	return lines, acts
}
