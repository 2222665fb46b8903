package store

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/hashicorp/consul/api"
)

// A write command reports what it changed, old -> new, so the old value
// it reports must be the one its write replaced, not one another writer
// put there between its read and its write. swap gives every such
// command that guarantee: a check-and-set on each key at the index it was
// read at, in one transaction, read again and retried when another writer
// moved a key first.

// newValue is what a swap does with one of its keys.
type newValue struct {
	// Value is the key's new value (Set).
	Value []byte
	// Set writes Value; Delete removes the key; neither leaves it as it
	// is.
	Set, Delete bool
}

// setTo is a newValue that writes v.
func setTo(v []byte) newValue { return newValue{Value: v, Set: true} }

// swap reads keys (a missing key is nil), asks next what to do with each
// (in order) and does it in one transaction, each key checked-and-set at
// the index it was read at; when another writer moved one first, it reads
// again and asks next again. It returns the pairs the transaction
// replaced. An error from next (a refusal) is returned as is, nothing
// written; when next keeps every key, nothing is written either.
func (s *Store) swap(ctx context.Context, what string, keys []string, next func(old []*api.KVPair) ([]newValue, error)) ([]*api.KVPair, error) {
	for attempt := 0; attempt < maxAttempts; attempt++ {
		if err := backoff(ctx, attempt); err != nil {
			return nil, err
		}
		old := make([]*api.KVPair, len(keys))
		for i, k := range keys {
			p, err := s.get(ctx, k)
			if err != nil {
				return nil, err
			}
			old[i] = p
		}
		vals, err := next(old)
		if err != nil {
			return old, err
		}
		ops, writes := swapOps(keys, old, vals)
		if !writes {
			return old, nil
		}
		if s.swapRead != nil {
			s.swapRead()
		}
		ok, err := s.txn(ctx, ops, what)
		if err != nil {
			return nil, err
		}
		if ok {
			return old, nil
		}
	}
	return nil, fmt.Errorf("%s: %w", what, ErrConflict)
}

// swapOps is the transaction of a swap: each key it writes or deletes
// checked-and-set at the index it was read at (a key read missing is
// written only if still missing); a key kept is not in it. writes is
// false when it would change nothing.
func swapOps(keys []string, old []*api.KVPair, vals []newValue) (api.KVTxnOps, bool) {
	var ops api.KVTxnOps
	for i, k := range keys {
		var index uint64
		if old[i] != nil {
			index = old[i].ModifyIndex
		}
		v := vals[i]
		switch {
		case v.Set:
			// A check-and-set at index 0 writes only a key that does
			// not exist.
			ops = append(ops, &api.KVTxnOp{Verb: api.KVCAS, Key: k, Value: v.Value, Index: index})
		case v.Delete && old[i] != nil:
			ops = append(ops, &api.KVTxnOp{Verb: api.KVDeleteCAS, Key: k, Index: index})
		}
	}
	return ops, len(ops) > 0
}

// value is a pair's value, nil for no pair.
func value(p *api.KVPair) []byte {
	if p == nil {
		return nil
	}
	return p.Value
}

// swapOne writes v at key (nil: deletes it) as a swap, and returns the
// value it replaced (nil: there was none).
func (s *Store) swapOne(ctx context.Context, what, key string, v []byte) ([]byte, error) {
	nv := newValue{Delete: true}
	if v != nil {
		nv = setTo(v)
	}
	old, err := s.swap(ctx, what, []string{key}, func([]*api.KVPair) ([]newValue, error) { return []newValue{nv}, nil })
	if err != nil {
		return nil, err
	}
	return value(old[0]), nil
}

// swapJSON writes rec's JSON at key as a swap, and returns the value it
// replaced (nil: there was none).
func (s *Store) swapJSON(ctx context.Context, what, key string, rec any) ([]byte, error) {
	data, err := json.Marshal(rec)
	if err != nil {
		return nil, fmt.Errorf("%s: encode: %w", what, err)
	}
	return s.swapOne(ctx, what, key, data)
}
