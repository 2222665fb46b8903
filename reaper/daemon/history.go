package daemon

import (
	"context"
	"fmt"
	"strings"

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

// maxHoldsRecorded bounds the holds recorded in one cycle: a partition
// pause holds every replacement of a large fleet at once, and each
// activity is a Consul event too.
const maxHoldsRecorded = 10

// noteHolds records in the history each hold that begins this cycle: a
// blocked line the last cycle did not have, a time or a count in it
// aside (a hold whose wait is counted down is the same hold). A hold that
// lasts is recorded once; one that ends and comes back, again. At most
// maxHoldsRecorded a cycle, the rest counted in one more activity.
func (r *Reaper) noteHolds(t *leaderTerm, plan *reaper.Plan) {
	now := make(map[string]bool, len(plan.Held))
	var begun []reaperkv.PlanAction
	for _, a := range plan.Held {
		key := holdKey(a.Text)
		if !t.holds[key] && !now[key] {
			begun = append(begun, a)
		}
		now[key] = true
	}
	t.holds = now
	for i, a := range begun {
		if i == maxHoldsRecorded {
			r.record(t, reaperkv.Activity{Kind: reaperkv.ActivityHold, Action: fmt.Sprintf("and %d more holds (reaper status lists them)", len(begun)-i), Result: "held"})
			break
		}
		r.record(t, reaperkv.Activity{Kind: reaperkv.ActivityHold, Role: a.Role, Action: a.Text, Result: "held"})
	}
}

// holdKey is a blocked line as one hold, whatever time, duration or
// count it names: the step it holds (before " waits: ", which names the
// servers) as it stands, and the reason with its runs of digits made one.
// A line of another shape has every run of digits made one.
func holdKey(line string) string {
	const waits = " waits: "
	if i := strings.Index(line, waits); i >= 0 {
		return line[:i+len(waits)] + digitsOut(line[i+len(waits):])
	}
	return digitsOut(line)
}

// digitsOut makes each run of digits in s one '#'.
func digitsOut(s string) string {
	var b strings.Builder
	digits := false
	for _, c := range s {
		if c >= '0' && c <= '9' {
			if !digits {
				b.WriteByte('#')
			}
			digits = true
			continue
		}
		digits = false
		b.WriteRune(c)
	}
	return b.String()
}
