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

// A server whose own provisioned record says failed (its first boot gave
// up) is a failed create: replaced, or rolled back in its create entry,
// not waited for until boot_timeout as a node that may still check in.
func TestProvisionFailed(t *testing.T) {
	fleet, checks := healthyFleet("web", 3)
	fleet, checks = slices.Clip(fleet[:2]), slices.Clip(checks[:2])
	young := srv("web3", 10*time.Minute) // booting: boot_timeout is 15m
	failedAt := func(d time.Duration) map[string]reaper.ProvisionFailure {
		return map[string]reaper.ProvisionFailure{"web3": {Detail: "step puppet failed (exit 1)", Time: young.Created.Add(d)}}
	}
	booting := reaper.Entry{ID: "web.j1", Kind: reaperkv.KindCreate, Role: "web", Phase: reaperkv.PhaseBooting, NewName: "web3", NewID: "id-web3",
		Started: t0.Add(-10 * time.Minute), Updated: t0.Add(-10 * time.Minute)}
	cases := []struct {
		name      string
		servers   []reaper.Server
		checks    []reaper.Check
		failed    map[string]reaper.ProvisionFailure
		journal   []reaper.Entry
		notArmed  bool
		paused    bool
		wantState reaper.ServerState
		want      []string
		blocked   string
	}{
		{name: "no record: booting, waited for", servers: append(fleet, young), checks: checks,
			wantState: reaper.StateBooting, want: []string{}},
		{name: "failed record of its own: replaced at once, within boot_timeout", servers: append(fleet, young), checks: checks, failed: failedAt(time.Minute),
			wantState: reaper.StateReplacing, want: []string{"create web4 for web3"}},
		{name: "a node clock 5 minutes behind Nova's: still its record", servers: append(fleet, young), checks: checks, failed: failedAt(-5 * time.Minute),
			wantState: reaper.StateReplacing, want: []string{"create web4 for web3"}},
		{name: "a record a day older than the server: an earlier server's of the name, ignored", servers: append(fleet, young), checks: checks, failed: failedAt(-day),
			wantState: reaper.StateBooting, want: []string{}},
		{name: "a record with no time (written by hand): ignored", servers: append(fleet, young), checks: checks,
			failed:    map[string]reaper.ProvisionFailure{"web3": {Detail: "x"}},
			wantState: reaper.StateBooting, want: []string{}},
		{name: "a record dated far in the future: the host's own word about itself, counted", servers: append(fleet, young), checks: checks, failed: failedAt(10 * 365 * day),
			wantState: reaper.StateReplacing, want: []string{"create web4 for web3"}},
		{name: "it serves all the same (Puppet fixed it later): healthy, kept", servers: append(fleet, young), checks: append(checks, pass("web3")), failed: failedAt(time.Minute),
			wantState: reaper.StateHealthy, want: []string{}},
		{name: "in maintenance: the operator's, kept", servers: append(fleet, young),
			checks: append(checks, reaper.Check{Node: "web3", CheckID: reaper.MaintNodeCheck, Status: reaper.CheckCritical}), failed: failedAt(time.Minute),
			wantState: reaper.StateMaintenance, want: []string{}},
		{name: "not armed: its replacement waits, as any", servers: append(fleet, young), checks: checks, failed: failedAt(time.Minute), notArmed: true,
			wantState: reaper.StateProvisionFailed, want: []string{}, blocked: "replacement of web3 (provision-failed) waits: not armed"},
		{name: "in its create entry: rolled back (the daemon backs off the role's creates)", servers: append(fleet, withJournal(young, "web.j1")), checks: checks,
			failed: failedAt(time.Minute), journal: []reaper.Entry{booting}, want: []string{"rollback web3"}},
		{name: "in its create entry without a record: waited for", servers: append(fleet, withJournal(young, "web.j1")), checks: checks,
			journal: []reaper.Entry{booting}, want: []string{}},
		{name: "in its create entry, paused: the rollback waits", servers: append(fleet, withJournal(young, "web.j1")), checks: checks,
			failed: failedAt(time.Minute), journal: []reaper.Entry{booting}, paused: true, want: []string{}, blocked: "rollback of web3 waits: paused"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := reaper.Input{Now: t0, Config: reapertest.Config(t), Servers: slices.Clone(tc.servers), Checks: slices.Clone(tc.checks), Armed: !tc.notArmed,
				ArmKeyWritten: tc.notArmed, Journal: tc.journal, ProvisionFailed: tc.failed, Memory: reaper.NewMemory()}
			if tc.paused {
				// Nova's partial records pause the plan.
				in.Servers = append(in.Servers, reaper.Server{ID: "partial-1", Status: "UNKNOWN"})
			}
			p := Plan(in)
			if got := ops(p); strings.Join(got, "; ") != strings.Join(tc.want, "; ") {
				t.Errorf("actions = %q, want %q\nblocked: %q", got, tc.want, p.Blocked)
			}
			if tc.blocked != "" && !strings.Contains(strings.Join(p.Blocked, "\n"), tc.blocked) {
				t.Errorf("blocked = %q, want a line with %q", p.Blocked, tc.blocked)
			}
			if tc.wantState != "" {
				if got := stateInViews(p, "web3"); got != tc.wantState {
					t.Errorf("state of web3 = %q, want %q", got, tc.wantState)
				}
			}
			for _, a := range p.Actions {
				if a.Op == reaper.OpRollback && (a.Entry.Provision != "step puppet failed (exit 1)" || !strings.Contains(a.Entry.Error, "provisioning failed")) {
					t.Errorf("rollback entry = %+v, want the failing step in Provision and Error", a.Entry)
				}
			}
		})
	}
}
