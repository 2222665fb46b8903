package store

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/store/schema"
)

// WaitChange is a blocking query on every key under the prefix: it
// returns the prefix's index once it is past index (a write, a delete),
// or after wait (Consul's cap, with its jitter) with the same index.
// Index 0 answers at once. `orchestrate status --watch` redraws on it.
func (s *Store) WaitChange(ctx context.Context, index uint64, wait time.Duration) (uint64, error) {
	dir := schema.PrefixDir(s.prefix)
	_, meta, err := s.kv.Keys(dir, "", (&api.QueryOptions{WaitIndex: index, WaitTime: wait}).WithContext(ctx))
	if err != nil {
		return 0, fmt.Errorf("watch %s: %w", dir, err)
	}
	if err := hiddenByACLs(meta, dir); err != nil {
		return 0, err
	}
	return meta.LastIndex, nil
}
