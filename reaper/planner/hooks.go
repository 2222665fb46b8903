package planner

import (
	"fmt"
	"sort"
	"time"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/internal/store/schema"
	"github.com/jiocloud/orchestrate/reaper"
)

// Lifecycle hooks (reaper/hooks.go): a role's on_launch holds an entry
// whose new server serves (phase launch-hook) before it finishes or
// drains the old server; its on_terminate holds an entry whose drain is
// over (phase terminate-hook) before the delete. A hook is asked once per
// entry, its deadline journalled; its result (an answer naming the entry
// and the hook, else the default at the deadline) moves the entry on. A
// hook only holds or undoes: every step that follows passes the gate.

// askHook journals entry e's wait for its role's hook of kind and
// publishes its request (OpHook).
func (pl *planner) askHook(rs *roleServers, next reaper.Entry, kind, reason string) {
	h := rs.role.Hook(kind)
	st := &reaperkv.HookState{Requested: pl.in.Now, Deadline: pl.in.Now.Add(h.Timeout.D()), Default: h.DefaultResult}
	if kind == schema.HookLaunch {
		next.Phase, next.LaunchHook = reaperkv.PhaseLaunchHook, st
	} else {
		next.Phase, next.TerminateHook = reaperkv.PhaseTerminateHook, st
	}
	pl.add(reaper.OpHook, next, fmt.Sprintf("%s; on_%s asked, answer by %s (else %s)", reason, kind, st.Deadline.UTC().Format(time.RFC3339), st.Default))
}

// hookResult is the result of the hook entry e waits for: its answer,
// else the default once the deadline passed; result is "" while it waits
// (why says for what). A hook whose state is missing from the entry
// (written by hand) is abandoned: the step that does less.
func (pl *planner) hookResult(e *reaper.Entry) (st reaperkv.HookState, why string) {
	kind, host, h, _ := reaper.HookOf(e)
	if h == nil {
		return reaperkv.HookState{Requested: pl.in.Now, Deadline: pl.in.Now, Default: schema.HookAbandon, Result: schema.HookAbandon, By: "the reaper",
			Detail: "the entry holds no state of its " + kind + " hook: taken as abandon", Time: pl.in.Now}, ""
	}
	st = *h
	if a := pl.in.Hooks.AnswerOf(e.Role, host, e.ID, kind); a != nil {
		st.Result, st.By, st.Detail, st.Time = a.Result, a.By, a.Detail, pl.in.Now
		return st, ""
	}
	bad := ""
	if p := pl.in.Hooks.Problem(e.Role, host); p != "" {
		bad = "; ignored, not an answer: " + p
	}
	if pl.in.Now.Before(h.Deadline) {
		return st, fmt.Sprintf("%s of %s waits for its on_%s hook: an answer (`orchestrate hook complete %s %s continue|abandon`) or %s at %s%s",
			kind, host, kind, e.Role, host, h.Default, h.Deadline.UTC().Format(time.RFC3339), bad)
	}
	st.Result, st.By, st.Time = h.Default, "timeout", pl.in.Now
	st.Detail = "no answer by " + h.Deadline.UTC().Format(time.RFC3339) + bad
	return st, ""
}

// resultText is the hook result st on one line, for reasons.
func resultText(kind string, st reaperkv.HookState) string {
	s := fmt.Sprintf("on_%s %s (%s", kind, st.Result, st.By)
	if st.Detail != "" {
		s += ": " + st.Detail
	}
	return s + ")"
}

// advanceLaunchHook: the entry's new server served and its on_launch
// hook was asked. While it waits, a new server that went away or to ERROR
// is judged as a booting one; its result continues the entry (back to
// booting: the next cycle finishes it, or drains the old server, through
// the gate) or abandons the launch (the new server, which never served
// for its role, is rolled back, when the gate allows a delete).
func (pl *planner) advanceLaunchHook(rs *roleServers, e *reaper.Entry, next reaper.Entry, newS, oldS *reaper.Server) {
	st, waits := pl.hookResult(e)
	if waits != "" {
		if newS == nil || newS.Status == reaper.StatusError {
			pl.advanceBooting(rs, e, next, newS, oldS)
			return
		}
		pl.block(entryStep(e, reaper.OpHookResult, e.NewName), waiting("%s", waits), "%s: %s", e.ID, waits)
		return
	}
	next.LaunchHook = &st
	if st.Result == schema.HookContinue {
		next.Phase = reaperkv.PhaseBooting
		pl.add(reaper.OpHookResult, next, resultText(schema.HookLaunch, st)+": "+e.NewName+" joins its role")
		return
	}
	// Deleting a server is held as any delete is (the start gate, the
	// pause, a Nova list in doubt, a server in an unknown state); not by
	// min_healthy, which never counted it (it never served for the role).
	why := pl.gate(rs, need{armed: true, unpaused: true})
	if u := pl.unknown(newS); !why.holds() && u != "" {
		why = held(reaperkv.HoldUnknownState, "%s", u)
	}
	if why.holds() {
		pl.block(entryStep(e, reaper.OpRollback, e.NewName), why, "%s: %s: rollback of %s waits: %s", e.ID, resultText(schema.HookLaunch, st), e.NewName, why)
		return
	}
	next.Phase = reaperkv.PhaseRollback
	next.Error = resultText(schema.HookLaunch, st)
	pl.refreshFailed(rs, e, next.Error) // a launch abandoned is a launch failed
	pl.add(reaper.OpHookResult, next, resultText(schema.HookLaunch, st)+": "+e.NewName+" is rolled back; the role's creates back off")
}

// advanceTerminateHook: the drain of the entry's old server is over and
// its on_terminate hook was asked; the node stays in maintenance while it
// waits. A server replaced for its health that passes again is kept. A
// continue goes on to the delete (through the gate, next cycle); an
// abandon aborts a scale-in's or a retirement's drain as a failed drain
// is aborted (the server stays and cools off) and is ignored for a server
// replaced for its health, which is deleted all the same.
func (pl *planner) advanceTerminateHook(rs *roleServers, e *reaper.Entry, next reaper.Entry, oldS *reaper.Server) {
	if why := pl.recovered(rs, e, oldS); why != "" {
		pl.add(reaper.OpRestore, next, why+": kept")
		return
	}
	st, waits := pl.hookResult(e)
	if waits != "" {
		pl.block(entryStep(e, reaper.OpHookResult, e.OldName), waiting("%s", waits), "%s: %s", e.ID, waits)
		pl.add(reaper.OpMaintain, next, "waiting for its on_terminate hook")
		return
	}
	next.TerminateHook = &st
	text := resultText(schema.HookTerminate, st)
	switch {
	case st.Result == schema.HookContinue:
		next.Phase = reaperkv.PhaseDeleting
		pl.add(reaper.OpHookResult, next, text+": "+e.OldName+" is deleted")
	case e.Abortable:
		id := e.OldID
		if oldS != nil {
			id = oldS.ID
		}
		next.Phase = reaperkv.PhaseAborting
		next.Abort = &reaperkv.DrainAbortRecord{Host: e.OldName, ID: id, Role: e.Role, Kind: e.Kind, Entry: e.ID, Reason: e.Reason,
			Cause: reaperkv.AbortHook, Detail: text, Time: pl.in.Now, Until: pl.in.Now.Add(rs.role.Cooloff())}
		pl.add(reaper.OpHookResult, next, text+": "+e.OldName+" stays in its role")
	default:
		next.Phase = reaperkv.PhaseDeleting
		pl.add(reaper.OpHookResult, next, text+", ignored: "+e.OldName+" was replaced for its health and is deleted")
	}
}

// launching marks the new server of each entry whose launch hook waits:
// it does not serve for its role yet (min_healthy and the start gate do
// not count it).
func (pl *planner) launching(e *reaper.Entry) {
	if e.Phase != reaperkv.PhaseLaunchHook {
		return
	}
	if e.NewID != "" {
		pl.hookHeld[e.NewID] = true
	}
	if s := pl.createdFor(e.ID); s != nil {
		pl.hookHeld[s.ID] = true
	}
}

// sweepHooks lists the hook requests and answers no waiting hook of the
// journal holds (its entry ended or moved on, or they were written by
// hand), for the executor to remove.
func (pl *planner) sweepHooks() {
	waiting := map[[2]string]schema.HookRequest{}
	for i := range pl.in.Journal {
		e := &pl.in.Journal[i]
		if req, ok := reaper.HookRequestOf(e); ok {
			waiting[[2]string{e.Role, req.Host}] = req
		}
	}
	holds := func(role, host, entry, hook string) bool {
		w, ok := waiting[[2]string{role, host}]
		return ok && w.Entry == entry && w.Hook == hook
	}
	h := pl.in.Hooks
	for _, role := range sortedKeys(h.Requests) {
		for _, host := range sortedKeys(h.Requests[role]) {
			if r := h.Requests[role][host]; !holds(role, host, r.Entry, r.Hook) {
				pl.plan.HookSweep = append(pl.plan.HookSweep, reaper.HookRecord{Role: role, Host: host, Index: r.Index})
			}
		}
	}
	for _, role := range sortedKeys(h.Answers) {
		for _, host := range sortedKeys(h.Answers[role]) {
			if a := h.Answers[role][host]; !holds(role, host, a.Entry, a.Hook) {
				pl.plan.HookSweep = append(pl.plan.HookSweep, reaper.HookRecord{Role: role, Host: host, Answer: true, Index: a.Index})
			}
		}
	}
	for _, role := range sortedKeys(h.Problems) {
		for _, host := range sortedKeys(h.Problems[role]) {
			if _, ok := waiting[[2]string{role, host}]; !ok {
				pl.plan.HookSweep = append(pl.plan.HookSweep, reaper.HookRecord{Role: role, Host: host, Answer: true, Index: h.Problems[role][host].Index})
			}
		}
	}
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
