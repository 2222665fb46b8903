package daemon_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/orchestrate"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/reaper"
	"github.com/jiocloud/orchestrate/reaper/daemon"
	"github.com/jiocloud/orchestrate/reaper/simcloud"
)

// The warm pool on a real agent and the simulated cloud, in simulated
// time: the reaper, the cloud and the machines share one clock that each
// step moves on by one interval. A machine takes boot (Nova BUILD) plus
// converge (Puppet: its service check critical until then) to serve.

// poolConfig is a role web of 3 with a warm pool of size {size}.
const poolConfig = `
dry_run: false
prefix: ` + prefix + `
interval: 30s
session_ttl: 2s
lock_delay: 1s
listen: ""
drain_period: 60s
cloud_timeout: 5m
quota_backoff: 30s
quota_backoff_max: 2m
roles:
  - name: web
    desired: 3
    min_healthy: 1
    boot_grace: 5m
    critical_grace: 1m
    boot_timeout: 10m
    drain_timeout: 1m
    boot: {flavor: m1, image: debian, name_template: "web{n}"}
`

func poolConfigOf(size int, state string) string {
	if size == 0 {
		return poolConfig
	}
	return poolConfig + fmt.Sprintf("    warm_pool: {size: %d, state: %s, claim_timeout: 3m}\n", size, state)
}

// poolWorld is one warm pool scenario.
type poolWorld struct {
	t     testing.TB
	agent *consultest.Agent
	c     *api.Client
	sim   *simcloud.Cloud
	cfg   *reaper.Config
	r     *daemon.Reaper
	sess  string
	ctx   context.Context
	// converge is how long a machine's Puppet run takes after ACTIVE.
	converge time.Duration
	opts     []daemon.Option

	mu  sync.Mutex
	now time.Time // guarded by mu
	// booted holds when each machine went ACTIVE, until it converged;
	// dead holds the IDs of machines whose check the test made critical,
	// killed their ID by the name they had (a new server may be given
	// the name of one deleted).
	booted map[string]time.Time
	dead   map[string]bool
	killed map[string]string
	// actions lists every action carried out, in order.
	actions  []reaper.Action
	lastPlan *reaper.Plan
}

// newPoolWorldIn is newPoolWorld with the pool's state (running or
// stopped): a stopped machine's agent leaves (its check goes critical), a
// started one rejoins passing (it converged before it was stopped).
func newPoolWorldIn(t testing.TB, state string, size int, boot, converge time.Duration, opts ...daemon.Option) *poolWorld {
	t.Helper()
	return newPoolWorldOf(t, poolConfigOf(size, state), boot, converge, opts...)
}

// newPoolWorldOf is newPoolWorld with the configuration text given.
func newPoolWorldOf(t testing.TB, config string, boot, converge time.Duration, opts ...daemon.Option) *poolWorld {
	t.Helper()
	agent := consultest.Start(t, consultest.Options{HCL: agentHCL})
	cfg := parseConfig(t, config)
	w := &poolWorld{t: t, agent: agent, c: agent.Client, cfg: cfg, converge: converge, ctx: context.Background(),
		now: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC), booted: map[string]time.Time{}, dead: map[string]bool{}, killed: map[string]string{}}
	w.sim = simcloud.New()
	w.sim.Now = w.clock
	w.sim.BootDelay = boot
	w.sim.DeleteDelay = 30 * time.Second
	w.sim.OnActive = func(s reaper.Server) {
		// The agent joins with the role's service critical until Puppet
		// converged the machine.
		w.mu.Lock()
		w.booted[s.Name] = w.now
		w.mu.Unlock()
		if err := simcloud.RegisterNode(context.Background(), w.c, s.Name, "web", api.HealthCritical); err != nil {
			t.Errorf("register node %s: %v", s.Name, err)
		}
	}
	w.sim.OnStop = func(s reaper.Server) {
		if err := simcloud.RegisterNode(context.Background(), w.c, s.Name, "web", api.HealthCritical); err != nil {
			t.Errorf("stop node %s: %v", s.Name, err)
		}
	}
	w.sim.OnStart = func(s reaper.Server) {
		if err := simcloud.RegisterNode(context.Background(), w.c, s.Name, "web", api.HealthPassing); err != nil {
			t.Errorf("start node %s: %v", s.Name, err)
		}
	}
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("web%d", i)
		w.sim.Add(reaper.Server{Name: name, Created: w.clock().Add(-24 * time.Hour), Metadata: map[string]string{reaper.MetaRole: "web"}})
		if err := simcloud.RegisterNode(context.Background(), w.c, name, "web", api.HealthPassing); err != nil {
			t.Fatal(err)
		}
	}
	w.opts = append([]daemon.Option{daemon.WithClock(w.clock), daemon.AfterAction(func(a reaper.Action) {
		w.mu.Lock()
		w.actions = append(w.actions, a)
		w.mu.Unlock()
	})}, opts...)
	w.newLeader()
	arm(t, w.c)
	return w
}

// newLeader starts a new reaper process holding the lock in a new
// session, the old session destroyed (as its TTL runs out after a kill).
func (w *poolWorld) newLeader(opts ...daemon.Option) {
	w.t.Helper()
	if w.sess != "" {
		if _, err := w.c.Session().Destroy(w.sess, nil); err != nil {
			w.t.Fatal(err)
		}
	}
	var err error
	if w.r, err = daemon.New(w.cfg, w.c, w.sim, testLogger(w.t), append(append([]daemon.Option(nil), w.opts...), opts...)...); err != nil {
		w.t.Fatal(err)
	}
	// The destroyed session's lock delay (1 ms) must pass first.
	sess, _, err := w.c.Session().Create(&api.SessionEntry{TTL: "60s", LockDelay: time.Millisecond}, nil)
	if err != nil {
		w.t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		ok, _, err := w.c.KV().Acquire(&api.KVPair{Key: w.cfg.LeaderKey(), Session: sess}, nil)
		if err != nil {
			w.t.Fatal(err)
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			w.t.Fatal("the leader lock could not be taken")
		}
	}
	w.sess = sess
}

func (w *poolWorld) clock() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.now
}

// step moves time on by one interval: machines that converged pass their
// check, then the reaper runs a cycle.
func (w *poolWorld) step() *reaper.Plan {
	w.t.Helper()
	w.mu.Lock()
	w.now = w.now.Add(w.cfg.Interval.D())
	var done []string
	for name, at := range w.booted {
		if w.now.Sub(at) >= w.converge {
			done = append(done, name)
			delete(w.booted, name)
		}
	}
	w.mu.Unlock()
	for _, name := range done {
		if err := simcloud.RegisterNode(context.Background(), w.c, name, "web", api.HealthPassing); err != nil {
			w.t.Fatal(err)
		}
	}
	p := w.r.Cycle(w.ctx, w.sess)
	if p == nil && w.ctx.Err() == nil {
		w.t.Fatalf("cycle at %s skipped (see the log with -v)", w.clock().Format(time.TimeOnly))
	}
	if p != nil {
		w.lastPlan = p
	}
	return p
}

func (w *poolWorld) stepUntil(max int, what string, cond func() bool) int {
	w.t.Helper()
	return stepUntil(w.t, max, what, func() { w.step() }, cond, func() string {
		return fmt.Sprintf("servers %s; last plan: %s", names(w.sim.Servers()), describePlan(w.lastPlan))
	})
}

// kill makes a machine's service check critical for good.
func (w *poolWorld) kill(name string) {
	w.t.Helper()
	for _, s := range w.sim.Servers() {
		if s.Name == name {
			w.dead[s.ID], w.killed[name] = true, s.ID
		}
	}
	if err := simcloud.RegisterNode(context.Background(), w.c, name, "web", api.HealthCritical); err != nil {
		w.t.Fatal(err)
	}
}

// pool reads the standby records the reaper published.
func (w *poolWorld) pool() map[string]reaperkv.StandbyRecord {
	w.t.Helper()
	pairs, _, err := w.c.KV().List(prefix+"/"+reaperkv.ReaperPoolDir, nil)
	if err != nil {
		w.t.Fatal(err)
	}
	out := map[string]reaperkv.StandbyRecord{}
	for _, p := range pairs {
		var rec reaperkv.StandbyRecord
		if err := json.Unmarshal(p.Value, &rec); err != nil {
			w.t.Fatalf("%s: %v", p.Key, err)
		}
		if p.Key != reaperkv.PoolKey(prefix, rec.Role, rec.Host) {
			w.t.Fatalf("%s holds the record of %s/%s", p.Key, rec.Role, rec.Host)
		}
		out[rec.Host] = rec
	}
	return out
}

// ready counts the standby records in state ready.
func (w *poolWorld) ready() int {
	n := 0
	for _, rec := range w.pool() {
		if rec.State == reaperkv.StandbyReady {
			n++
		}
	}
	return n
}

// serving is the web nodes Consul returns as passing (DNS's answer).
// serves: name is among the role's serving nodes.
func (w *poolWorld) serves(name string) bool { return slices.Contains(w.serving(), name) }

// gone: the server killed under name has left the cloud (a new server
// may carry its name).
func (w *poolWorld) gone(name string) bool {
	w.t.Helper()
	id, ok := w.killed[name]
	if !ok {
		w.t.Fatalf("%s was never killed", name)
	}
	return !slices.ContainsFunc(w.sim.Servers(), func(s reaper.Server) bool { return s.ID == id })
}

func (w *poolWorld) serving() []string {
	s, err := simcloud.ServingNodes(context.Background(), w.c, "web")
	if err != nil {
		w.t.Fatal(err)
	}
	return s
}

// members is the web servers without the standby mark, not dead.
func (w *poolWorld) members() []string {
	var out []string
	for _, s := range w.sim.Servers() {
		if _, standby := s.Metadata[reaper.MetaStandby]; !standby && !w.dead[s.ID] {
			out = append(out, s.Name)
		}
	}
	return out
}

// checkStandbys fails the test unless every server with the standby mark
// has a pool record naming it and its node (once registered) is in
// maintenance, out of the role's passing answer; and every record names a
// server with the mark.
func (w *poolWorld) checkStandbys() {
	w.t.Helper()
	recs := w.pool()
	serving := strings.Join(w.serving(), ",")
	marked := map[string]bool{}
	for _, s := range w.sim.Servers() {
		if _, ok := s.Metadata[reaper.MetaStandby]; !ok {
			continue
		}
		marked[s.Name] = true
		if rec, ok := recs[s.Name]; !ok || rec.ID != s.ID {
			w.t.Errorf("standby %s (%s) has no pool record of its own: %v", s.Name, s.ID, recs)
		}
		if strings.Contains(","+serving+",", ","+s.Name+",") {
			w.t.Errorf("standby %s is among the serving nodes %s", s.Name, serving)
		}
		checks, _, err := w.c.Health().Node(s.Name, nil)
		if err != nil {
			w.t.Fatal(err)
		}
		inMaint := false
		for _, c := range checks {
			// hiera-services knows a standby by these notes.
			inMaint = inMaint || (c.CheckID == reaperkv.NodeMaintenanceCheck && strings.HasPrefix(c.Notes, reaperkv.StandbyNotesPrefix))
		}
		if len(checks) > 0 && !inMaint {
			w.t.Errorf("standby %s is not in maintenance", s.Name)
		}
	}
	for host := range recs {
		if !marked[host] {
			w.t.Errorf("pool record of %s, which is no standby (half-claimed?)", host)
		}
	}
}

// TestWarmPoolReplacesFromTheStandbys: a pool of 2 fills once the role is
// at its count; standbys stay out of DNS, the role's count and the
// pause; a critical node is replaced by a claim (no create), the claimed
// standby serves within two cycles plus a check interval, the old server
// is deleted and the pool refills.
func TestWarmPoolReplacesFromTheStandbys(t *testing.T) {
	w := newPoolWorld(t, 2, 60*time.Second, 60*time.Second)
	w.stepUntil(20, "two ready standbys", func() bool { return w.ready() == 2 })
	w.checkStandbys()
	if got := w.lastPlan.Roles[0]; got.Count != 3 || got.Desired != 3 {
		t.Fatalf("standbys counted in the role: count %d desired %d", got.Count, got.Desired)
	}
	if s := w.serving(); len(s) != 3 {
		t.Fatalf("serving %v, want the three members only", s)
	}
	creates := w.sim.Creates.Load()
	if creates != 2 {
		t.Fatalf("%d creates for a pool of 2", creates)
	}

	w.kill("web2")
	var claimed string
	w.stepUntil(12, "a claim replacing web2", func() bool {
		for _, a := range w.actions {
			if a.Op == reaper.OpClaim && a.Entry.OldName == "web2" {
				claimed = a.Entry.NewName
				return true
			}
		}
		return false
	})
	for _, a := range w.actions {
		if a.Op == reaper.OpCreate && !a.Entry.Standby {
			t.Fatalf("a create was made for the replacement: %s", a)
		}
	}
	decided := w.clock()
	steps := w.stepUntil(4, "the claimed standby serving", func() bool {
		return w.serves(claimed)
	})
	t.Logf("claimed %s served %s after the decision (%d cycles)", claimed, w.clock().Sub(decided), steps)
	if steps > 2 {
		t.Errorf("the claimed standby served after %d cycles, want at most 2", steps)
	}
	w.stepUntil(10, "web2 deleted and the pool refilled", func() bool {
		return w.gone("web2") && w.ready() == 2
	})
	w.checkStandbys()
	if m := w.members(); len(m) != 3 {
		t.Fatalf("members %v, want 3", m)
	}
	var metrics strings.Builder
	if _, err := w.r.Metrics().WriteTo(&metrics); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`reaper_pool_size{role="web"} 2`, `reaper_pool_standbys{role="web",state="ready"} 2`,
		`reaper_pool_claim_seconds_count{role="web"} 1`, fmt.Sprintf(`reaper_pool_claim_seconds_sum{role="web"} %v`, (time.Duration(steps) * w.cfg.Interval.D()).Seconds())} {
		if !strings.Contains(metrics.String(), want+"\n") {
			t.Errorf("metrics lack %s:\n%s", want, metrics.String())
		}
	}
	if w.sim.Creates.Load() != creates+1 {
		t.Fatalf("%d creates, want %d and one (the refill)", w.sim.Creates.Load(), creates)
	}
}

// TestWarmPoolNeverRefillsBelowCount: a role below its count is served
// first: no standby is created while any role is below its count, and a
// ready standby is claimed for the missing server.
func TestWarmPoolNeverRefillsBelowCount(t *testing.T) {
	w := newPoolWorld(t, 1, 60*time.Second, 60*time.Second)
	w.stepUntil(20, "a ready standby", func() bool { return w.ready() == 1 })
	// Nova quota leaves room for no new server: the count below desired
	// is met by the claim, and the refill backs off on the quota.
	w.sim.SetQuota(len(w.sim.Servers()))
	if _, err := w.c.KV().Put(&api.KVPair{Key: store.DesiredKey(prefix, "web"), Value: []byte("4")}, nil); err != nil {
		t.Fatal(err)
	}
	p := w.step()
	var claims, creates int
	for _, a := range p.Actions {
		switch {
		case a.Op == reaper.OpClaim:
			claims++
		case a.Op == reaper.OpCreate:
			creates++
		}
	}
	if claims != 1 || creates != 0 {
		t.Fatalf("below count with a ready standby: %d claims, %d creates; plan %s", claims, creates, describePlan(p))
	}
	w.stepUntil(4, "4 serving", func() bool { return len(w.serving()) == 4 })
	w.stepUntil(4, "the refill backing off on the quota", func() bool {
		for _, r := range w.lastPlan.Roles {
			if r.Pool != nil && strings.Contains(r.Pool.Why, "backoff") {
				return true
			}
		}
		return false
	})
	if w.lastPlan.Backoff {
		t.Fatalf("a standby's quota error backed off the role's own creates")
	}
}

// errKilled stops a claim as a killed leader would stop.
var errKilled = errors.New("leader killed")

// TestClaimSurvivesLeaderKilledAtEachStep: the leader is killed before
// the claim's journal write, after it, after the Nova mark is cleared,
// after the maintenance ends and after the entry went to booting; the next
// leader finishes the replacement with one standby claimed, none left
// half-claimed, and the role at its count.
func TestClaimSurvivesLeaderKilledAtEachStep(t *testing.T) {
	for step := 0; step <= 4; step++ {
		t.Run(fmt.Sprintf("killed before step %d", step), func(t *testing.T) {
			var cancel context.CancelFunc
			killed := false
			kill := func() {
				killed = true
				cancel()
			}
			w := newPoolWorld(t, 1, 60*time.Second, 60*time.Second)
			w.stepUntil(20, "a ready standby", func() bool { return w.ready() == 1 })
			var ctx context.Context
			ctx, cancel = context.WithCancel(context.Background())
			t.Cleanup(cancel)
			w.ctx = ctx
			w.newLeader(daemon.ClaimStep(func(n int) error {
				if n == step && !killed {
					kill()
					return errKilled
				}
				return nil
			}), daemon.AfterAction(func(a reaper.Action) {
				if step == 4 && a.Op == reaper.OpClaim && !killed {
					kill()
				}
			}))
			w.kill("web1")
			w.stepUntil(10, "the leader killed in the claim", func() bool { return killed })
			w.ctx = context.Background()
			w.newLeader()
			w.stepUntil(12, "web1 replaced and the pool refilled", func() bool {
				return w.gone("web1") && len(w.serving()) == 3 && w.ready() == 1
			})
			w.checkStandbys()
			claimedIDs := map[string]bool{}
			resumed := false
			for _, a := range w.actions {
				switch a.Op {
				case reaper.OpClaim:
					claimedIDs[a.Entry.NewID] = true
					resumed = resumed || strings.HasPrefix(a.Reason, "finish the recorded claim")
				case reaper.OpDrain:
					if a.Entry.OldName != "web1" {
						t.Errorf("drained %s: %s", a.Entry.OldName, a)
					}
				}
			}
			// Killed after the journal write (steps 1-3), the claim is
			// the next leader's to finish, not to make again.
			if want := step >= 1 && step <= 3; resumed != want {
				t.Errorf("claim finished from the journal: %v, want %v", resumed, want)
			}
			if len(claimedIDs) > 1 {
				t.Errorf("%d standbys claimed for one replacement: %v", len(claimedIDs), claimedIDs)
			}
			if m := w.members(); len(m) != 3 {
				t.Errorf("members %v, want 3", m)
			}
			pairs, _, err := w.c.KV().List(prefix+"/reaper/journal/", nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(pairs) != 0 {
				t.Errorf("%d journal entries left", len(pairs))
			}
		})
	}
}

// orchestrate runs the orchestrate command against the world's agent and
// returns its exit code and output.
func (w *poolWorld) orchestrate(args ...string) (int, string) {
	var out, errOut bytes.Buffer
	args = append(args, "--consul-addr", w.agent.HTTPAddr, "--prefix", prefix, "--log-level", "warn")
	code := orchestrate.Run(context.Background(), args, orchestrate.IO{Stdout: &out, Stderr: &errOut})
	return code, out.String() + errOut.String()
}

// TestPoolFlushAndStatus: `orchestrate pool status` reads the pool from
// KV; `orchestrate pool flush web` has the reaper replace both standbys,
// one at a time, while no member is drained or deleted and the role
// keeps serving; the request is removed once done.
func TestPoolFlushAndStatus(t *testing.T) {
	w := newPoolWorld(t, 2, 60*time.Second, 60*time.Second)
	w.stepUntil(20, "two ready standbys", func() bool { return w.ready() == 2 })
	w.step() // the state report after the pool is full
	code, out := w.orchestrate("pool", "status", "web", "--json")
	if code != 0 {
		t.Fatalf("pool status: exit %d: %s", code, out)
	}
	var st []struct {
		Role     string                   `json:"role"`
		Report   *reaperkv.PoolReport     `json:"report"`
		Standbys []reaperkv.StandbyRecord `json:"standbys"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("pool status --json: %v: %s", err, out)
	}
	if len(st) != 1 || st[0].Report == nil || st[0].Report.States[reaperkv.StandbyReady] != 2 || len(st[0].Standbys) != 2 {
		t.Fatalf("pool status: %s", out)
	}
	if code, out := w.orchestrate("reaper", "status"); code != 0 || !strings.Contains(out, "warm pool (standbys, not counted above): 2 ready of 2") {
		t.Errorf("orchestrate reaper status: exit %d, no warm pool line: %s", code, out)
	}
	if code, out := w.orchestrate("pool", "flush", "db"); code != 2 || !strings.Contains(out, `no warm pool for role "db"`) {
		t.Errorf("pool flush of a role without a pool: exit %d: %s", code, out)
	}
	old := map[string]bool{}
	for _, s := range st[0].Standbys {
		old[s.ID] = true
	}
	w.mu.Lock()
	w.now = w.now.Add(time.Second) // the request postdates the standbys
	w.mu.Unlock()
	if code, out := w.orchestrate("pool", "flush", "web", "--reason", "new image", "--yes"); code != 0 {
		t.Fatalf("pool flush: exit %d: %s", code, out)
	}
	members := strings.Join(w.members(), ",")
	w.stepUntil(40, "both standbys replaced and the request removed", func() bool {
		if s := w.serving(); len(s) != 3 {
			t.Fatalf("serving %v during the flush", s)
		}
		deletes := 0
		for _, a := range w.lastPlan.Actions {
			if a.Op == reaper.OpDelete || a.Op == reaper.OpDrain {
				if !a.Entry.Standby {
					t.Fatalf("the flush touched a member: %s", a)
				}
				deletes++
			}
		}
		if deletes > 1 {
			t.Fatalf("%d standbys deleted at once: %s", deletes, describePlan(w.lastPlan))
		}
		p, _, err := w.c.KV().Get(reaperkv.PoolFlushKey(prefix, "web"), nil)
		if err != nil {
			t.Fatal(err)
		}
		recs := w.pool()
		for _, r := range recs {
			if old[r.ID] {
				return false
			}
		}
		return p == nil && w.ready() == 2
	})
	if got := strings.Join(w.members(), ","); got != members {
		t.Errorf("members %s after the flush, were %s", got, members)
	}
	w.checkStandbys()

	// Values written by hand: a flush request that does not parse is named
	// and flushes nothing; a standby record that does not parse is
	// rewritten; a record of no standby is removed. The cycle goes on.
	for key, v := range map[string]string{
		reaperkv.PoolFlushKey(prefix, "web"):       "yes please",
		reaperkv.PoolKey(prefix, "web", "web9"):    `{"role":"web","host":"web9","id":"x","state":"ready"}`,
		reaperkv.PoolKey(prefix, "web", w.pool2()): "garbage",
	} {
		if _, err := w.c.KV().Put(&api.KVPair{Key: key, Value: []byte(v)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	creates, deletes := w.sim.Creates.Load(), w.sim.Deletes.Load()
	p := w.step()
	if !strings.Contains(strings.Join(p.Blocked, "; "), "not a flush request") {
		t.Errorf("the bad flush request is not named: %v", p.Blocked)
	}
	w.step()
	w.checkStandbys()
	if w.ready() != 2 || w.sim.Creates.Load() != creates || w.sim.Deletes.Load() != deletes {
		t.Errorf("hand-written pool values moved the pool: %d ready, %d creates, %d deletes", w.ready(), w.sim.Creates.Load()-creates, w.sim.Deletes.Load()-deletes)
	}
}

// pool2 names one standby.
func (w *poolWorld) pool2() string {
	for host := range w.pool() {
		return host
	}
	w.t.Fatal("no standby")
	return ""
}

// stopped counts the standby records in state stopped whose server Nova
// has SHUTOFF.
func (w *poolWorld) stopped() int {
	recs, n := w.pool(), 0
	for _, s := range w.sim.Servers() {
		if rec, ok := recs[s.Name]; ok && rec.State == reaperkv.StandbyStopped && s.Status == reaper.StatusShutoff {
			n++
		}
	}
	return n
}

// TestWarmPoolStopped: with state stopped, a ready standby is powered off
// (Nova stop) and kept in the pool as stopped; a replacement claims it,
// starts it, and it serves; the refill is stopped in its turn.
func TestWarmPoolStopped(t *testing.T) {
	w := newPoolWorldIn(t, reaper.PoolStopped, 2, 60*time.Second, 60*time.Second)
	w.stepUntil(20, "two stopped standbys", func() bool { return w.stopped() == 2 })
	w.step()
	w.checkStandbys()
	if r := w.lastPlan.Roles[0]; r.Pool == nil || r.Pool.States[reaperkv.StandbyStopped] != 2 || r.Count != 3 {
		t.Fatalf("role %+v, pool %v", r, r.Pool)
	}
	w.kill("web3")
	var claimed string
	w.stepUntil(12, "a claim replacing web3", func() bool {
		for _, a := range w.actions {
			if a.Op == reaper.OpClaim && a.Entry.OldName == "web3" {
				claimed = a.Entry.NewName
				return true
			}
		}
		return false
	})
	if w.sim.Starts.Load() != 1 {
		t.Fatalf("%d starts for one claim", w.sim.Starts.Load())
	}
	steps := w.stepUntil(4, "the claimed standby serving", func() bool {
		return w.serves(claimed)
	})
	t.Logf("claimed stopped standby %s served after %d cycles", claimed, steps)
	w.stepUntil(20, "web3 deleted and the pool refilled and stopped", func() bool {
		return w.gone("web3") && w.stopped() == 2
	})
	w.checkStandbys()
	if m := w.members(); len(m) != 3 {
		t.Fatalf("members %v", m)
	}
}

// TestClaimedStandbyThatDoesNotServeIsRolledBack: a claimed standby whose
// service stays critical after its claim (Puppet broke it, say) is rolled
// back at claim_timeout like a failed create: deleted, and the replacement
// goes on with the next standby or a create.
func TestClaimedStandbyThatDoesNotServeIsRolledBack(t *testing.T) {
	var w *poolWorld
	broken, brokenID := "", ""
	w = newPoolWorld(t, 1, 60*time.Second, 60*time.Second, daemon.ClaimStep(func(step int) error {
		if step == 3 && broken == "" {
			// The claim ended the standby's maintenance; its service
			// fails from now on.
			// the claimed one: no member before, its mark just cleared.
			for _, s := range w.sim.Servers() {
				if _, standby := s.Metadata[reaper.MetaStandby]; !standby && s.Name != "web1" && s.Name != "web2" && s.Name != "web3" {
					broken, brokenID = s.Name, s.ID
				}
			}
			if broken == "" {
				return errors.New("no claimed server found")
			}
			w.kill(broken)
		}
		return nil
	}))
	w.stepUntil(20, "a ready standby", func() bool { return w.ready() == 1 })
	w.kill("web1")
	w.stepUntil(10, "the claim", func() bool { return broken != "" })
	claimedAt := w.clock()
	w.stepUntil(12, "the broken standby rolled back", func() bool {
		for _, a := range w.actions {
			if a.Op == reaper.OpRollback && a.Entry.NewName == broken {
				return true
			}
		}
		return false
	})
	if waited := w.clock().Sub(claimedAt); waited < 3*time.Minute {
		t.Errorf("rolled back %s after the claim, before claim_timeout 3m", waited)
	}
	w.stepUntil(20, "web1 replaced by a serving server and the pool full", func() bool {
		for _, s := range w.sim.Servers() {
			if s.ID == brokenID {
				return false
			}
		}
		return w.gone("web1") && len(w.serving()) == 3 && w.ready() == 1
	})
	w.checkStandbys()
}

// capacityRecord is the role's capacity announcement in KV ("" when none).
func (w *poolWorld) capacityRecord() string {
	w.t.Helper()
	p, _, err := w.c.KV().Get(store.CapacityKey(prefix, "web"), nil)
	if err != nil {
		w.t.Fatal(err)
	}
	if p == nil {
		return ""
	}
	return string(p.Value)
}

// TestWarmPoolRefillNeverTakesAReplacementsSlot: the quota has room for
// the role and its pool and not one server more, and the backoff is short
// (the pool tries again every cycle). Two members die at once: the first
// is replaced by claiming the standby, the second waits behind
// max_in_flight. The first one's delete frees the only slot; it goes to
// the second one's replacement, not to the pool's refill, so no create
// of the role fails, nothing announces capacity exhausted and no role is
// backed off. Before that, a pool refused by the quota backs off the
// pool only, with no announcement either.
func TestWarmPoolRefillNeverTakesAReplacementsSlot(t *testing.T) {
	// Two dead of three would pause the reaper at the default fractions.
	config := strings.Replace(poolConfigOf(1, reaper.PoolRunning), "quota_backoff: 30s\nquota_backoff_max: 2m",
		"quota_backoff: 1s\nquota_backoff_max: 2s\npause_fleet_fraction: 0.7\npause_role_fraction: 0.7", 1)
	w := newPoolWorldOf(t, config, 60*time.Second, 60*time.Second)
	quiet := func(when string) {
		t.Helper()
		if rec := w.capacityRecord(); rec != "" {
			t.Fatalf("%s: capacity announced exhausted: %s; last plan %s", when, rec, describePlan(w.lastPlan))
		}
		if w.lastPlan.Backoff {
			t.Fatalf("%s: the quota backoff holds every role's creates; last plan %s", when, describePlan(w.lastPlan))
		}
	}
	// No room for a standby: the pool's creates are refused, the pool
	// backs off, the role is not announced.
	w.sim.SetQuota(3)
	for range 4 {
		w.step()
		quiet("the pool refused")
	}
	if m := metricsText(t, w.r); !strings.Contains(m, `reaper_cloud_errors_total{class="quota"} 4`) {
		t.Fatalf("the pool's creates were not refused each cycle:\n%s", m)
	}
	w.sim.SetQuota(4) // the role and its pool, not one server more
	w.stepUntil(12, "a ready standby", func() bool { return w.ready() == 1 })
	creates := w.sim.Creates.Load()

	w.kill("web1")
	w.kill("web2")
	w.stepUntil(40, "web1 and web2 replaced and the pool refilled", func() bool {
		quiet("replacing web1 and web2")
		return w.gone("web1") && w.gone("web2") && len(w.serving()) == 3 && w.ready() == 1
	})
	w.checkStandbys()
	if n := w.sim.Creates.Load() - creates; n != 2 {
		t.Fatalf("%d create calls after the kills, want 2 (web2's replacement, then the refill): a refused one took a slot's turn", n)
	}
}
