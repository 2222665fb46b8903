package daemon_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/testutil"
	"github.com/jiocloud/orchestrate/reaper"
	"github.com/jiocloud/orchestrate/reaper/simcloud"
)

// wakeConfig is fastConfig with a 10-minute interval: a cycle that runs
// within the test was woken by a change or a deadline, not the interval.
func wakeConfig(t *testing.T, extra string) *reaper.Config {
	t.Helper()
	return parseConfig(t, `
dry_run: false
prefix: `+prefix+`
interval: 10m
min_cycle_gap: 200ms
session_ttl: 2s
lock_delay: 1s
listen: ""
drain_period: 500ms
cloud_timeout: 5s
quota_backoff: 30s
`+extra+`
roles:
  - name: web
    desired: 3
    boot_grace: 1s
    critical_grace: 2s
    boot_timeout: 20s
    boot: {flavor: m1, image: debian, name_template: "web{n}"}
`)
}

// createClock is the simulated cloud, noting when each create is asked.
type createClock struct {
	*simcloud.Cloud
	mu    sync.Mutex
	asked []time.Time
}

func (c *createClock) Create(ctx context.Context, req reaper.CreateRequest) (reaper.Server, error) {
	c.mu.Lock()
	c.asked = append(c.asked, time.Now())
	c.mu.Unlock()
	return c.Cloud.Create(ctx, req)
}

// firstAfter is the first create asked at or after t (zero: none yet).
func (c *createClock) firstAfter(t time.Time) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, at := range c.asked {
		if !at.Before(t) {
			return at
		}
	}
	return time.Time{}
}

// wakeFixture is a fixture of three healthy web servers, armed, with
// cfg and a reaper leading on it after its first cycle.
func wakeFixture(t *testing.T, cfg *reaper.Config) (*fixture, *createClock, *running) {
	t.Helper()
	f := newFixture(t)
	f.cfg = cfg
	clock := &createClock{Cloud: f.sim}
	f.cloud = clock
	f.seed(3)
	f.arm()
	x := f.start(nil)
	testutil.Eventually(t, 15*time.Second, "the reaper's first cycle", func() bool { return x.Metrics().Cycles() >= 1 })
	return f, clock, x
}

// TestCriticalNodeReplacedAtGraceEnd: with a 10-minute interval, a node
// critical for its grace (2s) is replaced as the grace ends: the check's
// change wakes a cycle that starts the grace, and the plan's deadline
// wakes the one that acts.
func TestCriticalNodeReplacedAtGraceEnd(t *testing.T) {
	f, clock, x := wakeFixture(t, wakeConfig(t, ""))
	began := time.Now()
	setCritical(t, f.c, "web2")
	testutil.Eventually(t, 10*time.Second, "a create for web2", func() bool { return !clock.firstAfter(began).IsZero() }, func() string { return scrape(t, x) })
	took := clock.firstAfter(began).Sub(began)
	// The grace, plus a watch answer, a min_cycle_gap and a cycle.
	if limit := 2*time.Second + 1500*time.Millisecond; took > limit {
		t.Fatalf("create asked %s after web2 turned critical, want within %s (grace 2s)", took, limit)
	}
	if took < 2*time.Second {
		t.Fatalf("create asked %s after web2 turned critical: before its 2s grace", took)
	}
	if n := x.Metrics().Wakeups("timer"); n < 1 {
		t.Fatalf("no cycle woken by the timer:\n%s", scrape(t, x))
	}
	if !strings.Contains(scrape(t, x), `reaper_cycle_wakeups_total{cause="change"}`) {
		t.Fatalf("no wake-up counter by cause:\n%s", scrape(t, x))
	}
}

// TestDesiredCountWritesWakeTheCycle: `orchestrate scale`'s write of a
// role's desired count starts a cycle at once, not at the next interval.
func TestDesiredCountWritesWakeTheCycle(t *testing.T) {
	f, clock, x := wakeFixture(t, wakeConfig(t, ""))
	// A new leader creates nothing for absent_grace (2s) after it began:
	// let that pass, so the create below waits only for the wake-up.
	time.Sleep(2 * time.Second)
	s, err := store.New(f.c, prefix)
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if err := s.SetDesired(context.Background(), "web", 4); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "a create for the fourth server", func() bool { return !clock.firstAfter(began).IsZero() }, func() string { return scrape(t, x) })
	if took := clock.firstAfter(began).Sub(began); took > 2*time.Second {
		t.Fatalf("create asked %s after the desired count was written, want within 2s (interval 10m)", took)
	}
	if n := x.Metrics().Wakeups("change"); n < 1 {
		t.Fatalf("no cycle woken by a change:\n%s", scrape(t, x))
	}
}

// TestFlappingCheckCannotSpinTheCycle: a check toggled every 50 ms for 3 s
// makes at most one cycle per min_cycle_gap (500ms), plus a few.
func TestFlappingCheckCannotSpinTheCycle(t *testing.T) {
	f, _, x := wakeFixture(t, parseConfig(t, `
dry_run: false
prefix: `+prefix+`
interval: 10m
min_cycle_gap: 500ms
session_ttl: 2s
lock_delay: 1s
listen: ""
roles:
  - name: web
    desired: 3
    critical_grace: 1h
    boot: {flavor: m1, image: debian, name_template: "web{n}"}
`))
	const flapFor, gap = 3 * time.Second, 500 * time.Millisecond
	before := x.Metrics().Cycles()
	ctx := context.Background()
	status := []string{api.HealthCritical, api.HealthPassing}
	toggles := 0
	for end := time.Now().Add(flapFor); time.Now().Before(end); toggles++ {
		if err := simcloud.RegisterNode(ctx, f.c, "web2", "web", status[toggles%2]); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cycles := x.Metrics().Cycles() - before
	limit := int(flapFor/gap) + 3
	t.Logf("%d toggles in %s: %d cycles (at most %d)", toggles, flapFor, cycles, limit)
	if cycles > limit {
		t.Fatalf("%d cycles during %s of flapping, want at most %d (min_cycle_gap %s)", cycles, flapFor, limit, gap)
	}
	if cycles < 2 {
		t.Fatalf("%d cycles during %s of flapping: the changes did not wake it", cycles, flapFor)
	}
}

// TestWakeOnChangeOff: wake_on_change false keeps the fixed interval: a
// desired count written does not start a cycle.
func TestWakeOnChangeOff(t *testing.T) {
	f, _, x := wakeFixture(t, wakeConfig(t, "wake_on_change: false"))
	before := x.Metrics().Cycles()
	s, err := store.New(f.c, prefix)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetDesired(context.Background(), "web", 4); err != nil {
		t.Fatal(err)
	}
	setCritical(t, f.c, "web2")
	time.Sleep(3 * time.Second) // nothing is expected to happen: no event to wait for
	if got := x.Metrics().Cycles() - before; got != 0 {
		t.Fatalf("%d cycles with wake_on_change false and a 10m interval, want 0", got)
	}
	if n := x.Metrics().Wakeups("change") + x.Metrics().Wakeups("timer"); n != 0 {
		t.Fatalf("%d early wake-ups with wake_on_change false", n)
	}
}
