package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/internal/store/schema"
	"github.com/jiocloud/orchestrate/internal/testutil"
	"github.com/jiocloud/orchestrate/reaper"
	"github.com/jiocloud/orchestrate/reaper/daemon"
	"github.com/jiocloud/orchestrate/reaper/simcloud"
	"golang.org/x/crypto/bcrypt"
)

// Scenarios of the rules that keep the reaper from destroying a machine
// that serves, on a real agent with the simulated cloud.

// deregisterNode removes a node from the catalog, as a wiped agent data
// dir or a node that vanishes for a moment does.
func deregisterNode(t *testing.T, c *api.Client, node string) {
	t.Helper()
	if _, err := c.Catalog().Deregister(&api.CatalogDeregistration{Node: node}, nil); err != nil {
		t.Fatal(err)
	}
}

func setPassing(t *testing.T, c *api.Client, node string) {
	t.Helper()
	if err := simcloud.RegisterNode(context.Background(), c, node, "web", api.HealthPassing); err != nil {
		t.Fatal(err)
	}
}

// Absence is not death: a passing node missing from the catalog for 400 ms
// (two cycles), with critical_grace 1s and so absent_grace 1s, is neither
// replaced nor deleted.
func TestCatalogBlipIsNotDeath(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.seed(3)
	f.arm()
	r := f.start(nil)
	testutil.Eventually(t, 5*time.Second, "reaper to lead", r.Leading)
	testutil.Eventually(t, 5*time.Second, "a cycle that saw web2 healthy", func() bool {
		st, _ := readReport(f.c)
		return st != nil && len(st.Roles) == 1 && st.Roles[0].Healthy == 3
	})
	deregisterNode(t, f.c, "web2")
	time.Sleep(400 * time.Millisecond)
	setPassing(t, f.c, "web2")
	// Ten cycles after it came back, nothing was created or deleted.
	time.Sleep(2 * time.Second)
	if n, d := f.sim.Creates.Load(), f.sim.Deletes.Load(); n != 0 || d != 0 {
		t.Fatalf("%d creates and %d deletes after a 400 ms catalog blip, want none", n, d)
	}
	if got := names(f.sim.Servers()); got != "web1,web2,web3" {
		t.Fatalf("servers = %s, want web1,web2,web3", got)
	}
}

// A server that comes back after its replacement was created, before the
// replacement serves: the replacement is rolled back, the server that came
// back is kept.
func TestReturningServerKeepsItsPlace(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	// Replacements boot but never check in (their Puppet run is long).
	f.sim.OnActive = nil
	f.seed(3)
	f.arm()
	r := f.start(nil)
	testutil.Eventually(t, 5*time.Second, "reaper to lead", r.Leading)
	deregisterNode(t, f.c, "web2")
	testutil.Eventually(t, 10*time.Second, "a replacement for web2 created after absent_grace", func() bool {
		return len(f.sim.Servers()) == 4
	})
	setPassing(t, f.c, "web2")
	testutil.Eventually(t, 10*time.Second, "the replacement rolled back", func() bool {
		return len(f.sim.Servers()) == 3 && len(journalKeys(t, f.c)) == 0
	})
	if got := names(f.sim.Servers()); got != "web1,web2,web3" {
		t.Fatalf("servers = %s, want web1,web2,web3 (web2 came back; its replacement goes)", got)
	}
}

// Look again before deleting: a server replaced for its health that passes
// again while it drains is taken out of maintenance and never deleted.
func TestDrainedServerPassingAgainIsKept(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.cfg.DrainPeriod = reaper.Duration(3 * time.Second)
	f.seed(3)
	f.arm()
	var drained atomic.Bool
	r := f.start(func(_ *running, a reaper.Action) {
		if a.Op == reaper.OpDrain && a.Entry.OldName == "web2" {
			drained.Store(true)
		}
	})
	testutil.Eventually(t, 5*time.Second, "reaper to lead", r.Leading)
	setCritical(t, f.c, "web2")
	testutil.Eventually(t, 15*time.Second, "web2 draining after its replacement checked in", drained.Load)
	setPassing(t, f.c, "web2")
	testutil.Eventually(t, 10*time.Second, "web2 restored", func() bool {
		return !hasMaintenance(t, f.c, "web2") && len(journalKeys(t, f.c)) == 0
	})
	// Past the drain period: web2 still there, never deleted.
	time.Sleep(3 * time.Second)
	for _, s := range f.sim.Servers() {
		if s.Name == "web2" {
			return
		}
	}
	t.Fatalf("web2 was deleted after it passed again; servers %s", names(f.sim.Servers()))
}

// The kill switch holds: a fleet that armed the reaper by itself (every
// role at its count with validation success), then disarmed by an
// operator, is not scaled in when its desired count drops, however
// complete it looks, until an explicit arm.
func TestDisarmHoldsInASteadyFleet(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.seed(3)
	ctx := context.Background()
	st, err := store.New(f.c, prefix)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"web1", "web2", "web3"} {
		if err := st.UpdateStatus(ctx, h, store.CategoryValidation, store.StateSuccess, store.StatusValue{Version: "v1"}); err != nil {
			t.Fatal(err)
		}
	}
	r := f.start(nil)
	testutil.Eventually(t, 5*time.Second, "the reaper to arm itself", func() bool {
		rep, _ := readReport(f.c)
		return r.Leading() && rep != nil && rep.Armed
	})
	if err := st.Disarm(ctx, reaperkv.ArmRecord{Time: time.Now(), By: "test", Reason: "maintenance window"}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, "a cycle that saw the disarm", func() bool {
		rep, _ := readReport(f.c)
		return rep != nil && !rep.Armed
	})
	if err := st.SetDesired(ctx, "web", 2); err != nil {
		t.Fatal(err)
	}
	waitCycles(t, 10, r)
	for _, h := range []string{"web1", "web2", "web3"} {
		if hasMaintenance(t, f.c, h) {
			t.Errorf("%s drained while disarmed", h)
		}
	}
	if d := f.sim.Deletes.Load(); d != 0 || len(f.sim.Servers()) != 3 {
		t.Fatalf("%d deletes while disarmed, servers %s", d, names(f.sim.Servers()))
	}
	rep, _ := readReport(f.c)
	if rep == nil || rep.Armed || !strings.Contains(rep.NotArmedReason, "disarmed") {
		t.Fatalf("report while disarmed: %+v", rep)
	}
	f.arm()
	testutil.Eventually(t, 15*time.Second, "the scale in after an explicit arm", func() bool {
		// The platform answers the drain (the scale-in's server serves:
		// without an answer its drain would be aborted at drain_timeout).
		for _, h := range []string{"web1", "web2", "web3"} {
			if _, err := st.AnswerDrain(ctx, h, schema.DrainAnswer{Time: time.Now(), By: "platform", Drained: true}); err != nil && !errors.Is(err, store.ErrNoDrain) {
				t.Fatal(err)
			}
		}
		return len(f.sim.Servers()) == 2 && len(journalKeys(t, f.c)) == 0
	})
}

// Serving means serving: a replacement whose agent merely joined (its
// node's check passes, the role's service is not registered yet: Puppet
// has not run) does not let the old server be drained; once the service
// is registered, but the role's servers report validation, not before it
// reports validation success for the current version.
func TestReplacementServesBeforeTheOldIsDrained(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	st, err := store.New(f.c, prefix)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SetCurrentVersion(ctx, "v2"); err != nil {
		t.Fatal(err)
	}
	// The agent of a new machine joins; Puppet has not run.
	f.sim.OnActive = func(s reaper.Server) {
		if err := simcloud.RegisterNode(ctx, f.c, s.Name, "", api.HealthPassing); err != nil {
			t.Errorf("register %s: %v", s.Name, err)
		}
	}
	f.seed(3)
	for _, h := range []string{"web1", "web2", "web3"} {
		if err := st.UpdateStatus(ctx, h, store.CategoryValidation, store.StateSuccess, store.StatusValue{Version: "v2"}); err != nil {
			t.Fatal(err)
		}
	}
	f.arm()
	r := f.start(nil)
	testutil.Eventually(t, 5*time.Second, "reaper to lead", r.Leading)
	setCritical(t, f.c, "web2")
	testutil.Eventually(t, 10*time.Second, "the replacement web4 created and its agent joined", func() bool {
		return len(f.sim.Servers()) == 4 && catalogHas(t, f.c, "web4")
	})
	drained := func() bool { return hasMaintenance(t, f.c, "web2") || f.sim.Deletes.Load() > 0 }
	waitCycles(t, 5, r)
	if drained() {
		t.Fatal("web2 drained while its replacement had only joined")
	}
	setPassing(t, f.c, "web4") // Puppet registered the service
	// A validation from the previous version does not count.
	if err := st.UpdateStatus(ctx, "web4", store.CategoryValidation, store.StateSuccess, store.StatusValue{Version: "v1"}); err != nil {
		t.Fatal(err)
	}
	waitCycles(t, 5, r)
	if drained() {
		t.Fatal("web2 drained before its replacement validated the current version")
	}
	if err := st.UpdateStatus(ctx, "web4", store.CategoryValidation, store.StateSuccess, store.StatusValue{Version: "v2"}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 15*time.Second, "web2 drained and deleted", func() bool {
		return !catalogHas(t, f.c, "web2") && len(f.sim.Servers()) == 3 && len(journalKeys(t, f.c)) == 0
	})
}

// Nova's word is not the whole truth: a server Nova puts in ERROR whose
// node passes its checks keeps serving and is not replaced within
// error_grace; once its checks fail it is replaced at once.
func TestNovaErrorWithPassingChecksIsNotReplaced(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.cfg.Roles[0].ErrorGrace = reaper.Duration(time.Minute)
	f.seed(3)
	f.arm()
	r := f.start(nil)
	testutil.Eventually(t, 5*time.Second, "reaper to lead", r.Leading)
	if !f.sim.SetStatus("web2", reaper.StatusError) {
		t.Fatal("no web2 in the cloud")
	}
	testutil.Eventually(t, 5*time.Second, "web2 reported error-in-grace", func() bool {
		rep, _ := readReport(f.c)
		return rep != nil && len(rep.Roles) == 1 && rep.Roles[0].States[reaperkv.ServerErrorInGrace] == 1
	})
	waitCycles(t, 5, r) // five more cycles
	if n := f.sim.Creates.Load(); n != 0 {
		t.Fatalf("%d creates for a server in ERROR whose node passes", n)
	}
	setCritical(t, f.c, "web2")
	testutil.Eventually(t, 15*time.Second, "web2 replaced once its checks failed", func() bool {
		return len(f.sim.Servers()) == 3 && !catalogHas(t, f.c, "web2") && len(journalKeys(t, f.c)) == 0
	})
}

// One server per journal entry: a create that timed out but made its
// server, which Nova lists only after the retry made another (and its
// entry finished): the second server of the entry is deleted, and nothing
// else of the role (the surplus is not scaled in from the fleet).
func TestLateCreateLeavesOneServer(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.seed(2) // desired 3: one create
	f.arm()
	f.sim.LateCreates(1, 1500*time.Millisecond)
	r := f.start(nil)
	testutil.Eventually(t, 5*time.Second, "reaper to lead", r.Leading)
	testutil.Eventually(t, 15*time.Second, "web3 made twice, and one of the two deleted", func() bool {
		return f.sim.Creates.Load() == 2 && len(f.sim.Servers()) == 3 && len(journalKeys(t, f.c)) == 0
	})
	// The duplicate's delete is asked again each cycle while Nova still
	// lists it; once it is gone, nothing else is deleted.
	d := f.sim.Deletes.Load()
	waitCycles(t, 5, r) // five more cycles
	if got, d2 := names(f.sim.Servers()), f.sim.Deletes.Load(); got != "web1,web2,web3" || d2 != d {
		t.Fatalf("servers = %s, deletes %d then %d; want web1,web2,web3 and no more deletes", got, d, d2)
	}
}

// slowCreates wraps a cloud whose creates hang until their context ends
// and then take unwind to return, as an HTTP call to a slow Nova does.
type slowCreates struct {
	reaper.Cloud
	unwind   time.Duration
	started  chan struct{}
	once     sync.Once
	returned atomic.Int64 // unix nanoseconds
}

func (s *slowCreates) Create(ctx context.Context, req reaper.CreateRequest) (reaper.Server, error) {
	s.once.Do(func() { close(s.started) })
	<-ctx.Done()
	time.Sleep(s.unwind)
	s.returned.Store(time.Now().UnixNano())
	return reaper.Server{}, &reaper.CloudError{Class: reaper.Transient, Op: "create server " + req.Name, Err: ctx.Err()}
}

// On a graceful stop the leader cancels its in-flight cloud calls and
// waits for them before it releases the lock, so a standby never acts
// while the old leader's request may still reach Nova.
func TestGracefulStopReleasesTheLockAfterCloudCalls(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	slow := &slowCreates{Cloud: f.sim, unwind: 300 * time.Millisecond, started: make(chan struct{})}
	f.cloud = slow
	f.seed(2) // desired 3: a create
	f.arm()
	r := f.start(nil)
	select {
	case <-slow.started:
	case <-time.After(10 * time.Second):
		t.Fatal("no create started")
	}
	// Watch the leader key from now on: when does no session hold it?
	var released atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for released.Load() == 0 {
			p, _, err := f.c.KV().Get(f.cfg.LeaderKey(), nil)
			if err == nil && (p == nil || p.Session == "") {
				released.Store(time.Now().UnixNano())
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	r.stop()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		released.Store(-1) // ends the poller
		t.Fatal("the leader lock was not released after a graceful stop")
	}
	if slow.returned.Load() == 0 {
		t.Fatal("the reaper stopped before its create call returned")
	}
	if released.Load() < slow.returned.Load() {
		t.Fatalf("lock released %v before the create returned", time.Duration(slow.returned.Load()-released.Load()))
	}
}

// /metrics off loopback is protected: with a Prometheus web configuration
// (here basic auth), a scrape without credentials is refused.
func TestMetricsBehindAWebConfig(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "web.yml")
	if err := os.WriteFile(path, []byte("basic_auth_users:\n  prometheus: "+string(hash)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f.cfg.Listen, f.cfg.WebConfigFile = "127.0.0.1:0", path
	if err := daemon.CheckConfig(f.cfg); err != nil {
		t.Fatal(err)
	}
	f.seed(3)
	r := f.start(nil)
	testutil.Eventually(t, 5*time.Second, "reaper to lead", r.Leading)
	var port int
	testutil.Eventually(t, 5*time.Second, "the reaper's service registered", func() bool {
		svcs, err := f.c.Agent().Services()
		for _, s := range svcs {
			if err == nil && s.Service == f.cfg.ServiceName {
				port = s.Port
			}
		}
		return port != 0
	})
	url := fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
	get := func(user, pass string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, _ := get("", ""); code != http.StatusUnauthorized {
		t.Fatalf("scrape without credentials: %d, want 401", code)
	}
	if code, _ := get("prometheus", "wrong"); code != http.StatusUnauthorized {
		t.Fatalf("scrape with a wrong password: %d, want 401", code)
	}
	if code, body := get("prometheus", "s3cret"); code != http.StatusOK || !strings.Contains(body, "reaper_leader 1") {
		t.Fatalf("scrape with credentials: %d\n%s", code, body)
	}
}

// A leader key written by hand (no lock's flags) keeps every copy from
// leading: the reaper's own check says so, with the command that clears
// it, instead of "standby"; once it is cleared, a copy leads.
func TestHandWrittenLeaderKeyIsReported(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	key := f.cfg.LeaderKey()
	if _, err := f.c.KV().Put(&api.KVPair{Key: key, Value: []byte("boot1")}, nil); err != nil {
		t.Fatal(err)
	}
	f.seed(3)
	r := f.start(nil)
	check := func() *api.AgentCheck {
		checks, err := f.c.Agent().Checks()
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range checks {
			if c.ServiceName == f.cfg.ServiceName {
				return c
			}
		}
		return nil
	}
	testutil.Eventually(t, 10*time.Second, "the check to name the hand-written key", func() bool {
		c := check()
		return c != nil && c.Status == api.HealthWarning && strings.Contains(c.Output, "consul kv delete "+key)
	})
	if r.Leading() {
		t.Fatal("a copy leads while the key is not a lock")
	}
	if _, err := f.c.KV().Delete(key, nil); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 15*time.Second, "a copy to lead once the key is cleared", r.Leading)
	testutil.Eventually(t, 10*time.Second, "the check to say leader", func() bool {
		c := check()
		return c != nil && c.Status == api.HealthPassing && strings.HasPrefix(c.Output, "leader")
	})
}

// Nothing stalls on a locked server: a delete the cloud refuses (409) is
// retried with backoff, reported in the state, and frees the role's
// in-flight slot, so another bad server of the role is replaced meanwhile.
func TestRefusedDeleteDoesNotHoldTheRole(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.cfg.Roles[0].Desired = 5
	f.cfg.QuotaBackoff, f.cfg.QuotaBackoffMax = reaper.Duration(500*time.Millisecond), reaper.Duration(2*time.Second)
	f.seed(5)
	f.arm()
	f.sim.FailDeletes(1000, &reaper.CloudError{Class: reaper.Conflict, Op: "delete server", Err: errors.New("409 Cannot 'delete' instance while it is locked")})
	r := f.start(nil)
	testutil.Eventually(t, 5*time.Second, "reaper to lead", r.Leading)
	setCritical(t, f.c, "web2")
	testutil.Eventually(t, 15*time.Second, "the refused delete of web2 in the state", func() bool {
		rep, _ := readReport(f.c)
		return rep != nil && strings.Contains(strings.Join(rep.Blocked, "\n"), "the cloud refused or did not carry out the delete of web2")
	})
	// Reported once: the retries after the backoff do not count again.
	time.Sleep(2 * time.Second) // past the first backoff steps (500 ms, 1 s)
	if m := scrape(t, r); !strings.Contains(m, `reaper_cloud_errors_total{class="conflict"} 1`+"\n") {
		t.Fatalf("metrics do not count web2's refused delete once:\n%s", m)
	}
	setCritical(t, f.c, "web3")
	testutil.Eventually(t, 15*time.Second, "web3 replaced while web2's delete is refused", func() bool {
		return f.sim.Creates.Load() == 2
	})
	f.sim.FailDeletes(0, nil)
	testutil.Eventually(t, 20*time.Second, "both deleted once the cloud accepts deletes", func() bool {
		return len(f.sim.Servers()) == 5 && !catalogHas(t, f.c, "web2") && !catalogHas(t, f.c, "web3") && len(journalKeys(t, f.c)) == 0
	})
}

// No cycle waits for one server to boot: while a new server is in BUILD,
// cycles go on (the state report keeps moving); when Nova puts it in
// ERROR, it is rolled back and the role's creates back off with Nova's
// fault as the reason.
func TestCyclesGoOnWhileAServerBoots(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.sim.BootDelay = time.Hour // stays in BUILD until the test decides
	f.seed(2)                   // desired 3: one create
	f.arm()
	r := f.start(nil)
	testutil.Eventually(t, 5*time.Second, "reaper to lead", r.Leading)
	testutil.Eventually(t, 5*time.Second, "web3 created", func() bool { return f.sim.Creates.Load() == 1 })
	created := time.Now()
	// The old executor waited cloud_timeout (5s here) for ACTIVE before the
	// cycle could end and write its report.
	testutil.Eventually(t, 2500*time.Millisecond, "a cycle's report after the create, web3 still in BUILD", func() bool {
		rep, _ := readReport(f.c)
		return rep != nil && rep.Time.After(created)
	})
	if !f.sim.FailBoot("web3", "No valid host was found. There are not enough hosts available.") {
		t.Fatal("no web3")
	}
	testutil.Eventually(t, 10*time.Second, "web3 rolled back and the role backed off", func() bool {
		rep, _ := readReport(f.c)
		return len(f.sim.Servers()) == 2 && rep != nil && strings.Contains(rep.RoleBackoff["web"].Reason, "No valid host")
	})
}

// Nothing stalls on a delete Nova accepts but never carries out: no cycle
// waits for it (the report keeps moving); past cloud_timeout it is asked
// again with backoff and frees the role's in-flight slot, so another bad
// server of the role is replaced meanwhile; once Nova deletes, the entry
// finishes.
func TestStuckDeleteDoesNotHoldTheRole(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.cfg.Roles[0].Desired = 5
	f.cfg.CloudTimeout = reaper.Duration(2 * time.Second)
	f.cfg.QuotaBackoff, f.cfg.QuotaBackoffMax = reaper.Duration(500*time.Millisecond), reaper.Duration(2*time.Second)
	f.seed(5)
	f.arm()
	f.sim.StuckDeletes(1000)
	r := f.start(nil)
	testutil.Eventually(t, 5*time.Second, "reaper to lead", r.Leading)
	setCritical(t, f.c, "web2")
	testutil.Eventually(t, 15*time.Second, "the accepted delete of web2 waited for in the state", func() bool {
		return strings.Contains(blocked(f.c), "Nova accepted the delete of web2")
	})
	asked := time.Now()
	testutil.Eventually(t, 2*time.Second, "a cycle's report while web2's delete is pending", func() bool {
		rep, _ := readReport(f.c)
		return rep != nil && rep.Time.After(asked)
	})
	testutil.Eventually(t, 15*time.Second, "the stalled delete of web2 reported after cloud_timeout", func() bool {
		return strings.Contains(blocked(f.c), "the cloud refused or did not carry out the delete of web2")
	})
	// Reported once: the backoff's later rounds do not count again.
	time.Sleep(3 * time.Second) // past the 2 s backoff cap: asked again at least once
	if m := scrape(t, r); !strings.Contains(m, `reaper_cloud_errors_total{class="stalled"} 1`+"\n") {
		t.Fatalf("metrics do not count the stalled delete once:\n%s", m)
	}
	setCritical(t, f.c, "web3")
	testutil.Eventually(t, 15*time.Second, "web3 replaced while web2's delete is stuck", func() bool {
		return f.sim.Creates.Load() == 2
	})
	f.sim.StuckDeletes(0)
	testutil.Eventually(t, 20*time.Second, "both deleted once Nova carries deletes out", func() bool {
		return len(f.sim.Servers()) == 5 && !catalogHas(t, f.c, "web2") && !catalogHas(t, f.c, "web3") && len(journalKeys(t, f.c)) == 0
	})
}

// A soft delete (reclaim_instance_interval set) is a delete: the server
// stays listed as SOFT_DELETED, the reaper counts it out of its role, the
// replacement finishes and nothing is created or deleted again for it.
func TestSoftDeletedServerIsGone(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.seed(3)
	f.arm()
	f.sim.SoftDeletes(1000)
	r := f.start(nil)
	testutil.Eventually(t, 5*time.Second, "reaper to lead", r.Leading)
	setCritical(t, f.c, "web2")
	testutil.Eventually(t, 15*time.Second, "web2 soft-deleted and the entry finished", func() bool {
		for _, s := range f.sim.Servers() {
			if s.Name == "web2" && s.Status != reaper.StatusSoftDeleted {
				return false
			}
		}
		return !catalogHas(t, f.c, "web2") && len(journalKeys(t, f.c)) == 0
	})
	creates, deletes := f.sim.Creates.Load(), f.sim.Deletes.Load()
	waitCycles(t, 10, r)
	if c, d := f.sim.Creates.Load(), f.sim.Deletes.Load(); c != creates || d != deletes || c != 1 {
		t.Fatalf("creates %d -> %d, deletes %d -> %d after the soft delete; want one create in all and nothing more", creates, c, deletes, d)
	}
	rep, _ := readReport(f.c)
	if rep == nil || rep.Roles[0].Count != 3 || rep.Roles[0].Healthy != 3 {
		t.Fatalf("report %+v, want 3 servers of web, all healthy (the soft-deleted one not counted)", rep)
	}
}

// A partial picture is no picture: while Nova lists a server as a partial
// record (its cell unreachable), nothing is destroyed, not even a server
// critical past its grace; the pause says why. When the record is whole
// again the critical server is replaced.
func TestPartialRecordHoldsDestruction(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.seed(3)
	f.arm()
	if !f.sim.SetPartial("web1", true) {
		t.Fatal("no web1")
	}
	r := f.start(nil)
	testutil.Eventually(t, 5*time.Second, "reaper to lead", r.Leading)
	setCritical(t, f.c, "web2")
	testutil.Eventually(t, 5*time.Second, "the pause to name the partial record", func() bool {
		rep, _ := readReport(f.c)
		return rep != nil && rep.Paused && strings.Contains(rep.PauseReason, "1 server(s) as partial records")
	})
	time.Sleep(2 * time.Second) // twice critical_grace
	if n, d := f.sim.Creates.Load(), f.sim.Deletes.Load(); n != 0 || d != 0 || hasMaintenance(t, f.c, "web2") {
		t.Fatalf("%d creates, %d deletes, web2 drained %v while Nova's list held a partial record; want nothing", n, d, hasMaintenance(t, f.c, "web2"))
	}
	// web1's node lives but its server is a nameless record: the role
	// looks one short, and no create is made for it either.
	if !strings.Contains(blocked(f.c), "a partial record may be one of them; no create") {
		t.Fatalf("blocked = %q, want the create held for the partial record", blocked(f.c))
	}
	f.sim.SetPartial("web1", false)
	testutil.Eventually(t, 20*time.Second, "web2 replaced once the list is whole", func() bool {
		return f.sim.Creates.Load() == 1 && !catalogHas(t, f.c, "web2") && len(journalKeys(t, f.c)) == 0
	})
}

// A live node of another project that happens to match the role's name
// template holds the role only for absent_grace (it could be one of the
// role's servers missing from a partial list); then it keeps only its own
// name: the missing server is created under the next free name, and the
// other project's node is left alone.
func TestForeignNodeHoldsOnlyItsName(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.cfg.Roles[0].AbsentGrace = reaper.Duration(2 * time.Second)
	f.seed(2)
	if err := simcloud.RegisterNode(context.Background(), f.c, "web3", "web", api.HealthPassing); err != nil {
		t.Fatal(err)
	}
	f.arm()
	r := f.start(nil)
	testutil.Eventually(t, 5*time.Second, "reaper to lead", r.Leading)
	testutil.Eventually(t, 5*time.Second, "the create held for the unlisted node", func() bool {
		return strings.Contains(blocked(f.c), "(e.g. web3) are missing from the Nova list")
	})
	if n := f.sim.Creates.Load(); n != 0 {
		t.Fatalf("%d creates within absent_grace of seeing web3's node, want 0", n)
	}
	testutil.Eventually(t, 10*time.Second, "web4 created after absent_grace", func() bool {
		return names(f.sim.Servers()) == "web1,web2,web4"
	})
	waitCycles(t, 5, r)
	if !catalogHas(t, f.c, "web3") || f.sim.Deletes.Load() != 0 {
		t.Fatal("the other project's node web3 was touched")
	}
}

// A server whose consistent run failed on every attempt (converge marked
// it suspect, and its node's own check says so) is replaced only in a role
// with replace_suspect, and the record goes with it. A suspect record the
// node's check does not confirm (written by another hand) replaces
// nothing.
func TestSuspectServerReplacedOnlyWhenAsked(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		replace, check bool
	}{{false, true}, {true, true}, {true, false}} {
		replace := tc.replace && tc.check
		t.Run(fmt.Sprintf("replace_suspect=%v,node_check=%v", tc.replace, tc.check), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.cfg.Roles[0].ReplaceSuspect = tc.replace
			f.seed(3)
			f.arm()
			st, err := store.New(f.c, prefix)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if err := st.SetCurrentVersion(ctx, "v2"); err != nil {
				t.Fatal(err)
			}
			if err := st.UpdateStatus(ctx, "web2", store.CategoryPuppet, store.StateFailed,
				store.StatusValue{Version: "v2", Detail: "suspect: the consistent step failed 3 time(s)", Suspect: true}); err != nil {
				t.Fatal(err)
			}
			if tc.check {
				// What converge's mirror on web2's own agent syncs.
				if _, err := f.c.Catalog().Register(&api.CatalogRegistration{Node: "web2", Address: "127.0.0.1", Check: &api.AgentCheck{
					Node: "web2", CheckID: store.ConvergePuppetCheck, Name: store.ConvergePuppetCheck, Status: api.HealthWarning,
					Notes: "orchestrate converge, last puppet outcome: failed: suspect: the consistent step failed 3 time(s)"}}, nil); err != nil {
					t.Fatal(err)
				}
			}
			r := f.start(nil)
			testutil.Eventually(t, 5*time.Second, "reaper to lead", r.Leading)
			if !replace {
				waitCycles(t, 10, r)
				if n, d := f.sim.Creates.Load(), f.sim.Deletes.Load(); n != 0 || d != 0 {
					t.Fatalf("%d creates, %d deletes without replace_suspect, or for a record the node did not confirm", n, d)
				}
				return
			}
			testutil.Eventually(t, 20*time.Second, "web2 replaced and its records gone", func() bool {
				snap, err := st.Snapshot(ctx)
				return err == nil && names(f.sim.Servers()) == "web1,web3,web4" && !catalogHas(t, f.c, "web2") &&
					len(journalKeys(t, f.c)) == 0 && len(snap.Suspects()) == 0
			})
		})
	}
}
