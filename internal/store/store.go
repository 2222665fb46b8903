// Package store owns orchestrate's Consul KV layout, under one prefix: the
// desired version, the version each host runs, each host's build status
// per category, desired role counts, and the reaper's keys (the arm
// record, its journal, its report); nothing else spells a key. Every
// change that touches more than one key is a single Consul transaction
// with check-and-set on every key it moves, retried on conflict, so a host
// is never under two versions or two states of one category, nor under
// none.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/fault"
)

// DefaultPrefix is the KV prefix when neither --prefix nor
// ORCHESTRATE_PREFIX says otherwise.
const DefaultPrefix = "orchestrate"

// Key segments under the prefix.
const (
	keyCurrentVersion = "current_version"
	dirRunning        = "running_version"
	dirStatus         = "status"
	dirRoles          = "roles"
)

// Status categories orchestrate itself writes; any other name is accepted
// from operators and build scripts.
const (
	// CategoryProvisioned: the machine was built and booted.
	CategoryProvisioned = "provisioned"
	// CategoryUpdate: converge's update step.
	CategoryUpdate = "update"
	// CategoryPuppet: the Puppet run; with two steps, the consistent one
	// (the static, expensive run).
	CategoryPuppet = "puppet"
	// CategoryEventual: converge's eventual step (the classes that depend
	// on what other hosts published); pending while dependencies are
	// unmet, never a failure then.
	CategoryEventual = "eventual"
	// CategoryValidation: the validation checks; the reaper counts a
	// server as validated when this is success.
	CategoryValidation = "validation"
)

// The states a host can be in, per category.
const (
	StateSuccess = "success"
	StateFailed  = "failed"
	StatePending = "pending"
	StateRunning = "running"
)

// States lists the valid states in display order.
var States = []string{StateSuccess, StateFailed, StatePending, StateRunning}

// ValidState reports whether s is one of States.
func ValidState(s string) bool {
	for _, v := range States {
		if s == v {
			return true
		}
	}
	return false
}

// maxAttempts bounds check-and-set retries. Conflicts happen only when two
// writers move the same host at once, which is rare; ten rounds with jittered
// backoff resolve any realistic contention within about a second.
const maxAttempts = 10

// ErrConflict is returned when a transaction kept losing check-and-set races.
var ErrConflict = errors.New("kv transaction kept conflicting with concurrent writers")

// ErrNoCurrentVersion is returned when <prefix>/current_version is not set.
var ErrNoCurrentVersion = errors.New("no current_version is set")

// Store reads and writes orchestrate's keys under one prefix.
type Store struct {
	kv     *api.KV
	prefix string
	// Now is the clock used for timestamps; tests may replace it.
	Now func() time.Time
}

// New returns a Store for prefix (leading and trailing slashes are dropped).
func New(c *api.Client, prefix string) (*Store, error) {
	prefix = strings.Trim(prefix, "/")
	if err := ValidPrefix(prefix); err != nil {
		return nil, err
	}
	return &Store{kv: c.KV(), prefix: prefix, Now: time.Now}, nil
}

// Prefix returns the KV prefix, without a trailing slash.
func (s *Store) Prefix() string { return s.prefix }

func (s *Store) key(parts ...string) string {
	return s.prefix + "/" + strings.Join(parts, "/")
}

// VersionValue is the JSON stored at running_version/<version>/<host>.
type VersionValue struct {
	Time time.Time `json:"time"`
}

// StatusValue is the JSON stored at status/<category>/<state>/<host>.
type StatusValue struct {
	Time    time.Time `json:"time"`
	Version string    `json:"version"`
	Detail  string    `json:"detail"`
	LogURL  string    `json:"log_url"`
	// Suspect, on a failed consistent run (category puppet): the host
	// failed the static configuration that must always pass; a reaper
	// role with replace_suspect replaces it.
	Suspect bool `json:"suspect,omitempty"`
	// Waiting, on a pending consistent run (category puppet): the host
	// waits for one of its role's rollout slots; the role's rollout watch
	// runs it again when one may have freed.
	Waiting bool `json:"waiting,omitempty"`
}

// SetCurrentVersion sets the desired version of the whole system.
func (s *Store) SetCurrentVersion(ctx context.Context, version string) error {
	if err := ValidName("version", version); err != nil {
		return &InputError{Err: err}
	}
	_, err := s.kv.Put(&api.KVPair{Key: s.key(keyCurrentVersion), Value: []byte(version)}, writeOpts(ctx))
	if err != nil {
		return fmt.Errorf("set current_version: %w", err)
	}
	return nil
}

// CurrentVersion returns the desired version, or ErrNoCurrentVersion.
func (s *Store) CurrentVersion(ctx context.Context) (string, error) {
	p, _, err := s.kv.Get(s.key(keyCurrentVersion), readOpts(ctx))
	if err != nil {
		return "", fmt.Errorf("read current_version: %w", err)
	}
	if p == nil {
		return "", ErrNoCurrentVersion
	}
	v := string(p.Value)
	if err := ValidName("version", v); err != nil {
		return "", &InputError{Err: fmt.Errorf("%s holds an invalid version: %w", p.Key, err)}
	}
	return v, nil
}

// HostVersions returns the versions host is listed under (normally one, none
// before its first report).
func (s *Store) HostVersions(ctx context.Context, host string) ([]string, error) {
	if err := ValidName("host", host); err != nil {
		return nil, &InputError{Err: err}
	}
	keys, _, err := s.kv.Keys(s.key(dirRunning)+"/", "", readOpts(ctx))
	if err != nil {
		return nil, fmt.Errorf("list running versions: %w", err)
	}
	var out []string
	for _, k := range keys {
		if v, h, ok := s.splitRunning(k); ok && h == host {
			out = append(out, v)
		}
	}
	return out, nil
}

// ReportVersion moves host under running_version/<version>, removing it from
// every other version, in one check-and-set transaction.
func (s *Store) ReportVersion(ctx context.Context, host, version string) error {
	if err := ValidName("host", host); err != nil {
		return &InputError{Err: err}
	}
	if err := ValidName("version", version); err != nil {
		return &InputError{Err: err}
	}
	val, err := json.Marshal(VersionValue{Time: s.Now().UTC()})
	if err != nil {
		return err
	}
	target := s.key(dirRunning, version, host)
	return s.move(ctx, s.key(dirRunning)+"/", target, val, func(k string) bool {
		_, h, ok := s.splitRunning(k)
		return ok && h == host
	})
}

// UpdateStatus puts host in exactly one state of category, in one
// check-and-set transaction.
func (s *Store) UpdateStatus(ctx context.Context, host, category, state string, v StatusValue) error {
	if err := ValidName("host", host); err != nil {
		return &InputError{Err: err}
	}
	if err := ValidName("category", category); err != nil {
		return &InputError{Err: err}
	}
	if !ValidState(state) {
		return &InputError{Err: fmt.Errorf("state %q is not one of %s", state, strings.Join(States, ", "))}
	}
	if v.Time.IsZero() {
		v.Time = s.Now().UTC()
	}
	val, err := json.Marshal(v)
	if err != nil {
		return err
	}
	dir := s.key(dirStatus, category) + "/"
	target := dir + state + "/" + host
	return s.move(ctx, dir, target, val, func(k string) bool {
		rest := strings.TrimPrefix(k, dir)
		st, h, ok := strings.Cut(rest, "/")
		return ok && st != "" && h == host
	})
}

// move writes val at target and deletes every other key under dir for which
// mine is true, atomically: each delete and the write carry the index read,
// so a concurrent writer makes the transaction roll back and retry.
func (s *Store) move(ctx context.Context, dir, target string, val []byte, mine func(string) bool) error {
	for attempt := 0; attempt < maxAttempts; attempt++ {
		if err := backoff(ctx, attempt); err != nil {
			return err
		}
		pairs, _, err := s.kv.List(dir, readOpts(ctx))
		if err != nil {
			return fmt.Errorf("list %s: %w", dir, err)
		}
		ops := api.KVTxnOps{}
		var targetIndex uint64 // 0: must not exist yet
		for _, p := range pairs {
			if p.Key == target {
				targetIndex = p.ModifyIndex
				continue
			}
			if mine(p.Key) {
				ops = append(ops, &api.KVTxnOp{Verb: api.KVDeleteCAS, Key: p.Key, Index: p.ModifyIndex})
			}
		}
		ops = append(ops, &api.KVTxnOp{Verb: api.KVCAS, Key: target, Value: val, Index: targetIndex})
		if len(ops) > maxTxnOps {
			return &InputError{Err: fmt.Errorf("%s: %d stale entries for this host, more than one transaction can move; delete them by hand", dir, len(ops)-1)}
		}
		ok, resp, _, err := s.kv.Txn(ops, readOpts(ctx))
		if err != nil {
			return fmt.Errorf("kv transaction on %s: %w", target, err)
		}
		if ok {
			// The transaction checked only the keys it listed: a concurrent
			// first write of this host (when neither listed anything)
			// commits too, leaving the host in two places. Move again until
			// no other key of this host is left.
			again, err := s.othersLeft(ctx, dir, target, mine)
			if err != nil || !again {
				return err
			}
			continue
		}
		if !allStale(resp) {
			return refusedOr(resp, fmt.Errorf("kv transaction on %s rolled back: %s", target, TxnErrors(resp)))
		}
	}
	return fmt.Errorf("%s: %w", target, ErrConflict)
}

// othersLeft reports whether a key of this host other than target is under
// dir.
func (s *Store) othersLeft(ctx context.Context, dir, target string, mine func(string) bool) (bool, error) {
	keys, _, err := s.kv.Keys(dir, "", readOpts(ctx))
	if err != nil {
		return false, fmt.Errorf("list %s: %w", dir, err)
	}
	for _, k := range keys {
		if k != target && mine(k) {
			return true, nil
		}
	}
	return false, nil
}

// maxTxnOps is Consul's limit on operations in one transaction.
const maxTxnOps = 128

func allStale(resp *api.KVTxnResponse) bool {
	if resp == nil || len(resp.Errors) == 0 {
		return false
	}
	for _, e := range resp.Errors {
		if !strings.Contains(e.What, "index is stale") {
			return false
		}
	}
	return true
}

// TxnErrors joins the reasons Consul gave for rolling a transaction back.
func TxnErrors(resp *api.KVTxnResponse) string {
	if resp == nil {
		return "no reason given"
	}
	var parts []string
	for _, e := range resp.Errors {
		parts = append(parts, e.What)
	}
	return strings.Join(parts, "; ")
}

// refusedOr returns err, marked as a refusal by Consul (fault.Unavailable,
// exit 3) when an ACL refused one of the transaction's operations: the
// token lacks a permission, which is not a bug in orchestrate nor bad input.
func refusedOr(resp *api.KVTxnResponse, err error) error {
	if resp != nil {
		for _, e := range resp.Errors {
			if strings.Contains(e.What, "Permission denied") {
				return fault.Unavailable(err)
			}
		}
	}
	return err
}

// hiddenByACLs is an error (a refusal, exit 3) when Consul left keys under
// dir out of a listing because the token may not read them: a reader of
// the whole prefix would otherwise take "hidden" for "absent" (no hosts,
// no failures).
func hiddenByACLs(meta *api.QueryMeta, dir string) error {
	if meta != nil && meta.ResultsFilteredByACLs {
		return fault.Unavailable(fmt.Errorf("keys under %s are hidden from this token by Consul's ACLs: it needs key:read on %s", dir, dir))
	}
	return nil
}

// SetDesired sets roles/<role>/desired.
func (s *Store) SetDesired(ctx context.Context, role string, n int) error {
	if err := ValidName("role", role); err != nil {
		return &InputError{Err: err}
	}
	if n < 0 {
		return &InputError{Err: fmt.Errorf("desired count %d for role %s is negative", n, role)}
	}
	_, err := s.kv.Put(&api.KVPair{Key: s.key(dirRoles, role, "desired"), Value: []byte(strconv.Itoa(n))}, writeOpts(ctx))
	if err != nil {
		return fmt.Errorf("set desired count of %s: %w", role, err)
	}
	return nil
}

// splitRunning parses <prefix>/running_version/<version>/<host>.
func (s *Store) splitRunning(key string) (version, host string, ok bool) {
	rest, found := strings.CutPrefix(key, s.key(dirRunning)+"/")
	if !found {
		return "", "", false
	}
	version, host, ok = strings.Cut(rest, "/")
	if !ok || version == "" || host == "" || strings.Contains(host, "/") {
		return "", "", false
	}
	return version, host, true
}

// InputError marks bad input (a bad name, a corrupt value): the one
// input-error kind of every library, exit code 2.
type InputError = fault.InputError

func readOpts(ctx context.Context) *api.QueryOptions {
	return (&api.QueryOptions{}).WithContext(ctx)
}

func writeOpts(ctx context.Context) *api.WriteOptions {
	return (&api.WriteOptions{}).WithContext(ctx)
}

// HostStatus returns host's state in every category it has one in.
func (s *Store) HostStatus(ctx context.Context, host string) (map[string]Status, error) {
	if err := ValidName("host", host); err != nil {
		return nil, &InputError{Err: err}
	}
	dir := s.key(dirStatus) + "/"
	keys, _, err := s.kv.Keys(dir, "", readOpts(ctx))
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	out := map[string]Status{}
	for _, k := range keys {
		parts := strings.Split(strings.TrimPrefix(k, dir), "/")
		if len(parts) != 3 || parts[2] != host || !ValidState(parts[1]) {
			continue
		}
		p, _, err := s.kv.Get(k, readOpts(ctx))
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", k, err)
		}
		if p == nil {
			continue // moved since the listing
		}
		st := Status{State: parts[1]}
		if err := json.Unmarshal(p.Value, &st.StatusValue); err != nil {
			st.Corrupt = true
		}
		if prev, dup := out[parts[0]]; dup && !st.Time.After(prev.Time) {
			continue
		}
		out[parts[0]] = st
	}
	return out, nil
}
