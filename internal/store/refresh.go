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

// ErrRefreshMoved: a refresh request changed between its read and a
// compare-and-set write of it (the reaper wrote its progress, or another
// operator a request): nothing was written.
var ErrRefreshMoved = errors.New("the refresh request changed while it was read (the reaper's progress, or another request): nothing written; run the command again")

// Refreshes reads the refresh requests and boot spec records, by role; a
// request the reaper or `orchestrate refresh` did not write is an
// InputError naming its key.
func (s *Store) Refreshes(ctx context.Context) (map[string]reaperkv.RefreshRecord, map[string]reaperkv.SpecRecord, error) {
	dir := reaperkv.ReaperKey(s.prefix, reaperkv.ReaperDir)
	pairs, _, err := s.kv.List(dir, readOpts(ctx))
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", dir, err)
	}
	recs, specs := map[string]reaperkv.RefreshRecord{}, map[string]reaperkv.SpecRecord{}
	for _, p := range pairs {
		rel := schema.RelKey(s.prefix, p.Key)
		switch {
		case strings.HasPrefix(rel, reaperkv.ReaperRefreshDir):
			role, rec, err := reaperkv.ParseRefresh(rel, p.Value, p.ModifyIndex)
			if err != nil {
				return nil, nil, &InputError{Err: fmt.Errorf("%s: %w", p.Key, err)}
			}
			recs[role] = rec
		case strings.HasPrefix(rel, reaperkv.ReaperSpecDir):
			if role, rec, err := reaperkv.ParseSpec(rel, p.Value); err == nil {
				specs[role] = rec
			}
		}
	}
	return recs, specs, nil
}

// RequestRefresh writes rec as role's new refresh request, replacing
// whatever stands, and returns the value it replaced (nil: there was
// none).
func (s *Store) RequestRefresh(ctx context.Context, role string, rec reaperkv.RefreshRecord) ([]byte, error) {
	if err := schema.ValidName("role", role); err != nil {
		return nil, &InputError{Err: err}
	}
	if err := rec.Check(); err != nil {
		return nil, &InputError{Err: fmt.Errorf("refresh request of %s: %w", role, err)}
	}
	key := reaperkv.RefreshKey(s.prefix, role)
	return s.swapOne(ctx, "write "+key, key, rec.Value())
}

// PutRefresh writes role's refresh request. A new request (index 0)
// replaces whatever stands; any other is a compare-and-set on the index
// it was read at (ErrRefreshMoved when it moved).
func (s *Store) PutRefresh(ctx context.Context, role string, rec reaperkv.RefreshRecord, index uint64) error {
	if err := schema.ValidName("role", role); err != nil {
		return &InputError{Err: err}
	}
	if err := rec.Check(); err != nil {
		return &InputError{Err: fmt.Errorf("refresh request of %s: %w", role, err)}
	}
	key := reaperkv.RefreshKey(s.prefix, role)
	pair := &api.KVPair{Key: key, Value: rec.Value(), ModifyIndex: index}
	if index == 0 {
		if _, err := s.kv.Put(pair, writeOpts(ctx)); err != nil {
			return fmt.Errorf("write %s: %w", key, err)
		}
		return nil
	}
	ok, _, err := s.kv.CAS(pair, writeOpts(ctx))
	switch {
	case err != nil:
		return fmt.Errorf("write %s: %w", key, err)
	case !ok:
		return ErrRefreshMoved
	}
	return nil
}
