package daemon_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/internal/testutil"
	"github.com/jiocloud/orchestrate/reaper"
)

// Every server the reaper builds records the digest of its role's boot
// spec in its metadata; after the role's image changes, a new reaper (an
// operator's restart with the new configuration) reports the servers as
// drifted, in the state and the metrics, and replaces nothing for it.
func TestBuiltServersRecordTheirSpecAndDriftShows(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.seed(1) // built before the reaper recorded specs: web1
	r := f.start(nil)
	testutil.Eventually(t, 10*time.Second, "web2 and web3 created", func() bool { return len(f.sim.Servers()) == 3 && catalogHas(t, f.c, "web3") })
	want := f.cfg.Roles[0].Boot.Digest()
	for _, s := range f.sim.Servers() {
		got, built := s.Metadata[reaper.MetaSpec], s.Name != "web1"
		if built && got != want {
			t.Fatalf("%s records spec %q, want the role's %q", s.Name, got, want)
		}
		if !built && got != "" {
			t.Fatalf("the seeded web1 records spec %q", got)
		}
	}
	testutil.Eventually(t, 5*time.Second, "a report with one server of unknown spec", func() bool {
		st, _ := readReport(f.c)
		return st != nil && len(st.Roles) > 0 && st.Roles[0].SpecUnknown == 1 && st.Roles[0].Drifted == 0 && st.Roles[0].Spec == want
	})
	r.stop()
	first := map[string]bool{}
	for _, s := range f.sim.Servers() {
		first[s.ID] = true
	}

	f.cfg.Roles[0].Boot.Image = "debian-13"
	r = f.start(nil)
	testutil.Eventually(t, 5*time.Second, "the new image's servers drifted", func() bool {
		st, _ := readReport(f.c)
		return st != nil && len(st.Roles) > 0 && st.Roles[0].Drifted == 2 && st.Roles[0].Spec == f.cfg.Roles[0].Boot.Digest()
	})
	// The cycle writes its report before its metrics: wait for these.
	testutil.Eventually(t, 5*time.Second, "the metric counting 3 servers not known to be on the spec", func() bool {
		return strings.Contains(scrape(t, r), `reaper_role_drifted_servers{role="web"} 3`)
	})
	waitCycles(t, 3, r)
	if n := f.sim.Creates.Load() + f.sim.Deletes.Load(); n != 2 {
		t.Fatalf("%d cloud changes, want the 2 creates of the first run: drift alone replaces nothing", n)
	}
}

// refresh: auto rolls a role onto a new image: every server is replaced,
// one at a time, each new one serving before the old one drains, so the
// role's passing servers never drop below its desired count; the history
// tells each step.
func TestRefreshRollsTheRoleWithoutLosingAServer(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.cfg.Roles[0].Refresh = reaper.RefreshAuto
	// The test's nodes run no drain handler: an unanswered drain deletes
	// (the default, abort, would keep each old server).
	f.cfg.Roles[0].OnDrainTimeout = reaperkv.DrainDelete
	f.arm()
	r := f.start(nil)
	testutil.Eventually(t, 10*time.Second, "the role of 3 built", func() bool {
		return len(f.sim.Servers()) == 3 && catalogHas(t, f.c, "web3") && len(journalKeys(t, f.c)) == 0
	})
	r.stop()
	first := map[string]bool{}
	for _, s := range f.sim.Servers() {
		first[s.ID] = true
	}

	f.cfg.Roles[0].Boot.Image = "debian-13"
	spec := f.cfg.Roles[0].Boot.Digest()
	var low atomic.Int64
	low.Store(3)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { // the role's passing servers, sampled while the refresh runs
		for ctx.Err() == nil {
			if entries, _, err := f.c.Health().Service("web", "", true, nil); err == nil && int64(len(entries)) < low.Load() {
				low.Store(int64(len(entries)))
			}
			time.Sleep(20 * time.Millisecond) // the sampling interval
		}
	}()
	r = f.start(nil)
	testutil.Eventually(t, 60*time.Second, "every server on the new spec, the journal empty", func() bool {
		ss := f.sim.Servers()
		for _, s := range ss {
			if s.Metadata[reaper.MetaSpec] != spec {
				return false
			}
		}
		return len(ss) == 3 && len(journalKeys(t, f.c)) == 0
	})
	cancel()
	if n := low.Load(); n < 3 {
		t.Fatalf("the role's passing servers dropped to %d during the refresh, below its 3", n)
	}
	if c := f.sim.Creates.Load(); c != 6 {
		t.Fatalf("%d creates: want 3 + 3, one replacement each", c)
	}
	for _, s := range f.sim.Servers() {
		if first[s.ID] {
			t.Fatalf("%s (%s) was not replaced", s.Name, s.ID)
		}
	}
	var drifted int
	for _, a := range readHistory(t, f.c) {
		if a.Kind == string(reaper.OpCreate) && strings.Contains(a.Reason, "drifted") && a.Result == "done" {
			drifted++
		}
	}
	if drifted != 3 {
		t.Fatalf("%d creates for drift in the history, want 3", drifted)
	}
	if m := scrape(t, r); !strings.Contains(m, `reaper_history_errors_total{what="event"} 0`) {
		t.Fatalf("history events failed:\n%s", m)
	}
}
