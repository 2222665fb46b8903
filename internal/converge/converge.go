package converge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/exitcode"
	"github.com/jiocloud/orchestrate/internal/logship"
	"github.com/jiocloud/orchestrate/internal/rollout"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/watch"
)

// Check IDs mirrored on the local agent.
const (
	CheckPuppet     = store.ConvergePuppetCheck
	CheckEventual   = "orchestrate:eventual"
	CheckValidation = "orchestrate:validation"
)

// steps says which steps a run takes.
type steps int

const (
	// noSteps: nothing to do.
	noSteps steps = iota
	// allSteps: update, the consistent step, the eventual one (if any),
	// validation.
	allSteps
	// eventualSteps: the eventual step and validation only.
	eventualSteps
)

// Outcome is what one converge run ended with.
type Outcome string

// Outcomes of Run.
const (
	// NothingToDo: the host runs the desired version and its last build and
	// validation succeeded.
	NothingToDo Outcome = "nothing to do"
	// Busy: another converge holds the lock and WaitLock is off.
	Busy Outcome = "another converge is running"
	// Converged: update, Puppet and validation succeeded; the version is reported.
	Converged Outcome = "converged"
	// Pending: the eventual step (or the older single Puppet run) failed
	// while the hiera data says dependencies are unmet, or before
	// hiera-services rendered any data.
	Pending Outcome = "pending on dependencies"
	// Failed: a step failed.
	Failed Outcome = "failed"
	// Waiting: the consistent step waits for one of the role's rollout
	// slots (all in use, the rollout halted, or an earlier role not done);
	// the role's rollout watch runs converge again when that changes.
	Waiting Outcome = "waiting for a rollout slot"
)

// Result describes a run.
type Result struct {
	Outcome Outcome
	// Reason says why converge acted, or why it did not.
	Reason  string
	Version string
	// Detail is the failing step and checks, for Failed and Pending;
	// Category the status category of the step that did not succeed.
	Detail   string
	Category string
	LogPath  string
	// LogURL is the log_url the run recorded: the log's object in Swift
	// when it was named there, else the local log's.
	LogURL string
	// Suspect: the consistent step failed on the last allowed attempt;
	// the host is marked suspect.
	Suspect bool

	// object is the run's log's object name in Swift, "" when it is not
	// uploaded.
	object string
}

// Converger runs converge for one host.
type Converger struct {
	cfg   Config
	store *store.Store
	agent *api.Agent
	slots *rollout.Slots
	// ship uploads logs to Swift; nil with UploadNever.
	ship *logship.Shipper
	log  *slog.Logger
	now  func() time.Time
}

// New returns a Converger; cfg must have passed Validate. client is the
// local agent's: its checks mirror the outcomes, and rollout slot sessions
// are tied to its node.
func New(cfg Config, st *store.Store, client *api.Client, log *slog.Logger) *Converger {
	slots := rollout.New(st, client.Session(), log)
	slots.TTL = cfg.SlotTTL
	c := &Converger{cfg: cfg, store: st, agent: client.Agent(), slots: slots, log: log, now: time.Now}
	if cfg.UploadLogs != UploadNever {
		c.ship = &logship.Shipper{
			Grant: func(ctx context.Context) (logship.Grant, error) {
				return logship.CurrentGrant(ctx, cfg.LogGrant, cfg.Host, func(ctx context.Context) ([]byte, error) {
					ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
					defer cancel()
					return st.LogGrant(ctx, cfg.Host)
				}, log)
			},
			// Naming the log reads the file only: the status record it goes
			// in is written next, and must not wait on Consul for it. A
			// renewal in KV reaches the file at the run's upload or flush.
			Local:    func() (logship.Grant, error) { return logship.LoadGrant(cfg.LogGrant) },
			Spool:    logship.Spool{Dir: cfg.LogSpool},
			MaxBytes: cfg.MaxLogBytes,
			Client:   logship.Client(cfg.UploadTimeout),
			Log:      log,
			Now:      func() time.Time { return c.now() },
		}
	}
	return c
}

// shipLog uploads the run's log when it was named in Swift, and whatever
// earlier runs left in the spool, once every status record of the run is
// written: an upload never delays a record, and a failed one is logged,
// never returned (the run's own outcome is what the caller reports). The
// log waits in the spool for the next run or `orchestrate logs flush`.
func (c *Converger) shipLog(ctx context.Context, res Result) {
	if c.ship == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.UploadTimeout)
	defer cancel()
	var r logship.FlushResult
	var err error
	if res.object != "" {
		r, err = c.ship.Ship(ctx, res.object, res.LogPath)
	} else {
		r, err = c.ship.Flush(ctx)
	}
	switch {
	case errors.Is(err, logship.ErrNoGrant):
		if r.Left > 0 {
			c.log.Warn("logs wait in the spool, and this host has no upload grant", "spooled", r.Left, "grant", c.cfg.LogGrant)
		}
	case err != nil:
		c.log.Warn("log upload failed; the log waits in the spool", "err", err, "spooled", r.Left, "spool", c.cfg.LogSpool)
	case r.Uploaded > 0:
		c.log.Info("logs uploaded to Swift", "uploaded", r.Uploaded, "url", res.LogURL)
	}
}

// Run converges until success, or once when RetryInterval is zero, and
// returns the last run's result.
func (c *Converger) Run(ctx context.Context) (Result, error) {
	for attempt := 1; ; attempt++ {
		res, err := c.runOnce(ctx, attempt > 1)
		last := c.cfg.MaxAttempts > 0 && attempt >= c.cfg.MaxAttempts
		if err == nil && last && res.Outcome == Failed && res.Category == store.CategoryPuppet && c.cfg.ConsistentCmd != "" {
			err = c.markSuspect(ctx, &res, attempt)
		}
		if res.Outcome != Busy {
			c.shipLog(ctx, res)
		}
		if err != nil || c.cfg.RetryInterval <= 0 {
			return res, err
		}
		if res.Outcome != Failed && res.Outcome != Pending {
			return res, nil
		}
		if last {
			return res, nil
		}
		c.log.Info("converge will retry", "outcome", res.Outcome, "after", c.cfg.RetryInterval, "attempt", attempt)
		select {
		case <-ctx.Done():
			return res, nil
		case <-time.After(c.cfg.RetryInterval):
		}
	}
}

// runOnce is one pass: lock, decide, act. retry forces action (a retry only
// happens after an unsuccessful run).
func (c *Converger) runOnce(ctx context.Context, retry bool) (Result, error) {
	unlock, err := watch.Lock(ctx, c.cfg.LockFile, c.cfg.WaitLock)
	if errors.Is(err, watch.ErrLocked) {
		c.log.Info("another converge holds the lock; leaving the work to it", "lock", c.cfg.LockFile)
		return Result{Outcome: Busy, Reason: "lock " + c.cfg.LockFile + " is held"}, nil
	}
	if err != nil {
		if ctx.Err() == nil {
			// Not an interrupted wait: the lock file cannot be made, which
			// is the operator's --lock-file, not Consul.
			err = exitcode.Wrap(exitcode.Usage, fmt.Errorf("--lock-file: %w", err))
		}
		return Result{}, err
	}
	defer unlock()
	endLeftGroup(c.cfg.LockFile, c.log.Warn)

	d, err := c.decide(ctx)
	want, run, reason := d.want, d.run, d.reason
	if errors.Is(err, store.ErrNoCurrentVersion) {
		c.log.Info("no current_version is set; nothing to converge to")
		return Result{Outcome: NothingToDo, Reason: "no current_version is set"}, nil
	}
	if err != nil {
		return Result{}, err
	}
	if run == noSteps && !c.cfg.EventualOnly && (c.cfg.Force || retry) {
		run, reason = allSteps, "forced"
		if retry {
			reason = "retry after an unsuccessful run"
		}
	}
	if run == noSteps {
		c.log.Debug("nothing to do", "host", c.cfg.Host, "version", want, "why", reason)
		return Result{Outcome: NothingToDo, Reason: reason, Version: want}, nil
	}
	var slot *rollout.Slot
	if run == allSteps && c.cfg.Role != "" {
		sl, v, err := c.slots.Acquire(ctx, c.cfg.Role, c.cfg.Host, want, d.fresh)
		if err != nil {
			return Result{}, fmt.Errorf("rollout of role %s: %w", c.cfg.Role, err)
		}
		if sl == nil {
			return c.wait(ctx, d, v.Reason)
		}
		slot = sl
	}
	c.log.Info("converging", "host", c.cfg.Host, "version", want, "reason", reason, "eventual_only", run == eventualSteps)
	res, err := c.act(ctx, want, run)
	res.Reason = reason
	if c.cfg.Role != "" {
		err = errors.Join(err, c.recordRollout(ctx, slot, res, err))
	}
	return res, err
}

// wait records that the consistent step waits for a rollout slot, as
// pending in the puppet category (unless the record already says so: a
// role's waiting hosts are woken on every change of its rollout). It
// mirrors no check: the node still serves its current version.
func (c *Converger) wait(ctx context.Context, d decision, why string) (Result, error) {
	res := Result{Outcome: Waiting, Reason: d.reason, Version: d.want, Detail: why, Category: store.CategoryPuppet}
	if st, ok := d.status[store.CategoryPuppet]; ok && st.State == store.StatePending && st.Waiting && st.Version == d.want && st.Detail == why {
		return res, nil
	}
	c.log.Info("waiting for a rollout slot", "host", c.cfg.Host, "role", c.cfg.Role, "version", d.want, "why", why)
	if err := c.store.UpdateStatus(ctx, c.cfg.Host, store.CategoryPuppet, store.StatePending, store.StatusValue{Version: d.want, Detail: why, Waiting: true}); err != nil {
		return res, fmt.Errorf("record waiting for a rollout slot: %w", err)
	}
	return res, nil
}

// recordRollout gives back the slot the run held (if any) and records the
// host's outcome in its role's rollout. A run that ended on an error
// (Consul unreachable mid-run) records nothing: its slot goes with its
// session.
func (c *Converger) recordRollout(ctx context.Context, slot *rollout.Slot, res Result, runErr error) error {
	state := map[Outcome]string{Converged: store.RolloutDone, Failed: store.RolloutFailed, Pending: store.RolloutPending}[res.Outcome]
	switch {
	case runErr != nil || state == "":
		if slot != nil {
			slot.Abandon()
		}
		return nil
	case slot != nil:
		return slot.Release(ctx, state, res.Detail)
	default:
		return c.slots.Record(ctx, c.cfg.Role, c.cfg.Host, res.Version, state, res.Detail)
	}
}

// decision is what decide found: the desired version, the steps to run
// and why (noSteps, with why not), and the host's status as read.
type decision struct {
	want   string
	run    steps
	reason string
	status map[string]store.Status
	// fresh: the host runs no version yet (a new server).
	fresh bool
}

// decide reads the desired version and this host's state and says which
// steps to run and why.
func (c *Converger) decide(ctx context.Context) (decision, error) {
	want, err := c.store.CurrentVersion(ctx)
	if err != nil {
		return decision{}, err
	}
	have, err := c.store.HostVersions(ctx, c.cfg.Host)
	if err != nil {
		return decision{}, err
	}
	status, err := c.store.HostStatus(ctx, c.cfg.Host)
	if err != nil {
		return decision{}, err
	}
	d := decision{want: want, status: status, fresh: len(have) == 0}
	done := func(run steps, reason string) (decision, error) {
		d.run, d.reason = run, reason
		return d, nil
	}
	consistent := c.consistentDone(status, want)
	if c.cfg.SlotWake {
		if st, ok := status[store.CategoryPuppet]; !ok || st.State != store.StatePending || !st.Waiting || st.Version != want {
			return done(noSteps, "not waiting for a rollout slot")
		}
		return done(allSteps, "waiting for a rollout slot of "+c.cfg.Role+", which may have freed")
	}
	if c.cfg.EventualOnly {
		if consistent != "" {
			return done(noSteps, consistent+": the eventual step waits for it")
		}
		return done(eventualSteps, "the hiera data changed")
	}
	if len(have) != 1 || have[0] != want {
		if c.cfg.EventualCmd != "" && consistent == "" {
			// The consistent step is done; only the eventual one (or
			// validation) is left: it never re-runs the consistent step.
			return done(eventualSteps, fmt.Sprintf("update pending: runs %s, desired %s; the consistent step succeeded", orNone(have), want))
		}
		return done(allSteps, fmt.Sprintf("update pending: runs %s, desired %s", orNone(have), want))
	}
	cats := []string{store.CategoryUpdate, store.CategoryPuppet}
	if c.cfg.EventualCmd != "" {
		cats = append(cats, store.CategoryEventual)
	}
	for _, cat := range append(cats, store.CategoryValidation) {
		st, ok := status[cat]
		why := ""
		switch {
		case !ok && cat == store.CategoryUpdate:
			continue // no update step configured so far
		case !ok:
			why = fmt.Sprintf("no %s status recorded", cat)
		case st.Corrupt:
			why = fmt.Sprintf("%s status is unreadable", cat)
		case st.State == store.StateSuccess:
			continue
		case st.State == store.StateRunning:
			// We hold the lock, so no converge is running: an earlier one died.
			why = fmt.Sprintf("last %s run never finished", cat)
		default:
			why = fmt.Sprintf("last %s run %s", cat, st.State)
		}
		if cat == store.CategoryEventual {
			return done(eventualSteps, why)
		}
		return done(allSteps, why)
	}
	return done(noSteps, "runs "+want+", last build and validation succeeded")
}

// consistentDone says why the consistent step (and the update step, when
// one ran) has not succeeded for version want, or "" when it has.
func (c *Converger) consistentDone(status map[string]store.Status, want string) string {
	for _, cat := range []string{store.CategoryUpdate, store.CategoryPuppet} {
		st, ok := status[cat]
		switch {
		case !ok && cat == store.CategoryUpdate:
		case !ok || st.Corrupt || st.State != store.StateSuccess:
			return "the " + cat + " step has not succeeded"
		case st.Version != want:
			return fmt.Sprintf("the %s step succeeded for %s, not %s", cat, st.Version, want)
		}
	}
	return ""
}

func orNone(vs []string) string {
	if len(vs) == 0 {
		return "no version"
	}
	return strings.Join(vs, "+")
}

// markSuspect records that the consistent step failed on the last of
// --max-attempts: static configuration that must always pass did not, and
// the host is suspect (a reaper role with replace_suspect replaces it).
func (c *Converger) markSuspect(ctx context.Context, res *Result, attempts int) error {
	res.Suspect = true
	res.Detail = fmt.Sprintf("suspect: the consistent step failed %d time(s): %s", attempts, res.Detail)
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	v := store.StatusValue{Version: res.Version, Detail: res.Detail, LogURL: res.LogURL, Suspect: true}
	if err := c.store.UpdateStatus(wctx, c.cfg.Host, store.CategoryPuppet, store.StateFailed, v); err != nil {
		return fmt.Errorf("mark the host suspect: %w", err)
	}
	c.log.Warn("host marked suspect: its consistent step failed on every attempt", "host", c.cfg.Host, "version", res.Version, "attempts", attempts)
	return nil
}
