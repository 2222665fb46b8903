// Package store owns orchestrate's Consul KV layout, under one prefix: the
// desired version, each host's own records under hosts/<host>/ (the
// version it runs, its build status per category, its load reports, its
// drain answers), desired role counts, and the reaper's keys (the arm
// record, its journal, its report); nothing else spells a key. A host's
// records are keyed host first so that one prefix rule of the host's own
// policy confines a node to them (HostPolicyRules). Every change that
// touches more than one key is a single Consul transaction with
// check-and-set on every key it moves, retried on conflict.
package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/jiocloud/orchestrate/internal/fault"
	"github.com/jiocloud/orchestrate/internal/store/schema"
)

// keyCurrentVersion is the desired version's key under the prefix. Every
// key and directory is built in one place: a function named after it
// (CurrentVersionKey, DesiredKey, HostDir, ...) joins its segments, named
// by constants beside it, with join or keyDir; the readers that split a
// listed key compare its parts with the same constants.
const keyCurrentVersion = "current_version"

// keyDir is the directory <prefix>/<parts joined by slashes>/, for a
// listing.
func keyDir(prefix string, parts ...string) string { return schema.Join(prefix, parts...) + "/" }

// CurrentVersionKey is current_version under prefix: the desired version
// of the whole system.
func CurrentVersionKey(prefix string) string { return schema.Join(prefix, keyCurrentVersion) }

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
	// CategoryRepair: the node's own repair (`converge --repair`, run by
	// its repair watch when its checks turn critical): running during an
	// attempt, pending between attempts, failed once its attempts are
	// used up, success when its checks pass again. Attempts and Since
	// count the attempts of the episode and say when it began.
	CategoryRepair = "repair"
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
	// forgetRead, when set (tests), runs in ForgetHost between its read
	// of the host's records and its first transaction.
	forgetRead func()
	// swapRead, when set (tests), runs in a swap between its read of the
	// keys and its transaction.
	swapRead func()
}

// New returns a Store for prefix (leading and trailing slashes are dropped).
func New(c *api.Client, prefix string) (*Store, error) {
	prefix = strings.Trim(prefix, "/")
	if err := schema.ValidPrefix(prefix); err != nil {
		return nil, err
	}
	return &Store{kv: c.KV(), prefix: prefix, Now: time.Now}, nil
}

// Prefix returns the KV prefix, without a trailing slash.
func (s *Store) Prefix() string { return s.prefix }

// VersionValue is the JSON stored at hosts/<host>/version. The older
// layout's running_version/<version>/<host> holds only its time.
type VersionValue struct {
	Version string    `json:"version,omitempty"`
	Time    time.Time `json:"time"`
}

// StatusValue is a host's record of its state in one category, stored
// with the state at hosts/<host>/status/<category> (the older layout's
// status/<category>/<state>/<host> holds it without the state).
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
	// Attempts and Since, on a repair record (category repair): the
	// repair attempts made since Since, when the host's checks turned
	// critical; the node makes at most --repair-attempts per episode.
	Attempts int       `json:"attempts,omitempty"`
	Since    time.Time `json:"since,omitzero"`
}

// SetCurrentVersion sets the desired version of the whole system.
func (s *Store) SetCurrentVersion(ctx context.Context, version string) error {
	_, _, err := s.SwapCurrentVersion(ctx, version)
	return err
}

// SwapCurrentVersion sets the desired version of the whole system and
// returns the value it replaced (had is false when none was set); a
// version already set is left as it is.
func (s *Store) SwapCurrentVersion(ctx context.Context, version string) (old string, had bool, err error) {
	if err := schema.ValidName("version", version); err != nil {
		return "", false, &InputError{Err: err}
	}
	pairs, err := s.swap(ctx, "set current_version", []string{CurrentVersionKey(s.prefix)}, func(old []*api.KVPair) ([]newValue, error) {
		if old[0] != nil && string(old[0].Value) == version {
			return []newValue{{}}, nil
		}
		return []newValue{setTo([]byte(version))}, nil
	})
	if err != nil {
		return "", false, err
	}
	return string(value(pairs[0])), pairs[0] != nil, nil
}

// CurrentVersion returns the desired version, or ErrNoCurrentVersion.
func (s *Store) CurrentVersion(ctx context.Context) (string, error) {
	p, _, err := s.kv.Get(CurrentVersionKey(s.prefix), readOpts(ctx))
	if err != nil {
		return "", fmt.Errorf("read current_version: %w", err)
	}
	if p == nil {
		return "", ErrNoCurrentVersion
	}
	v := string(p.Value)
	if err := schema.ValidName("version", v); err != nil {
		return "", &InputError{Err: fmt.Errorf("%s holds an invalid version: %w", p.Key, err)}
	}
	return v, nil
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

// InputError marks bad input (a bad name, a corrupt value): the one
// input-error kind of every library, exit code 2.
type InputError = fault.InputError

func readOpts(ctx context.Context) *api.QueryOptions {
	return (&api.QueryOptions{}).WithContext(ctx)
}

func writeOpts(ctx context.Context) *api.WriteOptions {
	return (&api.WriteOptions{}).WithContext(ctx)
}
