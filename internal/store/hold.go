package store

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/internal/store/schema"
)

// ErrHoldMoved: a hold record changed between its read and a
// compare-and-set write of it (another operator, or the reaper's
// hold_failures): nothing was written.
var ErrHoldMoved = errors.New("the hold record changed while it was read (another operator, or the reaper): nothing written; run the command again")

// Holds reads the hold records under <prefix>/reaper/hold/, by host, each
// with the modify index it was read at; problems names the records that
// cannot be read (they hold nothing).
func (s *Store) Holds(ctx context.Context) (map[string]reaperkv.HoldRecord, []Problem, error) {
	dir := reaperkv.ReaperKey(s.prefix, reaperkv.ReaperHoldDir)
	pairs, meta, err := s.kv.List(dir, readOpts(ctx))
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", dir, err)
	}
	if err := hiddenByACLs(meta, dir); err != nil {
		return nil, nil, err
	}
	out := map[string]reaperkv.HoldRecord{}
	var problems []Problem
	for _, p := range pairs {
		rec, err := reaperkv.ParseHold(schema.RelKey(s.prefix, p.Key), p.Value)
		if err != nil {
			problems = append(problems, Problem{Key: p.Key, Problem: strings.TrimPrefix(err.Error(), schema.RelKey(s.prefix, p.Key)+": ")})
			continue
		}
		rec.Index = p.ModifyIndex
		out[rec.Host] = rec
	}
	sort.Slice(problems, func(i, j int) bool { return problems[i].Key < problems[j].Key })
	return out, problems, nil
}

// PutHold writes rec as its host's hold record: a compare-and-set on
// index, the record's index when read (0: there must be none).
// ErrHoldMoved when it changed since.
func (s *Store) PutHold(ctx context.Context, rec reaperkv.HoldRecord, index uint64) error {
	if err := rec.Check(); err != nil {
		return &InputError{Err: fmt.Errorf("hold of %s: %w", rec.Host, err)}
	}
	key := reaperkv.HoldKey(s.prefix, rec.Host)
	ok, _, err := s.kv.CAS(&api.KVPair{Key: key, Value: reaperkv.MarshalHold(rec), ModifyIndex: index}, writeOpts(ctx))
	switch {
	case err != nil:
		return fmt.Errorf("write %s: %w", key, err)
	case !ok:
		return ErrHoldMoved
	}
	return nil
}
