package daemon_test

// What the daemon's tests share: a fixture of a real Consul agent and the
// simulated cloud, reapers run under the test's control, and reads of the
// reaper's records.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/orchestrate"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/internal/testutil"
	"github.com/jiocloud/orchestrate/reaper"
	"github.com/jiocloud/orchestrate/reaper/daemon"
	"github.com/jiocloud/orchestrate/reaper/simcloud"
)

// agentHCL lets tests use short session TTLs (Consul's default minimum is
// 10s).
const agentHCL = `session_ttl_min = "1s"`

const prefix = "orchestrate"

// fastConfig is a config with short timings for tests against a real agent.
func fastConfig(t *testing.T, extra string) *reaper.Config {
	t.Helper()
	text := `
dry_run: false
prefix: ` + prefix + `
interval: 200ms
session_ttl: 2s
lock_delay: 1s
listen: ""
drain_period: 500ms
cloud_timeout: 5s
quota_backoff: 30s
roles:
  - name: web
    desired: 3
    boot_grace: 1s
    critical_grace: 1s
    boot_timeout: 20s
    boot: {flavor: m1, image: debian, name_template: "web{n}"}
` + extra
	return parseConfig(t, text)
}

// testLogger logs at debug level in verbose runs, unless REAPER_TEST_LOG
// is "quiet" (`make soak`, whose own trace is what matters).
func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() && os.Getenv("REAPER_TEST_LOG") != "quiet" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", t.Name())
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// fixture is one test's world: a real Consul agent, a simulated cloud
// whose booted servers register themselves in Consul as passing nodes
// providing service web, and a config with short timings.
type fixture struct {
	t     *testing.T
	agent *consultest.Agent
	c     *api.Client
	sim   *simcloud.Cloud
	// cloud is what the reapers use: sim unless a test wraps it.
	cloud reaper.Cloud
	cfg   *reaper.Config
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	return newFixtureOn(t, consultest.Options{HCL: agentHCL})
}

// newFixtureOn is newFixture with an agent started with opts.
func newFixtureOn(t *testing.T, opts consultest.Options) *fixture {
	t.Helper()
	agent := consultest.Start(t, opts)
	f := &fixture{t: t, agent: agent, c: agent.Client, cfg: fastConfig(t, "")}
	f.sim = simcloud.New()
	f.sim.BootDelay = 100 * time.Millisecond
	f.sim.DeleteDelay = 300 * time.Millisecond // Nova deletes asynchronously
	f.sim.OnActive = func(s reaper.Server) {
		if err := simcloud.RegisterNode(context.Background(), f.c, s.Name, "web", api.HealthPassing); err != nil {
			t.Errorf("register node %s: %v", s.Name, err)
		}
	}
	f.cloud = f.sim
	return f
}

// seed adds n old, healthy web servers with passing nodes.
func (f *fixture) seed(n int) {
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("web%d", i)
		f.sim.Add(reaper.Server{Name: name, Created: time.Now().Add(-24 * time.Hour), Metadata: map[string]string{reaper.MetaRole: "web"}})
		if err := simcloud.RegisterNode(context.Background(), f.c, name, "web", api.HealthPassing); err != nil {
			f.t.Fatal(err)
		}
	}
}

func (f *fixture) arm() { arm(f.t, f.c) }

// arm writes an arm record, as `orchestrate reaper arm` does.
func arm(t testing.TB, c *api.Client) {
	t.Helper()
	rec := []byte(`{"time":"` + time.Now().UTC().Format(time.RFC3339) + `","by":"test","reason":"armed by the test"}`)
	if _, err := c.KV().Put(&api.KVPair{Key: daemon.ArmKey(prefix), Value: rec}, nil); err != nil {
		t.Fatal(err)
	}
}

// start runs a reaper on the fixture's config and cloud until the test
// ends or it is stopped; hook, if not nil, is called after each action.
func (f *fixture) start(hook func(x *running, a reaper.Action)) *running {
	f.t.Helper()
	return startReaper(f.t, f.cfg, f.c, f.cloud, hook)
}

// running is a reaper whose Run goroutine a test controls.
type running struct {
	*daemon.Reaper
	abandon atomic.Bool
	cancel  context.CancelFunc
	done    chan struct{}
}

// kill ends the run as a killed process would end: the lock, session and
// service registration are left behind. It does not wait, so a hook may
// call it.
func (x *running) kill() {
	x.abandon.Store(true)
	x.cancel()
}

// stop ends the run and waits for Run to return.
func (x *running) stop() {
	x.cancel()
	<-x.done
}

// startReaper runs a reaper until the test ends or it is stopped; hook, if
// not nil, is called after each action.
func startReaper(t *testing.T, cfg *reaper.Config, c *api.Client, cloud reaper.Cloud, hook func(x *running, a reaper.Action)) *running {
	t.Helper()
	x := &running{done: make(chan struct{})}
	opts := []daemon.Option{daemon.AbandonWhen(x.abandon.Load)}
	if hook != nil {
		opts = append(opts, daemon.AfterAction(func(a reaper.Action) { hook(x, a) }))
	}
	r, err := daemon.New(cfg, c, cloud, testLogger(t), opts...)
	if err != nil {
		t.Fatal(err)
	}
	x.Reaper = r
	ctx, cancel := context.WithCancel(context.Background())
	x.cancel = cancel
	go func() {
		defer close(x.done)
		if err := r.Run(ctx); err != nil {
			t.Errorf("reaper run: %v", err)
		}
	}()
	t.Cleanup(x.stop)
	return x
}

// holdLock makes a session of c hold the leader lock, for tests that run
// cycles by hand.
func holdLock(t testing.TB, c *api.Client, cfg *reaper.Config) string {
	t.Helper()
	sess, _, err := c.Session().Create(&api.SessionEntry{TTL: "60s", LockDelay: time.Millisecond}, nil)
	if err != nil {
		t.Fatalf("session: %v", err)
	}
	if ok, _, err := c.KV().Acquire(&api.KVPair{Key: cfg.LeaderKey(), Session: sess}, nil); !ok || err != nil {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	return sess
}

func names(ss []reaper.Server) string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Name)
	}
	return strings.Join(out, ",")
}

func catalogHas(t *testing.T, c *api.Client, node string) bool {
	n, _, err := c.Catalog().Node(node, nil)
	if err != nil {
		t.Fatal(err)
	}
	return n != nil && n.Node != nil
}

func journalKeys(t testing.TB, c *api.Client) []string {
	keys, _, err := c.KV().Keys(prefix+"/reaper/journal/", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

func setCritical(t *testing.T, c *api.Client, node string) {
	if err := simcloud.RegisterNode(context.Background(), c, node, "web", api.HealthCritical); err != nil {
		t.Fatal(err)
	}
}

func scrape(t *testing.T, r *running) string {
	var sb strings.Builder
	r.Metrics().WriteTo(&sb)
	return sb.String()
}

// readReport reads the reaper's state report under prefix; nil when there
// is none.
func readReport(c *api.Client) (*reaperkv.ReaperReport, error) {
	s, err := store.New(c, prefix)
	if err != nil {
		return nil, err
	}
	return s.ReaperReport(context.Background())
}

// hasMaintenance reports whether node carries the node maintenance check.
func hasMaintenance(t *testing.T, c *api.Client, node string) bool {
	t.Helper()
	_, ok := maintenanceNotes(t, c, node)
	return ok
}

// maintenanceNotes is the notes of node's maintenance check; false when
// it has none.
func maintenanceNotes(t *testing.T, c *api.Client, node string) (string, bool) {
	t.Helper()
	checks, _, err := c.Health().Node(node, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range checks {
		if ch.CheckID == "_node_maintenance" {
			return ch.Notes, true
		}
	}
	return "", false
}

// waitCycles waits until the reapers rs have run n more cycles between
// them, counted by the reaper itself: what a test means by "let n cycles
// pass", however slowly a loaded machine runs them.
func waitCycles(t *testing.T, n int, rs ...*running) {
	t.Helper()
	count := func() int {
		sum := 0
		for _, r := range rs {
			sum += r.Metrics().Cycles()
		}
		return sum
	}
	start := count()
	testutil.Eventually(t, 10*time.Second+time.Duration(n)*time.Second, fmt.Sprintf("%d more cycles", n), func() bool { return count() >= start+n })
}

// scaleConfig is a role web scaling on the consul metric "load", target
// 0.6 per node, 2 to 10 servers, HPA's default behaviour: at most 2 more
// per scale out, 3 min apart; at most 1 fewer per scale in, 5 min apart,
// after a 5 min stabilization window.
const scaleConfig = `
dry_run: false
prefix: ` + prefix + `
interval: 30s
session_ttl: 2s
lock_delay: 1s
listen: ""
drain_period: 60s
cloud_timeout: 5m
quota_backoff: 30s
quota_backoff_max: 1m
roles:
  - name: web
    boot_grace: 2m
    critical_grace: 1m
    boot_timeout: 10m
    drain_timeout: 2m
    boot: {flavor: m1, image: debian, name_template: "web{n}"}
    autoscale:
      metric: {source: consul, name: load, max_age: 2m}
      target: 0.6
      min: 2
      max: 10
      scale_out: {max_step: 2, cooldown: 3m}
      scale_in: {max_step: 1, cooldown: 5m, stabilization: 5m}
`

// scaleWorld is one autoscaling scenario: a real agent, the simulated cloud
// booting servers in 60 s of simulated time, a reaper whose cycles the
// test runs one step at a time, and a workload the role's serving nodes
// report their share of.
type scaleWorld struct {
	t     testing.TB
	agent *consultest.Agent
	c     *api.Client
	sim   *simcloud.Cloud
	cfg   *reaper.Config
	r     *daemon.Reaper
	st    *store.Store
	sess  string
	load  *simcloud.Workload

	mu  sync.Mutex
	now time.Time // guarded by mu

	// report: the serving nodes report their load each step; answer: the
	// platform answers every drain request (`orchestrate drained`).
	report, answer bool
	// scaled lists the changes of desired count, with when.
	scaled []scaleEvent
	// deleted lists the servers deleted, in order.
	deleted []string
	// lastPlan is the last cycle's plan.
	lastPlan *reaper.Plan
}

type scaleEvent struct {
	at       time.Time
	from, to int
}

func (e scaleEvent) String() string {
	return fmt.Sprintf("%d->%d at %s", e.from, e.to, e.at.Format(time.TimeOnly))
}

func newScaleWorld(t testing.TB, config string, servers int) *scaleWorld {
	t.Helper()
	agent := consultest.Start(t, consultest.Options{HCL: agentHCL})
	cfg := parseConfig(t, config)
	var err error
	w := &scaleWorld{t: t, agent: agent, c: agent.Client, cfg: cfg, load: simcloud.NewWorkload(0), report: true, answer: true,
		now: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)}
	w.sim = simcloud.New()
	w.sim.Now = w.clock
	w.sim.BootDelay = time.Minute
	w.sim.DeleteDelay = 30 * time.Second
	w.sim.OnActive = func(s reaper.Server) {
		if err := simcloud.RegisterNode(context.Background(), w.c, s.Name, "web", api.HealthPassing); err != nil {
			t.Errorf("register node %s: %v", s.Name, err)
		}
	}
	w.sim.OnDelete = func(s reaper.Server) { w.deleted = append(w.deleted, s.Name) }
	for i := 1; i <= servers; i++ {
		name := "web" + string(rune('0'+i))
		// The higher the number, the older: the oldest-first tie-break
		// never agrees with a choice by load by chance.
		created := w.clock().Add(-24*time.Hour - time.Duration(i)*time.Minute)
		w.sim.Add(reaper.Server{Name: name, Created: created, Metadata: map[string]string{reaper.MetaRole: "web"}})
		if err := simcloud.RegisterNode(context.Background(), w.c, name, "web", api.HealthPassing); err != nil {
			t.Fatal(err)
		}
	}
	if w.st, err = store.New(w.c, prefix); err != nil {
		t.Fatal(err)
	}
	w.st.Now = w.clock
	// The role starts at the count it has, as the autoscaler left it.
	if err := w.st.SetDesired(context.Background(), "web", servers); err != nil {
		t.Fatal(err)
	}
	if w.r, err = daemon.New(cfg, w.c, w.sim, testLogger(t), daemon.WithClock(w.clock)); err != nil {
		t.Fatal(err)
	}
	w.sess = holdLock(t, w.c, cfg)
	arm(t, w.c)
	return w
}

func (w *scaleWorld) clock() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.now
}

// step moves time on by one interval: the serving nodes report, the
// reaper runs a cycle, the platform answers drain requests.
func (w *scaleWorld) step() *reaper.Plan {
	w.t.Helper()
	ctx := context.Background()
	w.mu.Lock()
	w.now = w.now.Add(w.cfg.Interval.D())
	w.mu.Unlock()
	if w.report {
		serving, err := simcloud.ServingNodes(ctx, w.c, "web")
		if err != nil {
			w.t.Fatal(err)
		}
		for node, v := range w.load.Spread(serving) {
			if err := w.st.ReportMetric(ctx, "web", node, "load", v); err != nil {
				w.t.Fatal(err)
			}
		}
	}
	before := w.desired()
	p := w.r.Cycle(ctx, w.sess)
	if p == nil {
		w.t.Fatalf("cycle at %s skipped (see the log with -v)", w.clock().Format(time.TimeOnly))
	}
	w.lastPlan = p
	if after := w.desired(); after != before {
		w.scaled = append(w.scaled, scaleEvent{at: w.clock(), from: before, to: after})
	}
	if w.answer {
		w.answerDrains()
	}
	return p
}

// stepUntil steps until cond holds, at most max steps; it returns the
// steps taken.
func (w *scaleWorld) stepUntil(max int, what string, cond func() bool) int {
	w.t.Helper()
	return stepUntil(w.t, max, what, func() { w.step() }, cond, func() string {
		return fmt.Sprintf("%s of simulated time; last plan: %s", time.Duration(max)*w.cfg.Interval.D(), describePlan(w.lastPlan))
	})
}

// stepUntil runs step until cond holds, at most max times, and returns
// the steps taken; else it fails the test, saying what it waited for and
// what where tells of the world.
func stepUntil(t testing.TB, max int, what string, step func(), cond func() bool, where func() string) int {
	t.Helper()
	for i := 1; i <= max; i++ {
		step()
		if cond() {
			return i
		}
	}
	t.Fatalf("%s: not after %d steps (%s)", what, max, where())
	return 0
}

// parseConfig parses and validates a test configuration.
func parseConfig(t testing.TB, text string) *reaper.Config {
	t.Helper()
	cfg, err := reaper.ParseConfig(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if err := daemon.CheckConfig(cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func describePlan(p *reaper.Plan) string {
	if p == nil {
		return "none"
	}
	var b strings.Builder
	for _, r := range p.Roles {
		if a := r.Autoscale; a != nil && a.Last != nil {
			b.WriteString("autoscale " + a.Last.Result + ": " + a.Last.Reason + "; ")
		}
	}
	for _, a := range p.Actions {
		b.WriteString(a.String() + "; ")
	}
	for _, s := range p.Blocked {
		b.WriteString("held: " + s + "; ")
	}
	return b.String()
}

// desired is the role's count in Consul (the config's when unset).
func (w *scaleWorld) desired() int {
	n, ok, err := w.st.Desired(context.Background(), "web")
	if err != nil {
		w.t.Fatal(err)
	}
	if !ok {
		return w.cfg.Roles[0].Desired
	}
	return n
}

// servers lists the role's servers in the cloud, ACTIVE or not.
func (w *scaleWorld) servers() string { return names(w.sim.Servers()) }

// serving counts the nodes that take load.
func (w *scaleWorld) serving() int {
	s, err := simcloud.ServingNodes(context.Background(), w.c, "web")
	if err != nil {
		w.t.Fatal(err)
	}
	return len(s)
}

// answerDrains answers every unanswered drain request, as the platform
// does once it moved a host's work away: with `orchestrate drained`.
func (w *scaleWorld) answerDrains() {
	snap, err := w.st.Snapshot(context.Background())
	if err != nil {
		w.t.Fatal(err)
	}
	for host, d := range snap.Scaling.Drains {
		if d.Answer == nil {
			w.cli("drained", host, "--detail", "moved its work to the other servers")
		}
	}
}

// cli runs the orchestrate command against the world's agent, failing the
// test on a non-zero exit.
func (w *scaleWorld) cli(args ...string) string {
	w.t.Helper()
	var out, errOut bytes.Buffer
	args = append(args, "--consul-addr", w.agent.HTTPAddr, "--prefix", prefix, "--log-level", "warn")
	if code := orchestrate.Run(context.Background(), args, orchestrate.IO{Stdout: &out, Stderr: &errOut}); code != 0 {
		w.t.Fatalf("orchestrate %s: exit %d: %s", strings.Join(args, " "), code, errOut.String())
	}
	return out.String()
}

// lastDecision is the role's autoscaling decision in the last plan.
func (w *scaleWorld) lastDecision() reaperkv.ScaleDecision {
	for _, r := range w.lastPlan.Roles {
		if r.Autoscale != nil && r.Autoscale.Last != nil {
			return *r.Autoscale.Last
		}
	}
	w.t.Fatal("the last plan has no autoscaling decision")
	return reaperkv.ScaleDecision{}
}

// runCLI runs the orchestrate command against the world's agent and
// returns its exit code and standard error; the connection flags go
// right after the command's name, so args may end in "--" and operands.
func (w *scaleWorld) runCLI(args ...string) (int, string) {
	var out, errOut bytes.Buffer
	args = append([]string{args[0], "--consul-addr", w.agent.HTTPAddr, "--prefix", prefix, "--log-level", "warn"}, args[1:]...)
	code := orchestrate.Run(context.Background(), args, orchestrate.IO{Stdout: &out, Stderr: &errOut})
	return code, errOut.String()
}

func metricsText(t *testing.T, r *daemon.Reaper) string {
	t.Helper()
	var b strings.Builder
	if _, err := r.Metrics().WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

const identityMgmt = "2c9d1e8f-4a7b-4c3d-9e6f-5a4b3c2d1e0f"

func newPoolWorld(t testing.TB, size int, boot, converge time.Duration, opts ...daemon.Option) *poolWorld {
	return newPoolWorldIn(t, reaper.PoolRunning, size, boot, converge, opts...)
}

// blocked reads the last state report's blocked lines, joined.
func blocked(c *api.Client) string {
	rep, _ := readReport(c)
	if rep == nil {
		return ""
	}
	return strings.Join(rep.Blocked, "\n")
}

// oneSpaced is s with every run of white space one space: a status
// screen's line wrapped to the width reads as one.
func oneSpaced(s string) string { return strings.Join(strings.Fields(s), " ") }
