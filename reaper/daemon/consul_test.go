package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/internal/store/schema"
	"github.com/jiocloud/orchestrate/internal/testutil"
	"github.com/jiocloud/orchestrate/reaper"
	"github.com/jiocloud/orchestrate/reaper/daemon"
	"github.com/jiocloud/orchestrate/reaper/simcloud"
)

// Two reapers against one agent: exactly one acts; when the leader dies
// without releasing anything (a killed process), the other takes over
// within 2×TTL + lock delay + the api package's 5s lock retry.
func TestTwoReapersOneActsAndFailover(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c, sim, cfg := f.c, f.sim, f.cfg
	r1, r2 := f.start(nil), f.start(nil)

	testutil.Eventually(t, 10*time.Second, "three servers created and checked in", func() bool {
		return len(sim.Servers()) == 3 && catalogHas(t, c, "web3")
	})
	testutil.Eventually(t, 5*time.Second, "journal empty", func() bool { return len(journalKeys(t, c)) == 0 })
	waitCycles(t, 5, r1, r2) // several more cycles of both reapers
	if n := sim.Creates.Load(); n != 3 {
		t.Fatalf("%d creates for a role of 3: more than one reaper acted (servers %s)", n, names(sim.Servers()))
	}
	leaders := 0
	var leader, standby *running
	for _, x := range []*running{r1, r2} {
		if x.Leading() {
			leaders++
			leader = x
		} else {
			standby = x
		}
	}
	if leaders != 1 {
		t.Fatalf("%d reapers lead, want exactly 1", leaders)
	}
	// Both are registered as services with a passing TTL check.
	entries, _, err := c.Health().Service("reaper", "", true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 {
		t.Fatalf("%d passing reaper service instances, want 2", len(entries))
	}
	st, err := readReport(c)
	if err != nil || st == nil || st.Leader != leader.ID() {
		t.Fatalf("state = %+v, %v; want written by the leader %s", st, err, leader.ID())
	}

	// Kill the leader: no unlock, no session destroy.
	killed := time.Now()
	leader.kill()
	leader.stop()
	limit := 2*cfg.SessionTTL.D() + cfg.LockDelay.D() + api.DefaultLockRetryTime + 2*time.Second
	testutil.Eventually(t, limit, "the standby to take over", standby.Leading)
	t.Logf("takeover after %v (bound %v)", time.Since(killed).Round(100*time.Millisecond), limit)

	// The new leader acts: a critical node gets replaced.
	f.arm()
	setCritical(t, c, "web1")
	testutil.Eventually(t, 15*time.Second, "web1 replaced", func() bool {
		return !catalogHas(t, c, "web1") && len(sim.Servers()) == 3 && len(journalKeys(t, c)) == 0
	})
}

// A critical node is replaced launch-before-terminate: the replacement is
// created and checks in, the old node goes into maintenance mode (drain),
// then its server is deleted and its node deregistered from the catalog.
func TestReplaceDrainsDeletesDeregisters(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c, sim := f.c, f.sim
	f.seed(3)
	f.arm()
	var sawMaint, newUpFirst atomic.Bool
	r := f.start(func(_ *running, a reaper.Action) {
		if a.Op != reaper.OpDrain {
			return
		}
		checks, _, err := c.Health().Node(a.Entry.OldName, nil)
		if err != nil {
			t.Error(err)
		}
		for _, ch := range checks {
			if ch.CheckID == "_node_maintenance" && ch.Status == api.HealthCritical {
				sawMaint.Store(true)
			}
		}
		// The replacement checked in before the drain began.
		nc, _, _ := c.Health().Node(a.Entry.NewName, nil)
		newUpFirst.Store(len(nc) > 0 && nc.AggregatedStatus() == api.HealthPassing)
	})

	testutil.Eventually(t, 5*time.Second, "reaper to lead", r.Leading)
	setCritical(t, c, "web2")
	testutil.Eventually(t, 15*time.Second, "web2 deleted and deregistered", func() bool {
		return !catalogHas(t, c, "web2") && len(sim.Servers()) == 3 && len(journalKeys(t, c)) == 0
	})
	if got := names(sim.Servers()); got != "web1,web3,web4" {
		t.Fatalf("servers = %s, want web1,web3,web4", got)
	}
	if !sawMaint.Load() {
		t.Fatal("web2 was not in maintenance mode when the drain began")
	}
	if !newUpFirst.Load() {
		t.Fatal("web2 was drained before its replacement checked in passing")
	}
	if n := sim.Creates.Load(); n != 1 {
		t.Fatalf("%d creates, want 1", n)
	}
	testutil.Eventually(t, 5*time.Second, "metrics of a cycle after the replacement", func() bool {
		return strings.Contains(scrape(t, r), `reaper_nodes{role="web",state="healthy"} 3`)
	})
	body := scrape(t, r)
	for _, want := range []string{`reaper_actions_total{op="delete",result="done"} 1`, `reaper_leader 1`, `reaper_actions_total{op="drain",result="done"} 1`} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q:\n%s", want, body)
		}
	}
}

// A leader killed between create and delete: the next leader finishes the
// replacement from the journal, without a second create.
func TestJournalRecoveryAcrossLeaders(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c, sim := f.c, f.sim
	f.seed(3)
	f.arm()
	r1 := f.start(func(x *running, a reaper.Action) {
		if a.Op == reaper.OpCreate && a.Entry.Kind == reaperkv.KindReplace {
			x.kill() // dies right after the create, before any drain or delete
		}
	})
	testutil.Eventually(t, 5*time.Second, "first reaper to lead", r1.Leading)
	setCritical(t, c, "web2")
	<-r1.done
	if n := sim.Creates.Load(); n != 1 {
		t.Fatalf("first leader made %d creates, want 1", n)
	}
	keys := journalKeys(t, c)
	if len(keys) != 1 {
		t.Fatalf("journal after the kill = %v, want one entry", keys)
	}
	if !catalogHas(t, c, "web2") || len(sim.Servers()) != 4 {
		t.Fatalf("after the kill: servers %s, web2 in catalog %v; want the surge of 4 with web2 still there", names(sim.Servers()), catalogHas(t, c, "web2"))
	}

	r2 := f.start(nil)
	testutil.Eventually(t, 15*time.Second, "second leader to finish the replacement", func() bool {
		return !catalogHas(t, c, "web2") && len(sim.Servers()) == 3 && len(journalKeys(t, c)) == 0
	})
	if !r2.Leading() {
		t.Fatal("second reaper is not the leader")
	}
	if n := sim.Creates.Load(); n != 1 {
		t.Fatalf("%d creates in all, want 1: the new leader created again", n)
	}
	if got := names(sim.Servers()); got != "web1,web3,web4" {
		t.Fatalf("servers = %s, want web1,web3,web4", got)
	}
}

// An intent written but its server never recorded (the leader died during
// the create call): the next leader finds the server by its metadata.
func TestJournalIntentFindsItsServer(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c, sim := f.c, f.sim
	f.seed(2)
	entry := reaper.Entry{ID: "web.dead.1", Kind: reaperkv.KindCreate, Role: "web", Phase: reaperkv.PhaseCreating, NewName: "web3", Started: time.Now(), Updated: time.Now()}
	data, _ := json.Marshal(entry)
	if _, err := c.KV().Put(&api.KVPair{Key: prefix + "/reaper/journal/" + entry.ID, Value: data}, nil); err != nil {
		t.Fatal(err)
	}
	s := sim.Add(reaper.Server{Name: "web3", Metadata: map[string]string{reaper.MetaRole: "web", reaper.MetaJournal: entry.ID}})
	if err := simcloud.RegisterNode(context.Background(), c, s.Name, "web", api.HealthPassing); err != nil {
		t.Fatal(err)
	}
	r := f.start(nil)
	testutil.Eventually(t, 10*time.Second, "the entry to be adopted and finished", func() bool { return len(journalKeys(t, c)) == 0 })
	waitCycles(t, 3, r)
	if n := sim.Creates.Load(); n != 0 {
		t.Fatalf("%d creates: the entry's server was not found by its metadata", n)
	}
}

// Quota exhausted: the surge create fails cleanly, nothing is deleted, the
// backoff shows in the state and the metrics.
func TestQuotaSurgeFailsCleanly(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c, sim := f.c, f.sim
	f.seed(3)
	sim.SetQuota(3)
	f.arm()
	r := f.start(nil)
	testutil.Eventually(t, 5*time.Second, "reaper to lead", r.Leading)
	setCritical(t, c, "web2")
	var st *reaperkv.ReaperReport
	testutil.Eventually(t, 10*time.Second, "backoff reported in the state", func() bool {
		var err error
		st, err = readReport(c)
		return err == nil && st != nil && !st.BackoffUntil.IsZero()
	})
	waitCycles(t, 3, r)
	if got := names(sim.Servers()); got != "web1,web2,web3" {
		t.Fatalf("servers = %s: something was deleted or created", got)
	}
	if n := sim.Deletes.Load(); n != 0 {
		t.Fatalf("%d deletes during a quota backoff", n)
	}
	if n := sim.Creates.Load(); n != 1 {
		t.Fatalf("%d create attempts, want 1 then backoff", n)
	}
	if !strings.Contains(st.BackoffReason, "Quota exceeded") {
		t.Fatalf("backoff reason = %q", st.BackoffReason)
	}
	if len(journalKeys(t, c)) != 0 {
		t.Fatal("a failed create left its intent in the journal")
	}
	if !catalogHas(t, c, "web2") {
		t.Fatal("web2 was deregistered")
	}
	if body := scrape(t, r); !strings.Contains(body, `reaper_cloud_errors_total{class="quota"} 1`) || strings.Contains(body, "reaper_quota_backoff_seconds 0\n") {
		t.Fatalf("metrics do not show the quota backoff:\n%s", body)
	}
}

// Dry run: every action is logged and planned, none taken.
func TestDryRunTakesNoAction(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c, sim := f.c, f.sim
	f.seed(2)
	f.arm()
	f.cfg.DryRun = nil // the default
	r := f.start(nil)
	var st *reaperkv.ReaperReport
	testutil.Eventually(t, 5*time.Second, "a state", func() bool {
		st, _ = readReport(c)
		return st != nil && len(st.Planned) > 0
	})
	waitCycles(t, 3, r)
	if !st.DryRun || !strings.Contains(st.Planned[0], "create web web3") {
		t.Fatalf("state = %+v, want dry run planning create web3", st)
	}
	if n := sim.Creates.Load() + sim.Deletes.Load(); n != 0 {
		t.Fatalf("dry run made %d cloud calls", n)
	}
	if len(journalKeys(t, c)) != 0 {
		t.Fatal("dry run wrote the journal")
	}
}

// The start gate opens by itself once every role reached its desired count
// with validation success, and not before.
func TestStartGateArmsAfterValidation(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c := f.c
	f.seed(3)
	r := f.start(nil)
	testutil.Eventually(t, 5*time.Second, "reaper to lead", r.Leading)
	waitCycles(t, 3, r)
	if p, _, _ := c.KV().Get(daemon.ArmKey(prefix), nil); p != nil {
		t.Fatal("armed before any validation")
	}
	st, _ := store.New(c, prefix)
	for i := 1; i <= 3; i++ {
		if err := st.UpdateStatus(context.Background(), fmt.Sprintf("web%d", i), "validation", store.StateSuccess, store.StatusValue{}); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 5*time.Second, "the armed key", func() bool {
		p, _, _ := c.KV().Get(daemon.ArmKey(prefix), nil)
		return p != nil
	})
}

// countingTransport counts requests by path prefix, passing them to the
// real agent.
type countingTransport struct {
	next   http.RoundTripper
	health atomic.Int64
}

func (c *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if strings.HasPrefix(req.URL.Path, "/v1/health/") {
		c.health.Add(1)
	}
	return c.next.RoundTrip(req)
}

// One Nova list and one Consul health query per cycle, whatever the fleet.
func TestOneListOneHealthQueryPerCycle(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t, consultest.Options{HCL: agentHCL})
	ct := &countingTransport{next: http.DefaultTransport}
	conf := api.DefaultConfig()
	conf.Address = agent.HTTPAddr
	conf.HttpClient = &http.Client{Transport: ct}
	c, err := api.NewClient(conf)
	if err != nil {
		t.Fatal(err)
	}
	sim := simcloud.New()
	const fleet = 300
	for i := 1; i <= fleet; i++ {
		name := fmt.Sprintf("web%d", i)
		sim.Add(reaper.Server{Name: name, Created: time.Now().Add(-time.Hour), Metadata: map[string]string{reaper.MetaRole: "web"}})
		if err := simcloud.RegisterNode(context.Background(), agent.Client, name, "web", api.HealthPassing); err != nil {
			t.Fatal(err)
		}
	}
	cfg := fastConfig(t, "")
	cfg.Roles[0].Desired = fleet
	r, err := daemon.New(cfg, c, sim, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	sess := holdLock(t, c, cfg)
	ct.health.Store(0)
	const cycles = 5
	for i := 0; i < cycles; i++ {
		p := r.Cycle(context.Background(), sess)
		if p == nil || len(p.Roles) == 0 || p.Roles[0].Healthy != fleet {
			t.Fatalf("cycle %d did not see the fleet: %+v", i, p)
		}
	}
	if n := sim.Lists.Load(); n != cycles {
		t.Errorf("%d Nova lists in %d cycles", n, cycles)
	}
	if n := ct.health.Load(); n != cycles {
		t.Errorf("%d Consul health queries in %d cycles", n, cycles)
	}
}

// Never act on data that could not be read: a failed Nova list, or a
// desired count that is not a number, means no action that cycle.
func TestNoActionOnUnreadableData(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c, sim := f.c, f.sim
	f.seed(3)
	f.arm()
	setCritical(t, c, "web2")
	sim.FailLists(&reaper.CloudError{Class: reaper.Transient, Op: "list servers", Err: fmt.Errorf("503 Service Unavailable")})
	r := f.start(nil)
	testutil.Eventually(t, 5*time.Second, "reaper to lead", r.Leading)
	var st *reaperkv.ReaperReport
	testutil.Eventually(t, 5*time.Second, "the skipped cycle in the state", func() bool {
		st, _ = readReport(c)
		return st != nil && len(st.Errors) > 0
	})
	if !strings.Contains(st.Errors[0], "cycle skipped") || !strings.Contains(st.Errors[0], "503") {
		t.Fatalf("state errors = %q", st.Errors)
	}
	time.Sleep(2 * time.Second) // web2 is long past its grace by now
	if n := sim.Creates.Load() + sim.Deletes.Load(); n != 0 {
		t.Fatalf("%d cloud changes while the list failed", n)
	}
	// The list works again, but a desired count is garbage: still nothing.
	if _, err := c.KV().Put(&api.KVPair{Key: prefix + "/roles/web/desired", Value: []byte("lots")}, nil); err != nil {
		t.Fatal(err)
	}
	sim.FailLists(nil)
	testutil.Eventually(t, 5*time.Second, "the corrupt desired count reported", func() bool {
		st, _ = readReport(c)
		return st != nil && len(st.Errors) > 0 && strings.Contains(st.Errors[0], "desired")
	})
	waitCycles(t, 5, r)
	if n := sim.Creates.Load() + sim.Deletes.Load(); n != 0 {
		t.Fatalf("%d cloud changes with an unreadable desired count", n)
	}
	// A count readable again, but an override or a named scale-in written
	// by hand that does not parse: either could change the count the
	// reaper works to, so still nothing.
	for _, kv := range [][2]string{{"roles/web/desired", "3"}, {"roles/web/override", "5"}, {"roles/web/scale_in/web1", "yes"}} {
		if _, err := c.KV().Put(&api.KVPair{Key: prefix + "/" + kv[0], Value: []byte(kv[1])}, nil); err != nil {
			t.Fatal(err)
		}
		if kv[0] == "roles/web/desired" {
			continue
		}
		testutil.Eventually(t, 5*time.Second, "the corrupt "+kv[0]+" reported", func() bool {
			st, _ = readReport(c)
			return st != nil && len(st.Errors) > 0 && strings.Contains(st.Errors[0], kv[0])
		})
		waitCycles(t, 5, r)
		if n := sim.Creates.Load() + sim.Deletes.Load(); n != 0 {
			t.Fatalf("%d cloud changes with an unreadable %s", n, kv[0])
		}
		if _, err := c.KV().Delete(prefix+"/"+kv[0], nil); err != nil {
			t.Fatal(err)
		}
	}
	// Readable again: the replacement goes ahead.
	testutil.Eventually(t, 15*time.Second, "web2 replaced", func() bool {
		return !catalogHas(t, c, "web2") && len(sim.Servers()) == 3 && len(journalKeys(t, c)) == 0
	})
}

// A session that does not hold the leader lock cannot write the journal,
// so a reaper that lost leadership never writes an intent, and never makes
// the cloud call that would follow it.
func TestJournalRefusesNonLeader(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t, consultest.Options{HCL: agentHCL})
	c := agent.Client
	cfg := fastConfig(t, "")
	j := daemon.NewJournal(c, prefix, cfg.LeaderKey())
	leader, _, err := c.Session().Create(&api.SessionEntry{TTL: "10s"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := c.Session().Create(&api.SessionEntry{TTL: "10s"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := reaper.Entry{ID: "web.x.1", Kind: reaperkv.KindCreate, Role: "web", Phase: reaperkv.PhaseCreating, NewName: "web9"}
	if err := j.Put(context.Background(), other, e, nil); err != daemon.ErrNotLeader {
		t.Fatalf("write with nobody holding the lock: %v, want ErrNotLeader", err)
	}
	if ok, _, err := c.KV().Acquire(&api.KVPair{Key: cfg.LeaderKey(), Session: leader}, nil); !ok || err != nil {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	if err := j.Put(context.Background(), other, e, nil); err != daemon.ErrNotLeader {
		t.Fatalf("write by a non-leader: %v, want ErrNotLeader", err)
	}
	if len(journalKeys(t, c)) != 0 {
		t.Fatal("a non-leader wrote the journal")
	}
	if err := j.Put(context.Background(), leader, e, []time.Time{time.Now()}); err != nil {
		t.Fatalf("write by the leader: %v", err)
	}
	keys, err := j.Read(context.Background())
	if err != nil || len(keys.Entries) != 1 || keys.Entries[0].NewName != "web9" || len(keys.Destructive) != 1 {
		t.Fatalf("read back: %+v, %v", keys, err)
	}
}

// The autoscaler's count is written only if nobody changed the count or set
// an override since the decision read it: `orchestrate scale` always wins
// the race, and a non-leader never writes.
func TestAutoscaleWriteLosesToAHandSetCount(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t, consultest.Options{HCL: agentHCL})
	c := agent.Client
	ctx := context.Background()
	cfg := fastConfig(t, "")
	j := daemon.NewJournal(c, prefix, cfg.LeaderKey())
	st, err := store.New(c, prefix)
	if err != nil {
		t.Fatal(err)
	}
	leader, _, err := c.Session().Create(&api.SessionEntry{TTL: "10s"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ok, _, err := c.KV().Acquire(&api.KVPair{Key: cfg.LeaderKey(), Session: leader}, nil); !ok || err != nil {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	desired := func() (string, uint64) {
		p, _, err := c.KV().Get(prefix+"/roles/web/desired", nil)
		if err != nil || p == nil {
			t.Fatalf("read desired: %v %v", p, err)
		}
		return string(p.Value), p.ModifyIndex
	}
	if err := st.SetDesired(ctx, "web", 3); err != nil {
		t.Fatal(err)
	}
	_, idx := desired()
	// Someone changes the count after the decision read it.
	if err := st.SetDesired(ctx, "web", 4); err != nil {
		t.Fatal(err)
	}
	if ok, err := j.SetDesired(ctx, leader, reaper.ScaleChange{Role: "web", From: 3, To: 5, Index: idx}); ok || err != nil {
		t.Fatalf("write over a changed count: %v %v", ok, err)
	}
	if v, _ := desired(); v != "4" {
		t.Fatalf("desired %s, want the hand-set 4", v)
	}
	// An override was written with the count: the decision that read
	// the count afterwards still loses to it.
	if err := st.Scale(ctx, "web", 4, schema.Override{By: "ops", Reason: "freeze"}); err != nil {
		t.Fatal(err)
	}
	_, idx2 := desired()
	if ok, err := j.SetDesired(ctx, leader, reaper.ScaleChange{Role: "web", From: 4, To: 6, Index: idx2}); ok || err != nil {
		t.Fatalf("write under an override: %v %v", ok, err)
	}
	if _, err := st.ClearOverride(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	// A session that does not hold the lock: refused.
	other, _, err := c.Session().Create(&api.SessionEntry{TTL: "10s"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := j.SetDesired(ctx, other, reaper.ScaleChange{Role: "web", From: 4, To: 6, Index: idx2}); ok || err != daemon.ErrNotLeader {
		t.Fatalf("write by a non-leader: %v %v, want ErrNotLeader", ok, err)
	}
	// Nothing in between: written.
	if ok, err := j.SetDesired(ctx, leader, reaper.ScaleChange{Role: "web", From: 4, To: 6, Index: idx2}); !ok || err != nil {
		t.Fatalf("write: %v %v", ok, err)
	}
	if v, _ := desired(); v != "6" {
		t.Fatalf("desired %s, want 6", v)
	}
}

// The first quota error of a cycle stops that cycle's other creates: the
// cloud is not hammered, and the backoff is not doubled once per create.
func TestQuotaErrorStopsTheCyclesCreates(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c, sim := f.c, f.sim
	sim.SetQuota(1)
	r := f.start(nil)
	testutil.Eventually(t, 5*time.Second, "the quota backoff", func() bool {
		st, _ := readReport(c)
		return st != nil && !st.BackoffUntil.IsZero()
	})
	time.Sleep(time.Second)
	if n := sim.Creates.Load(); n != 2 {
		t.Fatalf("%d create calls, want 2 (one made, one refused, the third not tried)", n)
	}
	if body := scrape(t, r); !strings.Contains(body, `reaper_actions_total{op="create",result="skipped"} 1`) {
		t.Fatalf("metrics:\n%s", body)
	}
}

// blockingCloud is the simulated cloud with a create that hangs until its
// context ends, reporting when that happens.
type blockingCloud struct {
	*simcloud.Cloud
	once      sync.Once
	entered   chan struct{}
	cancelled chan time.Time
}

func (b *blockingCloud) Create(ctx context.Context, req reaper.CreateRequest) (reaper.Server, error) {
	b.once.Do(func() { close(b.entered) })
	<-ctx.Done()
	select {
	case b.cancelled <- time.Now():
	default:
	}
	return reaper.Server{}, &reaper.CloudError{Class: reaper.Transient, Op: "create", Err: ctx.Err()}
}

// Losing the lock cancels the in-flight cloud call at once.
func TestLosingTheLockCancelsCloudCalls(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c, cfg := f.c, f.cfg
	cloud := &blockingCloud{Cloud: simcloud.New(), entered: make(chan struct{}), cancelled: make(chan time.Time, 1)}
	f.cloud = cloud
	r := f.start(nil)
	select {
	case <-cloud.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no create started")
	}
	p, _, err := c.KV().Get(cfg.LeaderKey(), nil)
	if err != nil || p == nil || p.Session == "" {
		t.Fatalf("leader key: %+v %v", p, err)
	}
	// What Consul does when the leader's node fails its serfHealth check.
	lost := time.Now()
	if _, err := c.Session().Destroy(p.Session, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case at := <-cloud.cancelled:
		t.Logf("create cancelled %v after the session was destroyed", at.Sub(lost).Round(time.Millisecond))
		if at.Sub(lost) > 2*time.Second {
			t.Fatalf("create cancelled only after %v", at.Sub(lost))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the in-flight create was not cancelled when the lock was lost")
	}
	testutil.Eventually(t, 5*time.Second, "the reaper to stop leading", func() bool { return !r.Leading() })
}

// A dead node whose server is gone from Nova (deleted by hand) is
// deregistered from the catalog once it has been dead for boot_timeout.
func TestDeadNodeWithoutServerIsDeregistered(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c, sim := f.c, f.sim
	f.seed(3)
	f.arm()
	if err := simcloud.RegisterNode(context.Background(), c, "web9", "web", api.HealthCritical); err != nil {
		t.Fatal(err)
	}
	f.cfg.Roles[0].BootTimeout = reaper.Duration(2 * time.Second)
	f.start(nil)
	time.Sleep(time.Second)
	if !catalogHas(t, c, "web9") {
		t.Fatal("web9 deregistered before it was dead for boot_timeout")
	}
	testutil.Eventually(t, 10*time.Second, "web9 deregistered", func() bool { return !catalogHas(t, c, "web9") })
	if got := names(sim.Servers()); got != "web1,web2,web3" || sim.Creates.Load() != 0 || sim.Deletes.Load() != 0 {
		t.Fatalf("servers %s, creates %d, deletes %d: the cloud was touched", got, sim.Creates.Load(), sim.Deletes.Load())
	}
	for _, n := range []string{"web1", "web2", "web3"} {
		if !catalogHas(t, c, n) {
			t.Fatalf("%s was deregistered", n)
		}
	}
}

// A fatal create error (a bad flavor) backs off that role's creates: the
// reaper does not retry it every cycle, and says so in state and metrics.
func TestFatalCreateErrorBacksOffTheRole(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c, sim := f.c, f.sim
	sim.FailCreates(&reaper.CloudError{Class: reaper.Fatal, Op: "create server", Err: fmt.Errorf("400 Invalid flavorRef provided")})
	r := f.start(nil)
	var st *reaperkv.ReaperReport
	testutil.Eventually(t, 5*time.Second, "the role backoff in the state", func() bool {
		st, _ = readReport(c)
		return st != nil && st.RoleBackoff["web"].Reason != ""
	})
	waitCycles(t, 5, r)
	if n := sim.Creates.Load(); n != 1 {
		t.Fatalf("%d create calls, want 1 then the backoff", n)
	}
	if !strings.Contains(st.RoleBackoff["web"].Reason, "Invalid flavorRef") || !st.BackoffUntil.IsZero() {
		t.Fatalf("state = %+v: want a web backoff with the reason and no quota backoff", st)
	}
	if body := scrape(t, r); !strings.Contains(body, `reaper_role_backoff_seconds{role="web"} `) || !strings.Contains(body, `reaper_cloud_errors_total{class="fatal"} 1`) {
		t.Fatalf("metrics:\n%s", body)
	}
}

// Consul answers 200 and silently leaves out what the token may not read.
// A reaper token missing a rule must not make a desired count look unset
// (the file's smaller count would scale the role in) or a node look absent
// (its server would be replaced as unaccounted): no action that cycle.
func TestNoActionOnACLFilteredData(t *testing.T) {
	t.Parallel()
	const mgmt = "5e1f3c2a-8d4b-4c6e-9a7f-0b1c2d3e4f50"
	f := newFixtureOn(t, consultest.Options{HCL: agentHCL, ACLToken: mgmt})
	agent, admin, sim := f.agent, f.c, f.sim
	f.seed(4)
	f.arm()
	// orchestrate scale web 4; the file says 3.
	if _, err := admin.KV().Put(&api.KVPair{Key: prefix + "/roles/web/desired", Value: []byte("4")}, nil); err != nil {
		t.Fatal(err)
	}
	const base = `
key_prefix "orchestrate/" { policy = "write" }
node_prefix "" { policy = "read" }
service_prefix "" { policy = "read" }
session_prefix "" { policy = "write" }
`
	for i, tc := range []struct{ name, rules string }{
		{"desired count hidden", base + `key_prefix "orchestrate/roles/" { policy = "deny" }`},
		{"node hidden", base + `node "web2" { policy = "deny" }`},
	} {
		pol, _, err := admin.ACL().PolicyCreate(&api.ACLPolicy{Name: fmt.Sprintf("reaper-%d", i), Rules: tc.rules}, nil)
		if err != nil {
			t.Fatalf("%s: policy: %v", tc.name, err)
		}
		tok, _, err := admin.ACL().TokenCreate(&api.ACLToken{Policies: []*api.ACLTokenPolicyLink{{ID: pol.ID}}}, nil)
		if err != nil {
			t.Fatalf("%s: token: %v", tc.name, err)
		}
		conf := api.DefaultNonPooledConfig()
		conf.Address, conf.Token, conf.TokenFile = agent.HTTPAddr, tok.SecretID, ""
		c, err := api.NewClient(conf)
		if err != nil {
			t.Fatal(err)
		}
		cfg := fastConfig(t, "")
		r, err := daemon.New(cfg, c, sim, testLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		sess := holdLock(t, c, cfg)
		before := sim.Creates.Load() + sim.Deletes.Load()
		p := r.Cycle(context.Background(), sess)
		if p != nil {
			t.Errorf("%s: the cycle planned on filtered data: %v", tc.name, p.Actions)
		}
		if n := sim.Creates.Load() + sim.Deletes.Load() - before; n != 0 {
			t.Errorf("%s: %d cloud changes", tc.name, n)
		}
		if keys := journalKeys(t, admin); len(keys) != 0 {
			t.Errorf("%s: journal written: %v", tc.name, keys)
		}
		st, err := readReport(admin)
		if err != nil || st == nil || len(st.Errors) == 0 || !strings.Contains(st.Errors[0], "ACL") {
			t.Errorf("%s: state = %+v, %v; want the skipped cycle naming ACLs", tc.name, st, err)
		}
		if _, err := admin.Session().Destroy(sess, nil); err != nil {
			t.Fatal(err)
		}
		// The next case starts from a clean journal.
		if _, err := admin.KV().DeleteTree(prefix+"/reaper/journal/", nil); err != nil {
			t.Fatal(err)
		}
	}
}

// When Run returns, every goroutine it started has ended: the metrics
// server, the heartbeat, the session renewal and the lock watchers. Not
// parallel: the parallel tests' reapers wait until it is over, so any
// goroutine of a Reaper still alive is this one's.
func TestRunEndsEveryGoroutine(t *testing.T) {
	agent := consultest.Start(t, consultest.Options{HCL: agentHCL})
	cfg := fastConfig(t, "")
	cfg.Roles[0].Desired = 0
	cfg.Listen = "127.0.0.1:0"
	x := startReaper(t, cfg, agent.Client, simcloud.New(), nil)
	testutil.Eventually(t, 5*time.Second, "the reaper to lead", x.Leading)
	x.stop()
	buf := make([]byte, 1<<20)
	stacks := string(buf[:runtime.Stack(buf, true)])
	for _, g := range strings.Split(stacks, "\n\n") {
		if strings.Contains(g, "orchestrate/reaper.(*Reaper)") {
			t.Errorf("a goroutine of the reaper outlived Run:\n%s", g)
		}
	}
}

// A deleted server's version and status records go with it, and a new
// server never gets a name that still has records: it would be reported
// "at version v1, validation success" before it ever ran Puppet.
func TestDeleteForgetsRecordsAndNewNamesSkipThem(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.seed(3)
	f.arm()
	ctx := context.Background()
	st, err := store.New(f.c, prefix)
	if err != nil {
		t.Fatal(err)
	}
	// web2 is a serving machine; web4 a machine deleted by hand long ago
	// whose records nobody removed. (Puppet, not validation: a role that
	// reports validation would also wait for the replacement to validate.)
	for _, h := range []string{"web2", "web4"} {
		if err := st.ReportVersion(ctx, h, "v1"); err != nil {
			t.Fatal(err)
		}
		if err := st.UpdateStatus(ctx, h, store.CategoryPuppet, store.StateSuccess, store.StatusValue{Version: "v1"}); err != nil {
			t.Fatal(err)
		}
	}
	r := f.start(nil)
	testutil.Eventually(t, 5*time.Second, "reaper to lead", r.Leading)
	setCritical(t, f.c, "web2")
	testutil.Eventually(t, 15*time.Second, "web2 replaced and deleted", func() bool {
		return !catalogHas(t, f.c, "web2") && len(f.sim.Servers()) == 3 && len(journalKeys(t, f.c)) == 0
	})
	if got := names(f.sim.Servers()); got != "web1,web3,web5" {
		t.Fatalf("servers = %s, want web1,web3,web5 (web4 still has records)", got)
	}
	for host, want := range map[string]int{"web2": 0, "web4": 2, "web5": 0} {
		keys, err := st.HostKeys(ctx, host)
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) != want {
			t.Errorf("%s has records %v, want %d", host, keys, want)
		}
	}
}
