package daemon

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/reaper"
)

// Holds, the executor's part (the planner's is planner/hold.go). Who puts
// a held server in maintenance: the reaper, from afar, through the
// catalog, as it does for a drain. Not the node's own watch: a held
// server is a failing one by definition, and what fails on it may be the
// very agent, watch or Puppet run a node-side handler needs; the reaper
// also ends the maintenance when the hold ends, whatever state the node
// is in. The node's agent removes a check it does not own within its
// anti-entropy interval, so the planner asks for the maintenance again
// each cycle it finds it missing (as for a warm pool standby).

// applyHolds writes the holds the reaper takes itself (under the leader
// check: a reaper that lost its lock takes none), then puts the held
// servers' nodes in the hold's maintenance and ends the maintenance no
// hold keeps. It runs after the plan's actions, so a hold's maintenance
// follows the end of a drain it stopped. Nothing in a dry run.
func (r *Reaper) applyHolds(ctx context.Context, t *leaderTerm, plan *reaper.Plan, dry bool) []string {
	if dry || ctx.Err() != nil {
		return nil
	}
	var errs []string
	for _, rec := range plan.NewHolds {
		op := &api.KVTxnOp{Verb: api.KVCheckNotExists, Key: reaperkv.HoldKey(r.journal.prefix, rec.Host)}
		set := &api.KVTxnOp{Verb: api.KVSet, Key: reaperkv.HoldKey(r.journal.prefix, rec.Host), Value: reaperkv.MarshalHold(rec)}
		var refused *txnRefused
		if err := r.journal.txn(ctx, t.session, op, set); err != nil {
			if errors.As(err, &refused) {
				continue // a record written since the read: the next cycle reads it
			}
			errs = append(errs, "hold "+rec.Host+": "+err.Error())
			continue
		}
		r.log.Info("held for a human (hold_failures)", "role", rec.Role, "host", rec.Host, "until", rec.Until.Format(time.RFC3339), "reason", rec.Reason)
	}
	for _, rec := range plan.HoldMaintain {
		notes := fmt.Sprintf("%s %s, until %s: %s", reaperkv.HoldNotesPrefix, rec.By, rec.Until.UTC().Format(time.RFC3339), rec.Reason)
		if err := r.setMaintenance(ctx, rec.Host, notes); err != nil {
			errs = append(errs, "hold maintenance: "+err.Error())
		}
	}
	for _, node := range plan.HoldEnd {
		if err := r.endMaintenance(ctx, node); err != nil {
			errs = append(errs, "end of hold maintenance: "+err.Error())
		} else {
			r.log.Info("hold over: node maintenance ended", "host", node)
		}
	}
	return errs
}

// noteHeld records in the history each hold that begins (a host held in
// this plan the last report did not hold: an operator's, or the
// reaper's) and each that ends (held in the last report, not now:
// released, expired, or its server gone), and keeps the count per role
// for the metric. The last report is the leader's own, or the one
// before it, so a new leader records no hold twice.
func (r *Reaper) noteHeld(t *leaderTerm, plan *reaper.Plan, last *reaperkv.ReaperReport) {
	before := map[string]reaperkv.HoldRecord{}
	if last != nil {
		for _, rr := range last.Roles {
			for _, h := range rr.Held {
				before[h.Host] = h
			}
		}
	}
	now := map[string]bool{}
	for _, rr := range plan.Roles {
		for _, h := range rr.Held {
			now[h.Host] = true
			if _, ok := before[h.Host]; !ok {
				r.log.Info("held for a human", "role", rr.Name, "host", h.Host, "by", h.By, "until", h.Until.Format(time.RFC3339), "reason", h.Reason)
				r.record(t, reaperkv.Activity{Kind: reaperkv.ActivityHostHeld, Role: rr.Name, Action: h.String(), Reason: h.Reason, Result: "done"})
			}
		}
	}
	var ended []string
	for host := range before {
		if !now[host] {
			ended = append(ended, host)
		}
	}
	sort.Strings(ended)
	for _, host := range ended {
		h := before[host]
		why := "hold over: released, expired, or no longer honoured; the reaper judges " + host + " as any server again"
		r.log.Info("hold over", "role", h.Role, "host", host)
		r.record(t, reaperkv.Activity{Kind: reaperkv.ActivityHostReleased, Role: h.Role, Action: "release " + host, Reason: why, Result: "done"})
	}
}
