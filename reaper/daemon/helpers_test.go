package daemon_test

// What the daemon's tests share: a fixture of a real Consul agent and the
// simulated cloud, reapers run under the test's control, and reads of the
// reaper's records.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/jiocloud/orchestrate/internal/consultest"
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

func journalKeys(t *testing.T, c *api.Client) []string {
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
	checks, _, err := c.Health().Node(node, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range checks {
		if ch.CheckID == "_node_maintenance" {
			return true
		}
	}
	return false
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
