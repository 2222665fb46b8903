package store

import (
	"context"
	"fmt"
	"strings"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/store/schema"
)

// dirLogGrants holds each host's Swift upload grant for its failure logs
// (internal/logship): loggrants/<host>, written by the reaper only. Every
// node's token reads the rest of the prefix, so this directory is denied
// to nodes by the shared node.hcl, and each host's own policy
// (HostPolicyRules) reads exactly its own key: a grant is a bearer
// credential, and host A must never obtain host B's.
const dirLogGrants = "loggrants"

// LogGrantKey is loggrants/<host> under prefix.
func LogGrantKey(prefix, host string) string { return schema.Join(prefix, dirLogGrants, host) }

// LogGrantDir is loggrants/ under prefix, the directory of every host's
// grant.
func LogGrantDir(prefix string) string { return keyDir(prefix, dirLogGrants) }

// maxLogGrant bounds a stored grant: one is about 300 bytes.
const maxLogGrant = 4 << 10

// LogGrant reads host's upload grant as stored (nil when there is none).
// It is read consistently: a renewed grant must not be missed for a
// stale one.
func (s *Store) LogGrant(ctx context.Context, host string) ([]byte, error) {
	if err := schema.ValidName("host", host); err != nil {
		return nil, &InputError{Err: err}
	}
	key := LogGrantKey(s.prefix, host)
	p, _, err := s.kv.Get(key, (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	if p == nil {
		return nil, nil
	}
	if len(p.Value) > maxLogGrant {
		return nil, fmt.Errorf("%s: %d bytes, more than a grant's %d", key, len(p.Value), maxLogGrant)
	}
	return p.Value, nil
}

// LogGrants reads every host's grant, by host: the reaper's view, for
// renewal. Keys not of the form loggrants/<host> are left out.
func (s *Store) LogGrants(ctx context.Context) (map[string][]byte, error) {
	dir := LogGrantDir(s.prefix)
	pairs, _, err := s.kv.List(dir, (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	out := map[string][]byte{}
	for _, p := range pairs {
		host := strings.TrimPrefix(p.Key, dir)
		if schema.ValidName("host", host) != nil {
			continue
		}
		out[host] = p.Value
	}
	return out, nil
}

// PutLogGrant stores host's grant (the reaper's renewal). One key: no
// transaction needed.
func (s *Store) PutLogGrant(ctx context.Context, host string, value []byte) error {
	if err := schema.ValidName("host", host); err != nil {
		return &InputError{Err: err}
	}
	if len(value) > maxLogGrant {
		return &InputError{Err: fmt.Errorf("a grant of %d bytes is more than %d", len(value), maxLogGrant)}
	}
	key := LogGrantKey(s.prefix, host)
	if _, err := s.kv.Put(&api.KVPair{Key: key, Value: value}, writeOpts(ctx)); err != nil {
		return fmt.Errorf("write %s: %w", key, err)
	}
	return nil
}

// DeleteLogGrant removes host's grant (the host is gone).
func (s *Store) DeleteLogGrant(ctx context.Context, host string) error {
	if err := schema.ValidName("host", host); err != nil {
		return &InputError{Err: err}
	}
	key := LogGrantKey(s.prefix, host)
	if _, err := s.kv.Delete(key, writeOpts(ctx)); err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	return nil
}
