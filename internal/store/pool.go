package store

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/hashicorp/consul/api"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/internal/store/schema"
)

// ConvergePuppetCheck is the TTL check converge keeps on its node's own
// agent, mirroring its consistent run's outcome (warning, notes "... last
// puppet outcome: failed: ..." after a failure). Only the node's own
// identity may write a check of its node: the reaper acts on a suspect
// record only when this check agrees.
const ConvergePuppetCheck = "orchestrate:puppet"

// RequestPoolFlush writes role's flush request, and returns the value it
// replaced (nil: there was none).
func (s *Store) RequestPoolFlush(ctx context.Context, role string, rec reaperkv.PoolFlushRecord) ([]byte, error) {
	if err := schema.ValidName("role", role); err != nil {
		return nil, &InputError{Err: err}
	}
	key := reaperkv.PoolFlushKey(s.prefix, role)
	return s.swapJSON(ctx, "write "+key, key, rec)
}

// PoolState is what the KV prefix holds of the warm pools.
type PoolState struct {
	// Standbys by role, sorted by host.
	Standbys map[string][]reaperkv.StandbyRecord `json:"standbys"`
	// Flushes are the flush requests not yet carried out, by role.
	Flushes map[string]reaperkv.PoolFlushRecord `json:"flushes,omitempty"`
}

// Pool reads the standby records and flush requests in one request; a
// value the reaper did not write is an InputError naming its key.
func (s *Store) Pool(ctx context.Context) (*PoolState, error) {
	dir := reaperkv.ReaperKey(s.prefix, reaperkv.ReaperDir)
	pairs, _, err := s.kv.List(dir, readOpts(ctx))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", dir, err)
	}
	out := &PoolState{Standbys: map[string][]reaperkv.StandbyRecord{}, Flushes: map[string]reaperkv.PoolFlushRecord{}}
	for _, p := range pairs {
		rel := schema.RelKey(s.prefix, p.Key)
		if _, _, ok := reaperkv.ParsePoolKey(rel); ok {
			var rec reaperkv.StandbyRecord
			if err := json.Unmarshal(p.Value, &rec); err != nil || reaperkv.PoolKey(s.prefix, rec.Role, rec.Host) != p.Key {
				return nil, &InputError{Err: fmt.Errorf("%s holds a value the reaper did not write", p.Key)}
			}
			out.Standbys[rec.Role] = append(out.Standbys[rec.Role], rec)
			continue
		}
		if role, ok := strings.CutPrefix(rel, reaperkv.ReaperPoolFlushDir); ok {
			rec, err := ParsePoolFlush(p)
			if err != nil {
				return nil, &InputError{Err: err}
			}
			out.Flushes[role] = rec
		}
	}
	for _, recs := range out.Standbys {
		sort.Slice(recs, func(i, j int) bool { return recs[i].Host < recs[j].Host })
	}
	return out, nil
}

// ParsePoolFlush reads a flush request.
func ParsePoolFlush(p *api.KVPair) (reaperkv.PoolFlushRecord, error) {
	var rec reaperkv.PoolFlushRecord
	if err := json.Unmarshal(p.Value, &rec); err != nil || rec.Time.IsZero() {
		return rec, fmt.Errorf("%s: not a flush request (want the JSON `orchestrate pool flush` writes)", p.Key)
	}
	rec.Index = p.ModifyIndex
	return rec, nil
}
