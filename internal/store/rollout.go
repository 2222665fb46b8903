package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
)

// A role's rollout lives under <prefix>/rollout/<role>/:
//
//	policy            the operator's settings (orchestrate rollout ROLE ...)
//	state             the guard: every slot grant and release is one
//	                  transaction that checks-and-sets it, so the limit and
//	                  the failure count are decided on one consistent view;
//	                  it also holds a halt and a resume
//	slot/<session>    one key per slot in use, locked by its holder's
//	                  session; the session's behaviour is delete, so the key
//	                  goes when the holder's session expires or its node fails
//	hosts/<host>      each host's progress on the version it last worked on
//	followers/<role>  roles whose policy says --after this role
//	wake              touched when a role this one follows made progress, so
//	                  a watch on this role's keys wakes its waiting hosts
const (
	dirRollout      = "rollout"
	rolloutPolicy   = "policy"
	rolloutState    = "state"
	rolloutSlots    = "slot"
	rolloutHosts    = "hosts"
	rolloutFollower = "followers"
	rolloutWake     = "wake"
)

// Rollout host states, in hosts/<host>.
const (
	// RolloutUpdating: the host holds a slot and runs its consistent step.
	RolloutUpdating = "updating"
	// RolloutDone: the host reported the version.
	RolloutDone = "done"
	// RolloutFailed: the host failed the version (a step failed).
	RolloutFailed = "failed"
	// RolloutPending: the host did its consistent step and waits on other
	// hosts' data (the eventual step is pending).
	RolloutPending = "pending"
)

// RolloutPolicy is a role's rollout settings.
type RolloutPolicy struct {
	// MaxUnavailable bounds how many hosts of the role run their
	// consistent step at once; 0 is no bound.
	MaxUnavailable int `json:"max_unavailable"`
	// MaxFailures, when set, halts the rollout once more hosts than this
	// failed the version.
	MaxFailures *int `json:"max_failures,omitempty"`
	// After names a role whose hosts go first: this role's hosts take slots
	// only once AfterHosts of them (0: the role's desired count) report the
	// version.
	After      string    `json:"after,omitempty"`
	AfterHosts int       `json:"after_hosts,omitempty"`
	Time       time.Time `json:"time"`
}

// RolloutState is the guard of a role's rollout.
type RolloutState struct {
	// Seq counts the transactions on the guard; each changes it, so every
	// check-and-set moves the key's index.
	Seq     uint64         `json:"seq"`
	Halted  *RolloutHalt   `json:"halted,omitempty"`
	Resumed *RolloutResume `json:"resumed,omitempty"`
}

// RolloutHalt says why the rollout of a version stopped granting slots.
type RolloutHalt struct {
	Version string    `json:"version"`
	Reason  string    `json:"reason"`
	Time    time.Time `json:"time"`
}

// RolloutResume is an operator's resume: the failures of Version it
// forgives no longer count toward max_failures.
type RolloutResume struct {
	Version  string    `json:"version"`
	Forgiven []string  `json:"forgiven"`
	Time     time.Time `json:"time"`
}

// RolloutSlot is a slot in use.
type RolloutSlot struct {
	Session string `json:"-"`
	Host    string `json:"host"`
	Version string `json:"version"`
	// Fresh: the host runs no version yet (a new server building), so it
	// serves nothing and does not count toward max_unavailable.
	Fresh bool      `json:"fresh,omitempty"`
	Time  time.Time `json:"time"`
}

// RolloutHost is one host's progress, in hosts/<host>.
type RolloutHost struct {
	Version string    `json:"version"`
	State   string    `json:"state"`
	Detail  string    `json:"detail,omitempty"`
	Time    time.Time `json:"time"`
}

// Rollout is everything stored about one role's rollout, read in one
// request; the indexes are what a transaction on it checks.
type Rollout struct {
	Role        string
	Policy      RolloutPolicy
	PolicyIndex uint64 // 0: no policy written (no bound, no halt, no order)
	State       RolloutState
	StateIndex  uint64 // 0: no guard yet
	Slots       []RolloutSlot
	Hosts       map[string]RolloutHost
	Followers   []string
}

// Failed lists the hosts whose record says they failed version, sorted.
func (r *Rollout) Failed(version string) []string {
	return r.hostsIn(version, RolloutFailed)
}

// Done lists the hosts whose record says they run version, sorted.
func (r *Rollout) Done(version string) []string {
	return r.hostsIn(version, RolloutDone)
}

func (r *Rollout) hostsIn(version, state string) []string {
	var out []string
	for h, rec := range r.Hosts {
		if rec.Version == version && rec.State == state {
			out = append(out, h)
		}
	}
	sort.Strings(out)
	return out
}

// Holders lists the hosts that hold a slot and count toward
// max_unavailable (fresh ones do not), sorted.
func (r *Rollout) Holders() []string {
	return r.holders(false)
}

// Fresh lists the new hosts (no version yet) that hold a slot, sorted.
func (r *Rollout) Fresh() []string {
	return r.holders(true)
}

func (r *Rollout) holders(fresh bool) []string {
	out := []string{}
	for _, s := range r.Slots {
		if s.Fresh == fresh {
			out = append(out, s.Host)
		}
	}
	sort.Strings(out)
	return out
}

func (s *Store) rolloutDir(role string) string { return s.key(dirRollout, role) + "/" }

// RolloutDir is the directory of role's rollout keys, with a trailing
// slash: a keyprefix watch on it wakes the role's waiting hosts whenever a
// slot is given back, a holder's session ends, the policy changes, a halt
// is lifted or a role it follows made progress.
func (s *Store) RolloutDir(role string) string { return s.rolloutDir(role) }

// Rollout reads role's rollout. A value orchestrate did not write is an
// InputError naming the key: a record that cannot be read might hide a
// failure or a slot in use.
func (s *Store) Rollout(ctx context.Context, role string) (*Rollout, error) {
	if err := ValidName("role", role); err != nil {
		return nil, &InputError{Err: err}
	}
	dir := s.rolloutDir(role)
	pairs, meta, err := s.kv.List(dir, readOpts(ctx))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", dir, err)
	}
	if err := hiddenByACLs(meta, dir); err != nil {
		return nil, err
	}
	return parseRollout(role, dir, pairs)
}

// Rollouts reads every role's rollout, in one request.
func (s *Store) Rollouts(ctx context.Context) (map[string]*Rollout, error) {
	dir := s.key(dirRollout) + "/"
	pairs, meta, err := s.kv.List(dir, readOpts(ctx))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", dir, err)
	}
	if err := hiddenByACLs(meta, dir); err != nil {
		return nil, err
	}
	byRole := map[string]api.KVPairs{}
	for _, p := range pairs {
		role, _, _ := strings.Cut(strings.TrimPrefix(p.Key, dir), "/")
		byRole[role] = append(byRole[role], p)
	}
	out := map[string]*Rollout{}
	for role, ps := range byRole {
		if err := ValidName("role", role); err != nil {
			return nil, &InputError{Err: fmt.Errorf("%s%s: %w", dir, role, err)}
		}
		r, err := parseRollout(role, dir+role+"/", ps)
		if err != nil {
			return nil, err
		}
		out[role] = r
	}
	return out, nil
}

func parseRollout(role, dir string, pairs api.KVPairs) (*Rollout, error) {
	r := &Rollout{Role: role, Hosts: map[string]RolloutHost{}}
	bad := func(p *api.KVPair, format string, args ...any) error {
		return &InputError{Err: fmt.Errorf("%s: %s (written by hand? `orchestrate rollout` and converge write these keys)", p.Key, fmt.Sprintf(format, args...))}
	}
	for _, p := range pairs {
		parts := strings.Split(strings.TrimPrefix(p.Key, dir), "/")
		switch {
		case len(parts) == 1 && parts[0] == rolloutPolicy:
			if err := strictJSON(p.Value, &r.Policy); err != nil {
				return nil, bad(p, "not a rollout policy: %v", err)
			}
			if err := r.Policy.Validate(); err != nil {
				return nil, bad(p, "%v", err)
			}
			if r.Policy.After == role {
				return nil, bad(p, "role %s rolls out after itself: no host would ever start", role)
			}
			r.PolicyIndex = p.ModifyIndex
		case len(parts) == 1 && parts[0] == rolloutState:
			if err := strictJSON(p.Value, &r.State); err != nil {
				return nil, bad(p, "not a rollout state: %v", err)
			}
			r.StateIndex = p.ModifyIndex
		case len(parts) == 1 && parts[0] == rolloutWake:
		case len(parts) == 2 && parts[0] == rolloutSlots:
			if p.Session == "" {
				// Released but not deleted: no holder.
				continue
			}
			sl := RolloutSlot{Session: p.Session}
			if err := strictJSON(p.Value, &sl); err != nil || ValidName("host", sl.Host) != nil {
				return nil, bad(p, "not a rollout slot of a host")
			}
			r.Slots = append(r.Slots, sl)
		case len(parts) == 2 && parts[0] == rolloutHosts && ValidName("host", parts[1]) == nil:
			var h RolloutHost
			if err := strictJSON(p.Value, &h); err != nil {
				return nil, bad(p, "not a rollout host record: %v", err)
			}
			switch h.State {
			case RolloutUpdating, RolloutDone, RolloutFailed, RolloutPending:
			default:
				return nil, bad(p, "unknown rollout state %q", h.State)
			}
			r.Hosts[parts[1]] = h
		case len(parts) == 2 && parts[0] == rolloutFollower && ValidName("role", parts[1]) == nil:
			r.Followers = append(r.Followers, parts[1])
		default:
			return nil, bad(p, "not a rollout key")
		}
	}
	return r, nil
}

// strictJSON decodes data into v, refusing unknown fields and trailing
// data.
func strictJSON(data []byte, v any) error {
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data")
	}
	return nil
}

// Validate names the first bad field of a policy.
func (p RolloutPolicy) Validate() error {
	switch {
	case p.MaxUnavailable < 0:
		return fmt.Errorf("max_unavailable %d is negative", p.MaxUnavailable)
	case p.MaxFailures != nil && *p.MaxFailures < 0:
		return fmt.Errorf("max_failures %d is negative", *p.MaxFailures)
	case p.AfterHosts < 0:
		return fmt.Errorf("after_hosts %d is negative", p.AfterHosts)
	case p.After == "" && p.AfterHosts != 0:
		return errors.New("after_hosts without after")
	}
	if p.After != "" {
		if err := ValidName("after role", p.After); err != nil {
			return err
		}
	}
	return nil
}

// SetRolloutPolicy changes role's policy with change, in one
// check-and-set transaction that also moves the follower mark of its
// --after role, and returns the policy written.
func (s *Store) SetRolloutPolicy(ctx context.Context, role string, change func(*RolloutPolicy) error) (RolloutPolicy, error) {
	if err := ValidName("role", role); err != nil {
		return RolloutPolicy{}, &InputError{Err: err}
	}
	for attempt := 0; attempt < maxAttempts; attempt++ {
		if err := backoff(ctx, attempt); err != nil {
			return RolloutPolicy{}, err
		}
		r, err := s.Rollout(ctx, role)
		if err != nil {
			return RolloutPolicy{}, err
		}
		p := r.Policy
		if err := change(&p); err != nil {
			return RolloutPolicy{}, &InputError{Err: err}
		}
		if p.After == role {
			return RolloutPolicy{}, &InputError{Err: fmt.Errorf("role %s cannot roll out after itself", role)}
		}
		if err := p.Validate(); err != nil {
			return RolloutPolicy{}, &InputError{Err: err}
		}
		if err := s.afterCycle(ctx, role, p.After); err != nil {
			return RolloutPolicy{}, err
		}
		p.Time = s.Now().UTC()
		val, err := json.Marshal(p)
		if err != nil {
			return RolloutPolicy{}, err
		}
		ops := api.KVTxnOps{{Verb: api.KVCAS, Key: s.rolloutDir(role) + rolloutPolicy, Value: val, Index: r.PolicyIndex}}
		if r.Policy.After != "" && r.Policy.After != p.After {
			ops = append(ops, &api.KVTxnOp{Verb: api.KVDelete, Key: s.rolloutDir(r.Policy.After) + rolloutFollower + "/" + role})
		}
		if p.After != "" {
			ops = append(ops, &api.KVTxnOp{Verb: api.KVSet, Key: s.rolloutDir(p.After) + rolloutFollower + "/" + role})
		}
		ok, err := s.txn(ctx, ops, "rollout policy of "+role)
		if err != nil {
			return RolloutPolicy{}, err
		}
		if ok {
			return p, nil
		}
	}
	return RolloutPolicy{}, fmt.Errorf("rollout policy of %s: %w", role, ErrConflict)
}

// afterCycle refuses an order that comes back to role (a after b, b after
// a): neither role's hosts would ever start.
func (s *Store) afterCycle(ctx context.Context, role, after string) error {
	chain := []string{role}
	for next := after; next != ""; {
		chain = append(chain, next)
		if next == role {
			return &InputError{Err: fmt.Errorf("--after %s makes a circle: %s; no host of these roles would ever start", after, strings.Join(chain, " after "))}
		}
		if len(chain) > 64 {
			return &InputError{Err: fmt.Errorf("--after %s: the chain of roles is longer than 64", after)}
		}
		r, err := s.Rollout(ctx, next)
		if err != nil {
			return err
		}
		next = r.Policy.After
	}
	return nil
}

// GrantSlot gives host a slot of r's role for version, held by session:
// one transaction that checks-and-sets the guard (as read in r, changed
// to st), locks slot/<session> and marks the host updating. ok is false
// when another writer moved the guard first: read again and decide again.
//
// A nil st leaves the guard alone and checks only that the policy is
// still the one read: for a policy with no bound, no halt and no order,
// nothing is counted, and a thousand hosts taking slots at once must not
// fight over one key.
func (s *Store) GrantSlot(ctx context.Context, r *Rollout, st *RolloutState, host, version, session string, fresh bool) (ok bool, err error) {
	now := s.Now().UTC()
	slot, err := json.Marshal(RolloutSlot{Host: host, Version: version, Fresh: fresh, Time: now})
	if err != nil {
		return false, err
	}
	rec, err := json.Marshal(RolloutHost{Version: version, State: RolloutUpdating, Time: now})
	if err != nil {
		return false, err
	}
	dir := s.rolloutDir(r.Role)
	ops := api.KVTxnOps{
		{Verb: api.KVLock, Key: dir + rolloutSlots + "/" + session, Value: slot, Session: session},
		{Verb: api.KVSet, Key: dir + rolloutHosts + "/" + host, Value: rec},
	}
	return s.guarded(ctx, r, st, ops, "grant a rollout slot of "+r.Role+" to "+host)
}

// EndSlot records host's outcome: the slot held by session (if any) is
// given back, hosts/<host> holds rec, the guard moves to st (nil: as in
// GrantSlot), and every follower role is woken; one transaction. ok is
// false when another writer moved the guard first.
func (s *Store) EndSlot(ctx context.Context, r *Rollout, st *RolloutState, host, session string, rec RolloutHost) (ok bool, err error) {
	if rec.Time.IsZero() {
		rec.Time = s.Now().UTC()
	}
	val, err := json.Marshal(rec)
	if err != nil {
		return false, err
	}
	dir := s.rolloutDir(r.Role)
	ops := api.KVTxnOps{{Verb: api.KVSet, Key: dir + rolloutHosts + "/" + host, Value: val}}
	if session != "" {
		ops = append(ops, &api.KVTxnOp{Verb: api.KVDelete, Key: dir + rolloutSlots + "/" + session})
	}
	if rec.State == RolloutDone {
		wake := []byte(rec.Time.Format(time.RFC3339Nano) + " " + host)
		for _, f := range r.Followers {
			ops = append(ops, &api.KVTxnOp{Verb: api.KVSet, Key: s.rolloutDir(f) + rolloutWake, Value: wake})
		}
	}
	return s.guarded(ctx, r, st, ops, "end the rollout slot of "+host+" in "+r.Role)
}

// SetRolloutState moves the guard of r's role to st (a halt, a resume).
func (s *Store) SetRolloutState(ctx context.Context, r *Rollout, st RolloutState) (ok bool, err error) {
	return s.guarded(ctx, r, &st, nil, "rollout state of "+r.Role)
}

// guarded runs ops with a check-and-set of the guard from r's index to
// st, or, for a nil st, a check that the policy is the one in r.
func (s *Store) guarded(ctx context.Context, r *Rollout, st *RolloutState, ops api.KVTxnOps, what string) (bool, error) {
	dir := s.rolloutDir(r.Role)
	var check *api.KVTxnOp
	switch {
	case st != nil:
		next := *st
		next.Seq = r.State.Seq + 1
		val, err := json.Marshal(next)
		if err != nil {
			return false, err
		}
		check = &api.KVTxnOp{Verb: api.KVCAS, Key: dir + rolloutState, Value: val, Index: r.StateIndex}
	case r.PolicyIndex == 0:
		check = &api.KVTxnOp{Verb: api.KVCheckNotExists, Key: dir + rolloutPolicy}
	default:
		check = &api.KVTxnOp{Verb: api.KVCheckIndex, Key: dir + rolloutPolicy, Index: r.PolicyIndex}
	}
	return s.txn(ctx, append(api.KVTxnOps{check}, ops...), what)
}

// txn runs ops; ok is false when a check-and-set found the key moved.
func (s *Store) txn(ctx context.Context, ops api.KVTxnOps, what string) (bool, error) {
	ok, resp, _, err := s.kv.Txn(ops, readOpts(ctx))
	if err != nil {
		return false, fmt.Errorf("%s: %w", what, err)
	}
	if ok {
		return true, nil
	}
	if allStale(resp) {
		return false, nil
	}
	return false, refusedOr(resp, fmt.Errorf("%s: transaction rolled back: %s", what, TxnErrors(resp)))
}

// backoff waits before check-and-set attempt n (none before the first).
func backoff(ctx context.Context, attempt int) error {
	if attempt == 0 {
		return nil
	}
	d := time.Duration(attempt*20+rand.IntN(30)) * time.Millisecond
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// Backoff waits before check-and-set attempt n of a caller's own retry
// loop, as the store's own loops do.
func Backoff(ctx context.Context, attempt int) error { return backoff(ctx, attempt) }

// MaxAttempts bounds a caller's check-and-set retries, as the store's own.
const MaxAttempts = maxAttempts

// Desired returns roles/<role>/desired; ok is false when it is not set.
func (s *Store) Desired(ctx context.Context, role string) (n int, ok bool, err error) {
	if err := ValidName("role", role); err != nil {
		return 0, false, &InputError{Err: err}
	}
	k := s.key(dirRoles, role, "desired")
	p, _, err := s.kv.Get(k, readOpts(ctx))
	if err != nil {
		return 0, false, fmt.Errorf("read %s: %w", k, err)
	}
	if p == nil {
		return 0, false, nil
	}
	n, err = parseDesired(p.Value)
	if err != nil {
		return 0, false, &InputError{Err: fmt.Errorf("%s: %w", k, err)}
	}
	return n, true, nil
}
