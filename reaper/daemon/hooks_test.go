package daemon_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/internal/store/schema"
	"github.com/jiocloud/orchestrate/reaper"
	"github.com/jiocloud/orchestrate/reaper/daemon"
)

// Lifecycle hooks on a real agent and the simulated cloud, in simulated
// time (see scaleWorld): a role of fixed count with on_launch and/or
// on_terminate, answered through `orchestrate hook complete` (as a
// handler would), by hand, or not at all.

// newHookWorld is a drainConfig world of n servers with extra role
// settings (and the config's lines old replaced by new, in pairs); the
// platform answers every drain, nothing reports load.
func newHookWorld(t *testing.T, extra string, n int, oldNew ...string) *scaleWorld {
	config := strings.Replace(drainConfig, "    drain_cooloff: 10m\n", "    drain_cooloff: 10m\n"+extra, 1)
	for i := 0; i+1 < len(oldNew); i += 2 {
		config = strings.Replace(config, oldNew[i], oldNew[i+1], 1)
	}
	w := newScaleWorld(t, config, n)
	w.report = false
	return w
}

// answerHooks answers every hook that waits with result, as a handler.
func (w *scaleWorld) answerHooks(result string) {
	w.t.Helper()
	h, err := w.st.Hooks(context.Background())
	if err != nil {
		w.t.Fatal(err)
	}
	for host, r := range h.Requests["web"] {
		if r.Answer == nil {
			w.cli("hook", "complete", "web", host, result, "--by", "inventory", "--detail", "not in the CMDB")
		}
	}
}

// hook is the request waiting for host of role web, nil when none.
func (w *scaleWorld) hook(host string) *schema.HookRequest {
	w.t.Helper()
	h, err := w.st.Hooks(context.Background())
	if err != nil {
		w.t.Fatal(err)
	}
	if r, ok := h.Request("web", host); ok {
		return &r
	}
	return nil
}

// hookEvents are the reaper-hook events the agent holds, decoded.
func (w *scaleWorld) hookEvents() []reaperkv.HookEventBody {
	w.t.Helper()
	evs, _, err := w.c.Event().List(reaperkv.HookEvent, nil)
	if err != nil {
		w.t.Fatal(err)
	}
	var out []reaperkv.HookEventBody
	for _, ev := range evs {
		var b reaperkv.HookEventBody
		if err := json.Unmarshal(ev.Payload, &b); err != nil {
			w.t.Fatalf("event payload %q: %v", ev.Payload, err)
		}
		out = append(out, b)
	}
	return out
}

// history is the reaper's activity history, as `reaper history --json`
// prints it.
func (w *scaleWorld) history() []reaperkv.Activity {
	w.t.Helper()
	var h []reaperkv.Activity
	if err := json.Unmarshal([]byte(w.cli("reaper", "history", "--json")), &h); err != nil {
		w.t.Fatal(err)
	}
	return h
}

// historyHas reports whether an activity of kind names all of want.
func historyHas(h []reaperkv.Activity, kind string, want ...string) bool {
	for _, a := range h {
		text := a.Action + " " + a.Reason
		if a.Kind == kind && !slices.ContainsFunc(want, func(s string) bool { return !strings.Contains(text, s) }) {
			return true
		}
	}
	return false
}

// A new server in a role with on_launch serves, and is held: the request
// under hook/, the event, the entry in launch-hook (the reaper status
// says so) until a handler answers continue; then the entry finishes, the
// request and the answer go, and the history has both steps. A second
// answer, and one after the reaper took the first, are exit 2.
func TestLaunchHookHoldsANewServer(t *testing.T) {
	t.Parallel()
	w := newHookWorld(t, "    on_launch: {timeout: 5m}\n", 2)
	w.cli("scale", "web", "3", "--yes")
	w.stepUntil(6, "web3's launch hook asked", func() bool { return w.hook("web3") != nil })
	req := w.hook("web3")
	if req.Hook != schema.HookLaunch || req.Default != schema.HookAbandon || req.Deadline.Sub(req.Requested) != 5*time.Minute {
		t.Fatalf("request %+v", req)
	}
	if evs := w.hookEvents(); len(evs) != 1 || evs[0].Host != "web3" || evs[0].Entry != req.Entry || evs[0].Hook != "launch" {
		t.Fatalf("events %+v", evs)
	}
	for range 3 {
		w.step()
	}
	if len(journalKeys(t, w.c)) != 1 || !strings.Contains(w.cli("reaper", "status"), "waiting for its on_launch hook") {
		t.Fatalf("the launch did not wait: journal %v\n%s", journalKeys(t, w.c), w.cli("reaper", "status"))
	}
	w.cli("hook", "complete", "web", "web3", "continue", "--by", "inventory", "--detail", "registered")
	if code, errOut := w.runCLI("hook", "complete", "web", "web3", "abandon"); code != 2 || !strings.Contains(errOut, "answered already") {
		t.Fatalf("a second answer: exit %d: %s", code, errOut)
	}
	w.stepUntil(3, "the entry done", func() bool { return len(journalKeys(t, w.c)) == 0 })
	if w.hook("web3") != nil || len(keysUnder(t, w.c, prefix+"/hook-answer/")) != 0 {
		t.Fatalf("hook records left: %v %v", w.hook("web3"), keysUnder(t, w.c, prefix+"/hook-answer/"))
	}
	if code, errOut := w.runCLI("hook", "complete", "web", "web3", "abandon"); code != 2 || !strings.Contains(errOut, "no lifecycle hook of role web waits for web3") {
		t.Fatalf("an answer after the reaper took one: exit %d: %s", code, errOut)
	}
	h := w.history()
	if !historyHas(h, "hook", "web3", "on_launch asked") || !historyHas(h, "hook-result", "web3", "on_launch continue (inventory: registered)") {
		t.Fatalf("history %+v", h)
	}
	if m := metricsText(t, w.r); !strings.Contains(m, `reaper_hook_results_total{role="web",hook="launch",result="continue",by="answer"} 1`) {
		t.Fatalf("metrics:\n%s", m)
	}
	if w.servers() != "web1,web2,web3" || len(w.deleted) != 0 {
		t.Fatalf("servers %s, deleted %v", w.servers(), w.deleted)
	}
}

// keysUnder lists the keys under dir.
func keysUnder(t *testing.T, c *api.Client, dir string) []string {
	t.Helper()
	keys, _, err := c.KV().Keys(dir, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// A handler that abandons every launch of a replacement: each new server
// is deleted, the dead server it was made for stays (never drained), and
// the role's creates back off further each time (quota_backoff 2m
// doubling to 8m), across a new leader too: no create a cycle.
func TestAbandonedLaunchesBackOff(t *testing.T) {
	t.Parallel()
	w := newHookWorld(t, "    on_launch: {timeout: 5m, default_result: continue}\n", 3, "quota_backoff: 30s", "quota_backoff: 2m", "quota_backoff_max: 1m", "quota_backoff_max: 8m")
	w.step()
	setCritical(t, w.c, "web2")
	var creates []time.Time
	last := w.sim.Creates.Load()
	sawWhy := false
	for i := range 90 { // 45 simulated minutes
		if i == 60 {
			w.newLeaderKeepsTheLaunchBackoff()
		}
		w.step()
		if n := w.sim.Creates.Load(); n != last {
			creates, last = append(creates, w.clock()), n
		}
		w.answerHooks("abandon")
		if st := w.cli("reaper", "status"); strings.Contains(st, "role web: creates and claims held back until") && strings.Contains(st, "abandoned by the role's on_launch hook (inventory)") {
			sawWhy = true
		}
	}
	if slices.Contains(w.deleted, "web2") || !strings.Contains(w.servers(), "web2") {
		t.Fatalf("the dead web2 was deleted with no replacement serving: deleted %v", w.deleted)
	}
	if len(creates) < 3 || len(creates) > 7 {
		t.Fatalf("%d creates in 45 minutes (%v): want a few, backing off", len(creates), creates)
	}
	for i := 2; i < len(creates); i++ {
		if gap, prev := creates[i].Sub(creates[i-1]), creates[i-1].Sub(creates[i-2]); gap < prev {
			t.Fatalf("create gaps shrink: %v", creates)
		}
	}
	if gap := creates[len(creates)-1].Sub(creates[len(creates)-2]); gap < 8*time.Minute {
		t.Fatalf("last gap %s, want the 8m cap reached: %v", gap, creates)
	}
	if !sawWhy || !historyHas(w.history(), "rollback", "web4") {
		t.Fatalf("reaper status never said why creates waited (%t), or the history has no rollback", sawWhy)
	}
}

// newLeaderKeepsTheLaunchBackoff makes a new leader, and checks that a
// launch backoff running in the last one's report runs on in the new
// one's first.
func (w *scaleWorld) newLeaderKeepsTheLaunchBackoff() {
	w.t.Helper()
	before, err := readReport(w.c)
	if err != nil {
		w.t.Fatal(err)
	}
	w.newLeader(w.cfg)
	b, running := before.LaunchBackoff["web"]
	running = running && w.clock().Add(w.cfg.Interval.D()).Before(b.Until)
	w.step()
	after, err := readReport(w.c)
	if err != nil {
		w.t.Fatal(err)
	}
	if a := after.LaunchBackoff["web"]; running && (!a.Until.Equal(b.Until) || a.Step != b.Step) {
		w.t.Fatalf("launch backoff %+v before the new leader, %+v after", b, a)
	}
}

// newLeader makes a new reaper with a new session lead (the last one's
// session destroyed, as a killed leader's expires).
func (w *scaleWorld) newLeader(cfg *reaper.Config) {
	w.t.Helper()
	if _, err := w.c.Session().Destroy(w.sess, nil); err != nil {
		w.t.Fatal(err)
	}
	var err error
	if w.r, err = daemon.New(cfg, w.c, w.sim, testLogger(w.t), daemon.WithClock(w.clock)); err != nil {
		w.t.Fatal(err)
	}
	w.sess = holdLock(w.t, w.c, cfg)
}

// A scale-in's drain answered drained asks the role's on_terminate hook:
// the node stays in maintenance while it waits; continue deletes it,
// abandon (or no answer by the timeout, default abandon) keeps it, as a
// drain abort does: out of maintenance, cooling off, cause hook. For a
// replacement made for the server's health an abandon is ignored: the
// dead server is deleted.
func TestTerminateHook(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		answer string // "" for none
		health bool
		kept   bool
	}{
		{name: "continue", answer: "continue"},
		{name: "abandon", answer: "abandon", kept: true},
		{name: "no answer by the timeout", kept: true},
		{name: "abandon, a replacement for health", answer: "abandon", health: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newHookWorld(t, "    on_terminate: {timeout: 3m}\n", 3)
			w.step()
			if tc.health {
				setCritical(t, w.c, "web3")
			} else {
				w.cli("scale", "web", "2", "--yes")
			}
			w.stepUntil(12, "web3's terminate hook asked", func() bool { return w.hook("web3") != nil })
			if req := w.hook("web3"); req.Hook != schema.HookTerminate || req.AbandonIgnored != tc.health || !hasMaintenance(t, w.c, "web3") {
				t.Fatalf("request %+v, in maintenance %t", req, hasMaintenance(t, w.c, "web3"))
			}
			asked := w.clock()
			w.step()
			if !hasMaintenance(t, w.c, "web3") || slices.Contains(w.deleted, "web3") {
				t.Fatal("web3 left maintenance, or was deleted, while its hook waits")
			}
			if tc.answer != "" {
				w.cli("hook", "complete", "web", "web3", tc.answer, "--by", "inventory")
			}
			w.stepUntil(10, "the entry done", func() bool { return len(journalKeys(t, w.c)) == 0 })
			if tc.answer == "" && w.clock().Sub(asked) < 3*time.Minute {
				t.Fatalf("the default applied %s after the request, before the 3m timeout", w.clock().Sub(asked))
			}
			if !tc.kept {
				w.stepUntil(3, "web3 deleted", func() bool { return slices.Contains(w.deleted, "web3") })
				return
			}
			w.keeps("web3")
			if rec := w.cooloff("web3"); rec == nil || rec.Cause != reaperkv.AbortHook || !strings.Contains(rec.Detail, "on_terminate abandon") {
				t.Fatalf("cool-off record %+v", rec)
			}
			if w.hook("web3") != nil {
				t.Fatal("the request outlived its hook")
			}
		})
	}
}

// A leader killed while a launch hook waits: the next leader asks
// nothing again (one request, one event, the same deadline) and takes
// the default at the journalled deadline, not one timeout after its own
// start. A word written by hand in the answer's key meanwhile is no
// continue: named in the state, and the default (abandon) applies.
func TestHookSurvivesANewLeader(t *testing.T) {
	t.Parallel()
	w := newHookWorld(t, "    on_launch: {timeout: 5m}\n", 2)
	w.cli("scale", "web", "3", "--yes")
	w.stepUntil(6, "web3's launch hook asked", func() bool { return w.hook("web3") != nil })
	req := w.hook("web3")
	w.step()
	w.step() // 1m of the 5m gone
	w.newLeader(w.cfg)
	if _, err := w.c.KV().Put(&api.KVPair{Key: prefix + "/hook-answer/web/web3", Value: []byte("continue")}, nil); err != nil {
		t.Fatal(err)
	}
	w.step()
	if again := w.hook("web3"); again == nil || again.Index != req.Index || !again.Deadline.Equal(req.Deadline) || len(w.hookEvents()) != 1 {
		t.Fatalf("the new leader asked again: %+v (was %+v), %d events", again, req, len(w.hookEvents()))
	}
	if b := blocked(w.c); !strings.Contains(b, "ignored, not an answer: "+prefix+"/hook-answer/web/web3") {
		t.Fatalf("held back %q: want the word named", b)
	}
	n := w.stepUntil(12, "web3 rolled back", func() bool { return slices.Contains(w.deleted, "web3") })
	if at := w.clock(); at.Before(req.Deadline) || at.After(req.Deadline.Add(3*w.cfg.Interval.D())) {
		t.Fatalf("rolled back at %s (%d steps), want just after the journalled deadline %s", at, n, req.Deadline)
	}
	if m := metricsText(t, w.r); !strings.Contains(m, `reaper_hook_results_total{role="web",hook="launch",result="abandon",by="timeout"} 1`) ||
		strings.Contains(m, `reaper_hooks_asked_total{role="web"`) {
		t.Fatalf("the new leader's metrics: want the timeout's abandon, and no hook asked:\n%s", m)
	}
	if keys := keysUnder(t, w.c, prefix+"/hook"); len(keys) != 0 {
		t.Fatalf("hook records left: %v", keys)
	}
}
