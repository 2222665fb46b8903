package daemon_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/testutil"
	"github.com/jiocloud/orchestrate/reaper"
)

// A new server whose first boot reports provisioned failed (as the
// shipped user data does, with the host's own token) is a failed create:
// rolled back well before boot_timeout, the role's creates backed off with
// the failing step as the reason, and the rollback in the history.
func TestProvisionFailedIsAFailedCreate(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.seed(2)
	f.arm()
	st, err := store.New(f.c, prefix)
	if err != nil {
		t.Fatal(err)
	}
	f.sim.OnActive = func(s reaper.Server) {
		// The first-boot script: running once the agent joined, failed at
		// its end; the node's agent has no service (Puppet never ran).
		ctx := context.Background()
		for _, state := range []string{store.StateRunning, store.StateFailed} {
			v := store.StatusValue{}
			if state == store.StateFailed {
				v.Detail = "step puppet failed (exit 1)"
			}
			if err := st.UpdateStatus(ctx, s.Name, store.CategoryProvisioned, state, v); err != nil {
				t.Errorf("update-status %s: %v", s.Name, err)
			}
		}
	}
	r := f.start(nil)
	testutil.Eventually(t, 10*time.Second, "web3 rolled back and the role backed off", func() bool {
		rep, _ := readReport(f.c)
		return rep != nil && strings.Contains(rep.RoleBackoff["web"].Reason, "first boot failed: step puppet failed (exit 1)") &&
			len(f.sim.Servers()) == 2 && len(journalKeys(t, f.c)) == 0
	})
	waitCycles(t, 5, r)
	if n := f.sim.Creates.Load(); n != 1 {
		t.Fatalf("%d creates, want 1 then the backoff (quota_backoff 30s)", n)
	}
	var asked, done bool
	for _, a := range readHistory(t, f.c) {
		asked = asked || (a.Kind == string(reaper.OpRollback) && strings.Contains(a.Reason, "web3 reported its provisioning failed (step puppet failed (exit 1))"))
		done = done || (a.Kind == string(reaper.OpRollback) && a.Result == "done")
	}
	if !asked || !done {
		t.Fatalf("no rollback for the failed provisioning in the history: %+v", readHistory(t, f.c))
	}
	if body := scrape(t, r); !strings.Contains(body, `reaper_role_backoff_seconds{role="web"} `) {
		t.Fatalf("metrics lack the role backoff:\n%s", body)
	}
}

// The trust rule: a failed provisioned record in the older layout
// (status/provisioned/failed/HOST), which any node with the older shared
// policy could write about any other, is not acted on: the server is
// waited for as any booting server.
func TestProvisionFailedInTheOlderLayoutIsNotActedOn(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.seed(2)
	f.arm()
	f.sim.OnActive = func(s reaper.Server) {
		rec := []byte(`{"time":"` + time.Now().UTC().Format(time.RFC3339) + `","version":"","detail":"forged","log_url":""}`)
		if _, err := f.c.KV().Put(&api.KVPair{Key: prefix + "/status/provisioned/failed/" + s.Name, Value: rec}, nil); err != nil {
			t.Errorf("write the older record: %v", err)
		}
	}
	r := f.start(nil)
	testutil.Eventually(t, 10*time.Second, "web3 created", func() bool { return len(f.sim.Servers()) == 3 })
	waitCycles(t, 10, r)
	if got := names(f.sim.Servers()); got != "web1,web2,web3" || f.sim.Deletes.Load() != 0 {
		t.Fatalf("servers %s, %d deletes: a record another node could write was acted on", got, f.sim.Deletes.Load())
	}
	if rep, _ := readReport(f.c); rep == nil || rep.RoleBackoff["web"].Reason != "" {
		t.Fatalf("report %+v: the role backed off", rep)
	}
}
