package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/internal/store/schema"
	"github.com/jiocloud/orchestrate/reaper"
)

// askHook carries out OpHook: the entry, in its hook's phase with the
// deadline, and the hook's request (an earlier answer record removed) in
// one transaction under the leader check; then, for a terminate, the
// node's maintenance re-asserted, and the hook's event fired (the
// request in KV is what counts: a lost event only leaves the handler to
// its key watch or `orchestrate hook list`).
func (r *Reaper) askHook(ctx context.Context, t *leaderTerm, e reaper.Entry) error {
	req, ok := reaper.HookRequestOf(&e)
	if !ok {
		return fmt.Errorf("hook of entry %s without its state", e.ID)
	}
	data, _ := json.Marshal(req)
	e.Updated = r.now()
	p := r.journal.prefix
	if err := r.journal.Put(ctx, t.session, e, nil,
		&api.KVTxnOp{Verb: api.KVSet, Key: store.HookKey(p, req.Role, req.Host), Value: data},
		&api.KVTxnOp{Verb: api.KVDelete, Key: store.HookAnswerKey(p, req.Role, req.Host)}); err != nil {
		return err
	}
	r.metrics.hookAsked(req.Role, req.Hook)
	r.log.Info("lifecycle hook asked: waiting for an answer", "role", req.Role, "host", req.Host, "hook", req.Hook, "entry", e.ID,
		"deadline", req.Deadline.UTC().Format(time.RFC3339), "default", req.Default)
	var err error
	if req.Hook == schema.HookTerminate {
		err = r.maintenance(ctx, e)
	}
	r.fireHookEvent(ctx, t, req)
	return err
}

// fireHookEvent fires the hook's Consul event; a failure is counted and
// logged once per change of error.
func (r *Reaper) fireHookEvent(ctx context.Context, t *leaderTerm, req schema.HookRequest) {
	ev := &api.UserEvent{Name: reaperkv.HookEvent, Payload: reaperkv.HookEventPayload(req)}
	if _, _, err := r.client.Event().Fire(ev, (&api.WriteOptions{}).WithContext(ctx)); err != nil {
		r.metrics.hookEventFailed()
		if msg := err.Error(); msg != t.lastHookEventErr {
			r.log.Warn("hook event not fired (the request is in KV)", "event", reaperkv.HookEvent, "host", req.Host, "err", err)
			t.lastHookEventErr = msg
		}
		return
	}
	t.lastHookEventErr = ""
}

// hookDone carries out OpHookResult: the entry with the hook's result, in
// its next phase, and the removal of the hook's request and answer, in
// one transaction under the leader check. A launch continued ends the
// role's launch backoff steps.
func (r *Reaper) hookDone(ctx context.Context, t *leaderTerm, e reaper.Entry) error {
	kind, host, st := schema.HookLaunch, e.NewName, e.LaunchHook
	if e.TerminateHook != nil {
		kind, host, st = schema.HookTerminate, e.OldName, e.TerminateHook
	}
	if st == nil || st.Result == "" {
		return fmt.Errorf("result of the hook of entry %s without its state", e.ID)
	}
	e.Updated = r.now()
	if err := r.journal.Put(ctx, t.session, e, nil, r.journal.hookEndOps(e.Role, host)...); err != nil {
		return err
	}
	r.metrics.hookResult(e.Role, kind, st.Result, st.By == "timeout")
	if kind == schema.HookLaunch && st.Result == schema.HookContinue {
		t.launchBackoffOf(e.Role).step = 0
	}
	r.log.Info("lifecycle hook: result taken", "role", e.Role, "host", host, "hook", kind, "result", st.Result, "by", st.By, "detail", st.Detail,
		"entry", e.ID, "next", e.Phase)
	return nil
}

// hookEndOps removes the request and the answer of role's hook for host.
func (j *Journal) hookEndOps(role, host string) []*api.KVTxnOp {
	return []*api.KVTxnOp{{Verb: api.KVDelete, Key: store.HookKey(j.prefix, role, host)}, {Verb: api.KVDelete, Key: store.HookAnswerKey(j.prefix, role, host)}}
}

// pendingHookOps removes the request and answer of a hook entry e still
// waits for, for a step that ends the entry (or moves it out of the
// hook's phase) without a result: its server went away or to ERROR, or
// passes its checks again.
func (j *Journal) pendingHookOps(e reaper.Entry) []*api.KVTxnOp {
	var ops []*api.KVTxnOp
	if e.LaunchHook.Pending() {
		ops = append(ops, j.hookEndOps(e.Role, e.NewName)...)
	}
	if e.TerminateHook.Pending() {
		ops = append(ops, j.hookEndOps(e.Role, e.OldName)...)
	}
	return ops
}

// launchAbandoned backs off the role's creates and claims after its
// on_launch hook abandoned a launch (once, when the rollback is done): a
// role whose handler abandons every launch makes one server per backoff
// step (quota_backoff doubling to quota_backoff_max), not one a cycle.
func (r *Reaper) launchAbandoned(t *leaderTerm, role string, e reaper.Entry) {
	why := errors.New("the launch of " + e.NewName + " was abandoned by the role's on_launch hook (" + e.LaunchHook.By + ")")
	d := t.launchBackoffOf(role).bump(r.now(), r.cfg.QuotaBackoff.D(), r.cfg.QuotaBackoffMax.D(), why)
	r.log.Warn("launch abandoned: backing off the role's creates and claims", "role", role, "host", e.NewName, "for", d, "by", e.LaunchHook.By, "detail", e.LaunchHook.Detail)
}

// sweepHooks removes the hook requests and answers no waiting hook holds,
// each only if it is still the record read, under the leader check.
func (r *Reaper) sweepHooks(ctx context.Context, t *leaderTerm, recs []reaper.HookRecord) error {
	var ops []*api.KVTxnOp
	for _, rec := range recs {
		key := store.HookKey(r.journal.prefix, rec.Role, rec.Host)
		if rec.Answer {
			key = store.HookAnswerKey(r.journal.prefix, rec.Role, rec.Host)
		}
		ops = append(ops, &api.KVTxnOp{Verb: api.KVDeleteCAS, Key: key, Index: rec.Index})
	}
	for len(ops) > 0 {
		n := min(len(ops), poolOpsPerTxn)
		var refused *txnRefused
		if err := r.journal.txn(ctx, t.session, ops[:n]...); err != nil && !errors.As(err, &refused) {
			return err // refused: a record written since it was read stays
		}
		ops = ops[n:]
	}
	return nil
}

// launchBackoffOf is role's backoff after abandoned launches.
func (t *leaderTerm) launchBackoffOf(role string) *backoffState {
	return backoffIn(t.launchBackoff, role)
}

// launchBackoffs is each role's launch backoff end, as the planner takes
// it.
func (t *leaderTerm) launchBackoffs() map[string]time.Time { return backoffEnds(t.launchBackoff) }

// seedLaunchBackoff takes the launch backoffs of the last leader's report,
// once per term: a new leader does not start a role's abandon loop again
// at its first cycle.
func (t *leaderTerm) seedLaunchBackoff(rep *reaperkv.ReaperReport, now time.Time) {
	if rep == nil {
		return
	}
	for role, b := range rep.LaunchBackoff {
		if now.Before(b.Until) {
			t.launchBackoff[role] = &backoffState{until: b.Until, step: b.Step, reason: b.Reason}
		}
	}
}
