package store

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jiocloud/orchestrate/internal/jsonvalue"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
)

// ReaperReport reads <prefix>/reaper/state; nil when no reaper wrote one.
// A value that is not a report is an InputError.
func (s *Store) ReaperReport(ctx context.Context) (*reaperkv.ReaperReport, error) {
	key := reaperkv.ReaperKey(s.prefix, reaperkv.ReaperStateKey)
	p, _, err := s.kv.Get(key, readOpts(ctx))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	if p == nil {
		return nil, nil
	}
	var st reaperkv.ReaperReport
	if err := json.Unmarshal(p.Value, &st); err != nil {
		return nil, &InputError{Err: fmt.Errorf("%s holds a value the reaper did not write: %s", key, jsonvalue.Problem(err))}
	}
	return &st, nil
}

// ReaperHistory reads the reaper's activity history, oldest first (nil
// when it has written none).
func (s *Store) ReaperHistory(ctx context.Context) ([]reaperkv.Activity, error) {
	key := reaperkv.HistoryKeyOf(s.prefix)
	p, _, err := s.kv.Get(key, readOpts(ctx))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	if p == nil {
		return nil, nil
	}
	h, err := reaperkv.ParseHistory(p.Value)
	if err != nil {
		return nil, &InputError{Err: err}
	}
	return h, nil
}
