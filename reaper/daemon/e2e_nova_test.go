package daemon_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/hashicorp/consul/api"
	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/novatest"
	"github.com/jiocloud/orchestrate/internal/orchestrate"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/internal/testutil"
	"github.com/jiocloud/orchestrate/reaper"
	"github.com/jiocloud/orchestrate/reaper/daemon"
	"github.com/jiocloud/orchestrate/reaper/nova"
	"github.com/jiocloud/orchestrate/reaper/simcloud"
)

// novaEnv is one e2e test's world: a project in the real Nova, a Consul
// agent, and the machines the test plays.
type novaEnv struct {
	t       *testing.T
	cloud   *novatest.Cloud
	compute *gophercloud.ServiceClient
	agent   *consultest.Agent
	nova    *nova.Nova
	m       *machines
}

func startNova(t *testing.T, viaCloudsYAML bool) *novaEnv {
	cloud := novatest.Start(t)
	agent := consultest.Start(t, consultest.Options{HCL: agentHCL})
	env := map[string]string{}
	cc := reaper.CloudConfig{}
	if viaCloudsYAML {
		// OS_CLOUD-style: a clouds.yaml entry.
		cc.Name, cc.CloudsFile = cloud.CloudName, cloud.CloudsYAML
	} else {
		// OS_* variables, as an openrc file sets them.
		for _, kv := range cloud.Env {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Each test's credentials go in directly, not through the process
	// environment, so the tests run in parallel.
	nova, err := nova.NewNovaWithEnv(ctx, cc, func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("connect the reaper to Nova: %v", err)
	}
	e := &novaEnv{t: t, cloud: cloud, compute: cloud.Compute(t), agent: agent, nova: nova}
	t.Cleanup(func() {
		if t.Failed() {
			if p, _, err := agent.Client.KV().Get(daemon.StateKey(prefix), nil); err == nil && p != nil {
				t.Logf("reaper state at failure: %s", p.Value)
			}
		}
	})
	e.m = &machines{e: e, registered: map[string]bool{}}
	mctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.m.run(mctx) }()
	t.Cleanup(func() { stop(); <-done })
	return e
}

func (e *novaEnv) config(extra string) *reaper.Config {
	text := `
dry_run: false
prefix: ` + prefix + `
interval: 500ms
session_ttl: 2s
lock_delay: 1s
listen: ""
drain_period: 1s
cloud_timeout: 60s
quota_backoff: 1m
roles:
  - name: web
    desired: 3
    boot_grace: 1s
    critical_grace: 1s
    boot_timeout: 30s
    boot:
      flavor: ` + e.cloud.Flavor + `
      image: ` + e.cloud.Image + `
      networks: [none]
      name_template: "web{n}"
      tags: [orchestrate-e2e]
` + extra
	c, err := reaper.ParseConfig(strings.NewReader(text))
	if err != nil {
		e.t.Fatal(err)
	}
	if err := daemon.CheckConfig(c); err != nil {
		e.t.Fatal(err)
	}
	return c
}

// machines plays the booted machines: each ACTIVE server of the role gets a
// Consul node once, passing.
type machines struct {
	e *novaEnv
	// mu guards registered.
	mu         sync.Mutex
	registered map[string]bool // server ID
}

func (m *machines) run(ctx context.Context) {
	for ctx.Err() == nil {
		lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		ss, err := m.e.cloud.ListServers(lctx, m.e.compute)
		cancel()
		if err == nil {
			for _, s := range ss {
				m.mu.Lock()
				seen := m.registered[s.ID]
				m.mu.Unlock()
				if seen || s.Status != "ACTIVE" || s.Metadata[reaper.MetaRole] != "web" {
					continue
				}
				if err := simcloud.RegisterNode(ctx, m.e.agent.Client, s.Name, "web", api.HealthPassing); err == nil {
					m.mu.Lock()
					m.registered[s.ID] = true
					m.mu.Unlock()
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// servers lists the project's servers by name.
func (e *novaEnv) servers() map[string]servers.Server {
	var ss []servers.Server
	var err error
	for attempt := 0; attempt < 5; attempt++ { // ride out a busy nova-api
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		ss, err = e.cloud.ListServers(ctx, e.compute)
		cancel()
		if err == nil {
			break
		}
		time.Sleep(time.Second)
	}
	if err != nil {
		e.t.Fatalf("list servers: %v", err)
	}
	out := map[string]servers.Server{}
	for _, s := range ss {
		out[s.Name] = s
	}
	return out
}

func serverNames(m map[string]servers.Server) string {
	var out []string
	for n, s := range m {
		out = append(out, n+":"+s.Status)
	}
	return strings.Join(sortStrings(out), ",")
}

func sortStrings(s []string) []string {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	return s
}

// countingCloud counts creates on the way to the real Nova.
type countingCloud struct {
	reaper.Cloud
	creates atomic.Int64
}

func (c *countingCloud) Create(ctx context.Context, req reaper.CreateRequest) (reaper.Server, error) {
	c.creates.Add(1)
	return c.Cloud.Create(ctx, req)
}

// runReaper runs a reaper until it is stopped (or the test ends); hook,
// if not nil, is called after each action.
func (e *novaEnv) runReaper(cfg *reaper.Config, cloud reaper.Cloud, hook func(x *running, a reaper.Action)) *running {
	return startReaper(e.t, cfg, e.agent.Client, cloud, hook)
}

// buildRole lets the reaper create the role of 3 (creates are allowed
// before the start gate opens), then arms it.
func (e *novaEnv) buildRole(t *testing.T) map[string]servers.Server {
	var ss map[string]servers.Server
	testutil.Eventually(t, 90*time.Second, "the reaper to build web1..web3, ACTIVE, checked in", func() bool {
		ss = map[string]servers.Server{}
		for n, s := range e.servers() {
			if s.Metadata[reaper.MetaRole] == "web" {
				ss[n] = s
			}
		}
		if len(ss) != 3 {
			return false
		}
		for _, n := range []string{"web1", "web2", "web3"} {
			if ss[n].Status != "ACTIVE" || !catalogHas(t, e.agent.Client, n) {
				return false
			}
		}
		return len(journalKeys(t, e.agent.Client)) == 0
	})
	arm(t, e.agent.Client)
	return ss
}

// A role of 3; one node's checks go critical; the reaper replaces it: a new
// ACTIVE server, the old one deleted from Nova, its node deregistered.
func TestNovaReplacesCriticalNode(t *testing.T) {
	t.Parallel()
	e := startNova(t, false)
	counting := &countingCloud{Cloud: e.nova}
	cfg := e.config("")
	e.runReaper(cfg, counting, nil)
	before := e.buildRole(t)
	// Nova keeps the boot spec each server was built from.
	for n, s := range before {
		if got := s.Metadata[reaper.MetaSpec]; got != cfg.Roles[0].Boot.Digest() {
			t.Fatalf("%s in Nova records spec %q, want the role's %q", n, got, cfg.Roles[0].Boot.Digest())
		}
	}
	setCritical(t, e.agent.Client, "web2")
	var after map[string]servers.Server
	testutil.Eventually(t, 90*time.Second, "web2 replaced", func() bool {
		after = e.servers()
		_, old := after["web2"]
		return !old && len(after) == 3 && after["web4"].Status == "ACTIVE" &&
			!catalogHas(t, e.agent.Client, "web2") && len(journalKeys(t, e.agent.Client)) == 0
	})
	if after["web1"].ID != before["web1"].ID || after["web3"].ID != before["web3"].ID {
		t.Fatalf("healthy servers were touched: before %s, after %s", serverNames(before), serverNames(after))
	}
	if md := after["web4"].Metadata; md[reaper.MetaRole] != "web" || md[reaper.MetaJournal] == "" {
		t.Fatalf("the replacement's metadata = %v, want role and journal entry", md)
	}
	if n := counting.creates.Load(); n != 4 {
		t.Fatalf("%d creates, want 4 (3 to build, 1 replacement)", n)
	}
	// Nova has really deleted it.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := servers.Get(ctx, e.compute, before["web2"].ID).Extract(); !gophercloud.ResponseCodeIs(err, 404) {
		t.Fatalf("old web2 still answers: %v", err)
	}
}

// A quota of 4 instances, used up by the role of 3 and one server outside
// any role: the surge create fails with Nova's 403, cleanly: reported in
// the state, nothing deleted, the unassigned server left alone.
func TestNovaQuotaSurgeFailsCleanly(t *testing.T) {
	t.Parallel()
	e := startNova(t, true)
	e.cloud.SetInstanceQuota(t, 4)
	bastion := e.cloud.CreateServer(t, "bastion", map[string]string{"purpose": "not a role"})
	r := e.runReaper(e.config(""), e.nova, nil)
	before := e.buildRole(t)
	setCritical(t, e.agent.Client, "web3")
	var st *reaperkv.ReaperReport
	testutil.Eventually(t, 60*time.Second, "the quota error reported", func() bool {
		st, _ = readReport(e.agent.Client)
		return st != nil && !st.BackoffUntil.IsZero()
	})
	if !strings.Contains(st.BackoffReason, "Quota exceeded") {
		t.Fatalf("backoff reason %q does not carry Nova's quota message", st.BackoffReason)
	}
	waitCycles(t, 4, r) // a few more cycles: still nothing may happen
	after := e.servers()
	if len(after) != 4 || after["bastion"].ID != bastion.ID {
		t.Fatalf("servers after the quota error: %s", serverNames(after))
	}
	for _, n := range []string{"web1", "web2", "web3"} {
		if after[n].ID != before[n].ID {
			t.Fatalf("%s was replaced or deleted during the quota backoff", n)
		}
	}
	if !catalogHas(t, e.agent.Client, "web3") || len(journalKeys(t, e.agent.Client)) != 0 {
		t.Fatal("the failed surge left a drained node or a journal entry")
	}
	if st, _ = readReport(e.agent.Client); st.Unassigned != 1 {
		t.Fatalf("state counts %d unassigned servers, want the bastion", st.Unassigned)
	}
}

// Max age: once the role is fully healthy, one server at a time is
// replaced for age, and never more than one surge server exists.
func TestNovaMaxAgeReplacement(t *testing.T) {
	t.Parallel()
	e := startNova(t, false)
	// Jitter spreads the three expiries over the last 10s of the 35s.
	// The test's machines run no drain handler: without on_drain_timeout
	// delete, every retirement's drain would be aborted at its timeout.
	cfg := e.config("    max_age: 35s\n    max_age_jitter: 10s\n    on_drain_timeout: delete\n")
	e.runReaper(cfg, e.nova, nil)
	before := e.buildRole(t)
	replaced := ""
	testutil.Eventually(t, 150*time.Second, "one server replaced for age", func() bool {
		ss := e.servers()
		if len(ss) > 4 {
			t.Fatalf("%d servers at once: more than one max-age replacement in flight (%s)", len(ss), serverNames(ss))
		}
		if keys := journalKeys(t, e.agent.Client); len(keys) > 1 {
			t.Fatalf("%d journal entries at once: %v", len(keys), keys)
		}
		if len(ss) != 3 || ss["web4"].Status != "ACTIVE" {
			return false
		}
		for n := range before {
			if _, ok := ss[n]; !ok {
				replaced = n
				if catalogHas(t, e.agent.Client, n) {
					return false
				}
			}
		}
		return replaced != ""
	})
	t.Logf("replaced for age: %s", replaced)
}

// A leader killed between the replacement's create and the old server's
// delete: the next leader finishes the job from the journal, without a
// second create.
func TestNovaJournalRecoveryAfterKill(t *testing.T) {
	t.Parallel()
	e := startNova(t, false)
	counting := &countingCloud{Cloud: e.nova}
	cfg := e.config("")
	var killedAt atomic.Bool
	r1 := e.runReaper(cfg, counting, func(x *running, a reaper.Action) {
		if a.Op == reaper.OpCreate && a.Entry.Kind == reaperkv.KindReplace {
			killedAt.Store(true)
			x.kill()
		}
	})
	before := e.buildRole(t)
	setCritical(t, e.agent.Client, "web1")
	testutil.Eventually(t, 60*time.Second, "the first leader to die after the create", killedAt.Load)
	r1.stop()
	if n := counting.creates.Load(); n != 4 {
		t.Fatalf("%d creates before the kill, want 4", n)
	}
	mid := e.servers()
	if len(mid) != 4 || mid["web1"].ID != before["web1"].ID {
		t.Fatalf("after the kill: %s, want the surge of four with web1 still there", serverNames(mid))
	}
	if keys := journalKeys(t, e.agent.Client); len(keys) != 1 {
		t.Fatalf("journal after the kill: %v, want the replacement's entry", keys)
	}
	e.runReaper(cfg, counting, nil)
	testutil.Eventually(t, 90*time.Second, "the second leader to finish the replacement", func() bool {
		ss := e.servers()
		_, old := ss["web1"]
		return !old && len(ss) == 3 && ss["web4"].Status == "ACTIVE" &&
			!catalogHas(t, e.agent.Client, "web1") && len(journalKeys(t, e.agent.Client)) == 0
	})
	if n := counting.creates.Load(); n != 4 {
		t.Fatalf("%d creates in all, want 4: the second leader created again", n)
	}
}

// An image rotated under the same name (the old one deleted, a new one
// uploaded): the next create boots the new image; the name is resolved
// afresh for every create, never from an ID cached before the rotation.
func TestNovaImageRotation(t *testing.T) {
	t.Parallel()
	e := startNova(t, false)
	name := "rotating-" + e.cloud.ProjectName
	oldID := e.cloud.CreateImage(t, name)
	cfg := e.config("")
	cfg.Roles[0].Boot.Image = name
	e.runReaper(cfg, e.nova, nil)
	before := e.buildRole(t)
	for n, s := range before {
		if s.Image["id"] != oldID {
			t.Fatalf("%s boots image %v, want %s", n, s.Image["id"], oldID)
		}
	}
	e.cloud.DeleteImage(t, oldID)
	newID := e.cloud.CreateImage(t, name)
	setCritical(t, e.agent.Client, "web2")
	var after map[string]servers.Server
	testutil.Eventually(t, 90*time.Second, "web2 replaced from the rotated image", func() bool {
		after = e.servers()
		_, old := after["web2"]
		return !old && len(after) == 3 && after["web4"].Status == "ACTIVE" && len(journalKeys(t, e.agent.Client)) == 0
	})
	if got := after["web4"].Image["id"]; got != newID {
		t.Fatalf("the replacement boots image %v, want the rotated one %s", got, newID)
	}
}

// A delete Nova refuses (a locked server: 409) is reported in the state,
// retried with backoff, and done once the server is unlocked; the
// replacement serves meanwhile and nothing else is deleted.
func TestNovaRefusedDelete(t *testing.T) {
	t.Parallel()
	e := startNova(t, false)
	cfg := e.config("")
	cfg.QuotaBackoff, cfg.QuotaBackoffMax = reaper.Duration(time.Second), reaper.Duration(2*time.Second)
	e.runReaper(cfg, e.nova, nil)
	before := e.buildRole(t)
	e.cloud.Lock(t, before["web2"].ID)
	setCritical(t, e.agent.Client, "web2")
	testutil.Eventually(t, 90*time.Second, "the refused delete of web2 in the state, its replacement serving", func() bool {
		return strings.Contains(blocked(e.agent.Client), "the cloud refused or did not carry out the delete of web2") &&
			e.servers()["web4"].Status == "ACTIVE"
	})
	if got := e.servers(); got["web2"].ID != before["web2"].ID || got["web1"].ID != before["web1"].ID || got["web3"].ID != before["web3"].ID {
		t.Fatalf("servers while web2 is locked: %s", serverNames(got))
	}
	e.cloud.Unlock(t, before["web2"].ID)
	testutil.Eventually(t, 60*time.Second, "web2 deleted once unlocked", func() bool {
		ss := e.servers()
		_, old := ss["web2"]
		return !old && len(ss) == 3 && !catalogHas(t, e.agent.Client, "web2") && len(journalKeys(t, e.agent.Client)) == 0
	})
}

// A server whose cell Nova cannot reach: at microversion 2.69 the reaper's
// list holds it as a partial record (status UNKNOWN, no name), the reaper
// pauses, and a server critical past its grace is not replaced until the
// cell answers again.
func TestNovaPartialRecordHoldsDestruction(t *testing.T) {
	t.Parallel()
	e := startNova(t, false)
	e.runReaper(e.config(""), e.nova, nil)
	before := e.buildRole(t)
	restore := e.cloud.MoveToDownCell(t, before["web1"].ID)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	listed, err := e.nova.List(ctx)
	cancel()
	if err != nil {
		t.Fatalf("list with a cell down: %v", err)
	}
	partial := 0
	for _, s := range listed {
		if s.Partial() {
			partial++
			if s.ID != before["web1"].ID || s.Status != reaper.StatusUnknown {
				t.Fatalf("partial record %+v, want web1's ID in status UNKNOWN", s)
			}
		}
	}
	if partial != 1 {
		t.Fatalf("%d partial records in %+v, want web1's", partial, listed)
	}
	setCritical(t, e.agent.Client, "web2")
	testutil.Eventually(t, 30*time.Second, "the pause to name the partial record", func() bool {
		rep, _ := readReport(e.agent.Client)
		return rep != nil && rep.Paused && strings.Contains(rep.PauseReason, "partial records")
	})
	time.Sleep(3 * time.Second) // six cycles, past critical_grace
	if got := e.servers(); len(got) != 3 || got["web2"].ID != before["web2"].ID || hasMaintenance(t, e.agent.Client, "web2") {
		t.Fatalf("with a partial record listed: servers %s, web2 drained %v; want nothing touched", serverNames(got), hasMaintenance(t, e.agent.Client, "web2"))
	}
	restore()
	testutil.Eventually(t, 90*time.Second, "web2 replaced once the cell answers", func() bool {
		ss := e.servers()
		_, old := ss["web2"]
		return !old && len(ss) == 3 && ss["web4"].Status == "ACTIVE" && len(journalKeys(t, e.agent.Client)) == 0
	})
}

// A warm pool of 2 stopped standbys on the real Nova (its fake driver
// stops and starts servers): a replacement claims one and starts it, the
// pool refills, and `orchestrate pool flush` rebuilds both standbys.
func TestNovaWarmPoolStopped(t *testing.T) {
	t.Parallel()
	e := startNova(t, false)
	cfg := e.config("    warm_pool: {size: 2, state: stopped}\n")
	var mu sync.Mutex
	claimed := map[string]bool{} // standby IDs claimed
	e.runReaper(cfg, e.nova, func(_ *running, a reaper.Action) {
		if a.Op == reaper.OpClaim {
			mu.Lock()
			claimed[a.Entry.NewID] = true
			mu.Unlock()
		}
	})
	// The role is built first (the pool never refills while a role
	// needs a server); buildRole would count the standbys as members.
	testutil.Eventually(t, 90*time.Second, "web1..web3 ACTIVE, checked in", func() bool {
		ss := e.servers()
		for _, n := range []string{"web1", "web2", "web3"} {
			if ss[n].Status != "ACTIVE" || ss[n].Metadata[reaper.MetaStandby] != "" || !catalogHas(t, e.agent.Client, n) {
				return false
			}
		}
		return true
	})
	arm(t, e.agent.Client)
	// standbys are the role's servers with the standby mark, by name.
	standbys := func() map[string]servers.Server {
		out := map[string]servers.Server{}
		for n, s := range e.servers() {
			if _, ok := s.Metadata[reaper.MetaStandby]; ok && s.Metadata[reaper.MetaRole] == "web" {
				out[n] = s
			}
		}
		return out
	}
	stoppedPool := func() map[string]servers.Server {
		ss := standbys()
		for _, s := range ss {
			if s.Status != "SHUTOFF" {
				return nil
			}
		}
		if len(ss) != 2 {
			return nil
		}
		return ss
	}
	var pool map[string]servers.Server
	testutil.Eventually(t, 120*time.Second, "two stopped standbys", func() bool { pool = stoppedPool(); return pool != nil })
	// By its ID: once web2 is deleted, the refill may give its name to a
	// new standby.
	web2 := e.servers()["web2"].ID
	setCritical(t, e.agent.Client, "web2")
	var started string
	testutil.Eventually(t, 90*time.Second, "web2 replaced by a standby, started", func() bool {
		ss := e.servers()
		for _, s := range ss {
			if s.ID == web2 {
				return false
			}
		}
		if len(journalKeys(t, e.agent.Client)) != 0 {
			return false
		}
		for n, s := range pool {
			if now, ok := ss[n]; ok && now.ID == s.ID && now.Status == "ACTIVE" && now.Metadata[reaper.MetaStandby] == "" {
				started = n
			}
		}
		return started != ""
	})
	mu.Lock()
	n := len(claimed)
	mu.Unlock()
	if n != 1 {
		t.Fatalf("%d standbys claimed for one replacement", n)
	}
	testutil.Eventually(t, 120*time.Second, "the pool refilled and stopped", func() bool { pool = stoppedPool(); return pool != nil })
	var out, errOut strings.Builder
	args := []string{"pool", "flush", "web", "--yes", "--consul-addr", e.agent.HTTPAddr, "--prefix", prefix, "--log-level", "warn"}
	if code := orchestrate.Run(context.Background(), args, orchestrate.IO{Stdout: &out, Stderr: &errOut}); code != 0 {
		t.Fatalf("orchestrate pool flush: exit %d: %s", code, errOut.String())
	}
	old := pool
	testutil.Eventually(t, 180*time.Second, "both standbys rebuilt and stopped", func() bool {
		pool = stoppedPool()
		if pool == nil {
			return false
		}
		for _, s := range pool {
			for _, o := range old {
				if s.ID == o.ID {
					return false
				}
			}
		}
		p, _, err := e.agent.Client.KV().Get(reaperkv.PoolFlushKey(prefix, "web"), nil)
		return err == nil && p == nil
	})
	members := 0
	for _, s := range e.servers() {
		if _, standby := s.Metadata[reaper.MetaStandby]; !standby && s.Metadata[reaper.MetaRole] == "web" && s.Status == "ACTIVE" {
			members++
		}
	}
	if members != 3 {
		t.Fatalf("%d members after the flush, want 3: %s", members, serverNames(e.servers()))
	}
}

// An instance refresh on the real Nova: a role of 3 built from one image;
// the configuration names a new one; `orchestrate refresh web
// --min-healthy-percent 33` (with max_in_flight 2: batches of 2) rebuilds
// every server from it, never more than 5 servers at once and never fewer
// than 3 passing; `orchestrate refresh web --rollback` rebuilds them from
// the first image and pins the role there.
func TestNovaRefreshAndRollback(t *testing.T) {
	t.Parallel()
	e := startNova(t, false)
	oldName, newName := "refresh-a-"+e.cloud.ProjectName, "refresh-b-"+e.cloud.ProjectName
	oldID, newID := e.cloud.CreateImage(t, oldName), e.cloud.CreateImage(t, newName)
	// The test's machines run no drain handler: without on_drain_timeout
	// delete, every refresh drain would be aborted at its timeout.
	cfg := e.config("    on_drain_timeout: delete\nmax_in_flight: 2\n")
	cfg.Roles[0].Boot.Image = oldName
	r := e.runReaper(cfg, e.nova, nil)
	e.buildRole(t)
	r.stop()

	cfg = e.config("    on_drain_timeout: delete\nmax_in_flight: 2\n")
	cfg.Roles[0].Boot.Image = newName
	e.runReaper(cfg, e.nova, nil)
	cli := func(args ...string) {
		t.Helper()
		var out, errOut strings.Builder
		args = append(args, "--consul-addr", e.agent.HTTPAddr, "--prefix", prefix, "--log-level", "warn")
		testutil.Eventually(t, 20*time.Second, "the reaper to report the role", func() bool {
			st, _ := readReport(e.agent.Client)
			return st != nil && len(st.Roles) > 0
		})
		if code := orchestrate.Run(context.Background(), args, orchestrate.IO{Stdout: &out, Stderr: &errOut}); code != 0 {
			t.Fatalf("orchestrate %s: exit %d: %s", strings.Join(args, " "), code, errOut.String())
		}
	}
	roll := func(what, image string, wantState string) {
		t.Helper()
		var most, least atomic.Int64
		least.Store(3)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() { // the role's servers and passing nodes, sampled while it rolls
			for ctx.Err() == nil {
				if ss, err := e.cloud.ListServers(ctx, e.compute); err == nil && int64(len(ss)) > most.Load() {
					most.Store(int64(len(ss)))
				}
				if entries, _, err := e.agent.Client.Health().Service("web", "", true, nil); err == nil && int64(len(entries)) < least.Load() {
					least.Store(int64(len(entries)))
				}
				time.Sleep(100 * time.Millisecond) // the sampling interval
			}
		}()
		testutil.Eventually(t, 240*time.Second, what, func() bool {
			ss := e.servers()
			if len(ss) != 3 || len(journalKeys(t, e.agent.Client)) != 0 {
				return false
			}
			for _, s := range ss {
				if s.Image["id"] != image || s.Status != "ACTIVE" {
					return false
				}
			}
			recs, _, _ := e.agent.Client.KV().Keys(prefix+"/reaper/refresh/", "", nil)
			if wantState == "" {
				return len(recs) == 0
			}
			st, _ := readReport(e.agent.Client)
			return len(recs) == 1 && st != nil && st.Roles[0].Refresh != nil && st.Roles[0].Refresh.State == wantState
		})
		cancel()
		if m := most.Load(); m > 5 {
			t.Fatalf("%s: %d servers at once, want at most 3 + a batch of 2", what, m)
		}
		if l := least.Load(); l < 3 {
			t.Fatalf("%s: %d passing at one time, want never below 3 (create-first)", what, l)
		}
		t.Logf("%s: at most %d servers at once, at least %d passing", what, most.Load(), least.Load())
	}
	// Drift detection on the real Nova: the spec recorded in each server's
	// metadata is the old one; nothing is replaced for drift alone.
	testutil.Eventually(t, 30*time.Second, "the role reported drifted: 3 of 3", func() bool {
		st, _ := readReport(e.agent.Client)
		return st != nil && len(st.Roles) > 0 && st.Roles[0].Drifted == 3 && st.Roles[0].Spec == cfg.Roles[0].Boot.Digest()
	})
	if keys := journalKeys(t, e.agent.Client); len(keys) != 0 {
		t.Fatalf("journal %v before any request: drift alone replaces nothing", keys)
	}
	cli("refresh", "web", "--min-healthy-percent", "33", "--reason", "new image", "--yes")
	roll("every server rebuilt from the new image, the request removed", newID, "")
	cli("refresh", "web", "--rollback", "--min-healthy-percent", "33", "--yes")
	roll("every server rebuilt from the first image, the role pinned", oldID, reaperkv.RefreshPinned)
}

// roleServers are the project's servers of role web, by name.
func (e *novaEnv) roleServers() map[string]servers.Server {
	out := map[string]servers.Server{}
	for n, s := range e.servers() {
		if s.Metadata[reaper.MetaRole] == "web" {
			out[n] = s
		}
	}
	return out
}

// settledIn: role web has n ACTIVE servers, each checked in, nothing in
// flight; it returns them.
func (e *novaEnv) settledIn(t *testing.T, n int) (map[string]servers.Server, bool) {
	ss := e.roleServers()
	if len(ss) != n {
		return ss, false
	}
	for name, s := range ss {
		if s.Status != "ACTIVE" || !catalogHas(t, e.agent.Client, name) {
			return ss, false
		}
	}
	return ss, len(journalKeys(t, e.agent.Client)) == 0
}

// zoneCounts counts servers by Nova's OS-EXT-AZ zone, as "z1:2 z2:1" in
// the order of zones.
func zoneCounts(ss map[string]servers.Server, zones []string) string {
	n := map[string]int{}
	for _, s := range ss {
		n[s.AvailabilityZone]++
	}
	var out []string
	for _, z := range zones {
		out = append(out, fmt.Sprintf("%s:%d", z, n[z]))
		delete(n, z)
	}
	for z, c := range n {
		out = append(out, fmt.Sprintf("%s:%d (not the role's)", z, c))
	}
	return strings.Join(out, " ")
}

// sameMembers reports whether group's members are exactly ss's servers
// plus extra IDs.
func sameMembers(members []string, ss map[string]servers.Server, extra ...string) bool {
	want := map[string]bool{}
	for _, s := range ss {
		want[s.ID] = true
	}
	for _, id := range extra {
		want[id] = true
	}
	if len(members) != len(want) {
		return false
	}
	for _, id := range members {
		if !want[id] {
			return false
		}
	}
	return true
}

// A role of 3 over the cloud's three zones (one compute host each) is
// built one server per zone, every server in the role's server group
// (soft-anti-affinity, made by the reaper, recorded in KV). With the
// record lost, the role scaled to 5 goes 2, 2, 1, the new servers in the
// same group (found by its name); scaled in to 3, one server per zone
// again.
func TestNovaPlacementZonesAndServerGroup(t *testing.T) {
	t.Parallel()
	e := startNova(t, false)
	zones := e.cloud.Zones(t)
	cfg := e.config("    availability_zones: [" + strings.Join(zones, ", ") + "]\n    on_drain_timeout: delete\n")
	e.runReaper(cfg, e.nova, nil)
	built := e.buildRole(t)
	if got := zoneCounts(built, zones); got != fmt.Sprintf("%s:1 %s:1 %s:1", zones[0], zones[1], zones[2]) {
		t.Fatalf("zones of the role of 3: %s, want one each", got)
	}
	rec, _ := groupRecord(t, e.agent.Client)
	g := e.cloud.ServerGroup(t, rec.ID)
	if g == nil || g.Name != "reaper-web" || g.Policy == nil || *g.Policy != reaper.PolicySoftAntiAffinity || !sameMembers(g.Members, built) {
		t.Fatalf("record %+v, Nova's group %+v: want reaper-web, soft-anti-affinity, the role's 3 servers", rec, g)
	}
	hosts := map[string]bool{}
	for _, s := range built {
		hosts[e.cloud.ServerHost(t, s.ID)] = true
	}
	if len(hosts) != 3 {
		t.Fatalf("the role of 3 runs on hosts %v, want three", hosts)
	}

	if _, err := e.agent.Client.KV().Delete(reaperkv.ServerGroupKey(prefix, "web"), nil); err != nil {
		t.Fatal(err)
	}
	setDesired(t, e.agent.Client, 5)
	var ss map[string]servers.Server
	testutil.Eventually(t, 90*time.Second, "the role scaled out to 5", func() bool { var ok bool; ss, ok = e.settledIn(t, 5); return ok })
	if got := zoneCounts(ss, zones); got != fmt.Sprintf("%s:2 %s:2 %s:1", zones[0], zones[1], zones[2]) {
		t.Fatalf("zones of the role of 5: %s", got)
	}
	if gs := e.cloud.ServerGroups(t); len(gs) != 1 || gs[0].ID != g.ID || !sameMembers(gs[0].Members, ss) {
		t.Fatalf("server groups %+v: want only %s, holding the 5", gs, g.ID)
	}
	if again, _ := groupRecord(t, e.agent.Client); again.ID != g.ID {
		t.Fatalf("record after it was lost: %+v, want %s again", again, g.ID)
	}

	setDesired(t, e.agent.Client, 3)
	testutil.Eventually(t, 120*time.Second, "the role scaled in to 3", func() bool { var ok bool; ss, ok = e.settledIn(t, 3); return ok })
	if got := zoneCounts(ss, zones); got != fmt.Sprintf("%s:1 %s:1 %s:1", zones[0], zones[1], zones[2]) {
		t.Fatalf("zones after the scale-in: %s, want one each", got)
	}
}

// A zone whose one host Nova cannot use for the role (hard anti-affinity:
// the group, made by hand, already has a server there) answers the
// reaper's create there with ERROR "No valid host": the server is rolled
// back, that zone alone is backed off (in the report), and the role is
// built in the other zones, each server on a host of its own, in the
// adopted group.
func TestNovaZoneRefusingCreatesIsSkipped(t *testing.T) {
	t.Parallel()
	e := startNova(t, false)
	zones := e.cloud.Zones(t)
	group := e.cloud.CreateServerGroup(t, "reaper-web", reaper.PolicyAntiAffinity)
	blocker := e.cloud.CreateServerIn(t, "blocker", zones[1], group.ID)
	cfg := e.config("    availability_zones: [" + strings.Join(zones, ", ") + "]\n    anti_affinity: hard\n")
	cfg.Roles[0].Desired = 2
	e.runReaper(cfg, e.nova, nil)
	var ss map[string]servers.Server
	testutil.Eventually(t, 90*time.Second, "the role of 2 built outside "+zones[1], func() bool {
		var ok bool
		ss, ok = e.settledIn(t, 2)
		return ok && len(e.servers()) == 3
	})
	if got := zoneCounts(ss, zones); got != fmt.Sprintf("%s:1 %s:0 %s:1", zones[0], zones[1], zones[2]) {
		t.Fatalf("zones: %s, want none in %s", got, zones[1])
	}
	st, err := readReport(e.agent.Client)
	if err != nil || st == nil {
		t.Fatalf("report: %v", err)
	}
	b := st.Roles[0].Placement.ZoneBackoff[zones[1]]
	if !strings.Contains(b.Reason, "No valid host") || len(st.RoleBackoff) != 0 || !st.BackoffUntil.IsZero() {
		t.Fatalf("zone backoff %+v, role backoff %v, quota backoff %v: want %s's alone, with Nova's fault", st.Roles[0].Placement.ZoneBackoff, st.RoleBackoff, st.BackoffUntil, zones[1])
	}
	if rec, _ := groupRecord(t, e.agent.Client); rec.ID != group.ID || rec.Policy != reaper.PolicyAntiAffinity {
		t.Fatalf("record %+v, want the hand-made group %s adopted", rec, group.ID)
	}
	g := e.cloud.ServerGroup(t, group.ID)
	if gs := e.cloud.ServerGroups(t); len(gs) != 1 || g == nil || !sameMembers(g.Members, ss, blocker.ID) {
		t.Fatalf("groups %+v: want the one group, holding the role and the blocker", gs)
	}
	hosts := map[string]bool{e.cloud.ServerHost(t, blocker.ID): true}
	for _, s := range ss {
		hosts[e.cloud.ServerHost(t, s.ID)] = true
	}
	if len(hosts) != 3 {
		t.Fatalf("hosts %v: hard anti-affinity wants three", hosts)
	}
}
