package planner

import (
	"strings"
	"testing"
	"time"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/internal/store/schema"
	"github.com/jiocloud/orchestrate/reaper"
	"github.com/jiocloud/orchestrate/reaper/reapertest"
)

// zoned gives role web the zones a, b and c.
func zoned(c *reaper.Config) { c.Roles[0].AvailabilityZones = reaper.ZoneList{"a", "b", "c"} }

func inZone(s reaper.Server, zone string) reaper.Server { s.Zone = zone; return s }

// zonedFleet is web1.. in the zones given, healthy, oldest first.
func zonedFleet(zones ...string) ([]reaper.Server, []reaper.Check) {
	ss, cs := healthyFleet("web", len(zones))
	for i := range ss {
		ss[i].Zone = zones[i]
	}
	return ss, cs
}

// creates lists the zones of the plan's creates of role web, in order,
// as "name@zone".
func creates(p *reaper.Plan) string {
	var out []string
	for _, a := range p.Actions {
		if a.Op == reaper.OpCreate && a.Entry.Role == "web" {
			out = append(out, a.Entry.NewName+"@"+a.Entry.Zone)
		}
	}
	return strings.Join(out, ",")
}

// TestPlacementCreates: each create goes to the open zone with the fewest
// serving members (config order on a tie), counting what the role's open
// entries and this plan's own creates bring; a zone backed off after a
// capacity refusal is skipped while others take the creates; with every
// zone backed off, the gate holds the creates and says why.
func TestPlacementCreates(t *testing.T) {
	booting := reaper.Entry{ID: "web.1", Kind: reaperkv.KindCreate, Role: "web", Phase: reaperkv.PhaseBooting, NewName: "web2", NewID: "id-web2",
		Started: t0.Add(-time.Minute), Updated: t0.Add(-time.Minute), Zone: "b"}
	for _, tc := range []struct {
		name    string
		desired int
		zones   []string // of web1.., healthy
		change  func(in *reaper.Input)
		want    string
		blocked string
	}{
		{name: "an empty role of 5: round the zones in order", desired: 5, want: "web1@a,web2@b,web3@c,web4@a,web5@b"},
		{name: "the zone with the fewest serving members first", desired: 4, zones: []string{"a", "a", "b"}, want: "web4@c"},
		{name: "then the next fewest", desired: 6, zones: []string{"a", "a", "b"}, want: "web4@c,web5@b,web6@c"},
		{name: "a member that does not serve is not counted", desired: 4, zones: []string{"a", "b", "c"},
			change: func(in *reaper.Input) {
				in.Checks = replaceChecks(in.Checks, "web3", crit("web3"))
				in.Memory.Critical = map[string]time.Time{"web3": t0.Add(-time.Minute)} // in its grace: not replaced
			}, want: "web4@c"},
		{name: "an open entry's server counts in the zone it asked for", desired: 3, zones: []string{"a"},
			change: func(in *reaper.Input) {
				s := withStatus(srv("web2", time.Minute), reaper.StatusBuild)
				in.Servers = append(in.Servers, withJournal(s, "web.1"))
				in.Journal = []reaper.Entry{booting}
			}, want: "web3@c"},
		{name: "a zone backed off is skipped", desired: 3,
			change: func(in *reaper.Input) {
				in.ZoneBackoff = map[string]map[string]time.Time{"web": {"a": t0.Add(time.Minute)}}
			}, want: "web1@b,web2@c,web3@b"},
		{name: "a backoff over is no backoff", desired: 1,
			change: func(in *reaper.Input) {
				in.ZoneBackoff = map[string]map[string]time.Time{"web": {"a": t0.Add(-time.Second)}}
			}, want: "web1@a"},
		{name: "every zone backed off: the gate holds the creates", desired: 2,
			change: func(in *reaper.Input) {
				in.ZoneBackoff = map[string]map[string]time.Time{"web": {"a": t0.Add(time.Minute), "b": t0.Add(time.Minute), "c": t0.Add(2 * time.Minute)}}
			}, blocked: "every availability zone of the role is backed off after a capacity refusal: a until 2026-03-01T12:01:00Z, b until 2026-03-01T12:01:00Z, c until 2026-03-01T12:02:00Z"},
		{name: "another role's zone backoff is not this role's", desired: 1,
			change: func(in *reaper.Input) {
				in.ZoneBackoff = map[string]map[string]time.Time{"db": {"a": t0.Add(time.Minute)}}
			}, want: "web1@a"},
		{name: "a server group record that cannot be read holds the creates", desired: 1,
			change: func(in *reaper.Input) {
				in.ServerGroupProblems = map[string]string{"web": "reaper/servergroup/web: not a server group record the reaper wrote"}
			}, blocked: "the role's server group record cannot be read: reaper/servergroup/web"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := reapertest.Config(t, zoned)
			ss, cs := zonedFleet(tc.zones...)
			in := reaper.Input{Now: t0, Config: cfg, Servers: ss, Checks: cs, Armed: true, Desired: map[string]int{"web": tc.desired}}
			if tc.change != nil {
				tc.change(&in)
			}
			p := Plan(in)
			if got := creates(p); got != tc.want {
				t.Fatalf("creates %q, want %q (blocked %v)", got, tc.want, p.Blocked)
			}
			if tc.blocked != "" && !strings.Contains(strings.Join(p.Blocked, "\n"), tc.blocked) {
				t.Fatalf("blocked %q, want %q", p.Blocked, tc.blocked)
			}
		})
	}
}

// TestPlacementReplacements: a replacement goes where the role is
// thinnest once the server it replaces is gone from the count; a create
// recorded in the journal whose zone is now backed off (or not one of
// the role's) is retried in another; a role without zones gets none.
func TestPlacementReplacements(t *testing.T) {
	t.Run("a dead server's replacement goes to the zone it thins", func(t *testing.T) {
		cfg := reapertest.Config(t, zoned)
		ss, cs := zonedFleet("a", "b", "c")
		cs = replaceChecks(cs, "web2", crit("web2"))
		p := Plan(reaper.Input{Now: t0, Config: cfg, Servers: ss, Checks: cs, Armed: true, Memory: reaper.Memory{Critical: longCrit("web2")}})
		if got := creates(p); got != "web4@b" {
			t.Fatalf("creates %q, want web4@b (blocked %v)", got, p.Blocked)
		}
	})
	t.Run("a max-age retirement is counted without the server it retires", func(t *testing.T) {
		cfg := reapertest.Config(t, zoned, func(c *reaper.Config) { c.Roles[0].MaxAge = reaper.Duration(7 * day) })
		ss, cs := zonedFleet("b", "a", "c") // web3, in c, is the oldest
		p := Plan(reaper.Input{Now: t0, Config: cfg, Servers: ss, Checks: cs, Armed: true})
		if got := creates(p); got != "web4@c" {
			t.Fatalf("creates %q, want web4@c: a, b, c hold one each without web3 (blocked %v)", got, p.Blocked)
		}
	})
	retry := reaper.Entry{ID: "web.9", Kind: reaperkv.KindCreate, Role: "web", Phase: reaperkv.PhaseCreating, NewName: "web3",
		Started: t0.Add(-time.Hour), Updated: t0.Add(-time.Hour), Attempts: 1, Zone: "c"}
	for _, tc := range []struct {
		name   string
		change func(in *reaper.Input, e *reaper.Entry)
		want   string
	}{
		{name: "a retried create keeps its zone", want: "web3@c"},
		{name: "its zone backed off: another", change: func(in *reaper.Input, _ *reaper.Entry) {
			in.ZoneBackoff = map[string]map[string]time.Time{"web": {"c": t0.Add(time.Minute)}}
		}, want: "web3@a"},
		{name: "a zone no longer configured: another", change: func(_ *reaper.Input, e *reaper.Entry) { e.Zone = "gone" }, want: "web3@c"},
		{name: "written before zones: one", change: func(_ *reaper.Input, e *reaper.Entry) { e.Zone = "" }, want: "web3@c"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := reapertest.Config(t, zoned)
			ss, cs := zonedFleet("a", "b")
			e := retry
			in := reaper.Input{Now: t0, Config: cfg, Servers: ss, Checks: cs, Armed: true}
			if tc.change != nil {
				tc.change(&in, &e)
			}
			in.Journal = []reaper.Entry{e}
			if got := creates(Plan(in)); got != tc.want {
				t.Fatalf("creates %q, want %q", got, tc.want)
			}
		})
	}
	t.Run("a role without zones: Nova chooses", func(t *testing.T) {
		cfg := reapertest.Config(t)
		ss, cs := healthyFleet("web", 1)
		p := Plan(reaper.Input{Now: t0, Config: cfg, Servers: ss, Checks: cs, Armed: true})
		if got := creates(p); got != "web2@,web3@" {
			t.Fatalf("creates %q, want two without a zone", got)
		}
	})
	t.Run("boot.availability_zone alone is the role's one zone", func(t *testing.T) {
		cfg := reapertest.Config(t, func(c *reaper.Config) { c.Roles[0].Boot.AvailabilityZone = "nova" })
		p := Plan(reaper.Input{Now: t0, Config: cfg, Armed: true, Desired: map[string]int{"web": 1}})
		if got := creates(p); got != "web1@nova" {
			t.Fatalf("creates %q, want web1@nova", got)
		}
	})
}

// TestPlacementScaleIn: a scale-in takes serving servers from the fullest
// zone (a server outside the role's zones first), within a zone in the
// order it had (oldest first here); operators' named hosts and servers
// that do not serve go first as before; the gate still judges each one.
func TestPlacementScaleIn(t *testing.T) {
	for _, tc := range []struct {
		name    string
		zones   []string
		desired int
		change  func(in *reaper.Input)
		want    string // drains, in order
	}{
		// web5 (b) is the oldest, but a holds three.
		{name: "from the fullest zone, its oldest", zones: []string{"a", "a", "a", "c", "b"}, desired: 4, want: "drain web3"},
		// b holds three: its oldest, web5; then a and b hold two each:
		// the older of the two zones' oldest, web4 (b).
		{name: "two surplus: the fullest each time", zones: []string{"a", "a", "b", "b", "b", "c"}, desired: 4, want: "drain web5,drain web4",
			change: func(in *reaper.Input) { in.Config.MaxInFlight = 2 }},
		{name: "two surplus from one zone of three", zones: []string{"a", "b", "b", "b", "c"}, desired: 3, want: "drain web4,drain web3",
			change: func(in *reaper.Input) { in.Config.MaxInFlight = 2 }},
		{name: "a server outside the role's zones first", zones: []string{"a", "a", "nova", "b"}, desired: 3, want: "drain web3"},
		{name: "a host named for scale-in first", zones: []string{"a", "a", "b", "c"}, desired: 3, want: "drain web4",
			change: func(in *reaper.Input) {
				in.Scaling.ScaleIn = map[string]map[string]schema.ScaleInRequest{"web": {"web4": {}}}
			}},
		{name: "an unhealthy server before any zone's", zones: []string{"a", "a", "b", "c"}, desired: 3, want: "drain web3",
			change: func(in *reaper.Input) {
				in.Checks = replaceChecks(in.Checks, "web3", crit("web3"))
				in.Memory.Critical = longCrit("web3")
			}},
		{name: "disarmed: nothing, zones or not", zones: []string{"a", "a", "b"}, desired: 2, want: "",
			change: func(in *reaper.Input) { in.Armed = false }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := reapertest.Config(t, zoned)
			ss, cs := zonedFleet(tc.zones...)
			in := reaper.Input{Now: t0, Config: cfg, Servers: ss, Checks: cs, Armed: true, ArmKeyWritten: true, Desired: map[string]int{"web": tc.desired}}
			if tc.change != nil {
				tc.change(&in)
			}
			p := Plan(in)
			var drains []string
			for _, o := range ops(p) {
				if strings.HasPrefix(o, "drain ") {
					drains = append(drains, o)
				}
			}
			if got := strings.Join(drains, ","); got != tc.want {
				t.Fatalf("drains %q, want %q (blocked %v)", got, tc.want, p.Blocked)
			}
		})
	}
}

// TestPlacementWarmPool: standbys are spread over the zones as members
// are, and a claim takes the ready standby in the zone with the fewest
// serving members.
func TestPlacementWarmPool(t *testing.T) {
	pooled := func(c *reaper.Config) { c.Roles[0].WarmPool = &reaper.WarmPool{Size: 2, State: reaper.PoolRunning} }
	standby := func(name, zone string) (reaper.Server, reaper.Check) {
		s := inZone(srv(name, day), zone)
		s.Metadata[reaper.MetaStandby] = "web"
		return s, pass(name)
	}
	t.Run("a refill goes to a zone without a standby", func(t *testing.T) {
		cfg := reapertest.Config(t, zoned, pooled)
		ss, cs := zonedFleet("a", "b", "c")
		s, c := standby("web4", "a")
		p := Plan(reaper.Input{Now: t0, Config: cfg, Servers: append(ss, s), Checks: append(cs, c), Armed: true})
		if got := creates(p); got != "web5@b" {
			t.Fatalf("creates %q, want the refill in b (blocked %v)", got, p.Blocked)
		}
	})
	t.Run("a claim takes the standby in the thinnest zone", func(t *testing.T) {
		cfg := reapertest.Config(t, zoned, pooled)
		ss, cs := zonedFleet("a", "b", "c")
		cs = replaceChecks(cs, "web3", crit("web3"))
		s4, c4 := standby("web4", "a")
		s5, c5 := standby("web5", "c")
		p := Plan(reaper.Input{Now: t0, Config: cfg, Servers: append(ss, s4, s5), Checks: append(cs, c4, c5), Armed: true,
			Memory: reaper.Memory{Critical: longCrit("web3")}})
		var claimed []string
		for _, a := range p.Actions {
			if a.Op == reaper.OpClaim {
				claimed = append(claimed, a.Entry.NewName+"@"+a.Entry.Zone)
			}
		}
		if got := strings.Join(claimed, ","); got != "web5@c" {
			t.Fatalf("claims %q, want web5@c (blocked %v)", got, p.Blocked)
		}
	})
}

// TestPlacementReport: the role's serving servers by zone, its group as
// recorded, and a group whose policy is not the configured one named as
// such (new servers still join it: never a silent second group).
func TestPlacementReport(t *testing.T) {
	cfg := reapertest.Config(t, zoned, func(c *reaper.Config) { c.Roles[0].AntiAffinity = reaper.AntiAffinityHard })
	ss, cs := zonedFleet("a", "a", "c")
	rec := reaperkv.ServerGroupRecord{Role: "web", ID: "g-1", Name: "reaper-web", Policy: reaper.PolicySoftAntiAffinity}
	p := Plan(reaper.Input{Now: t0, Config: cfg, Servers: ss, Checks: cs, Armed: true, ServerGroups: map[string]reaperkv.ServerGroupRecord{"web": rec}})
	pr := p.Roles[0].Placement
	if pr == nil || pr.Zones["a"] != 2 || pr.Zones["b"] != 0 || pr.Zones["c"] != 1 || len(pr.Zones) != 3 {
		t.Fatalf("placement %+v, want a 2, b 0, c 1", pr)
	}
	if pr.Group == nil || pr.Group.ID != "g-1" {
		t.Fatalf("group %+v, want the record", pr.Group)
	}
	if !strings.Contains(pr.GroupProblem, "server group reaper-web g-1 has policy soft-anti-affinity, the configuration says anti-affinity (anti_affinity hard)") {
		t.Fatalf("group problem %q", pr.GroupProblem)
	}
	if got := creates(p); got != "" {
		t.Fatalf("creates %q: the role is at its count", got)
	}
	none := reapertest.Config(t, func(c *reaper.Config) { c.Roles[0].AntiAffinity = reaper.AntiAffinityNone })
	if p := Plan(reaper.Input{Now: t0, Config: none, Armed: true}); p.Roles[0].Placement != nil {
		t.Fatalf("a role with neither zones nor a group reports placement %+v", p.Roles[0].Placement)
	}
}
