package orchestrate

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/internal/store/schema"
)

// roleBuilder builds each role's view from what one screen read.
type roleBuilder struct {
	in       *statusInput
	st       *reaperkv.ReaperReport // nil: no report
	stale    bool
	now      time.Time
	hosts    []hostReport
	roleOf   map[string]string
	rollouts []rolloutReport
}

// role is the view of role name; "" is the hosts of no role.
func (b roleBuilder) role(name string) roleView {
	rv := newRoleView(name)
	b.addHosts(&rv)
	rr := b.reportOf(name)
	if rr != nil {
		b.addReport(&rv, rr)
	}
	if d, ok := b.in.snap.Desired[name]; ok {
		rv.Desired = d
	}
	if name != "" {
		b.addRollout(&rv)
		b.addPlans(&rv)
		b.addScaling(&rv, rr)
	}
	rv.Issues = roleIssues(rv, rr)
	switch {
	case len(rv.Issues) > 0:
		rv.State = roleProblem
	case len(rv.InFlight)+len(rv.Next)+len(rv.HeldBack)+len(rv.Drains)+rv.Drifted > 0 || rolloutBusy(rv.Rollout):
		rv.State = roleBusy
	default:
		rv.State = roleHealthy
	}
	if rv.State != roleHealthy {
		rv.Holds = b.holds(rv)
	}
	return rv
}

// reportOf is role name in the reaper's report (nil: not there).
func (b roleBuilder) reportOf(name string) *reaperkv.RoleReport {
	if b.st == nil || name == "" {
		return nil
	}
	for i := range b.st.Roles {
		if b.st.Roles[i].Name == name {
			return &b.st.Roles[i]
		}
	}
	return nil
}

// addHosts adds the role's hosts, their failures, suspects and checks.
func (b roleBuilder) addHosts(rv *roleView) {
	suspects := b.in.snap.Suspects()
	mine := map[string]bool{}
	for _, h := range b.hosts {
		if h.Role != rv.Name {
			continue
		}
		mine[h.Host] = true
		rv.Hosts = append(rv.Hosts, h.Host)
		if _, ok := suspects[h.Host]; ok {
			rv.Suspects = append(rv.Suspects, h.Host)
		}
		rv.Checks = append(rv.Checks, h.Checks...)
	}
	for _, f := range b.in.snap.Failures() {
		if mine[f.Host] {
			rv.Failures = append(rv.Failures, f)
		}
	}
}

// addReport adds what the reaper's report says of the role.
func (b roleBuilder) addReport(rv *roleView, rr *reaperkv.RoleReport) {
	rv.Reported, rv.Desired, rv.Servers, rv.Serving, rv.MinHealthy, rv.Drifted = true, rr.Desired, rr.Count, rr.Healthy, rr.MinHealthy, rr.Drifted
	if !b.stale {
		for _, m := range rr.Silent {
			rv.Silent = append(rv.Silent, m.Host)
		}
		if n := rr.SilentCount - len(rr.Silent); n > 0 {
			rv.Silent = append(rv.Silent, fmt.Sprintf("+%d more", n))
		}
	}
	if p := rr.Pool; p != nil {
		rv.PoolReady, rv.PoolSize = p.States[reaperkv.StandbyReady], p.Size
		if p.Why != "" && rv.PoolReady < p.Size {
			rv.Notes = append(rv.Notes, "warm pool not refilled: "+p.Why)
		}
	}
	for _, s := range rr.Attention {
		if s.State == reaperkv.ServerSuspect && !slices.Contains(rv.Suspects, s.Name) {
			rv.Suspects = append(rv.Suspects, s.Name)
		}
	}
	for _, h := range rr.Held {
		rv.Notes = append(rv.Notes, fmt.Sprintf("HELD for a human (%d of max_held %d): %s", len(rr.Held), rr.MaxHeld, h.String()))
	}
	for _, a := range rr.DrainAborts {
		rv.Notes = append(rv.Notes, "drain ABORTED: "+a.String())
	}
	if p := rr.Placement; p != nil && (p.GroupProblem != "" || len(p.ZoneBackoff) > 0) {
		rv.Notes = append(rv.Notes, placementLines(p)...)
	}
	if rf := rr.Refresh; rf != nil {
		rv.Notes = append(rv.Notes, rf.String())
	}
	if line := driftLine(*rr); line != "" {
		rv.Notes = append(rv.Notes, line)
	}
	for _, m := range rr.Orphaned {
		rv.Notes = append(rv.Notes, fmt.Sprintf("%s ORPHANED: records and no server for %s, removed in %s", m.Host, age(b.now, m.Since), until(b.now, m.Until)))
	}
	if a := rr.Autoscale; a != nil {
		rv.Autoscale = &autoscaleView{Source: a.Source, Metric: a.Metric, Target: a.Target, Min: a.Min, Max: a.Max}
		if a.Last != nil {
			rv.Autoscale.Last = decisionLine(*a.Last)
		}
	}
	rv.Capacity = rr.Capacity
}

// addRollout adds the role's rollout of the current version.
func (b roleBuilder) addRollout(rv *roleView) {
	for i := range b.rollouts {
		if b.rollouts[i].Role == rv.Name {
			r := b.rollouts[i]
			rv.Rollout = &r
		}
	}
}

// rolloutBusy: hosts of the rollout are at work on the version.
func rolloutBusy(r *rolloutReport) bool {
	return r != nil && len(r.InUse)+len(r.Fresh)+r.Pending > 0
}

// addPlans adds the reaper's operations in flight, and its actions
// planned and held back, for the role: those the report gives the role,
// or a host of the role (a report from a reaper older than the actions
// list gives none: its lines are shown under the reaper, unassigned).
func (b roleBuilder) addPlans(rv *roleView) {
	if b.st == nil {
		return
	}
	for _, j := range b.st.Journal {
		if j.Role == rv.Name {
			rv.InFlight = append(rv.InFlight, journalLine(j))
		}
	}
	for _, a := range b.st.Actions {
		if a.Role != rv.Name && (a.Role != "" || a.Host == "" || b.roleOf[a.Host] != rv.Name) {
			continue
		}
		rv.Actions = append(rv.Actions, a)
		if a.Held {
			rv.HeldBack = append(rv.HeldBack, planText(a))
		} else {
			rv.Next = append(rv.Next, planText(a))
		}
	}
}

// planText is an action on one line, its role left out: "replace web2
// (unhealthy)", and "... waits: paused" when it is held back.
func planText(a reaperkv.PlanAction) string {
	parts := []string{}
	for _, p := range []string{a.Op, a.Host} {
		if p != "" {
			parts = append(parts, p)
		}
	}
	if a.Reason != "" {
		parts = append(parts, "("+a.Reason+")")
	}
	s := strings.Join(parts, " ")
	if why := cmp.Or(a.WhyText, string(a.Why), "(no reason given)"); a.Held {
		s += " waits: " + why
	}
	return s
}

// journalLine is one operation in flight: "replace db2 -> db4, draining".
func journalLine(j reaperkv.JournalEntry) string {
	what := string(j.Kind)
	switch {
	case j.OldName != "" && j.NewName != "":
		what += " " + j.OldName + " -> " + j.NewName
	case j.OldName != "":
		what += " " + j.OldName
	case j.NewName != "":
		what += " " + j.NewName
	}
	what += ", " + string(j.Phase)
	if h := hookWait(j); h != "" {
		what += ", " + h
	}
	return what + " (" + j.Reason + ")"
}

// addScaling adds the role's drains, capacity and, for an autoscaled
// role only, its override.
func (b roleBuilder) addScaling(rv *roleView, rr *reaperkv.RoleReport) {
	sc := b.in.snap.Scaling
	for _, h := range sortedKeys(sc.Drains) {
		if d := sc.Drains[h]; d.Role == rv.Name {
			rv.Drains = append(rv.Drains, drainLine(h, d, b.now))
		}
	}
	if named := sortedKeys(sc.ScaleIn[rv.Name]); len(named) > 0 {
		rv.Notes = append(rv.Notes, "named for scale-in: "+strings.Join(named, ", "))
	}
	for _, h := range sortedKeys(sc.Protected) {
		if slices.Contains(rv.Hosts, h) {
			p := sc.Protected[h]
			rv.Notes = append(rv.Notes, fmt.Sprintf("protected from scale-in: %s (by %s: %s)", h, orDash(p.By), orDash(p.Reason)))
		}
	}
	if c, ok := sc.Capacity[rv.Name]; ok && rv.Capacity == nil {
		rv.Capacity = &c
	}
	if o, ok := sc.Overrides[rv.Name]; ok && rr != nil && rr.Autoscale != nil {
		rv.Override = &o
	}
}

// roleIssues says what is wrong with a role, one phrase each.
func roleIssues(rv roleView, rr *reaperkv.RoleReport) []string {
	out := []string{}
	add := func(ok bool, format string, args ...any) {
		if ok {
			out = append(out, fmt.Sprintf(format, args...))
		}
	}
	if rr != nil {
		add(rv.Serving < rv.Desired, "serving %d of %d", rv.Serving, rv.Desired)
		add(rv.MinHealthy > 0 && rv.Serving < rv.MinHealthy, "below min-healthy %d", rv.MinHealthy)
		for _, s := range badServerStates {
			add(rr.States[s] > 0, "%d %s", rr.States[s], s)
		}
		add(len(rr.Held) > 0, "%d held", len(rr.Held))
		add(len(rr.DrainAborts) > 0, "%d drains aborted", len(rr.DrainAborts))
		add(rr.Placement != nil && rr.Placement.GroupProblem != "", "server group problem")
		add(rr.Placement != nil && len(rr.Placement.ZoneBackoff) > 0, "zones backed off")
	}
	add(len(rv.Failures) > 0, "%d failed", len(rv.Failures))
	add(len(rv.Suspects) > 0, "%d suspect", len(rv.Suspects))
	add(len(rv.Silent) > 0, "%d silent", max(len(rv.Silent), silentCount(rr)))
	if n := criticalHosts(rv.Checks); n > 0 {
		add(true, "critical checks on %d %s", n, plural(n, "host", "hosts"))
	}
	add(rv.Capacity != nil, "capacity exhausted")
	if r := rv.Rollout; r != nil {
		add(r.Halted != "", "rollout halted")
		add(len(r.Unreadable) > 0, "unreadable rollout records")
	}
	return out
}

// badServerStates are the reaper's server states that are a problem.
var badServerStates = []string{reaperkv.ServerCriticalInGrace, reaperkv.ServerAbsentInGrace, reaperkv.ServerUnhealthy, reaperkv.ServerUnaccounted,
	reaperkv.ServerProvisionFailed, reaperkv.ServerErrorInGrace, reaperkv.ServerError, reaperkv.ServerUnknown}

func silentCount(rr *reaperkv.RoleReport) int {
	if rr == nil {
		return 0
	}
	return rr.SilentCount
}

// criticalHosts counts the hosts with a critical check.
func criticalHosts(checks []nodeCheck) int {
	hosts := map[string]bool{}
	for _, c := range checks {
		if c.Status == api.HealthCritical {
			hosts[c.Node] = true
		}
	}
	return len(hosts)
}

// holds says why the reaper does nothing for a role now, first reason
// first ("" when nothing holds it). A reason of the whole reaper is
// shown once, among the alerts: the role only points at it.
func (b roleBuilder) holds(rv roleView) string {
	st := b.st
	switch {
	case st == nil:
		return ""
	case b.stale:
		return "no reaper leader is running cycles (above)"
	case !st.Armed:
		return "not armed (above)"
	case st.Paused:
		return "paused (above)"
	case st.BackoffUntil.After(b.now):
		return "quota backoff (above)"
	}
	if bo, ok := st.RoleBackoff[rv.Name]; ok && bo.Until.After(b.now) {
		return fmt.Sprintf("creates held back for %s: %s", until(b.now, bo.Until), bo.Reason)
	}
	if bo, ok := st.LaunchBackoff[rv.Name]; ok && bo.Until.After(b.now) {
		return fmt.Sprintf("creates and claims held back for %s: %s", until(b.now, bo.Until), bo.Reason)
	}
	if rv.Capacity != nil {
		return "capacity exhausted (above)"
	}
	if b := budgetSpent(rv.Actions); b != "" {
		return "budget spent: " + b
	}
	if rv.Rollout != nil && rv.Rollout.Halted != "" {
		return "rollout halted: `orchestrate rollout resume " + rv.Name + "` lifts it"
	}
	return ""
}

// drainLine is one drain of the role: host, why, and its answer.
func drainLine(host string, d schema.DrainRecord, now time.Time) string {
	ans := "no answer yet, deadline in " + until(now, d.Deadline) + "; " + drainEnds(d)
	if a := d.Answer; a != nil && a.Drained {
		ans = fmt.Sprintf("drained (%s at %s)", a.By, a.Time.UTC().Format(time.RFC3339))
	} else if a != nil {
		ans = "moving the work away FAILED (" + a.By + ": " + a.Detail + "): " + drainOutcome(d.OnFailure)
	}
	return strings.TrimSpace(fmt.Sprintf("%s (%s): %s", host, d.Reason, ans))
}

// drainEnds says what a failed answer, and no answer by the deadline,
// lead to.
func drainEnds(d schema.DrainRecord) string {
	return "failed: " + drainOutcome(d.OnFailure) + "; no answer: " + drainOutcome(d.OnTimeout)
}

// drainOutcome is what a drain's failure policy does to the server (a
// request written before the policies existed says neither: delete).
func drainOutcome(policy string) string {
	if policy == reaperkv.DrainAbort {
		return "the server stays"
	}
	return "deleted"
}

// budgetSpent is the spent budget (max_actions_per_hour or
// max_creates_per_cycle) that holds one of actions back, in the reaper's
// words ("" when none does).
func budgetSpent(actions []reaperkv.PlanAction) string {
	for _, a := range actions {
		if a.Held && a.Why.IsBudget() {
			return a.WhyText
		}
	}
	return ""
}

// plural is one when n is 1, else many.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
