package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/store/schema"
)

// The catalog change feed (hiera-services --publish): one publisher per
// datacenter, under a lock, watches every service and records here, per
// service, the catalog index of its latest change. A node's
// hiera-services --watch follows the feed's head with one blocking query
// and reads again only the services it names, instead of probing every
// service it uses to find the one that changed.
//
//	hierafeed/leader           the publisher's lock (session), whose value
//	                           is the head: FeedHead, the latest changes
//	hierafeed/services/<svc>   FeedService, the service's latest change,
//	                           <svc> path-escaped: the whole state, read
//	                           when a node fell behind the head
//
// The head is the lock key itself so that one blocking query on it tells
// a node both what changed and whether a publisher still holds the lock
// (a session that ends clears the key's Session and wakes the query).
// Consul's KV listing takes no filter, so a listing of changes alone is
// not possible: the head carries them. Written by the publisher's token
// only (hiera-publisher.hcl); every node reads it. Each write first checks
// that the writer's session holds the lock, so a deposed publisher writes
// nothing.
const (
	dirHieraFeed      = "hierafeed"
	hieraFeedLeader   = "leader"
	hieraFeedServices = "services"
)

// FeedHeadEntries is how many changes the head keeps: a node that falls
// further behind reads every service's record once.
const FeedHeadEntries = 32

// HieraFeedDir is hierafeed/ under prefix.
func HieraFeedDir(prefix string) string { return keyDir(prefix, dirHieraFeed) }

// HieraFeedLeaderKey is the publisher's lock and the feed's head,
// hierafeed/leader.
func HieraFeedLeaderKey(prefix string) string {
	return schema.Join(prefix, dirHieraFeed, hieraFeedLeader)
}

// HieraFeedServicesDir is hierafeed/services/.
func HieraFeedServicesDir(prefix string) string {
	return keyDir(prefix, dirHieraFeed, hieraFeedServices)
}

// HieraFeedServiceKey is hierafeed/services/<service>, the name
// path-escaped: a Consul service name may hold '/'.
func HieraFeedServiceKey(prefix, service string) string {
	return HieraFeedServicesDir(prefix) + url.PathEscape(service)
}

// FeedService is one service's change: its record, and an entry of the
// head.
type FeedService struct {
	// Service names the service in the head's entries (a record's key
	// names it).
	Service string `json:"service,omitempty"`
	// Seq numbers the head's entries in the order written, from 1 in
	// each publisher's term.
	Seq uint64 `json:"seq,omitempty"`
	// Index is the catalog index of the service's latest change, as its
	// health query reports it (X-Consul-Index).
	Index uint64 `json:"index"`
	// Gone says the service left the catalog at Index.
	Gone bool `json:"gone,omitempty"`
	// Tags are the service's tags as the catalog's service list has them
	// (the union of its instances' tags, sorted).
	Tags []string `json:"tags,omitempty"`
	// Time is when the publisher saw the change (RFC 3339); records only.
	Time string `json:"time,omitempty"`
}

// FeedHead is the value of the lock key: the latest changes.
type FeedHead struct {
	// Ready says the feed is complete: the publisher has recorded every
	// service's index since it took the lock, and its queries answer.
	Ready bool `json:"ready"`
	// Dropped is the highest Seq of the entries no longer kept.
	Dropped uint64 `json:"dropped,omitempty"`
	// Entries are the latest changes, oldest first.
	Entries []FeedService `json:"entries,omitempty"`
}

// ParseFeedHead reads the lock key as a node sees it: the head, and the
// session holding the lock ("" when none does, or the key is absent).
func ParseFeedHead(p *api.KVPair) (FeedHead, string, error) {
	var h FeedHead
	if p == nil {
		return h, "", nil
	}
	if p.Session == "" {
		return h, "", nil
	}
	if err := json.Unmarshal(p.Value, &h); err != nil {
		return FeedHead{}, p.Session, fmt.Errorf("%s: %w", p.Key, err)
	}
	return h, p.Session, nil
}

// ParseFeedServices reads the records listed under HieraFeedServicesDir,
// by service; problems name records that could not be read (a value
// written by hand), which are left out.
func ParseFeedServices(prefix string, pairs api.KVPairs) (map[string]FeedService, []string) {
	out := map[string]FeedService{}
	var problems []string
	dir := HieraFeedServicesDir(prefix)
	for _, p := range pairs {
		if p == nil {
			continue
		}
		rel, ok := strings.CutPrefix(p.Key, dir)
		if !ok {
			continue
		}
		name, err := url.PathUnescape(rel)
		if err != nil || name == "" || strings.Contains(rel, "/") {
			problems = append(problems, fmt.Sprintf("%s: not a service's record", p.Key))
			continue
		}
		var s FeedService
		if err := json.Unmarshal(p.Value, &s); err != nil || s.Index == 0 {
			problems = append(problems, fmt.Sprintf("%s: not a feed record", p.Key))
			continue
		}
		s.Service = name
		out[name] = s
	}
	return out, problems
}

// ErrNotFeedLeader is returned by a feed write refused because the
// session no longer holds the publisher's lock.
var ErrNotFeedLeader = errors.New("this publisher no longer holds the feed's lock")

// FeedServices lists every service's record, consistently.
func (s *Store) FeedServices(ctx context.Context) (map[string]FeedService, error) {
	dir := HieraFeedServicesDir(s.prefix)
	pairs, _, err := s.kv.List(dir, (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	out, _ := ParseFeedServices(s.prefix, pairs)
	return out, nil
}

// PublishFeed writes services' records (by name), then the head, in
// transactions that each first check that session holds the publisher's
// lock; the head goes last, so a node that finds a change in the head
// finds its record too.
func (s *Store) PublishFeed(ctx context.Context, session string, head FeedHead, records map[string]FeedService) error {
	var ops api.KVTxnOps
	for name, v := range records {
		v.Service, v.Seq = "", 0
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		ops = append(ops, &api.KVTxnOp{Verb: api.KVSet, Key: HieraFeedServiceKey(s.prefix, name), Value: b})
	}
	b, err := json.Marshal(head)
	if err != nil {
		return err
	}
	// A plain set keeps the key's lock (Consul keeps the session of a
	// key set without acquire); Flags stay those of api.Lock's keys.
	ops = append(ops, &api.KVTxnOp{Verb: api.KVSet, Key: HieraFeedLeaderKey(s.prefix), Value: b, Flags: api.LockFlagValue})
	return s.feedTxn(ctx, session, ops)
}

// DeleteFeedServices removes services' records (gone markers past their
// retention), under the same lock check.
func (s *Store) DeleteFeedServices(ctx context.Context, session string, names []string) error {
	var ops api.KVTxnOps
	for _, n := range names {
		ops = append(ops, &api.KVTxnOp{Verb: api.KVDelete, Key: HieraFeedServiceKey(s.prefix, n)})
	}
	return s.feedTxn(ctx, session, ops)
}

// feedTxn applies ops in chunks, each after a check that session holds
// the publisher's lock.
func (s *Store) feedTxn(ctx context.Context, session string, ops api.KVTxnOps) error {
	leader := HieraFeedLeaderKey(s.prefix)
	for len(ops) > 0 {
		n := min(len(ops), maxTxnOps-1)
		chunk := append(api.KVTxnOps{{Verb: api.KVCheckSession, Key: leader, Session: session}}, ops[:n]...)
		ops = ops[n:]
		ok, resp, _, err := s.kv.Txn(chunk, (&api.QueryOptions{}).WithContext(ctx))
		if err != nil {
			return fmt.Errorf("write %s: %w", HieraFeedDir(s.prefix), err)
		}
		if !ok {
			for _, e := range resp.Errors {
				if e.OpIndex == 0 {
					return ErrNotFeedLeader
				}
			}
			return refusedOr(resp, fmt.Errorf("write %s: %s", HieraFeedDir(s.prefix), TxnErrors(resp)))
		}
	}
	return nil
}
