package daemon

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
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/jiocloud/orchestrate/internal/nodeid"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/reaper"
	"github.com/jiocloud/orchestrate/reaper/prometheus"
	"github.com/prometheus/exporter-toolkit/web"
)

// The reaper's own service check in Consul.
const (
	// checkTTLIntervals is the check's TTL in cycle intervals: a missed
	// heartbeat or two (a slow Consul write) does not turn it critical.
	checkTTLIntervals = 3
	// minCheckTTL keeps a short test or demo interval from making the
	// check flap on every scheduling hiccup.
	minCheckTTL = 10 * time.Second
	// heartbeatsPerTTL is how many times the check is refreshed per TTL.
	heartbeatsPerTTL = 3
	// deregisterAfter is how long a reaper instance that stopped without
	// deregistering (a killed process) stays listed as critical: long
	// enough for an operator to see it over a weekend, short enough that
	// dead instances do not pile up.
	deregisterAfter = "72h"
	// stuckIntervals and stuckCloudTimeouts bound one healthy cycle: a few
	// intervals, plus two waits on the cloud (a replacement's boot and its
	// old server's deletion), plus the drain period. A cycle running
	// longer is stuck, and the check goes critical.
	stuckIntervals     = 3
	stuckCloudTimeouts = 2
	// cleanupTimeout bounds the Consul calls made on the way out, after
	// the run's context has ended.
	cleanupTimeout = 5 * time.Second
	// readHeaderTimeout bounds a /metrics client's request headers.
	readHeaderTimeout = 5 * time.Second
)

// Reaper is the daemon: it registers itself in Consul, waits for the leader
// lock and, while it holds it, runs a cycle every interval: observe (one
// Nova list, one Consul health query, the KV keys), plan, act.
type Reaper struct {
	cfg     *reaper.Config
	client  *api.Client
	cloud   reaper.Cloud
	log     *slog.Logger
	journal *Journal
	store   *store.Store
	metrics *Metrics
	id      string
	opts    options

	// term is the memory of the current leadership, touched only by the
	// goroutine that runs cycles.
	term *leaderTerm
	// status is what the heartbeat reports.
	status daemonStatus
	// prom holds a client per role that scales on a Prometheus query.
	prom map[string]*prometheus.Client
	// minter logs in for the servers the reaper builds (node_identity);
	// nil without it.
	minter *nodeid.Minter
}

// Option changes how a Reaper made by New behaves.
type Option func(*options)

type options struct {
	now func() time.Time
	// afterAction is called after each action is carried out (tests).
	afterAction func(reaper.Action)
	// abandon, asked when the run ends, says whether to leave the lock,
	// session and service registration behind as a killed process would
	// (tests).
	abandon func() bool
	// claimStep, when set, is called before each step of a claim (0: the
	// journal write, 1: the Nova mark, 2: the maintenance, 3: the phase
	// booting write); an error stops the claim there, as a leader killed
	// at that step would (tests).
	claimStep func(step int) error
	// abortStep, when set, is called between an abort's journal write
	// (phase aborting) and its end of maintenance; an error stops the
	// abort there, as a leader killed at that point would (tests).
	abortStep func() error
	// repairStep, when set, is called between a repair step's journal
	// write and its cloud call; an error stops the step there, as a
	// leader killed at that point would (tests).
	repairStep func() error
}

// WithClock sets the clock the planner is given (default time.Now).
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

func withAfterAction(f func(reaper.Action)) Option { return func(o *options) { o.afterAction = f } }

func withClaimStep(f func(int) error) Option { return func(o *options) { o.claimStep = f } }

func withAbortStep(f func() error) Option { return func(o *options) { o.abortStep = f } }

func withRepairStep(f func() error) Option { return func(o *options) { o.repairStep = f } }

func withAbandon(f func() bool) Option { return func(o *options) { o.abandon = f } }

// New returns a reaper. cfg must be validated.
func New(cfg *reaper.Config, client *api.Client, cloud reaper.Cloud, log *slog.Logger, opts ...Option) (*Reaper, error) {
	st, err := store.New(client, cfg.Prefix)
	if err != nil {
		return nil, fmt.Errorf("prefix: %w", err)
	}
	o := options{now: time.Now}
	for _, opt := range opts {
		opt(&o)
	}
	// The store dates what it writes for the reaper (a departed record's
	// time forgotten) by the reaper's clock, which prunes it.
	st.Now = o.now
	prom := map[string]*prometheus.Client{}
	for _, role := range cfg.Roles {
		if a := role.Autoscale; a != nil && a.Metric.Prometheus != nil {
			c, err := prometheus.New(a.Metric.Prometheus)
			if err != nil {
				return nil, fmt.Errorf("roles[%s].autoscale.metric: %w", role.Name, err)
			}
			prom[role.Name] = c
		}
	}
	var minter *nodeid.Minter
	if ni := cfg.NodeIdentity; ni != nil {
		if ni.SigningKey == nil {
			return nil, errors.New("node_identity: the configuration was not validated (no key loaded)")
		}
		if minter, err = nodeid.NewMinter(client, ni.SigningKey, ni.AuthMethod, ni.Audience); err != nil {
			return nil, fmt.Errorf("node_identity: %w", err)
		}
	}
	host, _ := os.Hostname()
	var b [3]byte
	rand.Read(b[:])
	return &Reaper{
		minter:  minter,
		prom:    prom,
		cfg:     cfg,
		client:  client,
		cloud:   cloud,
		log:     log,
		journal: NewJournal(client, cfg.Prefix, cfg.LeaderKey()),
		store:   st,
		metrics: NewMetrics(),
		id:      fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:])),
		opts:    o,
	}, nil
}

// Metrics returns the reaper's metrics (served on /metrics by Run).
func (r *Reaper) Metrics() *Metrics { return r.metrics }

// ID names this reaper instance (host, pid, random suffix).
func (r *Reaper) ID() string { return r.id }

func (r *Reaper) now() time.Time { return r.opts.now() }

func (r *Reaper) abandoned() bool { return r.opts.abandon != nil && r.opts.abandon() }

func (r *Reaper) serviceID() string { return r.cfg.ServiceName + "-" + r.id }
func (r *Reaper) checkID() string   { return "reaper-alive-" + r.id }

// Run registers the reaper as a Consul service, serves /metrics, and
// leads whenever it holds the lock, until ctx ends. Every goroutine it
// starts has ended when it returns. An error means the daemon cannot go
// on (the lock cannot be made, the service cannot be registered).
func (r *Reaper) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	port, err := r.serveMetrics(ctx, &wg)
	if err != nil {
		return err
	}
	ttl := max(checkTTLIntervals*r.cfg.Interval.D(), minCheckTTL)
	if err := r.register(ctx, port, ttl); err != nil {
		return err
	}
	wg.Go(func() { r.runHeartbeat(ctx, ttl/heartbeatsPerTTL) })
	err = r.runLeadership(ctx, &wg)
	cancel()
	wg.Wait()
	if !r.abandoned() {
		r.deregisterSelf()
	}
	return err
}

// serveMetrics serves /metrics on the configured address until ctx ends
// and returns the port (0 when no address is configured).
func (r *Reaper) serveMetrics(ctx context.Context, wg *sync.WaitGroup) (int, error) {
	if r.cfg.Listen == "" {
		return 0, nil
	}
	ln, err := net.Listen("tcp", r.cfg.Listen)
	if err != nil {
		return 0, fmt.Errorf("listen %s: %w", r.cfg.Listen, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", r.metrics)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: readHeaderTimeout}
	wg.Go(func() {
		var err error
		if path := r.cfg.WebConfigFile; path != "" {
			err = web.Serve(ln, srv, &web.FlagConfig{WebConfigFile: &path}, r.log)
		} else {
			err = srv.Serve(ln)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			r.log.Error("serving metrics", "err", err)
		}
	})
	wg.Go(func() {
		<-ctx.Done()
		srv.Close()
	})
	r.log.Info("serving metrics", "addr", ln.Addr().String())
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// register registers the reaper's service with its TTL check.
func (r *Reaper) register(ctx context.Context, port int, ttl time.Duration) error {
	reg := &api.AgentServiceRegistration{
		ID:   r.serviceID(),
		Name: r.cfg.ServiceName,
		Port: port,
		Meta: map[string]string{"instance": r.id},
		Check: &api.AgentServiceCheck{
			CheckID:                        r.checkID(),
			Name:                           "reaper loop alive",
			TTL:                            ttl.String(),
			DeregisterCriticalServiceAfter: deregisterAfter,
		},
	}
	if err := r.client.Agent().ServiceRegisterOpts(reg, api.ServiceRegisterOpts{}.WithContext(ctx)); err != nil {
		return fmt.Errorf("register service %s: %w", r.cfg.ServiceName, err)
	}
	return nil
}

// deregisterSelf removes the reaper's service on the way out.
func (r *Reaper) deregisterSelf() {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	r.client.Agent().ServiceDeregisterOpts(r.serviceID(), (&api.QueryOptions{}).WithContext(ctx))
}

// runHeartbeat refreshes the TTL check: passing while the loop is alive,
// warning after a failed cycle, critical when a cycle is stuck.
func (r *Reaper) runHeartbeat(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	stuck := stuckIntervals*r.cfg.Interval.D() + stuckCloudTimeouts*r.cfg.CloudTimeout.D() + r.cfg.DrainPeriod.D()
	for {
		status, note := r.status.health(stuck)
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

// daemonStatus is what the heartbeat reads of the cycles.
type daemonStatus struct {
	// mu guards every field below.
	mu          sync.Mutex
	leading     bool
	cycleStart  time.Time
	lastCycleOK bool
	lastErr     string
	// lockProblem says why no copy can take the leader lock (a key no
	// lock wrote); empty when there is none.
	lockProblem string
	// capacity names the roles whose capacity is exhausted, with why
	// (empty when none): the check turns warning.
	capacity string
	// churn: the leadership was unstable at the last report.
	churn bool
}

// setChurn records whether the leadership is unstable and returns what it
// was before.
func (s *daemonStatus) setChurn(v bool) (was bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	was, s.churn = s.churn, v
	return was
}

// setCapacity records the roles whose capacity the last cycle found
// exhausted.
func (s *daemonStatus) setCapacity(note string) {
	s.mu.Lock()
	s.capacity = note
	s.mu.Unlock()
}

// setLockProblem records why the lock cannot be taken ("" when it can)
// and reports whether that changed, so the caller logs each change once.
func (s *daemonStatus) setLockProblem(p string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := s.lockProblem != p
	s.lockProblem = p
	return changed
}

func (s *daemonStatus) setLeading(v bool) {
	s.mu.Lock()
	s.leading = v
	s.cycleStart = time.Time{}
	s.mu.Unlock()
}

func (s *daemonStatus) isLeading() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.leading
}

func (s *daemonStatus) startCycle() {
	s.mu.Lock()
	s.cycleStart = time.Now()
	s.mu.Unlock()
}

// sinceCycleStart is how long the current (or last) cycle has run.
func (s *daemonStatus) sinceCycleStart() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return time.Since(s.cycleStart)
}

func (s *daemonStatus) endCycle(errs []string) {
	s.mu.Lock()
	s.lastCycleOK, s.lastErr = len(errs) == 0, strings.Join(errs, "; ")
	s.mu.Unlock()
}

// health is the check's status and note; a cycle running longer than
// stuck is reported critical.
func (s *daemonStatus) health(stuck time.Duration) (status, note string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.leading {
		if s.lockProblem != "" {
			return api.HealthWarning, s.lockProblem
		}
		return api.HealthPassing, "standby"
	}
	status, note = api.HealthPassing, "leader"
	if s.capacity != "" {
		status, note = api.HealthWarning, "leader; capacity exhausted: "+s.capacity
	}
	if !s.lastCycleOK && s.lastErr != "" {
		status, note = api.HealthWarning, "leader; last cycle failed: "+s.lastErr
	}
	if !s.cycleStart.IsZero() && time.Since(s.cycleStart) > stuck {
		status, note = api.HealthCritical, "leader; cycle stuck since "+s.cycleStart.Format(time.RFC3339)
	}
	return status, note
}
