package converge

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/exitcode"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/watch"
)

// The node's own repair, the first step of a reaper role's repair ladder
// (rerun): the repair watch (watch-config --repair-service) runs
// `converge --repair` whenever a check of one of the node's own services
// changes, and it re-runs the node's converge while one of them is
// critical: at most RepairAttempts times per episode (from the first
// critical check to the checks passing again), RepairBackoff apart,
// doubling. Each episode and attempt is the host's repair record (status
// category repair). A repair run converges the version the host runs,
// never the desired one (a rollout's slots bound that), takes no rollout
// slot and records no rollout progress: the host serves nothing while it
// is critical, and a crashed service must not halt its role's rollout. A
// host in maintenance (drained, a standby) or that runs no version yet (a
// new server, whose first converge builds it) is not repaired.

// Repaired: the host's checks pass again (after a repair attempt, or by
// themselves during the episode).
const Repaired Outcome = "repaired: its checks pass again"

// maintenanceCheck and maintServicePrefix are Consul's maintenance
// checks (node, and service).
const (
	maintenanceCheck   = "_node_maintenance"
	maintServicePrefix = "_service_maintenance:"
)

// Repair runs the repair loop: one at a time per host (a second handler
// finds the loop running and exits 0), until the checks pass, the
// attempts are used up, or ctx ends.
func (c *Converger) Repair(ctx context.Context) (Result, error) {
	unlock, err := watch.Lock(ctx, c.cfg.LockFile+".repair", false)
	if errors.Is(err, watch.ErrLocked) {
		return Result{Outcome: Busy, Reason: "another repair loop runs on this host"}, nil
	}
	if err != nil {
		return Result{}, exitcode.Wrap(exitcode.Usage, fmt.Errorf("--lock-file: %w", err))
	}
	defer unlock()
	for {
		res, wait, err := c.repairOnce(ctx)
		if err != nil || wait <= 0 {
			return res, err
		}
		c.log.Info("repair: looking at the checks again", "host", c.cfg.Host, "after", wait)
		select {
		case <-ctx.Done():
			return res, nil
		case <-time.After(wait):
		}
	}
}

// repairBackoff is the wait after attempt n (from 1): RepairBackoff,
// doubling.
func (c *Converger) repairBackoff(n int) time.Duration {
	d := c.cfg.RepairBackoff
	for i := 1; i < n; i++ {
		d *= 2
	}
	return d
}

// repairOnce looks at the host's checks and repair record, under the
// converge lock, and makes one attempt when one is due; wait is how long
// to wait before looking again (0: the loop is over).
func (c *Converger) repairOnce(ctx context.Context) (res Result, wait time.Duration, err error) {
	unlock, err := watch.Lock(ctx, c.cfg.LockFile, true)
	if err != nil {
		if ctx.Err() != nil {
			return Result{}, 0, err
		}
		return Result{}, 0, exitcode.Wrap(exitcode.Usage, fmt.Errorf("--lock-file: %w", err))
	}
	defer unlock()
	endLeftGroup(c.cfg.LockFile, c.log.Warn)
	critical, maint, err := c.criticalChecks(ctx)
	if err != nil {
		return Result{}, 0, err
	}
	status, err := c.store.HostStatus(ctx, c.cfg.Host)
	if err != nil {
		return Result{}, 0, err
	}
	rec, ok := status[store.CategoryRepair]
	episode := ok && !rec.Corrupt && rec.State != store.StateSuccess
	switch {
	case maint != "":
		return Result{Outcome: NothingToDo, Reason: "in maintenance (" + maint + "): not repaired"}, 0, nil
	case len(critical) == 0 && episode:
		detail := fmt.Sprintf("its checks pass again after %d repair attempt(s)", rec.Attempts)
		err := c.recordRepair(ctx, store.StateSuccess, rec.Version, detail, rec.Attempts, rec.Since)
		c.log.Info("repair: the checks pass again", "host", c.cfg.Host, "attempts", rec.Attempts)
		return Result{Outcome: Repaired, Reason: detail, Version: rec.Version}, 0, err
	case len(critical) == 0:
		return Result{Outcome: NothingToDo, Reason: "its checks pass"}, 0, nil
	}
	attempts, since := 0, c.now().UTC()
	if episode {
		attempts, since = rec.Attempts, rec.Since
	}
	return c.repairDue(ctx, rec, episode, attempts, since, critical)
}

// repairDue makes the next attempt of an episode begun at since, or says
// how long until it is due, or ends the episode once every attempt was
// made and the checks are still critical.
func (c *Converger) repairDue(ctx context.Context, rec store.Status, episode bool, attempts int, since time.Time, critical []string) (Result, time.Duration, error) {
	failing := strings.Join(critical, "; ")
	if attempts >= c.cfg.RepairAttempts {
		detail := fmt.Sprintf("%d repair attempt(s) since %s, still critical: %s; the reaper's repair ladder goes on", attempts, since.Format(time.RFC3339), failing)
		res := Result{Outcome: Failed, Reason: "repair attempts used up", Detail: detail, Category: store.CategoryRepair, Version: rec.Version}
		if rec.State == store.StateFailed {
			// Said once: later fires of the watch find nothing to do.
			return Result{Outcome: NothingToDo, Reason: detail, Version: rec.Version}, 0, nil
		}
		return res, 0, c.recordRepair(ctx, store.StateFailed, rec.Version, detail, attempts, since)
	}
	if episode && attempts > 0 {
		if due := rec.Time.Add(c.repairBackoff(attempts)); c.now().Before(due) {
			return Result{Outcome: NothingToDo, Reason: "the next repair attempt is due at " + due.UTC().Format(time.RFC3339)}, due.Sub(c.now()), nil
		}
	}
	have, err := c.store.HostVersions(ctx, c.cfg.Host)
	if err != nil {
		return Result{}, 0, err
	}
	if len(have) != 1 {
		// A new server: its first converge builds it.
		return Result{Outcome: NothingToDo, Reason: "runs " + orNone(have) + ": no version to repair"}, 0, nil
	}
	n := attempts + 1
	c.log.Warn("repair: re-running converge, the host's checks are critical", "host", c.cfg.Host, "attempt", n, "of", c.cfg.RepairAttempts, "critical", failing)
	if err := c.recordRepair(ctx, store.StateRunning, have[0], fmt.Sprintf("attempt %d of %d: critical: %s", n, c.cfg.RepairAttempts, failing), n, since); err != nil {
		return Result{}, 0, err
	}
	res, err := c.act(ctx, have[0], allSteps)
	res.Reason = fmt.Sprintf("repair attempt %d of %d: %s", n, c.cfg.RepairAttempts, failing)
	if err != nil {
		return res, 0, err
	}
	if n == c.cfg.RepairAttempts && res.Outcome == Failed && res.Category == store.CategoryPuppet && c.cfg.ConsistentCmd != "" {
		// Configuration that must always pass failed on every attempt:
		// the reaper replaces a suspect rather than repairing it.
		if err := c.markSuspect(ctx, &res, n); err != nil {
			return res, 0, err
		}
	}
	wait := c.repairBackoff(n)
	detail := fmt.Sprintf("attempt %d of %d done (converge %s); the checks are looked at again after %s", n, c.cfg.RepairAttempts, res.Outcome, wait)
	err = c.recordRepair(ctx, store.StatePending, have[0], detail, n, since)
	c.shipLog(ctx, res)
	return res, wait, err
}

// recordRepair writes the host's repair record.
func (c *Converger) recordRepair(ctx context.Context, state, version, detail string, attempts int, since time.Time) error {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	v := store.StatusValue{Version: version, Detail: detail, Attempts: attempts, Since: since}
	if err := c.store.UpdateStatus(wctx, c.cfg.Host, store.CategoryRepair, state, v); err != nil {
		return fmt.Errorf("record repair %s: %w", state, err)
	}
	return nil
}

// criticalChecks reads the local agent's checks: the critical ones of the
// services the node repairs ("service: check (output)"), and the
// maintenance that holds the repair ("" when none).
func (c *Converger) criticalChecks(ctx context.Context) (critical []string, maint string, err error) {
	checks, err := c.agent.ChecksWithFilterOpts("", (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return nil, "", fmt.Errorf("read the local agent's checks: %w", err)
	}
	for _, id := range sortedCheckIDs(checks) {
		ch := checks[id]
		switch {
		case ch.CheckID == maintenanceCheck || strings.HasPrefix(ch.CheckID, maintServicePrefix):
			maint = strings.TrimSpace(ch.CheckID + " " + ch.Notes)
		case ch.Status == api.HealthCritical && slices.Contains(c.cfg.RepairServices, ch.ServiceName):
			out := strings.TrimSpace(ch.Output)
			if len(out) > 120 {
				out = out[:120] + "..."
			}
			critical = append(critical, fmt.Sprintf("%s: %s (%s)", ch.ServiceName, ch.Name, out))
		}
	}
	return critical, maint, nil
}

func sortedCheckIDs(m map[string]*api.AgentCheck) []string {
	out := make([]string, 0, len(m))
	for id := range m {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}
