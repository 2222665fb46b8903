// Package invariant watches the lab's cloud as a whole and names the first
// thing that must never happen: a serving server deleted without a
// replacement or a drain, a delete while the reaper is disarmed or paused,
// a role taken below its min_healthy by a delete, two servers with one
// name, a node's hiera data partial or empty. The lab feeds it one
// observation a second (Nova's list, Consul's health, the reaper's report,
// every node's services.yaml); it keeps the timeline of what changed, to
// print with a violation.
//
// It is a pure function of what it is shown: no I/O, unit-tested without
// the lab.
package invariant

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/reaper"
)

// Server is a Nova server as the lab sees it.
type Server struct {
	ID, Name, Role, Status string
	// Standby: a warm pool's standby (Nova metadata reaper-standby), no
	// member of its role.
	Standby bool
}

// File is a node's services.yaml as read from its container.
type File struct {
	// Exists is false while hiera-services has not written it yet.
	Exists bool
	Data   []byte
}

// Observation is one look at the whole cloud.
type Observation struct {
	Time    time.Time
	Servers []Server
	// Serving says, by server name, whether its role's own checks pass.
	Serving map[string]bool
	// Report is the reaper leader's last report (nil before the first).
	Report *reaperkv.ReaperReport
	// Files are the nodes' services.yaml, by node (those that could be
	// read this time).
	Files map[string]File
}

// Violation is one broken invariant.
type Violation struct {
	Time time.Time
	What string
}

func (v Violation) String() string { return v.Time.UTC().Format("15:04:05") + " " + v.What }

// Event is one line of the timeline.
type Event struct {
	Time time.Time
	What string
}

// Checker holds what the last observation showed.
type Checker struct {
	// MinHealthy is each role's min_healthy (from the reaper's config).
	MinHealthy map[string]int
	// expected are servers the scenario itself powered off or deleted:
	// their going is not the reaper's.
	expected map[string]bool
	last     *Observation
	timeline []Event
	found    []Violation
	// said holds the standing violations already reported (two servers
	// with one name, a partial file): each is reported once while it
	// lasts.
	said map[string]bool
	// reports are the reaper's last distinct reports, oldest first
	// (keepReports at most), and waiting the deletes whose cycle has not
	// reported yet: see judgeGate.
	reports []*reaperkv.ReaperReport
	waiting []pendingDelete
}

// pendingDelete is a delete seen in Nova's list whose cycle's report
// (the one listing the action that removed it) has not been seen yet.
type pendingDelete struct {
	server Server
	seen   time.Time
	// before is the report the lab held when it saw the server go;
	// reports counts the new reports seen since.
	before  *reaperkv.ReaperReport
	reports int
}

// keepReports bounds the reports kept to find a delete's cycle: Nova
// drops a deleted server within seconds, a few of the lab's 5 s cycles.
const keepReports = 12

// waitReports is how many new reports a delete waits for its cycle's
// before it is judged by the report held when it was seen (the strict
// reading): a cycle reports once, right after it acted.
const waitReports = 3

// New returns a checker for roles' min_healthy.
func New(minHealthy map[string]int) *Checker {
	return &Checker{MinHealthy: minHealthy, expected: map[string]bool{}, said: map[string]bool{}}
}

// Expect says that the scenario itself takes server name away (a machine
// death, a delete by an operator): its going is no violation.
func (c *Checker) Expect(name, why string) {
	c.expected[name] = true
	c.note(time.Now(), fmt.Sprintf("scenario: %s %s", name, why))
}

// Timeline returns what changed, oldest first.
func (c *Checker) Timeline() []Event { return append([]Event(nil), c.timeline...) }

// Violations returns every violation seen so far.
func (c *Checker) Violations() []Violation { return append([]Violation(nil), c.found...) }

func (c *Checker) note(t time.Time, what string) {
	c.timeline = append(c.timeline, Event{Time: t, What: what})
}

func (c *Checker) violate(t time.Time, format string, args ...any) {
	v := Violation{Time: t, What: fmt.Sprintf(format, args...)}
	c.found = append(c.found, v)
	c.note(t, "VIOLATION: "+v.What)
}

// Observe checks o against the last observation and returns the
// violations it found in it.
func (c *Checker) Observe(o Observation) []Violation {
	before := len(c.found)
	c.checkNames(o)
	c.checkFiles(o)
	newReport := c.keepReport(o.Report)
	if c.last != nil {
		c.checkReport(*c.last, o)
		c.checkGone(*c.last, o)
		c.checkNew(*c.last, o)
	}
	c.judgeWaiting(o.Time, newReport)
	c.last = &o
	return c.found[before:]
}

// checkNames: no two servers with one name.
func (c *Checker) checkNames(o Observation) {
	seen := map[string]string{}
	for _, s := range o.Servers {
		if id, ok := seen[s.Name]; ok {
			c.violateOnce(o.Time, "names:"+s.Name+":"+id+":"+s.ID, "two servers named %s (%s and %s)", s.Name, id, s.ID)
		}
		seen[s.Name] = s.ID
	}
}

// violateOnce reports a standing violation the first time it is seen.
func (c *Checker) violateOnce(t time.Time, key, format string, args ...any) {
	if c.said[key] {
		return
	}
	c.said[key] = true
	c.violate(t, format, args...)
}

// checkFiles: a node's hiera data, once written, is never partial: whole
// YAML, a mapping, not empty.
func (c *Checker) checkFiles(o Observation) {
	for _, node := range sortedKeys(o.Files) {
		f := o.Files[node]
		if !f.Exists {
			continue
		}
		var m map[string]any
		if err := yaml.Unmarshal(f.Data, &m); err != nil || len(m) == 0 {
			c.violateOnce(o.Time, "file:"+node+":"+string(f.Data), "%s's services.yaml is partial or empty (%d bytes): %v", node, len(f.Data), err)
		}
	}
}

// checkReport notes the reaper's arm, pause and leader changes.
func (c *Checker) checkReport(last, o Observation) {
	a, b := last.Report, o.Report
	if b == nil {
		return
	}
	if a == nil || a.Armed != b.Armed {
		c.note(o.Time, fmt.Sprintf("reaper armed: %v %s", b.Armed, b.NotArmedReason))
	}
	if a == nil || a.Paused != b.Paused {
		c.note(o.Time, fmt.Sprintf("reaper paused: %v %s", b.Paused, b.PauseReason))
	}
	if a != nil && a.Leader != b.Leader {
		c.note(o.Time, fmt.Sprintf("reaper leader: %s -> %s", a.Leader, b.Leader))
	}
}

// checkNew notes the servers Nova lists for the first time.
func (c *Checker) checkNew(last, o Observation) {
	had := map[string]bool{}
	for _, s := range last.Servers {
		had[s.ID] = true
	}
	for _, s := range o.Servers {
		if !had[s.ID] {
			c.note(o.Time, fmt.Sprintf("created %s (%s, role %s)", s.Name, s.ID, s.Role))
		}
	}
}

// checkGone judges every server that left Nova's list since the last
// observation: unless the scenario took it, it must have been in a
// reaper operation removing it (drained, or replaced once its replacement
// served), never while the reaper was disarmed or paused, and its role
// must not be left below min_healthy by it.
func (c *Checker) checkGone(last, o Observation) {
	now := map[string]bool{}
	for _, s := range o.Servers {
		now[s.ID] = true
	}
	for _, s := range last.Servers {
		if now[s.ID] {
			continue
		}
		c.note(o.Time, fmt.Sprintf("deleted %s (%s, role %s)", s.Name, s.ID, s.Role))
		if c.expected[s.Name] {
			continue
		}
		c.judgeDelete(last, o, s)
	}
}

func (c *Checker) judgeDelete(last, o Observation, s Server) {
	rep := last.Report
	if o.Report != nil {
		rep = o.Report
	}
	if rep == nil {
		c.violate(o.Time, "%s deleted before the reaper reported anything", s.Name)
		return
	}
	c.waiting = append(c.waiting, pendingDelete{server: s, seen: o.Time, before: last.Report})
	if last.Serving[s.Name] && !removing(last.Report, s.Name) && !removing(o.Report, s.Name) {
		c.violate(o.Time, "serving server %s deleted with no reaper operation draining or replacing it", s.Name)
	}
	if min := c.MinHealthy[s.Role]; min > 0 && last.Serving[s.Name] {
		if n := servingOf(o, s.Role); n < min {
			c.violate(o.Time, "role %s at %d serving after %s was deleted, below min_healthy %d", s.Role, n, s.Name, min)
		}
	}
}

// keepReport adds r to the reports kept when it is a new one (another
// cycle's), and says whether it was.
func (c *Checker) keepReport(r *reaperkv.ReaperReport) bool {
	if r == nil {
		return false
	}
	if n := len(c.reports); n > 0 {
		if p := c.reports[n-1]; p == r || (p.Time.Equal(r.Time) && p.Leader == r.Leader) {
			return false
		}
	}
	c.reports = append(c.reports, r)
	if len(c.reports) > keepReports {
		c.reports = c.reports[len(c.reports)-keepReports:]
	}
	return true
}

// judgeWaiting judges the deletes waiting for their cycle's report: a
// delete must not be carried out while the reaper is disarmed or paused.
// The state that let it through is the one of the cycle that carried it
// out, and a cycle reports after it acted, listing its actions: so the
// delete is judged by the latest report that lists an action removing the
// server, whether that report came before Nova dropped the server (Nova
// takes a while to delete) or after (the delete and the report landed
// between two looks). Judged by the report held when the server went, a
// delete by the cycle that ended a pause would look like one made in it.
// A delete no report accounts for within waitReports new reports is judged
// by the report held when it was seen.
func (c *Checker) judgeWaiting(now time.Time, newReport bool) {
	kept := c.waiting[:0]
	for _, w := range c.waiting {
		if newReport && !w.seen.Equal(now) {
			w.reports++
		}
		rep := c.deletingReport(w.server)
		switch {
		case rep != nil:
			c.judgeGate(w, rep, "")
		case w.reports >= waitReports:
			c.judgeGate(w, w.before, fmt.Sprintf(" (no report of the %d since listed a delete of it: judged by the report held when it went)", w.reports))
		default:
			kept = append(kept, w)
		}
	}
	c.waiting = kept
}

// judgeGate: the delete w, let through by the cycle that reported rep.
func (c *Checker) judgeGate(w pendingDelete, rep *reaperkv.ReaperReport, how string) {
	if rep != nil && (!rep.Armed || rep.Paused) {
		c.violate(w.seen, "%s deleted while the reaper was %s%s", w.server.Name, stateWord(rep), how)
	}
}

// deletingReport is the latest report kept that lists an action removing
// s from Nova (delete, delete-duplicate, or rollback of a new server), or
// nil.
func (c *Checker) deletingReport(s Server) *reaperkv.ReaperReport {
	for i := len(c.reports) - 1; i >= 0; i-- {
		for _, a := range c.reports[i].Planned {
			for _, op := range []reaper.Op{reaper.OpDelete, reaper.OpDeleteDuplicate, reaper.OpRollback} {
				if strings.HasPrefix(a, fmt.Sprintf("%s %s %s (", op, s.Role, s.Name)) {
					return c.reports[i]
				}
			}
		}
	}
	return nil
}

func stateWord(r *reaperkv.ReaperReport) string {
	var w []string
	if !r.Armed {
		w = append(w, "disarmed")
	}
	if r.Paused {
		w = append(w, "paused")
	}
	return strings.Join(w, " and ")
}

// removing: the report holds an operation removing name (its old server).
func removing(r *reaperkv.ReaperReport, name string) bool {
	if r == nil {
		return false
	}
	for _, j := range r.Journal {
		if j.OldName == name && (j.Phase == reaperkv.PhaseDraining || j.Phase == reaperkv.PhaseDeleting) {
			return true
		}
	}
	return false
}

func servingOf(o Observation, role string) int {
	n := 0
	for _, s := range o.Servers {
		if s.Role == role && o.Serving[s.Name] {
			n++
		}
	}
	return n
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
