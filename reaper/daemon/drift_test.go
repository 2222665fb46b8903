package daemon_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jiocloud/orchestrate/internal/store"
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

// An operator's refresh of a role with refresh off: it stops at its
// checkpoint until `refresh continue`, then rolls the rest and is removed
// when done. A rollback then rebuilds the role from the spec before (image
// and user data file as they were), refused while that file no longer
// holds what it held, and pins the role there once done.
func TestRefreshRequestCheckpointContinueRollback(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.cfg.Roles[0].OnDrainTimeout = reaperkv.DrainDelete // no drain handler here
	dir := t.TempDir()
	useUserData := func(name, content string) {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		f.cfg.Roles[0].Boot.UserDataFile, f.cfg.Roles[0].Boot.UserData = path, []byte(content)
	}
	useUserData("user-data-1.yaml", "#cloud-config\n# v1\n")
	old := f.cfg.Roles[0].Boot.Digest()
	f.arm()
	r := f.start(nil)
	testutil.Eventually(t, 10*time.Second, "the role of 3 built", func() bool {
		return len(f.sim.Servers()) == 3 && catalogHas(t, f.c, "web3") && len(journalKeys(t, f.c)) == 0
	})
	r.stop()

	f.cfg.Roles[0].Boot.Image = "debian-13"
	useUserData("user-data-2.yaml", "#cloud-config\n# v2\n")
	spec := f.cfg.Roles[0].Boot.Digest()
	r = f.start(nil)
	st := refreshStore(t, f)
	onSpec := func(digest string) int {
		n := 0
		for _, s := range f.sim.Servers() {
			if s.Metadata[reaper.MetaSpec] == digest {
				n++
			}
		}
		return n
	}
	request := func(rec reaperkv.RefreshRecord) {
		t.Helper()
		rec.Time, rec.By, rec.Reason = time.Now().UTC(), "test", "the test's request"
		if err := st.PutRefresh(context.Background(), "web", rec, 0); err != nil {
			t.Fatal(err)
		}
	}
	state := func() (reaperkv.RefreshRecord, bool) {
		recs, _, err := st.Refreshes(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		rec, ok := recs["web"]
		return rec, ok
	}
	testutil.Eventually(t, 5*time.Second, "the spec record with the previous spec", func() bool {
		_, specs, err := st.Refreshes(context.Background())
		return err == nil && specs["web"].Current.Digest == spec && specs["web"].Previous != nil && specs["web"].Previous.Digest == old
	})
	waitCycles(t, 3, r)
	if n := f.sim.Creates.Load(); n != 3 {
		t.Fatalf("%d creates before the request: refresh off replaces nothing by itself", n)
	}

	request(reaperkv.RefreshRecord{Checkpoints: []int{30}})
	testutil.Eventually(t, 30*time.Second, "the refresh at its 30% checkpoint", func() bool {
		rec, ok := state()
		return ok && rec.State == reaperkv.RefreshCheckpoint && onSpec(spec) == 1 && len(journalKeys(t, f.c)) == 0
	})
	waitCycles(t, 5, r)
	if n := onSpec(spec); n != 1 || f.sim.Creates.Load() != 4 {
		t.Fatalf("%d on the spec, %d creates at the checkpoint: want 1 and 4, nothing more", n, f.sim.Creates.Load())
	}
	rec, _ := state()
	rec.Continued++
	if err := st.PutRefresh(context.Background(), "web", rec, rec.Index); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "every server on the spec, the request removed", func() bool {
		_, ok := state()
		return !ok && onSpec(spec) == 3 && len(f.sim.Servers()) == 3
	})

	// The previous spec's user data file changed: nothing to build from.
	useFile := filepath.Join(dir, "user-data-1.yaml")
	if err := os.WriteFile(useFile, []byte("#cloud-config\n# edited in place\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	request(reaperkv.RefreshRecord{Rollback: true})
	testutil.Eventually(t, 10*time.Second, "the rollback failed: the file changed", func() bool {
		rec, ok := state()
		return ok && rec.State == reaperkv.RefreshFailed && strings.Contains(rec.Detail, "no longer holds")
	})
	waitCycles(t, 3, r)
	if n := onSpec(spec); n != 3 {
		t.Fatalf("%d servers on the current spec after a failed rollback, want all 3", n)
	}

	if err := os.WriteFile(useFile, []byte("#cloud-config\n# v1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	request(reaperkv.RefreshRecord{Rollback: true, MinHealthyPercent: 60})
	testutil.Eventually(t, 30*time.Second, "rolled back and pinned", func() bool {
		rec, ok := state()
		return ok && rec.State == reaperkv.RefreshPinned && onSpec(old) == 3 && len(f.sim.Servers()) == 3
	})
	var acts []string
	want := []string{"refresh requested by test (the test's request)", "refresh at checkpoint 30%: 1 of 3 serving on spec", "refresh done", "rollback requested by test (the test's request); rollback failed: spec",
		"rollback requested by test (the test's request)", "rollback done"}
	// The cycle writes the request (pinned) before it appends its
	// activities to the history: wait for them.
	testutil.Eventually(t, 5*time.Second, "the rollback's activities in the history", func() bool {
		acts = nil
		for _, a := range readHistory(t, f.c) {
			if a.Kind == reaperkv.ActivityRefresh {
				acts = append(acts, a.Action)
			}
		}
		return len(acts) >= len(want)
	})
	for i := range max(len(acts), len(want)) {
		if i >= len(acts) || i >= len(want) || !strings.HasPrefix(acts[i], want[i]) {
			t.Fatalf("refresh activities:\n%s\nwant, as prefixes:\n%s", strings.Join(acts, "\n"), strings.Join(want, "\n"))
		}
	}
}

func refreshStore(t *testing.T, f *fixture) *store.Store {
	t.Helper()
	s, err := store.New(f.c, prefix)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
