package daemon_test

import (
	"slices"
	"testing"
	"time"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/internal/testutil"
	"github.com/jiocloud/orchestrate/reaper"
)

// The state report lists the cycle's actions as data, beside its lines,
// so `orchestrate status` reads no text. A disarmed reaper (in a dry run,
// the default, so the plan stays) plans the create of a missing server;
// once the role is whole and a server fails, it holds back its
// replacement, and says why.
func TestReportListsActionsAsData(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.seed(2)
	f.cfg.DryRun = nil
	r := f.start(nil)
	testutil.Eventually(t, 5*time.Second, "reaper to lead", r.Leading)
	st := waitAction(t, f, "a planned create", func(a reaperkv.PlanAction) bool { return !a.Held })
	want := reaperkv.PlanAction{Op: string(reaper.OpCreate), Role: "web", Host: "web3", Reason: "2 of desired 3", Text: "create web web3 (2 of desired 3)"}
	if len(st.Actions) != 1 || st.Actions[0] != want || len(st.Planned) != 1 || st.Planned[0] != want.Text {
		t.Fatalf("actions %+v, planned %q; want only %+v", st.Actions, st.Planned, want)
	}

	f.sim.Add(reaper.Server{Name: "web3", Created: time.Now().Add(-24 * time.Hour), Metadata: map[string]string{reaper.MetaRole: "web"}})
	setCritical(t, f.c, "web3")
	st = waitAction(t, f, "a held-back replacement", func(a reaperkv.PlanAction) bool { return a.Held })
	want = reaperkv.PlanAction{Op: reaperkv.PlanReplace, Role: "web", Host: "web3", Reason: string(reaper.StateUnhealthy), Held: true,
		Why: reaperkv.HoldDisarmed, WhyText: "not armed", Text: "web: replacement of web3 (unhealthy) waits: not armed"}
	if len(st.Actions) != 1 || st.Actions[0] != want || len(st.Blocked) != 1 || st.Blocked[0] != want.Text || len(st.Planned) != 0 {
		t.Fatalf("actions %+v, planned %q, blocked %q; want only %+v", st.Actions, st.Planned, st.Blocked, want)
	}
}

// waitAction waits for a state report with an action that match says is
// the one, and returns the report.
func waitAction(t *testing.T, f *fixture, what string, match func(reaperkv.PlanAction) bool) *reaperkv.ReaperReport {
	t.Helper()
	var st *reaperkv.ReaperReport
	testutil.Eventually(t, 15*time.Second, what, func() bool {
		st, _ = readReport(f.c)
		return st != nil && slices.ContainsFunc(st.Actions, match)
	})
	return st
}
