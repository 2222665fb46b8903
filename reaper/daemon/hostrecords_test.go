package daemon_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/reaper/reapertest"
)

// hostsConfig: role web of 3, heartbeat every minute, silent after 3
// minutes without a move, orphaned records removed after 10.
const hostsConfig = `
dry_run: %v
prefix: ` + prefix + `
interval: 30s
session_ttl: 2s
lock_delay: 1s
listen: ""
heartbeat_interval: 1m
roles:
  - name: web
    desired: 3
    absent_grace: 2m
    silent_after: 3m
    orphan_grace: 10m
    boot: {flavor: m1, image: debian, name_template: "web{n}"}
`

// heartbeats is the nodes' side of the heartbeat: each host of alive
// answers when the leader rang since its last answer, with the real
// `orchestrate heartbeat` its watch runs.
type heartbeats struct {
	w     *scaleWorld
	alive map[string]bool
	rung  map[string]uint64
}

func (h *heartbeats) answer() {
	p, _, err := h.w.c.KV().Get(reaperkv.ReaperKey(prefix, reaperkv.ReaperHeartbeatKey), nil)
	if err != nil {
		h.w.t.Fatal(err)
	}
	if p == nil {
		return
	}
	for host, ok := range h.alive {
		if ok && h.rung[host] != p.ModifyIndex {
			h.w.cli("heartbeat", "--host", host)
			h.rung[host] = p.ModifyIndex
		}
	}
}

// hostRoleReport is role web in the reaper's last report.
func hostRoleReport(t *testing.T, c *api.Client) reaperkv.RoleReport {
	t.Helper()
	rep, err := readReport(c)
	if err != nil || rep == nil {
		t.Fatalf("report: %v", err)
	}
	for _, r := range rep.Roles {
		if r.Name == "web" {
			return r
		}
	}
	t.Fatal("no role web in the report")
	return reaperkv.RoleReport{}
}

// On a real agent, with the simulated cloud and clock: a host that stops
// answering the heartbeat is silent after silent_after, shown and counted,
// never deleted, and no longer once it answers again; a host with records
// and no server (web9) has them removed after orphan_grace, in one
// transaction recorded in the history, while a host named like no role
// (bootstrap1) keeps its records; a Nova list that misses a server for one
// cycle changes neither; a record written by hand far in the future or
// as garbage changes nothing either (the reaper goes by Consul's index).
func TestSilentAndOrphanedHosts(t *testing.T) {
	t.Parallel()
	w := newScaleWorld(t, fmt.Sprintf(hostsConfig, false), 3)
	w.report = false
	ctx := context.Background()
	for _, host := range []string{"web9", "bootstrap1"} {
		if err := w.st.UpdateStatus(ctx, host, store.CategoryPuppet, store.StateSuccess, store.StatusValue{}); err != nil {
			t.Fatal(err)
		}
	}
	for k, v := range map[string]string{
		store.HeartbeatKey(prefix, "web2"):     `{"time":"2999-01-01T00:00:00Z"}`,
		store.HostDir(prefix, "web9") + "junk": "not a record",
	} {
		if _, err := w.c.KV().Put(&api.KVPair{Key: k, Value: []byte(v)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	hb := &heartbeats{w: w, alive: map[string]bool{"web1": true, "web2": true, "web3": true}, rung: map[string]uint64{}}
	step := func() {
		w.step()
		hb.answer()
	}
	step()
	if r := hostRoleReport(t, w.c); reapertest.HostNames(r.Orphaned) != "web9" || len(r.Silent) != 0 || !r.Orphaned[0].Until.Equal(r.Orphaned[0].Since.Add(10*time.Minute)) {
		t.Fatalf("first cycle: silent %v, orphaned %+v; want web9 orphaned for 10m", r.Silent, r.Orphaned)
	}
	if m := metricsText(t, w.r); !strings.Contains(m, "reaper_orphaned_hosts 1\n") || !strings.Contains(m, `reaper_silent_hosts{role="web"} 0`) {
		t.Fatalf("metrics:\n%s", m)
	}
	// web2 stops answering (its orchestrate, token or watches broke while
	// its agent and checks are fine); its last record claims the year 2999.
	hb.alive["web2"] = false
	stopped := w.clock()
	w.sim.TruncateLists(1) // the next list misses web3
	n := w.stepUntil(20, "web2 silent", func() bool {
		hb.answer()
		return reapertest.HostNames(hostRoleReport(t, w.c).Silent) == "web2"
	})
	if took := w.clock().Sub(stopped); took < 3*time.Minute || took > 5*time.Minute {
		t.Fatalf("web2 silent %s after its last answer (%d steps), want 3m to silent_after plus a heartbeat", took, n)
	}
	if m := metricsText(t, w.r); !strings.Contains(m, `reaper_silent_hosts{role="web"} 1`) {
		t.Fatalf("metrics:\n%s", m)
	}
	// Orphan grace: web9's records go, in one transaction; bootstrap1's
	// and the servers' stay.
	w.stepUntil(30, "web9's records removed", func() bool {
		hb.answer()
		return len(keysUnder(t, w.c, store.HostDir(prefix, "web9"))) == 0
	})
	for _, host := range []string{"bootstrap1", "web1", "web2", "web3"} {
		if len(keysUnder(t, w.c, store.HostDir(prefix, host))) == 0 {
			t.Fatalf("%s's records were removed", host)
		}
	}
	if got := w.servers(); got != "web1,web2,web3" || len(w.deleted) != 0 {
		t.Fatalf("servers %s, deleted %v: a silent host or an orphan cost a server", got, w.deleted)
	}
	var forgot bool
	for _, a := range readHistory(t, w.c) {
		forgot = forgot || (a.Kind == "forget-records" && a.Result == "done" && strings.Contains(a.Action, "web9"))
	}
	if !forgot {
		t.Fatalf("no forget-records of web9 in the history: %+v", readHistory(t, w.c))
	}
	step()
	if m := metricsText(t, w.r); !strings.Contains(m, "reaper_orphaned_hosts 0\n") {
		t.Fatalf("metrics after the removal:\n%s", m)
	}
	// web2 answers again: silent no more once it was rung.
	hb.alive["web2"] = true
	w.stepUntil(4, "web2 no longer silent", func() bool {
		hb.answer()
		return len(hostRoleReport(t, w.c).Silent) == 0
	})
}

// Disarmed, or in a dry run, the reaper shows orphaned hosts and removes
// nothing, however long past their grace.
func TestOrphanedRecordsKeptWhileDisarmedOrDryRun(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		dry      bool
		disarmed bool
	}{{"dry run", true, false}, {"disarmed", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newScaleWorld(t, fmt.Sprintf(hostsConfig, tc.dry), 3)
			w.report = false
			if tc.disarmed {
				if code, errOut := w.runCLI("reaper", "disarm", "--reason", "test"); code != 0 {
					t.Fatalf("disarm: %d %s", code, errOut)
				}
			}
			if err := w.st.Heartbeat(context.Background(), "web9"); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 30; i++ { // 15 minutes
				w.step()
			}
			if r := hostRoleReport(t, w.c); reapertest.HostNames(r.Orphaned) != "web9" {
				t.Fatalf("orphaned %+v, want web9", r.Orphaned)
			}
			if len(keysUnder(t, w.c, store.HostDir(prefix, "web9"))) != 1 {
				t.Fatal("web9's records were removed")
			}
		})
	}
}
