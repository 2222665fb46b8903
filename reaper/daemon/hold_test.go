package daemon_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/reaper/simcloud"
)

// Holds on a real agent and the simulated cloud, in simulated time (see
// scaleWorld): a role of 3 whose web3 fails.

// holdMaintenanceOf is the notes of node's hold maintenance check, "" when
// it has none.
func holdMaintenanceOf(t *testing.T, c *api.Client, node string) string {
	t.Helper()
	if notes, _ := maintenanceNotes(t, c, node); strings.HasPrefix(notes, reaperkv.HoldNotesPrefix) {
		return notes
	}
	return ""
}

// failWeb3 makes web3's check critical, as a dead service's would be.
func (w *scaleWorld) failWeb3() {
	w.t.Helper()
	if err := simcloud.RegisterNode(context.Background(), w.c, "web3", "web", api.HealthCritical); err != nil {
		w.t.Fatal(err)
	}
}

// An operator's hold: web3, failing, is put in the hold's maintenance and
// kept, while web4 is built in its place and serves; no server is scaled
// in; a second hold in the role is refused (max_held 1); the metric, the
// history and the status say so. Released, web3 leaves maintenance and,
// still failing, is the role's surplus: drained and deleted, with the
// role's three serving throughout.
func TestOperatorHoldKeepsTheServer(t *testing.T) {
	t.Parallel()
	w := newDrainWorld(t, "", 3)
	// orchestrate hold dates its record by the wall clock, which the
	// reaper checks against its own (a record dated far ahead holds
	// nothing): the world's clock starts at the wall clock's time.
	w.mu.Lock()
	w.now = time.Now().UTC()
	w.mu.Unlock()
	w.step()
	w.failWeb3()
	w.cli("hold", "web3", "--reason", "kernel oops: keep it for the kernel team", "--for", "2h")
	w.stepUntil(3, "web3 in the hold's maintenance", func() bool { return holdMaintenanceOf(w.t.(*testing.T), w.c, "web3") != "" })
	w.stepUntil(10, "web4 built and serving in web3's place", func() bool { return w.serving() == 3 && strings.Contains(w.servers(), "web4") })
	for range 6 { // past critical_grace and the drain timeout many times over
		w.step()
	}
	if !strings.Contains(w.servers(), "web3") || len(w.deleted) != 0 {
		t.Fatalf("held web3 touched: servers %s, deleted %v; last plan %s", w.servers(), w.deleted, describePlan(w.lastPlan))
	}
	if len(w.drains()) != 0 || len(journalKeys(t, w.c)) != 0 {
		t.Fatalf("drains %v, journal %v while web3 is held and the role at its count", w.drains(), journalKeys(t, w.c))
	}
	if notes := holdMaintenanceOf(t, w.c, "web3"); !strings.Contains(notes, "kernel oops") {
		t.Fatalf("hold maintenance notes %q", notes)
	}
	if m := metricsText(t, w.r); !strings.Contains(m, `reaper_held_hosts{role="web"} 1`) {
		t.Fatalf("metrics lack reaper_held_hosts{role=\"web\"} 1:\n%s", grepLines(m, "held"))
	}
	if !historyHas(w.history(), reaperkv.ActivityHostHeld, "web3", "kernel oops") {
		t.Fatalf("history lacks the hold: %+v", w.history())
	}
	if st := w.cli("status"); !strings.Contains(st, "HELD for a human (1 of max_held 1): web3 held by") {
		t.Fatalf("status:\n%s", st)
	}
	if code, errOut := w.runCLI("hold", "web2", "--reason", "too"); code != 2 || !strings.Contains(errOut, "max_held") {
		t.Fatalf("a second hold in the role: exit %d, %q; want 2 naming max_held", code, errOut)
	}

	w.cli("hold", "release", "web3")
	w.stepUntil(3, "web3's hold maintenance ended", func() bool { return holdMaintenanceOf(t, w.c, "web3") == "" })
	w.stepUntil(12, "web3, still failing, deleted as the surplus", func() bool { return !strings.Contains(w.servers(), "web3") })
	if len(w.deleted) != 1 || w.deleted[0] != "web3" || w.serving() != 3 {
		t.Fatalf("deleted %v, serving %d: want web3 alone, 3 serving", w.deleted, w.serving())
	}
	if !historyHas(w.history(), reaperkv.ActivityHostReleased, "web3") {
		t.Fatalf("history lacks the release: %+v", w.history())
	}
	if m := metricsText(t, w.r); !strings.Contains(m, `reaper_held_hosts{role="web"} 0`) {
		t.Fatalf("metrics after the release:\n%s", grepLines(m, "held"))
	}
}

// hold_failures: the reaper holds web3 itself when it fails (its record
// under the leader check, for hold_for), builds web4, and once the hold
// expires by the clock deletes web3 (still failing), without holding it
// again.
func TestHoldFailuresExpire(t *testing.T) {
	t.Parallel()
	w := newDrainWorld(t, "    hold_failures: 1\n    hold_for: 10m\n", 3)
	w.step()
	w.failWeb3()
	w.stepUntil(6, "web3 held by the reaper", func() bool { return holdMaintenanceOf(t, w.c, "web3") != "" })
	p, _, err := w.c.KV().Get(reaperkv.HoldKey(prefix, "web3"), nil)
	if err != nil || p == nil {
		t.Fatalf("hold record of web3: %v %v", p, err)
	}
	rec, err := reaperkv.ParseHold(reaperkv.ReaperHoldDir+"web3", p.Value)
	if err != nil || !rec.Auto || rec.ID == "" || rec.Until.Sub(rec.Time).Minutes() != 10 {
		t.Fatalf("hold record %+v, %v: want the reaper's, of web3's ID, for 10m", rec, err)
	}
	w.stepUntil(10, "web4 built and serving", func() bool { return w.serving() == 3 && strings.Contains(w.servers(), "web4") })
	if len(w.deleted) != 0 {
		t.Fatalf("deleted %v while web3 is held", w.deleted)
	}
	w.stepUntil(30, "web3 deleted once its hold expired", func() bool { return !strings.Contains(w.servers(), "web3") })
	if w.clock().Before(rec.Until) {
		t.Fatalf("web3 deleted at %s, before its hold's end %s", w.clock(), rec.Until)
	}
	if len(w.deleted) != 1 || w.serving() != 3 {
		t.Fatalf("deleted %v, serving %d", w.deleted, w.serving())
	}
	if p, _, _ := w.c.KV().Get(reaperkv.HoldKey(prefix, "web3"), nil); p != nil {
		t.Fatalf("web3's hold record outlived it: %s", p.Value)
	}
	if !historyHas(w.history(), reaperkv.ActivityHostHeld, "web3", "hold_failures") || !historyHas(w.history(), reaperkv.ActivityHostReleased, "web3") {
		t.Fatalf("history: %+v", w.history())
	}
}

// Hold records written by hand that hold nothing: garbage, a hold for
// years (a far-future until), one dated a day ahead of the reaper's clock
// (a skewed clock). Each is named in the reaper's report, and web3,
// failing, is replaced as if there were none (the record removed with
// its records): the cycle is not stopped by a bad record, nor is a
// server kept out of the reaper's reach by one.
func TestHandWrittenHoldsHoldNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		value func(now time.Time) string
		want  string
	}{
		{"garbage", func(time.Time) string { return "please keep web3" }, "not a hold record"},
		{"years", func(now time.Time) string {
			return `{"host":"web3","role":"web","reason":"forever","by":"ops","time":"` + now.Format(time.RFC3339) + `","until":"2099-01-01T00:00:00Z"}`
		}, "more than the most a hold may last"},
		{"a day ahead", func(now time.Time) string {
			at := now.Add(24 * time.Hour)
			return `{"host":"web3","role":"web","reason":"skewed","by":"ops","time":"` + at.Format(time.RFC3339) + `","until":"` + at.Add(time.Hour).Format(time.RFC3339) + `"}`
		}, "ahead of the reaper's clock"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newDrainWorld(t, "", 3)
			w.step()
			w.failWeb3()
			if _, err := w.c.KV().Put(&api.KVPair{Key: reaperkv.HoldKey(prefix, "web3"), Value: []byte(tc.value(w.clock()))}, nil); err != nil {
				t.Fatal(err)
			}
			w.step()
			if b := blocked(w.c); !strings.Contains(b, "web3") || !strings.Contains(b, tc.want) {
				t.Fatalf("report's blocked lines %q: want the record named (%q)", b, tc.want)
			}
			w.stepUntil(12, "web3 replaced", func() bool {
				if holdMaintenanceOf(t, w.c, "web3") != "" {
					t.Fatal("a hold's maintenance from a record that holds nothing")
				}
				return slices.Contains(w.deleted, "web3")
			})
			// Its records went with it, the bad one too.
			if p, _, _ := w.c.KV().Get(reaperkv.HoldKey(prefix, "web3"), nil); p != nil {
				t.Fatalf("the record outlived web3: %s", p.Value)
			}
		})
	}
}
