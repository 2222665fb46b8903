package daemon_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/orchestrate"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/reaper"
	"github.com/jiocloud/orchestrate/reaper/daemon"
	"github.com/jiocloud/orchestrate/reaper/simcloud"
)

// Repair before replace on a real agent and the simulated cloud, in
// simulated time (poolWorld): a machine killed stays critical until the
// step the test says mends it: the node's own rerun (the test plays it),
// a reboot (its agent rejoins passing), a rebuild (it converges from
// scratch), or none (it is replaced).

// repairConfig is a role web of 3 with the whole ladder: a rerun and a
// reboot get repair_grace 2m, a rebuild boot_grace 5m.
const repairConfig = `
dry_run: false
prefix: ` + prefix + `
interval: 30s
session_ttl: 2s
lock_delay: 1s
listen: ""
drain_period: 60s
cloud_timeout: 5m
quota_backoff: 30s
quota_backoff_max: 2m
max_actions_per_hour: 20
roles:
  - name: web
    desired: 3
    min_healthy: 1
    boot_grace: 5m
    critical_grace: 1m
    boot_timeout: 10m
    drain_timeout: 1m
    repair: [rerun, reboot, rebuild]
    repair_grace: 2m
    boot: {flavor: m1, image: debian, name_template: "web{n}"}
`

// repairWorld is a poolWorld whose machines a reboot or a rebuild mends
// when cure says so.
type repairWorld struct {
	*poolWorld
	cure map[string]string // name: the step that mends it ("": none)
}

func newRepairWorld(t *testing.T, opts ...daemon.Option) *repairWorld {
	t.Helper()
	w := &repairWorld{poolWorld: newPoolWorldOf(t, repairConfig, time.Minute, 90*time.Second, opts...), cure: map[string]string{}}
	w.sim.RebootDelay, w.sim.RebuildDelay = 30*time.Second, time.Minute
	for i := 1; i <= 3; i++ {
		// Built from the role's spec, as the reaper builds them: a
		// rebuild from the role's image fits them.
		w.sim.SetMeta(fmt.Sprintf("web%d", i), reaper.MetaSpec, w.cfg.Roles[0].Boot.Digest())
	}
	register := func(name, status string) {
		if err := simcloud.RegisterNode(context.Background(), w.c, name, "web", status); err != nil {
			t.Errorf("register %s: %v", name, err)
		}
	}
	w.sim.OnReboot = func(s reaper.Server) {
		// The machine comes back with what it had on its disk.
		if w.mended(s.Name, reaper.RepairReboot) {
			register(s.Name, api.HealthPassing)
			return
		}
		register(s.Name, api.HealthCritical)
	}
	w.sim.OnRebuild = func(s reaper.Server) {
		// A fresh disk: the agent joins critical and Puppet converges
		// the machine from scratch, if anything can.
		register(s.Name, api.HealthCritical)
		if w.mended(s.Name, reaper.RepairRebuild) {
			w.mu.Lock()
			w.booted[s.Name] = w.now
			w.mu.Unlock()
		}
	}
	return w
}

// mended says whether step mends the machine name (and forgets its cure:
// it is whole again).
func (w *repairWorld) mended(name, step string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cure[name] != step {
		return false
	}
	delete(w.cure, name)
	return true
}

func (w *repairWorld) breakMachine(name, cure string) {
	w.mu.Lock()
	w.cure[name] = cure
	w.mu.Unlock()
	w.kill(name)
}

// entries reads the journal.
func (w *repairWorld) entries() []reaper.Entry {
	w.t.Helper()
	keys, err := daemon.NewJournal(w.c, prefix, w.cfg.LeaderKey()).Read(context.Background())
	if err != nil {
		w.t.Fatal(err)
	}
	return keys.Entries
}

// phase is the journal entry of server name's phase ("" without one).
func (w *repairWorld) phase(name string) reaperkv.Phase {
	for _, e := range w.entries() {
		if e.OldName == name {
			return e.Phase
		}
	}
	return ""
}

// idOf is the Nova ID of server name ("" when there is none).
func (w *repairWorld) idOf(name string) string {
	for _, s := range w.sim.Servers() {
		if s.Name == name {
			return s.ID
		}
	}
	return ""
}

// settled: no entry in flight and the role's three members serve.
func (w *repairWorld) settled() bool {
	return len(w.entries()) == 0 && len(w.serving()) == 3
}

// repairHistoryHas says whether an activity of kind done says what.
func repairHistoryHas(t *testing.T, c *api.Client, kind, what string) bool {
	for _, a := range readHistory(t, c) {
		if a.Kind == kind && a.Result == "done" && strings.Contains(a.Reason, what) {
			return true
		}
	}
	return false
}

// The ladder on a real agent: a node whose own rerun mends it mid-ladder
// is finished with no cloud call; a reboot mends one (same server, no
// create); a rebuild from the role's image mends one the reboot did not;
// one nothing mends is replaced after the ladder, as before, and a
// second failure within the hour goes on from the step after the last.
func TestRepairLadderMendsOrReplaces(t *testing.T) {
	w := newRepairWorld(t)
	w.step()

	// The node's own repair watch re-runs converge: it passes again
	// while the reaper gives it the rerun's grace.
	w.breakMachine("web1", reaper.RepairRerun)
	w.stepUntil(10, "web1's rerun step", func() bool { return w.phase("web1") == reaperkv.PhaseRepairRerun })
	if err := simcloud.RegisterNode(context.Background(), w.c, "web1", "web", api.HealthPassing); err != nil {
		t.Fatal(err)
	}
	w.stepUntil(3, "web1 repaired", w.settled)
	if !repairHistoryHas(t, w.c, "finish", "web1 serves again: repaired by rerun") || w.sim.Reboots.Load()+w.sim.Rebuilds.Load()+w.sim.Creates.Load() != 0 {
		t.Fatalf("after the rerun: history %v, reboots %d, rebuilds %d, creates %d", kinds(readHistory(t, w.c)), w.sim.Reboots.Load(), w.sim.Rebuilds.Load(), w.sim.Creates.Load())
	}

	// A reboot mends web2: the rerun's grace first, then one reboot.
	id2 := w.idOf("web2")
	w.breakMachine("web2", reaper.RepairReboot)
	n := w.stepUntil(20, "web2 repaired by its reboot", w.settled)
	if w.sim.Reboots.Load() != 1 || w.sim.Rebuilds.Load() != 0 || w.sim.Creates.Load() != 0 || w.idOf("web2") != id2 {
		t.Fatalf("reboots %d, rebuilds %d, creates %d, web2 %s (was %s)", w.sim.Reboots.Load(), w.sim.Rebuilds.Load(), w.sim.Creates.Load(), w.idOf("web2"), id2)
	}
	// critical_grace 1m, the rerun's 2m, the reboot's 30 s: 8 steps and a
	// cycle or two.
	if n < 7 {
		t.Errorf("web2 repaired after %d steps: the rerun's grace was not given", n)
	}
	if !repairHistoryHas(t, w.c, "finish", "web2 serves again: repaired by reboot") {
		t.Errorf("history: %v", readHistory(t, w.c))
	}

	// The reboot does not mend web3; its rebuild from the role's image
	// does, the same server converging from scratch.
	id3 := w.idOf("web3")
	w.sim.SetMeta("web3", "team", "infra")
	w.breakMachine("web3", reaper.RepairRebuild)
	w.stepUntil(30, "web3 repaired by its rebuild", w.settled)
	if w.sim.Reboots.Load() != 2 || w.sim.Rebuilds.Load() != 1 || w.sim.Creates.Load() != 0 || w.idOf("web3") != id3 || w.sim.Image("web3") != "debian" {
		t.Fatalf("reboots %d, rebuilds %d, creates %d, web3 %s (was %s) from image %q", w.sim.Reboots.Load(), w.sim.Rebuilds.Load(), w.sim.Creates.Load(), w.idOf("web3"), id3, w.sim.Image("web3"))
	}
	if s := serverNamed(w.sim, "web3"); s.Metadata["team"] != "infra" || s.Metadata[reaper.MetaSpec] != w.cfg.Roles[0].Boot.Digest() {
		t.Errorf("web3's metadata after its rebuild: %v", s.Metadata)
	}
	if !repairHistoryHas(t, w.c, "finish", "web3 serves again: repaired by rebuild") {
		t.Errorf("history: %v", readHistory(t, w.c))
	}

	// Nothing mends web1 now. Its rerun repaired it less than an hour
	// ago: this ladder starts at the reboot, then the rebuild, then the
	// replacement as before (surge: web4 serves, web1 is drained, deleted).
	w.breakMachine("web1", "")
	w.stepUntil(10, "web1's ladder", func() bool { return w.phase("web1") != "" })
	if p := w.phase("web1"); p != reaperkv.PhaseRepairReboot {
		t.Fatalf("web1's second ladder starts in phase %s, want %s", p, reaperkv.PhaseRepairReboot)
	}
	w.stepUntil(60, "web1 replaced", func() bool { return w.gone("web1") && w.settled() })
	if w.sim.Reboots.Load() != 3 || w.sim.Rebuilds.Load() != 2 || w.sim.Creates.Load() != 1 {
		t.Errorf("reboots %d, rebuilds %d, creates %d", w.sim.Reboots.Load(), w.sim.Rebuilds.Load(), w.sim.Creates.Load())
	}
	if !repairHistoryHas(t, w.c, "create", "the repair ladder is over") {
		t.Errorf("history: %v", readHistory(t, w.c))
	}
	m := metricsText(t, w.r)
	for _, want := range []string{
		`reaper_repairs_total{role="web",step="rerun",result="repaired"} 1`,
		`reaper_repairs_total{role="web",step="reboot",result="repaired"} 1`,
		`reaper_repairs_total{role="web",step="rebuild",result="repaired"} 1`,
		`reaper_repairs_total{role="web",step="reboot",result="started"} 3`,
		`reaper_repairs_total{role="web",step="rebuild",result="failed"} 1`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s:\n%s", want, grepLines(m, "reaper_repairs_total"))
		}
	}
}

func serverNamed(sim *simcloud.Cloud, name string) reaper.Server {
	for _, s := range sim.Servers() {
		if s.Name == name {
			return s
		}
	}
	return reaper.Server{}
}

func grepLines(text, what string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, what) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// The ladder's faults on a real agent: a partition during it holds the
// next step and restarts the grace; a reboot Nova refuses (409) moves on
// to the rebuild at once; a leader killed between the reboot's journal
// write and Nova's call leaves the reboot unasked, and its successor
// never asks it (it waits the grace, then rebuilds); a rebuild that goes
// to ERROR ends the ladder at once in the replacement. Status shows the
// ladder.
func TestRepairLadderFaults(t *testing.T) {
	var killAt string // the server whose next repair step the leader dies in
	w := newRepairWorld(t, daemon.RepairStep(func() error {
		if killAt != "" {
			killAt = ""
			return errors.New("leader killed")
		}
		return nil
	}))
	w.step()

	// A partition during web1's rerun: the reboot waits while paused,
	// and its grace starts again when the pause lifts.
	w.breakMachine("web1", reaper.RepairReboot)
	w.stepUntil(10, "web1's rerun step", func() bool { return w.phase("web1") == reaperkv.PhaseRepairRerun })
	for _, n := range []string{"web2", "web3"} {
		if err := simcloud.RegisterNode(context.Background(), w.c, n, "web", api.HealthCritical); err != nil {
			t.Fatal(err)
		}
	}
	for range 8 { // 4 minutes, past the rerun's grace
		if p := w.step(); p != nil && !p.Paused {
			t.Fatalf("not paused with 3 of 3 critical")
		}
	}
	if w.sim.Reboots.Load() != 0 || w.phase("web1") != reaperkv.PhaseRepairRerun {
		t.Fatalf("during the pause: reboots %d, web1 in %s", w.sim.Reboots.Load(), w.phase("web1"))
	}
	for _, n := range []string{"web2", "web3"} {
		if err := simcloud.RegisterNode(context.Background(), w.c, n, "web", api.HealthPassing); err != nil {
			t.Fatal(err)
		}
	}
	lifted := w.clock()
	w.stepUntil(10, "web1's reboot after the pause", func() bool { return w.sim.Reboots.Load() == 1 })
	if waited := w.clock().Sub(lifted); waited < 2*time.Minute {
		t.Errorf("rebooted %s after the pause lifted: the rerun's grace (2m) did not start again", waited)
	}
	w.stepUntil(5, "web1 repaired", w.settled)

	// Nova refuses web2's reboot (409): the rebuild follows at the next
	// cycle, not at the end of the reboot's grace.
	w.sim.RefuseRepairs(1, &reaper.CloudError{Class: reaper.Conflict, Op: "reboot server", Err: errors.New("409 Cannot 'reboot' instance while it is in task_state migrating")})
	w.breakMachine("web2", reaper.RepairRebuild)
	w.stepUntil(20, "web2's reboot refused", func() bool { return w.sim.Reboots.Load() == 2 })
	w.step()
	if w.sim.Rebuilds.Load() != 1 || w.phase("web2") != reaperkv.PhaseRepairRebuild {
		t.Fatalf("a cycle after the 409: rebuilds %d, web2 in %s", w.sim.Rebuilds.Load(), w.phase("web2"))
	}
	w.stepUntil(20, "web2 repaired by its rebuild", w.settled)

	// The leader dies between journalling web3's reboot and asking Nova;
	// its successor finds the step journalled and never asks it.
	w.breakMachine("web3", reaper.RepairRebuild)
	w.stepUntil(10, "web3's rerun step", func() bool { return w.phase("web3") == reaperkv.PhaseRepairRerun })
	killAt = "web3"
	w.stepUntil(10, "web3's reboot journalled", func() bool { return w.phase("web3") == reaperkv.PhaseRepairReboot })
	w.newLeader()
	w.stepUntil(20, "web3 repaired by its rebuild", w.settled)
	if w.sim.Reboots.Load() != 2 || w.sim.Rebuilds.Load() != 2 {
		t.Fatalf("reboots %d (want 2: web3's never asked), rebuilds %d", w.sim.Reboots.Load(), w.sim.Rebuilds.Load())
	}

	// web1's rebuild goes to ERROR: replaced at once, not a boot_grace
	// later.
	w.sim.BreakRebuilds(1, "Build of instance aborted: disk full")
	w.breakMachine("web1", "")
	w.stepUntil(20, "web1's rebuild", func() bool { return w.phase("web1") == reaperkv.PhaseRepairRebuild })
	w.step() // the report's journal is the one its cycle read
	out := w.status()
	if !strings.Contains(out, "repair rebuild since") || !strings.Contains(out, "tried rerun (failed), reboot (failed)") {
		t.Errorf("status does not show the ladder:\n%s", out)
	}
	w.stepUntil(6, "web1's replacement", func() bool { return w.sim.Creates.Load() == 1 })
	w.stepUntil(30, "web1 replaced", func() bool { return w.gone("web1") && w.settled() })
	if !repairHistoryHas(t, w.c, "create", "went to ERROR after its rebuild (Build of instance aborted: disk full)") {
		t.Errorf("history: %v", readHistory(t, w.c))
	}

	// web2's own reruns fail: converge marks it suspect (its record, and
	// its own orchestrate:puppet check in warning). Its ladder ends at
	// once in its replacement: no reboot.
	w.breakMachine("web2", "")
	w.stepUntil(10, "web2's rerun step", func() bool { return w.phase("web2") == reaperkv.PhaseRepairRerun })
	markSuspect(t, w.c, "web2")
	reboots, creates := w.sim.Reboots.Load(), w.sim.Creates.Load()
	w.stepUntil(3, "web2's replacement", func() bool { return w.sim.Creates.Load() == creates+1 })
	if w.sim.Reboots.Load() != reboots || !repairHistoryHas(t, w.c, "create", "web2 is suspect (its consistent run failed): no repair mends that") {
		t.Errorf("a suspect: reboots %d (were %d); history %v", w.sim.Reboots.Load(), reboots, readHistory(t, w.c))
	}
}

// markSuspect writes what converge writes of a host whose consistent
// step failed on every attempt: its suspect record and, on its own
// agent, its orchestrate:puppet check in warning.
func markSuspect(t *testing.T, c *api.Client, host string) {
	t.Helper()
	st, err := store.New(c, prefix)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := st.SetCurrentVersion(ctx, "v1"); err != nil {
		t.Fatal(err)
	}
	if err := st.UpdateStatus(ctx, host, store.CategoryPuppet, store.StateFailed, store.StatusValue{Version: "v1", Detail: "suspect: the consistent step failed 3 time(s)", Suspect: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Catalog().Register(&api.CatalogRegistration{Node: host, Address: "127.0.0.1", SkipNodeUpdate: true, Check: &api.AgentCheck{
		Node: host, CheckID: store.ConvergePuppetCheck, Name: store.ConvergePuppetCheck, Status: api.HealthWarning,
		Notes: "orchestrate converge, last puppet outcome: failed: suspect: the consistent step failed 3 time(s)"}}, nil); err != nil {
		t.Fatal(err)
	}
}

// status is `orchestrate reaper status`'s output.
func (w *repairWorld) status() string {
	var out, errOut bytes.Buffer
	args := []string{"reaper", "status", "--consul-addr", w.agent.HTTPAddr, "--prefix", prefix}
	if code := orchestrate.Run(context.Background(), args, orchestrate.IO{Stdout: &out, Stderr: &errOut}); code != 0 {
		w.t.Fatalf("reaper status: exit %d: %s", code, errOut.String())
	}
	return out.String()
}
