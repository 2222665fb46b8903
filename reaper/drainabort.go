package reaper

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/store"
)

// A scale-in or a max-age retirement takes a server that serves out of
// its role; its drain handler may answer that the work could not move
// (instances that cannot be migrated, a Galera member that cannot leave
// cleanly), or not answer at all. Deleting it then destroys that work, so
// by default the drain is aborted instead, as cluster-autoscaler aborts a
// scale-down whose drain fails and an AWS lifecycle hook may answer
// ABANDON: the server leaves maintenance and stays, and is not chosen
// again for a scale-in or a max-age retirement for drain_cooloff. A
// replacement made for the server's health (unhealthy, unaccounted, Nova
// ERROR, suspect) deletes at the deadline whatever the answer: its
// replacement already serves, and removing the bad server is the point.

const (
	// defaultDrainCooloff: a drain fails because of something a person
	// or another system has to change (an instance pinned to its host, a
	// cluster that lost quorum); asking again within minutes would take
	// the host out of service for another drain_timeout, and spend
	// another of max_actions_per_hour, for the same answer. An hour is
	// the budget's own window: each refusing host costs at most one
	// destructive action per window.
	defaultDrainCooloff = time.Hour
	// maxDrainCooloff: a longer hold is a protection, which `orchestrate
	// protect` says openly.
	maxDrainCooloff = 30 * 24 * time.Hour
)

// validateDrainEnd fills in and checks on_drain_failure, on_drain_timeout
// and drain_cooloff.
func (r *Role) validateDrainEnd(field string) error {
	for _, f := range []struct {
		name string
		v    *string
	}{{"on_drain_failure", &r.OnDrainFailure}, {"on_drain_timeout", &r.OnDrainTimeout}} {
		switch *f.v {
		case "":
			*f.v = store.DrainAbort
		case store.DrainAbort, store.DrainDelete:
		default:
			return fmt.Errorf("%s.%s: want %s or %s, got %q", field, f.name, store.DrainAbort, store.DrainDelete, *f.v)
		}
	}
	if r.DrainCooloff == 0 {
		r.DrainCooloff = Duration(defaultDrainCooloff)
	}
	if r.DrainCooloff < 0 || r.DrainCooloff.D() > maxDrainCooloff {
		return fmt.Errorf("%s.drain_cooloff: must be a positive duration of at most %s (a longer hold is `orchestrate protect`), got %s", field, maxDrainCooloff, r.DrainCooloff.D())
	}
	return nil
}

// drainEnd says what ends entry e's drain on a failed answer and without
// an answer by its deadline: the role's settings for an abortable entry,
// delete for any other.
func (r *Role) drainEnd(e *Entry) (onFailure, onTimeout string) {
	if !e.Abortable {
		return store.DrainDelete, store.DrainDelete
	}
	orAbort := func(v string) string {
		if v == store.DrainDelete {
			return v
		}
		return store.DrainAbort
	}
	return orAbort(r.OnDrainFailure), orAbort(r.OnDrainTimeout)
}

// cooloff is the role's drain_cooloff (its default when unset).
func (r *Role) cooloff() time.Duration {
	if r.DrainCooloff <= 0 {
		return defaultDrainCooloff
	}
	return r.DrainCooloff.D()
}

// abortable says whether a drain of s, taken out of its role for why,
// may be aborted: s is not in a state replaced for its health.
func (pl *planner) abortable(s *Server) bool {
	return !pl.statesOf[s.ID].props().replace
}

// planAbort aborts entry e's drain when its answer, or its silence past
// the deadline, and the role's settings say so; it reports whether it did.
func (pl *planner) planAbort(rs *roleServers, e *Entry, next Entry, oldS *Server, answer *store.DrainAnswer) bool {
	onFailure, onTimeout := rs.role.drainEnd(e)
	rec := store.DrainAbortRecord{Host: e.OldName, ID: oldS.ID, Role: e.Role, Kind: e.Kind, Entry: e.ID, Reason: e.Reason,
		Time: pl.in.Now, Until: pl.in.Now.Add(rs.role.cooloff())}
	switch {
	case answer != nil && !answer.Drained && onFailure == store.DrainAbort:
		rec.Cause = store.AbortFailed
		rec.Detail = fmt.Sprintf("%s answered that moving the work away failed (%s)", answer.By, answer.Detail)
	case answer == nil && onTimeout == store.DrainAbort && !pl.in.Now.Before(e.DrainUntil):
		rec.Cause = store.AbortTimeout
		rec.Detail = fmt.Sprintf("no answer by the drain deadline %s (does the node run a drain handler, `orchestrate watch-config --drain-cmd`?)", e.DrainUntil.UTC().Format(time.RFC3339))
	default:
		return false
	}
	next.Phase, next.Abort = store.PhaseAborting, &rec
	pl.addAbort(rs, next)
	return true
}

// finishAbort carries on with a recorded abort (a leader stopped during
// it): whatever the configuration says now, the server stays.
func (pl *planner) finishAbort(rs *roleServers, e *Entry, next Entry) {
	if e.Abort == nil {
		rec := store.DrainAbortRecord{Host: e.OldName, ID: e.OldID, Role: e.Role, Kind: e.Kind, Entry: e.ID, Reason: e.Reason,
			Cause: store.AbortFailed, Detail: "an abort recorded without its reason", Time: pl.in.Now, Until: pl.in.Now.Add(rs.role.cooloff())}
		next.Abort = &rec
	}
	pl.addAbort(rs, next)
}

// addAbort adds the abort of e's drain: for a host named with
// `orchestrate scale-in`, its request is withdrawn and, unless a count
// was set by hand since the request, the desired count raised back by
// the one the request took away, in the transaction that drops the
// entry.
func (pl *planner) addAbort(rs *roleServers, e Entry) {
	rec := *e.Abort
	rec.Named, rec.Restored = false, false
	var restore *ScaleChange
	if req, named := pl.in.Scaling.ScaleIn[e.Role][e.OldName]; named && e.Kind == store.KindDelete {
		rec.Named = true
		restore = pl.restoreCount(rs, req)
		rec.Restored = restore != nil
	}
	e.Abort = &rec
	pl.plan.Actions = append(pl.plan.Actions, Action{Op: OpAbort, Entry: e, Reason: rec.Cause + ": " + rec.Detail, Restore: restore})
}

// restoreCount is the change that gives a named scale-in's host back its
// place in the desired count, or nil: the count is not in Consul, a count
// was set by hand after the request, or it would pass the autoscaler's
// max.
func (pl *planner) restoreCount(rs *roleServers, req store.ScaleInRequest) *ScaleChange {
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
	return &ScaleChange{Role: r.Name, From: n, To: n + 1, Index: pl.in.Scaling.DesiredIndex[r.Name], Reason: "a named scale-in's drain was aborted"}
}

// coolingOff sorts the aborted-drain records: those whose cool-off is
// over are removed (CooloffEnded), the others hold their hosts. A record
// that cannot be read holds its host until someone deletes it.
func (pl *planner) coolingOff() {
	pl.cooling = map[string]store.DrainAbortRecord{}
	for host, rec := range pl.in.DrainAborts {
		if !pl.in.Now.Before(rec.Until) {
			pl.plan.CooloffEnded = append(pl.plan.CooloffEnded, rec)
			continue
		}
		pl.cooling[host] = rec
	}
	sort.Slice(pl.plan.CooloffEnded, func(i, j int) bool { return pl.plan.CooloffEnded[i].Host < pl.plan.CooloffEnded[j].Host })
	for _, host := range sortedHosts(pl.in.DrainAbortProblems) {
		pl.block("%s: the host is not chosen for a scale-in or a max-age retirement while the record stands (`consul kv delete` it)", pl.in.DrainAbortProblems[host])
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
func (pl *planner) coolingWhy(rs *roleServers, s *Server) string {
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
func (pl *planner) notCooling(rs *roleServers, order []*Server, skipped []string) ([]*Server, []string) {
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
func (pl *planner) roleAborts(role string) []store.DrainAbortRecord {
	var out []store.DrainAbortRecord
	for _, rec := range pl.cooling {
		if rec.Role == role {
			out = append(out, rec)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Host < out[j].Host })
	return out
}

// abortDrain carries out OpAbort: the entry is written in phase aborting
// (the intent: from here on any leader finishes it as an abort), the
// node's maintenance ended, then one transaction under the leader check
// drops the entry and the drain request, records the host's cool-off and,
// for a named host, removes its scale-in request and raises the desired
// count back (checked against the count read: a count that moved refuses
// the transaction, and the next cycle finishes the abort).
func (r *Reaper) abortDrain(ctx context.Context, t *leaderTerm, a Action) error {
	e := a.Entry
	if e.Abort == nil {
		return fmt.Errorf("abort of %s without its record", e.ID)
	}
	e.Updated = r.now()
	if err := r.journal.Put(ctx, t.session, e, nil); err != nil {
		return err
	}
	if r.opts.abortStep != nil {
		if err := r.opts.abortStep(); err != nil {
			return err
		}
	}
	if err := r.endMaintenance(ctx, e.OldName); err != nil {
		return err
	}
	rec := *e.Abort
	ops := []*api.KVTxnOp{r.journal.drainEndOp(e.OldName),
		{Verb: api.KVSet, Key: store.CooloffKey(r.journal.prefix, rec.Host), Value: store.MarshalDrainAbort(rec)}}
	if rec.Named {
		ops = append(ops, &api.KVTxnOp{Verb: api.KVDelete, Key: store.ScaleInKey(r.journal.prefix, e.Role, rec.Host)})
	}
	if c := a.Restore; c != nil {
		ops = append(ops, &api.KVTxnOp{Verb: api.KVCAS, Key: store.DesiredKey(r.journal.prefix, c.Role), Index: c.Index, Value: []byte(strconv.Itoa(c.To))})
	}
	if err := r.journal.Remove(ctx, t.session, e.ID, ops...); err != nil {
		return err
	}
	r.metrics.drainAborted(e.Role, rec.Cause)
	r.log.Warn("drain aborted: the server stays in its role", "role", e.Role, "host", rec.Host, "cause", rec.Cause, "detail", rec.Detail,
		"until", rec.Until.UTC().Format(time.RFC3339), "named", rec.Named, "count_restored", rec.Restored, "entry", e.ID)
	return nil
}

// endCooloffs removes the records of cool-offs that are over, each only
// if it is still the record read, under the leader check.
func (r *Reaper) endCooloffs(ctx context.Context, t *leaderTerm, ended []store.DrainAbortRecord) error {
	var ops []*api.KVTxnOp
	for _, rec := range ended {
		ops = append(ops, &api.KVTxnOp{Verb: api.KVDeleteCAS, Key: store.CooloffKey(r.journal.prefix, rec.Host), Index: rec.Index})
	}
	for len(ops) > 0 {
		n := min(len(ops), poolOpsPerTxn)
		var refused *txnRefused
		if err := r.journal.txn(ctx, t.session, ops[:n]...); err != nil && !errors.As(err, &refused) {
			return err // refused: a record rewritten since it was read stays
		}
		ops = ops[n:]
	}
	return nil
}
