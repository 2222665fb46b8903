package daemon

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/reaper"
)

// repair carries out OpRepair: the step's phase is journalled (with one
// of the hourly budget for a reboot or a rebuild) under the leader check,
// then Nova is asked, once: a hard reboot, or a rebuild from the role's
// image. A rerun asks nothing of the cloud: the node's own repair watch
// re-runs its converge. Nova's answer is journalled too: a refusal (409,
// 404, a bad image) ends the step at the next cycle; a call that ended
// without an answer (a timeout, the leadership lost) may have been
// carried out and is never asked again for the entry.
func (r *Reaper) repair(ctx context.Context, t *leaderTerm, role *reaper.Role, a reaper.Action, budget *[]time.Time) error {
	e := a.Entry
	if e.Repair == nil || e.OldID == "" {
		return fmt.Errorf("repair entry %s holds no step or no server", e.ID)
	}
	rp := e.Repair.Clone()
	e.Repair = rp
	var spend []time.Time
	if rp.Step != reaper.RepairRerun {
		*budget = append(*budget, r.now())
		spend = *budget
	}
	var imageErr error
	if rp.Step == reaper.RepairRebuild {
		rp.Image, imageErr = r.rebuildImage(t, role, e)
	}
	e.Updated = r.now()
	if err := r.journal.Put(ctx, t.session, e, spend); err != nil {
		return err
	}
	r.repairCounted(a)
	if r.opts.repairStep != nil {
		if err := r.opts.repairStep(); err != nil {
			return err
		}
	}
	var err error
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	switch {
	case rp.Step == reaper.RepairRerun:
	case imageErr != nil:
		err = imageErr
	case rp.Step == reaper.RepairReboot:
		err = r.cloud.Reboot(cctx, e.OldID)
	case rp.Step == reaper.RepairRebuild:
		err = r.cloud.Rebuild(cctx, reaper.RebuildRequest{ID: e.OldID, Image: rp.Image})
	default:
		err = fmt.Errorf("repair entry %s: unknown step %q", e.ID, rp.Step)
	}
	cancel()
	if err == nil && rp.Step != reaper.RepairRerun {
		rp.Asked = r.now()
	}
	if err != nil {
		r.metrics.cloudError(err)
		rp.Result, rp.Error = repairResultOf(err), err.Error()
	}
	if rp.Asked.IsZero() && err == nil {
		return nil // a rerun: nothing more to record
	}
	e.Updated = r.now()
	if perr := r.journal.Put(ctx, t.session, e, nil); perr != nil {
		return errors.Join(err, perr)
	}
	return err
}

// repairResultOf is how a refused or failed repair call is journalled: a
// call that may have been carried out (transient) is unknown, and waits
// for its grace; any other answer is a refusal, and the ladder goes on.
func repairResultOf(err error) string {
	if reaper.ClassOf(err) == reaper.Transient {
		return reaperkv.RepairUnknown
	}
	return reaperkv.RepairRefused
}

// rebuildImage is the image a rebuild of e's server asks for: the
// role's, or the image of the spec the role is pinned to (a rollback's,
// which its entry names).
func (r *Reaper) rebuildImage(t *leaderTerm, role *reaper.Role, e reaper.Entry) (string, error) {
	if e.Spec == "" || e.Spec == role.Boot.Digest() {
		return role.Boot.Image, nil
	}
	built, err := r.roleOnSpec(t, role, e.Spec)
	if err != nil {
		return "", err
	}
	return built.Boot.Image, nil
}

// repairCounted counts the repair steps an action began or ended
// (reaper_repairs_total) and logs each end: once the action's first
// journal write is done (an OpRepair's intent), or the action is.
func (r *Reaper) repairCounted(a reaper.Action) {
	if a.Op == reaper.OpRepair && a.Entry.Repair != nil {
		r.metrics.repairStep(a.Entry.Role, a.Entry.Repair.Step, reaperkv.RepairStarted)
	}
	for _, s := range a.Ended {
		if s.Result == reaperkv.RepairSkipped {
			continue
		}
		r.metrics.repairStep(a.Entry.Role, s.Step, s.Result)
		r.log.Info("repair step ended", "role", a.Entry.Role, "server", a.Entry.OldName, "step", s.Step, "result", s.Result,
			"why", strings.TrimSpace(s.Why), "entry", a.Entry.ID)
	}
}
