package orchestrate

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/jiocloud/orchestrate/internal/exitcode"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
)

// reaperReport is the reaper's part of `orchestrate status`, and `orchestrate
// reaper status --json` (docs/json.md): what its leader saw and planned in
// its last cycle (<prefix>/reaper/state). Every field is always present:
// with no report yet, Report is false and State holds zero values.
type reaperReport struct {
	// Schema is the version of this shape (docs/json.md).
	Schema int `json:"schema"`
	// Report is false while no reaper has led a cycle under the prefix.
	Report bool                   `json:"report"`
	State  *reaperkv.ReaperReport `json:"state"`
	// Stale: the state is older than three intervals plus a minute, so no
	// leader is running cycles.
	Stale bool   `json:"stale"`
	Age   string `json:"age"`
	Error string `json:"error"`
	// PlanByRole: the report lists its actions as data (state.actions),
	// which status assigns to roles; false for a report of a reaper older
	// than that, whose planned and blocked lines status shows unassigned.
	PlanByRole bool `json:"plan_by_role"`
	// err is the read error behind Error, for `reaper status`'s exit code.
	err error
}

// reaperReportSchema is the version of reaperReport's JSON shape.
const reaperReportSchema = 1

// loadReaperReport reads the reaper state; problems go into the report,
// not the exit code: the reaper is optional.
func loadReaperReport(ctx context.Context, e *env) *reaperReport {
	rr := &reaperReport{Schema: reaperReportSchema, State: &reaperkv.ReaperReport{}}
	st, err := e.store.ReaperReport(ctx)
	if err != nil {
		rr.Error, rr.err = exitcode.Message(err), err
		return rr.normal()
	}
	if st != nil {
		rr.Report, rr.State, rr.PlanByRole = true, st, st.Actions != nil
		age := e.store.Now().Sub(st.Time)
		rr.Age = age.Round(time.Second).String()
		rr.Stale = age > 3*st.Interval+time.Minute
	}
	return rr.normal()
}

// normal gives the state's lists and maps their empty value, so JSON has
// [] and {} where there is nothing, never null.
func (rr *reaperReport) normal() *reaperReport {
	st := rr.State
	st.Roles = orEmpty(st.Roles)
	st.Planned = orEmpty(st.Planned)
	st.Actions = orEmpty(st.Actions)
	return rr
}

// withReaper adds the reaper report to the status report and returns it,
// so runStatus needs one line: `defer printReaperStatus(e, rep.withReaper(ctx, e))`
// (the report is loaded at once, for --json; the text is printed after the
// host table).
func (r *statusReport) withReaper(ctx context.Context, e *env) *reaperReport {
	r.Reaper = loadReaperReport(ctx, e)
	return r.Reaper
}

// printReaperStatus prints the reaper section in text mode.
func printReaperStatus(e *env, rr *reaperReport) {
	if e.json || rr == nil {
		return
	}
	fmt.Fprintln(e.Stdout)
	writeReaperStatus(e.Stdout, rr, false)
}

// writeReaperStatus is the text form of a reaper report; history adds
// each autoscaled role's recent decisions.
func writeReaperStatus(w io.Writer, rr *reaperReport, history bool) {
	if rr.Error != "" {
		fmt.Fprintf(w, "reaper: %s\n", rr.Error)
		return
	}
	st := rr.State
	if !rr.Report {
		fmt.Fprintln(w, "reaper: no state yet (no reaper has led a cycle under this prefix)")
		return
	}
	writeReaperHeader(w, rr)
	writeReaperBody(w, st, history)
}

// writeReaperHeader is the first line: the leader, the mode flags and the
// state's age.
func writeReaperHeader(w io.Writer, rr *reaperReport) {
	st := rr.State
	var flags []string
	if st.DryRun {
		flags = append(flags, "DRY RUN")
	}
	if st.Armed {
		flags = append(flags, "armed")
	} else {
		flags = append(flags, "NOT ARMED")
	}
	if st.Paused {
		flags = append(flags, "PAUSED")
	}
	if !st.BackoffUntil.IsZero() {
		flags = append(flags, "QUOTA BACKOFF")
	}
	if len(st.RoleBackoff) > 0 || len(st.LaunchBackoff) > 0 {
		flags = append(flags, "ROLE BACKOFF")
	}
	stale := ""
	if rr.Stale {
		stale = " STALE: no leader is running cycles"
	}
	fmt.Fprintf(w, "reaper: leader %s, state %s old%s: %s\n", st.Leader, rr.Age, stale, strings.Join(flags, ", "))
	if n := len(st.Terms); n > 1 {
		// More than one leadership in the hour: a failover, or a lock
		// lost again and again (the log and reaper_leadership_lost_total
		// say why).
		fmt.Fprintf(w, "  leadership changed: %d leaderships in the last hour, the first at %s\n", n, st.Terms[0].Time.UTC().Format(time.RFC3339))
	}
	if !st.Armed && st.NotArmedReason != "" {
		fmt.Fprintf(w, "  %s\n", oneLine(st.NotArmedReason))
	}
	if st.Paused {
		fmt.Fprintf(w, "  paused: %s\n", oneLine(st.PauseReason))
	}
	if !st.BackoffUntil.IsZero() {
		fmt.Fprintf(w, "  quota backoff until %s: %s\n", st.BackoffUntil.UTC().Format(time.RFC3339), oneLine(st.BackoffReason))
	}
	for _, role := range sortedKeys(st.RoleBackoff) {
		b := st.RoleBackoff[role]
		fmt.Fprintf(w, "  role %s: creates held back until %s: %s\n", role, b.Until.UTC().Format(time.RFC3339), oneLine(b.Reason))
	}
	for _, role := range sortedKeys(st.LaunchBackoff) {
		b := st.LaunchBackoff[role]
		fmt.Fprintf(w, "  role %s: creates and claims held back until %s: %s\n", role, b.Until.UTC().Format(time.RFC3339), oneLine(b.Reason))
	}
}

// writeReaperBody lists the roles, then what the reaper planned, held back
// and has in flight.
func writeReaperBody(w io.Writer, st *reaperkv.ReaperReport, history bool) {
	for _, r := range st.Roles {
		var states []string
		for _, k := range sortedStates(r.States) {
			states = append(states, fmt.Sprintf("%s %d", k, r.States[k]))
		}
		fmt.Fprintf(w, "  role %s: desired %d, servers %d, healthy %d (%s)\n", r.Name, r.Desired, r.Count, r.Healthy, strings.Join(states, ", "))
		if line := driftLine(r); line != "" {
			fmt.Fprintf(w, "    %s\n", line)
		}
		if rf := r.Refresh; rf != nil {
			fmt.Fprintf(w, "    %s\n", oneLine(rf.String()))
		}
		for _, line := range placementLines(r.Placement) {
			fmt.Fprintf(w, "    %s\n", line)
		}
		if p := r.Pool; p != nil {
			fmt.Fprintf(w, "    warm pool (standbys, not counted above): %s\n", p.String())
			if p.Why != "" {
				fmt.Fprintf(w, "      not refilled: %s\n", oneLine(p.Why))
			}
		}
		if c := r.Capacity; c != nil {
			fmt.Fprintf(w, "    capacity EXHAUSTED since %s (%s): %s\n", c.Since.UTC().Format(time.RFC3339), c.Class, oneLine(c.Reason))
		}
		if a := r.Autoscale; a != nil {
			writeAutoscale(w, a, history)
		}
		for _, a := range r.DrainAborts {
			fmt.Fprintf(w, "    drain ABORTED (%s): %s\n", a.Cause, oneLine(a.String()))
		}
		for _, h := range r.Held {
			fmt.Fprintf(w, "    HELD for a human (%d of max_held %d): %s\n", len(r.Held), r.MaxHeld, oneLine(h.String()))
		}
		for _, s := range r.Attention {
			fmt.Fprintf(w, "    %s %s\n", s.Name, s.State)
		}
		writeHostMarks(w, r)
	}
	if st.Unassigned > 0 {
		fmt.Fprintf(w, "  %d servers belong to no configured role (left alone)\n", st.Unassigned)
	}
	for _, a := range st.Planned {
		verb := "planned"
		if st.DryRun {
			verb = "would"
		}
		fmt.Fprintf(w, "  %s: %s\n", verb, oneLine(a))
	}
	for _, b := range st.Blocked {
		fmt.Fprintf(w, "  held back: %s\n", oneLine(b))
	}
	for _, j := range st.Journal {
		fmt.Fprintf(w, "  in flight: %s %s %s", j.ID, j.Kind, j.Phase)
		if j.OldName != "" {
			fmt.Fprintf(w, " old=%s", j.OldName)
		}
		if j.NewName != "" {
			fmt.Fprintf(w, " new=%s", j.NewName)
		}
		fmt.Fprintf(w, " (%s)", oneLine(j.Reason))
		if h := hookWait(j); h != "" {
			fmt.Fprintf(w, ": %s", h)
		}
		if j.Repair != nil {
			fmt.Fprintf(w, ": repair %s", j.Repair)
		}
		fmt.Fprintln(w)
	}
	for _, e := range st.Errors {
		fmt.Fprintf(w, "  error: %s\n", oneLine(e))
	}
}

// hookWait says which lifecycle hook entry j waits for, until when and
// what then; "" when it waits for none.
func hookWait(j reaperkv.JournalEntry) string {
	kind, h := "launch", j.LaunchHook
	if j.Phase == reaperkv.PhaseTerminateHook {
		kind, h = "terminate", j.TerminateHook
	} else if j.Phase != reaperkv.PhaseLaunchHook {
		return ""
	}
	if h == nil {
		return "waiting for its on_" + kind + " hook"
	}
	return fmt.Sprintf("waiting for its on_%s hook (`orchestrate hook list`) until %s, then %s", kind, h.Deadline.UTC().Format(time.RFC3339), h.Default)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// sortedStates lists the states present in m in the report's order.
func sortedStates(m map[string]int) []string {
	var out []string
	for _, k := range reaperkv.ServerStateOrder {
		if m[k] > 0 {
			out = append(out, k)
		}
	}
	return out
}

// writeAutoscale prints a role's autoscaling: its policy and last
// decision, and with history its recent changes of decision.
func writeAutoscale(w io.Writer, a *reaperkv.AutoscaleReport, history bool) {
	fmt.Fprintf(w, "    autoscale (%s %s, target %g, min %d, max %d)", a.Source, oneLine(a.Metric), a.Target, a.Min, a.Max)
	if d := a.Last; d != nil {
		fmt.Fprintf(w, ": %s", decisionLine(*d))
	}
	fmt.Fprintln(w)
	if !history {
		return
	}
	for _, d := range a.History {
		fmt.Fprintf(w, "      %s %s\n", d.Time.UTC().Format(time.RFC3339), decisionLine(d))
	}
}

// decisionLine is one autoscaling decision on a line.
func decisionLine(d reaperkv.ScaleDecision) string {
	what := d.Result
	if d.New != d.Desired {
		what = fmt.Sprintf("%s %d -> %d", d.Result, d.Desired, d.New)
	}
	// The reason starts with its kind ("cooldown: ..."), which the
	// result already says for a change or an override.
	reason := d.Reason
	if code, text, ok := strings.Cut(reason, ": "); ok && (code == "scaled" || code == d.Result) {
		reason = text
	}
	return what + ": " + oneLine(reason)
}

// driftLine says how many of the role's servers were built from a boot
// spec other than the one they are built from now: the configuration's,
// or a rollback's ("" when none).
func driftLine(r reaperkv.RoleReport) string {
	if r.Drifted == 0 && r.SpecUnknown == 0 {
		return ""
	}
	spec := r.Spec
	if len(spec) > 12 {
		spec = spec[:12]
	}
	var parts []string
	if r.Drifted > 0 {
		parts = append(parts, fmt.Sprintf("%d of %d servers DRIFTED (built from another image, flavor, networks, key or user data)", r.Drifted, r.Count))
	}
	if r.SpecUnknown > 0 {
		parts = append(parts, fmt.Sprintf("%d with no recorded spec (built before the reaper recorded one, or not by the reaper)", r.SpecUnknown))
	}
	return "boot spec " + spec + ": " + strings.Join(parts, "; ")
}

// placementLines are a role's zones (serving servers in each, and those
// backed off after a capacity refusal) and its server group, one line
// each; none for a role without placement.
func placementLines(p *reaperkv.PlacementReport) []string {
	if p == nil {
		return nil
	}
	var out []string
	if len(p.Zones) > 0 {
		var zones []string
		for _, z := range sortedKeys(p.Zones) {
			zone := fmt.Sprintf("%s %d", z, p.Zones[z])
			if b, ok := p.ZoneBackoff[z]; ok {
				zone += fmt.Sprintf(" (BACKED OFF until %s: %s)", b.Until.UTC().Format(time.RFC3339), oneLine(b.Reason))
			}
			zones = append(zones, zone)
		}
		out = append(out, "zones (serving servers): "+strings.Join(zones, ", "))
	}
	if g := p.Group; g != nil {
		id := g.ID
		if id == "" {
			id = "being made"
		}
		out = append(out, fmt.Sprintf("server group %s (%s, %s)", g.Name, id, g.Policy))
	}
	if p.GroupProblem != "" {
		out = append(out, "server group PROBLEM: "+oneLine(p.GroupProblem))
	}
	return out
}
