package orchestrate

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/internal/store/schema"
)

// putHostMarks writes a reaper report made at `at`: role web with web2
// silent for 10 minutes and web9 orphaned, its records due in 50.
func putHostMarks(t *testing.T, a *consultest.Agent, at time.Time) {
	t.Helper()
	rep := reaperkv.ReaperReport{Time: at.UTC(), Leader: "boot1", Interval: 30 * time.Second, Armed: true,
		Roles: []reaperkv.RoleReport{{Name: "web", Desired: 3, Count: 3, Healthy: 3, States: map[string]int{"healthy": 3},
			Silent: []reaperkv.HostMark{{Host: "web2", Since: at.Add(-10 * time.Minute)}}, SilentCount: 1,
			Orphaned: []reaperkv.HostMark{{Host: "web9", Since: at.Add(-10 * time.Minute), Until: at.Add(50 * time.Minute)}}, OrphanedCount: 1}}}
	data, _ := json.Marshal(rep)
	if _, err := a.Client.KV().Put(&api.KVPair{Key: reaperkv.ReaperKey(schema.DefaultPrefix, reaperkv.ReaperStateKey), Value: data}, nil); err != nil {
		t.Fatal(err)
	}
}

// get-failures lists the reaper's silent hosts (category silent) beside
// the hosts' own failures, text and JSON, and exits 1 for them; status
// shows silent and orphaned hosts in the reaper's section and counts them
// in its summary. A stale report (no leader) lists none, and says so.
func TestStatusAndFailuresShowSilentAndOrphanedHosts(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	putHostMarks(t, a, time.Now())

	r := cli(t, a, "", "get-failures")
	mustCode(t, r, 1, "get-failures with a silent host")
	if !strings.HasPrefix(r.stdout, "silent\tweb2\tsince ") || !strings.Contains(r.stdout, "(10m ago)\tits records have not moved for 10m (no heartbeat nor status); Nova lists its server (role web)") {
		t.Fatalf("get-failures:\n%s", r.stdout)
	}
	var fs []store.Failure
	r = cli(t, a, "", "get-failures", "--json")
	mustCode(t, r, 1, "get-failures --json")
	if err := json.Unmarshal([]byte(r.stdout), &fs); err != nil || len(fs) != 1 || fs[0].Host != "web2" || fs[0].Category != CategorySilent {
		t.Fatalf("get-failures --json: %v %+v\n%s", err, fs, r.stdout)
	}
	// A host's own failure, then categories asked for.
	mustCode(t, cli(t, a, "", "update-status", "--host", "web1", "puppet", "failed", "--detail", "Exec[x] returned 1"), 0, "update-status")
	r = cli(t, a, "", "get-failures")
	if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); r.code != 1 || len(lines) != 2 || !strings.HasPrefix(lines[0], "puppet\tweb1") || !strings.HasPrefix(lines[1], "silent\tweb2") {
		t.Fatalf("get-failures: exit %d\n%s", r.code, r.stdout)
	}
	if r = cli(t, a, "", "get-failures", "puppet"); strings.Contains(r.stdout, "web2") {
		t.Fatalf("get-failures puppet lists the silent host:\n%s", r.stdout)
	}
	if r = cli(t, a, "", "get-failures", "silent"); r.code != 1 || strings.Contains(r.stdout, "web1") || !strings.Contains(r.stdout, "web2") {
		t.Fatalf("get-failures silent: exit %d\n%s", r.code, r.stdout)
	}

	r = cli(t, a, "", "status")
	for _, want := range []string{"failed 1, not reporting 2, silent 1, orphaned 1\n", "  silent: web2\n",
		"  web9 ORPHANED: records and no server for "} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("status lacks %q:\n%s", want, r.stdout)
		}
	}
	var st statusReport
	r = cli(t, a, "", "status", "--json")
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || st.Summary.Silent != 1 || st.Summary.Orphaned != 1 ||
		st.Reaper == nil || st.Reaper.State.Roles[0].Orphaned[0].Host != "web9" {
		t.Fatalf("status --json: %v %+v\n%s", err, st.Summary, r.stdout)
	}

	// No leader for an hour: whether web2 is still silent is unknown.
	putHostMarks(t, a, time.Now().Add(-time.Hour))
	r = cli(t, a, "", "get-failures", "silent")
	mustCode(t, r, 0, "get-failures silent, stale report")
	if r.stdout != "" || !strings.Contains(r.stderr, "silent hosts unknown: the reaper's report is 1h0m0s old") {
		t.Fatalf("stale report: stdout %q, stderr %q", r.stdout, r.stderr)
	}
	if r = cli(t, a, "", "status"); strings.Contains(r.stdout, "silent 1") {
		t.Fatalf("status counts a stale report's silent hosts:\n%s", r.stdout)
	}
}
