package store

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/hashicorp/consul/api"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/internal/store/schema"
)

// ForgetHost removes every record of host (see HostKeys): its own records
// (hosts/<host>/: version, status, metrics, drain answer) and those of the
// older layout, its rollout progress and its scaling keys. A machine that later gets the same name
// then starts with no record of the one before it (it would otherwise be
// "at version v1, validation success" before it ever ran Puppet). Keys
// already gone are no error, so a retry after a failure finishes the job.
func (s *Store) ForgetHost(ctx context.Context, host string) error {
	if err := schema.ValidName("host", host); err != nil {
		return &InputError{Err: err}
	}
	keys, err := s.HostKeys(ctx, host)
	if err != nil {
		return err
	}
	for len(keys) > 0 {
		n := min(len(keys), maxTxnOps)
		ops := make(api.KVTxnOps, 0, n)
		for _, k := range keys[:n] {
			ops = append(ops, &api.KVTxnOp{Verb: api.KVDelete, Key: k})
		}
		ok, resp, _, err := s.kv.Txn(ops, readOpts(ctx))
		if err != nil {
			return fmt.Errorf("forget host %s: %w", host, err)
		}
		if !ok {
			return refusedOr(resp, fmt.Errorf("forget host %s: transaction rolled back: %s", host, TxnErrors(resp)))
		}
		keys = keys[n:]
	}
	return nil
}

// HostKeys lists the keys that record host: everything under
// hosts/<host>/, its records in the older layout
// (running_version/<v>/<host>, status/<category>/<state>/<host>,
// metrics/<role>/<host>/<name>), rollout/<role>/hosts/<host>, its drain
// request and protection (drain/<host>, protect/<host>), a scale-in
// naming it (roles/<role>/scale_in/<host>) and its lifecycle hooks'
// requests and answers (hook/<role>/<host>, hook-answer/<role>/<host>)
// and its hold record (reaper/hold/<host>).
func (s *Store) HostKeys(ctx context.Context, host string) ([]string, error) {
	own := HostDir(s.prefix, host)
	out, _, err := s.kv.Keys(own, "", readOpts(ctx))
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", own, err)
	}
	for _, dir := range []struct {
		name  string
		depth int // path segments after the directory
		at    int // the host's segment
		// mid is the segment before the host, when the layout has one
		// (rollout/<role>/hosts/<host>).
		mid string
	}{{dirRunning, 2, 1, ""}, {dirStatus, 3, 2, ""}, {dirRollout, 3, 2, rolloutHosts}, {dirMetrics, 3, 1, ""},
		{dirDrain, 1, 0, ""}, {dirProtect, 1, 0, ""}, {dirRoles, 3, 2, roleScaleIn}, {dirHook, 2, 1, ""}, {dirHookAnswer, 2, 1, ""}} {
		base := keyDir(s.prefix, dir.name)
		keys, _, err := s.kv.Keys(base, "", readOpts(ctx))
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", base, err)
		}
		for _, k := range keys {
			parts := strings.Split(strings.TrimPrefix(k, base), "/")
			if len(parts) == dir.depth && parts[dir.at] == host && (dir.mid == "" || parts[dir.at-1] == dir.mid) {
				out = append(out, k)
			}
		}
	}
	// Its hold record, kept after the hold ended so hold_failures does
	// not take the same server again: a new server of the name starts
	// unheld.
	hold := reaperkv.HoldKey(s.prefix, host)
	if p, _, err := s.kv.Get(hold, readOpts(ctx)); err != nil {
		return nil, fmt.Errorf("read %s: %w", hold, err)
	} else if p != nil {
		out = append(out, hold)
	}
	return out, nil
}

// MaxForgetKeys is the most records of one host ForgetRecordsOps removes:
// one transaction's operations (maxTxnOps), less the caller's leader check.
const MaxForgetKeys = maxTxnOps - 1

// ErrRecordsMoved says a host's records changed since the caller read
// them: the host (or an operator) wrote one, so they are not removed.
var ErrRecordsMoved = errors.New("the host's records changed since they were read")

// ForgetRecordsOps returns the transaction operations that remove every
// record under hosts/<host>/ (the host's own records, nothing else: not
// the older layout's, not the reaper's or an operator's keys about it),
// each a delete checked against the modify index read now; the caller
// runs them in one transaction (with its leader check, which takes one
// more operation). ErrRecordsMoved when one of them moved past index, the
// highest modify index the caller read them at; an error too when they
// are more than one transaction holds (written by hand: an operator's to
// look at).
func (s *Store) ForgetRecordsOps(ctx context.Context, host string, index uint64) (api.KVTxnOps, error) {
	if err := schema.ValidName("host", host); err != nil {
		return nil, &InputError{Err: err}
	}
	dir := HostDir(s.prefix, host)
	pairs, _, err := s.kv.List(dir, readOpts(ctx))
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	if len(pairs) > MaxForgetKeys {
		return nil, fmt.Errorf("%s holds %d keys, more than one transaction removes (%d): not removed", dir, len(pairs), MaxForgetKeys)
	}
	ops := make(api.KVTxnOps, 0, len(pairs))
	for _, p := range pairs {
		if p.ModifyIndex > index {
			return nil, fmt.Errorf("%s: %w", p.Key, ErrRecordsMoved)
		}
		ops = append(ops, &api.KVTxnOp{Verb: api.KVDeleteCAS, Key: p.Key, Index: p.ModifyIndex})
	}
	return ops, nil
}
