package daemon

import (
	"context"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/reaper"
)

// record notes an activity of this cycle for the history (nothing in a
// dry run: the history is what the reaper did). What a write could not
// keep waits for the next cycle's, up to the history's own bound.
func (r *Reaper) record(t *leaderTerm, a reaperkv.Activity) {
	if r.cfg.IsDryRun() {
		return
	}
	a.Time, a.Leader = r.now().UTC(), r.id
	t.activities = append(t.activities, a)
	if n := len(t.activities) - reaperkv.MaxHistoryEntries; n > 0 {
		t.activities = t.activities[n:]
	}
}

// recordAction notes the outcome of one of the plan's actions.
func (r *Reaper) recordAction(t *leaderTerm, a reaper.Action, result string, err error) {
	act := reaperkv.Activity{Kind: string(a.Op), Role: a.Entry.Role, Action: a.String(), Reason: a.Reason, Result: result}
	if err != nil {
		act.Error = err.Error()
	}
	r.record(t, act)
}

// flushHistory appends the cycle's activities to the history in KV, then
// fires one Consul event per activity. A failed write keeps them for the
// next cycle; a failed event is counted and logged (once per change),
// never retried: the history holds it.
func (r *Reaper) flushHistory(ctx context.Context, t *leaderTerm) {
	if len(t.activities) == 0 || ctx.Err() != nil {
		return
	}
	if err := r.journal.AppendHistory(ctx, t.session, t.activities); err != nil {
		r.metrics.historyFailed("write")
		if msg := err.Error(); msg != t.lastHistoryErr {
			r.log.Error("activity history not written; kept for the next cycle", "err", err)
			t.lastHistoryErr = msg
		}
		return
	}
	if t.lastHistoryErr != "" {
		r.log.Info("activity history written again")
		t.lastHistoryErr = ""
	}
	for _, a := range t.activities {
		r.metrics.historyAdded(a.Kind)
		ev := &api.UserEvent{Name: reaperkv.HistoryEvent, Payload: reaperkv.EventPayload(a)}
		if _, _, err := r.client.Event().Fire(ev, (&api.WriteOptions{}).WithContext(ctx)); err != nil {
			r.metrics.historyFailed("event")
			if msg := err.Error(); msg != t.lastEventErr {
				r.log.Warn("activity event not fired (the history has it)", "event", reaperkv.HistoryEvent, "err", err)
				t.lastEventErr = msg
			}
		} else {
			t.lastEventErr = ""
		}
	}
	t.activities = nil
}
