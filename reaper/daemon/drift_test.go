package daemon_test

import (
	"strings"
	"testing"
	"time"

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

	f.cfg.Roles[0].Boot.Image = "debian-13"
	r = f.start(nil)
	testutil.Eventually(t, 5*time.Second, "the new image's servers drifted", func() bool {
		st, _ := readReport(f.c)
		return st != nil && len(st.Roles) > 0 && st.Roles[0].Drifted == 2 && st.Roles[0].Spec == f.cfg.Roles[0].Boot.Digest()
	})
	if m := scrape(t, r); !strings.Contains(m, `reaper_role_drifted_servers{role="web"} 3`) {
		t.Fatalf("metrics do not count 3 servers not known to be on the spec:\n%s", m)
	}
	waitCycles(t, 3, r)
	if n := f.sim.Creates.Load() + f.sim.Deletes.Load(); n != 2 {
		t.Fatalf("%d cloud changes, want the 2 creates of the first run: drift alone replaces nothing", n)
	}
}
