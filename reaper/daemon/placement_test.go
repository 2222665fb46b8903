package daemon_test

import (
	"bytes"
	"context"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/jiocloud/orchestrate/internal/orchestrate"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/internal/testutil"
	"github.com/jiocloud/orchestrate/reaper"
	"github.com/jiocloud/orchestrate/reaper/daemon"
)

// zonesConfig spreads role web over az1, az2 and az3; its scale-ins'
// drains end in a delete (the test machines run no drain handler).
const zonesConfig = "    availability_zones: [az1, az2, az3]\n    drain_timeout: 300ms\n    on_drain_timeout: delete\n"

func setDesired(t *testing.T, c *api.Client, n int) {
	t.Helper()
	if _, err := c.KV().Put(&api.KVPair{Key: prefix + "/roles/web/desired", Value: []byte(strconv.Itoa(n))}, nil); err != nil {
		t.Fatal(err)
	}
}

// zoneSpread is the simulated cloud's ACTIVE web servers by zone, as
// "az1:2 az2:1"; n their number.
func (f *fixture) zoneSpread() (spread string, n int) {
	counts := map[string]int{}
	for _, s := range f.sim.Servers() {
		if s.Status == reaper.StatusActive && s.Metadata[reaper.MetaRole] == "web" {
			counts[s.Zone]++
			n++
		}
	}
	var out []string
	for _, z := range slices.Sorted(func(yield func(string) bool) {
		for z := range counts {
			if !yield(z) {
				return
			}
		}
	}) {
		out = append(out, z+":"+strconv.Itoa(counts[z]))
	}
	return strings.Join(out, " "), n
}

// settled: the role has n ACTIVE servers and nothing in flight.
func (f *fixture) settled(n int) bool {
	_, have := f.zoneSpread()
	return have == n && len(f.sim.Servers()) == n && len(journalKeys(f.t, f.c)) == 0
}

// groupRecord reads role web's server group record ("" value: none).
func groupRecord(t *testing.T, c *api.Client) (reaperkv.ServerGroupRecord, string) {
	t.Helper()
	p, _, err := c.KV().Get(reaperkv.ServerGroupKey(prefix, "web"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if p == nil {
		return reaperkv.ServerGroupRecord{}, ""
	}
	rec, _ := reaperkv.ParseServerGroup(strings.TrimPrefix(p.Key, prefix+"/"), p.Value)
	return rec, string(p.Value)
}

// members are the names of the servers in group id, sorted.
func (f *fixture) members(id string) string {
	byID := map[string]string{}
	for _, s := range f.sim.Servers() {
		byID[s.ID] = s.Name
	}
	for _, g := range f.sim.ServerGroups() {
		if g.ID == id {
			var out []string
			for _, m := range g.Members {
				out = append(out, byID[m])
			}
			sort.Strings(out)
			return strings.Join(out, ",")
		}
	}
	return "(no group " + id + ")"
}

// A role of 5 over three zones is built 2, 2, 1, every server in the
// role's one server group (soft anti-affinity by default), recorded in
// KV; scaled in to 3, it leaves 1 per zone: each victim from the fullest
// zone. The report and `orchestrate status` show the zones and the group.
func TestPlacementSpreadsCreatesAndScaleIn(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.cfg = fastConfig(t, zonesConfig)
	f.sim.SetZones("az1", "az2", "az3")
	setDesired(t, f.c, 5)
	f.start(nil)
	testutil.Eventually(t, 20*time.Second, "5 servers built", func() bool { return f.settled(5) })
	if spread, _ := f.zoneSpread(); spread != "az1:2 az2:2 az3:1" {
		t.Fatalf("zones %s, want az1:2 az2:2 az3:1", spread)
	}
	groups := f.sim.ServerGroups()
	if len(groups) != 1 || groups[0].Name != "reaper-web" || groups[0].Policy != reaper.PolicySoftAntiAffinity {
		t.Fatalf("server groups %+v, want one reaper-web, soft-anti-affinity", groups)
	}
	if got := f.members(groups[0].ID); got != "web1,web2,web3,web4,web5" {
		t.Fatalf("group members %s, want every server", got)
	}
	if rec, _ := groupRecord(t, f.c); rec.ID != groups[0].ID || rec.Policy != reaper.PolicySoftAntiAffinity {
		t.Fatalf("record %+v, want the group's ID %s", rec, groups[0].ID)
	}
	f.arm()
	setDesired(t, f.c, 3)
	testutil.Eventually(t, 30*time.Second, "scaled in to 3", func() bool { return f.settled(3) })
	if spread, _ := f.zoneSpread(); spread != "az1:1 az2:1 az3:1" {
		t.Fatalf("zones after the scale-in %s, want one each", spread)
	}
	testutil.Eventually(t, 5*time.Second, "the report's zones", func() bool {
		st, _ := readReport(f.c)
		p := st.Roles[0].Placement
		return p != nil && p.Zones["az1"] == 1 && p.Zones["az2"] == 1 && p.Zones["az3"] == 1 && p.Group != nil && p.Group.ID == groups[0].ID
	})
	out := f.statusText()
	for _, want := range []string{"zones (serving servers): az1 1, az2 1, az3 1", "server group reaper-web (" + groups[0].ID + ", soft-anti-affinity)"} {
		if !strings.Contains(out, want) {
			t.Fatalf("status lacks %q:\n%s", want, out)
		}
	}
}

// A zone whose creates Nova puts in ERROR "No valid host" is backed off
// (its failed servers rolled back) while the other zones build the role:
// no role or quota backoff, no capacity record, the zone's backoff in the
// report, status and metrics. Once every zone refuses, the role's
// capacity is exhausted and its creates wait at the gate.
func TestZoneRefusingCreatesIsSkipped(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.cfg = fastConfig(t, zonesConfig)
	f.sim.SetZones("az1", "az2", "az3")
	f.sim.RefuseZone("az1", true)
	r := f.start(nil)
	testutil.Eventually(t, 20*time.Second, "3 servers built without az1", func() bool { return f.settled(3) })
	if spread, _ := f.zoneSpread(); spread != "az2:2 az3:1" && spread != "az2:1 az3:2" {
		t.Fatalf("zones %s, want az2 and az3 only", spread)
	}
	st, _ := readReport(f.c)
	b, ok := st.Roles[0].Placement.ZoneBackoff["az1"]
	if !ok || !strings.Contains(b.Reason, "No valid host") || st.Roles[0].Placement.ZoneBackoff["az2"].Reason != "" {
		t.Fatalf("zone backoff %+v, want az1's with Nova's fault", st.Roles[0].Placement.ZoneBackoff)
	}
	if len(st.RoleBackoff) != 0 || !st.BackoffUntil.IsZero() || st.Roles[0].Capacity != nil {
		t.Fatalf("role backoff %v, quota backoff %v, capacity %+v: a zone's refusal holds the zone only", st.RoleBackoff, st.BackoffUntil, st.Roles[0].Capacity)
	}
	if body := scrape(t, r); !strings.Contains(body, `reaper_zone_backoff_seconds{role="web",zone="az1"} `) {
		t.Fatalf("metrics lack az1's backoff:\n%s", body)
	}
	if out := f.statusText(); !strings.Contains(out, "az1 0 (BACKED OFF until ") {
		t.Fatalf("status lacks az1's backoff:\n%s", out)
	}
	// Every zone refuses: each is backed off in turn, then the role's
	// capacity is exhausted and no create is tried.
	f.sim.RefuseZone("az2", true)
	f.sim.RefuseZone("az3", true)
	setDesired(t, f.c, 5)
	testutil.Eventually(t, 20*time.Second, "the capacity record and the gate holding the creates", func() bool {
		st, _ := readReport(f.c)
		return st != nil && st.Roles[0].Capacity != nil && strings.Contains(strings.Join(st.Blocked, "\n"), "every availability zone of the role is backed off")
	})
	creates := f.sim.Creates.Load()
	waitCycles(t, 5, r)
	if n := f.sim.Creates.Load(); n != creates {
		t.Fatalf("%d creates while every zone is backed off", n-creates)
	}
	if _, n := f.zoneSpread(); n != 3 {
		t.Fatalf("%d servers, want the 3 built", n)
	}
}

// The role's server group across faults: a new leader reuses the
// recorded group; a lost record is found again by the group's name; a
// group deleted by hand is made again, and recorded; a record written by
// hand holds the role's creates, named in the report, and is never
// overwritten; an intent left by a leader that died before Nova made the
// group is finished by the next. Never two groups of the role at once.
func TestServerGroupAcrossFaults(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	setDesired(t, f.c, 2)
	a := f.start(nil)
	testutil.Eventually(t, 20*time.Second, "2 servers built", func() bool { return f.settled(2) })
	g1, _ := groupRecord(t, f.c)
	if g1.ID == "" || f.members(g1.ID) != "web1,web2" {
		t.Fatalf("record %+v, members %s", g1, f.members(g1.ID))
	}
	oneGroup := func(id, members string) {
		t.Helper()
		if gs := f.sim.ServerGroups(); len(gs) != 1 || gs[0].ID != id {
			t.Fatalf("server groups %+v, want only %s", gs, id)
		}
		if got := f.members(id); got != members {
			t.Fatalf("members of %s: %s, want %s", id, got, members)
		}
		if rec, _ := groupRecord(t, f.c); rec.ID != id {
			t.Fatalf("record %+v, want %s", rec, id)
		}
	}

	// A new leader.
	a.stop()
	b := f.start(nil)
	setDesired(t, f.c, 3)
	testutil.Eventually(t, 20*time.Second, "web3 built by the new leader", func() bool { return f.settled(3) })
	oneGroup(g1.ID, "web1,web2,web3")

	// The record lost.
	if _, err := f.c.KV().Delete(reaperkv.ServerGroupKey(prefix, "web"), nil); err != nil {
		t.Fatal(err)
	}
	setDesired(t, f.c, 4)
	testutil.Eventually(t, 20*time.Second, "web4 built", func() bool { return f.settled(4) })
	oneGroup(g1.ID, "web1,web2,web3,web4")

	// The group deleted by hand: its servers stay, in no group.
	f.sim.DeleteServerGroup(g1.ID)
	setDesired(t, f.c, 5)
	testutil.Eventually(t, 20*time.Second, "web5 built", func() bool { return f.settled(5) })
	g2, _ := groupRecord(t, f.c)
	if g2.ID == g1.ID {
		t.Fatal("the record still names the deleted group")
	}
	oneGroup(g2.ID, "web5")

	// A record written by hand.
	const garbage = "the db group"
	if _, err := f.c.KV().Put(&api.KVPair{Key: reaperkv.ServerGroupKey(prefix, "web"), Value: []byte(garbage)}, nil); err != nil {
		t.Fatal(err)
	}
	setDesired(t, f.c, 6)
	testutil.Eventually(t, 10*time.Second, "the record named, the creates held", func() bool {
		st, _ := readReport(f.c)
		return st != nil && strings.Contains(strings.Join(st.Blocked, "\n"), "the role's server group record cannot be read: reaper/servergroup/web: not a server group record the reaper wrote") &&
			st.Roles[0].Placement != nil && strings.Contains(st.Roles[0].Placement.GroupProblem, "consul kv delete")
	})
	waitCycles(t, 5, b)
	if _, value := groupRecord(t, f.c); value != garbage || !f.settled(5) {
		t.Fatalf("record %q, servers %s: want the hand-written value left alone and no create", value, names(f.sim.Servers()))
	}
	if out := f.statusText(); !strings.Contains(out, "server group PROBLEM: reaper/servergroup/web: not a server group record the reaper wrote") {
		t.Fatalf("status lacks the record's problem:\n%s", out)
	}
	if _, err := f.c.KV().Delete(reaperkv.ServerGroupKey(prefix, "web"), nil); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "web6 built once the record is gone", func() bool { return f.settled(6) })
	oneGroup(g2.ID, "web5,web6")

	// An intent left by a leader that died before Nova made the group,
	// and the group it was making, made by Nova after all.
	b.stop()
	f.sim.DeleteServerGroup(g2.ID)
	g3 := f.sim.AddServerGroup("reaper-web", reaper.PolicySoftAntiAffinity)
	intent := reaperkv.ServerGroupRecord{Role: "web", Name: "reaper-web", Policy: reaper.PolicySoftAntiAffinity, Time: time.Now().UTC()}
	if _, err := f.c.KV().Put(&api.KVPair{Key: reaperkv.ServerGroupKey(prefix, "web"), Value: reaperkv.MarshalServerGroup(intent)}, nil); err != nil {
		t.Fatal(err)
	}
	f.start(nil)
	setDesired(t, f.c, 7)
	testutil.Eventually(t, 20*time.Second, "web7 built", func() bool { return f.settled(7) })
	oneGroup(g3.ID, "web7")
}

// A group of the role's name made by hand with another policy than the
// configuration's is adopted, not replaced by a second one; the report
// and status say so. anti_affinity: hard asks Nova for anti-affinity;
// none makes no group.
func TestServerGroupPolicyMismatchIsReported(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.cfg = fastConfig(t, "    anti_affinity: hard\n")
	hand := f.sim.AddServerGroup("reaper-web", reaper.PolicySoftAntiAffinity)
	f.start(nil)
	testutil.Eventually(t, 20*time.Second, "3 servers built", func() bool { return f.settled(3) })
	if gs := f.sim.ServerGroups(); len(gs) != 1 || f.members(hand.ID) != "web1,web2,web3" {
		t.Fatalf("groups %+v: want the hand-made one, holding the role", gs)
	}
	testutil.Eventually(t, 5*time.Second, "the mismatch in the report", func() bool {
		st, _ := readReport(f.c)
		return st != nil && st.Roles[0].Placement != nil &&
			strings.Contains(st.Roles[0].Placement.GroupProblem, "has policy soft-anti-affinity, the configuration says anti-affinity (anti_affinity hard)")
	})
	if out := f.statusText(); !strings.Contains(out, "server group PROBLEM: server group reaper-web "+hand.ID+" has policy soft-anti-affinity") {
		t.Fatalf("status lacks the mismatch:\n%s", out)
	}

	g := newFixture(t)
	g.cfg = fastConfig(t, "    anti_affinity: none\n")
	g.start(nil)
	testutil.Eventually(t, 20*time.Second, "3 servers built", func() bool { return g.settled(3) })
	if gs := g.sim.ServerGroups(); len(gs) != 0 {
		t.Fatalf("anti_affinity none made groups %+v", gs)
	}
}

// A reaper that is not the leader cannot record a server group, so never
// asks Nova for one.
func TestServerGroupRecordNeedsTheLock(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	j := daemon.NewJournal(f.c, prefix, f.cfg.LeaderKey())
	other, _, err := f.c.Session().Create(&api.SessionEntry{TTL: "10s"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	holdLock(t, f.c, f.cfg)
	rec := reaperkv.ServerGroupRecord{Role: "web", Name: "reaper-web", Policy: reaper.PolicySoftAntiAffinity, Time: time.Now()}
	if _, err := j.PutServerGroup(context.Background(), other, rec); err != daemon.ErrNotLeader {
		t.Fatalf("a non-leader's record: %v, want ErrNotLeader", err)
	}
	if _, value := groupRecord(t, f.c); value != "" {
		t.Fatalf("a non-leader wrote %q", value)
	}
}

// statusText is `orchestrate reaper status` on the fixture's agent.
func (f *fixture) statusText() string {
	f.t.Helper()
	var out, errOut bytes.Buffer
	args := []string{"reaper", "status", "--consul-addr", f.agent.HTTPAddr, "--prefix", prefix, "--log-level", "warn"}
	if code := orchestrate.Run(context.Background(), args, orchestrate.IO{Stdout: &out, Stderr: &errOut}); code != 0 {
		f.t.Fatalf("orchestrate reaper status: exit %d: %s", code, errOut.String())
	}
	return out.String()
}
