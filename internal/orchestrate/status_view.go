package orchestrate

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jiocloud/orchestrate/internal/exitcode"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/internal/store/schema"
)

// statusReport is `orchestrate status --json` (schema 1, documented in
// docs/orchestrate.md): lists are [] and maps {} when empty, never null.
type statusReport struct {
	Schema         int       `json:"schema"`
	Time           time.Time `json:"time"`
	Datacenter     string    `json:"datacenter"`
	CurrentVersion string    `json:"current_version"`
	// Alerts are what is wrong beyond any one role (the reaper not armed,
	// paused, stale; values orchestrate did not write).
	Alerts []string `json:"alerts"`
	// ProblemCount counts the alerts and the roles with a problem: what
	// makes --problems exit 1.
	ProblemCount int `json:"problem_count"`
	// Roles: those with a problem first, then busy ones, then healthy.
	Roles []roleView `json:"roles"`
	// Unassigned is the hosts of no role known, as a role without a name.
	Unassigned roleView        `json:"unassigned"`
	Hosts      []hostReport    `json:"hosts"`
	Summary    statusSummary   `json:"summary"`
	Problems   []store.Problem `json:"problems"`
	Reaper     *reaperReport   `json:"reaper"`
	// Rollouts are the roles' rollouts of the current version.
	Rollouts []rolloutReport `json:"rollouts"`
	// Scaling is what KV holds for scaling: exhausted capacity, counts
	// set by hand, protected hosts, drains and hosts named for scale-in.
	Scaling scalingView `json:"scaling"`
}

// scalingView is the scaling part of the status (nodes' metric reports
// left out: each is under its host's records, hosts/<host>/metrics/).
type scalingView struct {
	Capacity  map[string]schema.CapacityRecord            `json:"capacity"`
	Overrides map[string]schema.Override                  `json:"overrides"`
	Protected map[string]schema.Protection                `json:"protected"`
	Drains    map[string]schema.DrainRecord               `json:"drains"`
	ScaleIn   map[string]map[string]schema.ScaleInRequest `json:"scale_in"`
}

// Role states on the screen.
const (
	roleProblem = "problem"
	roleBusy    = "busy"
	roleHealthy = "healthy"
)

// roleView is one role on the screen.
type roleView struct {
	Name string `json:"name"`
	// State is problem (Issues says what), busy (the reaper or a rollout
	// is at work) or healthy.
	State  string   `json:"state"`
	Issues []string `json:"issues"`
	// Reported: the reaper's report has the role; the counts below are
	// its (else 0).
	Reported   bool `json:"reported"`
	Desired    int  `json:"desired"`
	Servers    int  `json:"servers"`
	Serving    int  `json:"serving"`
	MinHealthy int  `json:"min_healthy"`
	// Hosts are the role's hosts as orchestrate knows them.
	Hosts    []string        `json:"hosts"`
	InFlight []string        `json:"in_flight"`
	Drifted  int             `json:"drifted"`
	Suspects []string        `json:"suspects"`
	Silent   []string        `json:"silent"`
	Failures []store.Failure `json:"failures"`
	// Checks are the role's hosts' Consul checks that do not pass.
	Checks []nodeCheck `json:"checks"`
	// PoolReady and PoolSize are the warm pool's ready standbys and its
	// size (0: no pool).
	PoolReady int            `json:"pool_ready"`
	PoolSize  int            `json:"pool_size"`
	Rollout   *rolloutReport `json:"rollout,omitempty"`
	// Autoscale is the role's policy and last decision, when autoscaled;
	// Override the count set by hand that holds it.
	Autoscale *autoscaleView         `json:"autoscale,omitempty"`
	Override  *schema.Override       `json:"override,omitempty"`
	Capacity  *schema.CapacityRecord `json:"capacity,omitempty"`
	Drains    []string               `json:"drains"`
	Notes     []string               `json:"notes"`
	// Next are the reaper's planned actions for the role; HeldBack what it
	// would do and a rule stops; Holds why it does nothing now ("" when
	// nothing holds it).
	Next     []string `json:"next"`
	HeldBack []string `json:"held_back"`
	Holds    string   `json:"holds,omitempty"`
	// Actions are Next and HeldBack as the reaper reported them, as data
	// (docs/json.md, reaper status: actions).
	Actions []reaperkv.PlanAction `json:"actions"`
}

// newRoleView is a role with nothing known yet, its lists empty.
func newRoleView(name string) roleView {
	return roleView{Name: name, Issues: []string{}, Hosts: []string{}, InFlight: []string{}, Suspects: []string{}, Silent: []string{},
		Failures: []store.Failure{}, Checks: []nodeCheck{}, Drains: []string{}, Notes: []string{}, Next: []string{}, HeldBack: []string{},
		Actions: []reaperkv.PlanAction{}}
}

// autoscaleView is an autoscaled role's policy and last decision.
type autoscaleView struct {
	Source string  `json:"source"`
	Metric string  `json:"metric"`
	Target float64 `json:"target"`
	Min    int     `json:"min"`
	Max    int     `json:"max"`
	Last   string  `json:"last"`
}

// nodeCheck is a Consul check of a node that does not pass.
type nodeCheck struct {
	Node    string `json:"node"`
	Name    string `json:"name"`
	ID      string `json:"id"`
	Status  string `json:"status"`
	Service string `json:"service"`
}

// buildStatus is the screen's model of what was read, at now.
func buildStatus(in *statusInput, now time.Time) statusReport {
	st := reportState(in.reaper)
	roleOf := hostRoles(in, st)
	hosts, sum := hostReports(in, roleOf)
	sc := in.snap.Scaling
	rep := statusReport{Schema: statusSchema, Time: now.UTC(), Datacenter: in.catalog.Datacenter, CurrentVersion: in.snap.CurrentVersion,
		Hosts: hosts, Summary: sum, Problems: orEmpty(in.snap.Problems), Reaper: in.reaper,
		Rollouts: statusRollouts(in), Roles: []roleView{},
		Scaling: scalingView{Capacity: sc.Capacity, Overrides: sc.Overrides, Protected: sc.Protected, Drains: sc.Drains, ScaleIn: sc.ScaleIn}}
	b := roleBuilder{in: in, st: st, stale: in.reaper.Stale, now: now, hosts: hosts, roleOf: roleOf, rollouts: rep.Rollouts}
	for _, name := range roleNames(in, st) {
		rep.Roles = append(rep.Roles, b.role(name))
	}
	sort.SliceStable(rep.Roles, func(i, j int) bool { return stateRank(rep.Roles[i].State) < stateRank(rep.Roles[j].State) })
	rep.Unassigned = b.role("")
	rep.Alerts = alerts(in, now)
	rep.count()
	return rep
}

// count sets ProblemCount.
func (r *statusReport) count() {
	r.ProblemCount = len(r.Alerts)
	for _, rv := range append(r.Roles, r.Unassigned) {
		if rv.State == roleProblem {
			r.ProblemCount++
		}
	}
}

func stateRank(s string) int {
	return map[string]int{roleProblem: 0, roleBusy: 1, roleHealthy: 2}[s]
}

// reportState is the reaper's report, nil when there is none to read.
func reportState(rr *reaperReport) *reaperkv.ReaperReport {
	if rr == nil {
		return nil
	}
	return rr.State
}

// statusRollouts are the rollouts of the current version, their lists
// never null.
func statusRollouts(in *statusInput) []rolloutReport {
	out := rolloutReports(in.rolls, in.snap.CurrentVersion)
	for i := range out {
		r := &out[i]
		r.InUse, r.Fresh, r.Failed = orEmpty(r.InUse), orEmpty(r.Fresh), orEmpty(r.Failed)
	}
	return out
}

// hostRoles maps each host to its role, as the reaper's report (its
// members, servers needing attention, silent hosts), the rollouts and
// the drains name it.
func hostRoles(in *statusInput, st *reaperkv.ReaperReport) map[string]string {
	out := map[string]string{}
	for role, r := range in.rolls {
		for h := range r.Hosts {
			out[h] = role
		}
		for _, s := range r.Slots {
			out[s.Host] = role
		}
	}
	for h, d := range in.snap.Scaling.Drains {
		out[h] = d.Role
	}
	if st == nil {
		return out
	}
	for _, r := range st.Roles {
		for _, h := range r.Members {
			out[h] = r.Name
		}
		for _, s := range r.Attention {
			out[s.Name] = r.Name
		}
		for _, m := range r.Silent {
			out[m.Host] = r.Name
		}
	}
	return out
}

// roleNames are every role any record names, sorted.
func roleNames(in *statusInput, st *reaperkv.ReaperReport) []string {
	names := map[string]bool{}
	for r := range in.snap.Desired {
		names[r] = true
	}
	for r := range in.rolls {
		names[r] = true
	}
	for r := range in.snap.Scaling.Capacity {
		names[r] = true
	}
	if st != nil {
		for _, r := range st.Roles {
			names[r.Name] = true
		}
	}
	return sortedKeys(names)
}

// filterRoles keeps the roles asked for, and their hosts and rollouts;
// a role no record names is exit 2.
func (r *statusReport) filterRoles(roles []string) error {
	if len(roles) == 0 {
		return nil
	}
	want := map[string]bool{}
	for _, name := range roles {
		want[name] = true
	}
	known := map[string]bool{}
	kept := []roleView{}
	for _, rv := range r.Roles {
		known[rv.Name] = true
		if want[rv.Name] {
			kept = append(kept, rv)
		}
	}
	for _, name := range roles {
		if !known[name] {
			return exitcode.Usagef("status --role %s: no such role (known: %s)", name, orDash(strings.Join(sortedKeys(known), ", ")))
		}
	}
	r.Roles, r.Unassigned = kept, newRoleView("")
	r.Unassigned.State = roleHealthy
	hosts := []hostReport{}
	var sum statusSummary
	for _, h := range r.Hosts {
		if want[h.Role] {
			hosts = append(hosts, h)
			sum.add(h)
		}
	}
	sum.CorruptValues, sum.Silent, sum.Orphaned = r.Summary.CorruptValues, r.Summary.Silent, r.Summary.Orphaned
	r.Hosts, r.Summary = hosts, sum
	rolls := []rolloutReport{}
	for _, ro := range r.Rollouts {
		if want[ro.Role] {
			rolls = append(rolls, ro)
		}
	}
	r.Rollouts = rolls
	r.count()
	return nil
}

// onlyProblems keeps the roles with a problem.
func (r *statusReport) onlyProblems() {
	kept := []roleView{}
	for _, rv := range r.Roles {
		if rv.State == roleProblem {
			kept = append(kept, rv)
		}
	}
	r.Roles = kept
}

// alerts are what is wrong beyond any one role.
func alerts(in *statusInput, now time.Time) []string {
	out := []string{}
	if n := len(in.snap.Problems); n > 0 {
		out = append(out, fmt.Sprintf("%d %s values orchestrate did not write (named on stderr)", n, plural(n, "key holds", "keys hold")))
	}
	if in.rollErr != nil {
		out = append(out, "a rollout record cannot be read (named on stderr)")
	}
	rr := in.reaper
	switch {
	case rr.Error != "":
		return append(out, "reaper report unreadable: "+rr.Error)
	case rr.State == nil || !rr.Report:
		return out
	case rr.Stale:
		out = append(out, fmt.Sprintf("reaper report %s old: no leader is running cycles; the counts below are from then", age(now, rr.State.Time)))
	}
	st := rr.State
	if !st.Armed {
		out = append(out, "reaper NOT ARMED: "+orDash(strings.TrimPrefix(st.NotArmedReason, "not armed: ")))
	}
	if st.Paused {
		out = append(out, "reaper PAUSED: "+orDash(st.PauseReason))
	}
	if !st.BackoffUntil.IsZero() && st.BackoffUntil.After(now) {
		out = append(out, fmt.Sprintf("reaper quota backoff for %s: %s", until(now, st.BackoffUntil), st.BackoffReason))
	}
	for _, e := range st.Errors {
		out = append(out, "reaper error: "+e)
	}
	return out
}

// until is a short human duration from now to t.
func until(now, t time.Time) string {
	return age(t, now)
}
