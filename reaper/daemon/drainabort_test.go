package daemon_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/reaper/daemon"
)

// Aborted drains on a real agent and the simulated cloud, in simulated
// time (see scaleWorld): a role of fixed count whose scale-in's drain the
// platform answers with `orchestrate drained` (or `--failed`), or not at
// all.

// drainConfig is scaleConfig's role web without its autoscaling: a fixed
// count of 4, its drains 2 minutes long and a cool-off of 10 minutes
// after an aborted one.
var drainConfig = func() string {
	fixed, _, _ := strings.Cut(scaleConfig, "    autoscale:\n")
	return strings.Replace(fixed, "  - name: web\n", "  - name: web\n    desired: 4\n    drain_cooloff: 10m\n", 1)
}()

// newDrainWorld is a drainConfig world (with extra role settings) of n
// servers (web n the oldest); nothing reports load or answers drains
// unless the test does.
func newDrainWorld(t *testing.T, extra string, n int) *scaleWorld {
	w := newScaleWorld(t, strings.Replace(drainConfig, "    drain_cooloff: 10m\n", "    drain_cooloff: 10m\n"+extra, 1), n)
	w.report, w.answer = false, false
	return w
}

// withAbortStep runs the world's reaper again with an abort hook (see
// reaper.AbortStep).
func (w *scaleWorld) withAbortStep(hook func() error) {
	w.t.Helper()
	var err error
	if w.r, err = daemon.New(w.cfg, w.c, w.sim, testLogger(w.t), daemon.WithClock(w.clock), daemon.AbortStep(hook)); err != nil {
		w.t.Fatal(err)
	}
}

// failedDrain waits for host's drain request and answers it failed.
func (w *scaleWorld) failedDrain(host, detail string) {
	w.t.Helper()
	w.drainOf(host, 3)
	w.cli("drained", host, "--failed", "--detail", detail)
}

// drains is the hosts with a drain request.
func (w *scaleWorld) drains() []string {
	snap, err := w.st.Snapshot(context.Background())
	if err != nil {
		w.t.Fatal(err)
	}
	var out []string
	for h := range snap.Scaling.Drains {
		out = append(out, h)
	}
	slices.Sort(out)
	return out
}

// cooloff is host's aborted-drain record, nil when there is none.
func (w *scaleWorld) cooloff(host string) *reaperkv.DrainAbortRecord {
	w.t.Helper()
	p, _, err := w.c.KV().Get(reaperkv.CooloffKey(prefix, host), nil)
	if err != nil {
		w.t.Fatal(err)
	}
	if p == nil {
		return nil
	}
	rec, err := reaperkv.ParseDrainAbort(reaperkv.ReaperCooloffDir+host, p.Value)
	if err != nil {
		w.t.Fatal(err)
	}
	return &rec
}

// drainOf steps until exactly host is asked to drain.
func (w *scaleWorld) drainOf(host string, steps int) {
	w.t.Helper()
	w.stepUntil(steps, "a drain request for "+host+" alone", func() bool { return slices.Equal(w.drains(), []string{host}) })
}

// keeps checks that host is a server of the role, in the catalog, out
// of maintenance, and that nothing is in flight.
func (w *scaleWorld) keeps(host string) {
	w.t.Helper()
	t := w.t.(*testing.T)
	switch {
	case !slices.Contains(strings.Split(w.servers(), ","), host):
		t.Fatalf("%s deleted: servers %s, deleted %v", host, w.servers(), w.deleted)
	case !catalogHas(t, w.c, host) || hasMaintenance(t, w.c, host):
		t.Fatalf("%s not back in service (in the catalog %t, in maintenance %t)", host, catalogHas(t, w.c, host), hasMaintenance(t, w.c, host))
	case len(journalKeys(t, w.c)) != 0 || len(w.drains()) != 0:
		t.Fatalf("journal %v, drains %v after the abort", journalKeys(t, w.c), w.drains())
	}
}

// A scale-in's server whose drain handler answers that the work could
// not move stays: out of maintenance, its entry ended as aborted, the
// reason in the report, the status and the metrics; the scale-in takes
// the next candidate (whose drain succeeds), and once the cool-off is
// over the record goes.
func TestFailedDrainKeepsTheServer(t *testing.T) {
	t.Parallel()
	w := newDrainWorld(t, "", 4)
	w.step()
	w.cli("scale", "web", "3", "--yes")
	w.drainOf("web4", 3) // the oldest
	w.cli("drained", "web4", "--failed", "--detail", "instance i-7 cannot be migrated")
	w.stepUntil(1, "the abort", func() bool { return w.cooloff("web4") != nil })
	w.keeps("web4")
	rec := w.cooloff("web4")
	if rec.Cause != reaperkv.AbortFailed || !strings.Contains(rec.Detail, "instance i-7 cannot be migrated") || rec.Until.Sub(rec.Time) != 10*time.Minute || rec.Named {
		t.Fatalf("cool-off record %+v", rec)
	}
	// The next cycle's report has the record; its scale-in takes the next
	// candidate, web3.
	w.drainOf("web3", 1)
	status := w.cli("reaper", "status")
	if !strings.Contains(status, "drain ABORTED (failed): scale-in of web4 aborted at") || !strings.Contains(status, "instance i-7 cannot be migrated") {
		t.Fatalf("reaper status does not say why web4 stays:\n%s", status)
	}
	m := metricsText(t, w.r)
	for _, want := range []string{`reaper_drain_aborts_total{role="web",cause="failed"} 1`, `reaper_actions_total{op="abort",result="done"} 1`, `reaper_drain_cooloff_hosts{role="web"} 1`} {
		if !strings.Contains(m, want) {
			t.Fatalf("metrics without %s:\n%s", want, m)
		}
	}
	// web3's answer deletes it at once.
	w.answerDrains()
	w.stepUntil(3, "web3 deleted", func() bool { return w.servers() == "web1,web2,web4" })
	if !slices.Equal(w.deleted, []string{"web3"}) {
		t.Fatalf("deleted %v, want web3 only", w.deleted)
	}
	// At the count, nothing more; the cool-off ends and its record goes.
	w.stepUntil(22, "web4's cool-off record removed", func() bool { return w.cooloff("web4") == nil })
	if m := metricsText(t, w.r); !strings.Contains(m, `reaper_drain_cooloff_hosts{role="web"} 0`) || len(w.drains()) != 0 || len(w.deleted) != 1 {
		t.Fatalf("after the cool-off: drains %v, deleted %v, metrics:\n%s", w.drains(), w.deleted, m)
	}
}

// No answer by drain_timeout: the server stays, and so does each next
// candidate that does not answer; with every one cooling off the role is
// held over its count, saying why, and nothing is deleted.
func TestUnansweredDrainKeepsTheServer(t *testing.T) {
	t.Parallel()
	w := newDrainWorld(t, "", 3)
	w.step()
	w.cli("scale", "web", "2", "--yes")
	for _, host := range []string{"web3", "web2", "web1"} {
		w.drainOf(host, 3)
		asked := w.clock()
		w.stepUntil(6, host+"'s drain aborted", func() bool { return w.cooloff(host) != nil })
		if waited := w.clock().Sub(asked); waited < 2*time.Minute {
			t.Fatalf("%s's drain aborted %s after the request, before drain_timeout 2m", host, waited)
		}
		w.keeps(host)
		if rec := w.cooloff(host); rec.Cause != reaperkv.AbortTimeout || !strings.Contains(rec.Detail, "no answer by the drain deadline") {
			t.Fatalf("record %+v", rec)
		}
	}
	for range 4 {
		w.step()
	}
	if len(w.deleted) != 0 || len(w.drains()) != 0 || w.servers() != "web1,web2,web3" {
		t.Fatalf("servers %s, deleted %v, drains %v: want all three kept", w.servers(), w.deleted, w.drains())
	}
	if held := strings.Join(w.lastPlan.Blocked, "\n"); !strings.Contains(held, "web1's drain was aborted") || !strings.Contains(held, "not chosen again before") {
		t.Fatalf("held back %q, want the cool-offs named", held)
	}
	if m := metricsText(t, w.r); !strings.Contains(m, `reaper_drain_aborts_total{role="web",cause="timeout"} 3`) {
		t.Fatalf("metrics:\n%s", m)
	}
}

// With delete configured, the old behaviour: a failed answer and no
// answer both end in a delete at drain_timeout (never before it).
func TestDrainDeleteWhenConfigured(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		failed bool
	}{{"failed", true}, {"no answer", false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newDrainWorld(t, "    on_drain_failure: delete\n    on_drain_timeout: delete\n", 3)
			w.step()
			w.cli("scale", "web", "2", "--yes")
			w.drainOf("web3", 3)
			asked := w.clock()
			if tc.failed {
				w.cli("drained", "web3", "--failed", "--detail", "instance i-7 cannot be migrated")
			}
			ends := "failed: deleted; no answer: deleted"
			if tc.failed {
				ends = ": instance i-7 cannot be migrated): deleted"
			}
			if out := w.cli("status", "--no-catalog"); !strings.Contains(oneSpaced(out), ends) {
				t.Fatalf("status does not say how the drain ends:\n%s", out)
			}
			w.stepUntil(8, "web3 deleted", func() bool { return w.servers() == "web1,web2" })
			if waited := w.clock().Sub(asked); waited < 2*time.Minute {
				t.Fatalf("web3 deleted %s after its drain request, before drain_timeout 2m", waited)
			}
			if w.cooloff("web3") != nil {
				t.Fatal("a deleted server has a cool-off record")
			}
		})
	}
}

// A host named with `orchestrate scale-in` that refuses: its request is
// withdrawn and the count raised back in the abort's transaction, so no
// other host leaves in its place; the report says so.
func TestNamedScaleInAbortRestoresTheCount(t *testing.T) {
	t.Parallel()
	w := newDrainWorld(t, "", 4)
	w.step()
	w.cli("scale-in", "web", "web2")
	if d := w.desired(); d != 3 {
		t.Fatalf("desired %d after naming web2, want 3", d)
	}
	w.drainOf("web2", 3)
	if out := w.cli("status", "--no-catalog"); !strings.Contains(oneSpaced(out), "failed: the server stays; no answer: the server stays") {
		t.Fatalf("status does not say how the drain ends:\n%s", out)
	}
	w.cli("drained", "web2", "--failed", "--detail", "galera: this member cannot leave the cluster cleanly")
	w.stepUntil(1, "the abort", func() bool { return w.cooloff("web2") != nil })
	w.keeps("web2")
	if d := w.desired(); d != 4 {
		t.Fatalf("desired %d after web2 refused, want 4 (raised back)", d)
	}
	snap, err := w.st.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Scaling.ScaleIn["web"]) != 0 {
		t.Fatalf("scale-in requests left: %v", snap.Scaling.ScaleIn)
	}
	if rec := w.cooloff("web2"); !rec.Named || !rec.Restored {
		t.Fatalf("record %+v, want named and restored", rec)
	}
	for range 6 {
		w.step()
	}
	if len(w.drains()) != 0 || len(w.deleted) != 0 || w.servers() != "web1,web2,web3,web4" {
		t.Fatalf("after the refusal: drains %v, deleted %v, servers %s", w.drains(), w.deleted, w.servers())
	}
	if status := w.cli("reaper", "status"); !strings.Contains(status, "its scale-in request was withdrawn and the desired count raised back by one") {
		t.Fatalf("reaper status:\n%s", status)
	}
	// Named again (the operator fixed the cluster): the cool-off does
	// not hold an explicit request.
	w.cli("scale-in", "web", "web2")
	w.drainOf("web2", 2)
	w.answerDrains()
	w.stepUntil(3, "web2 deleted", func() bool { return w.servers() == "web1,web3,web4" })
}

// A leader that stops after writing an abort's intent (phase aborting)
// leaves the server in maintenance; the next leader finishes the abort,
// even under a configuration that now says delete: the server stays.
func TestAbortSurvivesANewLeader(t *testing.T) {
	t.Parallel()
	w := newDrainWorld(t, "", 3)
	stopped := errors.New("the leader stops here")
	w.withAbortStep(func() error { return stopped })
	w.step()
	w.cli("scale", "web", "2", "--yes")
	w.failedDrain("web3", "instance i-7 cannot be migrated")
	w.step()
	keys := journalKeys(t, w.c)
	if len(keys) != 1 {
		t.Fatalf("journal %v, want the abort's entry", keys)
	}
	p, _, err := w.c.KV().Get(keys[0], nil)
	if err != nil || p == nil || !strings.Contains(string(p.Value), `"phase":"aborting"`) || !hasMaintenance(t, w.c, "web3") {
		t.Fatalf("the first leader's abort did not stop at its intent: %v %+v", err, p)
	}
	// A new leader with a new session, configured to delete.
	if _, err := w.c.Session().Destroy(w.sess, nil); err != nil {
		t.Fatal(err)
	}
	cfg := parseConfig(t, strings.Replace(drainConfig, "    drain_cooloff: 10m\n", "    drain_cooloff: 10m\n    on_drain_failure: delete\n    on_drain_timeout: delete\n", 1))
	w.cfg = cfg
	if w.r, err = daemon.New(cfg, w.c, w.sim, testLogger(t), daemon.WithClock(w.clock)); err != nil {
		t.Fatal(err)
	}
	w.sess = holdLock(t, w.c, cfg)
	w.step()
	w.keeps("web3")
	if rec := w.cooloff("web3"); rec == nil || rec.Cause != reaperkv.AbortFailed {
		t.Fatalf("record %+v", rec)
	}
	// The new leader's scale-in takes the next candidate, under its own
	// configuration: no answer, deleted at drain_timeout.
	w.drainOf("web2", 2)
	w.stepUntil(8, "web2 deleted", func() bool { return w.servers() == "web1,web3" })
}

// `orchestrate scale` while a named host's abort is under way: the
// count moved, so the abort's transaction is refused (nothing of it
// written) and the next cycle finishes it; the count set by hand after
// the request stands, and the request is withdrawn.
func TestNamedAbortMeetsAHandSetCount(t *testing.T) {
	t.Parallel()
	w := newDrainWorld(t, "", 4)
	scaled := false
	w.withAbortStep(func() error {
		if !scaled {
			scaled = true
			w.mu.Lock()
			w.now = w.now.Add(time.Second) // the operator's command comes after the request
			w.mu.Unlock()
			w.cli("scale", "web", "2", "--yes")
		}
		return nil
	})
	w.step()
	w.cli("scale-in", "web", "web2")
	w.failedDrain("web2", "galera: cannot leave cleanly")
	w.step()
	if !scaled || w.cooloff("web2") != nil {
		t.Fatalf("the abort's transaction was not refused when the count moved (hook ran %t)", scaled)
	}
	w.stepUntil(1, "the abort finished", func() bool { return w.cooloff("web2") != nil })
	w.keeps("web2")
	if rec := w.cooloff("web2"); !rec.Named || rec.Restored {
		t.Fatalf("record %+v, want named, not restored", rec)
	}
	if d := w.desired(); d != 2 {
		t.Fatalf("desired %d, want the 2 set by hand", d)
	}
	snap, err := w.st.Snapshot(context.Background())
	if err != nil || len(snap.Scaling.ScaleIn["web"]) != 0 {
		t.Fatalf("scale-in requests %v (%v)", snap.Scaling.ScaleIn, err)
	}
}

// A record under <prefix>/reaper/cooloff/ that the reaper did not write
// holds its host (the safe side) and is named, with what to do.
func TestUnreadableCooloffHoldsItsHost(t *testing.T) {
	t.Parallel()
	w := newDrainWorld(t, "", 4)
	if _, err := w.c.KV().Put(&api.KVPair{Key: reaperkv.CooloffKey(prefix, "web4"), Value: []byte("until tuesday")}, nil); err != nil {
		t.Fatal(err)
	}
	w.step()
	w.cli("scale", "web", "3", "--yes")
	w.drainOf("web3", 3) // not web4, the oldest
	if held := strings.Join(w.lastPlan.Blocked, "\n"); !strings.Contains(held, "reaper/cooloff/web4: not a record of an aborted drain the reaper wrote") || !strings.Contains(held, "`consul kv delete` it") {
		t.Fatalf("held back %q", held)
	}
}
