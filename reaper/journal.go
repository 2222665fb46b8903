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

// Entry is one journal entry; its format, kinds and phases are part of
// the KV layout, in internal/store.
type Entry = store.JournalEntry

// ErrNotLeader is returned when a journal write was refused because this
// reaper's session no longer holds the leader lock.
var ErrNotLeader = errors.New("not the leader: the leader lock is held by another session, or by none")

// Keys under <prefix>/, as internal/store lays them out.
const (
	keyJournal = store.ReaperJournalDir
	keyBudget  = store.ReaperBudgetKey
	keyArmed   = store.ReaperArmedKey
	keyState   = store.ReaperStateKey
)

// Armed is the value of <prefix>/reaper/armed.
type Armed = store.ArmRecord

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
	// Armed is the arm record when it opens the gate; nil otherwise.
	Armed *Armed
	// ArmKeyWritten: the armed key exists, whatever it holds. Once it does
	// (an arm, a disarm, a value written by hand), the reaper never arms
	// itself again.
	ArmKeyWritten bool
	// ArmProblem says why the armed key does not arm, when it holds
	// something other than an arm or disarm record.
	ArmProblem string
	// Problems lists unreadable keys (never acted on).
	Problems []string
}

// Read lists <prefix>/reaper/ in one request.
func (j *Journal) Read(ctx context.Context) (*ReaperKeys, error) {
	pairs, _, err := j.kv.List(j.key(store.ReaperDir), (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", j.key(store.ReaperDir), err)
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
			out.ArmKeyWritten = true
			rec, err := store.ParseArmRecord(p.Value)
			switch {
			case err != nil:
				out.ArmProblem = err.Error()
			case rec.Arms():
				out.Armed = &rec
			}
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

// maxEntrySize keeps a journal entry well under Consul's 512 KiB limit on
// a value; an entry that large holds an error text gone wrong, and is
// refused here rather than by Consul mid-transaction.
const maxEntrySize = 400 * 1024

func (j *Journal) setOp(e Entry) (*api.KVTxnOp, error) {
	data, err := json.Marshal(e)
	if err != nil {
		return nil, err
	}
	if len(data) > maxEntrySize {
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
func ArmKey(prefix string) string { return store.ReaperKey(prefix, keyArmed) }

// StateKey is the state key under prefix, for `orchestrate status`.
func StateKey(prefix string) string { return store.ReaperKey(prefix, keyState) }

// PutState writes the state report (leader only).
func (j *Journal) PutState(ctx context.Context, session string, st *store.ReaperReport) error {
	data, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return j.txn(ctx, session, &api.KVTxnOp{Verb: api.KVSet, Key: j.key(keyState), Value: data})
}
