// Package rollout lets a role's hosts roll a new version out themselves:
// a host takes one of its role's update slots before its consistent
// (disruptive) step and gives it back when it reports the version or
// fails. A host writes only its own keys: its claim on a slot
// (rollout/<role>/slot/<host>, locked by its session) and its progress
// (rollout/<role>/hosts/<host>); no key is shared, so a node's token needs
// write on nothing of another host's, and no node can free, forge or
// count another host's slot. A holder that dies gives its slot back when
// its session expires. A role may wait for another (--after) and halts
// once too many of its hosts failed, a halt derived from the hosts' own
// records that no node writes.
//
// Why at most max_unavailable hosts hold a slot (a bakery over Raft's
// order): a host creates its claim, then reads the role's rollout with a
// consistent read. Consul commits every write at a Raft index, the
// claim's CreateIndex, and a consistent read begun after the claim was
// created sees every write committed before it, so it sees every claim
// with a smaller CreateIndex that still exists. The host keeps its claim
// only when fewer than max_unavailable of those earlier claims (fresh ones
// aside) are live; otherwise it deletes it and waits. Take the claims
// granted and held at any moment, in CreateIndex order: the k-th was
// created after the k-1 before it, which exist still (they are held), so
// its read saw them and it was granted only because k-1 < max_unavailable.
// So k <= max_unavailable. A claim is never rewritten: its CreateIndex, its
// place in line, never moves. The one grant that does not ask is a host
// taking back, after its agent restarted, the slot it held in its step:
// it is in its step either way, and its new claim stands behind every
// other, so later hosts count it (TestSlotsBoundUnderContention: 20 hosts,
// 3 slots).
package rollout

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
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
	// Halted: the rollout of the version is halted.
	Halted bool
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

// Request is a host asking for a slot of a role.
type Request struct {
	Host, Version string
	// Fresh: the host runs no version yet.
	Fresh bool
	// Claim is the CreateIndex of the host's claim; 0 asks before
	// claiming, when every live claim counts.
	Claim uint64
}

// Decide says whether req's host may take a slot of r's role: not while
// the rollout of the version is halted, not while slots of an older
// orchestrate's layout are held, not before the --after role has enough
// hosts on the version, and not while max_unavailable claims stand before
// the host's in line. A fresh host (a new server that runs no version yet)
// serves nothing, so it is not bounded by max_unavailable and does not
// count toward it; halts and order hold it like any host. It is a pure
// function of what was read.
func Decide(r *store.Rollout, req Request, after After) Verdict {
	pol := r.Policy
	if why := Halted(r, req.Version); why != "" {
		return Verdict{Halted: true, Reason: fmt.Sprintf("the rollout of %s to %s is halted: %s; `orchestrate rollout resume %s` or a new version starts it again", r.Role, req.Version, why, r.Role)}
	}
	if len(r.LegacySlots) > 0 {
		return Verdict{Reason: LegacyReason(r)}
	}
	if pol.After != "" {
		switch {
		case !after.NeedOK:
			return Verdict{Reason: fmt.Sprintf("role %s rolls out after role %s, which has no desired count: set one (orchestrate scale) or give --after %s:N", r.Role, pol.After, pol.After)}
		case after.Done < after.Need:
			return Verdict{Reason: fmt.Sprintf("role %s waits for role %s: %d of %d hosts run %s", r.Role, pol.After, after.Done, after.Need, req.Version)}
		}
	}
	if !req.Fresh && pol.MaxUnavailable > 0 && len(r.Ahead(req.Host, req.Claim)) >= pol.MaxUnavailable {
		return Verdict{Reason: fmt.Sprintf("waiting for an update slot of role %s: %d at a time", r.Role, pol.MaxUnavailable)}
	}
	return Verdict{Granted: true}
}

// LegacyReason says why no slot is granted while r holds slots of an
// older orchestrate's layout, and what to do ("" when it holds none).
func LegacyReason(r *store.Rollout) string {
	if len(r.LegacySlots) == 0 {
		return ""
	}
	var held []string
	for _, s := range r.LegacySlots {
		held = append(held, s.Host+" (session "+s.Session+")")
	}
	return fmt.Sprintf("a rollout of %s started by an older orchestrate is in progress: slots held in the older layout (rollout/%s/slot/<session>) by %s; no slot is granted until they are given back, when their converge ends or its session expires (one to two TTLs after the holder died). For a holder gone for good: `consul session destroy SESSION`", r.Role, r.Role, strings.Join(held, ", "))
}

// Halted says why the rollout of version is halted, "" when it is not: a
// halt an older orchestrate recorded that no resume lifted since, or more
// counted failures than max_failures. No node writes a halt: it is derived
// from the hosts' own progress records and the operator's resume.
func Halted(r *store.Rollout, version string) string {
	if l := r.Legacy; l != nil && l.Halted != nil && l.Halted.Version == version &&
		!(r.Resume != nil && r.Resume.Version == version && r.ResumeIndex > r.LegacyIndex) {
		return l.Halted.Reason + " (halted by an older orchestrate)"
	}
	if failed := Counted(r, version); r.Policy.MaxFailures != nil && len(failed) > *r.Policy.MaxFailures {
		return haltReason(failed, version, *r.Policy.MaxFailures)
	}
	return ""
}

// Counted lists the hosts whose failure of version counts toward
// max_failures: those whose record says they failed it (or is unreadable),
// unless a resume of version forgave the host after that record was
// written. A resume forgives the hosts failed so far; a forgiven host that
// fails again writes its record again, at an index after the resume's,
// and counts again. (An older orchestrate's resume is judged by its
// state's index, which its own later failures shared: those stay
// forgiven, as they were.)
func Counted(r *store.Rollout, version string) []string {
	var out []string
	for _, h := range r.Failed(version) {
		rec := r.Hosts[h]
		forgiven := !rec.Unreadable &&
			(r.Resume != nil && r.Resume.Version == version && slices.Contains(r.Resume.Forgiven, h) && r.ResumeIndex > rec.Index ||
				r.Legacy != nil && r.Legacy.Resumed != nil && r.Legacy.Resumed.Version == version && slices.Contains(r.Legacy.Resumed.Forgiven, h) && r.LegacyIndex >= rec.Index)
		if !forgiven {
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
// endpoint: the holder's sessions are on the agent's node, the host's
// own.
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
// (slot nil, err nil); fresh says the host runs no version yet. What an
// earlier run of host left (a claim held by the session of a converge that
// died) is given back first: the caller holds the host's converge lock, so
// no other run of this host can own it.
//
// Each pass decides on what it read before claiming (a host that would
// wait writes nothing), then claims and decides again on a consistent
// read (package comment). A claim that other claims ahead of it outnumber
// is deleted and the next pass decides again: hosts that claimed at the
// same moment all wait only when the slots are really taken.
func (s *Slots) Acquire(ctx context.Context, role, host, version string, fresh bool) (*Slot, Verdict, error) {
	var session string
	defer func() {
		if session != "" {
			s.destroy(session)
		}
	}()
	req := Request{Host: host, Version: version, Fresh: fresh}
	for attempt := 0; attempt < store.MaxAttempts; attempt++ {
		if err := store.Backoff(ctx, attempt); err != nil {
			return nil, Verdict{}, err
		}
		r, err := s.st.Rollout(ctx, role)
		if err != nil {
			return nil, Verdict{}, err
		}
		if left, err := s.clearOwn(ctx, r, host); err != nil || left {
			if err != nil {
				return nil, Verdict{}, err
			}
			continue
		}
		if v, err := s.decide(ctx, r, req); err != nil || !v.Granted {
			return nil, v, err
		}
		if session == "" {
			if session, err = s.create(ctx, role, host); err != nil {
				return nil, Verdict{}, err
			}
		}
		sl, err := s.claim(ctx, role, req, session)
		if err != nil {
			return nil, Verdict{}, err
		}
		if sl != nil {
			session = "" // the slot owns it now
			go sl.renew()
			s.log.Info("took a rollout slot", "role", role, "host", host, "version", version)
			return sl, Verdict{Granted: true}, nil
		}
	}
	// Every pass lost to other hosts claiming at the same moment: wait for
	// the next change, like any host that found the slots taken.
	return nil, Verdict{Reason: fmt.Sprintf("other hosts of %s took slots at the same moment; trying again on the next change", role)}, nil
}

// claim creates req's claim under session, reads the rollout consistently
// and keeps the claim when the host may go, marking it updating; otherwise
// it deletes the claim (sl nil, err nil) for the caller to decide again.
func (s *Slots) claim(ctx context.Context, role string, req Request, session string) (*Slot, error) {
	idx, ok, err := s.st.ClaimSlot(ctx, role, req.Host, req.Version, session, req.Fresh)
	if err != nil || !ok {
		return nil, err
	}
	req.Claim = idx
	r, err := s.st.RolloutConsistent(ctx, role)
	v := Verdict{}
	if err == nil {
		v, err = s.decide(ctx, r, req)
	}
	if err == nil && v.Granted {
		if c := r.Claim(req.Host); c == nil || c.CreateIndex != idx {
			v = Verdict{} // the session was lost in between: the claim is gone
		}
	}
	if err == nil && v.Granted {
		err = s.st.SetRolloutHost(ctx, role, req.Host, store.RolloutHost{Version: req.Version, State: store.RolloutUpdating})
		if err == nil {
			return &Slot{s: s, role: role, host: req.Host, ver: req.Version, fresh: req.Fresh,
				session: session, stopCh: make(chan struct{}), renewEnd: make(chan struct{})}, nil
		}
	}
	if derr := s.st.DropClaim(context.WithoutCancel(ctx), role, req.Host, idx); derr != nil {
		s.log.Warn("cannot give back a claim that was not granted; it goes with its session", "role", role, "host", req.Host, "err", derr)
	}
	return nil, err
}

// decide reads the progress of the --after role and decides on r.
func (s *Slots) decide(ctx context.Context, r *store.Rollout, req Request) (Verdict, error) {
	after, err := s.after(ctx, r.Policy, req.Version)
	if err != nil {
		return Verdict{}, err
	}
	return Decide(r, req, after), nil
}

// clearOwn gives back what an earlier run of host left in r: the session
// holding its claim or a slot of the older layout, or its claim key held
// by nobody. left says something was, and r must be read again.
func (s *Slots) clearOwn(ctx context.Context, r *store.Rollout, host string) (left bool, err error) {
	var stale []string
	if c := r.Claim(host); c != nil {
		stale = append(stale, c.Session)
	}
	for _, sl := range r.LegacySlots {
		if sl.Host == host {
			stale = append(stale, sl.Session)
		}
	}
	for _, id := range stale {
		s.log.Info("giving back a rollout slot an earlier converge of this host left", "role", r.Role, "host", host)
		if _, err := s.sessions.Destroy(id, (&api.WriteOptions{}).WithContext(ctx)); err != nil {
			return false, fmt.Errorf("give back the slot of an earlier run: %w", err)
		}
	}
	if slices.Contains(r.Unheld, host) {
		if err := s.st.DropUnheld(ctx, r.Role, host); err != nil {
			return false, err
		}
		stale = append(stale, "")
	}
	return len(stale) > 0, nil
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

// create makes the holder session: TTL, behaviour delete (the claim goes
// with it). It has no health checks, so a flap of the node's gossip does
// not free the slot of a host still in its step; a dead node's slot is
// freed by the TTL, within one to two TTLs. (Consul still ends a node's
// sessions when its agent leaves, as on a restart: renew takes the slot
// back then.)
func (s *Slots) create(ctx context.Context, role, host string) (string, error) {
	id, _, err := s.sessions.CreateNoChecks(&api.SessionEntry{
		Name:     "orchestrate rollout slot " + role + " " + host,
		TTL:      s.TTL.String(),
		Behavior: api.SessionBehaviorDelete,
		// The claim is this host's alone; no other holder waits on it, so
		// no lock delay is needed.
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
// with a new claim under a new session, over the bound if another host
// took it meanwhile, so the count shows every host in its step and no
// further one starts.
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

// retakeOnce tries once: a new session, and a new claim under it,
// whatever the bound says (the host is in its step). The lost session's
// claim went with it; should it still be there, it is not taken over (a
// claim is never rewritten) and the next try looks again.
func (sl *Slot) retakeOnce(ctx context.Context) (bool, error) {
	s := sl.s
	id, err := s.create(ctx, sl.role, sl.host)
	if err != nil {
		return false, err
	}
	_, ok, err := s.st.ClaimSlot(ctx, sl.role, sl.host, sl.ver, id, sl.fresh)
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
// gives the slot back, in one transaction. The session ends either way,
// so a slot whose release could not be written is freed by Consul.
func (sl *Slot) Release(ctx context.Context, state, detail string) error {
	sl.stop()
	defer sl.s.destroy(sl.session)
	return sl.s.record(ctx, sl.role, sl.host, sl.ver, true, state, detail)
}

// Abandon gives the slot back without recording an outcome (the run ended
// on an error): the session ends, and with it the claim.
func (sl *Slot) Abandon() {
	sl.stop()
	sl.s.destroy(sl.session)
}

// Record records host's outcome for version without a slot (an eventual
// step that ran alone), so the role's done and failed counts stay true.
func (s *Slots) Record(ctx context.Context, role, host, version, state, detail string) error {
	return s.record(ctx, role, host, version, false, state, detail)
}

// record writes host's outcome (and with release gives its claim back); a
// host that reports the version rings its role's followers' doorbells.
func (s *Slots) record(ctx context.Context, role, host, version string, release bool, state, detail string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	r, err := s.st.Rollout(ctx, role)
	if err != nil {
		return err
	}
	if h, ok := r.Hosts[host]; ok && !release && !h.Unreadable && h.Version == version && h.State == state &&
		(state != store.RolloutFailed || slices.Contains(Counted(r, version), host)) {
		// An eventual step that ran alone again with the same outcome
		// (pending on every data change, say): the counts do not change,
		// so nothing is written and the role's waiting hosts are not woken
		// for nothing. (The detail, which names each run's log, is in the
		// host's status record.) A forgiven failure is written again: it
		// counts again.
		return nil
	}
	rec := store.RolloutHost{Version: version, State: state, Detail: detail}
	if err := s.st.EndSlot(ctx, role, r.Followers, host, release, rec); err != nil {
		return err
	}
	if state == store.RolloutFailed && Halted(r, version) == "" {
		rec.Index = math.MaxUint64 // written after everything r holds
		r.Hosts[host] = rec
		if why := Halted(r, version); why != "" {
			s.log.Warn("rollout halted", "role", role, "version", version, "reason", why)
		}
	}
	return nil
}

// Resume lifts a halt of version's rollout of role: it writes the role's
// resume record, which forgives every host that failed version so far
// (their failures no longer count toward max_failures; new ones do, a
// forgiven host's included) and lifts an older orchestrate's halt.
// halted is false, and nothing is written, when it was not halted;
// forgiven lists the failures that counted until now. Only the operator's
// token may write the resume.
func Resume(ctx context.Context, st *store.Store, role, version string) (halted bool, forgiven []string, err error) {
	for attempt := 0; attempt < store.MaxAttempts; attempt++ {
		if err := store.Backoff(ctx, attempt); err != nil {
			return false, nil, err
		}
		r, err := st.RolloutConsistent(ctx, role)
		if err != nil {
			return false, nil, err
		}
		if Halted(r, version) == "" {
			return false, nil, nil
		}
		counted := Counted(r, version)
		res := store.RolloutResume{Version: version, Forgiven: orEmpty(r.Failed(version)), Time: st.Now().UTC()}
		ok, err := st.ResumeRollout(ctx, r, res)
		if err != nil {
			return false, nil, err
		}
		if ok {
			return true, counted, nil
		}
	}
	return false, nil, fmt.Errorf("resume the rollout of %s: %w", role, store.ErrConflict)
}

func orEmpty(xs []string) []string {
	if xs == nil {
		return []string{}
	}
	return xs
}
