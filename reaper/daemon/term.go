package daemon

import (
	"time"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/internal/store/schema"
	"github.com/jiocloud/orchestrate/reaper"
)

// leaderTerm is what a leader remembers from one cycle to the next. A new
// one is made each time leadership starts, so a new leader (this process
// again, or another) starts afresh: every critical node gets a full grace
// again and no create is held back, which errs on the side of waiting for
// the one and of trying the cloud again for the other.
type leaderTerm struct {
	// session holds the leader lock for this term; started is when the
	// term began.
	session string
	started time.Time
	// terms are the leaderships of the last hour, from the last report
	// (seeded with it), this one added by the first report.
	terms []reaperkv.LeaderTerm
	// memory is the last plan's memory of conditions that must last.
	memory reaper.Memory
	// quota is the project-wide backoff after a quota error.
	quota backoffState
	// pool is the warm pools' backoff: any failed create (of a standby
	// or not, but for a transient error) starts or extends it, so the
	// pools back off first and stay off longest.
	pool backoffState
	// claims holds each role's claims of the last hour, newest last.
	claims map[string][]reaperkv.PoolClaim
	// roleBackoff holds each role's backoff after a capacity or fatal
	// create error.
	roleBackoff map[string]*backoffState
	// zoneBackoff holds, per role and availability zone, the backoff
	// after the zone refused a create for capacity (placement.go).
	zoneBackoff map[string]map[string]*backoffState
	// groups are the roles' server group records, as the cycle read them
	// and the executor wrote them since; groupWarned the groups whose
	// policy mismatch was logged.
	groups      map[string]reaperkv.ServerGroupRecord
	groupWarned map[string]bool
	// deleteBackoff holds, per journal entry, the backoff after the cloud
	// refused to delete its server (a locked server's 409).
	deleteBackoff map[string]*backoffState
	// autoscale holds each autoscaled role's last report, which its next
	// decision goes on from; a new term takes it from the last leader's
	// report (seeded).
	autoscale map[string]*reaperkv.AutoscaleReport
	seeded    bool
	// capacity holds the roles whose capacity records stand, as the
	// cycle read them and the executor wrote them since.
	capacity map[string]schema.CapacityRecord
	// The last pause, start-gate, cycle-error and per-role autoscaling
	// messages logged, so each change is logged once rather than every
	// cycle.
	lastPause    string
	lastNotArmed string
	// rang is when this leader last rang the nodes' heartbeat; silent
	// the hosts its last plan found silent (logged once each).
	rang   time.Time
	silent map[string]bool
	// holds are the last cycle's holds (its blocked lines, digits aside),
	// so that each is recorded in the history once, when it begins.
	holds        map[string]bool
	lastCycleErr string
	lastDecision map[string]string
	// activities are this term's activities not yet in the history;
	// lastHistoryErr and lastEventErr the last history write and event
	// errors logged.
	activities []reaperkv.Activity
	// specs are the roles' boot spec records as the last cycle left
	// them: what a rollback's create builds from.
	specs          map[string]reaperkv.SpecRecord
	lastHistoryErr string
	lastEventErr   string
	// launchBackoff holds each role's backoff after launches its
	// on_launch hook abandoned (seeded from the last report);
	// lastHookEventErr the last hook event error logged.
	launchBackoff    map[string]*backoffState
	lastHookEventErr string
}

func newTerm(session string, now time.Time) *leaderTerm {
	return &leaderTerm{session: session, started: now, roleBackoff: map[string]*backoffState{}, deleteBackoff: map[string]*backoffState{},
		zoneBackoff: map[string]map[string]*backoffState{}, groups: map[string]reaperkv.ServerGroupRecord{}, groupWarned: map[string]bool{},
		autoscale: map[string]*reaperkv.AutoscaleReport{}, lastDecision: map[string]string{}, launchBackoff: map[string]*backoffState{}}
}

// claimWindow is how long claims are kept for the pool's report
// (claimed in the last hour, average claim time); maxClaims bounds them
// per role, for the state key's size.
const (
	claimWindow = time.Hour
	maxClaims   = 50
)

// noteClaims adds the claims whose standby served this cycle to each
// role's claims of the last hour.
func (t *leaderTerm) noteClaims(done []reaper.PoolClaimDone, now time.Time) {
	if t.claims == nil {
		t.claims = map[string][]reaperkv.PoolClaim{}
	}
	for _, d := range done {
		t.claims[d.Role] = append(t.claims[d.Role], d.Claim)
	}
	for role, cs := range t.claims {
		kept := cs[:0]
		for _, c := range cs {
			if now.Sub(c.Time) < claimWindow {
				kept = append(kept, c)
			}
		}
		if len(kept) > maxClaims {
			kept = kept[len(kept)-maxClaims:]
		}
		t.claims[role] = kept
	}
}

// seedAutoscale takes the autoscalers' memory from the last leader's
// report, once per term (carryAutoscale judges whether it is recent
// enough to go on from).
func (t *leaderTerm) seedAutoscale(rep *reaperkv.ReaperReport) {
	if t.seeded {
		return
	}
	t.seeded = true
	if rep == nil {
		return
	}
	t.terms = append([]reaperkv.LeaderTerm(nil), rep.Terms...)
	t.seedLaunchBackoff(rep, t.started)
	for _, r := range rep.Roles {
		if r.Autoscale != nil {
			t.autoscale[r.Name] = r.Autoscale
		}
		if r.Pool != nil && len(r.Pool.Claims) > 0 {
			if t.claims == nil {
				t.claims = map[string][]reaperkv.PoolClaim{}
			}
			t.claims[r.Name] = r.Pool.Claims
		}
	}
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

func (t *leaderTerm) backoffOf(role string) *backoffState { return backoffIn(t.roleBackoff, role) }

// roleBackoffs is each role's backoff end, as the planner takes it.
func (t *leaderTerm) roleBackoffs() map[string]time.Time { return backoffEnds(t.roleBackoff) }

// backoffIn is m's backoff of key, made (not backing off) if it has none.
func backoffIn(m map[string]*backoffState, key string) *backoffState {
	b := m[key]
	if b == nil {
		b = &backoffState{}
		m[key] = b
	}
	return b
}

// backoffEnds is when each of m's backoffs ends.
func backoffEnds(m map[string]*backoffState) map[string]time.Time {
	out := make(map[string]time.Time, len(m))
	for key, b := range m {
		out[key] = b.until
	}
	return out
}

// createHeldBack says whether a create for role in zone must wait: a
// create earlier in this cycle hit the quota, or this role's own backoff
// runs, or its zone's.
func (t *leaderTerm) createHeldBack(role, zone string, now time.Time) bool {
	if zone != "" && now.Before(t.zoneBackoffOf(role, zone).until) {
		return true
	}
	return now.Before(t.quota.until) || now.Before(t.backoffOf(role).until)
}

// backoff starts or extends a backoff after a failed create: quota errors
// stop every create (the quota is the project's); capacity and fatal
// errors (no valid host, a bad flavor or image) stop the role's creates.
// (A zone's refusal in a role of several zones backs off that zone
// instead: backoffZone.)
func (r *Reaper) backoff(t *leaderTerm, role string, err error) {
	b, what := t.backoffOf(role), "role "+role
	if reaper.ClassOf(err) == reaper.Quota {
		b, what = &t.quota, "every role"
	}
	d := b.bump(r.now(), r.cfg.QuotaBackoff.D(), r.cfg.QuotaBackoffMax.D(), err)
	r.log.Warn("create failed: backing off creates", "of", what, "for", d, "class", reaper.ClassOf(err).String(), "err", err)
}

// poolBackoff starts or extends the warm pools' backoff after err: its
// first step is twice quota_backoff, so the pools stay off longer than
// the creates of real demand.
func (r *Reaper) poolBackoff(t *leaderTerm, err error) {
	d := t.pool.bump(r.now(), 2*r.cfg.QuotaBackoff.D(), max(r.cfg.QuotaBackoffMax.D(), 2*r.cfg.QuotaBackoff.D()), err)
	if r.cfg.HasPool() {
		r.log.Warn("create failed: backing off the warm pools", "for", d, "class", reaper.ClassOf(err).String(), "err", err)
	}
}

// deleteRefused starts or extends the backoff of entry id's delete after
// the cloud refused it (409) or did not carry it out (stalled); the first
// refusal is logged and counted in the cloud errors metric, later ones are
// not (the state report names the entry every cycle). It returns err.
func (r *Reaper) deleteRefused(t *leaderTerm, e reaper.Entry, err error) error {
	b := t.deleteBackoff[e.ID]
	if b == nil {
		b = &backoffState{}
		t.deleteBackoff[e.ID] = b
	}
	first := b.step == 0
	d := b.bump(r.now(), r.cfg.QuotaBackoff.D(), r.cfg.QuotaBackoffMax.D(), err)
	if first {
		r.metrics.cloudError(err)
		r.log.Warn("the cloud refused a delete: retried with backoff; the role's other work goes on", "entry", e.ID, "server", e.OldName, "for", d, "err", err)
	}
	return &refusedError{err: err, first: first}
}

// deleteBackoffs is each refused delete's backoff end, by entry, as the
// planner takes it; entries no longer in the journal are forgotten.
func (t *leaderTerm) deleteBackoffs(journal []reaper.Entry) map[string]time.Time {
	open := make(map[string]bool, len(journal))
	for _, e := range journal {
		open[e.ID] = true
	}
	out := map[string]time.Time{}
	for id, b := range t.deleteBackoff {
		if !open[id] {
			delete(t.deleteBackoff, id)
			continue
		}
		out[id] = b.until
	}
	return out
}

// refusedError is a delete the cloud refused; only the first of an
// entry's refusals is logged as a failed action.
type refusedError struct {
	err   error
	first bool
}

func (e *refusedError) Error() string { return "delete refused: " + e.err.Error() }
func (e *refusedError) Unwrap() error { return e.err }

// backoffReset ends the backoff steps after a create succeeded (in zone,
// when it asked for one).
func (t *leaderTerm) backoffReset(role, zone string) {
	t.quota.step = 0
	t.pool.step = 0
	t.backoffOf(role).step = 0
	if zone != "" {
		t.zoneBackoffOf(role, zone).step = 0
	}
}

// churnTerms is how many leaderships in an hour make the leadership
// unstable: a failover is one; losing the lock again and again (a
// Consul server in trouble, a session destroyed by hand) is more.
const churnTerms = 3

// termsNow returns the leaderships of the last hour ending with this
// one: the report carries them, so churn shows across leaders.
func (t *leaderTerm) termsNow(id string, now time.Time) []reaperkv.LeaderTerm {
	out := []reaperkv.LeaderTerm{}
	mine := false
	for _, lt := range t.terms {
		if now.Sub(lt.Time) <= time.Hour && !lt.Time.After(now) {
			out = append(out, lt)
			mine = mine || (lt.Leader == id && lt.Time.Equal(t.started))
		}
	}
	if !mine {
		out = append(out, reaperkv.LeaderTerm{Time: t.started, Leader: id})
	}
	t.terms = out
	return out
}
