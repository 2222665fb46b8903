package planner

import (
	"time"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/reaper"
)

// wakeAt notes t as an instant at which a decision could change with no
// new data (a grace, a timeout, a backoff running out). The plan's
// NextDeadline is the earliest one after Now; instants at or before Now
// are decided this cycle and are not noted.
func (pl *planner) wakeAt(t time.Time) {
	if !t.After(pl.in.Now) {
		return
	}
	if d := pl.plan.NextDeadline; d.IsZero() || t.Before(d) {
		pl.plan.NextDeadline = t
	}
}

// wakeAfter notes since+d: a period d that started at since.
func (pl *planner) wakeAfter(since time.Time, d time.Duration) {
	pl.wakeAt(since.Add(d))
}

// inputDeadlines notes the timers the input and the plan carry: the
// leader's backoffs, whose end lets a held-back create, claim or delete
// start; each journal entry's timers (before and after this plan's
// steps); the records that end at a time (cool-offs, holds).
func (pl *planner) inputDeadlines() {
	in := pl.in
	for i := range in.Journal {
		pl.entryDeadlines(&in.Journal[i])
	}
	for i := range pl.plan.Actions {
		pl.entryDeadlines(&pl.plan.Actions[i].Entry)
	}
	for _, rec := range in.DrainAborts {
		pl.wakeAt(rec.Until)
	}
	for _, rec := range in.Holds {
		pl.wakeAt(rec.Until)
	}
	pl.wakeAt(in.BackoffUntil)
	pl.wakeAt(in.PoolBackoffUntil)
	for _, t := range in.RoleBackoff {
		pl.wakeAt(t)
	}
	for _, t := range in.DeleteBackoff {
		pl.wakeAt(t)
	}
	for _, t := range in.LaunchBackoff {
		pl.wakeAt(t)
	}
	for _, zones := range in.ZoneBackoff {
		for _, t := range zones {
			pl.wakeAt(t)
		}
	}
}

// entryDeadlines notes the timers of one journal entry: an unanswered
// create's wait and retry, a drain's end, a stalled delete, a claim's
// timeout, a lifecycle hook's deadline, a repair step's grace. One that
// does not apply to the entry's phase costs at most one early cycle.
func (pl *planner) entryDeadlines(e *reaper.Entry) {
	cloud := pl.in.Config.CloudTimeout.D()
	if e.Attempts > 0 {
		pl.wakeAfter(e.Updated, cloud)
		pl.wakeAfter(e.Updated, pl.retryDelay(e.Attempts))
	}
	pl.wakeAt(e.DrainUntil)
	if !e.DeleteAsked.IsZero() {
		pl.wakeAfter(e.DeleteAsked, cloud)
	}
	if !e.Claimed.IsZero() {
		if r := pl.in.Config.Role(e.Role); r != nil {
			pl.wakeAfter(e.Claimed, r.WarmPool.ClaimWait())
		}
	}
	for _, h := range []*reaperkv.HookState{e.LaunchHook, e.TerminateHook} {
		if h.Pending() {
			pl.wakeAt(h.Deadline)
		}
	}
	if e.Repair != nil {
		pl.wakeAt(e.Repair.Until)
	}
}
