package planner

// What the planner's tests share: servers, checks and fleets to plan
// over, and ways to read a plan.

import (
	"fmt"
	"strings"
	"time"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/reaper"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const day = 24 * time.Hour

// srv is a server of role (from its name's letters) created age ago.
func srv(name string, age time.Duration) reaper.Server {
	return reaper.Server{ID: "id-" + name, Name: name, Status: reaper.StatusActive, Created: t0.Add(-age),
		Metadata: map[string]string{reaper.MetaRole: strings.TrimRight(name, "0123456789")}}
}

func withStatus(s reaper.Server, st string) reaper.Server { s.Status = st; return s }

func withJournal(s reaper.Server, id string) reaper.Server {
	s.Metadata[reaper.MetaJournal] = id
	return s
}

// pass and crit are a machine's check of its role's service, as Puppet
// registers it.
func pass(node string) reaper.Check {
	return reaper.Check{Node: node, CheckID: "machine", Name: "machine health", Status: "passing", ServiceID: "web"}
}

func crit(node string) reaper.Check {
	return reaper.Check{Node: node, CheckID: "machine", Name: "machine health", Status: reaper.CheckCritical, ServiceID: "web"}
}

// healthyFleet is n healthy servers of role, 10 days old.
func healthyFleet(role string, n int) ([]reaper.Server, []reaper.Check) {
	var ss []reaper.Server
	var cs []reaper.Check
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("%s%d", role, i)
		ss = append(ss, srv(name, 10*day+time.Duration(i)*time.Hour))
		cs = append(cs, pass(name))
	}
	return ss, cs
}

// longCrit: the node has been critical for an hour (past every grace).
func longCrit(nodes ...string) map[string]time.Time {
	m := map[string]time.Time{}
	for _, n := range nodes {
		m[n] = t0.Add(-time.Hour)
	}
	return m
}

// replaceChecks swaps node's checks for cs.
func replaceChecks(all []reaper.Check, node string, cs ...reaper.Check) []reaper.Check {
	var out []reaper.Check
	for _, c := range all {
		if c.Node != node {
			out = append(out, c)
		}
	}
	return append(out, cs...)
}

func ops(p *reaper.Plan) []string {
	out := []string{}
	for _, a := range p.Actions {
		target := a.Entry.NewName
		if a.Op == reaper.OpDrain || a.Op == reaper.OpDelete || a.Op == reaper.OpMaintain || a.Op == reaper.OpDeregister || a.Op == reaper.OpRestore || a.Op == reaper.OpAbort {
			target = a.Entry.OldName
		}
		if a.Op == reaper.OpHook || a.Op == reaper.OpHookResult {
			target = a.Target()
		}
		if a.Op == reaper.OpRepair || target == "" {
			target = a.Entry.OldName
		}
		s := string(a.Op) + " " + target
		if a.Entry.Kind == reaperkv.KindReplace && a.Op == reaper.OpCreate {
			s += " for " + a.Entry.OldName
		}
		out = append(out, s)
	}
	return out
}

// autoscaled makes role web autoscale on the consul metric "load", target
// 0.5, 2 to 8 servers, with the defaults otherwise (steps 2 and 1,
// cooldowns 3m and 5m, stabilization 5m, tolerance 10%).
func autoscaled(c *reaper.Config) {
	r := &c.Roles[0]
	r.Autoscale = &reaper.Autoscale{Metric: reaper.MetricSource{Source: reaper.SourceConsul, Name: "load"}, Target: 0.5, Min: 2, Max: 8}
	r.Autoscale.ApplyDefaults()
}

// window is an unbroken stabilization window since `since`, each cycle
// recommending n, with the last decision a cycle ago.
func window(since time.Time, n int) *reaperkv.AutoscaleReport {
	rep := &reaperkv.AutoscaleReport{WindowSince: since, Last: &reaperkv.ScaleDecision{Time: t0.Add(-30 * time.Second)}}
	for at := since; at.Before(t0); at = at.Add(30 * time.Second) {
		if t0.Sub(at) < 5*time.Minute {
			rep.Window = append(rep.Window, reaperkv.Recommendation{Time: at, Count: n})
		}
	}
	return rep
}
