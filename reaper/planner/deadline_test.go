package planner

import (
	"testing"
	"time"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/reaper"
	"github.com/jiocloud/orchestrate/reaper/reapertest"
)

// TestNextDeadline: the plan names the earliest instant at which a
// decision could change with no new data, so the daemon can wake then
// instead of at its next interval.
func TestNextDeadline(t *testing.T) {
	web3, web3checks := healthyFleet("web", 3)
	cases := []struct {
		name      string
		servers   []reaper.Server
		checks    []reaper.Check
		critSince map[string]time.Time
		journal   []reaper.Entry
		mutate    func(*reaper.Input)
		want      time.Time
	}{
		{name: "a healthy fleet without max age: no timer", servers: web3, checks: web3checks},
		{
			name: "critical first seen now: its grace ends critical_grace from now", servers: web3,
			checks: replaceChecks(web3checks, "web2", crit("web2")),
			want:   t0.Add(5 * time.Minute),
		},
		{
			name: "critical for a minute: four minutes left", servers: web3,
			checks: replaceChecks(web3checks, "web2", crit("web2")), critSince: map[string]time.Time{"web2": t0.Add(-time.Minute)},
			want: t0.Add(4 * time.Minute),
		},
		{
			name: "the earliest of two graces", servers: web3,
			checks:    replaceChecks(replaceChecks(web3checks, "web2", crit("web2")), "web3", crit("web3")),
			critSince: map[string]time.Time{"web2": t0.Add(-time.Minute), "web3": t0.Add(-3 * time.Minute)},
			want:      t0.Add(2 * time.Minute),
		},
		{
			name: "a booting server without a node: its boot timeout", servers: append(web3[:2:2], srv("web3", 10*time.Minute)), checks: web3checks[:2],
			want: t0.Add(20 * time.Minute),
		},
		{
			name: "a drain in the journal ends at its drain_until", servers: web3, checks: web3checks,
			journal: []reaper.Entry{{ID: "e1", Role: "web", Kind: reaperkv.KindDelete, Phase: reaperkv.PhaseDraining, OldName: "web3", OldID: "id-web3",
				Started: t0.Add(-time.Minute), Updated: t0.Add(-time.Minute), DrainUntil: t0.Add(40 * time.Second)}},
			want: t0.Add(40 * time.Second),
		},
		{
			name: "a role's backoff", servers: web3, checks: web3checks,
			mutate: func(in *reaper.Input) { in.RoleBackoff = map[string]time.Time{"web": t0.Add(90 * time.Second)} },
			want:   t0.Add(90 * time.Second),
		},
		{
			name: "a backoff already over is no deadline", servers: web3, checks: web3checks,
			mutate: func(in *reaper.Input) { in.BackoffUntil = t0.Add(-time.Second) },
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mem := reaper.NewMemory()
			for n, at := range tc.critSince {
				mem.Critical[n] = at
			}
			in := reaper.Input{Now: t0, Config: reapertest.Config(t), Servers: tc.servers, Checks: tc.checks, Desired: map[string]int{"web": 3}, Armed: true,
				Journal: tc.journal, Memory: mem, TermStart: t0.Add(-time.Hour)}
			if tc.mutate != nil {
				tc.mutate(&in)
			}
			p := Plan(in)
			if !p.NextDeadline.Equal(tc.want) {
				t.Fatalf("NextDeadline %v, want %v (actions %v, blocked %v)", p.NextDeadline, tc.want, ops(p), p.Blocked)
			}
		})
	}
}
