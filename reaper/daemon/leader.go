package daemon

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
)

// Leadership follows consul-esm's leader.go: a session, a lock on the leader
// key, act while the lock is held, go back to waiting when it is lost.
//
// The numbers (defaults; session_ttl and lock_delay in the config):
//
//   - Session TTL 15s. The reaper renews at TTL/2. Consul invalidates an
//     unrenewed session between TTL and 2×TTL, so a crashed leader is replaced
//     after at most 2×TTL + lock delay + the 5s lock retry of the api package
//     (~50s). That is small next to the minutes of grace before any server
//     is judged dead, so a failover never makes a replacement late in a way
//     that matters; a shorter TTL would only add renewal traffic and the risk
//     of losing the lock on a slow Consul server.
//   - Lock delay 15s (Consul's default). After the session is invalidated no
//     other session may take the lock for this long. It must outlast the old
//     leader noticing the loss and cancelling its cloud calls: the lock
//     monitor's blocking query returns at once when the key changes, and
//     with MonitorRetries 3 × 2s it rides out a brief agent hiccup before
//     giving up (6s < 15s). Independently of timing, every journal write is
//     a transaction that checks the session still holds the lock, and every
//     cloud call is preceded by such a write: an old leader can finish at
//     most the one call already on the wire, which the lock delay covers.
//   - Session behaviour "release": the lock is released, not deleted, so
//     the leader key keeps naming the last leader for operators.
//   - The session is bound to the agent's serfHealth check (Consul's
//     default): if the reaper's node dies, the session ends at once instead
//     of after the TTL.
const (
	monitorRetries   = 3
	monitorRetryTime = 2 * time.Second
	// lockWaitTime is how long one blocking lock attempt waits; the loop
	// tries again right after, so it only bounds the stop latency.
	lockWaitTime = 10 * time.Second
	// lockRetryPause is the wait before trying again after the lock could
	// not be acquired (Consul unreachable), so a down agent is not
	// hammered.
	lockRetryPause = time.Second
)

// leaderSession is the session behind the lock.
type leaderSession struct {
	id        string
	expiredCh chan struct{} // closed when renewals end
	doneCh    chan struct{} // closing it stops renewals and destroys the session
	abandon   context.CancelFunc
}

// session creates the leader session and renews it until stopped or lost
// (expiredCh then closes). The renewing goroutine is counted in wg.
func (r *Reaper) session(ctx context.Context, wg *sync.WaitGroup) (*leaderSession, error) {
	se := &api.SessionEntry{
		Name:      "reaper leader " + r.id,
		TTL:       r.cfg.SessionTTL.D().String(),
		LockDelay: r.cfg.LockDelay.D(),
		Behavior:  api.SessionBehaviorRelease,
	}
	id, _, err := r.client.Session().Create(se, (&api.WriteOptions{}).WithContext(ctx))
	if err != nil {
		return nil, err
	}
	renewCtx, abandon := context.WithCancel(context.Background())
	ls := &leaderSession{id: id, expiredCh: make(chan struct{}), doneCh: make(chan struct{}), abandon: abandon}
	wg.Go(func() {
		defer close(ls.expiredCh)
		err := r.client.Session().RenewPeriodic(se.TTL, id, (&api.WriteOptions{}).WithContext(renewCtx), ls.doneCh)
		if err != nil && !errors.Is(err, context.Canceled) {
			r.log.Warn("leader session lost", "err", err)
		}
	})
	return ls, nil
}

// runLeadership waits for the lock, leads while it holds it, and waits
// again when it is lost, until ctx ends. Every goroutine it starts is
// counted in wg, and ends once ctx has. It returns an error only when the
// lock itself cannot be made (a bad lock key): waiting would never end.
func (r *Reaper) runLeadership(ctx context.Context, wg *sync.WaitGroup) error {
	for ctx.Err() == nil {
		ls, err := r.session(ctx, wg)
		if err != nil {
			r.log.Error("create leader session", "err", err)
			r.sleep(ctx, r.cfg.Interval.D())
			continue
		}
		lock, err := r.client.LockOpts(&api.LockOptions{
			Key:              r.cfg.LeaderKey(),
			Value:            []byte(r.id),
			Session:          ls.id,
			MonitorRetries:   monitorRetries,
			MonitorRetryTime: monitorRetryTime,
			LockWaitTime:     lockWaitTime,
		})
		if err != nil {
			r.endSession(ls)
			return fmt.Errorf("leader lock %s: %w", r.cfg.LeaderKey(), err)
		}
		if abandoned := r.holdLock(ctx, wg, ls, lock); abandoned {
			return nil
		}
	}
	return nil
}

// holdLock acquires the lock with session ls, leads while it holds it,
// then releases the lock and ends the session. It returns true when it
// left both behind instead, as a killed process would (a test hook).
func (r *Reaper) holdLock(ctx context.Context, wg *sync.WaitGroup, ls *leaderSession, lock *api.Lock) bool {
	stopCh := make(chan struct{})
	wg.Go(func() {
		select {
		case <-ctx.Done():
		case <-ls.expiredCh:
		}
		close(stopCh)
	})
	lostCh, err := lock.Lock(stopCh)
	r.reportLockConflict(err)
	if err != nil || lostCh == nil {
		if err != nil && !errors.Is(err, api.ErrLockConflict) {
			r.log.Error("acquire leader lock", "err", err)
		}
		r.endSession(ls)
		if ctx.Err() == nil && err != nil {
			r.sleep(ctx, lockRetryPause)
		}
		return false
	}
	r.log.Info("became leader", "key", r.cfg.LeaderKey(), "instance", r.id)
	r.metrics.setLeader(true)
	leadCtx, cancel := context.WithCancel(ctx)
	wg.Go(func() {
		// Losing the lock cancels every in-flight cloud call at once.
		select {
		case <-lostCh:
			r.log.Warn("lost the leader lock: cancelling in-flight work")
			r.metrics.lostLeadership(leaderLostLock)
		case <-ls.expiredCh:
			r.log.Warn("leader session expired: cancelling in-flight work")
			r.metrics.lostLeadership(leaderLostSession)
		case <-leadCtx.Done():
		}
		cancel()
	})
	r.lead(leadCtx, ls.id)
	cancel()
	r.metrics.setLeader(false)
	if r.abandoned() {
		// No unlock, no session destroy; renewals stop.
		ls.abandon()
		return true
	}
	if err := lock.Unlock(); err != nil && !errors.Is(err, api.ErrLockNotHeld) {
		r.log.Warn("release leader lock", "err", err)
	}
	r.endSession(ls)
	r.log.Info("no longer leader")
	return false
}

// Causes of a lost leadership, for reaper_leadership_lost_total.
const (
	leaderLostLock    = "lock"
	leaderLostSession = "session"
)

// noteChurn logs, once per change, when the leadership becomes unstable
// (churnTerms or more leaderships in the last hour) and when it is stable
// again, and sets the metric. A leader that keeps losing its lock still
// finishes its journalled work each time it leads again: the journal, not
// the term, holds it.
func (r *Reaper) noteChurn(terms []reaperkv.LeaderTerm) {
	r.metrics.setLeaderTerms(len(terms))
	unstable := len(terms) >= churnTerms
	if unstable == r.status.setChurn(unstable) {
		return
	}
	if unstable {
		r.log.Warn("leadership is unstable: the leader lock was taken again and again", "terms_last_hour", len(terms), "first", terms[0].Time.UTC().Format(time.RFC3339))
	} else {
		r.log.Info("leadership stable again", "terms_last_hour", len(terms))
	}
}

// reportLockConflict: a leader key that no lock wrote (a value put there by
// hand) keeps every copy from leading, for good. The check note and the
// log say so, once per change, with the command that clears it.
func (r *Reaper) reportLockConflict(err error) {
	problem := ""
	if errors.Is(err, api.ErrLockConflict) {
		key := r.cfg.LeaderKey()
		problem = fmt.Sprintf("no copy can lead: the leader key %s holds a value no reaper lock wrote (put there by hand?); clear it with: consul kv delete %s", key, key)
	}
	if r.status.setLockProblem(problem) {
		if problem != "" {
			r.log.Error(problem)
		} else {
			r.log.Info("the leader key can be locked again")
		}
	}
}

// lead runs cycles while ctx (cancelled on loss of the lock) lives, with
// a memory made afresh for this leadership: every interval, and with
// wake_on_change sooner on a change or at the plan's next deadline
// (wake.go). The watches it starts end, and are waited for, before it
// returns.
func (r *Reaper) lead(ctx context.Context, session string) {
	r.term = newTerm(session, r.now())
	r.status.setLeading(true)
	defer r.status.setLeading(false)
	var changeCh chan struct{} // nil without wake_on_change: never ready
	if r.cfg.WakesOnChange() {
		changeCh = make(chan struct{}, 1)
		var wg sync.WaitGroup
		watchCtx, stop := context.WithCancel(ctx)
		defer func() {
			stop()
			wg.Wait()
		}()
		r.startWatches(watchCtx, &wg, changeCh)
	}
	var deadline time.Time // the last plan's, on the wall clock
	for cause := wakeStart; cause != ""; {
		r.metrics.wakeup(cause)
		began := time.Now()
		if plan := r.cycle(ctx, r.term); plan != nil {
			deadline = time.Time{}
			if !plan.NextDeadline.IsZero() && r.cfg.WakesOnChange() {
				// The plan's clock may be a test's: its distance, on ours.
				deadline = time.Now().Add(plan.NextDeadline.Sub(r.now()))
			}
		}
		cause = r.waitNext(ctx, began, deadline, changeCh)
	}
}

// endSession stops renewals and destroys the session (idempotent).
func (r *Reaper) endSession(ls *leaderSession) {
	select {
	case <-ls.doneCh:
		return
	default:
	}
	close(ls.doneCh)
	<-ls.expiredCh
	ls.abandon()
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	r.client.Session().Destroy(ls.id, (&api.WriteOptions{}).WithContext(ctx))
}

func (r *Reaper) sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
