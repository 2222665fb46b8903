// Package rollout lets a role's hosts roll a new version out themselves:
// a host takes one of its role's update slots before its consistent
// (disruptive) step and gives it back when it reports the version or
// fails. The slots are a Consul semaphore under the prefix: each slot in
// use is a key locked by its holder's session, and every grant and release
// is one transaction that checks-and-sets the role's guard key, so two
// hosts never both take the last slot and a failure count is never read
// half-way. A holder that dies gives its slot back when its session
// expires. A role may wait for another (--after) and halts itself after
// too many failures.
package rollout

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/store"
)

// DefaultSessionTTL is the TTL of a slot holder's session: a holder that
// dies without giving its slot back (a killed converge) frees it within
// one to two TTLs, Consul's guarantee for session expiry. The holder
// renews it every half TTL, so a Consul hiccup shorter than 15 s costs
// nothing.
const DefaultSessionTTL = 30 * time.Second

// Verdict is the answer to "may this host take a slot now?".
type Verdict struct {
	Granted bool
	// Halt: the failures counted now halt the rollout (not yet recorded).
	Halt bool
	// Reason says why the host waits, for its status record.
	Reason string
}

// After is the progress of the role a rollout waits for.
type After struct {
	// Done is how many of its hosts report the version.
	Done int
	// Need is how many must; ok is false when neither the policy nor a
	// desired count says.
	Need   int
	NeedOK bool
}

// Decide says whether host may take a slot of r's role for version: not
// while the rollout of version is halted or has more failures than the
// policy allows, not before the --after role has enough hosts on version,
// and not while every slot is in use. A fresh host (a new server that runs
// no version yet) serves nothing, so it is not bounded by max_unavailable
// and does not count toward it; halts and order hold it like any host. It
// is a pure function of what was read.
func Decide(r *store.Rollout, host, version string, fresh bool, after After) Verdict {
	pol := r.Policy
	if why, recorded := Halted(r, version); why != "" {
		if !recorded {
			return Verdict{Halt: true, Reason: why}
		}
		return Verdict{Reason: fmt.Sprintf("the rollout of %s to %s is halted: %s; `orchestrate rollout resume %s` or a new version starts it again", r.Role, version, why, r.Role)}
	}
	if pol.After != "" {
		switch {
		case !after.NeedOK:
			return Verdict{Reason: fmt.Sprintf("role %s rolls out after role %s, which has no desired count: set one (orchestrate scale) or give --after %s:N", r.Role, pol.After, pol.After)}
		case after.Done < after.Need:
			return Verdict{Reason: fmt.Sprintf("role %s waits for role %s: %d of %d hosts run %s", r.Role, pol.After, after.Done, after.Need, version)}
		}
	}
	if !fresh && pol.MaxUnavailable > 0 && len(r.Holders()) >= pol.MaxUnavailable {
		return Verdict{Reason: fmt.Sprintf("waiting for an update slot of role %s: %d at a time", r.Role, pol.MaxUnavailable)}
	}
	return Verdict{Granted: true}
}

// Halted says why the rollout of version is halted ("" when it is not):
// a recorded halt, or more counted failures than max_failures, which
// halts it (recorded false: not written yet).
func Halted(r *store.Rollout, version string) (why string, recorded bool) {
	if h := r.State.Halted; h != nil && h.Version == version {
		return h.Reason, true
	}
	if failed := Counted(r, version); r.Policy.MaxFailures != nil && len(failed) > *r.Policy.MaxFailures {
		return haltReason(failed, version, *r.Policy.MaxFailures), false
	}
	return "", false
}

// Counted lists the hosts whose failure of version counts toward
// max_failures: those that failed it and were not forgiven by a resume.
func Counted(r *store.Rollout, version string) []string {
	forgiven := map[string]bool{}
	if res := r.State.Resumed; res != nil && res.Version == version {
		for _, h := range res.Forgiven {
			forgiven[h] = true
		}
	}
	var out []string
	for _, h := range r.Failed(version) {
		if !forgiven[h] {
			out = append(out, h)
		}
	}
	return out
}

func haltReason(failed []string, version string, max int) string {
	return fmt.Sprintf("%d hosts failed %s (%s), more than max_failures %d", len(failed), version, strings.Join(failed, ", "), max)
}

// Slots takes and gives back update slots for one host.
type Slots struct {
	st       *store.Store
	sessions *api.Session
	log      *slog.Logger
	// TTL is the holder session's TTL.
	TTL time.Duration
}

// New returns Slots working through st and the local agent's session
// endpoint.
func New(st *store.Store, sessions *api.Session, log *slog.Logger) *Slots {
	return &Slots{st: st, sessions: sessions, log: log, TTL: DefaultSessionTTL}
}

// Slot is a slot held; Release gives it back.
type Slot struct {
	s               *Slots
	role, host, ver string
	fresh           bool
	// session is the holder's session; renew replaces it when it was lost,
	// and nothing else reads it before renew ended.
	session          string
	stopCh, renewEnd chan struct{}
	stopOnce         sync.Once
}

// Acquire takes a slot of role for host and version, or says why not
// (slot nil, err nil); fresh says the host runs no version yet. A slot of
// host held by an earlier session (a converge that died) is given back
// first: the caller holds the host's converge lock, so no other run of
// this host can own it.
func (s *Slots) Acquire(ctx context.Context, role, host, version string, fresh bool) (*Slot, Verdict, error) {
	var session string
	defer func() {
		if session != "" {
			s.destroy(session)
		}
	}()
	for attempt := 0; attempt < store.MaxAttempts; attempt++ {
		if err := store.Backoff(ctx, attempt); err != nil {
			return nil, Verdict{}, err
		}
		r, err := s.st.Rollout(ctx, role)
		if err != nil {
			return nil, Verdict{}, err
		}
		if stale := s.staleOwn(r, host, session); len(stale) > 0 {
			for _, id := range stale {
				s.log.Info("giving back a rollout slot an earlier converge of this host left", "role", role, "host", host)
				if _, err := s.sessions.Destroy(id, (&api.WriteOptions{}).WithContext(ctx)); err != nil {
					return nil, Verdict{}, fmt.Errorf("give back the slot of an earlier run: %w", err)
				}
			}
			continue
		}
		after, err := s.after(ctx, r.Policy, version)
		if err != nil {
			return nil, Verdict{}, err
		}
		v := Decide(r, host, version, fresh, after)
		if v.Halt {
			st := r.State
			st.Halted = &store.RolloutHalt{Version: version, Reason: v.Reason, Time: s.st.Now().UTC()}
			ok, err := s.st.SetRolloutState(ctx, r, st)
			if err != nil {
				return nil, Verdict{}, err
			}
			if !ok {
				continue
			}
			s.log.Warn("rollout halted", "role", role, "version", version, "reason", v.Reason)
			v = Decide(&store.Rollout{Role: role, State: st}, host, version, fresh, after)
		}
		if !v.Granted {
			return nil, v, nil
		}
		if session == "" {
			session, err = s.create(ctx, role, host)
			if err != nil {
				return nil, Verdict{}, err
			}
		}
		ok, err := s.st.GrantSlot(ctx, r, guard(r), host, version, session, fresh)
		if err != nil {
			return nil, Verdict{}, err
		}
		if !ok {
			continue
		}
		sl := &Slot{s: s, role: role, host: host, ver: version, fresh: fresh, session: session, stopCh: make(chan struct{}), renewEnd: make(chan struct{})}
		session = "" // the slot owns it now
		go sl.renew()
		s.log.Info("took a rollout slot", "role", role, "host", host, "version", version)
		return sl, v, nil
	}
	// Every attempt lost to another host taking a slot: wait for the next
	// change, like any host that found the slots taken.
	return nil, Verdict{Reason: fmt.Sprintf("other hosts of %s took slots at the same moment; trying again on the next change", role)}, nil
}

// guard is the guard state a grant or release of r checks-and-sets, or
// nil when r's policy counts nothing (no bound, no halt, no order) and no
// halt is recorded.
func guard(r *store.Rollout) *store.RolloutState {
	p := r.Policy
	if p.MaxUnavailable == 0 && p.MaxFailures == nil && p.After == "" && r.State.Halted == nil {
		return nil
	}
	st := r.State
	return &st
}

// staleOwn lists the sessions of slots host holds other than current.
func (s *Slots) staleOwn(r *store.Rollout, host, current string) []string {
	var out []string
	for _, sl := range r.Slots {
		if sl.Host == host && sl.Session != current {
			out = append(out, sl.Session)
		}
	}
	return out
}

// after reads the progress of the role pol waits for.
func (s *Slots) after(ctx context.Context, pol store.RolloutPolicy, version string) (After, error) {
	if pol.After == "" {
		return After{}, nil
	}
	r, err := s.st.Rollout(ctx, pol.After)
	if err != nil {
		return After{}, err
	}
	a := After{Done: len(r.Done(version)), Need: pol.AfterHosts, NeedOK: pol.AfterHosts > 0}
	if !a.NeedOK {
		n, ok, err := s.st.Desired(ctx, pol.After)
		if err != nil {
			return After{}, err
		}
		a.Need, a.NeedOK = n, ok
	}
	return a, nil
}

// create makes the holder session: TTL, behaviour delete (the slot key
// goes with it). It has no health checks, so a flap of the node's gossip
// does not free the slot of a host still in its step; a dead node's slot
// is freed by the TTL, within one to two TTLs. (Consul still ends a node's
// sessions when its agent leaves, as on a restart: renew takes the slot
// back then.)
func (s *Slots) create(ctx context.Context, role, host string) (string, error) {
	id, _, err := s.sessions.CreateNoChecks(&api.SessionEntry{
		Name:     "orchestrate rollout slot " + role + " " + host,
		TTL:      s.TTL.String(),
		Behavior: api.SessionBehaviorDelete,
		// The slot key is this session's alone; no other holder waits on
		// it, so no lock delay is needed.
		LockDelay: time.Millisecond,
	}, (&api.WriteOptions{}).WithContext(ctx))
	if err != nil {
		return "", fmt.Errorf("create the rollout slot session: %w", err)
	}
	return id, nil
}

// destroy ends a session, bounded, whatever ctx the caller had.
func (s *Slots) destroy(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.sessions.Destroy(id, (&api.WriteOptions{}).WithContext(ctx)); err != nil {
		s.log.Warn("cannot end the rollout slot session; it expires on its own", "ttl", s.TTL, "err", err)
	}
}

// renew keeps the session alive until the slot is given back, renewing
// every half TTL; each renewal is bounded so a hung request cannot
// outlive the session. When the session is lost (Consul unreachable for a
// whole TTL, or the node's agent left and rejoined, which ends its
// sessions), the host is still in its step: renew takes its slot back
// under a new session, over the bound if another host took it meanwhile,
// so the count shows every host in its step and no further one starts.
func (sl *Slot) renew() {
	defer close(sl.renewEnd)
	ttl := sl.s.TTL
	last := time.Now()
	for {
		select {
		case <-sl.stopCh:
			return
		case <-time.After(ttl / 2):
		}
		ctx, cancel := context.WithTimeout(context.Background(), ttl/2)
		entry, _, err := sl.s.sessions.Renew(sl.session, (&api.WriteOptions{}).WithContext(ctx))
		cancel()
		switch {
		case err == nil && entry == nil, err != nil && time.Since(last) > ttl:
			sl.s.log.Warn("lost the rollout slot's session while in the step; taking the slot back", "role", sl.role, "host", sl.host, "err", err)
			if !sl.retake() {
				return
			}
			last = time.Now()
		case err == nil:
			last = time.Now()
		}
	}
}

// retake takes the slot back under a new session, trying every second
// until it succeeds or the slot is given back (false).
func (sl *Slot) retake() bool {
	s := sl.s
	for {
		select {
		case <-sl.stopCh:
			return false
		case <-time.After(time.Second):
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.TTL)
		ok, err := sl.retakeOnce(ctx)
		cancel()
		if ok {
			s.log.Info("took the rollout slot back", "role", sl.role, "host", sl.host)
			return true
		}
		if err != nil {
			s.log.Debug("cannot take the rollout slot back yet", "role", sl.role, "host", sl.host, "err", err)
		}
	}
}

// retakeOnce tries once: a new session, and the slot granted to it
// whatever the bound says (the host is in its step).
func (sl *Slot) retakeOnce(ctx context.Context) (bool, error) {
	s := sl.s
	id, err := s.create(ctx, sl.role, sl.host)
	if err != nil {
		return false, err
	}
	r, err := s.st.Rollout(ctx, sl.role)
	ok := false
	if err == nil {
		ok, err = s.st.GrantSlot(ctx, r, guard(r), sl.host, sl.ver, id, sl.fresh)
	}
	if !ok {
		s.destroy(id)
		return false, err
	}
	sl.session = id
	return true, nil
}

// stop ends renew; the session is then the slot's for good.
func (sl *Slot) stop() {
	sl.stopOnce.Do(func() {
		close(sl.stopCh)
		<-sl.renewEnd
	})
}

// Release records host's outcome (state is a store.Rollout* state) and
// gives the slot back, in one transaction; a failure that puts the role
// over max_failures halts its rollout in the same transaction. The session
// ends either way, so a slot whose release could not be written is freed
// by Consul.
func (sl *Slot) Release(ctx context.Context, state, detail string) error {
	sl.stop()
	defer sl.s.destroy(sl.session)
	return sl.s.record(ctx, sl.role, sl.host, sl.ver, sl.session, state, detail)
}

// Abandon gives the slot back without recording an outcome (the run ended
// on an error): the session ends, and with it the slot key.
func (sl *Slot) Abandon() {
	sl.stop()
	sl.s.destroy(sl.session)
}

// Record records host's outcome for version without a slot (an eventual
// step that ran alone), so the role's done and failed counts stay true.
func (s *Slots) Record(ctx context.Context, role, host, version, state, detail string) error {
	return s.record(ctx, role, host, version, "", state, detail)
}

func (s *Slots) record(ctx context.Context, role, host, version, session, state, detail string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	// Many hosts of a role may finish at once; a release must not give up
	// as early as a grant may.
	for attempt := 0; attempt < 3*store.MaxAttempts; attempt++ {
		if err := store.Backoff(ctx, min(attempt, store.MaxAttempts)); err != nil {
			return err
		}
		r, err := s.st.Rollout(ctx, role)
		if err != nil {
			return err
		}
		if h, ok := r.Hosts[host]; ok && session == "" && h.Version == version && h.State == state {
			// An eventual step that ran alone again with the same outcome
			// (pending on every data change, say): the counts do not
			// change, so nothing is written and the role's waiting hosts
			// are not woken for nothing. (The detail, which names each
			// run's log, is in the host's status record.)
			return nil
		}
		st := guard(r) // a copy: non-nil whenever MaxFailures is set
		rec := store.RolloutHost{Version: version, State: state, Detail: detail}
		if state == store.RolloutFailed && r.Policy.MaxFailures != nil && (st.Halted == nil || st.Halted.Version != version) {
			r2 := *r
			r2.Hosts = map[string]store.RolloutHost{host: rec}
			for h, x := range r.Hosts {
				if h != host {
					r2.Hosts[h] = x
				}
			}
			if failed := Counted(&r2, version); len(failed) > *r.Policy.MaxFailures {
				st.Halted = &store.RolloutHalt{Version: version, Reason: haltReason(failed, version, *r.Policy.MaxFailures), Time: s.st.Now().UTC()}
			}
		}
		ok, err := s.st.EndSlot(ctx, r, st, host, session, rec)
		if err != nil {
			return err
		}
		if ok {
			if st != nil && st.Halted != r.State.Halted {
				s.log.Warn("rollout halted", "role", role, "version", version, "reason", st.Halted.Reason)
			}
			return nil
		}
	}
	return fmt.Errorf("record the rollout outcome of %s: %w", host, store.ErrConflict)
}

// Resume lifts a halt of version's rollout of role: the failures counted
// so far are forgiven (they no longer count toward max_failures; new ones
// do). halted is false, and nothing is written, when it was not halted.
func Resume(ctx context.Context, st *store.Store, role, version string) (halted bool, forgiven []string, err error) {
	for attempt := 0; attempt < store.MaxAttempts; attempt++ {
		if err := store.Backoff(ctx, attempt); err != nil {
			return false, nil, err
		}
		r, err := st.Rollout(ctx, role)
		if err != nil {
			return false, nil, err
		}
		state := r.State
		counted := Counted(r, version)
		if why, _ := Halted(r, version); why == "" {
			return false, nil, nil
		}
		all := counted
		if res := state.Resumed; res != nil && res.Version == version {
			all = append(append([]string{}, res.Forgiven...), counted...)
		}
		state.Halted = nil
		state.Resumed = &store.RolloutResume{Version: version, Forgiven: all, Time: st.Now().UTC()}
		ok, err := st.SetRolloutState(ctx, r, state)
		if err != nil {
			return false, nil, err
		}
		if ok {
			return true, counted, nil
		}
	}
	return false, nil, fmt.Errorf("resume the rollout of %s: %w", role, store.ErrConflict)
}
