package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/reaper"
	"github.com/jiocloud/orchestrate/reaper/daemon"
	"github.com/jiocloud/orchestrate/reaper/simcloud"
)

// The fault soak: reapers run against a real client agent (joined to a
// server, and restarted by the soak) and the simulated cloud while a
// seeded random schedule injects faults, and an invariant checker
// judges every drain and delete as it happens. SOAK_DURATION (default 60s,
// `make soak`: 5m) bounds the faults, SOAK_SEED replays a schedule.
//
// Faults that only make a machine look unhealthy (catalog blips, flapping
// checks, partitions) each last less than the graces, so a drain or delete
// of a machine the soak did not kill breaks the reaper's first rule, unless
// overlapping faults made it look unhealthy for a whole grace (then it is a
// health rule's target, as in production). Machine deaths are permanent and
// their machines must be replaced.

// soakGrace is critical_grace (and so absent_grace and error_grace).
const soakGrace = 3 * time.Second

const soakConfig = `
dry_run: false
prefix: ` + prefix + `
interval: 200ms
session_ttl: 2s
lock_delay: 1s
listen: ""
drain_period: 400ms
cloud_timeout: 5s
quota_backoff: 1s
quota_backoff_max: 4s
max_in_flight: 2
max_actions_per_hour: 1000
# The soak's machines run no drain handler: a scale-in (both servers of
# a replacement kept serving) deletes at drain_timeout, as it would be
# configured for such machines; aborted drains have their own tests.
roles:
  - name: web
    desired: 6
    min_healthy: 3
    boot_grace: 1s
    critical_grace: 3s
    boot_timeout: 20s
    on_drain_timeout: delete
    boot: {flavor: m1, image: debian, name_template: "web{n}"}
  - name: db
    desired: 3
    min_healthy: 2
    boot_grace: 1s
    critical_grace: 3s
    boot_timeout: 20s
    on_drain_timeout: delete
    boot: {flavor: m1, image: debian, name_template: "db{n}"}
`

// machine is the soak's truth about one server.
type machine struct {
	name, role string
	killed     bool
	// draining: the reaper drains it (its node is in maintenance).
	draining bool
}

// nodeLook is how the soak made one Consul node look. Two servers of one
// name (a create's late second server) share their node.
type nodeLook struct {
	// faults counts the look-unhealthy faults in force on it.
	faults int
	// unhealthySince: when it last started to look unhealthy (a fault, or
	// its machine's death); zero while it looks healthy.
	unhealthySince time.Time
	// longSpellEnd: when it last stopped looking unhealthy after doing so
	// for soakGrace or more (overlapping faults can make such a spell).
	longSpellEnd time.Time
}

// soak is one run's world and checker.
type soak struct {
	t    *testing.T
	seed uint64
	rng  *rand.Rand
	// c is the soak's own view (the server agent); the reapers talk to
	// agent, a client agent the soak restarts.
	c          *api.Client
	agent      *consultest.Agent
	restarting atomic.Bool
	// restarts: restarts under way; the soak settles after they end.
	restarts sync.WaitGroup
	sim      *simcloud.Cloud
	cfg      *reaper.Config
	store    *store.Store

	mu       sync.Mutex
	machines map[string]*machine  // by server ID
	nodes    map[string]*nodeLook // by node name
	// disarmedAt: when the soak last disarmed (zero when armed).
	disarmedAt time.Time
	kills      int
	maxKills   int
	faults     map[string]int
	actions    map[string]int
	trace      []string
	violations []string
	reapers    []*running
}

func soakSettings(t *testing.T) (time.Duration, uint64) {
	dur := 60 * time.Second
	if v := os.Getenv("SOAK_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("SOAK_DURATION: %v", err)
		}
		dur = d
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("SOAK_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("SOAK_SEED: %v", err)
		}
		seed = n
	}
	return dur, seed
}

func TestSoak(t *testing.T) {
	t.Parallel()
	dur, seed := soakSettings(t)
	s := newSoak(t, seed)
	s.maxKills = 1 + int(dur/time.Minute)
	t.Logf("soak: seed %d (rerun the schedule: SOAK_SEED=%d), %s of faults", seed, seed, dur)
	s.faultLoop(dur)
	s.settle(90 * time.Second)
	t.Log(s.summary())
	if len(s.violations) > 0 {
		t.Fatalf("seed %d: %d violation(s):\n%s\nrerun: SOAK_SEED=%d SOAK_DURATION=%s go test -run TestSoak -v ./reaper",
			seed, len(s.violations), strings.Join(s.violations, "\n"), seed, dur)
	}
}

func newSoak(t *testing.T, seed uint64) *soak {
	server := consultest.Start(t, consultest.Options{HCL: agentHCL})
	agent := consultest.Start(t, consultest.Options{JoinLAN: server.SerfLANAddr()})
	cfg, err := reaper.ParseConfig(strings.NewReader(soakConfig))
	if err != nil {
		t.Fatal(err)
	}
	if err := daemon.CheckConfig(cfg); err != nil {
		t.Fatal(err)
	}
	st, err := store.New(server.Client, prefix)
	if err != nil {
		t.Fatal(err)
	}
	s := &soak{t: t, seed: seed, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), c: server.Client, agent: agent, sim: simcloud.New(), cfg: cfg, store: st,
		machines: map[string]*machine{}, nodes: map[string]*nodeLook{}, faults: map[string]int{}, actions: map[string]int{}}
	s.sim.BootDelay = 300 * time.Millisecond
	s.sim.DeleteDelay = 500 * time.Millisecond
	s.sim.OnActive = s.booted
	s.sim.OnDelete = s.deleted
	for _, r := range []struct {
		name string
		n    int
	}{{"web", 6}, {"db", 3}} {
		for i := 1; i <= r.n; i++ {
			srv := s.sim.Add(reaper.Server{Name: fmt.Sprintf("%s%d", r.name, i), Created: time.Now().Add(-24 * time.Hour),
				Metadata: map[string]string{reaper.MetaRole: r.name}})
			s.booted(srv)
		}
	}
	arm(t, s.c)
	s.startReaper()
	s.startReaper()
	return s
}

// startReaper starts one more reaper copy; the soak's hook sees its actions.
func (s *soak) startReaper() {
	x := startReaper(s.t, s.cfg, s.agent.Client, s.sim, s.onAction)
	s.mu.Lock()
	s.reapers = append(s.reapers, x)
	s.mu.Unlock()
}

func (s *soak) logf(format string, args ...any) {
	line := time.Now().Format("15:04:05.000") + " " + fmt.Sprintf(format, args...)
	s.trace = append(s.trace, line)
	if len(s.trace) > 300 {
		s.trace = s.trace[len(s.trace)-300:]
	}
}

// violation records a broken invariant with the trace that led to it.
func (s *soak) violation(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.logf("VIOLATION: %s", msg)
	tail := s.trace
	if len(tail) > 40 {
		tail = tail[len(tail)-40:]
	}
	s.violations = append(s.violations, msg+"\n  trace:\n    "+strings.Join(tail, "\n    "))
}

// booted is the simulated cloud's OnActive: the machine's agent registers
// its node passing, unless the soak killed it meanwhile.
func (s *soak) booted(srv reaper.Server) {
	s.mu.Lock()
	m := &machine{name: srv.Name, role: srv.Metadata[reaper.MetaRole]}
	s.machines[srv.ID] = m
	s.logf("boot %s %s", srv.ID, srv.Name)
	s.mu.Unlock()
	if err := simcloud.RegisterNode(context.Background(), s.c, srv.Name, m.role, api.HealthPassing); err != nil {
		s.t.Errorf("register %s: %v", srv.Name, err)
	}
}

// judge checks one destructive step on server id (a drain or a delete).
// Caller holds mu.
func (s *soak) judge(what, id, name, journal string) {
	m := s.machines[id]
	look := s.node(name)
	now := time.Now()
	switch {
	case m == nil:
		// A server the cloud made but that never booted (a late create
		// still hidden): nothing served on it.
	case m.killed:
	case !look.unhealthySince.IsZero() && now.Sub(look.unhealthySince) >= soakGrace:
		// Overlapping faults made it look unhealthy for the grace: a
		// health rule's target, as a real partition would make it.
	case now.Sub(look.longSpellEnd) < time.Second:
		// It recovered from such a spell as the step was being taken.
	case journal != "" && s.sharesJournal(id, journal):
	default:
		since := "it looked healthy"
		if !look.unhealthySince.IsZero() {
			since = "it looked unhealthy since " + look.unhealthySince.Format("15:04:05.000")
		}
		s.violation("%s of %s (%s), a machine the soak never killed: %s (faults in force %d)", what, name, id, since, look.faults)
	}
	if !s.disarmedAt.IsZero() && now.Sub(s.disarmedAt) > time.Second {
		s.violation("%s of %s %v after the reaper was disarmed", what, name, now.Sub(s.disarmedAt).Round(time.Millisecond))
	}
	if frac, since := s.unhealthyFraction(now); frac > 0.5 && now.Sub(since) > time.Second {
		s.violation("%s of %s while %.0f%% of the fleet has looked unhealthy since %v (the partition pause)", what, name, 100*frac, since.Format("15:04:05.000"))
	}
}

// sharesJournal: another server carries the same journal entry ID (a
// duplicate, which the reaper deletes).
func (s *soak) sharesJournal(id, journal string) bool {
	for _, o := range s.sim.Servers() {
		if o.ID != id && o.Metadata[reaper.MetaJournal] == journal {
			return true
		}
	}
	return false
}

// unhealthyFraction is the share of machines that look unhealthy, as the
// reaper's partition pause counts them (a machine it drains counts, but
// not as unhealthy: it is in maintenance), and since when that share has
// held (the latest start among them).
func (s *soak) unhealthyFraction(now time.Time) (float64, time.Time) {
	var total, bad int
	var since time.Time
	for _, m := range s.machines {
		total++
		if look := s.node(m.name); !look.unhealthySince.IsZero() && !m.draining {
			bad++
			if look.unhealthySince.After(since) {
				since = look.unhealthySince
			}
		}
	}
	if total == 0 {
		return 0, now
	}
	return float64(bad) / float64(total), since
}

// deleted is the simulated cloud's OnDelete.
func (s *soak) deleted(srv reaper.Server) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.logf("delete %s %s", srv.ID, srv.Name)
	s.judge("delete", srv.ID, srv.Name, srv.Metadata[reaper.MetaJournal])
	delete(s.machines, srv.ID)
	for _, m := range s.machines {
		if m.name == srv.Name {
			return
		}
	}
	delete(s.nodes, srv.Name) // the node goes with its last machine

}

// onAction sees every action of every reaper copy, and sometimes kills
// the leader right after one, at any step of a replacement.
func (s *soak) onAction(x *running, a reaper.Action) {
	s.mu.Lock()
	s.actions[string(a.Op)]++
	s.logf("%s [entry %s %s %q new=%s/%s old=%s/%s]", a.String(), a.Entry.ID, a.Entry.Kind, a.Entry.Reason, a.Entry.NewName, a.Entry.NewID, a.Entry.OldName, a.Entry.OldID)
	switch a.Op {
	case reaper.OpDrain:
		s.judge("drain", a.Entry.OldID, a.Entry.OldName, "")
		if m := s.machines[a.Entry.OldID]; m != nil {
			m.draining = true
		}
	case reaper.OpRestore:
		if m := s.machines[a.Entry.OldID]; m != nil {
			m.draining = false
		}
	}
	kill := s.kills < s.maxKills && s.rng.IntN(40) == 0
	if kill {
		s.kills++
		s.faults["leader kill"]++
		s.logf("FAULT leader kill after %s", a.Op)
	}
	s.mu.Unlock()
	if kill {
		x.kill()
		go s.startReaper()
	}
}

// node returns the look of node name. Caller holds mu.
func (s *soak) node(name string) *nodeLook {
	l := s.nodes[name]
	if l == nil {
		l = &nodeLook{}
		s.nodes[name] = l
	}
	return l
}

// setLook makes machine id's node look unhealthy (critical, or absent from
// the catalog) or, once no fault is left on it, healthy again, unless its
// machine died or no machine of that name is left.
func (s *soak) setLook(id string, unhealthy, absent bool) {
	s.mu.Lock()
	m := s.machines[id]
	if m == nil {
		s.mu.Unlock()
		return
	}
	name, role := m.name, m.role
	look := s.node(name)
	if unhealthy {
		look.faults++
		if look.unhealthySince.IsZero() {
			look.unhealthySince = time.Now()
		}
	} else if look.faults > 0 {
		look.faults--
	}
	dead := false
	for _, o := range s.machines {
		dead = dead || (o.name == name && o.killed)
	}
	healthy := look.faults == 0 && !dead
	if healthy && !look.unhealthySince.IsZero() {
		if time.Since(look.unhealthySince) >= soakGrace {
			look.longSpellEnd = time.Now()
		}
		look.unhealthySince = time.Time{}
	}
	s.logf("  look %s (%s): unhealthy=%v absent=%v -> faults %d", name, id, unhealthy, absent, look.faults)
	s.mu.Unlock()
	ctx := context.Background()
	switch {
	case absent && unhealthy:
		s.c.Catalog().Deregister(&api.CatalogDeregistration{Node: name}, nil)
	case healthy:
		simcloud.RegisterNode(ctx, s.c, name, role, api.HealthPassing)
	case unhealthy:
		simcloud.RegisterNode(ctx, s.c, name, role, api.HealthCritical)
	}
}

// pick returns the IDs of up to n live machines the soak has not killed,
// chosen by the seeded generator.
func (s *soak) pick(n int) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for id, m := range s.machines {
		if !m.killed {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	s.rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	return ids[:min(n, len(ids))]
}

// look makes ids look unhealthy for d (absent from the catalog, or
// critical), then healthy again: the fault is on their nodes, and ends
// through any live machine of the same name (a deleted duplicate's node is
// its sibling's).
func (s *soak) look(ids []string, d time.Duration, absent bool) {
	names := map[string]string{}
	s.mu.Lock()
	for _, id := range ids {
		if m := s.machines[id]; m != nil {
			names[id] = m.name
		}
	}
	s.mu.Unlock()
	for _, id := range ids {
		s.setLook(id, true, absent)
	}
	time.AfterFunc(d, func() {
		for id, name := range names {
			s.setLook(s.liveOf(id, name), false, absent)
		}
	})
}

// liveOf returns id if its machine is live, else a live machine of the
// same name ("" when none: the fault ends with the node).
func (s *soak) liveOf(id, name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.machines[id] != nil {
		return id
	}
	for oid, m := range s.machines {
		if m.name == name {
			return oid
		}
	}
	return ""
}

// faultLoop injects one fault about every 700 ms for dur.
func (s *soak) faultLoop(dur time.Duration) {
	end := time.Now().Add(dur)
	for time.Now().Before(end) {
		s.mu.Lock()
		kind := s.rng.IntN(14)
		jitter := time.Duration(s.rng.IntN(400)) * time.Millisecond
		short := time.Duration(300+s.rng.IntN(1200)) * time.Millisecond // < soakGrace/2
		frac := 0.3 + 0.4*s.rng.Float64()
		s.mu.Unlock()
		s.inject(kind, short, frac)
		time.Sleep(500*time.Millisecond + jitter)
	}
	s.restarts.Wait()
	s.mu.Lock()
	s.logf("faults stop")
	s.mu.Unlock()
}

func (s *soak) fault(name string) {
	s.mu.Lock()
	s.faults[name]++
	s.logf("FAULT %s", name)
	s.mu.Unlock()
}

func (s *soak) inject(kind int, short time.Duration, frac float64) {
	switch kind {
	case 0:
		s.fault("catalog blip")
		s.look(s.pick(1), short, true)
	case 1:
		s.fault("flapping check")
		ids := s.pick(1)
		s.look(ids, short/3, false)
		time.AfterFunc(short/2, func() { s.look(ids, short/3, false) })
	case 2:
		s.mu.Lock()
		n := len(s.machines)
		s.mu.Unlock()
		s.fault(fmt.Sprintf("partition %d%%", int(100*frac)/10*10))
		s.look(s.pick(int(frac*float64(n))), short, false)
	case 3:
		ids := s.pick(1)
		if len(ids) == 0 || s.killedAlive() > 0 {
			// One death at a time: more dead than the partition pause
			// allows would (rightly) hold every replacement for good.
			return
		}
		s.fault("machine death")
		s.mu.Lock()
		s.machines[ids[0]].killed = true
		s.mu.Unlock()
		s.setLook(ids[0], true, false)
	case 4:
		s.fault("nova list errors")
		s.sim.FailLists(&reaper.CloudError{Class: reaper.Transient, Op: "list servers", Err: errors.New("503 service unavailable")})
		time.AfterFunc(short, func() { s.sim.FailLists(nil) })
	case 5:
		s.fault("truncated nova lists")
		s.sim.TruncateLists(3)
	case 6:
		s.fault("create timeout that succeeds later")
		s.sim.LateCreates(1, short)
	case 7:
		s.fault("409 deletes")
		s.sim.FailDeletes(2, &reaper.CloudError{Class: reaper.Conflict, Op: "delete server", Err: errors.New("409 Cannot 'delete' instance while it is in task_state locked")})
	case 8:
		s.fault("quota exhausted")
		s.sim.SetQuota(len(s.sim.Servers()))
		time.AfterFunc(short, func() { s.sim.SetQuota(0) })
	case 9:
		s.disarmFor(short)
	case 10:
		s.restartAgent(short)
	case 11:
		ids := s.pick(1)
		if len(ids) == 0 {
			return
		}
		name := s.nameOf(ids[0])
		s.fault("partial nova record")
		s.sim.SetPartial(name, true)
		time.AfterFunc(short, func() { s.sim.SetPartial(name, false) })
	case 12:
		s.fault("deletes accepted, not carried out")
		s.sim.StuckDeletes(2)
	case 13:
		s.fault("soft deletes")
		s.sim.SoftDeletes(2)
	}
}

// nameOf is the name of machine id.
func (s *soak) nameOf(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m := s.machines[id]; m != nil {
		return m.name
	}
	return ""
}

// restartAgent restarts the reapers' Consul agent (down for d), one restart
// at a time: their sessions, reads and writes fail meanwhile.
func (s *soak) restartAgent(d time.Duration) {
	if !s.restarting.CompareAndSwap(false, true) {
		return
	}
	s.fault("consul agent restart")
	s.restarts.Add(1)
	go func() {
		defer s.restarts.Done()
		defer s.restarting.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		start := time.Now()
		if err := s.agent.Restart(ctx, d); err != nil {
			log, _ := os.ReadFile(s.agent.LogPath)
			if len(log) > 20000 {
				log = log[len(log)-20000:]
			}
			s.t.Errorf("restart the reapers' agent: %v\nits log:\n%s", err, log)
		}
		s.mu.Lock()
		s.logf("consul agent back after %s", time.Since(start).Round(time.Millisecond))
		s.mu.Unlock()
	}()
}

// killedAlive counts killed machines not yet deleted.
func (s *soak) killedAlive() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, m := range s.machines {
		if m.killed {
			n++
		}
	}
	return n
}

// disarmFor disarms the reaper for d, then arms it again.
func (s *soak) disarmFor(d time.Duration) {
	s.fault("disarm")
	ctx := context.Background()
	if err := s.store.Disarm(ctx, reaperkv.ArmRecord{Time: time.Now(), By: "soak", Reason: "fault"}); err != nil {
		s.t.Errorf("disarm: %v", err)
		return
	}
	s.mu.Lock()
	s.disarmedAt = time.Now()
	s.mu.Unlock()
	time.AfterFunc(d, func() {
		s.mu.Lock()
		s.disarmedAt = time.Time{}
		s.mu.Unlock()
		if err := s.store.Arm(ctx, reaperkv.ArmRecord{Time: time.Now(), By: "soak", Reason: "fault over"}); err != nil {
			s.t.Errorf("arm: %v", err)
		}
	})
}

// settle waits, faults over, until every role is back at its desired count
// of live, healthy machines, one server per journal entry and no entry in
// flight.
func (s *soak) settle(bound time.Duration) {
	time.Sleep(2 * time.Second) // the last faults' timers end
	deadline := time.Now().Add(bound)
	var why string
	for time.Now().Before(deadline) {
		if why = s.unsettled(); why == "" {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	state := "no state report"
	if rep, err := readReport(s.c); err == nil && rep != nil {
		j := make([]string, 0, len(rep.Journal))
		for _, e := range rep.Journal {
			j = append(j, fmt.Sprintf("%s %s %s new=%s/%s old=%s/%s asked=%v", e.ID, e.Kind, e.Phase, e.NewName, e.NewID, e.OldName, e.OldID, !e.DeleteAsked.IsZero()))
		}
		state = fmt.Sprintf("paused %v %q; not armed %q; blocked %q; journal %q", rep.Paused, rep.PauseReason, rep.NotArmedReason, rep.Blocked, j)
	}
	s.mu.Lock()
	s.violation("not settled %s after the faults stopped: %s\n  the reaper's last state: %s\n  servers: %s", bound, why, state, describeServers(s.sim.Servers()))
	s.mu.Unlock()
}

func (s *soak) unsettled() string {
	servers := s.sim.Servers()
	count := map[string]int{}
	byJournal := map[string]int{}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, srv := range servers {
		if srv.Gone() {
			continue // soft-deleted: kept by the cloud, no machine
		}
		m := s.machines[srv.ID]
		if m == nil || m.killed || s.node(m.name).faults > 0 {
			return srv.Name + " is not a live, healthy machine"
		}
		count[m.role]++
		if j := srv.Metadata[reaper.MetaJournal]; j != "" {
			if byJournal[j]++; byJournal[j] > 1 {
				return "two servers of journal entry " + j
			}
		}
	}
	if count["web"] != 6 || count["db"] != 3 {
		return fmt.Sprintf("web %d of 6, db %d of 3", count["web"], count["db"])
	}
	if keys, _, err := s.c.KV().Keys(prefix+"/reaper/journal/", "", nil); err != nil || len(keys) > 0 {
		return fmt.Sprintf("journal entries in flight: %v %v", keys, err)
	}
	return ""
}

func (s *soak) summary() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "soak seed %d\n  faults injected:", s.seed)
	for _, k := range sortedKeys(s.faults) {
		fmt.Fprintf(&b, " %s %d;", k, s.faults[k])
	}
	b.WriteString("\n  reaper actions:")
	for _, k := range sortedKeys(s.actions) {
		fmt.Fprintf(&b, " %s %d;", k, s.actions[k])
	}
	fmt.Fprintf(&b, "\n  cloud calls: %d lists, %d creates, %d deletes; violations: %d",
		s.sim.Lists.Load(), s.sim.Creates.Load(), s.sim.Deletes.Load(), len(s.violations))
	return b.String()
}

func sortedKeys(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func describeServers(ss []reaper.Server) string {
	out := make([]string, 0, len(ss))
	for _, s := range ss {
		out = append(out, fmt.Sprintf("%s/%s %s", s.Name, s.ID, s.Status))
	}
	return strings.Join(out, ", ")
}
