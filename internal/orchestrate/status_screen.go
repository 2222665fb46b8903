package orchestrate

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode"

	"golang.org/x/text/width"
)

// screen writes lines fitted to a width. Every line goes through oneLine,
// so nothing that came from Consul (a name, a reason, a detail) reaches
// the terminal raw: control characters and escape sequences are shown
// escaped, never obeyed.
type screen struct {
	w     io.Writer
	width int
}

// line writes text indented by indent spaces, cut with an ellipsis to fit.
func (s screen) line(indent int, text string) {
	fmt.Fprintln(s.w, strings.Repeat(" ", indent)+fit(oneLine(text), s.width-indent))
}

// wrap writes text indented, over at most maxLines lines (the next ones
// indented two more), the last cut to fit.
func (s screen) wrap(indent, maxLines int, text string) {
	words := strings.Fields(oneLine(text))
	for n := 0; n < maxLines && len(words) > 0; n++ {
		in := indent
		if n > 0 {
			in += 2
		}
		room := s.width - in
		if n == maxLines-1 {
			fmt.Fprintln(s.w, strings.Repeat(" ", in)+fit(strings.Join(words, " "), room))
			return
		}
		take, used := 0, 0
		for take < len(words) {
			l := cells(words[take])
			if take > 0 && used+1+l > room {
				break
			}
			used += l + min(take, 1)
			take++
		}
		fmt.Fprintln(s.w, strings.Repeat(" ", in)+fit(strings.Join(words[:take], " "), room))
		words = words[take:]
	}
}

// chop writes text whole over as many lines as it takes, cut at the
// width, not at spaces: a URL stays every character of itself.
func (s screen) chop(indent int, text string) {
	rest := oneLine(text)
	room := max(s.width-indent, 1)
	for rest != "" {
		var head string
		head, rest = cut(rest, room)
		fmt.Fprintln(s.w, strings.Repeat(" ", indent)+head)
	}
}

// list writes "head: a, b, c +N more" on one line: as many items as fit.
func (s screen) list(indent int, head string, items []string) {
	if len(items) == 0 {
		return
	}
	room := s.width - indent
	text := head + ": " + oneLine(items[0])
	for i := 1; i < len(items); i++ {
		more := fmt.Sprintf(" +%d more", len(items)-i-1)
		if i == len(items)-1 {
			more = ""
		}
		next := text + ", " + oneLine(items[i])
		if cells(next+more) > room {
			text += fmt.Sprintf(" +%d more", len(items)-i)
			break
		}
		text = next
	}
	s.line(indent, text)
}

// fit cuts s to n columns, the last an ellipsis, when it is wider.
func fit(s string, n int) string {
	if n < 1 || cells(s) <= n {
		return s
	}
	head, _ := cut(s, n-1)
	return head + "…"
}

// cut splits s after as many runes as fit in n columns (at least one, so
// a character wider than n still makes progress).
func cut(s string, n int) (head, rest string) {
	used := 0
	for i, r := range s {
		c := runeCells(r)
		if used+c > n && i > 0 {
			return s[:i], s[i:]
		}
		used += c
	}
	return s, ""
}

// cells is how many terminal columns s takes.
func cells(s string) int {
	n := 0
	for _, r := range s {
		n += runeCells(r)
	}
	return n
}

// runeCells is the columns a rune takes: two for an East Asian wide or
// fullwidth character (CJK, most emoji), none for a combining mark or a
// format character (a zero-width joiner), one otherwise. Control
// characters never get here: oneLine escapes them first.
func runeCells(r rune) int {
	if unicode.In(r, unicode.Mn, unicode.Me, unicode.Cf) {
		return 0
	}
	switch width.LookupRune(r).Kind() {
	case width.EastAsianWide, width.EastAsianFullwidth:
		return 2
	}
	return 1
}

// writeScreen is the status in text: the header, the alerts, the roles
// with a problem, the busy ones, then the healthy ones on one line.
func writeScreen(w io.Writer, rep statusReport, o statusOptions, width int) {
	s := screen{w: w, width: width}
	writeHeader(s, rep)
	healthy := []string{}
	printed := false
	for _, rv := range append(rep.Roles, rep.Unassigned) {
		if rv.State == roleHealthy {
			if rv.Name != "" {
				healthy = append(healthy, healthyEntry(rv))
			}
			continue
		}
		fmt.Fprintln(w)
		writeRole(s, rv, rep.Time, rep.Reaper.State != nil && rep.Reaper.State.DryRun)
		printed = true
	}
	if o.problems {
		if rep.ProblemCount == 0 {
			s.line(0, "no problems")
		}
		return
	}
	if len(healthy) > 0 {
		if printed {
			fmt.Fprintln(w)
		}
		s.list(0, "healthy", healthy)
	}
}

// healthyEntry is a healthy role in the folded line: "web 3/3".
func healthyEntry(rv roleView) string {
	if rv.Reported {
		return fmt.Sprintf("%s %d/%d", rv.Name, rv.Serving, rv.Desired)
	}
	return rv.Name
}

// writeHeader is the datacenter, the desired version, the reaper and
// the alerts, then the hosts' summary line.
func writeHeader(s screen, rep statusReport) {
	want := rep.CurrentVersion
	if want == "" {
		want = "(none set)"
	}
	dc := rep.Datacenter
	if dc == "" {
		dc = "datacenter ?"
	}
	s.line(0, fmt.Sprintf("%s · desired version %s · %s", dc, want, rep.Time.UTC().Format("2006-01-02 15:04:05 UTC")))
	s.line(0, reaperLine(rep.Reaper, rep.Time))
	writeUnassignedPlans(s, rep.Reaper)
	for _, a := range rep.Alerts {
		s.wrap(0, 3, "! "+a)
	}
	sum := rep.Summary
	line := fmt.Sprintf("hosts on desired version %d/%d, failed %d, not reporting %d", sum.OnDesired, sum.Hosts, sum.Failed, sum.NotReporting)
	if sum.Suspect > 0 {
		line += fmt.Sprintf(", suspect %d", sum.Suspect)
	}
	if sum.Silent > 0 || sum.Orphaned > 0 {
		line += fmt.Sprintf(", silent %d, orphaned %d", sum.Silent, sum.Orphaned)
	}
	s.line(0, line)
}

// reaperLine is the reaper's one line: its leader, armed or not, paused,
// and the age of its last report.
func reaperLine(rr *reaperReport, now time.Time) string {
	switch {
	case rr == nil || rr.Error != "":
		return "reaper: report unreadable"
	case rr.State == nil || !rr.Report:
		return "reaper: no report (no reaper has led a cycle under this prefix)"
	}
	st := rr.State
	flags := []string{"armed"}
	if !st.Armed {
		flags[0] = "NOT ARMED"
	}
	if st.Paused {
		flags = append(flags, "PAUSED")
	}
	if st.DryRun {
		flags = append(flags, "DRY RUN")
	}
	stale := ""
	if rr.Stale {
		stale = " STALE"
	}
	return fmt.Sprintf("reaper: leader %s, %s, report %s old%s", st.Leader, strings.Join(flags, ", "), age(now, st.Time), stale)
}

// legacyPlanNote says why a report's plan is shown under the reaper, not
// under its roles.
const legacyPlanNote = "(reaper older than this orchestrate: its plan is not assigned to roles)"

// writeUnassignedPlans shows, under the reaper's line, the planned and
// held-back lines of a report that lists no actions as data (a reaper
// older than the actions list): status no longer reads roles out of text.
func writeUnassignedPlans(s screen, rr *reaperReport) {
	if rr == nil || rr.State == nil || !rr.Report || rr.PlanByRole || len(rr.State.Planned)+len(rr.State.Blocked) == 0 {
		return
	}
	next := "next"
	if rr.State.DryRun {
		next = "would"
	}
	s.line(2, legacyPlanNote)
	writePlans(s, next, rr.State.Planned)
	writePlans(s, "held back", rr.State.Blocked)
}

// writeRole is one role's block.
func writeRole(s screen, rv roleView, now time.Time, dryRun bool) {
	s.line(0, roleHead(rv))
	if len(rv.Issues) > 0 {
		s.wrap(2, 2, "problems: "+strings.Join(rv.Issues, ", "))
	}
	for i, f := range rv.Failures {
		if i == 3 {
			s.line(2, fmt.Sprintf("+%d more failed (orchestrate status --host HOST, get-failures)", len(rv.Failures)-i))
			break
		}
		s.line(2, fmt.Sprintf("failed: %s %s %s ago: %s", f.Host, f.Category, age(now, f.Since), f.Detail))
	}
	s.list(2, "suspect", rv.Suspects)
	s.list(2, "silent", rv.Silent)
	var checks []string
	for _, c := range rv.Checks {
		checks = append(checks, c.Node+" "+c.Name+" "+c.Status)
	}
	s.list(2, "checks", checks)
	writeRoleWork(s, rv, now, dryRun)
}

// roleHead is a role's first line: its counts.
func roleHead(rv roleView) string {
	if rv.Name == "" {
		return "hosts of no role:"
	}
	parts := []string{}
	if rv.Reported {
		h := fmt.Sprintf("serving %d/%d", rv.Serving, rv.Desired)
		if rv.MinHealthy > 0 {
			h += " (min " + strconv.Itoa(rv.MinHealthy) + ")"
		}
		parts = append(parts, h, fmt.Sprintf("%d servers", rv.Servers))
	} else {
		parts = append(parts, "desired "+strconv.Itoa(rv.Desired)+" (not in a reaper report)")
	}
	count := func(n int, what string) {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, what))
		}
	}
	count(len(rv.InFlight), "in flight")
	count(rv.Drifted, "drifted")
	count(len(rv.Suspects), "suspect")
	count(len(rv.Failures), "failed")
	if rv.PoolSize > 0 {
		parts = append(parts, fmt.Sprintf("pool %d/%d ready", rv.PoolReady, rv.PoolSize))
	}
	return rv.Name + ": " + strings.Join(parts, ", ")
}

// writeRoleWork is what is at work on the role: the reaper's operations,
// the rollout, the autoscaler, and what the reaper does next or why it
// holds.
func writeRoleWork(s screen, rv roleView, now time.Time, dryRun bool) {
	for i, j := range rv.InFlight {
		if i == 3 {
			s.line(2, fmt.Sprintf("+%d more in flight", len(rv.InFlight)-i))
			break
		}
		s.line(2, "in flight: "+j)
	}
	if r := rv.Rollout; r != nil && (rolloutBusy(r) || len(r.Failed) > 0 || r.Halted != "" || r.Blocked != "") {
		s.line(2, fmt.Sprintf("rollout of %s: slots in use %d/%s, done %d, pending %d, failed %d", orDash(r.Version), len(r.InUse), countOr(r.Limit, "all"), r.Done, r.Pending, len(r.Failed)))
		if r.Halted != "" {
			s.wrap(4, 2, "HALTED: "+r.Halted)
		}
		if r.Blocked != "" {
			s.wrap(4, 2, "no slot is granted: "+r.Blocked)
		}
	}
	if a := rv.Autoscale; a != nil {
		s.line(2, fmt.Sprintf("autoscale %s %s target %g (%d-%d): %s", a.Source, a.Metric, a.Target, a.Min, a.Max, orDash(a.Last)))
	}
	if o := rv.Override; o != nil {
		s.line(2, fmt.Sprintf("count %d set by hand by %s %s ago (the autoscaler holds until `orchestrate scale %s --auto`)", o.Count, o.By, age(now, o.Time), rv.Name))
	}
	if c := rv.Capacity; c != nil {
		s.wrap(2, 2, fmt.Sprintf("capacity EXHAUSTED for %s (%s): %s", age(now, c.Since), c.Class, c.Reason))
	}
	for _, d := range rv.Drains {
		// Wrapped, not cut: its end says what a failed answer or none
		// leads to (the server stays, or is deleted).
		s.wrap(2, 2, "draining "+d)
	}
	for _, n := range rv.Notes {
		s.wrap(2, 3, n)
	}
	next := "next"
	if dryRun {
		next = "would"
	}
	writePlans(s, next, rv.Next)
	writePlans(s, "held back", rv.HeldBack)
	if rv.Holds != "" {
		s.wrap(2, 2, "reaper holds: "+rv.Holds)
	}
}

// writePlans is the first of a role's planned or held-back actions, and
// how many more there are.
func writePlans(s screen, head string, plans []string) {
	if len(plans) == 0 {
		return
	}
	more := ""
	if n := len(plans) - 1; n > 0 {
		more = fmt.Sprintf(" (+%d more: orchestrate reaper status)", n)
	}
	s.wrap(2, 2, head+": "+plans[0]+more)
}
