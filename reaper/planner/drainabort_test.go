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

// drainWorld is web1..web3 serving (web3 the oldest), desired 2, and one
// entry draining web3 whose deadline is deadline.
func drainWorld(kind reaperkv.EntryKind, reason string, abortable bool, deadline time.Time) ([]reaper.Server, []reaper.Check, reaper.Entry) {
	servers := []reaper.Server{srv("web1", day), srv("web2", 2*day), srv("web3", 3*day)}
	checks := []reaper.Check{pass("web1"), pass("web2"), pass("web3"), {Node: "web3", CheckID: reaper.MaintNodeCheck, Status: reaper.CheckCritical}}
	e := reaper.Entry{ID: "web.e1", Kind: kind, Role: "web", Mode: reaper.ModeSurge, Phase: reaperkv.PhaseDraining, OldName: "web3", OldID: "id-web3",
		Reason: reason, Started: t0.Add(-10 * time.Minute), Updated: t0.Add(-time.Minute), DrainUntil: deadline, Abortable: abortable}
	if reason == string(reaper.StateUnhealthy) {
		checks[2] = crit("web3") // replaced for its health: it does not pass
	}
	if kind == reaperkv.KindReplace {
		// A max-age (or health) replacement: its new server web4 serves.
		servers = append(servers, withJournal(srv("web4", time.Hour), e.ID))
		checks = append(checks, pass("web4"))
		e.NewName, e.NewID = "web4", "id-web4"
	}
	return servers, checks, e
}

// answer is a drain record of web3 for entry web.e1, answered drained or
// failed (nil: no answer yet).
func answer(drained *bool) map[string]schema.DrainRecord {
	d := schema.DrainRecord{Requested: t0.Add(-time.Minute), Role: "web", Entry: "web.e1"}
	if drained != nil {
		d.Answer = &schema.DrainAnswer{Time: t0, By: "drain handler on web3", Drained: *drained, Detail: "instance i-7 cannot be migrated"}
	}
	return map[string]schema.DrainRecord{"web3": d}
}

// Every combination of what the drain was for, what came back, when,
// and the role's on_drain_failure / on_drain_timeout: the server of a
// scale-in or a max-age retirement that serves survives a failed answer
// and a missing one under abort; a replacement for health deletes
// whatever the answer.
func TestDrainEnds(t *testing.T) {
	yes, no := true, false
	before, after := t0.Add(time.Minute), t0
	type kind struct {
		name      string
		kind      reaperkv.EntryKind
		reason    string
		abortable bool
	}
	scaleIn := kind{"scale-in", reaperkv.KindDelete, "surplus (healthy): 1 over desired 2", true}
	maxAge := kind{"max-age", reaperkv.KindReplace, string(reaper.StateExpired), true}
	health := kind{"unhealthy replacement", reaperkv.KindReplace, string(reaper.StateUnhealthy), false}
	badScaleIn := kind{"scale-in of an unhealthy server", reaperkv.KindDelete, "surplus (unhealthy): 1 over desired 2", false}
	cases := []struct {
		kind       kind
		answer     *bool
		deadline   time.Time
		onFailure  string
		onTimeout  string
		want       string // op and target of the one action
		wantReason string
	}{
		// The defaults: abort, abort.
		{kind: scaleIn, answer: &no, deadline: before, want: "abort web3", wantReason: "failed: drain handler on web3 answered that moving the work away failed (instance i-7 cannot be migrated)"},
		{kind: scaleIn, answer: &no, deadline: after, want: "abort web3"},
		{kind: scaleIn, deadline: before, want: "maintain web3"},
		{kind: scaleIn, deadline: after, want: "abort web3", wantReason: "timeout: no answer by the drain deadline"},
		{kind: scaleIn, answer: &yes, deadline: before, want: "delete web3", wantReason: "drained: drain handler on web3 answered"},
		{kind: maxAge, answer: &no, deadline: before, want: "abort web3"},
		{kind: maxAge, deadline: after, want: "abort web3"},
		{kind: maxAge, answer: &yes, deadline: before, want: "delete web3"},
		// delete where the operator says so: the old behaviour.
		{kind: scaleIn, answer: &no, deadline: before, onFailure: "delete", want: "maintain web3"},
		{kind: scaleIn, answer: &no, deadline: after, onFailure: "delete", want: "delete web3", wantReason: "drain timeout over; moving the work away failed"},
		{kind: scaleIn, deadline: after, onTimeout: "delete", want: "delete web3", wantReason: "drain timeout over, no answer"},
		{kind: maxAge, deadline: after, onFailure: "delete", onTimeout: "delete", want: "delete web3"},
		// Each setting governs its own case only.
		{kind: scaleIn, answer: &no, deadline: before, onTimeout: "delete", want: "abort web3"},
		{kind: scaleIn, deadline: after, onFailure: "delete", want: "abort web3"},
		// A replacement for health, or a scale-in of a bad server: delete.
		{kind: health, answer: &no, deadline: before, want: "maintain web3"},
		{kind: health, answer: &no, deadline: after, want: "delete web3"},
		{kind: health, deadline: after, want: "delete web3"},
		{kind: badScaleIn, deadline: after, want: "delete web3"},
		{kind: badScaleIn, answer: &no, deadline: after, want: "delete web3"},
	}
	for _, tc := range cases {
		ans := "no answer"
		if tc.answer != nil {
			ans = map[bool]string{true: "drained", false: "failed"}[*tc.answer]
		}
		when := "before the deadline"
		if tc.deadline.Equal(after) {
			when = "at the deadline"
		}
		name := tc.kind.name + ", " + ans + " " + when + ", on_drain_failure " + or(tc.onFailure, "abort") + ", on_drain_timeout " + or(tc.onTimeout, "abort")
		t.Run(name, func(t *testing.T) {
			servers, checks, e := drainWorld(tc.kind.kind, tc.kind.reason, tc.kind.abortable, tc.deadline)
			cfg := reapertest.Config(t, func(c *reaper.Config) {
				c.Roles[0].OnDrainFailure, c.Roles[0].OnDrainTimeout = tc.onFailure, tc.onTimeout
			})
			in := reaper.Input{Now: t0, Config: cfg, Servers: servers, Checks: checks, Desired: map[string]int{"web": 2 + len(servers) - 3}, Armed: true,
				Journal: []reaper.Entry{e}, Scaling: schema.Scaling{Drains: answer(tc.answer)}}
			p := Plan(in)
			if got := ops(p); len(got) != 1 || got[0] != tc.want {
				t.Fatalf("actions %v, want [%s]\nblocked: %q", p.Actions, tc.want, p.Blocked)
			}
			a := p.Actions[0]
			if !strings.Contains(a.Reason, tc.wantReason) {
				t.Fatalf("reason %q, want %q in it", a.Reason, tc.wantReason)
			}
			if a.Op != reaper.OpAbort {
				return
			}
			r := a.Entry.Abort
			switch {
			case a.Entry.Phase != reaperkv.PhaseAborting || r == nil:
				t.Fatalf("abort entry in phase %s with record %v", a.Entry.Phase, r)
			case r.Host != "web3" || r.ID != "id-web3" || r.Entry != "web.e1" || r.Kind != tc.kind.kind || r.Reason != tc.kind.reason:
				t.Fatalf("record %+v does not name the server, entry and why it was to leave", r)
			case !r.Time.Equal(t0) || !r.Until.Equal(t0.Add(time.Hour)):
				t.Fatalf("record from %s until %s, want the default cool-off of 1h from now", r.Time, r.Until)
			case r.Named || r.Restored || a.Restore != nil:
				t.Fatalf("a host nobody named: record %+v, restore %+v", r, a.Restore)
			}
		})
	}
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// An abort is no destructive step: neither the start gate nor the pause
// holds it, and a recorded abort is finished as one by any leader,
// whatever the configuration says now.
func TestAbortIsFinishedAsAnAbort(t *testing.T) {
	servers, checks, e := drainWorld(reaperkv.KindDelete, "surplus (healthy)", true, t0)
	rec := &reaperkv.DrainAbortRecord{Host: "web3", ID: "id-web3", Role: "web", Kind: reaperkv.KindDelete, Entry: e.ID, Cause: reaperkv.AbortTimeout,
		Detail: "no answer", Time: t0.Add(-time.Minute), Until: t0.Add(59 * time.Minute)}
	aborting := e
	aborting.Phase, aborting.Abort = reaperkv.PhaseAborting, rec
	deleteAll := func(c *reaper.Config) { c.Roles[0].OnDrainFailure, c.Roles[0].OnDrainTimeout = "delete", "delete" }
	cases := []struct {
		name  string
		entry reaper.Entry
		cfg   func(*reaper.Config)
		in    func(*reaper.Input)
		want  string
	}{
		{name: "disarmed: the drain is aborted all the same", entry: e, in: func(in *reaper.Input) { in.Armed, in.ArmKeyWritten = false, true }, want: "abort web3"},
		{name: "paused (most of the fleet critical): aborted all the same", entry: e,
			in: func(in *reaper.Input) {
				in.Checks = []reaper.Check{crit("web1"), crit("web2"), pass("web3")}
				in.Memory.Critical = longCrit("web1", "web2")
			}, want: "abort web3"},
		{name: "a recorded abort, the configuration now delete: finished as an abort", entry: aborting, cfg: deleteAll, want: "abort web3"},
		{name: "a recorded abort whose drain was answered drained since: still an abort", entry: aborting,
			in: func(in *reaper.Input) { yes := true; in.Scaling.Drains = answer(&yes) }, want: "abort web3"},
		{name: "a recorded abort without its record: finished as an abort", entry: func() reaper.Entry { x := aborting; x.Abort = nil; return x }(), cfg: deleteAll, want: "abort web3"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := reapertest.Config(t)
			if tc.cfg != nil {
				cfg = reapertest.Config(t, tc.cfg)
			}
			in := reaper.Input{Now: t0, Config: cfg, Servers: servers, Checks: checks, Desired: map[string]int{"web": 2}, Armed: true,
				Journal: []reaper.Entry{tc.entry}, Scaling: schema.Scaling{Drains: answer(nil)}}
			if tc.in != nil {
				tc.in(&in)
			}
			p := Plan(in)
			if got := ops(p); len(got) != 1 || got[0] != tc.want {
				t.Fatalf("actions %v, want [%s]\nblocked: %q", p.Actions, tc.want, p.Blocked)
			}
			if a := p.Actions[0]; a.Entry.Abort == nil || a.Entry.Phase != reaperkv.PhaseAborting {
				t.Fatalf("abort without its record: %+v", a.Entry)
			}
			if tc.entry.Abort != nil && !p.Actions[0].Entry.Abort.Until.Equal(rec.Until) {
				t.Fatalf("a finished abort's cool-off moved: until %s, recorded %s", p.Actions[0].Entry.Abort.Until, rec.Until)
			}
		})
	}
}

// The abort of a host named with `orchestrate scale-in` withdraws the
// request and gives the count back the one it took, checked against the
// count read; unless a count was set by hand after the request (it
// stands), the count is not in Consul, or it would pass the autoscaler's
// max.
func TestNamedAbortCountRule(t *testing.T) {
	named := func(s *schema.Scaling) {
		s.ScaleIn = map[string]map[string]schema.ScaleInRequest{"web": {"web3": {Time: t0.Add(-20 * time.Minute), By: "ops"}}}
	}
	cases := []struct {
		name         string
		scaling      func(*schema.Scaling)
		cfg          func(*reaper.Config)
		desired      map[string]int
		wantNamed    bool
		wantRestore  bool
		wantRestored int
	}{
		{name: "named: the request withdrawn, the count raised back", scaling: named, desired: map[string]int{"web": 2}, wantNamed: true, wantRestore: true, wantRestored: 3},
		{name: "named, then a count set by hand: that count stands", desired: map[string]int{"web": 2}, wantNamed: true,
			scaling: func(s *schema.Scaling) {
				named(s)
				s.Overrides["web"] = schema.Override{Count: 2, Time: t0.Add(-5 * time.Minute), By: "ops"}
			}},
		{name: "named, a count set by hand before the request: raised back", desired: map[string]int{"web": 2}, wantNamed: true, wantRestore: true, wantRestored: 3,
			scaling: func(s *schema.Scaling) {
				named(s)
				s.Overrides["web"] = schema.Override{Count: 3, Time: t0.Add(-time.Hour), By: "ops"}
			}},
		{name: "named, no count in Consul: nothing to raise", scaling: named, wantNamed: true},
		{name: "named in an autoscaled role at its max: not raised past it", scaling: named, desired: map[string]int{"web": 2}, wantNamed: true,
			cfg: func(c *reaper.Config) { autoscaled(c); c.Roles[0].Desired, c.Roles[0].Autoscale.Max = 2, 2 }},
		{name: "not named: nothing withdrawn, the count stays", desired: map[string]int{"web": 2}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			servers, checks, e := drainWorld(reaperkv.KindDelete, "named for scale-in", true, t0)
			cfg := reapertest.Config(t)
			if tc.cfg != nil {
				cfg = reapertest.Config(t, tc.cfg)
			}
			sc := schema.Scaling{Drains: answer(nil), Overrides: map[string]schema.Override{}, DesiredIndex: map[string]uint64{"web": 41}}
			if tc.scaling != nil {
				tc.scaling(&sc)
			}
			in := reaper.Input{Now: t0, Config: cfg, Servers: servers, Checks: checks, Desired: tc.desired, Armed: true, Journal: []reaper.Entry{e}, Scaling: sc}
			p := Plan(in)
			var a *reaper.Action
			for i := range p.Actions {
				if p.Actions[i].Op == reaper.OpAbort {
					a = &p.Actions[i]
				}
			}
			if a == nil {
				t.Fatalf("no abort: %v", p.Actions)
			}
			rec := a.Entry.Abort
			if rec.Named != tc.wantNamed || rec.Restored != tc.wantRestore || (a.Restore != nil) != tc.wantRestore {
				t.Fatalf("named %t restored %t restore %+v; want named %t restored %t", rec.Named, rec.Restored, a.Restore, tc.wantNamed, tc.wantRestore)
			}
			if c := a.Restore; c != nil && (c.From != 2 || c.To != tc.wantRestored || c.Index != 41 || c.Role != "web") {
				t.Fatalf("restore %+v, want web 2 -> %d checked against index 41", c, tc.wantRestored)
			}
			if want := "withdrawn"; tc.wantNamed && !strings.Contains(rec.String(), want) {
				t.Fatalf("record says %q, want %q in it", rec.String(), want)
			}
		})
	}
}

// A host whose drain was aborted is not chosen again for a scale-in or a
// max-age retirement until its cool-off ends: the scale-in takes the next
// candidate. Named afresh, turned bad, or a later server of its name: it
// is chosen as any other.
func TestCooloffSkipsTheHost(t *testing.T) {
	// web3 is the oldest: the scale-in's first choice without a metric.
	servers := []reaper.Server{srv("web1", day), srv("web2", 2*day), srv("web3", 3*day)}
	checks := []reaper.Check{pass("web1"), pass("web2"), pass("web3")}
	cooling := func(id string, until time.Time) map[string]reaperkv.DrainAbortRecord {
		return map[string]reaperkv.DrainAbortRecord{"web3": {Host: "web3", ID: id, Role: "web", Kind: reaperkv.KindDelete, Cause: reaperkv.AbortFailed,
			Detail: "instance i-7 cannot be migrated", Time: t0.Add(-10 * time.Minute), Until: until, Index: 9}}
	}
	cases := []struct {
		name        string
		aborts      map[string]reaperkv.DrainAbortRecord
		problems    map[string]string
		scaling     func(*schema.Scaling)
		checks      []reaper.Check
		critSince   map[string]time.Time
		want        string
		wantBlocked string
		wantEnded   bool
		abortable   bool
	}{
		{name: "no cool-off: the oldest", want: "drain web3", abortable: true},
		{name: "web3 cooling off: the next candidate", aborts: cooling("id-web3", t0.Add(time.Minute)), want: "drain web2", abortable: true},
		{name: "web3's cool-off over: chosen again, the record removed", aborts: cooling("id-web3", t0), want: "drain web3", wantEnded: true, abortable: true},
		{name: "a later server named web3: not held", aborts: cooling("id-old-web3", t0.Add(time.Minute)), want: "drain web3", abortable: true},
		{name: "web3 named afresh for scale-in: chosen", aborts: cooling("id-web3", t0.Add(time.Minute)), want: "drain web3", abortable: true,
			scaling: func(s *schema.Scaling) {
				s.ScaleIn = map[string]map[string]schema.ScaleInRequest{"web": {"web3": {Time: t0, By: "ops"}}}
			}},
		{name: "web3 cooling off, then unhealthy: chosen first, and deleted whatever its drain's answer", aborts: cooling("id-web3", t0.Add(time.Minute)),
			checks: []reaper.Check{pass("web1"), pass("web2"), crit("web3")}, critSince: longCrit("web3"), want: "drain web3", abortable: false},
		{name: "an unreadable record holds web3, and says so", problems: map[string]string{"web3": "reaper/cooloff/web3: not a record of an aborted drain the reaper wrote"},
			want: "drain web2", abortable: true, wantBlocked: "`consul kv delete` it"},
		{name: "every candidate cooling or protected: held, saying why",
			aborts: cooling("id-web3", t0.Add(time.Minute)),
			scaling: func(s *schema.Scaling) {
				s.Protected = map[string]schema.Protection{"web1": {}, "web2": {}}
			},
			wantBlocked: "web3's drain was aborted at 2026-03-01T11:50:00Z (failed); not chosen again before 2026-03-01T12:01:00Z"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sc := schema.Scaling{ScaleIn: map[string]map[string]schema.ScaleInRequest{}, Protected: map[string]schema.Protection{}}
			if tc.scaling != nil {
				tc.scaling(&sc)
			}
			ch := checks
			if tc.checks != nil {
				ch = tc.checks
			}
			in := reaper.Input{Now: t0, Config: reapertest.Config(t), Servers: servers, Checks: ch, Desired: map[string]int{"web": 2}, Armed: true,
				Scaling: sc, DrainAborts: tc.aborts, DrainAbortProblems: tc.problems, Memory: reaper.Memory{Critical: tc.critSince}}
			p := Plan(in)
			got := strings.Join(ops(p), ",")
			if got != tc.want {
				t.Fatalf("actions %q, want %q\nblocked: %q", got, tc.want, p.Blocked)
			}
			if tc.want != "" && p.Actions[0].Entry.Abortable != tc.abortable {
				t.Fatalf("entry abortable %t, want %t", p.Actions[0].Entry.Abortable, tc.abortable)
			}
			if tc.wantBlocked != "" && !strings.Contains(strings.Join(p.Blocked, "\n"), tc.wantBlocked) {
				t.Fatalf("blocked %q, want %q", p.Blocked, tc.wantBlocked)
			}
			if ended := len(p.CooloffEnded) == 1 && p.CooloffEnded[0].Index == 9; ended != tc.wantEnded {
				t.Fatalf("ended %+v, want ended %t", p.CooloffEnded, tc.wantEnded)
			}
			cooled := len(p.Roles[0].DrainAborts) == 1
			if want := tc.aborts != nil && !tc.wantEnded; cooled != want {
				t.Fatalf("report's drain aborts %+v, want %t", p.Roles[0].DrainAborts, want)
			}
		})
	}
}

// Max-age retirement skips a server cooling off after an aborted drain
// and retires the next expired one; with none, it waits, saying why. A
// retirement's entry is abortable; a replacement for health is not.
func TestCooloffSkipsMaxAge(t *testing.T) {
	maxAge := func(c *reaper.Config) { c.Roles[0].MaxAge, c.Roles[0].MaxAgeJitter = reaper.Duration(7*day), 0 }
	cool := map[string]reaperkv.DrainAbortRecord{"web1": {Host: "web1", ID: "id-web1", Role: "web", Kind: reaperkv.KindReplace, Cause: reaperkv.AbortTimeout,
		Time: t0.Add(-time.Minute), Until: t0.Add(time.Hour)}}
	cases := []struct {
		name        string
		servers     []reaper.Server
		checks      []reaper.Check
		critSince   map[string]time.Time
		aborts      map[string]reaperkv.DrainAbortRecord
		want        string
		abortable   bool
		wantBlocked string
	}{
		{name: "two expired: the furthest past its age", servers: []reaper.Server{srv("web1", 9*day), srv("web2", 8*day), srv("web3", day)}, want: "create web4 for web1", abortable: true},
		{name: "the furthest cooling off: the next", servers: []reaper.Server{srv("web1", 9*day), srv("web2", 8*day), srv("web3", day)}, aborts: cool, want: "create web4 for web2", abortable: true},
		{name: "the only expired one cooling off: waits", servers: []reaper.Server{srv("web1", 9*day), srv("web2", day), srv("web3", day)}, aborts: cool,
			wantBlocked: "max-age retirement waits: web1's drain was aborted"},
		{name: "an unhealthy server: replaced for its health, not abortable", servers: []reaper.Server{srv("web1", day), srv("web2", day), srv("web3", day)},
			checks: []reaper.Check{crit("web1"), pass("web2"), pass("web3")}, critSince: longCrit("web1"), want: "create web4 for web1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ch := tc.checks
			if ch == nil {
				ch = []reaper.Check{pass("web1"), pass("web2"), pass("web3")}
			}
			in := reaper.Input{Now: t0, Config: reapertest.Config(t, maxAge), Servers: tc.servers, Checks: ch, Desired: map[string]int{"web": 3}, Armed: true,
				DrainAborts: tc.aborts, Memory: reaper.Memory{Critical: tc.critSince}}
			p := Plan(in)
			if got := strings.Join(ops(p), ","); got != tc.want {
				t.Fatalf("actions %q, want %q\nblocked: %q", got, tc.want, p.Blocked)
			}
			if tc.want != "" && p.Actions[0].Entry.Abortable != tc.abortable {
				t.Fatalf("entry abortable %t, want %t", p.Actions[0].Entry.Abortable, tc.abortable)
			}
			if tc.wantBlocked != "" && !strings.Contains(strings.Join(p.Blocked, "\n"), tc.wantBlocked) {
				t.Fatalf("blocked %q, want %q", p.Blocked, tc.wantBlocked)
			}
		})
	}
}
