package planner

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/reaper"
	"github.com/jiocloud/orchestrate/reaper/reapertest"
)

// roleView is a role's part of a plan.
func roleView(t *testing.T, p *reaper.Plan, role string) reaperkv.RoleReport {
	t.Helper()
	for _, r := range p.Roles {
		if r.Name == role {
			return r
		}
	}
	t.Fatalf("no role %s in the plan", role)
	return reaperkv.RoleReport{}
}

// A host is silent when Nova lists its server and its own records' index
// has not moved for silent_after (30m by default), by the reaper's clock:
// shown, never acted on.
func TestSilentHosts(t *testing.T) {
	fleet, checks := healthyFleet("web", 3)
	long := t0.Add(-31 * time.Minute)
	cases := []struct {
		name    string
		servers []reaper.Server
		records map[string]uint64
		moved   map[string]reaper.MoveMark
		journal []reaper.Entry
		want    string
	}{
		{name: "records unchanged for 31m: silent", records: map[string]uint64{"web1": 10, "web2": 20, "web3": 30},
			moved: map[string]reaper.MoveMark{"web1": {Index: 10, At: long}, "web2": {Index: 20, At: t0.Add(-time.Minute)}, "web3": {Index: 30, At: long}}, want: "web1,web3"},
		{name: "its index moved this cycle (a heartbeat): not silent", records: map[string]uint64{"web1": 11},
			moved: map[string]reaper.MoveMark{"web1": {Index: 10, At: long}}, want: ""},
		{name: "a new leader, no memory: counted from now", records: map[string]uint64{"web1": 10}, want: ""},
		{name: "just under silent_after: not yet", records: map[string]uint64{"web1": 10},
			moved: map[string]reaper.MoveMark{"web1": {Index: 10, At: t0.Add(-29 * time.Minute)}}, want: ""},
		{name: "no record of its own: the boot and absent rules', not silent", records: map[string]uint64{}, moved: map[string]reaper.MoveMark{"web1": {Index: 10, At: long}}, want: ""},
		{name: "a stopped server: not silent", servers: []reaper.Server{withStatus(fleet[0], "SHUTOFF"), fleet[1], fleet[2]},
			records: map[string]uint64{"web1": 10}, moved: map[string]reaper.MoveMark{"web1": {Index: 10, At: long}}, want: ""},
		{name: "a server in a journal entry (being replaced): the reaper's, not silent", records: map[string]uint64{"web1": 10},
			moved: map[string]reaper.MoveMark{"web1": {Index: 10, At: long}},
			journal: []reaper.Entry{{ID: "web.j1", Kind: reaperkv.KindReplace, Role: "web", Mode: reaper.ModeSurge, Phase: reaperkv.PhaseCreating, OldName: "web1", OldID: "id-web1", NewName: "web4",
				Started: t0.Add(-time.Minute), Updated: t0.Add(-time.Minute)}}, want: ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			servers := tc.servers
			if servers == nil {
				servers = fleet
			}
			mem := reaper.NewMemory()
			mem.Moved = tc.moved
			p := Plan(reaper.Input{Now: t0, Config: reapertest.Config(t), Servers: slices.Clone(servers), Checks: checks, Armed: true, Journal: tc.journal,
				HostRecords: tc.records, Memory: mem})
			v := roleView(t, p, "web")
			if got := reapertest.HostNames(v.Silent); got != tc.want || v.SilentCount != len(v.Silent) {
				t.Fatalf("silent = %q (count %d), want %q", got, v.SilentCount, tc.want)
			}
			for _, a := range p.Actions {
				if (a.Op == reaper.OpCreate && a.Entry.OldName != "") || a.Op == reaper.OpDrain || a.Op == reaper.OpDelete || a.Op == reaper.OpForget {
					t.Fatalf("a silent host was acted on: %v", a)
				}
			}
		})
	}
}

// A Nova list that misses a server for one cycle does not reset its
// silence (the reaper remembers every host's records, listed or not), and
// a host's records moving again ends it.
func TestSilenceOutlivesAListBlip(t *testing.T) {
	fleet, checks := healthyFleet("web", 3)
	in := reaper.Input{Now: t0, Config: reapertest.Config(t), Servers: fleet, Checks: checks, Armed: true, HostRecords: map[string]uint64{"web1": 10}, Memory: reaper.NewMemory()}
	in.Memory.Moved["web1"] = reaper.MoveMark{Index: 10, At: t0.Add(-time.Hour)}
	step := func(servers []reaper.Server, idx uint64) reaperkv.RoleReport {
		in.Servers, in.HostRecords["web1"] = slices.Clone(servers), idx
		p := Plan(in)
		in.Memory, in.Now = p.Memory, in.Now.Add(30*time.Second)
		return roleView(t, p, "web")
	}
	if v := step(fleet, 10); reapertest.HostNames(v.Silent) != "web1" {
		t.Fatalf("silent %q, want web1", reapertest.HostNames(v.Silent))
	}
	step(fleet[1:], 10) // web1 missing from one list
	if v := step(fleet, 10); reapertest.HostNames(v.Silent) != "web1" || !v.Silent[0].Since.Equal(t0.Add(-time.Hour)) {
		t.Fatalf("after the blip: silent %+v, want web1 since an hour before t0", v.Silent)
	}
	if v := step(fleet, 11); len(v.Silent) != 0 {
		t.Fatalf("its heartbeat moved its records: still silent %+v", v.Silent)
	}
}

// A host with records and no server is orphaned; its records (only its
// own, only by name of a configured role, only through the gate) are
// removed after orphan_grace (1h by default).
func TestOrphanedHosts(t *testing.T) {
	fleet, checks := healthyFleet("web", 3)
	old := t0.Add(-2 * time.Hour)
	cases := []struct {
		name     string
		servers  []reaper.Server
		checks   []reaper.Check
		records  map[string]uint64
		orphan   map[string]time.Time
		listed   map[string]time.Time
		journal  []reaper.Entry
		notArmed bool
		partial  bool
		tooMany  map[string]int
		orphaned string
		want     []string
		blocked  string
	}{
		{name: "first seen: orphaned, its grace starts", records: map[string]uint64{"web7": 70}, orphaned: "web7", want: []string{}},
		{name: "past orphan_grace: its records removed", records: map[string]uint64{"web7": 70}, orphan: map[string]time.Time{"web7": old},
			orphaned: "web7", want: []string{"forget-records web7"}},
		{name: "past the grace, not armed: held", records: map[string]uint64{"web7": 70}, orphan: map[string]time.Time{"web7": old}, notArmed: true,
			orphaned: "web7", want: []string{}, blocked: "removal of the records of orphaned host web7 (no server in Nova since 2026-03-01T10:00:00Z) waits: not armed"},
		{name: "past the grace, Nova listed partial records: held", records: map[string]uint64{"web7": 70}, orphan: map[string]time.Time{"web7": old}, partial: true,
			orphaned: "web7", want: []string{}, blocked: "web7 (no server in Nova since 2026-03-01T10:00:00Z) waits: paused"},
		{name: "past the grace, a server of the role left the list without the reaper: held", servers: fleet[1:], checks: checks[1:],
			records: map[string]uint64{"web7": 70}, orphan: map[string]time.Time{"web7": old}, listed: map[string]time.Time{"web1": t0.Add(-time.Minute)},
			orphaned: "web7", want: []string{}, blocked: "web7 (no server in Nova since 2026-03-01T10:00:00Z) waits: web1 left the Nova list"},
		{name: "past the grace, more records than one transaction removes: held, named", records: map[string]uint64{"web7": 70}, orphan: map[string]time.Time{"web7": old},
			tooMany: map[string]int{"web7": 300}, orphaned: "web7", want: []string{}, blocked: "orphaned host web7 are not removed: it has 300 of them"},
		{name: "its server is listed again: not orphaned", records: map[string]uint64{"web1": 10}, orphan: map[string]time.Time{"web1": old}, orphaned: "", want: []string{}},
		{name: "it has a Consul node (alive or dead): the stray rules', not orphaned", checks: append(slices.Clone(checks), serf("web7", "passing")),
			records: map[string]uint64{"web7": 70}, orphan: map[string]time.Time{"web7": old}, orphaned: "", want: []string{}},
		{name: "named like no configured role (a bootstrap node, a Consul server): never", records: map[string]uint64{"bootstrap1": 5, "consul1": 6},
			orphan: map[string]time.Time{"bootstrap1": old, "consul1": old}, orphaned: "", want: []string{}},
		{name: "named in a journal entry: the entry's", records: map[string]uint64{"web7": 70}, orphan: map[string]time.Time{"web7": old},
			journal: []reaper.Entry{{ID: "web.j1", Kind: reaperkv.KindDelete, Role: "web", Phase: reaperkv.PhaseDeleting, OldName: "web7", OldID: "id-web7",
				Started: t0.Add(-time.Minute), Updated: t0.Add(-time.Minute), DeleteAsked: t0.Add(-time.Minute)}},
			orphaned: "", want: []string{"delete web7"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			servers, cs := tc.servers, tc.checks
			if servers == nil {
				servers = fleet
			}
			if cs == nil {
				cs = checks
			}
			servers = slices.Clone(servers)
			if tc.partial {
				servers = append(servers, reaper.Server{ID: "partial-1", Status: "UNKNOWN"})
			}
			mem := reaper.NewMemory()
			mem.Orphan, mem.Listed = tc.orphan, tc.listed
			p := Plan(reaper.Input{Now: t0, Config: reapertest.Config(t), Servers: servers, Checks: cs, Armed: !tc.notArmed, ArmKeyWritten: tc.notArmed,
				Journal: tc.journal, HostRecords: tc.records, TooManyRecords: tc.tooMany, Memory: mem})
			if got := ops(p); strings.Join(got, "; ") != strings.Join(tc.want, "; ") {
				t.Fatalf("actions = %q, want %q\nblocked: %q", got, tc.want, p.Blocked)
			}
			if tc.blocked != "" && !strings.Contains(strings.Join(p.Blocked, "\n"), tc.blocked) {
				t.Fatalf("blocked = %q, want a line with %q", p.Blocked, tc.blocked)
			}
			v := roleView(t, p, "web")
			if got := reapertest.HostNames(v.Orphaned); got != tc.orphaned || v.OrphanedCount != len(v.Orphaned) {
				t.Fatalf("orphaned = %q (count %d), want %q", got, v.OrphanedCount, tc.orphaned)
			}
			for _, a := range p.Actions {
				if a.Op == reaper.OpForget && (a.RecordsIndex != 70 || a.Entry.OldID != "" || a.Entry.NewName != "") {
					t.Fatalf("forget action %+v: want web7's records at index 70, no server", a)
				}
			}
			if _, kept := p.Memory.Orphan["web1"]; kept {
				t.Fatalf("web1's server is listed, yet its orphan time is kept: %v", p.Memory.Orphan)
			}
		})
	}
}

// The grace restarts when the server reappears within it: a server that
// comes back keeps its records.
func TestOrphanGraceRestartsWhenTheServerComesBack(t *testing.T) {
	fleet, checks := healthyFleet("web", 3)
	in := reaper.Input{Now: t0, Config: reapertest.Config(t), Servers: fleet[:2], Checks: checks[:2], Armed: true, HostRecords: map[string]uint64{"web3": 30}, Memory: reaper.NewMemory(),
		TermStart: t0.Add(-day)}
	// web3 leaves the list (and its node the catalog) for 50 minutes.
	in.Memory.Orphan["web3"] = t0.Add(-50 * time.Minute)
	in.Memory.Listed["web3"] = t0.Add(-50 * time.Minute)
	step := func(servers []reaper.Server, cs []reaper.Check, d time.Duration) *reaper.Plan {
		in.Servers, in.Checks = slices.Clone(servers), slices.Clone(cs)
		p := Plan(in)
		in.Memory, in.Now = p.Memory, in.Now.Add(d)
		return p
	}
	if p := step(fleet[:2], checks[:2], 5*time.Minute); reapertest.HostNames(roleView(t, p, "web").Orphaned) != "web3" {
		t.Fatalf("orphaned %q, want web3", reapertest.HostNames(roleView(t, p, "web").Orphaned))
	}
	step(fleet, checks, 5*time.Minute) // it comes back
	for i := 0; i < 3; i++ {
		// Gone again: 15 minutes is well within a new hour's grace.
		p := step(fleet[:2], checks[:2], 5*time.Minute)
		if slices.Contains(ops(p), "forget-records web3") || strings.Contains(strings.Join(p.Blocked, "\n"), "orphaned host web3") {
			t.Fatalf("web3's records due for removal %d minutes after it was last listed: %v %q", 5*i, ops(p), p.Blocked)
		}
		if o := roleView(t, p, "web").Orphaned; len(o) != 1 || !o[0].Until.Equal(t0.Add(10*time.Minute+time.Hour)) {
			t.Fatalf("orphaned %+v, want web3 until an hour after it left again", o)
		}
	}
}
