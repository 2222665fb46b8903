package planner

import (
	"fmt"
	"sort"
	"time"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/internal/store/schema"
	"github.com/jiocloud/orchestrate/reaper"
)

// abortable says whether a drain of s, taken out of its role for why,
// may be aborted: s is not in a state replaced for its health.
func (pl *planner) abortable(s *reaper.Server) bool {
	return !pl.statesOf[s.ID].Props().Replace
}

// planAbort aborts entry e's drain when its answer, or its silence past
// the deadline, and the role's settings say so; it reports whether it did.
func (pl *planner) planAbort(rs *roleServers, e *reaper.Entry, next reaper.Entry, oldS *reaper.Server, answer *schema.DrainAnswer) bool {
	onFailure, onTimeout := rs.role.DrainEnd(e)
	rec := reaperkv.DrainAbortRecord{Host: e.OldName, ID: oldS.ID, Role: e.Role, Kind: e.Kind, Entry: e.ID, Reason: e.Reason,
		Time: pl.in.Now, Until: pl.in.Now.Add(rs.role.Cooloff())}
	switch {
	case answer != nil && !answer.Drained && onFailure == reaperkv.DrainAbort:
		rec.Cause = reaperkv.AbortFailed
		rec.Detail = fmt.Sprintf("%s answered that moving the work away failed (%s)", answer.By, answer.Detail)
	case answer == nil && onTimeout == reaperkv.DrainAbort && !pl.in.Now.Before(e.DrainUntil):
		rec.Cause = reaperkv.AbortTimeout
		rec.Detail = fmt.Sprintf("no answer by the drain deadline %s (does the node run a drain handler, `orchestrate watch-config --drain-cmd`?)", e.DrainUntil.UTC().Format(time.RFC3339))
	default:
		return false
	}
	next.Phase, next.Abort = reaperkv.PhaseAborting, &rec
	pl.addAbort(rs, next)
	return true
}

// finishAbort carries on with a recorded abort (a leader stopped during
// it): whatever the configuration says now, the server stays.
func (pl *planner) finishAbort(rs *roleServers, e *reaper.Entry, next reaper.Entry) {
	if e.Abort == nil {
		rec := reaperkv.DrainAbortRecord{Host: e.OldName, ID: e.OldID, Role: e.Role, Kind: e.Kind, Entry: e.ID, Reason: e.Reason,
			Cause: reaperkv.AbortFailed, Detail: "an abort recorded without its reason", Time: pl.in.Now, Until: pl.in.Now.Add(rs.role.Cooloff())}
		next.Abort = &rec
	}
	pl.addAbort(rs, next)
}

// addAbort adds the abort of e's drain: for a host named with
// `orchestrate scale-in`, its request is withdrawn and, unless a count
// was set by hand since the request, the desired count raised back by
// the one the request took away, in the transaction that drops the
// entry.
func (pl *planner) addAbort(rs *roleServers, e reaper.Entry) {
	rec := *e.Abort
	rec.Named, rec.Restored = false, false
	var restore *reaper.ScaleChange
	if req, named := pl.in.Scaling.ScaleIn[e.Role][e.OldName]; named && e.Kind == reaperkv.KindDelete {
		rec.Named = true
		restore = pl.restoreCount(rs, req)
		rec.Restored = restore != nil
	}
	e.Abort = &rec
	pl.plan.Actions = append(pl.plan.Actions, reaper.Action{Op: reaper.OpAbort, Entry: e, Reason: rec.Cause + ": " + rec.Detail, Restore: restore})
}

// restoreCount is the change that gives a named scale-in's host back its
// place in the desired count, or nil: the count is not in Consul, a count
// was set by hand after the request, or it would pass the autoscaler's
// max.
func (pl *planner) restoreCount(rs *roleServers, req schema.ScaleInRequest) *reaper.ScaleChange {
	r := rs.role
	n, ok := pl.in.Desired[r.Name]
	if !ok {
		return nil
	}
	if o, set := pl.in.Scaling.Overrides[r.Name]; set && o.Time.After(req.Time) {
		return nil
	}
	if r.Autoscale != nil && n+1 > r.Autoscale.Max {
		return nil
	}
	return &reaper.ScaleChange{Role: r.Name, From: n, To: n + 1, Index: pl.in.Scaling.DesiredIndex[r.Name], Reason: "a named scale-in's drain was aborted"}
}

// coolingOff sorts the aborted-drain records: those whose cool-off is
// over are removed (CooloffEnded), the others hold their hosts. A record
// that cannot be read holds its host until someone deletes it.
func (pl *planner) coolingOff() {
	pl.cooling = map[string]reaperkv.DrainAbortRecord{}
	for host, rec := range pl.in.DrainAborts {
		if !pl.in.Now.Before(rec.Until) {
			pl.plan.CooloffEnded = append(pl.plan.CooloffEnded, rec)
			continue
		}
		pl.cooling[host] = rec
	}
	sort.Slice(pl.plan.CooloffEnded, func(i, j int) bool { return pl.plan.CooloffEnded[i].Host < pl.plan.CooloffEnded[j].Host })
	for _, host := range sortedHosts(pl.in.DrainAbortProblems) {
		pl.block(planStep{op: reaperkv.PlanScaleIn, host: host}, held(reaperkv.HoldProblem, "%s", pl.in.DrainAbortProblems[host]),
			"%s: the host is not chosen for a scale-in or a max-age retirement while the record stands (`consul kv delete` it)", pl.in.DrainAbortProblems[host])
	}
}

func sortedHosts(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for h := range m {
		out = append(out, h)
	}
	sort.Strings(out)
	return out
}

// coolingWhy says why s is not chosen for a scale-in or a max-age
// retirement now, or "": its drain was aborted less than drain_cooloff
// ago. A host named afresh for scale-in, a server in a state replaced for
// its health, and a later server of the same name are not held.
func (pl *planner) coolingWhy(rs *roleServers, s *reaper.Server) string {
	if _, bad := pl.in.DrainAbortProblems[s.Name]; bad {
		return s.Name + " has an unreadable record of an aborted drain"
	}
	rec, ok := pl.cooling[s.Name]
	switch {
	case !ok, rec.ID != s.ID, !pl.abortable(s):
		return ""
	}
	if _, named := pl.in.Scaling.ScaleIn[rs.role.Name][s.Name]; named {
		return ""
	}
	return fmt.Sprintf("%s's drain was aborted at %s (%s); not chosen again before %s", s.Name, rec.Time.UTC().Format(time.RFC3339), rec.Cause, rec.Until.UTC().Format(time.RFC3339))
}

// notCooling leaves the servers cooling off out of a scale-in order,
// adding why to skipped.
func (pl *planner) notCooling(rs *roleServers, order []*reaper.Server, skipped []string) ([]*reaper.Server, []string) {
	out := order[:0:0]
	for _, s := range order {
		if why := pl.coolingWhy(rs, s); why != "" {
			skipped = append(skipped, why)
			continue
		}
		out = append(out, s)
	}
	return out, skipped
}

// roleAborts are the records of the role's hosts cooling off, by host.
func (pl *planner) roleAborts(role string) []reaperkv.DrainAbortRecord {
	var out []reaperkv.DrainAbortRecord
	for _, rec := range pl.cooling {
		if rec.Role == role {
			out = append(out, rec)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Host < out[j].Host })
	return out
}
