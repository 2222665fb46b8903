package reaper_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/orchestrate"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/reaper"
	"github.com/jiocloud/orchestrate/reaper/simcloud"
)

// Autoscaling on a real agent and the simulated cloud, in simulated time:
// the reaper, the cloud and the nodes' metric reports share one clock that
// each step moves on by one interval (30 s), so ten minutes of a cloud's
// life take seconds. Consul, its KV, its health and the reaper's code are
// all real; only the machines and their load are simulated.

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
	t     *testing.T
	agent *consultest.Agent
	c     *api.Client
	sim   *simcloud.Cloud
	cfg   *reaper.Config
	r     *reaper.Reaper
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

func newScaleWorld(t *testing.T, config string, servers int) *scaleWorld {
	t.Helper()
	agent := consultest.Start(t, consultest.Options{HCL: agentHCL})
	cfg, err := reaper.ParseConfig(strings.NewReader(config))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
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
		w.sim.Add(reaper.Server{Name: name, Created: w.clock().Add(-24 * time.Hour), Metadata: map[string]string{reaper.MetaRole: "web"}})
		if err := simcloud.RegisterNode(context.Background(), w.c, name, "web", api.HealthPassing); err != nil {
			t.Fatal(err)
		}
	}
	if w.st, err = store.New(w.c, prefix); err != nil {
		t.Fatal(err)
	}
	w.st.Now = w.clock
	if w.r, err = reaper.New(cfg, w.c, w.sim, testLogger(t), reaper.WithClock(w.clock)); err != nil {
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
	for i := 1; i <= max; i++ {
		w.step()
		if cond() {
			return i
		}
	}
	w.t.Fatalf("%s: not after %d steps (%s of simulated time); last plan: %s", what, max, time.Duration(max)*w.cfg.Interval.D(), describePlan(w.lastPlan))
	return 0
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
func (w *scaleWorld) lastDecision() store.ScaleDecision {
	for _, r := range w.lastPlan.Roles {
		if r.Autoscale != nil && r.Autoscale.Last != nil {
			return *r.Autoscale.Last
		}
	}
	w.t.Fatal("the last plan has no autoscaling decision")
	return store.ScaleDecision{}
}

// The role follows its load: a step up reaches ceil(load/target) within
// the scale-out cooldowns; a steady load changes nothing for ten minutes;
// a drop scales in only after the stabilization window, one server per
// cooldown, each through the drain handshake and taking the least loaded
// server.
func TestAutoscaleFollowsLoad(t *testing.T) {
	t.Parallel()
	w := newScaleWorld(t, scaleConfig, 2)
	w.load.SetTotal(0.6) // 0.3 per node: below target, but min is 2
	for range 3 {
		w.step()
	}
	if d := w.desired(); d != 2 || len(w.scaled) != 0 {
		t.Fatalf("at a light load the count moved: desired %d, changes %v", d, w.scaled)
	}

	// A step up to 3.0: ceil(3.0 / 0.6) = 5 servers.
	w.load.SetTotal(3.0)
	up := w.clock()
	w.stepUntil(24, "5 servers serving", func() bool { return w.desired() == 5 && w.serving() == 5 })
	reached := w.clock().Sub(up)
	if len(w.scaled) < 2 || w.scaled[0].at.Sub(up) > w.cfg.Interval.D() {
		t.Fatalf("the first scale out did not come at the first cycle after the step: %v", w.scaled)
	}
	for i := 1; i < len(w.scaled); i++ {
		if gap := w.scaled[i].at.Sub(w.scaled[i-1].at); gap < 3*time.Minute {
			t.Fatalf("scale outs %v and %v only %s apart, inside the 3m cooldown", w.scaled[i-1], w.scaled[i], gap)
		}
		if w.scaled[i].to-w.scaled[i].from > 2 {
			t.Fatalf("scale out %v by more than max_step 2", w.scaled[i])
		}
	}
	// 2 -> 4 at once, 4 -> 5 after the cooldown, the last one booting 1m.
	if reached > 3*time.Minute+time.Minute+2*w.cfg.Interval.D() {
		t.Fatalf("5 servers served %s after the step up, want within cooldown 3m + boot 1m + two cycles", reached)
	}
	t.Logf("load 0.6 -> 3.0: 5 servers serving after %s of simulated time (changes %v)", reached, w.scaled)

	// Steady: nothing moves for ten minutes. The servers carry different
	// shares (web3 the least), the average is the target.
	w.load.SetWeight("web3", 0.3)
	changes, creates := len(w.scaled), w.sim.Creates.Load()
	for range 20 {
		w.step()
	}
	if len(w.scaled) != changes || w.sim.Creates.Load() != creates || len(w.deleted) != 0 {
		t.Fatalf("a steady load moved the count: changes %v, creates %d -> %d, deleted %v", w.scaled[changes:], creates, w.sim.Creates.Load(), w.deleted)
	}
	if d := w.lastDecision(); d.Result != store.ResultHold || !strings.HasPrefix(d.Reason, "within-tolerance") {
		t.Fatalf("steady decision %+v, want a hold within the tolerance", d)
	}

	// A drop to 0.9: 0.18 per node recommends 2, but only once the
	// stabilization window no longer holds a higher recommendation.
	w.load.SetTotal(0.9)
	down := w.clock()
	w.stepUntil(14, "a scale in", func() bool { return w.desired() < 5 })
	first := w.scaled[len(w.scaled)-1]
	if wait := first.at.Sub(down); wait < 5*time.Minute || wait > 5*time.Minute+w.cfg.Interval.D() {
		t.Fatalf("the first scale in came %s after the drop, want after the 5m stabilization window, at the first cycle past it", wait)
	}
	if first.to != 4 {
		t.Fatalf("scale in %v, want 5 -> 4 (max_step 1)", first)
	}
	// The drain handshake: the least loaded server (web3) is drained, the
	// platform answers, and it is deleted at once, not at drain_timeout.
	asked := w.stepUntil(3, "a drain request", func() bool {
		snap, err := w.st.Snapshot(context.Background())
		return err == nil && len(snap.Scaling.Drains) > 0
	})
	snap, _ := w.st.Snapshot(context.Background())
	if _, ok := snap.Scaling.Drains["web3"]; !ok || len(snap.Scaling.Drains) != 1 {
		t.Fatalf("drain requests %v, want web3's only (the least loaded)", snap.Scaling.Drains)
	}
	steps := w.stepUntil(6, "web3 deleted", func() bool { return !strings.Contains(w.servers(), "web3,") && !strings.HasSuffix(w.servers(), "web3") })
	if time.Duration(steps)*w.cfg.Interval.D() >= w.cfg.Roles[0].DrainTimeout.D() {
		t.Fatalf("web3 deleted %d cycles after its drain was asked for and answered: it waited for drain_timeout", steps)
	}
	if hasMaintenance(t, w.c, "web3") || catalogHas(t, w.c, "web3") {
		t.Fatal("web3's node is still in the catalog")
	}
	t.Logf("load 3.0 -> 0.9: scale in after %s, drain asked %d cycle(s) later, web3 (the least loaded) deleted %d cycle(s) after that", first.at.Sub(down), asked, steps)

	// The next scale in waits for its cooldown, and the count stops at
	// ceil(0.9 / 0.6) = 2.
	w.stepUntil(40, "2 servers", func() bool { return w.desired() == 2 && w.serving() == 2 })
	ins := w.scaled[len(w.scaled)-3:]
	for i := 1; i < len(ins); i++ {
		if gap := ins[i].at.Sub(ins[i-1].at); gap < 5*time.Minute {
			t.Fatalf("scale ins %v only %s apart, inside the 5m cooldown", ins, gap)
		}
	}
	for range 6 {
		w.step()
	}
	if d := w.desired(); d != 2 {
		t.Fatalf("desired %d after the load settled at 0.9, want 2", d)
	}
	for i := 1; i < len(w.scaled); i++ {
		if w.scaled[i].to > w.scaled[i].from && w.scaled[i-1].to < w.scaled[i-1].from {
			t.Fatalf("the count changed direction: %v", w.scaled)
		}
	}
}
