package planner

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/internal/store/schema"
	"github.com/jiocloud/orchestrate/reaper"
	"github.com/jiocloud/orchestrate/reaper/reapertest"
)

// withHooks gives role web an on_launch and an on_terminate hook of 10
// minutes whose default is def.
func withHooks(def string) func(*reaper.Config) {
	return func(c *reaper.Config) {
		c.Roles[0].OnLaunch = &reaper.Hook{Timeout: reaper.Duration(10 * time.Minute), DefaultResult: def}
		c.Roles[0].OnTerminate = &reaper.Hook{Timeout: reaper.Duration(10 * time.Minute), DefaultResult: def}
	}
}

// hooked is a hook state asked at t0 minus ago, its deadline 10 minutes
// after, default def.
func hooked(ago time.Duration, def string) *reaperkv.HookState {
	return &reaperkv.HookState{Requested: t0.Add(-ago), Deadline: t0.Add(-ago + 10*time.Minute), Default: def}
}

// launchWorld is web1..web3 serving and entry web.e1 whose new server
// web4 serves: a create (desired 4), or a surge replacement of web3
// (expired, so it serves; desired 3), in phase.
func launchWorld(kind reaperkv.EntryKind, phase reaperkv.Phase) (reaper.Input, *reaper.Entry) {
	servers := []reaper.Server{srv("web1", day), srv("web2", 2*day), srv("web3", 3*day), withJournal(srv("web4", time.Hour), "web.e1")}
	checks := []reaper.Check{pass("web1"), pass("web2"), pass("web3"), pass("web4")}
	e := reaper.Entry{ID: "web.e1", Kind: kind, Role: "web", Mode: reaper.ModeSurge, Phase: phase, NewName: "web4", NewID: "id-web4",
		Reason: "3 of desired 4", Started: t0.Add(-time.Hour), Updated: t0.Add(-time.Minute)}
	desired := 4
	if kind == reaperkv.KindReplace {
		e.OldName, e.OldID, e.Reason, e.Abortable, desired = "web3", "id-web3", string(reaper.StateExpired), true, 3
	}
	return reaper.Input{Now: t0, Servers: servers, Checks: checks, Desired: map[string]int{"web": desired}, Armed: true, Journal: []reaper.Entry{e},
		Hooks: schema.NewHooks()}, &e
}

// answerHook writes an answer to in's hooks for web/host.
func answerHook(in *reaper.Input, host, entry, hook, result string) {
	schema.Set(in.Hooks.Answers, "web", host, schema.HookAnswer{Entry: entry, Hook: hook, Result: result, Time: t0.Add(-time.Second), By: "inventory", Detail: "registered"})
}

// only returns the plan's one action, failing unless it is want (op and
// target, as ops spells it).
func only(t *testing.T, p *reaper.Plan, want string) reaper.Action {
	t.Helper()
	if got := ops(p); len(got) != 1 || got[0] != want {
		t.Fatalf("actions %v, want [%s]\nblocked: %q", ops(p), want, p.Blocked)
	}
	return p.Actions[0]
}

// A new server that serves, in a role with on_launch, is held: its entry
// is journalled in phase launch-hook, the deadline from now, before the
// create finishes or the replaced server is drained. Without the hook
// the entry goes on as before.
func TestLaunchHookIsAskedOnceTheServerServes(t *testing.T) {
	for _, kind := range []reaperkv.EntryKind{reaperkv.KindCreate, reaperkv.KindReplace} {
		t.Run(string(kind), func(t *testing.T) {
			in, _ := launchWorld(kind, reaperkv.PhaseBooting)
			in.Config = reapertest.Config(t, withHooks(schema.HookAbandon))
			a := only(t, Plan(in), "hook web4")
			h := a.Entry.LaunchHook
			if a.Entry.Phase != reaperkv.PhaseLaunchHook || h == nil || !h.Requested.Equal(t0) || !h.Deadline.Equal(t0.Add(10*time.Minute)) || h.Default != schema.HookAbandon || !h.Pending() {
				t.Fatalf("entry %+v, hook %+v", a.Entry, h)
			}
			if !strings.Contains(a.Reason, "on_launch asked") {
				t.Fatalf("reason %q", a.Reason)
			}
			in.Config = reapertest.Config(t)
			want := "finish web4"
			if kind == reaperkv.KindReplace {
				want = "drain web3"
			}
			if a := only(t, Plan(in), want); a.Op == reaper.OpDrain && a.Entry.OldName != "web3" {
				t.Fatalf("drained %s", a.Entry.OldName)
			}
		})
	}
}

// Each way a launch hook ends: an answer naming its entry and hook, or
// the default at the deadline; what is no answer (another entry's,
// another hook's, another role's, a record that is not one) leaves it
// waiting, never continuing.
func TestLaunchHookResults(t *testing.T) {
	cases := []struct {
		name   string
		def    string
		ago    time.Duration // since the hook was asked
		answer func(in *reaper.Input)
		want   string // "" for no action
		result string
		by     string
		phase  reaperkv.Phase
		block  string
	}{
		{name: "no answer yet", def: schema.HookAbandon, ago: time.Minute, block: "waits for its on_launch hook: an answer (`orchestrate hook complete web web4 continue|abandon`) or abandon at"},
		{name: "answered continue", def: schema.HookAbandon, ago: time.Minute, answer: func(in *reaper.Input) { answerHook(in, "web4", "web.e1", schema.HookLaunch, "continue") },
			want: "hook-result web4", result: "continue", by: "inventory", phase: reaperkv.PhaseBooting},
		{name: "answered abandon", def: schema.HookContinue, ago: time.Minute, answer: func(in *reaper.Input) { answerHook(in, "web4", "web.e1", schema.HookLaunch, "abandon") },
			want: "hook-result web4", result: "abandon", by: "inventory", phase: reaperkv.PhaseRollback},
		{name: "no answer by the deadline, default abandon", def: schema.HookAbandon, ago: 10 * time.Minute, want: "hook-result web4", result: "abandon", by: "timeout", phase: reaperkv.PhaseRollback},
		{name: "no answer by the deadline, default continue", def: schema.HookContinue, ago: 11 * time.Minute, want: "hook-result web4", result: "continue", by: "timeout", phase: reaperkv.PhaseBooting},
		{name: "an answer to another entry is none", def: schema.HookAbandon, ago: time.Minute, answer: func(in *reaper.Input) { answerHook(in, "web4", "web.e0", schema.HookLaunch, "continue") },
			block: "waits for its on_launch hook"},
		{name: "an answer to another hook is none", def: schema.HookAbandon, ago: time.Minute, answer: func(in *reaper.Input) { answerHook(in, "web4", "web.e1", schema.HookTerminate, "continue") },
			block: "waits for its on_launch hook"},
		{name: "an answer under another role is none", def: schema.HookAbandon, ago: time.Minute,
			answer: func(in *reaper.Input) {
				schema.Set(in.Hooks.Answers, "db", "web4", schema.HookAnswer{Entry: "web.e1", Hook: schema.HookLaunch, Result: "continue", Time: t0, By: "db's handler"})
			}, block: "waits for its on_launch hook"},
		{name: "a hand-written word is no answer", def: schema.HookAbandon, ago: time.Minute,
			answer: func(in *reaper.Input) {
				schema.Set(in.Hooks.Problems, "web", "web4", schema.HookProblem{Why: "orchestrate/hook-answer/web/web4: not a hook answer"})
			}, block: "ignored, not an answer: orchestrate/hook-answer/web/web4: not a hook answer"},
		{name: "a hand-written word, at the deadline: the default", def: schema.HookAbandon, ago: 10 * time.Minute,
			answer: func(in *reaper.Input) {
				schema.Set(in.Hooks.Problems, "web", "web4", schema.HookProblem{Why: "orchestrate/hook-answer/web/web4: not a hook answer"})
			}, want: "hook-result web4", result: "abandon", by: "timeout", phase: reaperkv.PhaseRollback},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in, _ := launchWorld(reaperkv.KindCreate, reaperkv.PhaseLaunchHook)
			in.Journal[0].LaunchHook = hooked(tc.ago, tc.def)
			in.Config = reapertest.Config(t, withHooks(schema.HookAbandon))
			if tc.answer != nil {
				tc.answer(&in)
			}
			p := Plan(in)
			if tc.want == "" {
				if len(p.Actions) != 0 || !strings.Contains(strings.Join(p.Blocked, "\n"), tc.block) {
					t.Fatalf("actions %v, blocked %q; want none, and %q", ops(p), p.Blocked, tc.block)
				}
				return
			}
			a := only(t, p, tc.want)
			h := a.Entry.LaunchHook
			if h == nil || h.Result != tc.result || h.By != tc.by || a.Entry.Phase != tc.phase || !h.Deadline.Equal(t0.Add(-tc.ago+10*time.Minute)) {
				t.Fatalf("entry phase %s, hook %+v; want %s by %s, phase %s", a.Entry.Phase, h, tc.result, tc.by, tc.phase)
			}
			if tc.phase == reaperkv.PhaseRollback && !strings.Contains(a.Entry.Error, "on_launch abandon") {
				t.Fatalf("rollback's error %q", a.Entry.Error)
			}
		})
	}
}

// After its hook, an entry goes on as it would have: a continued create
// finishes, a continued replacement drains the old server (through the
// gate), an abandoned launch's recorded rollback deletes the new server;
// none asks its hook again.
func TestAfterTheLaunchHook(t *testing.T) {
	done := func(result string) *reaperkv.HookState {
		h := hooked(time.Minute, schema.HookAbandon)
		h.Result, h.By, h.Time = result, "inventory", t0.Add(-time.Second)
		return h
	}
	for _, tc := range []struct {
		name  string
		kind  reaperkv.EntryKind
		phase reaperkv.Phase
		hook  *reaperkv.HookState
		in    func(*reaper.Input)
		want  string
	}{
		{name: "a continued create finishes", kind: reaperkv.KindCreate, phase: reaperkv.PhaseBooting, hook: done("continue"), want: "finish web4"},
		{name: "a continued replacement drains the old server", kind: reaperkv.KindReplace, phase: reaperkv.PhaseBooting, hook: done("continue"), want: "drain web3"},
		{name: "an abandoned launch's rollback deletes the new server", kind: reaperkv.KindReplace, phase: reaperkv.PhaseRollback, hook: done("abandon"), want: "rollback web4"},
		{name: "a continued replacement's drain waits for the gate", kind: reaperkv.KindReplace, phase: reaperkv.PhaseBooting, hook: done("continue"),
			in: func(in *reaper.Input) { in.Armed, in.ArmKeyWritten = false, true }, want: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, _ := launchWorld(tc.kind, tc.phase)
			in.Journal[0].LaunchHook = tc.hook
			in.Config = reapertest.Config(t, withHooks(schema.HookAbandon))
			if tc.in != nil {
				tc.in(&in)
			}
			p := Plan(in)
			if tc.want == "" {
				if len(p.Actions) != 0 || !strings.Contains(strings.Join(p.Blocked, "\n"), "drain of web3 waits: not armed") {
					t.Fatalf("actions %v, blocked %q", ops(p), p.Blocked)
				}
				return
			}
			only(t, p, tc.want)
		})
	}
}

// An abandoned launch deletes a server, so it waits as any delete does:
// disarmed, paused, the role's list in doubt, a server in an unknown
// state; min_healthy never holds it (the server never counted). While a
// hook waits, a new server that left the list or went to ERROR is judged
// as a booting one.
func TestAbandonedLaunchWaitsForTheGate(t *testing.T) {
	abandon := func(in *reaper.Input) { answerHook(in, "web4", "web.e1", schema.HookLaunch, "abandon") }
	for _, tc := range []struct {
		name  string
		in    func(*reaper.Input)
		want  string
		block string
	}{
		{name: "disarmed", in: func(in *reaper.Input) { abandon(in); in.Armed, in.ArmKeyWritten = false, true }, block: "rollback of web4 waits: not armed"},
		{name: "paused", in: func(in *reaper.Input) {
			abandon(in)
			in.Checks = []reaper.Check{crit("web1"), crit("web2"), pass("web3"), pass("web4")}
			in.Memory.Critical = longCrit("web1", "web2")
		}, block: "rollback of web4 waits: paused"},
		{name: "Nova reports the new server in an unknown state", in: func(in *reaper.Input) {
			abandon(in)
			in.Servers[3] = withStatus(in.Servers[3], "UNKNOWN")
		}, block: "a server in an unknown state is never acted on"},
		{name: "min_healthy above the role's count holds nothing", in: func(in *reaper.Input) {
			abandon(in)
			in.Config.Roles[0].MinHealthy = 3
		}, want: "hook-result web4"},
		{name: "the new server left the list, waiting", in: func(in *reaper.Input) {
			in.Servers, in.Checks = in.Servers[:3], in.Checks[:3]
		}, want: "finish web4"},
		{name: "the new server went to ERROR, waiting", in: func(in *reaper.Input) {
			in.Servers[3] = withStatus(in.Servers[3], reaper.StatusError)
			in.Servers[3].Fault = "disk failure"
		}, want: "rollback web4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, _ := launchWorld(reaperkv.KindCreate, reaperkv.PhaseLaunchHook)
			in.Journal[0].LaunchHook = hooked(time.Minute, schema.HookAbandon)
			in.Config = reapertest.Config(t, withHooks(schema.HookAbandon))
			tc.in(&in)
			p := Plan(in)
			if tc.want != "" {
				only(t, p, tc.want)
				return
			}
			if len(p.Actions) != 0 || !strings.Contains(strings.Join(p.Blocked, "\n"), tc.block) {
				t.Fatalf("actions %v, blocked %q; want none, and %q", ops(p), p.Blocked, tc.block)
			}
		})
	}
}

// A server whose launch hook waits does not serve its role yet: a scale
// in that would leave fewer than min_healthy serving servers without it
// waits (counted, it would drain one).
func TestAServerHeldByItsLaunchHookDoesNotCount(t *testing.T) {
	in, _ := launchWorld(reaperkv.KindCreate, reaperkv.PhaseLaunchHook)
	in.Journal[0].LaunchHook = hooked(time.Minute, schema.HookAbandon)
	in.Servers, in.Checks = slices.Delete(in.Servers, 2, 3), slices.Delete(in.Checks, 2, 3) // web1, web2 and the new web4
	in.Desired["web"] = 2
	in.Config = reapertest.Config(t, withHooks(schema.HookAbandon), func(c *reaper.Config) { c.Roles[0].MinHealthy = 2 })
	p := Plan(in)
	if len(p.Actions) != 0 || !strings.Contains(strings.Join(p.Blocked, "\n"), "below min_healthy 2") {
		t.Fatalf("actions %v, blocked %q: want the scale in held by min_healthy", ops(p), p.Blocked)
	}
	in.Journal[0].Phase, in.Journal[0].LaunchHook.Result = reaperkv.PhaseBooting, schema.HookContinue
	in.Journal = nil // the entry finished: web4 serves
	if got := ops(Plan(in)); len(got) != 1 || !strings.HasPrefix(got[0], "drain ") {
		t.Fatalf("once web4 serves: %v, want a drain", got)
	}
}

// After an abandoned launch the role's creates and claims back off: the
// next create waits, saying why.
func TestAbandonedLaunchBacksOffCreatesAndClaims(t *testing.T) {
	servers, checks := healthyFleet("web", 2)
	in := reaper.Input{Now: t0, Config: reapertest.Config(t, withHooks(schema.HookAbandon)), Servers: servers, Checks: checks, Desired: map[string]int{"web": 3},
		Armed: true, LaunchBackoff: map[string]time.Time{"web": t0.Add(time.Minute)}}
	p := Plan(in)
	if len(p.Actions) != 0 || !strings.Contains(strings.Join(p.Blocked, "\n"), "a launch of the role was abandoned by its on_launch hook: creates and claims wait until") {
		t.Fatalf("actions %v, blocked %q", ops(p), p.Blocked)
	}
	in.Now = t0.Add(time.Minute)
	if got := ops(Plan(in)); len(got) != 1 || got[0] != "create web3" {
		t.Fatalf("after the backoff: %v", got)
	}
}

// terminateWorld is web1..web3 serving and entry web.e1 whose drain of
// web3 ended (answered drained) in a role of desired 2: a scale-in (kind
// delete, abortable) or a replacement of web3 for its health (its new
// server web4 serves; web3 critical).
func terminateWorld(health bool, phase reaperkv.Phase) reaper.Input {
	servers := []reaper.Server{srv("web1", day), srv("web2", 2*day), srv("web3", 3*day)}
	checks := []reaper.Check{pass("web1"), pass("web2"), pass("web3"), {Node: "web3", CheckID: reaper.MaintNodeCheck, Status: reaper.CheckCritical}}
	e := reaper.Entry{ID: "web.e1", Kind: reaperkv.KindDelete, Role: "web", Mode: reaper.ModeSurge, Phase: phase, OldName: "web3", OldID: "id-web3",
		Reason: "surplus (healthy): 1 over desired 2", Started: t0.Add(-time.Hour), Updated: t0.Add(-time.Minute), DrainUntil: t0.Add(time.Minute), Abortable: true}
	desired := 2
	if health {
		e.Kind, e.Reason, e.Abortable, e.NewName, e.NewID = reaperkv.KindReplace, string(reaper.StateUnhealthy), false, "web4", "id-web4"
		servers = append(servers, withJournal(srv("web4", time.Hour), e.ID))
		checks = append(replaceChecks(checks, "web3", crit("web3"), reaper.Check{Node: "web3", CheckID: reaper.MaintNodeCheck, Status: reaper.CheckCritical}), pass("web4"))
		desired = 3
	}
	drained := true
	return reaper.Input{Now: t0, Servers: servers, Checks: checks, Desired: map[string]int{"web": desired}, Armed: true, Journal: []reaper.Entry{e},
		Scaling: schema.Scaling{Drains: map[string]schema.DrainRecord{"web3": {Requested: t0.Add(-time.Minute), Role: "web", Entry: "web.e1",
			Answer: &schema.DrainAnswer{Time: t0, By: "drain handler on web3", Drained: drained}}}},
		Hooks: schema.NewHooks(), Memory: reaper.Memory{Critical: longCrit("web3")}}
}

// A drain that ends in a delete asks the role's on_terminate hook first;
// its result: continue deletes (next cycle, through the gate), abandon
// aborts a scale-in (the server stays and cools off, as a drain abort) and
// is ignored for a replacement for health; while it waits, the node stays
// in maintenance, and a server replaced for its health that passes again
// is kept.
func TestTerminateHook(t *testing.T) {
	for _, tc := range []struct {
		name   string
		health bool
		phase  reaperkv.Phase
		hook   *reaperkv.HookState
		in     func(*reaper.Input)
		want   []string
		phase2 reaperkv.Phase
		reason string
	}{
		{name: "the drain ends: the hook is asked", phase: reaperkv.PhaseDraining, want: []string{"hook web3"}, phase2: reaperkv.PhaseTerminateHook, reason: "drained: drain handler on web3 answered"},
		{name: "waiting: kept in maintenance", phase: reaperkv.PhaseTerminateHook, hook: hooked(time.Minute, schema.HookAbandon), want: []string{"maintain web3"}},
		{name: "continue: deleted", phase: reaperkv.PhaseTerminateHook, hook: hooked(time.Minute, schema.HookAbandon),
			in: func(in *reaper.Input) { answerHook(in, "web3", "web.e1", schema.HookTerminate, "continue") }, want: []string{"hook-result web3"}, phase2: reaperkv.PhaseDeleting},
		{name: "abandon, a scale-in: aborted", phase: reaperkv.PhaseTerminateHook, hook: hooked(time.Minute, schema.HookContinue),
			in: func(in *reaper.Input) { answerHook(in, "web3", "web.e1", schema.HookTerminate, "abandon") }, want: []string{"hook-result web3"}, phase2: reaperkv.PhaseAborting,
			reason: "on_terminate abandon (inventory: registered): web3 stays in its role"},
		{name: "timeout, default abandon, a scale-in: aborted", phase: reaperkv.PhaseTerminateHook, hook: hooked(10*time.Minute, schema.HookAbandon),
			want: []string{"hook-result web3"}, phase2: reaperkv.PhaseAborting, reason: "on_terminate abandon (timeout: no answer by"},
		{name: "abandon, a replacement for health: ignored, deleted", health: true, phase: reaperkv.PhaseTerminateHook, hook: hooked(time.Minute, schema.HookContinue),
			in: func(in *reaper.Input) { answerHook(in, "web3", "web.e1", schema.HookTerminate, "abandon") }, want: []string{"hook-result web3"}, phase2: reaperkv.PhaseDeleting,
			reason: "ignored: web3 was replaced for its health and is deleted"},
		{name: "a replacement for health whose server passes again: kept", health: true, phase: reaperkv.PhaseTerminateHook, hook: hooked(time.Minute, schema.HookAbandon),
			in: func(in *reaper.Input) {
				in.Checks = replaceChecks(in.Checks, "web3", pass("web3"), reaper.Check{Node: "web3", CheckID: reaper.MaintNodeCheck, Status: reaper.CheckCritical})
				in.Memory = reaper.Memory{}
			}, want: []string{"restore web3"}},
		{name: "after continue, the recorded delete names the answer", phase: reaperkv.PhaseDeleting,
			hook: &reaperkv.HookState{Requested: t0.Add(-time.Minute), Deadline: t0.Add(time.Minute), Default: "abandon", Result: "continue", By: "inventory", Time: t0},
			want: []string{"delete web3"}, reason: "on_terminate continue (inventory); finish the recorded delete"},
		{name: "after continue, disarmed: the delete waits", phase: reaperkv.PhaseDeleting,
			hook: &reaperkv.HookState{Requested: t0.Add(-time.Minute), Deadline: t0.Add(time.Minute), Default: "abandon", Result: "continue", By: "inventory", Time: t0},
			in:   func(in *reaper.Input) { in.Armed, in.ArmKeyWritten = false, true }, want: []string{}},
		{name: "an abandon recorded: finished as an abort", phase: reaperkv.PhaseAborting,
			in: func(in *reaper.Input) {
				in.Journal[0].Abort = &reaperkv.DrainAbortRecord{Host: "web3", ID: "id-web3", Role: "web", Kind: reaperkv.KindDelete, Entry: "web.e1", Cause: reaperkv.AbortHook,
					Detail: "on_terminate abandon (inventory)", Time: t0, Until: t0.Add(time.Hour)}
			}, want: []string{"abort web3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := terminateWorld(tc.health, tc.phase)
			in.Journal[0].TerminateHook = tc.hook
			in.Config = reapertest.Config(t, withHooks(schema.HookAbandon))
			if tc.in != nil {
				tc.in(&in)
			}
			p := Plan(in)
			if got := ops(p); !slices.Equal(got, tc.want) {
				t.Fatalf("actions %v, want %v\nblocked: %q", got, tc.want, p.Blocked)
			}
			if len(p.Actions) == 0 {
				return
			}
			a := p.Actions[0]
			if tc.phase2 != "" && a.Entry.Phase != tc.phase2 {
				t.Fatalf("entry phase %s, want %s", a.Entry.Phase, tc.phase2)
			}
			if !strings.Contains(a.Reason, tc.reason) {
				t.Fatalf("reason %q, want %q in it", a.Reason, tc.reason)
			}
			if tc.phase2 == reaperkv.PhaseAborting && (a.Entry.Abort == nil || a.Entry.Abort.Cause != reaperkv.AbortHook || !a.Entry.Abort.Until.Equal(t0.Add(time.Hour))) {
				t.Fatalf("abort record %+v", a.Entry.Abort)
			}
			if a.Op == reaper.OpHook && (a.Entry.TerminateHook == nil || !a.Entry.TerminateHook.Deadline.Equal(t0.Add(10*time.Minute))) {
				t.Fatalf("hook %+v", a.Entry.TerminateHook)
			}
		})
	}
}

// A hook whose state is missing from its entry (written by hand) ends as
// abandon: a launch is rolled back, a scale-in's server stays.
func TestHookWithoutItsStateIsAbandoned(t *testing.T) {
	in, _ := launchWorld(reaperkv.KindCreate, reaperkv.PhaseLaunchHook)
	in.Config = reapertest.Config(t, withHooks(schema.HookContinue))
	if a := only(t, Plan(in), "hook-result web4"); a.Entry.Phase != reaperkv.PhaseRollback || a.Entry.LaunchHook.Result != schema.HookAbandon {
		t.Fatalf("entry %+v", a.Entry)
	}
	in = terminateWorld(false, reaperkv.PhaseTerminateHook)
	in.Config = reapertest.Config(t, withHooks(schema.HookContinue))
	if a := only(t, Plan(in), "hook-result web3"); a.Entry.Phase != reaperkv.PhaseAborting {
		t.Fatalf("entry %+v", a.Entry)
	}
}

// The requests and answers no waiting hook holds are swept (those of an
// entry that ended, a word written by hand where nothing waits); those of
// a waiting hook stay, a word written by hand there too (named, waiting
// for its deadline).
func TestHookRecordsAreSwept(t *testing.T) {
	in, _ := launchWorld(reaperkv.KindCreate, reaperkv.PhaseLaunchHook)
	in.Journal[0].LaunchHook = hooked(time.Minute, schema.HookAbandon)
	in.Config = reapertest.Config(t, withHooks(schema.HookAbandon))
	req := func(host, entry string, index uint64) schema.HookRequest {
		return schema.HookRequest{Role: "web", Host: host, Hook: schema.HookLaunch, Entry: entry, Requested: t0, Deadline: t0, Default: "abandon", Index: index}
	}
	schema.Set(in.Hooks.Requests, "web", "web4", req("web4", "web.e1", 10))
	schema.Set(in.Hooks.Requests, "web", "web5", req("web5", "web.e0", 11))
	schema.Set(in.Hooks.Answers, "web", "web5", schema.HookAnswer{Entry: "web.e0", Hook: schema.HookLaunch, Result: "continue", Index: 12})
	schema.Set(in.Hooks.Problems, "web", "web4", schema.HookProblem{Why: "a word", Index: 13})
	schema.Set(in.Hooks.Problems, "web", "web6", schema.HookProblem{Why: "a word", Index: 14})
	p := Plan(in)
	want := []reaper.HookRecord{{Role: "web", Host: "web5", Index: 11}, {Role: "web", Host: "web5", Answer: true, Index: 12}, {Role: "web", Host: "web6", Answer: true, Index: 14}}
	if !slices.Equal(p.HookSweep, want) {
		t.Fatalf("swept %+v, want %+v", p.HookSweep, want)
	}
}

// A standby claimed from the warm pool runs the role's on_launch like a
// created server: its claim counts as served once, when the hook is
// asked; abandoned, it is rolled back (deleted), never put back in the
// pool.
func TestClaimedStandbyLaunchHook(t *testing.T) {
	in, _ := launchWorld(reaperkv.KindCreate, reaperkv.PhaseBooting)
	in.Journal[0].Claimed = t0.Add(-2 * time.Minute)
	in.Config = reapertest.Config(t, withHooks(schema.HookAbandon))
	p := Plan(in)
	if only(t, p, "hook web4"); len(p.Claims) != 1 || p.Claims[0].Claim.Serving != 2*time.Minute {
		t.Fatalf("claims %+v, want web4's, served in 2m", p.Claims)
	}
	in.Journal[0].Phase, in.Journal[0].LaunchHook = reaperkv.PhaseLaunchHook, hooked(time.Minute, schema.HookAbandon)
	answerHook(&in, "web4", "web.e1", schema.HookLaunch, "abandon")
	if a := only(t, Plan(in), "hook-result web4"); a.Entry.Phase != reaperkv.PhaseRollback {
		t.Fatalf("entry %+v", a.Entry)
	}
	in.Journal[0].Phase, in.Journal[0].LaunchHook.Result = reaperkv.PhaseBooting, schema.HookContinue
	if p := Plan(in); len(p.Claims) != 0 {
		t.Fatalf("the claim counted again after its hook: %+v", p.Claims)
	} else {
		only(t, p, "finish web4")
	}
}
