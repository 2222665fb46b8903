package daemon_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/jiocloud/orchestrate/internal/orchestrate"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
)

// Autoscaling on a real agent and the simulated cloud, in simulated time:
// the reaper, the cloud and the nodes' metric reports share one clock that
// each step moves on by one interval (30 s), so ten minutes of a cloud's
// life take seconds. Consul, its KV, its health and the reaper's code are
// all real; only the machines and their load are simulated.

// The role follows its load: a step up reaches ceil(load/target) within
// the scale-out cooldowns; a steady load changes nothing for ten minutes;
// a drop scales in only after the stabilization window, one server per
// cooldown, each through the drain handshake and taking the least loaded
// server.
func TestAutoscaleFollowsLoad(t *testing.T) {
	t.Parallel()
	w := newScaleWorld(t, scaleConfig, 2)
	w.load.SetTotal(0.6) // 0.3 per node: below target, but min is 2
	for range 3 {
		w.step()
	}
	if d := w.desired(); d != 2 || len(w.scaled) != 0 {
		t.Fatalf("at a light load the count moved: desired %d, changes %v", d, w.scaled)
	}

	// A step up to 3.0: ceil(3.0 / 0.6) = 5 servers.
	w.load.SetTotal(3.0)
	up := w.clock()
	w.stepUntil(24, "5 servers serving", func() bool { return w.desired() == 5 && w.serving() == 5 })
	reached := w.clock().Sub(up)
	if len(w.scaled) < 2 || w.scaled[0].at.Sub(up) > w.cfg.Interval.D() {
		t.Fatalf("the first scale out did not come at the first cycle after the step: %v", w.scaled)
	}
	for i := 1; i < len(w.scaled); i++ {
		if gap := w.scaled[i].at.Sub(w.scaled[i-1].at); gap < 3*time.Minute {
			t.Fatalf("scale outs %v and %v only %s apart, inside the 3m cooldown", w.scaled[i-1], w.scaled[i], gap)
		}
		if w.scaled[i].to-w.scaled[i].from > 2 {
			t.Fatalf("scale out %v by more than max_step 2", w.scaled[i])
		}
	}
	// 2 -> 4 at once, 4 -> 5 after the cooldown, the last one booting 1m.
	if reached > 3*time.Minute+time.Minute+2*w.cfg.Interval.D() {
		t.Fatalf("5 servers served %s after the step up, want within cooldown 3m + boot 1m + two cycles", reached)
	}
	t.Logf("load 0.6 -> 3.0: 5 servers serving after %s of simulated time (changes %v)", reached, w.scaled)

	// Steady: nothing moves for ten minutes. The servers carry different
	// shares (web3 the least), the average is the target.
	w.load.SetWeight("web3", 0.3)
	changes, creates := len(w.scaled), w.sim.Creates.Load()
	for range 20 {
		w.step()
	}
	if len(w.scaled) != changes || w.sim.Creates.Load() != creates || len(w.deleted) != 0 {
		t.Fatalf("a steady load moved the count: changes %v, creates %d -> %d, deleted %v", w.scaled[changes:], creates, w.sim.Creates.Load(), w.deleted)
	}
	if d := w.lastDecision(); d.Result != reaperkv.ResultHold || !strings.HasPrefix(d.Reason, "within-tolerance") {
		t.Fatalf("steady decision %+v, want a hold within the tolerance", d)
	}

	// A drop to 0.9: 0.18 per node recommends 2, but only once the
	// stabilization window no longer holds a higher recommendation.
	w.load.SetTotal(0.9)
	down := w.clock()
	w.stepUntil(14, "a scale in", func() bool { return w.desired() < 5 })
	first := w.scaled[len(w.scaled)-1]
	if wait := first.at.Sub(down); wait < 5*time.Minute || wait > 5*time.Minute+w.cfg.Interval.D() {
		t.Fatalf("the first scale in came %s after the drop, want after the 5m stabilization window, at the first cycle past it", wait)
	}
	if first.to != 4 {
		t.Fatalf("scale in %v, want 5 -> 4 (max_step 1)", first)
	}
	// The drain handshake: the least loaded server (web3) is drained, the
	// platform answers, and it is deleted at once, not at drain_timeout.
	asked := w.stepUntil(3, "a drain request", func() bool {
		snap, err := w.st.Snapshot(context.Background())
		return err == nil && len(snap.Scaling.Drains) > 0
	})
	snap, _ := w.st.Snapshot(context.Background())
	if _, ok := snap.Scaling.Drains["web3"]; !ok || len(snap.Scaling.Drains) != 1 {
		t.Fatalf("drain requests %v, want web3's only (the least loaded)", snap.Scaling.Drains)
	}
	steps := w.stepUntil(6, "web3 deleted", func() bool { return !strings.Contains(w.servers(), "web3,") && !strings.HasSuffix(w.servers(), "web3") })
	if time.Duration(steps)*w.cfg.Interval.D() >= w.cfg.Roles[0].DrainTimeout.D() {
		t.Fatalf("web3 deleted %d cycles after its drain was asked for and answered: it waited for drain_timeout", steps)
	}
	if hasMaintenance(t, w.c, "web3") || catalogHas(t, w.c, "web3") {
		t.Fatal("web3's node is still in the catalog")
	}
	t.Logf("load 3.0 -> 0.9: scale in after %s, drain asked %d cycle(s) later, web3 (the least loaded) deleted %d cycle(s) after that", first.at.Sub(down), asked, steps)

	// The next scale in waits for its cooldown, and the count stops at
	// ceil(0.9 / 0.6) = 2.
	w.stepUntil(40, "2 servers", func() bool { return w.desired() == 2 && w.serving() == 2 })
	ins := w.scaled[len(w.scaled)-3:]
	for i := 1; i < len(ins); i++ {
		if gap := ins[i].at.Sub(ins[i-1].at); gap < 5*time.Minute {
			t.Fatalf("scale ins %v only %s apart, inside the 5m cooldown", ins, gap)
		}
	}
	for range 6 {
		w.step()
	}
	if d := w.desired(); d != 2 {
		t.Fatalf("desired %d after the load settled at 0.9, want 2", d)
	}
	for i := 1; i < len(w.scaled); i++ {
		if w.scaled[i].to > w.scaled[i].from && w.scaled[i-1].to < w.scaled[i-1].from {
			t.Fatalf("the count changed direction: %v", w.scaled)
		}
	}
}

// A host named with `orchestrate scale-in` is the one removed, although
// another is less loaded; a protected host is never chosen; the named
// scale-in holds the autoscaler's scale out until the host is gone.
func TestNamedScaleInRemovesThatHost(t *testing.T) {
	t.Parallel()
	w := newScaleWorld(t, scaleConfig, 4)
	// Three servers' worth: the autoscaler would remove one, but not
	// before its stabilization window is over.
	w.load.SetTotal(3 * 0.6)
	w.load.SetWeight("web2", 0.1)
	for range 3 {
		w.step()
	}
	w.cli("protect", "web1", "--reason", "holds the long-running batch")
	// A protection is no problem: a healthy role stays folded on the
	// screen, and the host's detail says it.
	out := w.cli("status", "--no-catalog", "--host", "web1")
	if !strings.Contains(oneSpaced(out), "protected from scale-in by ") || !strings.Contains(oneSpaced(out), "holds the long-running batch") {
		t.Fatalf("status does not show the protection:\n%s", out)
	}
	w.cli("scale-in", "web", "web4")
	if d := w.desired(); d != 3 {
		t.Fatalf("desired after scale-in of one host: %d, want 3", d)
	}
	w.stepUntil(8, "web4 deleted", func() bool { return w.servers() == "web1,web2,web3" })
	if len(w.deleted) != 1 || w.deleted[0] != "web4" {
		t.Fatalf("deleted %v, want web4 only (named), not web2 (least loaded)", w.deleted)
	}
	// The scale-in key went with the host.
	snap, err := w.st.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Scaling.ScaleIn["web"]) != 0 || len(snap.Scaling.Drains) != 0 {
		t.Fatalf("scale-in requests %v and drains %v left after the delete", snap.Scaling.ScaleIn, snap.Scaling.Drains)
	}
	// A protected host is refused by name, and skipped by the rule: the
	// next scale in takes web2 (the least loaded), never web1.
	var out2, errOut bytes.Buffer
	code := orchestrate.Run(context.Background(), []string{"scale-in", "web", "web1", "--consul-addr", w.agent.HTTPAddr}, orchestrate.IO{Stdout: &out2, Stderr: &errOut})
	if code != 2 || !strings.Contains(errOut.String(), "web1 is protected") {
		t.Fatalf("scale-in of a protected host: exit %d, %s", code, errOut.String())
	}
	w.cli("scale", "web", "2", "--yes")
	w.stepUntil(8, "2 servers", func() bool { return len(w.sim.Servers()) == 2 })
	if w.servers() != "web1,web3" {
		t.Fatalf("servers %s after scaling to 2, want web1 (protected) and web3 (web2 was the least loaded)", w.servers())
	}
}

// Lost reports hold the role: no scaling either way while fewer than half
// of its serving servers have a fresh report, and the decision says why.
func TestLostMetricHolds(t *testing.T) {
	t.Parallel()
	w := newScaleWorld(t, scaleConfig, 4)
	w.load.SetTotal(4 * 0.6)
	for range 3 {
		w.step()
	}
	// The reports stop (the nodes' cron died); the load, which no one
	// sees, would call for 2 servers.
	w.report = false
	w.load.SetTotal(0.1)
	for range 24 { // 12 minutes: past max_age, the window and every cooldown
		w.step()
	}
	if len(w.scaled) != 0 || len(w.deleted) != 0 || w.sim.Creates.Load() != 0 {
		t.Fatalf("scaled %v, deleted %v, created %d without reports", w.scaled, w.deleted, w.sim.Creates.Load())
	}
	if d := w.lastDecision(); d.Result != reaperkv.ResultHold || !strings.Contains(d.Reason, "only 0 of 4 serving servers reported load within max_age 2m0s") {
		t.Fatalf("decision %+v, want a hold naming the missing reports", d)
	}
	// One node of four reports: still fewer than half.
	w.report = true
	w.load.SetTotal(4 * 0.9)
	serving := []string{"web1"}
	if err := w.st.ReportMetric(context.Background(), "web", serving[0], "load", 0.05); err != nil {
		t.Fatal(err)
	}
	w.report = false
	w.step()
	if d := w.lastDecision(); d.Result != reaperkv.ResultHold || !strings.Contains(d.Reason, "only 1 of 4") {
		t.Fatalf("decision with one report of four: %+v", d)
	}
	// Reports back: the window starts again, so a scale in needs a whole
	// window of readings; a scale out is at once.
	w.report = true
	w.step()
	if d := w.lastDecision(); d.Result != reaperkv.ResultScaleOut {
		t.Fatalf("decision with reports back at 0.9 per node: %+v, want a scale out", d)
	}
}

// A role at its max whose nodes' reports include a huge one and a
// negative one does not shrink: the huge report counts at the role's
// plausible_max (4 x target), the negative one (refused by `orchestrate
// report-metric`, written past it straight into KV) counts as no report;
// the decision and the metrics say so. With every report unusable
// (negative, or a value JSON cannot carry) the metric is in doubt: the
// role holds, and the hold is counted. On main,
// serving x value / target overflowed an int and recommended min.
func TestImplausibleReportsNeverShrinkARoleAtMax(t *testing.T) {
	t.Parallel()
	w := newScaleWorld(t, strings.Replace(scaleConfig, "max: 10", "max: 4", 1), 4)
	w.report = false
	// `orchestrate report-metric` refuses a negative value: exit 2,
	// nothing written.
	for _, v := range []string{"-50", "-1e300"} {
		if code, stderr := w.runCLI("report-metric", "--role", "web", "--host", "web2", "load", "--", v); code != 2 || !strings.Contains(stderr, "negative") {
			t.Fatalf("report-metric %s: exit %d, %s; want 2, refused as negative", v, code, stderr)
		}
	}
	if p, _, err := w.c.KV().Get(store.MetricKey(prefix, "web2", "load"), nil); err != nil || p != nil {
		t.Fatalf("a refused report was written: %v %v", p, err)
	}
	// Reports in the world's time: through the store as report-metric
	// writes them, and a negative one straight into KV, as a node past
	// its own tooling would.
	report := func(vals map[string]float64) {
		t.Helper()
		for host, v := range vals {
			if v >= 0 {
				if err := w.st.ReportMetric(context.Background(), "web", host, "load", v); err != nil {
					t.Fatal(err)
				}
				continue
			}
			rec := fmt.Sprintf(`{"value":%g,"time":%q}`, v, w.clock().UTC().Format(time.RFC3339))
			if _, err := w.c.KV().Put(&api.KVPair{Key: store.MetricKey(prefix, host, "load"), Value: []byte(rec)}, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	// 14 minutes: past the stabilization window and every cooldown.
	for range 28 {
		report(map[string]float64{"web1": 1e300, "web2": -50, "web3": 0.6, "web4": 0.6})
		w.step()
	}
	d := w.lastDecision()
	if len(w.scaled) != 0 || len(w.deleted) != 0 || w.desired() != 4 {
		t.Fatalf("the role moved: changes %v, deleted %v, desired %d; decision %+v", w.scaled, w.deleted, w.desired(), d)
	}
	// (2.4 + 0.6 + 0.6) / 3 = 1.2 over 3 of 4: recommends max, holds at it.
	if d.Result != reaperkv.ResultHold || !strings.Contains(d.Reason, "report(s) above plausible_max 2.4 taken at it") || !strings.Contains(d.Reason, "web2 (-50)") ||
		len(d.Clamped) != 1 || len(d.Ignored) != 1 || d.Recommended != 4 {
		t.Fatalf("decision %+v: want a hold at max naming web1's clamped and web2's ignored report", d)
	}
	m := metricsText(t, w.r)
	for _, want := range []string{`reaper_autoscale_reports_clamped{role="web"} 1`, `reaper_autoscale_reports_ignored{role="web"} 1`, `reaper_autoscale_metric_in_doubt_total{role="web"} 0`} {
		if !strings.Contains(m, want+"\n") {
			t.Fatalf("metrics lack %s:\n%s", want, m)
		}
	}
	if out := w.cli("reaper", "status"); !strings.Contains(out, "taken at it") {
		t.Fatalf("reaper status does not show the clamped report:\n%s", out)
	}

	// No usable report: negative ones, and values JSON cannot carry (an
	// overflowing number, NaN) written by hand. Fewer than half usable,
	// the metric is in doubt: hold, counted; the cycles go on.
	for range 12 {
		report(map[string]float64{"web1": -1e300, "web2": -50})
		for host, v := range map[string]string{"web3": "1e999", "web4": "NaN"} {
			rec := fmt.Sprintf(`{"value":%s,"time":%q}`, v, w.clock().UTC().Format(time.RFC3339))
			if _, err := w.c.KV().Put(&api.KVPair{Key: store.MetricKey(prefix, host, "load"), Value: []byte(rec)}, nil); err != nil {
				t.Fatal(err)
			}
		}
		w.step()
	}
	d = w.lastDecision()
	if len(w.scaled) != 0 || len(w.deleted) != 0 || d.Result != reaperkv.ResultHold || !strings.HasPrefix(d.Reason, "metric: only 0 of 4") {
		t.Fatalf("with every report negative: changes %v, deleted %v, decision %+v", w.scaled, w.deleted, d)
	}
	if m := metricsText(t, w.r); !strings.Contains(m, `reaper_autoscale_metric_in_doubt_total{role="web"} 12`+"\n") {
		t.Fatalf("in-doubt holds not counted:\n%s", m)
	}
}

// Exhausted quota is announced: creates failing for quota publish
// <prefix>/capacity/web, shown by status and the reaper's check, and the
// record goes once a created server is ACTIVE.
func TestCapacityExhaustedIsAnnounced(t *testing.T) {
	t.Parallel()
	w := newScaleWorld(t, scaleConfig, 2)
	w.load.SetTotal(2 * 1.2) // twice the target: scale out to 4
	w.sim.SetQuota(2)
	w.stepUntil(6, "the capacity record", func() bool {
		snap, err := w.st.Snapshot(context.Background())
		return err == nil && snap.Scaling.Capacity["web"].State == store.CapacityExhausted
	})
	snap, _ := w.st.Snapshot(context.Background())
	c := snap.Scaling.Capacity["web"]
	if c.Class != "quota" || !strings.Contains(c.Reason, "Quota exceeded") {
		t.Fatalf("capacity record %+v, want class quota with Nova's message", c)
	}
	w.step() // the report of the cycle after the failure carries it
	status := w.cli("status", "--no-catalog")
	if !strings.Contains(status, "capacity EXHAUSTED for ") || !strings.Contains(oneSpaced(status), "Quota exceeded") {
		t.Fatalf("status does not announce the exhausted capacity:\n%s", status)
	}
	if rs := w.cli("reaper", "status"); !strings.Contains(rs, "capacity EXHAUSTED since") {
		t.Fatalf("reaper status does not announce the exhausted capacity:\n%s", rs)
	}
	if m := metricsText(t, w.r); !strings.Contains(m, `reaper_capacity_exhausted{role="web"} 1`) {
		t.Fatalf("metrics:\n%s", m)
	}
	// Quota raised: the backoff ends, a server is made and goes ACTIVE,
	// and the record is removed.
	w.sim.SetQuota(0)
	w.stepUntil(10, "the capacity record removed", func() bool {
		snap, err := w.st.Snapshot(context.Background())
		return err == nil && len(snap.Scaling.Capacity) == 0
	})
	w.step()
	if m := metricsText(t, w.r); !strings.Contains(m, `reaper_capacity_exhausted{role="web"} 0`) {
		t.Fatalf("metrics after the quota was raised:\n%s", m)
	}
}
