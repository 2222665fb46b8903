package reaper

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/store"
)

// callTimeout bounds one cloud API call (a create, a get, a delete), so a
// hung Nova cannot stall the loop; waits for ACTIVE or gone are bounded by
// cloud_timeout.
const callTimeout = 2 * time.Minute

// Reaper is the daemon: it registers itself in Consul, waits for the leader
// lock and, while it holds it, runs a cycle every interval: observe (one
// Nova list, one Consul health query, the KV keys), plan, act.
type Reaper struct {
	cfg     *Config
	client  *api.Client
	cloud   Cloud
	log     *slog.Logger
	journal *Journal
	store   *store.Store
	metrics *Metrics
	id      string

	// Now is the clock; tests may replace it before Run.
	Now func() time.Time
	// PollInterval is how often a server's status is polled while waiting
	// for ACTIVE or gone.
	PollInterval time.Duration

	// Leader-only memory, touched only by the leading goroutine.
	critSince    map[string]time.Time
	quota        backoffState             // project-wide: quota exceeded
	roleBackoff  map[string]*backoffState // per role: capacity, fatal create errors
	lastPause    string
	lastNotArmed string
	lastCycleErr string

	// statusMu guards the fields the heartbeat reads.
	statusMu    sync.Mutex
	leading     bool
	cycleStart  time.Time
	lastCycleOK bool
	lastErr     string

	// abandon: test hook making the next loss of leadership behave like a
	// killed process (no unlock, no session destroy).
	abandon atomic.Bool
	// afterAction: test hook called after each action is carried out.
	afterAction func(Action)
}

// New returns a reaper. cfg must be validated.
func New(cfg *Config, client *api.Client, cloud Cloud, log *slog.Logger) (*Reaper, error) {
	st, err := store.New(client, cfg.Prefix)
	if err != nil {
		return nil, fmt.Errorf("prefix: %w", err)
	}
	host, _ := os.Hostname()
	var b [3]byte
	rand.Read(b[:])
	return &Reaper{
		cfg:          cfg,
		client:       client,
		cloud:        cloud,
		log:          log,
		journal:      NewJournal(client, cfg.Prefix, cfg.LeaderKey()),
		store:        st,
		metrics:      NewMetrics(),
		id:           fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:])),
		Now:          time.Now,
		PollInterval: time.Second,
	}, nil
}

// Metrics returns the reaper's metrics (served on /metrics by Run).
func (r *Reaper) Metrics() *Metrics { return r.metrics }

// ID names this reaper instance (host, pid, random suffix).
func (r *Reaper) ID() string { return r.id }

func (r *Reaper) serviceID() string { return r.cfg.ServiceName + "-" + r.id }
func (r *Reaper) checkID() string   { return "reaper-alive-" + r.id }

// Run registers the reaper as a Consul service, serves /metrics, and
// leads whenever it holds the lock, until ctx ends.
func (r *Reaper) Run(ctx context.Context) error {
	var srv *http.Server
	port := 0
	if r.cfg.Listen != "" {
		ln, err := net.Listen("tcp", r.cfg.Listen)
		if err != nil {
			return fmt.Errorf("listen %s: %w", r.cfg.Listen, err)
		}
		port = ln.Addr().(*net.TCPAddr).Port
		mux := http.NewServeMux()
		mux.Handle("/metrics", r.metrics)
		srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go srv.Serve(ln)
		defer srv.Close()
		r.log.Info("serving metrics", "addr", ln.Addr().String())
	}
	ttl := 3 * r.cfg.Interval.D()
	if ttl < 10*time.Second {
		ttl = 10 * time.Second
	}
	reg := &api.AgentServiceRegistration{
		ID:   r.serviceID(),
		Name: r.cfg.ServiceName,
		Port: port,
		Meta: map[string]string{"instance": r.id},
		Check: &api.AgentServiceCheck{
			CheckID:                        r.checkID(),
			Name:                           "reaper loop alive",
			TTL:                            ttl.String(),
			DeregisterCriticalServiceAfter: "72h",
		},
	}
	if err := r.client.Agent().ServiceRegisterOpts(reg, api.ServiceRegisterOpts{}.WithContext(ctx)); err != nil {
		return fmt.Errorf("register service %s: %w", r.cfg.ServiceName, err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if r.abandon.Load() {
			return
		}
		r.client.Agent().ServiceDeregisterOpts(r.serviceID(), (&api.QueryOptions{}).WithContext(dctx))
	}()
	hbCtx, stopHB := context.WithCancel(ctx)
	defer stopHB()
	go r.runHeartbeat(hbCtx, ttl/3)
	r.runLeadership(ctx)
	return nil
}

// runHeartbeat refreshes the TTL check: passing while the loop is alive,
// warning after a failed cycle, critical when a cycle is stuck.
func (r *Reaper) runHeartbeat(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		r.statusMu.Lock()
		status, note := api.HealthPassing, "standby"
		if r.leading {
			note = "leader"
			if !r.lastCycleOK && r.lastErr != "" {
				status, note = api.HealthWarning, "leader; last cycle failed: "+r.lastErr
			}
			if !r.cycleStart.IsZero() && time.Since(r.cycleStart) > 3*r.cfg.Interval.D()+2*r.cfg.CloudTimeout.D()+r.cfg.DrainPeriod.D() {
				status, note = api.HealthCritical, "leader; cycle stuck since "+r.cycleStart.Format(time.RFC3339)
			}
		}
		r.statusMu.Unlock()
		if err := r.client.Agent().UpdateTTLOpts(r.checkID(), note, status, (&api.QueryOptions{}).WithContext(ctx)); err != nil && ctx.Err() == nil {
			r.log.Debug("update ttl check", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// lead runs cycles while ctx (cancelled on loss of the lock) lives.
func (r *Reaper) lead(ctx context.Context, session string) {
	// A new leader starts its memory afresh: every critical node gets a
	// full grace again, which errs on the side of waiting.
	r.critSince = nil
	r.lastPause, r.lastNotArmed, r.lastCycleErr = "", "", ""
	r.setLeading(true)
	defer r.setLeading(false)
	t := time.NewTicker(r.cfg.Interval.D())
	defer t.Stop()
	for {
		r.Cycle(ctx, session)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (r *Reaper) setLeading(v bool) {
	r.statusMu.Lock()
	r.leading = v
	r.cycleStart = time.Time{}
	r.statusMu.Unlock()
}

// observation is what one cycle read.
type observation struct {
	servers   []Server
	checks    []Check
	desired   map[string]int
	validated map[string]bool
	keys      *ReaperKeys
}

// observe reads everything a cycle needs: exactly one Nova list and one
// Consul health query, plus the KV prefix and the reaper's keys. Any error
// means no action this cycle.
func (r *Reaper) observe(ctx context.Context) (*observation, error) {
	lctx, cancel := context.WithTimeout(ctx, r.cfg.CloudTimeout.D())
	servers, err := r.cloud.List(lctx)
	cancel()
	if err != nil {
		r.metrics.cloudError(err)
		return nil, fmt.Errorf("list servers: %w", err)
	}
	hcs, meta, err := r.client.Health().State(api.HealthAny, (&api.QueryOptions{AllowStale: false}).WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("consul health query: %w", err)
	}
	// Consul leaves out what the token may not read and still answers 200:
	// a hidden node would look absent, and its server unaccounted.
	if meta != nil && meta.ResultsFilteredByACLs {
		return nil, errors.New("consul health query: some checks are hidden by ACLs: the reaper's token needs node:read and service:read on every node and service")
	}
	checks := make([]Check, len(hcs))
	for i, c := range hcs {
		checks[i] = Check{Node: c.Node, CheckID: c.CheckID, Name: c.Name, Status: c.Status}
	}
	snap, err := r.store.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	// A desired count hidden by ACLs would look unset, and the file's count
	// would take over (scaling the role in). The snapshot does not say
	// whether keys were filtered out; listing the role keys does.
	_, kmeta, err := r.client.KV().Keys(r.cfg.Prefix+"/roles/", "", (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("read %s/roles/: %w", r.cfg.Prefix, err)
	}
	if kmeta != nil && kmeta.ResultsFilteredByACLs {
		return nil, fmt.Errorf("cannot read a desired count: keys under %s/roles/ are hidden by ACLs: the reaper's token needs key:read on them", r.cfg.Prefix)
	}
	for _, p := range snap.Problems {
		if strings.Contains(p.Key, "/roles/") {
			return nil, fmt.Errorf("cannot read a desired count: %s", p)
		}
	}
	validated := map[string]bool{}
	for name, h := range snap.Hosts {
		if st, ok := h.Status["validation"]; ok && st.State == store.StateSuccess && !st.Corrupt {
			validated[name] = true
		}
	}
	keys, err := r.journal.Read(ctx)
	if err != nil {
		return nil, err
	}
	if len(keys.Problems) > 0 {
		return nil, fmt.Errorf("cannot read the journal: %s", strings.Join(keys.Problems, "; "))
	}
	return &observation{servers: servers, checks: checks, desired: snap.Desired, validated: validated, keys: keys}, nil
}

// Cycle runs one observe-plan-act round as the holder of session. It is
// exported for tests and for a one-shot run; Run calls it every interval.
func (r *Reaper) Cycle(ctx context.Context, session string) *Plan {
	start := r.Now()
	r.statusMu.Lock()
	r.cycleStart = time.Now()
	r.statusMu.Unlock()
	dry := r.cfg.IsDryRun()
	obs, err := r.observe(ctx)
	if err != nil {
		r.cycleFailed(ctx, session, start, err)
		return nil
	}
	in := Input{
		Now: start, Config: r.cfg, Servers: obs.servers, Checks: obs.checks,
		Desired: obs.desired, Journal: obs.keys.Entries, Armed: obs.keys.Armed != nil,
		Validated: obs.validated, CriticalSince: r.critSince, Destructive: obs.keys.Destructive,
		BackoffUntil: r.quota.until, RoleBackoff: r.roleBackoffs(),
	}
	plan := in.Plan()
	if r.lastCycleErr != "" {
		r.log.Info("cycle data readable again")
		r.lastCycleErr = ""
	}
	r.critSince = plan.CriticalSince
	if plan.PauseReason != r.lastPause {
		if plan.Paused {
			r.log.Warn("pausing destructive actions", "reason", plan.PauseReason)
		} else {
			r.log.Info("pause over: destructive actions allowed again")
		}
		r.lastPause = plan.PauseReason
	}
	if plan.NotArmedReason != r.lastNotArmed {
		if plan.NotArmedReason != "" {
			r.log.Info("start gate closed", "reason", plan.NotArmedReason)
		}
		r.lastNotArmed = plan.NotArmedReason
	}
	var errs []string
	if plan.ArmNow && !dry {
		err := r.journal.Arm(ctx, session, Armed{Time: start, By: r.id, Reason: "every role reached its desired count with validation success"})
		if err != nil {
			errs = append(errs, "arm: "+err.Error())
		} else {
			r.log.Info("start gate open: every role reached its desired count with validation success")
		}
	}
	budget := recent(obs.keys.Destructive, start)
	for _, a := range plan.Actions {
		if dry {
			r.log.Info("dry run: would "+string(a.Op), "role", a.Entry.Role, "action", a.String(), "entry", a.Entry.ID)
			r.metrics.action(a.Op, "dry_run")
			continue
		}
		if ctx.Err() != nil {
			break
		}
		if a.Op == OpCreate && (start.Before(r.quota.until) || start.Before(r.backoffOf(a.Entry.Role).until)) {
			// A create earlier in this cycle hit the quota (or this role's
			// own backoff): the rest wait.
			r.metrics.action(a.Op, "skipped")
			continue
		}
		err := r.execute(ctx, session, a, &budget)
		if err != nil {
			r.metrics.action(a.Op, "failed")
			r.log.Error("action failed", "action", a.String(), "entry", a.Entry.ID, "err", err)
			errs = append(errs, a.String()+": "+err.Error())
			if errors.Is(err, ErrNotLeader) {
				break
			}
			continue
		}
		r.metrics.action(a.Op, "done")
		if a.Op != OpMaintain {
			r.log.Info(string(a.Op), "role", a.Entry.Role, "action", a.String(), "entry", a.Entry.ID)
		}
		if r.afterAction != nil {
			r.afterAction(a)
		}
	}
	now := r.Now()
	st := r.state(plan, obs.keys.Entries, now, errs)
	if ctx.Err() == nil {
		if err := r.journal.PutState(ctx, session, st); err != nil {
			r.log.Warn("write state", "err", err)
		}
	}
	roleLeft := map[string]time.Duration{}
	for role, b := range r.roleBackoff {
		roleLeft[role] = b.until.Sub(now)
	}
	r.metrics.cycle(plan, dry, r.quota.until.Sub(now), roleLeft, time.Since(r.cycleStartTime()), false, now)
	r.statusMu.Lock()
	r.lastCycleOK, r.lastErr = len(errs) == 0, strings.Join(errs, "; ")
	r.statusMu.Unlock()
	return plan
}

func (r *Reaper) cycleStartTime() time.Time {
	r.statusMu.Lock()
	defer r.statusMu.Unlock()
	return r.cycleStart
}

func (r *Reaper) cycleFailed(ctx context.Context, session string, start time.Time, err error) {
	if ctx.Err() != nil {
		return // stopping, or lost the lock: not a failure of the data
	}
	// One line per change of the problem, not per cycle.
	if err.Error() != r.lastCycleErr {
		r.log.Error("cycle skipped: no action on data that could not be read", "err", err)
	} else {
		r.log.Debug("cycle skipped again", "err", err)
	}
	r.lastCycleErr = err.Error()
	r.metrics.cycle(nil, r.cfg.IsDryRun(), 0, nil, time.Since(r.cycleStartTime()), true, r.Now())
	r.statusMu.Lock()
	r.lastCycleOK, r.lastErr = false, err.Error()
	r.statusMu.Unlock()
	st := &State{Time: start, Leader: r.id, DryRun: r.cfg.IsDryRun(), Interval: r.cfg.Interval, Errors: []string{"cycle skipped: " + err.Error()}}
	if perr := r.journal.PutState(ctx, session, st); perr != nil {
		r.log.Debug("write state", "err", perr)
	}
}

func recent(ts []time.Time, now time.Time) []time.Time {
	out := []time.Time{}
	for _, t := range ts {
		if now.Sub(t) < time.Hour {
			out = append(out, t)
		}
	}
	return out
}

func (r *Reaper) state(p *Plan, journal []Entry, now time.Time, errs []string) *State {
	st := &State{
		Time: now, Leader: r.id, DryRun: r.cfg.IsDryRun(), Interval: r.cfg.Interval,
		Armed: p.Armed, NotArmedReason: p.NotArmedReason, Paused: p.Paused, PauseReason: p.PauseReason,
		Roles: p.Roles, Unassigned: p.Unassigned, Blocked: p.Blocked, Journal: journal, Errors: errs,
		Planned: []string{},
	}
	if now.Before(r.quota.until) {
		st.BackoffUntil, st.BackoffReason = r.quota.until, r.quota.reason
	}
	for role, b := range r.roleBackoff {
		if now.Before(b.until) {
			if st.RoleBackoff == nil {
				st.RoleBackoff = map[string]RoleBackoff{}
			}
			st.RoleBackoff[role] = RoleBackoff{Until: b.until, Reason: b.reason}
		}
	}
	for _, a := range p.Actions {
		if a.Op != OpMaintain {
			st.Planned = append(st.Planned, a.String())
		}
	}
	if len(st.Blocked) > 100 {
		st.Blocked = append(st.Blocked[:100], fmt.Sprintf("... and %d more", len(p.Blocked)-100))
	}
	return st
}

// backoffState is one exponential, capped backoff.
type backoffState struct {
	until  time.Time
	step   time.Duration
	reason string
}

// bump starts or doubles the backoff (capped).
func (b *backoffState) bump(now time.Time, initial, max time.Duration, err error) time.Duration {
	if b.step == 0 {
		b.step = initial
	} else {
		b.step *= 2
	}
	if b.step > max {
		b.step = max
	}
	b.until, b.reason = now.Add(b.step), err.Error()
	return b.step
}

func (r *Reaper) backoffOf(role string) *backoffState {
	if r.roleBackoff == nil {
		r.roleBackoff = map[string]*backoffState{}
	}
	b := r.roleBackoff[role]
	if b == nil {
		b = &backoffState{}
		r.roleBackoff[role] = b
	}
	return b
}

func (r *Reaper) roleBackoffs() map[string]time.Time {
	out := map[string]time.Time{}
	for role, b := range r.roleBackoff {
		out[role] = b.until
	}
	return out
}

// backoff starts or extends a backoff after a failed create: quota errors
// stop every create (the quota is the project's); capacity and fatal
// errors (no valid host, a bad flavor or image) stop the role's creates.
func (r *Reaper) backoff(role string, err error) {
	b, what := r.backoffOf(role), "role "+role
	if ClassOf(err) == Quota {
		b, what = &r.quota, "every role"
	}
	d := b.bump(r.Now(), r.cfg.QuotaBackoff.D(), r.cfg.QuotaBackoffMax.D(), err)
	r.log.Warn("create failed: backing off creates", "of", what, "for", d, "class", ClassOf(err).String(), "err", err)
}

// backoffReset ends the backoff steps after a create succeeded.
func (r *Reaper) backoffReset(role string) {
	r.quota.step = 0
	r.backoffOf(role).step = 0
}

// execute carries out one action. The journal entry is written before
// every cloud call (the intent), and updated or removed after it.
func (r *Reaper) execute(ctx context.Context, session string, a Action, budget *[]time.Time) error {
	e := a.Entry
	role := r.cfg.Role(e.Role)
	if role == nil {
		return fmt.Errorf("role %q is not configured", e.Role)
	}
	put := func(e Entry, b []time.Time) error {
		e.Updated = r.Now()
		return r.journal.Put(ctx, session, e, b)
	}
	switch a.Op {
	case OpAdopt:
		return put(e, nil)
	case OpFinish:
		return r.journal.Remove(ctx, session, e.ID)
	case OpDeregister:
		return r.deregister(ctx, e.OldName)
	case OpMaintain:
		return r.maintenance(ctx, e)
	case OpDrain:
		*budget = append(*budget, r.Now())
		if err := put(e, *budget); err != nil {
			return err
		}
		return r.maintenance(ctx, e)
	case OpCreate:
		return r.create(ctx, session, role, e, put)
	case OpDelete:
		if err := put(e, nil); err != nil {
			return err
		}
		if err := r.deleteServer(ctx, e.OldID); err != nil {
			return err
		}
		if err := r.deregister(ctx, e.OldName); err != nil {
			return err // the entry stays in deleting; the next cycle retries
		}
		if e.Kind == KindReplace && e.Mode == ModeDeleteFirst {
			e.Phase, e.OldID = PhaseCreating, ""
			return put(e, nil)
		}
		return r.journal.Remove(ctx, session, e.ID)
	case OpRollback:
		if err := put(e, nil); err != nil {
			return err
		}
		id := e.NewID
		if id != "" {
			if err := r.deleteServer(ctx, id); err != nil {
				return err
			}
			if err := r.deregister(ctx, e.NewName); err != nil {
				return err
			}
		}
		return r.journal.Remove(ctx, session, e.ID)
	}
	return fmt.Errorf("unknown operation %q", a.Op)
}

// create writes the intent, creates the server with metadata naming the
// entry, records its ID, and waits (bounded) for it to become ACTIVE.
func (r *Reaper) create(ctx context.Context, session string, role *Role, e Entry, put func(Entry, []time.Time) error) error {
	e.Attempts++
	e.Phase = PhaseCreating
	if err := put(e, nil); err != nil {
		return err
	}
	meta := map[string]string{}
	for k, v := range role.Boot.Metadata {
		meta[k] = v
	}
	meta[MetaRole], meta[MetaJournal] = role.Name, e.ID
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	s, err := r.cloud.Create(cctx, CreateRequest{Name: e.NewName, Role: role, Metadata: meta, Tags: role.Boot.Tags})
	cancel()
	if err != nil {
		r.metrics.cloudError(err)
		class := ClassOf(err)
		if class != Transient {
			r.backoff(role.Name, err)
		}
		// Quota, capacity and fatal errors mean Nova made nothing: drop the
		// intent, unless the old server is already gone (delete-first),
		// whose replacement must still be made. A transient error may have
		// created the server: the entry stays, and the next cycle finds the
		// server by its metadata or creates it again.
		if class != Transient && !(e.Kind == KindReplace && e.Mode == ModeDeleteFirst) {
			if rerr := r.journal.Remove(ctx, session, e.ID); rerr != nil {
				return errors.Join(err, rerr)
			}
		}
		return err
	}
	r.backoffReset(role.Name)
	e.Phase, e.NewID = PhaseBooting, s.ID
	if err := put(e, nil); err != nil {
		return err
	}
	got, err := r.waitStatus(ctx, s.ID)
	if err != nil {
		return err
	}
	if got.Status == StatusError {
		ferr := &CloudError{Class: Fatal, Op: "boot " + e.NewName, Err: fmt.Errorf("server went to ERROR: %s", got.Fault)}
		if strings.Contains(got.Fault, "No valid host") {
			ferr.Class = Capacity
		}
		r.backoff(role.Name, ferr)
		r.metrics.cloudError(ferr)
		e.Phase, e.Error = PhaseRollback, ferr.Error()
		if err := put(e, nil); err != nil {
			return err
		}
		if err := r.deleteServer(ctx, s.ID); err != nil {
			return errors.Join(ferr, err)
		}
		if err := r.journal.Remove(ctx, session, e.ID); err != nil {
			return errors.Join(ferr, err)
		}
		return ferr
	}
	return nil
}

// waitStatus polls until the server leaves BUILD, or cloud_timeout passes
// (then the entry stays in booting; the planner's boot timeout decides).
func (r *Reaper) waitStatus(ctx context.Context, id string) (Server, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.CloudTimeout.D())
	defer cancel()
	for {
		gctx, cancel := context.WithTimeout(ctx, callTimeout)
		s, err := r.cloud.Get(gctx, id)
		cancel()
		if err != nil && ClassOf(err) != Transient {
			return Server{}, err
		}
		if err == nil && s.Status != StatusBuild && s.Status != "" {
			return s, nil
		}
		select {
		case <-ctx.Done():
			return Server{Status: StatusBuild}, nil
		case <-time.After(r.PollInterval):
		}
	}
}

// deleteServer deletes and waits until Nova no longer lists it.
func (r *Reaper) deleteServer(ctx context.Context, id string) error {
	if id == "" {
		return nil
	}
	dctx, dcancel := context.WithTimeout(ctx, callTimeout)
	err := r.cloud.Delete(dctx, id)
	dcancel()
	if err != nil && ClassOf(err) != NotFound {
		r.metrics.cloudError(err)
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.CloudTimeout.D())
	defer cancel()
	for {
		gctx, gcancel := context.WithTimeout(ctx, callTimeout)
		_, err := r.cloud.Get(gctx, id)
		gcancel()
		if ClassOf(err) == NotFound {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("server %s still exists after %s: %w", id, r.cfg.CloudTimeout.D(), ctx.Err())
		case <-time.After(r.PollInterval):
		}
	}
}

// maintenance puts a node in maintenance mode from afar: the agent's
// maintenance API is local to the node's own agent, so the reaper registers
// the same check Consul's node maintenance uses (_node_maintenance,
// critical) on the node through the catalog. A live agent's anti-entropy
// removes checks it does not own within a minute or so, so the reaper
// re-asserts it every cycle while the node drains.
func (r *Reaper) maintenance(ctx context.Context, e Entry) error {
	node, _, err := r.client.Catalog().Node(e.OldName, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return fmt.Errorf("read node %s: %w", e.OldName, err)
	}
	if node == nil || node.Node == nil {
		return nil // nothing in the catalog to drain
	}
	_, err = r.client.Catalog().Register(&api.CatalogRegistration{
		Node:           node.Node.Node,
		Address:        node.Node.Address,
		SkipNodeUpdate: true,
		Check: &api.AgentCheck{
			Node:    node.Node.Node,
			CheckID: maintNodeCheck,
			Name:    "Node Maintenance Mode",
			Status:  api.HealthCritical,
			Notes:   "reaper: draining until " + e.DrainUntil.UTC().Format(time.RFC3339) + " (" + e.Reason + ", entry " + e.ID + ")",
		},
	}, (&api.WriteOptions{}).WithContext(ctx))
	if err != nil {
		return fmt.Errorf("maintenance mode on %s: %w", e.OldName, err)
	}
	return nil
}

// deregister removes a deleted server's node from Consul: force-leave, so
// the servers do not re-add a failed serf member, then deregister it from
// the catalog.
func (r *Reaper) deregister(ctx context.Context, node string) error {
	if node == "" {
		return nil
	}
	if err := r.client.Agent().ForceLeaveOptions(node, api.ForceLeaveOpts{}, (&api.QueryOptions{}).WithContext(ctx)); err != nil {
		r.log.Debug("force-leave", "node", node, "err", err)
	}
	if _, err := r.client.Catalog().Deregister(&api.CatalogDeregistration{Node: node}, (&api.WriteOptions{}).WithContext(ctx)); err != nil {
		return fmt.Errorf("deregister node %s: %w", node, err)
	}
	return nil
}

// Stop-related helper for tests: abandonLeadership makes the reaper, when
// its context ends, leave the lock and session as a killed process would.
func (r *Reaper) abandonLeadership() { r.abandon.Store(true) }
