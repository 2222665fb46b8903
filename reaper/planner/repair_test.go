package planner

import (
	"strings"
	"testing"
	"time"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/reaper"
	"github.com/jiocloud/orchestrate/reaper/reapertest"
)

// withRepair gives role web the repair ladder steps, repair_grace 5m
// (the default) and boot_grace 15m (a rebuild's grace).
func withRepair(steps ...string) func(*reaper.Config) {
	return func(c *reaper.Config) { c.Roles[0].Repair = steps }
}

// repairWorld is web1..web5, built from the role's boot spec, web2's
// service critical for an hour (unhealthy), in a role of desired 5 with
// ladder steps.
func repairWorld(t *testing.T, steps ...string) reaper.Input {
	t.Helper()
	cfg := reapertest.Config(t, withRepair(steps...), func(c *reaper.Config) { c.Roles[0].Desired = 5 })
	servers, checks := healthyFleet("web", 5)
	for i := range servers {
		servers[i].Metadata[reaper.MetaSpec] = cfg.Roles[0].Boot.Digest()
	}
	checks = replaceChecks(checks, "web2", crit("web2"))
	return reaper.Input{Now: t0, Config: cfg, Servers: servers, Checks: checks, Armed: true, Memory: reaper.Memory{Critical: longCrit("web2")}}
}

// server returns a pointer to the input's server named name.
func server(in *reaper.Input, name string) *reaper.Server {
	for i := range in.Servers {
		if in.Servers[i].Name == name {
			return &in.Servers[i]
		}
	}
	return nil
}

// A server its role would replace for its health gets the role's repair
// ladder first: from the first step that can help it, through the gate
// (a rerun asks no budget; a reboot or a rebuild spends one); an empty
// ladder, a suspect server, or no step that can help: replaced as before.
func TestRepairLadderStarts(t *testing.T) {
	for _, tc := range []struct {
		name    string
		steps   []string
		in      func(*reaper.Input)
		want    []string
		phase   reaperkv.Phase
		skipped string // a step of the ladder passed over, and why
		blocked string
	}{
		{name: "an empty ladder: replaced as before", want: []string{"create web6 for web2"}},
		{name: "rerun: the node's own watch is given its grace", steps: []string{"rerun"}, want: []string{"repair web2"}, phase: reaperkv.PhaseRepairRerun},
		{name: "the whole ladder starts at rerun", steps: reaperkv.RepairLadder, want: []string{"repair web2"}, phase: reaperkv.PhaseRepairRerun},
		{name: "in Nova ERROR: no rerun, a reboot", steps: []string{"rerun", "reboot"},
			in: func(in *reaper.Input) { server(in, "web2").Status = reaper.StatusError }, want: []string{"repair web2"}, phase: reaperkv.PhaseRepairReboot,
			skipped: "rerun: Nova reports it in ERROR"},
		{name: "unaccounted (no node): no rerun, a reboot", steps: []string{"rerun", "reboot"},
			in: func(in *reaper.Input) {
				in.Checks = replaceChecks(in.Checks, "web2")
				in.Memory = reaper.Memory{Absent: longCrit("web2")}
			}, want: []string{"repair web2"}, phase: reaperkv.PhaseRepairReboot, skipped: "rerun: no Consul node of it checks in"},
		{name: "its agent down: no rerun, a reboot", steps: []string{"rerun", "reboot"},
			in:   func(in *reaper.Input) { in.Checks = append(in.Checks, serf("web2", reaper.CheckCritical)) },
			want: []string{"repair web2"}, phase: reaperkv.PhaseRepairReboot, skipped: "rerun: its agent is down"},
		{name: "in Nova ERROR past error_grace, its node passing: no reboot of a serving machine, replaced", steps: reaperkv.RepairLadder,
			in: func(in *reaper.Input) {
				server(in, "web2").Status = reaper.StatusError
				in.Checks = replaceChecks(in.Checks, "web2", pass("web2"))
				in.Memory = reaper.Memory{Error: longCrit("web2")}
			}, want: []string{"create web6 for web2"}},
		{name: "only a rerun, in Nova ERROR: nothing can help, replaced", steps: []string{"rerun"},
			in: func(in *reaper.Input) { server(in, "web2").Status = reaper.StatusError }, want: []string{"create web6 for web2"}},
		{name: "suspect: replaced at once", steps: reaperkv.RepairLadder,
			in: func(in *reaper.Input) { in.Suspect = map[string]bool{"web2": true} }, want: []string{"create web6 for web2"}},
		{name: "suspect in a role with replace_suspect: replaced at once", steps: reaperkv.RepairLadder,
			in: func(in *reaper.Input) {
				in.Suspect = map[string]bool{"web2": true}
				in.Config.Roles[0].ReplaceSuspect = true
			}, want: []string{"create web6 for web2"}},
		{name: "not armed: the ladder waits", steps: reaperkv.RepairLadder, in: func(in *reaper.Input) { in.Armed = false },
			want: []string{}, blocked: "web: repair of web2 (unhealthy) by rerun waits: not armed"},
		{name: "paused (a partition): no ladder starts", steps: reaperkv.RepairLadder,
			in: func(in *reaper.Input) {
				in.Checks = replaceChecks(replaceChecks(in.Checks, "web3", crit("web3")), "web4", crit("web4"))
				in.Memory.Critical = longCrit("web2", "web3", "web4")
			}, want: []string{}, blocked: "(unhealthy) by rerun waits: paused"},
		{name: "the hourly budget spent: a reboot waits", steps: []string{"rerun", "reboot"},
			in: func(in *reaper.Input) {
				server(in, "web2").Status = reaper.StatusError
				in.Destructive = spent(10)
			}, want: []string{}, blocked: "repair of web2 (error) by reboot waits: max_actions_per_hour (10) reached"},
		{name: "the hourly budget spent: a rerun asks none", steps: reaperkv.RepairLadder, in: func(in *reaper.Input) { in.Destructive = spent(10) },
			want: []string{"repair web2"}, phase: reaperkv.PhaseRepairRerun},
		{name: "max_in_flight: one ladder of the role at a time", steps: reaperkv.RepairLadder,
			in: func(in *reaper.Input) {
				in.Checks = replaceChecks(in.Checks, "web3", crit("web3"))
				in.Memory.Critical = longCrit("web2", "web3")
			}, want: []string{"repair web3"}, blocked: "web: replacement of web2 waits: max_in_flight 1"},
		{name: "repaired by a reboot less than an hour ago: the next ladder starts at rebuild", steps: reaperkv.RepairLadder,
			in: func(in *reaper.Input) {
				in.Memory.LastRepair = map[string]reaper.RepairMark{"id-web2": {Step: "reboot", At: t0.Add(-20 * time.Minute)}}
			}, want: []string{"repair web2"}, phase: reaperkv.PhaseRepairRebuild, skipped: "reboot: a ladder reached it for web2"},
		{name: "a ladder that ended less than an hour ago: replaced", steps: []string{"rerun", "reboot"},
			in: func(in *reaper.Input) {
				in.Memory.LastRepair = map[string]reaper.RepairMark{"id-web2": {Step: "reboot", At: t0.Add(-20 * time.Minute)}}
			}, want: []string{"create web6 for web2"}},
		{name: "repaired more than an hour ago: the ladder starts afresh", steps: reaperkv.RepairLadder,
			in: func(in *reaper.Input) {
				in.Memory.LastRepair = map[string]reaper.RepairMark{"id-web2": {Step: "reboot", At: t0.Add(-2 * time.Hour)}}
			}, want: []string{"repair web2"}, phase: reaperkv.PhaseRepairRerun},
		{name: "not on the role's boot spec: no rebuild, replaced", steps: reaperkv.RepairLadder,
			in: func(in *reaper.Input) {
				server(in, "web2").Metadata[reaper.MetaSpec] = "another"
				in.Memory.LastRepair = map[string]reaper.RepairMark{"id-web2": {Step: "reboot", At: t0.Add(-20 * time.Minute)}}
			}, want: []string{"create web6 for web2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := repairWorld(t, tc.steps...)
			if tc.in != nil {
				tc.in(&in)
			}
			p := Plan(in)
			if got := ops(p); strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("actions %v, want %v; blocked %q", got, tc.want, p.Blocked)
			}
			if tc.blocked != "" && !strings.Contains(strings.Join(p.Blocked, "\n"), tc.blocked) {
				t.Errorf("blocked %q, want %q", p.Blocked, tc.blocked)
			}
			if tc.phase == "" {
				return
			}
			a := p.Actions[0]
			e := a.Entry
			if a.Op != reaper.OpRepair || e.Kind != reaperkv.KindRepair || e.Phase != tc.phase || e.OldName != "web2" || e.OldID != "id-web2" || e.Repair == nil {
				t.Fatalf("action %s, entry %+v", a, e)
			}
			step := strings.TrimPrefix(string(tc.phase), "repair-")
			grace := 5 * time.Minute
			if step == "rebuild" {
				grace = 15 * time.Minute
			}
			if e.Repair.Step != step || !e.Repair.Since.Equal(t0) || !e.Repair.Until.Equal(t0.Add(grace)) {
				t.Errorf("repair state %+v: want step %s from t0 for %s", e.Repair, step, grace)
			}
			if tried := e.Repair.String(); tc.skipped != "" && !strings.Contains(tried, strings.Split(tc.skipped, ":")[0]+" (skipped)") {
				t.Errorf("tried %q, want %s skipped", tried, tc.skipped)
			}
			if tc.skipped != "" && !strings.Contains(e.Repair.Tried[len(e.Repair.Tried)-1].Why, strings.SplitN(tc.skipped, ": ", 2)[1]) {
				t.Errorf("skipped because %q, want %q", e.Repair.Tried[len(e.Repair.Tried)-1].Why, tc.skipped)
			}
		})
	}
}

// spent is n destructive actions in the last hour.
func spent(n int) []time.Time {
	var out []time.Time
	for i := range n {
		out = append(out, t0.Add(-time.Duration(i+1)*time.Minute))
	}
	return out
}

// ladderAt puts web2 in a repair entry at step, begun ago (its grace as
// the role gives it), the steps before it tried.
func ladderAt(in *reaper.Input, step string, ago time.Duration, tried ...string) *reaper.Entry {
	grace := in.Config.Roles[0].RepairGraceOf(step)
	rp := &reaperkv.RepairState{Step: step, Since: t0.Add(-ago), Until: t0.Add(-ago + grace), Status: reaper.StatusActive}
	if step != reaper.RepairRerun {
		rp.Asked = rp.Since.Add(time.Second)
	}
	for _, s := range tried {
		rp.Tried = append(rp.Tried, reaperkv.RepairStep{Step: s, Result: reaperkv.RepairFailed})
	}
	in.Journal = append(in.Journal, reaper.Entry{ID: "web.r1", Kind: reaperkv.KindRepair, Role: "web", Reason: string(reaper.StateUnhealthy), Mode: reaper.ModeSurge,
		Phase: reaperkv.RepairPhase(step), OldName: "web2", OldID: "id-web2", Started: t0.Add(-time.Hour), Updated: t0.Add(-ago), Repair: rp})
	return &in.Journal[len(in.Journal)-1]
}

// A repair entry goes on: finished once its server serves again (the
// step that did it remembered), to the next step once the step's grace
// is over (or Nova refused it, or the server went to ERROR), to the
// server's replacement after the last step or at once for a suspect; the
// gate holds every step after the first as it holds the first, and a step
// journalled (a new leader's case) is never asked of Nova again.
func TestRepairLadderAdvances(t *testing.T) {
	all := reaperkv.RepairLadder
	for _, tc := range []struct {
		name    string
		steps   []string
		step    string
		ago     time.Duration
		tried   []string
		in      func(*reaper.Input, *reaper.Entry)
		want    []string
		phase   reaperkv.Phase
		ended   string // the step the action ends, and its result
		reason  string
		blocked string
	}{
		{name: "rerun within its grace: waits", steps: all, step: "rerun", ago: 4 * time.Minute, want: []string{}},
		{name: "rerun's grace over: a reboot", steps: all, step: "rerun", ago: 5 * time.Minute, want: []string{"repair web2"}, phase: reaperkv.PhaseRepairReboot,
			ended: "rerun failed", reason: "web2 does not serve 5m0s after its rerun began"},
		{name: "passes again during its rerun: repaired", steps: all, step: "rerun", ago: 2 * time.Minute,
			in:   func(in *reaper.Input, _ *reaper.Entry) { in.Checks = replaceChecks(in.Checks, "web2", pass("web2")) },
			want: []string{"finish web2"}, ended: "rerun repaired", reason: "web2 serves again: repaired by rerun"},
		{name: "passes again after its reboot, mid-ladder: repaired", steps: all, step: "reboot", ago: 2 * time.Minute, tried: []string{"rerun"},
			in:   func(in *reaper.Input, _ *reaper.Entry) { in.Checks = replaceChecks(in.Checks, "web2", pass("web2")) },
			want: []string{"finish web2"}, ended: "reboot repaired", reason: "repaired by reboot"},
		{name: "still in HARD_REBOOT within its grace: waits", steps: all, step: "reboot", ago: time.Minute, tried: []string{"rerun"},
			in: func(in *reaper.Input, _ *reaper.Entry) { server(in, "web2").Status = "HARD_REBOOT" }, want: []string{}},
		{name: "passing but still in HARD_REBOOT: not yet repaired", steps: all, step: "reboot", ago: time.Minute, tried: []string{"rerun"},
			in: func(in *reaper.Input, _ *reaper.Entry) {
				server(in, "web2").Status = "HARD_REBOOT"
				in.Checks = replaceChecks(in.Checks, "web2", pass("web2"))
			}, want: []string{}},
		{name: "Nova refused the reboot: a rebuild at once", steps: all, step: "reboot", ago: time.Minute, tried: []string{"rerun"},
			in: func(_ *reaper.Input, e *reaper.Entry) {
				e.Repair.Asked, e.Repair.Result, e.Repair.Error = time.Time{}, reaperkv.RepairRefused, "reboot server id-web2: conflict: 409"
			}, want: []string{"repair web2"}, phase: reaperkv.PhaseRepairRebuild, ended: "reboot refused", reason: "Nova refused the reboot of web2: reboot server id-web2: conflict: 409"},
		{name: "a reboot whose call had no answer: waits for its grace, never asked again", steps: all, step: "reboot", ago: time.Minute, tried: []string{"rerun"},
			in: func(_ *reaper.Input, e *reaper.Entry) {
				e.Repair.Asked, e.Repair.Result, e.Repair.Error = time.Time{}, reaperkv.RepairUnknown, "timeout"
			}, want: []string{}},
		{name: "a new leader finds the reboot journalled, not yet answered: waits, never asked again", steps: all, step: "reboot", ago: time.Minute, tried: []string{"rerun"},
			in: func(_ *reaper.Input, e *reaper.Entry) { e.Repair.Asked = time.Time{} }, want: []string{}},
		{name: "went to ERROR after its reboot: a rebuild at once", steps: all, step: "reboot", ago: time.Minute, tried: []string{"rerun"},
			in:   func(in *reaper.Input, _ *reaper.Entry) { server(in, "web2").Status = reaper.StatusError },
			want: []string{"repair web2"}, phase: reaperkv.PhaseRepairRebuild, ended: "reboot failed", reason: "web2 went to ERROR after its reboot"},
		{name: "in ERROR before its reboot and still: waits for the grace", steps: all, step: "reboot", ago: time.Minute, tried: []string{"rerun"},
			in: func(in *reaper.Input, e *reaper.Entry) {
				server(in, "web2").Status = reaper.StatusError
				e.Repair.Status = reaper.StatusError
			}, want: []string{}},
		{name: "the reboot's grace over: a rebuild (boot_grace)", steps: all, step: "reboot", ago: 6 * time.Minute, tried: []string{"rerun"},
			want: []string{"repair web2"}, phase: reaperkv.PhaseRepairRebuild, ended: "reboot failed"},
		{name: "the rebuild's grace is boot_grace: waits", steps: all, step: "rebuild", ago: 14 * time.Minute, tried: []string{"rerun", "reboot"}, want: []string{}},
		{name: "the rebuild's grace over: replaced, the same entry", steps: all, step: "rebuild", ago: 15 * time.Minute, tried: []string{"rerun", "reboot"},
			want: []string{"create web6 for web2"}, ended: "rebuild failed", reason: "the repair ladder is over"},
		{name: "the rebuild went to ERROR: replaced", steps: all, step: "rebuild", ago: time.Minute, tried: []string{"rerun", "reboot"},
			in:   func(in *reaper.Input, _ *reaper.Entry) { server(in, "web2").Status = reaper.StatusError },
			want: []string{"create web6 for web2"}, ended: "rebuild failed", reason: "went to ERROR after its rebuild"},
		{name: "the last step of a shorter ladder: replaced", steps: []string{"rerun", "reboot"}, step: "reboot", ago: 5 * time.Minute, tried: []string{"rerun"},
			want: []string{"create web6 for web2"}, ended: "reboot failed"},
		{name: "delete-first: the ladder ends in a drain", steps: []string{"rerun"}, step: "rerun", ago: 5 * time.Minute,
			in: func(in *reaper.Input, e *reaper.Entry) {
				in.Config.Roles[0].ReplaceMode, e.Mode = reaper.ModeDeleteFirst, reaper.ModeDeleteFirst
			},
			want: []string{"drain web2"}, ended: "rerun failed"},
		{name: "suspect during its rerun: replaced at once", steps: all, step: "rerun", ago: time.Minute,
			in:   func(in *reaper.Input, _ *reaper.Entry) { in.Suspect = map[string]bool{"web2": true} },
			want: []string{"create web6 for web2"}, ended: "rerun abandoned", reason: "suspect"},
		{name: "gone from the list: finished, judged afresh", steps: all, step: "reboot", ago: time.Minute, tried: []string{"rerun"},
			in: func(in *reaper.Input, _ *reaper.Entry) {
				in.Servers = append(in.Servers[:1], in.Servers[2:]...)
				in.Checks = replaceChecks(in.Checks, "web2")
			}, want: []string{"finish web2"}, ended: "reboot abandoned"},
		{name: "gone from the list while its node passes: waits", steps: all, step: "reboot", ago: time.Minute, tried: []string{"rerun"},
			in: func(in *reaper.Input, _ *reaper.Entry) {
				in.Servers = append(in.Servers[:1], in.Servers[2:]...)
				in.Checks = replaceChecks(in.Checks, "web2", pass("web2"))
			}, want: []string{}, blocked: "the list may be incomplete; its repair waits"},
		{name: "a status the reaper does not know: waits", steps: all, step: "reboot", ago: 6 * time.Minute, tried: []string{"rerun"},
			in:   func(in *reaper.Input, _ *reaper.Entry) { server(in, "web2").Status = "WEIRD" },
			want: []string{}, blocked: "a server in an unknown state is never acted on"},
		{name: "paused: the next step waits", steps: all, step: "rerun", ago: 5 * time.Minute,
			in: func(in *reaper.Input, _ *reaper.Entry) {
				in.Checks = replaceChecks(replaceChecks(in.Checks, "web3", crit("web3")), "web4", crit("web4"))
				in.Memory.Critical = longCrit("web2", "web3", "web4")
			}, want: []string{}, blocked: "web.r1: web2 does not serve 5m0s after its rerun began; its reboot waits: paused"},
		{name: "after a pause the step's grace runs again", steps: all, step: "rerun", ago: 5 * time.Minute,
			in: func(in *reaper.Input, _ *reaper.Entry) { in.Memory.Partitioned = t0.Add(-time.Minute) }, want: []string{}},
		{name: "disarmed: the next step waits", steps: all, step: "rerun", ago: 5 * time.Minute,
			in: func(in *reaper.Input, _ *reaper.Entry) { in.Armed, in.ArmKeyWritten = false, true }, want: []string{}, blocked: "its reboot waits: not armed"},
		{name: "the hourly budget spent: the rebuild waits", steps: all, step: "reboot", ago: 6 * time.Minute, tried: []string{"rerun"},
			in: func(in *reaper.Input, _ *reaper.Entry) { in.Destructive = spent(10) }, want: []string{}, blocked: "its rebuild waits: max_actions_per_hour (10) reached"},
		{name: "the role scaled in during the ladder: its server is the one drained", steps: all, step: "rerun", ago: time.Minute,
			in:   func(in *reaper.Input, _ *reaper.Entry) { in.Desired = map[string]int{"web": 4} },
			want: []string{"drain web2"}, ended: "rerun abandoned", reason: "surplus (unhealthy, in its repair ladder): 1 over desired 4"},
		{name: "scaled in during the ladder, disarmed: nothing is drained", steps: all, step: "rerun", ago: time.Minute,
			in: func(in *reaper.Input, _ *reaper.Entry) {
				in.Desired = map[string]int{"web": 4}
				in.Armed, in.ArmKeyWritten = false, true
			}, want: []string{}, blocked: "scale in of web2 (in its repair ladder) waits: not armed"},
		{name: "the replacement after the ladder waits for the create backoff", steps: []string{"rerun"}, step: "rerun", ago: 5 * time.Minute,
			in: func(in *reaper.Input, _ *reaper.Entry) { in.BackoffUntil = t0.Add(time.Minute) }, want: []string{},
			blocked: "replacement of web2 (unhealthy) waits: the create backoff holds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := repairWorld(t, tc.steps...)
			e := ladderAt(&in, tc.step, tc.ago, tc.tried...)
			if tc.in != nil {
				tc.in(&in, e)
			}
			p := Plan(in)
			if got := ops(p); strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("actions %v, want %v; blocked %q", got, tc.want, p.Blocked)
			}
			if tc.blocked != "" && !strings.Contains(strings.Join(p.Blocked, "\n"), tc.blocked) {
				t.Errorf("blocked %q, want %q", p.Blocked, tc.blocked)
			}
			if len(tc.want) == 0 {
				return
			}
			a := p.Actions[0]
			if a.Entry.ID != "web.r1" {
				t.Errorf("the action is entry %s's, want web.r1's (one entry from repair to replacement)", a.Entry.ID)
			}
			if tc.phase != "" && (a.Entry.Phase != tc.phase || a.Entry.Repair.Step != strings.TrimPrefix(string(tc.phase), "repair-") || !a.Entry.Repair.Since.Equal(t0)) {
				t.Errorf("entry phase %s, repair %+v: want %s from t0", a.Entry.Phase, a.Entry.Repair, tc.phase)
			}
			if tc.ended != "" {
				if len(a.Ended) != 1 || a.Ended[0].Step+" "+a.Ended[0].Result != tc.ended {
					t.Errorf("ended %+v, want %s", a.Ended, tc.ended)
				}
				if last := a.Entry.Repair.Tried; len(last) == 0 || last[len(last)-1].Step+" "+last[len(last)-1].Result != tc.ended && !strings.Contains(tc.name, "boot spec") {
					t.Errorf("tried %+v, want it to end with %s", last, tc.ended)
				}
			}
			if !strings.Contains(a.Reason, tc.reason) {
				t.Errorf("reason %q, want %q", a.Reason, tc.reason)
			}
			if a.Op == reaper.OpCreate && (a.Entry.Kind != reaperkv.KindReplace || a.Entry.Reason != string(reaper.StateUnhealthy) || a.Entry.Repair.Step != "") {
				t.Errorf("the replacement: entry %+v", a.Entry)
			}
			if a.Op == reaper.OpDrain && strings.HasPrefix(tc.reason, "surplus") && (a.Entry.Kind != reaperkv.KindDelete || a.Entry.Abortable) {
				t.Errorf("the scale-in: entry %+v, want a delete that is not abortable", a.Entry)
			}
			if a.Op == reaper.OpFinish && strings.Contains(tc.reason, "repaired by") {
				if m := p.Memory.LastRepair["id-web2"]; m.Step != tc.step || !m.At.Equal(t0) {
					t.Errorf("remembered %+v, want %s at t0", m, tc.step)
				}
			}
		})
	}
}

// A server in its repair entry is a member of its role (counted once, so
// the role makes no server for it), counts against max_in_flight, is
// reported as repairing, and counts towards the partition pause by its
// own health.
func TestRepairingServerCounts(t *testing.T) {
	in := repairWorld(t, reaperkv.RepairLadder...)
	ladderAt(&in, "reboot", time.Minute, "rerun")
	server(&in, "web2").Status = "HARD_REBOOT"
	in.Checks = replaceChecks(replaceChecks(in.Checks, "web2"), "web3", crit("web3"))
	in.Memory.Critical = longCrit("web3")
	in.Memory.Absent = longCrit("web2")
	p := Plan(in)
	if got := ops(p); len(got) != 0 {
		t.Fatalf("actions %v, want none (web3 waits for the ladder of web2: max_in_flight)", got)
	}
	if !strings.Contains(strings.Join(p.Blocked, "\n"), "replacement of web3 waits: max_in_flight 1") {
		t.Errorf("blocked %q", p.Blocked)
	}
	r := p.Roles[0]
	if r.Count != 5 || r.States[reaperkv.ServerRepairing] != 1 {
		t.Errorf("role report %+v: want 5 servers, 1 repairing", r)
	}
	if p.Paused {
		t.Errorf("paused at 2 of 5: %s", p.PauseReason)
	}
}

// The ladder's words: any prefix of rerun, reboot, rebuild; anything
// else is refused naming the field; repair_grace defaults to
// critical_grace.
func TestRepairConfig(t *testing.T) {
	for _, tc := range []struct {
		steps []string
		err   string
	}{
		{steps: nil},
		{steps: []string{"rerun"}},
		{steps: []string{"rerun", "reboot"}},
		{steps: []string{"rerun", "reboot", "rebuild"}},
		{steps: []string{"reboot"}, err: "roles[0].repair: [reboot] is not a prefix of [rerun, reboot, rebuild]"},
		{steps: []string{"rerun", "rebuild"}, err: "is not a prefix"},
		{steps: []string{"rerun", "rerun"}, err: "is not a prefix"},
		{steps: []string{"rerun", "reboot", "rebuild", "rebuild"}, err: "is not a prefix"},
		{steps: []string{"restart"}, err: `roles[0].repair[0]: "restart" is no repair step (want rerun, reboot, rebuild)`},
	} {
		c := reaper.DefaultConfig()
		c.Roles = []reaper.Role{{Name: "web", Desired: 1, Repair: tc.steps, Boot: reaper.BootSpec{Flavor: "m1", Image: "debian"}}}
		c.Roles[0].ApplyDefaults()
		err := c.Validate()
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%v: %v", tc.steps, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%v: error %v, want %q", tc.steps, err, tc.err)
		case err == nil && c.Roles[0].RepairGrace != c.Roles[0].CriticalGrace:
			t.Errorf("%v: repair_grace %s, want critical_grace", tc.steps, c.Roles[0].RepairGrace.D())
		}
	}
}
