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

// refreshWorld is a role web of 4 serving servers, the first onSpec of
// them on spec and the rest on "an older spec", and the request rec.
func refreshWorld(t *testing.T, rec *reaperkv.RefreshRecord, onSpec int, spec func(cfg *reaper.Config) string, mutate ...func(*reaper.Config)) reaper.Input {
	cfg := reapertest.Config(t, append([]func(*reaper.Config){func(c *reaper.Config) { c.Roles[0].Desired = 4 }}, mutate...)...)
	ss, cs := healthyFleet("web", 4)
	for i := range ss {
		ss[i].Metadata[reaper.MetaSpec] = "an older spec"
		if i < onSpec {
			ss[i].Metadata[reaper.MetaSpec] = spec(cfg)
		}
	}
	in := reaper.Input{Now: t0, Config: cfg, Servers: ss, Checks: cs, Armed: true}
	if rec != nil {
		in.Refresh = map[string]reaperkv.RefreshRecord{"web": *rec}
	}
	return in
}

func configured(cfg *reaper.Config) string { return cfg.Roles[0].Boot.Digest() }
func older(*reaper.Config) string          { return "an older spec" }

// request is an operator's request, seen a minute ago.
func request(change func(*reaperkv.RefreshRecord)) *reaperkv.RefreshRecord {
	r := &reaperkv.RefreshRecord{Time: t0.Add(-time.Hour), By: "ops", Reason: "new image", Seen: t0.Add(-time.Minute), State: reaperkv.RefreshRunning, Index: 7}
	if change != nil {
		change(r)
	}
	return r
}

func replaced(p *reaper.Plan) []string {
	var out []string
	for _, a := range p.Actions {
		if a.Entry.Reason == string(reaper.StateDrifted) && (a.Op == reaper.OpCreate || a.Op == reaper.OpClaim) {
			out = append(out, a.Entry.OldName)
		}
	}
	return out
}

// An operator's request refreshes a role whatever its refresh setting, in
// batches its min-healthy share sizes, holding at its checkpoints until
// continued; cancelled or failed it replaces nothing (refresh: auto
// neither), and a request that cannot be read holds the role's refresh.
func TestRefreshRequest(t *testing.T) {
	auto := func(c *reaper.Config) { c.Roles[0].Refresh = reaper.RefreshAuto }
	four := func(c *reaper.Config) { c.MaxInFlight = 4 }
	for _, tc := range []struct {
		name      string
		rec       *reaperkv.RefreshRecord
		onSpec    int
		mutate    []func(*reaper.Config)
		change    func(*reaper.Input)
		want      []string // old servers replaced
		wantState string   // the request's state as written back ("": not written)
		wantNote  string
		wantAct   string
	}{
		{name: "a new request on a role with refresh off: seen, running, the oldest first",
			rec: request(func(r *reaperkv.RefreshRecord) { r.Seen, r.State = time.Time{}, "" }), want: []string{"web4"},
			wantState: reaperkv.RefreshRunning, wantAct: "refresh requested by ops (new image)"},
		{name: "no request, refresh off: nothing", want: nil},
		{name: "the request's min-healthy share sizes the batch", rec: request(func(r *reaperkv.RefreshRecord) { r.MinHealthyPercent = 50 }),
			mutate: []func(*reaper.Config){four}, want: []string{"web4", "web3"}},
		{name: "the role's own share without one (90% of 4: one at a time)", rec: request(nil), mutate: []func(*reaper.Config){four}, want: []string{"web4"}},
		{name: "a checkpoint reached holds the next batch", rec: request(func(r *reaperkv.RefreshRecord) { r.Checkpoints = []int{25, 50} }), onSpec: 1,
			wantState: reaperkv.RefreshCheckpoint, wantNote: "waits at checkpoint 25% (1 of 4 serving on the spec): `orchestrate refresh continue web`", wantAct: "refresh at checkpoint 25%"},
		{name: "continued past it: the next batch", rec: request(func(r *reaperkv.RefreshRecord) {
			r.Checkpoints, r.Continued, r.State = []int{25, 50}, 1, reaperkv.RefreshCheckpoint
		}), onSpec: 1, want: []string{"web4"}, wantState: reaperkv.RefreshRunning},
		{name: "below the checkpoint: goes on", rec: request(func(r *reaperkv.RefreshRecord) { r.Checkpoints = []int{50} }), onSpec: 1, want: []string{"web4"}},
		{name: "cancelled: nothing, refresh: auto neither", rec: request(func(r *reaperkv.RefreshRecord) { r.Cancelled = t0.Add(-time.Second) }),
			mutate: []func(*reaper.Config){auto}, wantState: reaperkv.RefreshCancelled, wantNote: "refresh cancelled at"},
		{name: "failed: held", rec: request(func(r *reaperkv.RefreshRecord) { r.Failures, r.Detail = 1, "web5 in ERROR" }),
			wantState: reaperkv.RefreshFailed, wantNote: "refresh failed (web5 in ERROR): `orchestrate refresh continue web` retries"},
		{name: "failed, then retried: goes on", rec: request(func(r *reaperkv.RefreshRecord) {
			r.Failures, r.Retries, r.State, r.Detail = 1, 1, reaperkv.RefreshFailed, "web5 in ERROR"
		}), want: []string{"web4"}, wantState: reaperkv.RefreshRunning},
		{name: "a request that cannot be read holds refresh: auto", mutate: []func(*reaper.Config){auto},
			change: func(in *reaper.Input) {
				in.RefreshProblems = map[string]string{"web": "reaper/refresh/web: not a refresh request"}
			},
			wantNote: "refresh holds: reaper/refresh/web: not a refresh request"},
		{name: "disarmed: seen, nothing replaced", rec: request(func(r *reaperkv.RefreshRecord) { r.Seen, r.State = time.Time{}, "" }),
			change: func(in *reaper.Input) { in.Armed = false }, wantState: reaperkv.RefreshRunning, wantNote: "waits: not armed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := refreshWorld(t, tc.rec, tc.onSpec, configured, tc.mutate...)
			if tc.change != nil {
				tc.change(&in)
			}
			p := Plan(in)
			if got := replaced(p); strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("replaced %v, want %v\nblocked %q", got, tc.want, p.Blocked)
			}
			if tc.wantNote != "" && !strings.Contains(strings.Join(p.Blocked, "\n"), tc.wantNote) {
				t.Errorf("blocked %q, want a line with %q", p.Blocked, tc.wantNote)
			}
			w := writeOf(p, "web")
			switch {
			case tc.wantState == "" && w != nil && w.Record.State != tc.rec.State:
				t.Errorf("request written as %s, want unchanged", w.Record.State)
			case tc.wantState != "" && (w == nil || w.Record.State != tc.wantState):
				t.Fatalf("request written %+v, want state %s", w, tc.wantState)
			case w != nil && w.Record.Index != tc.rec.Index:
				t.Errorf("written with index %d, want the one read, %d", w.Record.Index, tc.rec.Index)
			}
			if tc.wantAct != "" && (w == nil || !strings.HasPrefix(w.Activity, tc.wantAct)) {
				t.Errorf("activity %+v, want %q", w, tc.wantAct)
			}
			if tc.rec != nil && tc.rec.Seen.IsZero() && (w == nil || !w.Record.Seen.Equal(t0)) {
				t.Errorf("a new request is seen at t0: %+v", w)
			}
		})
	}
}

func writeOf(p *reaper.Plan, role string) *reaper.RefreshWrite {
	for i := range p.Refreshes {
		if p.Refreshes[i].Role == role {
			return &p.Refreshes[i]
		}
	}
	return nil
}

// A rollback rolls the role back to the spec before the current one, as
// the reaper recorded it: new servers are built from it (the entry names
// it), the request fixes it; done, the request stays and pins the role
// there, until the configuration names that spec again. With nothing to
// roll back to, or a spec that cannot be built any more, it fails at once.
func TestRefreshRollback(t *testing.T) {
	specs := func(in *reaper.Input) {
		in.Specs = map[string]reaperkv.SpecRecord{"web": {Current: reaperkv.BootSpecInfo{Digest: configured(in.Config)}, Previous: &reaperkv.BootSpecInfo{Digest: "an older spec"}}}
	}
	rollback := func(change func(*reaperkv.RefreshRecord)) *reaperkv.RefreshRecord {
		return request(func(r *reaperkv.RefreshRecord) {
			r.Rollback, r.Seen, r.State = true, time.Time{}, ""
			if change != nil {
				change(r)
			}
		})
	}
	t.Run("rolls back to the previous spec", func(t *testing.T) {
		in := refreshWorld(t, rollback(nil), 4, configured)
		specs(&in)
		p := Plan(in)
		if got := replaced(p); strings.Join(got, ",") != "web4" {
			t.Fatalf("replaced %v, want web4 (blocked %q)", got, p.Blocked)
		}
		if e := p.Actions[0].Entry; e.Spec != "an older spec" {
			t.Errorf("entry spec %q, want the previous one", e.Spec)
		}
		if w := writeOf(p, "web"); w == nil || w.Record.Spec != "an older spec" || w.Record.State != reaperkv.RefreshRunning || !strings.HasPrefix(w.Activity, "rollback requested") {
			t.Errorf("written %+v", w)
		}
		if r := p.Roles[0]; r.Spec != "an older spec" || r.Drifted != 4 || r.Refresh == nil || !r.Refresh.Rollback {
			t.Errorf("role report spec %q drifted %d refresh %+v", r.Spec, r.Drifted, r.Refresh)
		}
	})
	t.Run("nothing to roll back to: failed", func(t *testing.T) {
		p := Plan(refreshWorld(t, rollback(nil), 4, configured))
		w := writeOf(p, "web")
		if len(replaced(p)) != 0 || w == nil || w.Record.State != reaperkv.RefreshFailed || !strings.Contains(w.Record.Detail, "nothing to roll back to") {
			t.Fatalf("replaced %v, written %+v", replaced(p), w)
		}
	})
	t.Run("a previous spec that cannot be built: failed", func(t *testing.T) {
		in := refreshWorld(t, rollback(nil), 4, configured)
		specs(&in)
		in.SpecProblems = map[string]string{"web": "the user data file /etc/ud.yaml no longer holds what the spec was built from"}
		p := Plan(in)
		w := writeOf(p, "web")
		if len(replaced(p)) != 0 || w == nil || w.Record.State != reaperkv.RefreshFailed || !strings.Contains(w.Record.Detail, "no longer holds") {
			t.Fatalf("replaced %v, written %+v", replaced(p), w)
		}
	})
	t.Run("done: pinned, new servers built from the pinned spec", func(t *testing.T) {
		in := refreshWorld(t, rollback(func(r *reaperkv.RefreshRecord) {
			r.Spec, r.Seen, r.State = "an older spec", t0.Add(-time.Hour), reaperkv.RefreshRunning
		}), 4, older)
		specs(&in)
		p := Plan(in)
		w := writeOf(p, "web")
		if w == nil || w.Remove || w.Record.State != reaperkv.RefreshPinned || !strings.HasPrefix(w.Activity, "rollback done") {
			t.Fatalf("written %+v, want pinned", w)
		}
		in.Refresh["web"] = w.Record
		in.Desired = map[string]int{"web": 5}
		p = Plan(in)
		if len(p.Actions) != 1 || p.Actions[0].Op != reaper.OpCreate || p.Actions[0].Entry.Spec != "an older spec" {
			t.Fatalf("scale out of a pinned role: %v, want one create on the pinned spec", p.Actions)
		}
		if w := writeOf(p, "web"); w != nil {
			t.Errorf("a pinned request is not written again: %+v", w)
		}
	})
	t.Run("the configuration names the pinned spec: released", func(t *testing.T) {
		in := refreshWorld(t, nil, 4, configured)
		in.Refresh = map[string]reaperkv.RefreshRecord{"web": *rollback(func(r *reaperkv.RefreshRecord) {
			r.Spec, r.Seen, r.State = configured(in.Config), t0.Add(-time.Hour), reaperkv.RefreshPinned
		})}
		p := Plan(in)
		if w := writeOf(p, "web"); w == nil || !w.Remove || !strings.HasPrefix(w.Activity, "rollback pin released") {
			t.Fatalf("written %+v, want removed", w)
		}
	})
}

// A refresh whose servers are all on its spec is done: its request is
// removed. A replacement of the refresh that does not serve stops it: the
// request fails (a role refreshing by itself gets one of the reaper's), and
// its next batch waits for `orchestrate refresh continue`.
func TestRefreshDoneAndFailed(t *testing.T) {
	t.Run("done", func(t *testing.T) {
		p := Plan(refreshWorld(t, request(nil), 4, configured))
		if w := writeOf(p, "web"); w == nil || !w.Remove || w.Record.Index != 7 || !strings.HasPrefix(w.Activity, "refresh done") {
			t.Fatalf("written %+v, want removed (index 7)", w)
		}
	})
	for _, tc := range []struct {
		name string
		rec  *reaperkv.RefreshRecord
		auto bool
		by   string
	}{
		{name: "an operator's request", rec: request(nil), by: "ops"},
		{name: "refresh: auto, no request", auto: true, by: "reaper"},
	} {
		t.Run("a replacement in ERROR: "+tc.name, func(t *testing.T) {
			var mutate []func(*reaper.Config)
			if tc.auto {
				mutate = append(mutate, func(c *reaper.Config) { c.Roles[0].Refresh = reaper.RefreshAuto })
			}
			in := refreshWorld(t, tc.rec, 0, configured, mutate...)
			in.Servers = append(in.Servers, withStatus(srv("web5", time.Minute), reaper.StatusError))
			in.Servers[len(in.Servers)-1].Fault = "No valid host was found"
			in.Journal = []reaper.Entry{{ID: "web.1.1", Kind: reaperkv.KindReplace, Role: "web", Reason: string(reaper.StateDrifted), Phase: reaperkv.PhaseBooting,
				OldName: "web4", OldID: "id-web4", NewName: "web5", NewID: "id-web5", Started: t0.Add(-time.Minute), Updated: t0.Add(-time.Minute)}}
			p := Plan(in)
			if ops(p)[0] != "rollback web5" {
				t.Fatalf("actions %v, want the rollback", ops(p))
			}
			w := writeOf(p, "web")
			if w == nil || w.Record.State != reaperkv.RefreshFailed || w.Record.Failures != 1 || w.Record.By != tc.by || !strings.Contains(w.Record.Detail, "No valid host") {
				t.Fatalf("written %+v, want failed once, by %s", w, tc.by)
			}
			if len(replaced(p)) != 0 {
				t.Errorf("replaced %v in the cycle the refresh failed", replaced(p))
			}
			in.Journal, in.Servers = nil, in.Servers[:4]
			in.Refresh = map[string]reaperkv.RefreshRecord{"web": w.Record}
			if p := Plan(in); len(replaced(p)) != 0 || !strings.Contains(strings.Join(p.Blocked, "\n"), "refresh failed") {
				t.Fatalf("the next cycle replaced %v (blocked %q), want it held", replaced(p), p.Blocked)
			}
		})
	}
}

// A refresh replacement whose on_launch hook is abandoned failed its
// launch: the refresh stops as for a server that did not serve.
func TestRefreshStopsOnAnAbandonedLaunch(t *testing.T) {
	in := refreshWorld(t, request(nil), 0, configured, func(c *reaper.Config) {
		c.Roles[0].OnLaunch = &reaper.Hook{Timeout: reaper.Duration(10 * time.Minute), DefaultResult: schema.HookAbandon}
	})
	web5 := srv("web5", time.Minute)
	web5.Metadata[reaper.MetaSpec] = configured(in.Config)
	in.Servers = append(in.Servers, web5)
	in.Checks = append(in.Checks, pass("web5"))
	in.Journal = []reaper.Entry{{ID: "web.1.1", Kind: reaperkv.KindReplace, Role: "web", Reason: string(reaper.StateDrifted), Phase: reaperkv.PhaseLaunchHook,
		OldName: "web4", OldID: "id-web4", NewName: "web5", NewID: "id-web5", Started: t0.Add(-time.Hour), Updated: t0.Add(-time.Hour),
		LaunchHook: &reaperkv.HookState{Requested: t0.Add(-time.Hour), Deadline: t0.Add(-time.Minute), Default: schema.HookAbandon}}}
	p := Plan(in)
	w := writeOf(p, "web")
	if w == nil || w.Record.State != reaperkv.RefreshFailed || !strings.Contains(w.Record.Detail, "abandon") {
		t.Fatalf("actions %v, written %+v: want the refresh failed by the abandoned launch", ops(p), w)
	}
}
