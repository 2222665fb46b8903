package store

import (
	"context"
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
