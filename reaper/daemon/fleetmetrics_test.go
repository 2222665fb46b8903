package daemon_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jiocloud/orchestrate/internal/orchestrate"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/testutil"
)

// cli runs the orchestrate command against the fixture's agent, as an
// operator would, failing the test on a non-zero exit.
func (f *fixture) cli(args ...string) string {
	f.t.Helper()
	var out, errOut bytes.Buffer
	args = append([]string{args[0], "--consul-addr", f.agent.HTTPAddr, "--prefix", prefix, "--log-level", "warn"}, args[1:]...)
	if code := orchestrate.Run(context.Background(), args, orchestrate.IO{Stdout: &out, Stderr: &errOut}); code != 0 {
		f.t.Fatalf("orchestrate %s: exit %d: %s", strings.Join(args, " "), code, errOut.String())
	}
	return out.String()
}

// waitMetrics waits until the reaper's metrics hold every line of want
// (each a whole sample line).
func waitMetrics(t *testing.T, r *running, what string, want ...string) {
	t.Helper()
	var body string
	testutil.Eventually(t, 20*time.Second, what, func() bool {
		body = scrape(t, r)
		for _, w := range want {
			if !strings.Contains(body, w+"\n") {
				return false
			}
		}
		return true
	}, func() string {
		var missing []string
		for _, w := range want {
			if !strings.Contains(body, w+"\n") {
				missing = append(missing, w)
			}
		}
		return "missing " + strings.Join(missing, "; ") + " in:\n" + grepLines(body, `role="web"`)
	})
}

// The gauges the alerting rules need follow a real agent's records: the
// role's serving count and min_healthy, a host's failed build, a halted
// rollout and its resume, an instance refresh as the state report gives
// it.
func TestAlertGaugesFollowTheFleet(t *testing.T) {
	f := newFixture(t)
	f.cfg.Roles[0].MinHealthy = 2
	f.seed(3)
	ctx := context.Background()
	st, err := store.New(f.c, prefix)
	if err != nil {
		t.Fatal(err)
	}
	f.cli("trigger-update", "v2")
	f.cli("rollout", "web", "--max-failures", "0")
	// web1 fails v2, as its converge would record it: a status record and
	// its rollout progress, both its own.
	if err := st.UpdateStatus(ctx, "web1", "puppet", store.StateFailed, store.StatusValue{Version: "v2", Detail: "puppet run failed"}); err != nil {
		t.Fatal(err)
	}
	if err := st.SetRolloutHost(ctx, "web", "web1", store.RolloutHost{Version: "v2", State: store.RolloutFailed, Time: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := st.UpdateStatus(ctx, "web2", "puppet", store.StateSuccess, store.StatusValue{Version: "v2"}); err != nil {
		t.Fatal(err)
	}
	r := f.start(nil)
	waitMetrics(t, r, "the failure and the halt", `reaper_role_healthy{role="web"} 3`, `reaper_role_min_healthy{role="web"} 2`,
		`reaper_failed_hosts{role="web",category="puppet"} 1`, `reaper_rollout_halted{role="web"} 1`)

	// A stopped node: the serving count drops.
	setCritical(t, f.c, "web3")
	waitMetrics(t, r, "web3 not serving", `reaper_role_healthy{role="web"} 2`)

	// The operator resumes the rollout, and web1 builds again.
	f.cli("rollout", "resume", "web")
	if err := st.UpdateStatus(ctx, "web1", "puppet", store.StateSuccess, store.StatusValue{Version: "v2"}); err != nil {
		t.Fatal(err)
	}
	waitMetrics(t, r, "the halt lifted and the failure gone", `reaper_failed_hosts{role="web",category="puppet"} 0`, `reaper_rollout_halted{role="web"} 0`)
	if m := scrape(t, r); strings.Contains(m, "reaper_refresh{") {
		t.Fatalf("a refresh gauge with no refresh:\n%s", grepLines(m, "reaper_refresh"))
	}

	// A refresh request: its state and what it has left are the state
	// report's.
	f.cli("refresh", "web", "--checkpoints", "50", "--reason", "alert gauges", "--yes")
	var want []string
	testutil.Eventually(t, 20*time.Second, "the refresh in the report and the metrics", func() bool {
		rep, err := readReport(f.c)
		if err != nil || rep == nil {
			return false
		}
		for _, role := range rep.Roles {
			if role.Name == "web" && role.Refresh != nil {
				want = []string{fmt.Sprintf(`reaper_refresh{role="web",state=%q} 1`, role.Refresh.State),
					fmt.Sprintf(`reaper_refresh_remaining{role="web"} %d`, role.Refresh.Remaining)}
			}
		}
		m := scrape(t, r)
		return want != nil && strings.Contains(m, want[0]+"\n") && strings.Contains(m, want[1]+"\n")
	}, func() string { return fmt.Sprintf("want %q in:\n%s", want, grepLines(scrape(t, r), "reaper_refresh")) })
}
