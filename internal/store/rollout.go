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
	"github.com/jiocloud/orchestrate/internal/store/schema"
)

// A role's rollout lives under <prefix>/rollout/<role>/. A host writes two
// keys there, its own (its policy, HostPolicyRules, allows those alone);
// everything else is the operator's:
//
//	slot/<host>       the host's claim on an update slot: created (never
//	                  rewritten) locked by the host's session, behaviour
//	                  delete, so it goes when the holder's session expires
//	                  or ends; its CreateIndex is its place in line
//	hosts/<host>      the host's progress on the version it last worked on
//	policy            the operator's settings (orchestrate rollout ROLE ...)
//	resume            the operator's last resume (orchestrate rollout
//	                  resume ROLE): the failures it forgives
//	followers/<role>  roles whose policy says --after this role
//
// Left by orchestrate before node restriction, read and never written:
//
//	state             the guard every grant checked-and-set; a halt in it
//	                  holds until a resume, its resume still forgives
//	slot/<session>    a slot in the older layout (the key is named after
//	                  its holder's session): while one is held, no slot is
//	                  granted (a rollout the older version started is in
//	                  progress)
//	wake              the older doorbell, ignored
//
// A host that reports a version rings <prefix>/wake/<follower> for each
// role that follows its own: a doorbell any node may ring, whose content
// nobody reads.
const (
	dirRollout      = "rollout"
	dirWake         = "wake"
	rolloutPolicy   = "policy"
	rolloutResume   = "resume"
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

// RolloutState is the guard an older orchestrate kept in state: read only,
// so that a halt it recorded keeps holding until a resume.
type RolloutState struct {
	Seq     uint64         `json:"seq"`
	Halted  *RolloutHalt   `json:"halted,omitempty"`
	Resumed *RolloutResume `json:"resumed,omitempty"`
}

// RolloutHalt says why the rollout of a version stopped granting slots
// (in an older orchestrate's state).
type RolloutHalt struct {
	Version string    `json:"version"`
	Reason  string    `json:"reason"`
	Time    time.Time `json:"time"`
}

// RolloutResume is an operator's resume: the failures of Version by the
// hosts in Forgiven, recorded before it, no longer count toward
// max_failures.
type RolloutResume struct {
	Version  string    `json:"version"`
	Forgiven []string  `json:"forgiven"`
	Time     time.Time `json:"time"`
}

// RolloutSlot is a claim on a slot (or, in LegacySlots, a slot of the
// older layout), held by Session.
type RolloutSlot struct {
	// Host is the key's last segment for a claim (what the value says is
	// not trusted); the value's for an older slot.
	Host    string `json:"host"`
	Version string `json:"version"`
	// Fresh: the host runs no version yet (a new server building), so it
	// serves nothing and does not count toward max_unavailable.
	Fresh   bool      `json:"fresh,omitempty"`
	Time    time.Time `json:"time"`
	Session string    `json:"-"`
	// CreateIndex is the claim's place in line.
	CreateIndex uint64 `json:"-"`
}

// RolloutHost is one host's progress, in hosts/<host>.
type RolloutHost struct {
	Version string    `json:"version"`
	State   string    `json:"state"`
	Detail  string    `json:"detail,omitempty"`
	Time    time.Time `json:"time"`
	// Index is the record's ModifyIndex: a failure recorded after a
	// resume is not forgiven by it.
	Index uint64 `json:"-"`
	// Unreadable: the value is not a record orchestrate wrote; it counts
	// as a failure of any version.
	Unreadable bool `json:"-"`
}

// Rollout is everything stored about one role's rollout, read in one
// request.
type Rollout struct {
	Role        string
	Policy      RolloutPolicy
	PolicyIndex uint64 // 0: no policy written (no bound, no halt, no order)
	Resume      *RolloutResume
	ResumeIndex uint64
	// Legacy is an older orchestrate's state, LegacyIndex its ModifyIndex.
	Legacy      *RolloutState
	LegacyIndex uint64
	// Slots are the live claims, in line (by CreateIndex).
	Slots []RolloutSlot
	// LegacySlots are slots held in the older layout.
	LegacySlots []RolloutSlot
	// Unheld lists hosts whose claim key exists without a holder.
	Unheld    []string
	Hosts     map[string]RolloutHost
	Followers []string
	// Unreadable lists the keys of host-written records whose values
	// orchestrate did not write. Each is counted the safe way (a claim as a
	// slot in use, a progress record as a failure) rather than failing the
	// whole read: one host must not stop its role's rollout by writing
	// nonsense into its own records.
	Unreadable []string
}

// Failed lists the hosts whose record says they failed version, and those
// whose record is unreadable, sorted.
func (r *Rollout) Failed(version string) []string {
	var out []string
	for h, rec := range r.Hosts {
		if rec.Unreadable || rec.Version == version && rec.State == RolloutFailed {
			out = append(out, h)
		}
	}
	sort.Strings(out)
	return out
}

// Done lists the hosts whose record says they run version, sorted.
func (r *Rollout) Done(version string) []string {
	var out []string
	for h, rec := range r.Hosts {
		if !rec.Unreadable && rec.Version == version && rec.State == RolloutDone {
			out = append(out, h)
		}
	}
	sort.Strings(out)
	return out
}

// Holders lists the hosts that hold a slot and count toward
// max_unavailable (fresh ones do not; slots of the older layout do),
// sorted.
func (r *Rollout) Holders() []string {
	out := []string{}
	for _, s := range r.Slots {
		if !s.Fresh {
			out = append(out, s.Host)
		}
	}
	for _, s := range r.LegacySlots {
		out = append(out, s.Host)
	}
	sort.Strings(out)
	return out
}

// Fresh lists the new hosts (no version yet) that hold a slot, sorted.
func (r *Rollout) Fresh() []string {
	out := []string{}
	for _, s := range r.Slots {
		if s.Fresh {
			out = append(out, s.Host)
		}
	}
	sort.Strings(out)
	return out
}

// Claim is host's live claim, or nil.
func (r *Rollout) Claim(host string) *RolloutSlot {
	for i := range r.Slots {
		if r.Slots[i].Host == host {
			return &r.Slots[i]
		}
	}
	return nil
}

// Ahead lists the live claims that count toward max_unavailable and stand
// before a claim of host at index in line: the non-fresh claims of other
// hosts with a smaller CreateIndex (index 0: every one).
func (r *Rollout) Ahead(host string, index uint64) []RolloutSlot {
	var out []RolloutSlot
	for _, s := range r.Slots {
		if s.Host != host && !s.Fresh && (index == 0 || s.CreateIndex < index) {
			out = append(out, s)
		}
	}
	return out
}

// rolloutDir is rollout/<role>/ under prefix.
func rolloutDir(prefix, role string) string { return keyDir(prefix, dirRollout, role) }

// RolloutPolicyKey is rollout/<role>/policy under prefix: the role's
// rollout policy.
func RolloutPolicyKey(prefix, role string) string { return rolloutDir(prefix, role) + rolloutPolicy }

// RolloutResumeKey is rollout/<role>/resume under prefix: the operator's
// resume of the role's halted rollout.
func RolloutResumeKey(prefix, role string) string { return rolloutDir(prefix, role) + rolloutResume }

// rolloutSlotKey is rollout/<role>/slot/<host> under prefix: host's claim
// on an update slot of role.
func rolloutSlotKey(prefix, role, host string) string {
	return schema.Join(prefix, dirRollout, role, rolloutSlots, host)
}

// rolloutHostKey is rollout/<role>/hosts/<host> under prefix: host's
// progress in role's rollout.
func rolloutHostKey(prefix, role, host string) string {
	return schema.Join(prefix, dirRollout, role, rolloutHosts, host)
}

// rolloutFollowerKey is rollout/<role>/followers/<follower> under prefix:
// follower's policy says --after role.
func rolloutFollowerKey(prefix, role, follower string) string {
	return schema.Join(prefix, dirRollout, role, rolloutFollower, follower)
}

// RolloutDir is the directory of role's rollout keys, with a trailing
// slash: a keyprefix watch on it wakes the role's waiting hosts whenever a
// slot is given back, a holder's session ends, the policy changes or a
// resume is written.
func (s *Store) RolloutDir(role string) string { return rolloutDir(s.prefix, role) }

// WakeKey is role's doorbell, <prefix>/wake/<role>: a host of a role that
// role follows rings it when it reports a version, and a key watch on it
// wakes role's waiting hosts. Any node may ring it; nobody reads what it
// holds.
func (s *Store) WakeKey(role string) string { return schema.Join(s.prefix, dirWake, role) }

// Rollout reads role's rollout. A value of a key only the operator writes
// that orchestrate did not write is an InputError naming the key: a policy
// or resume that cannot be read might hide a bound or a halt. A host's own
// records that cannot be read are listed in Unreadable instead.
func (s *Store) Rollout(ctx context.Context, role string) (*Rollout, error) {
	return s.readRollout(ctx, role, false)
}

// RolloutConsistent is Rollout with a consistent read: it sees every write
// Consul committed before it began (the leader checks it still leads), as
// a slot grant needs.
func (s *Store) RolloutConsistent(ctx context.Context, role string) (*Rollout, error) {
	return s.readRollout(ctx, role, true)
}

func (s *Store) readRollout(ctx context.Context, role string, consistent bool) (*Rollout, error) {
	if err := schema.ValidName("role", role); err != nil {
		return nil, &InputError{Err: err}
	}
	dir := rolloutDir(s.prefix, role)
	q := readOpts(ctx)
	q.RequireConsistent = consistent
	pairs, meta, err := s.kv.List(dir, q)
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
	dir := keyDir(s.prefix, dirRollout)
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
		if err := schema.ValidName("role", role); err != nil {
			return nil, &InputError{Err: fmt.Errorf("%s%s: %w", dir, role, err)}
		}
		r, err := parseRollout(role, rolloutDir(s.prefix, role), ps)
		if err != nil {
			return nil, err
		}
		out[role] = r
	}
	return out, nil
}

func parseRollout(role, dir string, pairs api.KVPairs) (*Rollout, error) {
	r := &Rollout{Role: role, Hosts: map[string]RolloutHost{}}
	for _, p := range pairs {
		parts := strings.Split(strings.TrimPrefix(p.Key, dir), "/")
		var err error
		switch {
		case len(parts) == 1:
			err = r.parseOperatorKey(p, parts[0])
		case len(parts) == 2 && parts[0] == rolloutSlots:
			err = r.parseSlot(p, parts[1])
		case len(parts) == 2 && parts[0] == rolloutHosts && schema.ValidName("host", parts[1]) == nil:
			r.parseProgress(p, parts[1])
		case len(parts) == 2 && parts[0] == rolloutFollower && schema.ValidName("role", parts[1]) == nil:
			r.Followers = append(r.Followers, parts[1])
		default:
			err = badRollout(p, "not a rollout key")
		}
		if err != nil {
			return nil, err
		}
	}
	sort.Slice(r.Slots, func(i, j int) bool { return r.Slots[i].CreateIndex < r.Slots[j].CreateIndex })
	return r, nil
}

// badRollout is the InputError for a key only the operator writes (or an
// older orchestrate wrote) that holds a value orchestrate did not write.
func badRollout(p *api.KVPair, format string, args ...any) error {
	return &InputError{Err: fmt.Errorf("%s: %s (written by hand? `orchestrate rollout` writes these keys)", p.Key, fmt.Sprintf(format, args...))}
}

// parseOperatorKey reads policy, resume, state or the older wake key.
func (r *Rollout) parseOperatorKey(p *api.KVPair, name string) error {
	switch name {
	case rolloutPolicy:
		if err := schema.StrictJSON(p.Value, &r.Policy); err != nil {
			return badRollout(p, "not a rollout policy: %v", err)
		}
		if err := r.Policy.Validate(); err != nil {
			return badRollout(p, "%v", err)
		}
		if r.Policy.After == r.Role {
			return badRollout(p, "role %s rolls out after itself: no host would ever start", r.Role)
		}
		r.PolicyIndex = p.ModifyIndex
	case rolloutResume:
		var res RolloutResume
		if err := schema.StrictJSON(p.Value, &res); err != nil {
			return badRollout(p, "not a rollout resume: %v", err)
		}
		if err := schema.ValidName("version", res.Version); err != nil {
			return badRollout(p, "%v", err)
		}
		r.Resume, r.ResumeIndex = &res, p.ModifyIndex
	case rolloutState:
		var st RolloutState
		if err := schema.StrictJSON(p.Value, &st); err != nil {
			return badRollout(p, "not a rollout state: %v", err)
		}
		r.Legacy, r.LegacyIndex = &st, p.ModifyIndex
	case rolloutWake:
	default:
		return badRollout(p, "not a rollout key")
	}
	return nil
}

// parseSlot reads slot/<name>: a host's claim, or a slot of the older
// layout (the key named after the session that holds it). A key nobody
// holds is no slot.
func (r *Rollout) parseSlot(p *api.KVPair, name string) error {
	switch {
	case p.Session != "" && name == p.Session:
		// The older layout. Its value only names the host for the
		// operator: the slot counts whatever it says.
		sl := RolloutSlot{}
		if json.Unmarshal(p.Value, &sl) != nil || schema.ValidName("host", sl.Host) != nil {
			sl.Host = "(unreadable)"
		}
		sl.Session, sl.CreateIndex = p.Session, p.CreateIndex
		r.LegacySlots = append(r.LegacySlots, sl)
	case schema.ValidName("host", name) != nil:
		return badRollout(p, "not a rollout slot")
	case p.Session == "":
		r.Unheld = append(r.Unheld, name)
	default:
		// The host is the key's; a value that is not a claim (or names
		// another host) counts as a slot in use by this host.
		sl := RolloutSlot{}
		if err := schema.StrictJSON(p.Value, &sl); err != nil || sl.Host != name {
			r.Unreadable = append(r.Unreadable, p.Key)
			sl = RolloutSlot{}
		}
		sl.Host, sl.Session, sl.CreateIndex = name, p.Session, p.CreateIndex
		r.Slots = append(r.Slots, sl)
	}
	return nil
}

// parseProgress reads hosts/<host>; a value orchestrate did not write
// counts as a failure.
func (r *Rollout) parseProgress(p *api.KVPair, host string) {
	var h RolloutHost
	err := schema.StrictJSON(p.Value, &h)
	switch {
	case err != nil:
	case h.State == RolloutUpdating, h.State == RolloutDone, h.State == RolloutFailed, h.State == RolloutPending:
		if schema.ValidName("version", h.Version) == nil {
			h.Index = p.ModifyIndex
			r.Hosts[host] = h
			return
		}
	}
	r.Unreadable = append(r.Unreadable, p.Key)
	r.Hosts[host] = RolloutHost{State: RolloutFailed, Unreadable: true, Index: p.ModifyIndex}
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
		if err := schema.ValidName("after role", p.After); err != nil {
			return err
		}
	}
	return nil
}

// SetRolloutPolicy changes role's policy with change, in one
// check-and-set transaction that also moves the follower mark of its
// --after role, and returns the policy written.
func (s *Store) SetRolloutPolicy(ctx context.Context, role string, change func(*RolloutPolicy) error) (RolloutPolicy, error) {
	if err := schema.ValidName("role", role); err != nil {
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
		ops := api.KVTxnOps{{Verb: api.KVCAS, Key: rolloutDir(s.prefix, role) + rolloutPolicy, Value: val, Index: r.PolicyIndex}}
		if r.Policy.After != "" && r.Policy.After != p.After {
			ops = append(ops, &api.KVTxnOp{Verb: api.KVDelete, Key: rolloutFollowerKey(s.prefix, r.Policy.After, role)})
		}
		if p.After != "" {
			ops = append(ops, &api.KVTxnOp{Verb: api.KVSet, Key: rolloutFollowerKey(s.prefix, p.After, role)})
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

// ClaimSlot creates host's claim on a slot of role for version, locked by
// session: one transaction that checks the key does not exist and
// acquires it, so the claim is new and its CreateIndex, returned, is its
// place in line. ok is false when the key exists (a claim an earlier run
// left): nothing was written.
func (s *Store) ClaimSlot(ctx context.Context, role, host, version, session string, fresh bool) (index uint64, ok bool, err error) {
	for _, n := range [][2]string{{"role", role}, {"host", host}, {"version", version}} {
		if err := schema.ValidName(n[0], n[1]); err != nil {
			return 0, false, &InputError{Err: err}
		}
	}
	val, err := json.Marshal(RolloutSlot{Host: host, Version: version, Fresh: fresh, Time: s.Now().UTC()})
	if err != nil {
		return 0, false, err
	}
	key := rolloutSlotKey(s.prefix, role, host)
	ops := api.KVTxnOps{
		{Verb: api.KVCheckNotExists, Key: key},
		{Verb: api.KVLock, Key: key, Value: val, Session: session},
	}
	what := "claim a rollout slot of " + role + " for " + host
	done, resp, _, err := s.kv.Txn(ops, readOpts(ctx))
	if err != nil {
		return 0, false, fmt.Errorf("%s: %w", what, err)
	}
	if !done {
		if len(resp.Errors) == 1 && resp.Errors[0].OpIndex == 0 {
			return 0, false, nil
		}
		return 0, false, refusedOr(resp, fmt.Errorf("%s: transaction rolled back: %s", what, TxnErrors(resp)))
	}
	for _, p := range resp.Results {
		if p != nil && p.Key == key {
			return p.CreateIndex, true, nil
		}
	}
	return 0, false, fmt.Errorf("%s: Consul did not return the claim's index", what)
}

// DropClaim deletes host's claim made at index (a claim that was not
// granted): a check-and-set on that index, so a newer claim stays.
func (s *Store) DropClaim(ctx context.Context, role, host string, index uint64) error {
	key := rolloutSlotKey(s.prefix, role, host)
	if _, _, err := s.kv.DeleteCAS(&api.KVPair{Key: key, ModifyIndex: index}, writeOpts(ctx)); err != nil {
		return fmt.Errorf("give back the claim %s: %w", key, err)
	}
	return nil
}

// DropUnheld deletes host's claim key that no session holds.
func (s *Store) DropUnheld(ctx context.Context, role, host string) error {
	key := rolloutSlotKey(s.prefix, role, host)
	p, _, err := s.kv.Get(key, readOpts(ctx))
	if err != nil || p == nil || p.Session != "" {
		return err
	}
	if _, _, err := s.kv.DeleteCAS(&api.KVPair{Key: key, ModifyIndex: p.ModifyIndex}, writeOpts(ctx)); err != nil {
		return fmt.Errorf("delete %s, held by nobody: %w", key, err)
	}
	return nil
}

// SetRolloutHost writes host's progress in role's rollout.
func (s *Store) SetRolloutHost(ctx context.Context, role, host string, rec RolloutHost) error {
	val, err := s.progress(rec)
	if err != nil {
		return err
	}
	key := rolloutHostKey(s.prefix, role, host)
	if _, err := s.kv.Put(&api.KVPair{Key: key, Value: val}, writeOpts(ctx)); err != nil {
		return fmt.Errorf("write %s: %w", key, err)
	}
	return nil
}

func (s *Store) progress(rec RolloutHost) ([]byte, error) {
	if rec.Time.IsZero() {
		rec.Time = s.Now().UTC()
	}
	return json.Marshal(rec)
}

// EndSlot records host's outcome in hosts/<host> and, with release, gives
// its claim back, in one transaction; a host that reports the version
// (RolloutDone) also rings the doorbell of every role in followers. Every
// key written is the host's own but the doorbells, which any node may
// ring.
func (s *Store) EndSlot(ctx context.Context, role string, followers []string, host string, release bool, rec RolloutHost) error {
	val, err := s.progress(rec)
	if err != nil {
		return err
	}
	ops := api.KVTxnOps{{Verb: api.KVSet, Key: rolloutHostKey(s.prefix, role, host), Value: val}}
	if release {
		ops = append(ops, &api.KVTxnOp{Verb: api.KVDelete, Key: rolloutSlotKey(s.prefix, role, host)})
	}
	if rec.State == RolloutDone {
		bell := []byte(s.Now().UTC().Format(time.RFC3339Nano) + " " + host)
		for _, f := range followers {
			ops = append(ops, &api.KVTxnOp{Verb: api.KVSet, Key: s.WakeKey(f), Value: bell})
		}
	}
	// The record and the release first, whole; doorbells past one
	// transaction's limit ring after it.
	for len(ops) > 0 {
		n := min(len(ops), maxTxnOps)
		if _, err := s.txn(ctx, ops[:n], "record the rollout outcome of "+host+" in "+role); err != nil {
			return err
		}
		ops = ops[n:]
	}
	return nil
}

// ResumeRollout writes res as r's resume: a check-and-set on the resume
// read in r. An older orchestrate's state that concerns no other version
// is deleted in the same transaction (check-and-set on its index): the
// resume forgives every failure so far, so nothing it held is lost. ok is
// false when another writer moved either key first.
func (s *Store) ResumeRollout(ctx context.Context, r *Rollout, res RolloutResume) (ok bool, err error) {
	val, err := json.Marshal(res)
	if err != nil {
		return false, err
	}
	dir := rolloutDir(s.prefix, r.Role)
	ops := api.KVTxnOps{{Verb: api.KVCAS, Key: dir + rolloutResume, Value: val, Index: r.ResumeIndex}}
	if l := r.Legacy; l != nil && (l.Halted == nil || l.Halted.Version == res.Version) && (l.Resumed == nil || l.Resumed.Version == res.Version) {
		ops = append(ops, &api.KVTxnOp{Verb: api.KVDeleteCAS, Key: dir + rolloutState, Index: r.LegacyIndex})
	}
	return s.txn(ctx, ops, "resume the rollout of "+r.Role)
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
