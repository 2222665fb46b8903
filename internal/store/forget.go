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
//
// When one of its status records links a log (log_url), their copy goes
// to its departed record (reaperkv.DepartedKey, dated s.Now()) in the
// transaction that deletes them, each delete checked against the index
// read: the links are never lost between the read and the delete, and a
// departed record never stands without the forget. A host whose records
// link no log leaves no departed record (nor removes one of an earlier
// server of the name).
func (s *Store) ForgetHost(ctx context.Context, host string) error {
	if err := schema.ValidName("host", host); err != nil {
		return &InputError{Err: err}
	}
	for attempt := 0; attempt < maxAttempts; attempt++ {
		if err := backoff(ctx, attempt); err != nil {
			return err
		}
		keys, err := s.HostKeys(ctx, host)
		if err != nil {
			return err
		}
		dir := HostDir(s.prefix, host) + statusKind("")
		status, _, err := s.kv.List(dir, readOpts(ctx))
		if err != nil {
			return fmt.Errorf("list %s: %w", dir, err)
		}
		first, rest := s.forgetFirst(host, status, keys)
		if s.forgetRead != nil {
			s.forgetRead()
		}
		ok, resp, _, err := s.kv.Txn(first, readOpts(ctx))
		if err != nil {
			return fmt.Errorf("forget host %s: %w", host, err)
		}
		if !ok {
			if allStale(resp) {
				continue // a status record moved: read again
			}
			return refusedOr(resp, fmt.Errorf("forget host %s: transaction rolled back: %s", host, TxnErrors(resp)))
		}
		return s.deleteKeys(ctx, host, rest)
	}
	return fmt.Errorf("forget host %s: %w", host, ErrConflict)
}

// forgetFirst returns the first transaction of a forget, and the keys
// left for later ones: the departed record when the status records link a
// log, the status records' deletes checked against the index read, then
// other keys up to the transaction's size.
func (s *Store) forgetFirst(host string, status api.KVPairs, keys []string) (api.KVTxnOps, []string) {
	dir := HostDir(s.prefix, host) + statusKind("")
	logs := map[string]reaperkv.DepartedLog{}
	var ops api.KVTxnOps
	inFirst := map[string]bool{}
	for _, p := range status {
		if len(ops) >= maxTxnOps-1 {
			break // written by hand: the rest go unchecked, later
		}
		ops = append(ops, &api.KVTxnOp{Verb: api.KVDeleteCAS, Key: p.Key, Index: p.ModifyIndex})
		inFirst[p.Key] = true
		addDepartedLog(logs, strings.TrimPrefix(p.Key, dir), p.Value)
	}
	if _, data, ok := reaperkv.NewDeparted(host, s.Now(), logs); ok {
		ops = append(api.KVTxnOps{{Verb: api.KVSet, Key: reaperkv.DepartedKey(s.prefix, host), Value: data}}, ops...)
	}
	var rest []string
	for _, k := range keys {
		switch {
		case inFirst[k]:
		case len(ops) < maxTxnOps:
			ops = append(ops, &api.KVTxnOp{Verb: api.KVDelete, Key: k})
		default:
			rest = append(rest, k)
		}
	}
	return ops, rest
}

// addDepartedLog adds to logs the status record of category cat, value
// data, when it can be read and links a log.
func addDepartedLog(logs map[string]reaperkv.DepartedLog, cat string, data []byte) {
	if st, err := parseStatusRecord(data); err == nil && st.LogURL != "" {
		logs[cat] = reaperkv.DepartedLog{State: st.State, Version: st.Version, Detail: st.Detail, Time: st.Time, LogURL: st.LogURL}
	}
}

// deleteKeys deletes keys of host, one transaction per maxTxnOps.
func (s *Store) deleteKeys(ctx context.Context, host string, keys []string) error {
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

// Departed reads host's departed record; found is false when it has
// none. A record that cannot be read is an InputError naming what is
// wrong.
func (s *Store) Departed(ctx context.Context, host string) (rec reaperkv.DepartedRecord, found bool, err error) {
	if err := schema.ValidName("host", host); err != nil {
		return rec, false, &InputError{Err: err}
	}
	k := reaperkv.DepartedKey(s.prefix, host)
	p, err := s.get(ctx, k)
	if err != nil || p == nil {
		return rec, false, err
	}
	rec, err = reaperkv.ParseDeparted(schema.RelKey(s.prefix, p.Key), p.Value)
	if err != nil {
		return rec, false, &InputError{Err: err}
	}
	rec.Index = p.ModifyIndex
	return rec, true, nil
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
// one transaction's operations (maxTxnOps), less the caller's leader check
// and the departed record.
const MaxForgetKeys = maxTxnOps - 2

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
// look at). When a status record links a log, the first operation writes
// the host's departed record (as ForgetHost does), dated s.Now().
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
	ops := make(api.KVTxnOps, 0, len(pairs)+1)
	status := dir + statusKind("")
	logs := map[string]reaperkv.DepartedLog{}
	for _, p := range pairs {
		if p.ModifyIndex > index {
			return nil, fmt.Errorf("%s: %w", p.Key, ErrRecordsMoved)
		}
		ops = append(ops, &api.KVTxnOp{Verb: api.KVDeleteCAS, Key: p.Key, Index: p.ModifyIndex})
		if cat, ok := strings.CutPrefix(p.Key, status); ok {
			addDepartedLog(logs, cat, p.Value)
		}
	}
	if _, data, ok := reaperkv.NewDeparted(host, s.Now(), logs); ok {
		ops = append(api.KVTxnOps{{Verb: api.KVSet, Key: reaperkv.DepartedKey(s.prefix, host), Value: data}}, ops...)
	}
	return ops, nil
}
