package reaper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/store"
)

// ErrNotLeader is returned when a journal write was refused because this
// reaper's session no longer holds the leader lock.
var ErrNotLeader = errors.New("not the leader: the leader lock is held by another session, or by none")

// Keys under <prefix>/reaper/.
const (
	keyJournal = "reaper/journal/"
	keyBudget  = "reaper/budget"
	keyArmed   = "reaper/armed"
	keyState   = "reaper/state"
)

// Armed is the value of <prefix>/reaper/armed.
type Armed struct {
	Time   time.Time `json:"time"`
	By     string    `json:"by"`
	Reason string    `json:"reason"`
}

// Journal reads and writes the reaper's keys in Consul KV. Every write the
// leader makes is a transaction that first checks that its session holds
// the leader lock, so a reaper that lost leadership can never write an
// intent, and so never makes the cloud call that follows one.
type Journal struct {
	kv        *api.KV
	prefix    string
	leaderKey string
}

// NewJournal returns the journal under prefix.
func NewJournal(c *api.Client, prefix, leaderKey string) *Journal {
	return &Journal{kv: c.KV(), prefix: strings.Trim(prefix, "/"), leaderKey: leaderKey}
}

func (j *Journal) key(rel string) string { return j.prefix + "/" + rel }

// ReaperKeys is everything under <prefix>/reaper/ the cycle needs.
type ReaperKeys struct {
	Entries     []Entry
	Destructive []time.Time
	Armed       *Armed
	// Problems lists unreadable keys (never acted on).
	Problems []string
}

// Read lists <prefix>/reaper/ in one request.
func (j *Journal) Read(ctx context.Context) (*ReaperKeys, error) {
	pairs, _, err := j.kv.List(j.key("reaper/"), (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", j.key("reaper/"), err)
	}
	out := &ReaperKeys{}
	for _, p := range pairs {
		rel := strings.TrimPrefix(p.Key, j.prefix+"/")
		switch {
		case strings.HasPrefix(rel, keyJournal):
			var e Entry
			if err := json.Unmarshal(p.Value, &e); err != nil || e.ID == "" || rel != keyJournal+e.ID {
				out.Problems = append(out.Problems, fmt.Sprintf("%s: not a journal entry the reaper wrote", p.Key))
				continue
			}
			out.Entries = append(out.Entries, e)
		case rel == keyBudget:
			if err := json.Unmarshal(p.Value, &out.Destructive); err != nil {
				out.Problems = append(out.Problems, fmt.Sprintf("%s: %v", p.Key, err))
			}
		case rel == keyArmed:
			var a Armed
			if err := json.Unmarshal(p.Value, &a); err != nil {
				// Any value arms: an operator may have written it by hand.
				a = Armed{Reason: string(p.Value)}
			}
			out.Armed = &a
		}
	}
	return out, nil
}

// txn runs ops after checking that session holds the leader lock.
func (j *Journal) txn(ctx context.Context, session string, ops ...*api.KVTxnOp) error {
	all := api.KVTxnOps{{Verb: api.KVCheckSession, Key: j.leaderKey, Session: session}}
	all = append(all, ops...)
	ok, resp, _, err := j.kv.Txn(all, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return fmt.Errorf("journal transaction: %w", err)
	}
	if !ok {
		if resp != nil {
			for _, e := range resp.Errors {
				if e.OpIndex == 0 {
					return ErrNotLeader
				}
			}
		}
		return fmt.Errorf("journal transaction refused: %s", store.TxnErrors(resp))
	}
	return nil
}

func (j *Journal) setOp(e Entry) (*api.KVTxnOp, error) {
	data, err := json.Marshal(e)
	if err != nil {
		return nil, err
	}
	if len(data) > 400*1024 {
		return nil, fmt.Errorf("journal entry %s is too large", e.ID)
	}
	return &api.KVTxnOp{Verb: api.KVSet, Key: j.key(keyJournal + e.ID), Value: data}, nil
}

// Put writes an entry, and the destructive-action budget when budget is
// not nil, in one transaction under the leader check.
func (j *Journal) Put(ctx context.Context, session string, e Entry, budget []time.Time) error {
	op, err := j.setOp(e)
	if err != nil {
		return err
	}
	ops := []*api.KVTxnOp{op}
	if budget != nil {
		data, _ := json.Marshal(budget)
		ops = append(ops, &api.KVTxnOp{Verb: api.KVSet, Key: j.key(keyBudget), Value: data})
	}
	return j.txn(ctx, session, ops...)
}

// Remove deletes a finished entry.
func (j *Journal) Remove(ctx context.Context, session, id string) error {
	return j.txn(ctx, session, &api.KVTxnOp{Verb: api.KVDelete, Key: j.key(keyJournal + id)})
}

// Arm writes the armed key (by the leader, when the start gate's condition
// is met).
func (j *Journal) Arm(ctx context.Context, session string, a Armed) error {
	data, _ := json.Marshal(a)
	return j.txn(ctx, session, &api.KVTxnOp{Verb: api.KVSet, Key: j.key(keyArmed), Value: data})
}

// ArmKey is the armed key under prefix, for `orchestrate reaper arm`.
func ArmKey(prefix string) string { return strings.Trim(prefix, "/") + "/" + keyArmed }

// StateKey is the state key under prefix, for `orchestrate status`.
func StateKey(prefix string) string { return strings.Trim(prefix, "/") + "/" + keyState }

// PutState writes the state report (leader only).
func (j *Journal) PutState(ctx context.Context, session string, st *State) error {
	data, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return j.txn(ctx, session, &api.KVTxnOp{Verb: api.KVSet, Key: j.key(keyState), Value: data})
}
