package daemon

import (
	"context"
	"fmt"

	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/internal/store/schema"
	"github.com/jiocloud/orchestrate/reaper"
	"github.com/jiocloud/orchestrate/reaper/planner"
)

// noteDecisions keeps each autoscaled role's report for the next cycle
// and logs a decision when it differs from the role's last one (its
// result, its kind of reason or its count), not every cycle.
func (r *Reaper) noteDecisions(t *leaderTerm, plan *reaper.Plan) {
	for _, rr := range plan.Roles {
		a := rr.Autoscale
		if a == nil || a.Last == nil {
			continue
		}
		t.autoscale[rr.Name] = a
		d := a.Last
		key := fmt.Sprintf("%s %s %d", d.Result, planner.DecisionWhy(*d), d.New)
		if t.lastDecision[rr.Name] == key {
			continue
		}
		t.lastDecision[rr.Name] = key
		args := []any{"role", rr.Name, "result", d.Result, "desired", d.Desired, "recommended", d.Recommended, "new", d.New, "serving", d.Serving, "target", a.Target, "reason", d.Reason}
		if d.Value != nil {
			args = append(args, "value", *d.Value)
		}
		r.log.Info("autoscale decision", args...)
	}
}

// applyScaling writes the autoscaler's new counts (or logs them in a dry
// run) and clears the capacity records of roles whose creates work again.
func (r *Reaper) applyScaling(ctx context.Context, t *leaderTerm, plan *reaper.Plan, dry bool) []string {
	var errs []string
	for _, c := range plan.Scale {
		if dry {
			r.log.Info("dry run: would "+c.String(), "role", c.Role)
			r.metrics.action(opScale, "dry_run")
			continue
		}
		ok, err := r.journal.SetDesired(ctx, t.session, c)
		switch {
		case err != nil:
			r.metrics.action(opScale, "failed")
			r.log.Error("autoscale: write the desired count", "role", c.Role, "err", err)
			errs = append(errs, c.String()+": "+err.Error())
		case !ok:
			r.metrics.action(opScale, "skipped")
			r.log.Info("autoscale: the count moved or was set by hand since it was read; decided again next cycle", "role", c.Role)
		default:
			r.metrics.action(opScale, "done")
			r.log.Info(c.String(), "role", c.Role)
			r.record(t, reaperkv.Activity{Kind: reaperkv.ActivityScale, Role: c.Role, Action: c.String(), Result: "done"})
		}
	}
	if dry {
		return errs
	}
	for _, role := range plan.CapacityClear {
		if err := r.journal.ClearCapacity(ctx, t.session, role); err != nil {
			errs = append(errs, "clear the capacity record of "+role+": "+err.Error())
			continue
		}
		delete(t.capacity, role)
		r.log.Info("capacity back: a server created for the role went ACTIVE", "role", role)
	}
	return errs
}

// opScale names autoscaling's changes in reaper_actions_total.
const opScale reaper.Op = "scale"

// exhausted records that the role's creates fail for quota or capacity,
// under <prefix>/capacity/<role>, so the platform can watch one key; the
// first failure of an episode is logged as such.
func (r *Reaper) exhausted(ctx context.Context, t *leaderTerm, role string, err error) {
	class := reaper.ClassOf(err)
	if class != reaper.Quota && class != reaper.Capacity {
		return
	}
	now := r.now().UTC()
	rec := schema.CapacityRecord{State: store.CapacityExhausted, Class: class.String(), Reason: err.Error(), Since: now, Time: now}
	prev, had := t.capacity[role]
	if had {
		rec.Since = prev.Since
	}
	if werr := r.journal.SetCapacity(ctx, t.session, role, rec); werr != nil {
		r.log.Warn("write the capacity record", "role", role, "err", werr)
		return
	}
	if t.capacity == nil {
		t.capacity = map[string]schema.CapacityRecord{}
	}
	t.capacity[role] = rec
	if !had {
		r.log.Warn("capacity exhausted: creates of the role fail", "role", role, "class", rec.Class, "reason", rec.Reason)
	}
}
