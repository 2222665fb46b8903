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

// reports are web's nodes' reports of "load", all at time at.
func reports(at time.Time, vals map[string]float64) map[string]map[string]schema.MetricReport {
	hosts := map[string]map[string]schema.MetricReport{}
	for h, v := range vals {
		hosts[h] = map[string]schema.MetricReport{"load": {Role: "web", Value: v, Time: at}}
	}
	return hosts
}

func TestAutoscaleDecisions(t *testing.T) {
	web3 := []reaper.Server{srv("web1", day), srv("web2", day), srv("web3", day)}
	checks := []reaper.Check{pass("web1"), pass("web2"), pass("web3")}
	all := func(v float64) map[string]float64 { return map[string]float64{"web1": v, "web2": v, "web3": v} }
	long := window(t0.Add(-time.Hour), 3)
	cases := []struct {
		name     string
		metrics  map[string]float64 // reports of load, at t0
		at       time.Time          // the reports' time, default t0
		prev     *reaperkv.AutoscaleReport
		scaling  func(*schema.Scaling)
		in       func(*reaper.Input)
		cfg      func(*reaper.Config)
		result   string
		newCount int
		reason   string
	}{
		{name: "within the tolerance: hold", metrics: all(0.54), prev: long, result: reaperkv.ResultHold, newCount: 3, reason: "within-tolerance"},
		{name: "above: ceil(3 x 0.8 / 0.5) = 5, at once", metrics: all(0.8), prev: long, result: reaperkv.ResultScaleOut, newCount: 5, reason: "recommends 5"},
		{name: "far above: max_step 2", metrics: all(2.0), prev: long, result: reaperkv.ResultScaleOut, newCount: 5, reason: "recommends 8"},
		{name: "far above, max 4", metrics: all(2.0), prev: long, cfg: func(c *reaper.Config) { c.Roles[0].Autoscale.Max = 4 }, result: reaperkv.ResultScaleOut, newCount: 4, reason: "recommends 4"},
		{name: "scale out within its cooldown: hold", metrics: all(0.8),
			prev: func() *reaperkv.AutoscaleReport {
				r := window(t0.Add(-time.Hour), 3)
				r.LastScaleOut = t0.Add(-2 * time.Minute)
				return r
			}(),
			result: reaperkv.ResultHold, newCount: 3, reason: "scale out cooldown 3m0s, 1m0s left"},
		{name: "below with a whole window behind: scale in by max_step 1", metrics: all(0.2), prev: window(t0.Add(-time.Hour), 2), result: reaperkv.ResultScaleIn, newCount: 2, reason: "scale in 3 -> 2"},
		{name: "below, but a higher recommendation in the window", metrics: all(0.2), prev: long, result: reaperkv.ResultHold, reason: "the highest recommendation of the last 5m0s is 3", newCount: 3},
		{name: "below, window not yet whole", metrics: all(0.2), prev: window(t0.Add(-3*time.Minute), 2), result: reaperkv.ResultHold, newCount: 3, reason: "(3m0s of 5m0s)"},
		{name: "below, a new leader (no last decision): the window starts now", metrics: all(0.2), result: reaperkv.ResultHold, newCount: 3, reason: "stabilizing"},
		{name: "below after a gap of cycles: the window starts again", metrics: all(0.2),
			prev: func() *reaperkv.AutoscaleReport {
				r := window(t0.Add(-time.Hour), 2)
				r.Last.Time = t0.Add(-3 * time.Minute)
				return r
			}(), result: reaperkv.ResultHold, newCount: 3, reason: "stabilizing"},
		{name: "scale in within its cooldown since a scale out: hold", metrics: all(0.2),
			prev: func() *reaperkv.AutoscaleReport {
				r := window(t0.Add(-time.Hour), 2)
				r.LastScaleOut = t0.Add(-4 * time.Minute)
				return r
			}(),
			result: reaperkv.ResultHold, newCount: 3, reason: "scale in cooldown 5m0s, 1m0s left"},
		{name: "scale in while the role has an entry in flight: hold", metrics: all(0.2), prev: window(t0.Add(-time.Hour), 2),
			in: func(in *reaper.Input) {
				in.Journal = []reaper.Entry{{ID: "web.x", Kind: reaperkv.KindCreate, Role: "web", Phase: reaperkv.PhaseCreating, NewName: "web4", Started: t0, Updated: t0}}
			}, result: reaperkv.ResultHold, newCount: 3, reason: "in-flight"},
		{name: "fewer than half of the serving servers reported: hold", metrics: map[string]float64{"web1": 2}, prev: long, result: reaperkv.ResultHold, newCount: 3, reason: "only 1 of 3 serving servers reported load"},
		{name: "stale reports: hold", metrics: all(2), at: t0.Add(-4 * time.Minute), prev: long, result: reaperkv.ResultHold, newCount: 3, reason: "(4m0s old)"},
		{name: "reports from the future (a node's clock): hold", metrics: all(2), at: t0.Add(time.Hour), prev: long, result: reaperkv.ResultHold, newCount: 3, reason: "dated in the future"},
		{name: "a server without a report counts as 0 above target: ceil((1 + 1) / 0.5) = 4, not ceil(3 x 1 / 0.5) = 6", metrics: map[string]float64{"web1": 1, "web2": 1}, prev: long,
			result: reaperkv.ResultScaleOut, newCount: 4, reason: "(1 without a usable report), target 0.5: recommends 4"},
		{name: "a server without a report: within the tolerance once counted as 0", metrics: map[string]float64{"web1": 0.8, "web2": 0.8}, prev: long,
			result: reaperkv.ResultHold, newCount: 3, reason: "recommends 3"},
		{name: "a server without a report counts as the target below it: ceil((0.1 + 0.1 + 0.5) / 0.5) = 2", metrics: map[string]float64{"web1": 0.1, "web2": 0.1}, prev: window(t0.Add(-time.Hour), 2),
			result: reaperkv.ResultScaleIn, newCount: 2, reason: "recommends 2"},
		// A node writes its reports under its own host; which role they
		// count for is the reaper's knowledge of the server, never the
		// role the report names.
		{name: "a report counts for its server's role, whatever role it names", metrics: all(0.8), prev: long,
			scaling: func(s *schema.Scaling) {
				for h, m := range s.Metrics {
					r := m["load"]
					r.Role = "db"
					s.Metrics[h]["load"] = r
				}
			},
			result: reaperkv.ResultScaleOut, newCount: 5, reason: "recommends 5"},
		{name: "a host of no server of the role, naming it, is no vote", metrics: all(0.54), prev: long,
			scaling: func(s *schema.Scaling) {
				s.Metrics["db1"] = map[string]schema.MetricReport{"load": {Role: "web", Value: 100, Time: t0}}
			},
			result: reaperkv.ResultHold, newCount: 3, reason: "within-tolerance"},
		{name: "a count set by hand: override", metrics: all(2), prev: long,
			scaling: func(s *schema.Scaling) { s.Overrides["web"] = schema.Override{Count: 3, By: "ops", Time: t0} },
			result:  reaperkv.ResultOverride, newCount: 3, reason: "orchestrate scale web --auto"},
		{name: "not armed: hold", metrics: all(2), prev: long, in: func(in *reaper.Input) { in.Armed = false; in.ArmKeyWritten = true }, result: reaperkv.ResultHold, newCount: 3, reason: "not-armed"},
		{name: "create backoff: no scale out", metrics: all(2), prev: long, in: func(in *reaper.Input) { in.RoleBackoff = map[string]time.Time{"web": t0.Add(time.Minute)} },
			result: reaperkv.ResultHold, newCount: 3, reason: "create-backoff"},
		{name: "a named scale-in still leaving: no scale out", metrics: all(2), prev: long,
			scaling: func(s *schema.Scaling) { s.ScaleIn["web"] = map[string]schema.ScaleInRequest{"web2": {Time: t0}} },
			result:  reaperkv.ResultHold, newCount: 3, reason: "hosts named for scale-in are still leaving (web2)"},
		{name: "prometheus: the query failed: hold", prev: long,
			cfg: func(c *reaper.Config) {
				c.Roles[0].Autoscale.Metric = reaper.MetricSource{Source: reaper.SourcePrometheus, Prometheus: &reaper.PrometheusSource{URL: "http://127.0.0.1:9090", Query: "avg(x)", Timeout: reaper.Duration(time.Second)}}
			},
			in: func(in *reaper.Input) {
				in.Metrics = map[string]reaper.MetricReading{"web": {Err: "prometheus query returned no series"}}
			},
			result: reaperkv.ResultHold, newCount: 3, reason: "metric: prometheus query returned no series"},
		{name: "prometheus: a value", prev: long,
			cfg: func(c *reaper.Config) {
				c.Roles[0].Autoscale.Metric = reaper.MetricSource{Source: reaper.SourcePrometheus, Prometheus: &reaper.PrometheusSource{URL: "http://127.0.0.1:9090", Query: "avg(x)", Timeout: reaper.Duration(time.Second)}}
			},
			in:     func(in *reaper.Input) { in.Metrics = map[string]reaper.MetricReading{"web": {Value: 0.8}} },
			result: reaperkv.ResultScaleOut, newCount: 5, reason: "recommends 5"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := reapertest.Config(t, autoscaled, func(c *reaper.Config) {
				if tc.cfg != nil {
					tc.cfg(c)
				}
			})
			at := tc.at
			if at.IsZero() {
				at = t0
			}
			sc := schema.Scaling{Metrics: reports(at, tc.metrics), Overrides: map[string]schema.Override{}, ScaleIn: map[string]map[string]schema.ScaleInRequest{}, DesiredIndex: map[string]uint64{"web": 7}}
			if tc.scaling != nil {
				tc.scaling(&sc)
			}
			in := reaper.Input{Now: t0, Config: cfg, Servers: web3, Checks: checks, Desired: map[string]int{"web": 3}, Armed: true,
				Scaling: sc, Autoscale: map[string]*reaperkv.AutoscaleReport{}}
			if tc.prev != nil {
				in.Autoscale["web"] = tc.prev
			}
			if tc.in != nil {
				tc.in(&in)
			}
			p := Plan(in)
			rep := p.Roles[0].Autoscale
			if rep == nil || rep.Last == nil {
				t.Fatal("no decision")
			}
			d := rep.Last
			if d.Result != tc.result || d.New != tc.newCount || !strings.Contains(d.Reason, tc.reason) {
				t.Fatalf("decision %s %d -> %d: %s\nwant %s to %d, reason with %q", d.Result, d.Desired, d.New, d.Reason, tc.result, tc.newCount, tc.reason)
			}
			switch {
			case d.New != d.Desired && (len(p.Scale) != 1 || p.Scale[0].To != d.New || p.Scale[0].Index != 7):
				t.Fatalf("plan.Scale = %+v, want one change to %d checked against index 7", p.Scale, d.New)
			case d.New == d.Desired && len(p.Scale) != 0:
				t.Fatalf("plan.Scale = %+v on a hold", p.Scale)
			}
		})
	}
}

// Scale in takes hosts named for it first, then the worst state, then the
// least loaded, then the oldest; never a protected host.
func TestScaleInOrder(t *testing.T) {
	servers := []reaper.Server{srv("web1", 3*day), srv("web2", 2*day), srv("web3", day), srv("web4", day), srv("web5", day)}
	checks := []reaper.Check{pass("web1"), pass("web2"), pass("web3"), pass("web4"), pass("web5")}
	load := map[string]float64{"web1": 0.5, "web2": 0.5, "web3": 0.1, "web4": 0.5, "web5": 0.5}
	cases := []struct {
		name    string
		scaling func(*schema.Scaling)
		checks  []reaper.Check
		want    string
	}{
		{name: "least loaded", want: "web3"},
		{name: "named first", scaling: func(s *schema.Scaling) { s.ScaleIn["web"] = map[string]schema.ScaleInRequest{"web5": {}} }, want: "web5"},
		{name: "unhealthy before the least loaded", checks: []reaper.Check{pass("web1"), pass("web2"), pass("web3"), pass("web4"), {Node: "web5", CheckID: "x", Status: "critical", ServiceID: "web"}}, want: "web5"},
		{name: "protected never", scaling: func(s *schema.Scaling) { s.Protected["web3"] = schema.Protection{} }, want: "web1"},
		{name: "equal load: the oldest", scaling: func(s *schema.Scaling) {
			s.Protected["web3"] = schema.Protection{}
			s.Metrics["web1"]["load"] = schema.MetricReport{Value: 0.9, Time: t0}
		}, want: "web2"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := reapertest.Config(t, autoscaled)
			sc := schema.Scaling{Metrics: reports(t0, load), Overrides: map[string]schema.Override{}, ScaleIn: map[string]map[string]schema.ScaleInRequest{},
				Protected: map[string]schema.Protection{}, DesiredIndex: map[string]uint64{}}
			if tc.scaling != nil {
				tc.scaling(&sc)
			}
			ch := checks
			if tc.checks != nil {
				ch = tc.checks
			}
			in := reaper.Input{Now: t0, Config: cfg, Servers: servers, Checks: ch, Desired: map[string]int{"web": 4}, Armed: true, Scaling: sc,
				Memory: reaper.Memory{Critical: map[string]time.Time{"web5": t0.Add(-time.Hour)}}}
			p := Plan(in)
			var drained []string
			for _, a := range p.Actions {
				if a.Op == reaper.OpDrain {
					drained = append(drained, a.Entry.OldName)
				}
			}
			if strings.Join(drained, ",") != tc.want {
				t.Fatalf("drained %v, want %s\nblocked: %q", drained, tc.want, p.Blocked)
			}
		})
	}
}

// A drain ends on the node's answer, or at drain_timeout without one (a
// failed answer too), for an entry that is not abortable (a replacement
// for health; TestDrainEnds has the rest); an answer to another entry's
// request does not count.
func TestDrainHandshake(t *testing.T) {
	servers := []reaper.Server{srv("web1", day), srv("web2", day), srv("web3", day)}
	checks := []reaper.Check{pass("web1"), pass("web2"), pass("web3")}
	entry := reaper.Entry{ID: "web.e1", Kind: reaperkv.KindDelete, Role: "web", Phase: reaperkv.PhaseDraining, OldName: "web3", OldID: "id-web3",
		Reason: "surplus", Started: t0.Add(-time.Minute), Updated: t0.Add(-time.Minute), DrainUntil: t0.Add(time.Minute)}
	answered := func(drained bool, ent string) map[string]schema.DrainRecord {
		return map[string]schema.DrainRecord{"web3": {Requested: t0.Add(-time.Minute), Entry: ent, Answer: &schema.DrainAnswer{Time: t0, By: "platform", Drained: drained, Detail: "moved"}}}
	}
	cases := []struct {
		name   string
		drains map[string]schema.DrainRecord
		until  time.Time
		want   string
	}{
		{name: "no answer, before the timeout: keep draining", want: "maintain web web3 (draining)"},
		{name: "answered drained: delete now", drains: answered(true, "web.e1"), want: "delete web web3 (drained: platform answered"},
		{name: "answered failed: keep draining until the timeout", drains: answered(false, "web.e1"), want: "maintain web web3 (draining)"},
		{name: "answered failed, timeout over: delete, saying so", drains: answered(false, "web.e1"), until: t0, want: "delete web web3 (drain timeout over; moving the work away failed (platform: moved))"},
		{name: "no answer, timeout over", until: t0, want: "delete web web3 (drain timeout over, no answer)"},
		{name: "an answer to another entry's request", drains: answered(true, "web.other"), want: "maintain web web3 (draining)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := entry
			if !tc.until.IsZero() {
				e.DrainUntil = tc.until
			}
			in := reaper.Input{Now: t0, Config: reapertest.Config(t), Servers: servers, Checks: checks, Desired: map[string]int{"web": 2}, Armed: true,
				Journal: []reaper.Entry{e}, Scaling: schema.Scaling{Drains: tc.drains}}
			p := Plan(in)
			if len(p.Actions) != 1 || !strings.HasPrefix(p.Actions[0].String(), tc.want) {
				t.Fatalf("actions %v, want %q", p.Actions, tc.want)
			}
		})
	}
}
