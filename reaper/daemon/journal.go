package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/internal/store/schema"
	"github.com/jiocloud/orchestrate/reaper"
)

// ErrNotLeader is returned when a journal write was refused because this
// reaper's session no longer holds the leader lock.
var ErrNotLeader = errors.New("not the leader: the leader lock is held by another session, or by none")

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

// ReaperKeys is everything under <prefix>/reaper/ the cycle needs.
type ReaperKeys struct {
	Entries     []reaper.Entry
	Destructive []time.Time
	// Armed is the arm record when it opens the gate; nil otherwise.
	Armed *reaper.Armed
	// ArmKeyWritten: the armed key exists, whatever it holds. Once it does
	// (an arm, a disarm, a value written by hand), the reaper never arms
	// itself again.
	ArmKeyWritten bool
	// ArmProblem says why the armed key does not arm, when it holds
	// something other than an arm or disarm record.
	ArmProblem string
	// Problems lists unreadable keys (never acted on).
	Problems []string
	// Report is the last leader's report, nil when none could be read.
	Report *reaperkv.ReaperReport
	// Pool holds the standby records, by key; a value that does not parse
	// is a zero record (the next sync rewrites or removes it).
	Pool map[string]reaperkv.StandbyRecord
	// Flush holds the pool flush requests, by role; FlushProblems the
	// ones that cannot be read.
	Flush         map[string]reaperkv.PoolFlushRecord
	FlushProblems []string
	// Refresh holds the refresh requests, by role; RefreshProblems says
	// why one cannot be read, by role (its refresh is held).
	Refresh         map[string]reaperkv.RefreshRecord
	RefreshProblems map[string]string
	// Specs holds the roles' boot spec records; SpecProblems says, by
	// role, why one cannot be read (it is left alone: the role has no
	// spec to roll back to).
	Specs        map[string]reaperkv.SpecRecord
	SpecProblems map[string]string
	// Cooloff holds the records of aborted drains, by host;
	// CooloffProblems those that cannot be read (host: why).
	Cooloff         map[string]reaperkv.DrainAbortRecord
	CooloffProblems map[string]string
	// Tokens holds the sealed node tokens of servers the reaper built, by
	// host; a record that cannot be read is in Problems and keeps its
	// name from being built again (its token may live).
	Tokens map[string]reaperkv.NodeTokenRecord
	// ServerGroups holds the roles' server group records, by role;
	// ServerGroupProblems those that cannot be read (role: why), whose
	// roles create nothing until they are looked at.
	ServerGroups        map[string]reaperkv.ServerGroupRecord
	ServerGroupProblems map[string]string
	// Holds holds the hold records, by host; HoldProblems those that
	// cannot be read (host: why), which hold nothing.
	Holds        map[string]reaperkv.HoldRecord
	HoldProblems map[string]string
	// Departed holds the departed records (forgotten hosts' log links),
	// by host; one that cannot be read is there with its host and index
	// only (forgotten the zero time: pruned first).
	Departed map[string]reaperkv.DepartedRecord
}

// Read lists <prefix>/reaper/ in one request.
func (j *Journal) Read(ctx context.Context) (*ReaperKeys, error) {
	pairs, _, err := j.kv.List(reaperkv.ReaperKey(j.prefix, reaperkv.ReaperDir), (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", reaperkv.ReaperKey(j.prefix, reaperkv.ReaperDir), err)
	}
	out := &ReaperKeys{Pool: map[string]reaperkv.StandbyRecord{}, Flush: map[string]reaperkv.PoolFlushRecord{},
		Refresh: map[string]reaperkv.RefreshRecord{}, RefreshProblems: map[string]string{}, Specs: map[string]reaperkv.SpecRecord{}, SpecProblems: map[string]string{},
		Cooloff: map[string]reaperkv.DrainAbortRecord{}, CooloffProblems: map[string]string{}, Tokens: map[string]reaperkv.NodeTokenRecord{},
		ServerGroups: map[string]reaperkv.ServerGroupRecord{}, ServerGroupProblems: map[string]string{},
		Holds: map[string]reaperkv.HoldRecord{}, HoldProblems: map[string]string{}, Departed: map[string]reaperkv.DepartedRecord{}}
	for _, p := range pairs {
		rel := schema.RelKey(j.prefix, p.Key)
		if !out.addRecord(rel, p) {
			out.addOwn(rel, p)
		}
	}
	return out, nil
}

// addRecord reads one of the records kept by role or host (standbys,
// flush and refresh requests, boot specs, cool-offs, server groups, node
// tokens); false
// when rel is none of them.
func (out *ReaperKeys) addRecord(rel string, p *api.KVPair) bool {
	switch {
	case strings.HasPrefix(rel, reaperkv.ReaperPoolDir):
		var rec reaperkv.StandbyRecord
		_ = json.Unmarshal(p.Value, &rec)
		out.Pool[p.Key] = rec
	case strings.HasPrefix(rel, reaperkv.ReaperPoolFlushDir):
		rec, err := store.ParsePoolFlush(p)
		if err != nil {
			// Written by hand: reported in the state, nothing flushed
			// for it; the rest of the cycle goes on.
			out.FlushProblems = append(out.FlushProblems, err.Error())
			return true
		}
		out.Flush[strings.TrimPrefix(rel, reaperkv.ReaperPoolFlushDir)] = rec
	case strings.HasPrefix(rel, reaperkv.ReaperRefreshDir):
		role, rec, err := reaperkv.ParseRefresh(rel, p.Value, p.ModifyIndex)
		switch {
		case err != nil && role != "":
			out.RefreshProblems[role] = err.Error()
		case err != nil:
			out.Problems = append(out.Problems, err.Error())
		default:
			out.Refresh[role] = rec
		}
	case strings.HasPrefix(rel, reaperkv.ReaperSpecDir):
		role, rec, err := reaperkv.ParseSpec(rel, p.Value)
		switch {
		case err != nil && role != "":
			out.SpecProblems[role] = err.Error()
		case err != nil:
			out.Problems = append(out.Problems, err.Error())
		default:
			out.Specs[role] = rec
		}
	case strings.HasPrefix(rel, reaperkv.ReaperCooloffDir):
		rec, err := reaperkv.ParseDrainAbort(rel, p.Value)
		switch {
		case err != nil && rec.Host != "":
			out.CooloffProblems[rec.Host] = err.Error()
		case err == nil:
			rec.Index = p.ModifyIndex
			out.Cooloff[rec.Host] = rec
		}
	case strings.HasPrefix(rel, reaperkv.ReaperServerGroupDir):
		out.addServerGroup(rel, p)
	case strings.HasPrefix(rel, reaperkv.ReaperHoldDir):
		rec, err := reaperkv.ParseHold(rel, p.Value)
		switch {
		case err != nil && rec.Host != "":
			out.HoldProblems[rec.Host] = err.Error()
		case err != nil:
			// A key that names no host holds nothing.
		default:
			rec.Index = p.ModifyIndex
			out.Holds[rec.Host] = rec
		}
	case strings.HasPrefix(rel, reaperkv.ReaperDepartedDir):
		rec, _ := reaperkv.ParseDeparted(rel, p.Value)
		if rec.Host != "" {
			rec.Index = p.ModifyIndex
			out.Departed[rec.Host] = rec
		}
	case strings.HasPrefix(rel, reaperkv.ReaperTokenDir):
		rec, err := reaperkv.ParseNodeToken(rel, p.Value)
		if err != nil {
			out.Problems = append(out.Problems, err.Error())
		}
		if rec.Host != "" {
			out.Tokens[rec.Host] = rec
		}
	default:
		return false
	}
	return true
}

// addServerGroup reads a role's server group record at rel: one that
// cannot be read is its role's problem (its creates wait until it is
// looked at). A key that names no role is no role's record and holds
// nothing (as under the cool-offs).
func (k *ReaperKeys) addServerGroup(rel string, p *api.KVPair) {
	rec, err := reaperkv.ParseServerGroup(rel, p.Value)
	switch {
	case err != nil && rec.Role != "":
		k.ServerGroupProblems[rec.Role] = err.Error()
	case err != nil:
	default:
		rec.Index = p.ModifyIndex
		k.ServerGroups[rec.Role] = rec
	}
}

// addOwn reads one of the leader's own keys: a journal entry, the budget,
// the last report, the arm record.
func (out *ReaperKeys) addOwn(rel string, p *api.KVPair) {
	switch {
	case strings.HasPrefix(rel, reaperkv.ReaperJournalDir):
		var e reaper.Entry
		if err := json.Unmarshal(p.Value, &e); err != nil || e.ID == "" || rel != reaperkv.ReaperJournalDir+e.ID {
			out.Problems = append(out.Problems, fmt.Sprintf("%s: not a journal entry the reaper wrote", p.Key))
			return
		}
		out.Entries = append(out.Entries, e)
	case rel == reaperkv.ReaperBudgetKey:
		if err := json.Unmarshal(p.Value, &out.Destructive); err != nil {
			out.Problems = append(out.Problems, fmt.Sprintf("%s: %v", p.Key, err))
		}
	case rel == reaperkv.ReaperStateKey:
		// The last leader's report, for what a new leader goes on
		// from (the autoscalers' windows); one that cannot be read is
		// no report.
		var rep reaperkv.ReaperReport
		if json.Unmarshal(p.Value, &rep) == nil {
			out.Report = &rep
		}
	case rel == reaperkv.ReaperArmedKey:
		out.ArmKeyWritten = true
		rec, err := reaperkv.ParseArmRecord(p.Value)
		switch {
		case err != nil:
			out.ArmProblem = err.Error()
		case rec.Arms():
			out.Armed = &rec
		}
	}
}

// txn runs ops after checking that session holds the leader lock.
func (j *Journal) txn(ctx context.Context, session string, ops ...*api.KVTxnOp) error {
	_, err := j.txnResults(ctx, session, ops...)
	return err
}

// txnResults is txn, returning Consul's results (the keys written, with
// their new modify indexes).
func (j *Journal) txnResults(ctx context.Context, session string, ops ...*api.KVTxnOp) ([]*api.KVPair, error) {
	all := api.KVTxnOps{{Verb: api.KVCheckSession, Key: j.leaderKey, Session: session}}
	all = append(all, ops...)
	ok, resp, _, err := j.kv.Txn(all, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("journal transaction: %w", err)
	}
	if !ok {
		if resp != nil {
			for _, e := range resp.Errors {
				if e.OpIndex == 0 {
					return nil, ErrNotLeader
				}
			}
		}
		return nil, &txnRefused{why: store.TxnErrors(resp)}
	}
	return resp.Results, nil
}

// PutServerGroup writes a role's server group record, only if the record
// is still the one read (rec.Index; 0: only if there is none), under the
// leader check; it returns the record's new modify index.
func (j *Journal) PutServerGroup(ctx context.Context, session string, rec reaperkv.ServerGroupRecord) (uint64, error) {
	key := reaperkv.ServerGroupKey(j.prefix, rec.Role)
	res, err := j.txnResults(ctx, session, &api.KVTxnOp{Verb: api.KVCAS, Key: key, Index: rec.Index, Value: reaperkv.MarshalServerGroup(rec)})
	if err != nil {
		return 0, err
	}
	for _, kv := range res {
		if kv != nil && kv.Key == key {
			return kv.ModifyIndex, nil
		}
	}
	return 0, fmt.Errorf("write %s: Consul returned no index for it", key)
}

// txnRefused: Consul rolled a leader transaction back on a check other
// than the leader's (a key that moved).
type txnRefused struct{ why string }

func (e *txnRefused) Error() string { return "journal transaction refused: " + e.why }

// maxEntrySize keeps a journal entry well under Consul's 512 KiB limit on
// a value; an entry that large holds an error text gone wrong, and is
// refused here rather than by Consul mid-transaction.
const maxEntrySize = 400 * 1024

func (j *Journal) setOp(e reaper.Entry) (*api.KVTxnOp, error) {
	data, err := json.Marshal(e)
	if err != nil {
		return nil, err
	}
	if len(data) > maxEntrySize {
		return nil, fmt.Errorf("journal entry %s is too large", e.ID)
	}
	return &api.KVTxnOp{Verb: api.KVSet, Key: reaperkv.JournalKey(j.prefix, e.ID), Value: data}, nil
}

// Put writes an entry, and the destructive-action budget when budget is
// not nil, and extra, in one transaction under the leader check.
func (j *Journal) Put(ctx context.Context, session string, e reaper.Entry, budget []time.Time, extra ...*api.KVTxnOp) error {
	op, err := j.setOp(e)
	if err != nil {
		return err
	}
	ops := []*api.KVTxnOp{op}
	if budget != nil {
		data, _ := json.Marshal(budget)
		ops = append(ops, &api.KVTxnOp{Verb: api.KVSet, Key: reaperkv.ReaperKey(j.prefix, reaperkv.ReaperBudgetKey), Value: data})
	}
	return j.txn(ctx, session, append(ops, extra...)...)
}

// Remove deletes a finished entry, and runs extra, in one transaction.
func (j *Journal) Remove(ctx context.Context, session, id string, extra ...*api.KVTxnOp) error {
	return j.txn(ctx, session, append([]*api.KVTxnOp{{Verb: api.KVDelete, Key: reaperkv.JournalKey(j.prefix, id)}}, extra...)...)
}

// tokenSetOp records a server's sealed token.
func (j *Journal) tokenSetOp(rec reaperkv.NodeTokenRecord) *api.KVTxnOp {
	return &api.KVTxnOp{Verb: api.KVSet, Key: reaperkv.NodeTokenKey(j.prefix, rec.Host), Value: rec.Value()}
}

// DropToken removes host's token record (its token was logged out), under
// the leader check.
func (j *Journal) DropToken(ctx context.Context, session, host string) error {
	return j.txn(ctx, session, &api.KVTxnOp{Verb: api.KVDelete, Key: reaperkv.NodeTokenKey(j.prefix, host)})
}

// poolDeleteOp removes host's standby record from role's pool.
func (j *Journal) poolDeleteOp(role, host string) *api.KVTxnOp {
	return &api.KVTxnOp{Verb: api.KVDelete, Key: reaperkv.PoolKey(j.prefix, role, host)}
}

// Flush writes a role's flush request back with its Seen time, or (done)
// removes it, in either case only if it is still the request read (its
// index), under the leader check.
func (j *Journal) Flush(ctx context.Context, session string, f reaper.PoolFlush, done bool) error {
	op := &api.KVTxnOp{Verb: api.KVDeleteCAS, Key: reaperkv.PoolFlushKey(j.prefix, f.Role), Index: f.Record.Index}
	if !done {
		data, _ := json.Marshal(f.Record)
		op.Verb, op.Value = api.KVCAS, data
	}
	err := j.txn(ctx, session, op)
	var refused *txnRefused
	if errors.As(err, &refused) {
		return nil // a newer request: the next cycles carry it out
	}
	return err
}

// SetStandby writes one standby record under the leader check (before a
// cloud call on the standby, as a journal entry is).
func (j *Journal) SetStandby(ctx context.Context, session string, rec reaperkv.StandbyRecord) error {
	return j.txn(ctx, session, j.standbyOp(rec))
}

// standbyOp writes a standby record.
func (j *Journal) standbyOp(rec reaperkv.StandbyRecord) *api.KVTxnOp {
	data, _ := json.Marshal(rec)
	return &api.KVTxnOp{Verb: api.KVSet, Key: reaperkv.PoolKey(j.prefix, rec.Role, rec.Host), Value: data}
}

// poolOpsPerTxn bounds the pool records written in one transaction:
// Consul takes at most 64 operations, one of which is the leader check.
const poolOpsPerTxn = 60

// SyncPool makes the pool records under <prefix>/reaper/pool/ what the
// plan saw (have is what the cycle read): changed records are written,
// records of servers no longer standbys removed, in transactions under
// the leader check.
func (j *Journal) SyncPool(ctx context.Context, session string, want []reaperkv.StandbyRecord, have map[string]reaperkv.StandbyRecord) error {
	var ops []*api.KVTxnOp
	seen := map[string]bool{}
	for _, rec := range want {
		key := reaperkv.PoolKey(j.prefix, rec.Role, rec.Host)
		seen[key] = true
		if old, ok := have[key]; ok && old == rec {
			continue
		}
		data, _ := json.Marshal(rec)
		ops = append(ops, &api.KVTxnOp{Verb: api.KVSet, Key: key, Value: data})
	}
	for key := range have {
		if !seen[key] {
			ops = append(ops, &api.KVTxnOp{Verb: api.KVDelete, Key: key})
		}
	}
	for len(ops) > 0 {
		n := min(len(ops), poolOpsPerTxn)
		if err := j.txn(ctx, session, ops[:n]...); err != nil {
			return err
		}
		ops = ops[n:]
	}
	return nil
}

// drainRequestOp writes the drain request of entry e's old server, for
// the node's drain handler (or the platform) to answer, with what a
// failed answer and no answer lead to.
func (j *Journal) drainRequestOp(e reaper.Entry, role *reaper.Role, now time.Time) *api.KVTxnOp {
	onFailure, onTimeout := role.DrainEnd(&e)
	data, _ := json.Marshal(schema.DrainRecord{Requested: now, Role: e.Role, Entry: e.ID, Reason: e.Reason, Deadline: e.DrainUntil, OnFailure: onFailure, OnTimeout: onTimeout})
	return &api.KVTxnOp{Verb: api.KVSet, Key: store.DrainKey(j.prefix, e.OldName), Value: data}
}

// drainEndOp removes host's drain request (the server stays).
func (j *Journal) drainEndOp(host string) *api.KVTxnOp {
	return &api.KVTxnOp{Verb: api.KVDelete, Key: store.DrainKey(j.prefix, host)}
}

// SetDesired writes the autoscaler's new count, only while no count set by
// hand stands and the count is still the one the decision read. ok is
// false when either moved (the next cycle decides again).
func (j *Journal) SetDesired(ctx context.Context, session string, c reaper.ScaleChange) (ok bool, err error) {
	err = j.txn(ctx, session,
		&api.KVTxnOp{Verb: api.KVCheckNotExists, Key: store.OverrideKey(j.prefix, c.Role)},
		&api.KVTxnOp{Verb: api.KVCAS, Key: store.DesiredKey(j.prefix, c.Role), Index: c.Index, Value: []byte(strconv.Itoa(c.To))})
	var refused *txnRefused
	if errors.As(err, &refused) {
		return false, nil
	}
	return err == nil, err
}

// SetCapacity records that the role's creates fail for quota or capacity.
func (j *Journal) SetCapacity(ctx context.Context, session, role string, rec schema.CapacityRecord) error {
	data, _ := json.Marshal(rec)
	return j.txn(ctx, session, &api.KVTxnOp{Verb: api.KVSet, Key: store.CapacityKey(j.prefix, role), Value: data})
}

// ClearCapacity removes the role's exhausted capacity record.
func (j *Journal) ClearCapacity(ctx context.Context, session, role string) error {
	return j.txn(ctx, session, &api.KVTxnOp{Verb: api.KVDelete, Key: store.CapacityKey(j.prefix, role)})
}

// Arm writes the armed key (by the leader, when the start gate's condition
// is met).
func (j *Journal) Arm(ctx context.Context, session string, a reaper.Armed) error {
	data, _ := json.Marshal(a)
	return j.txn(ctx, session, &api.KVTxnOp{Verb: api.KVSet, Key: reaperkv.ReaperKey(j.prefix, reaperkv.ReaperArmedKey), Value: data})
}

// ArmKey is the armed key under prefix, for `orchestrate reaper arm`.
func ArmKey(prefix string) string { return reaperkv.ReaperKey(prefix, reaperkv.ReaperArmedKey) }

// StateKey is the state key under prefix, for `orchestrate status`.
func StateKey(prefix string) string { return reaperkv.ReaperKey(prefix, reaperkv.ReaperStateKey) }

// PutState writes the state report (leader only).
func (j *Journal) PutState(ctx context.Context, session string, st *reaperkv.ReaperReport) error {
	data, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return j.txn(ctx, session, &api.KVTxnOp{Verb: api.KVSet, Key: reaperkv.ReaperKey(j.prefix, reaperkv.ReaperStateKey), Value: data})
}

// RingHeartbeat rewrites the leader's heartbeat key (leader only), which
// fires every node's heartbeat watch. Its value says who rang and when,
// for people; no node reads it.
func (j *Journal) RingHeartbeat(ctx context.Context, session, leader string, now time.Time) error {
	data, err := json.Marshal(struct {
		Time   time.Time `json:"time"`
		Leader string    `json:"leader"`
	}{now.UTC(), leader})
	if err != nil {
		return err
	}
	return j.txn(ctx, session, &api.KVTxnOp{Verb: api.KVSet, Key: reaperkv.ReaperKey(j.prefix, reaperkv.ReaperHeartbeatKey), Value: data})
}

// AppendHistory appends add to the activity history (leader only), oldest
// dropped past the bounds, in a transaction that checks the leader lock
// and that the history did not move since it was read (tried twice). A
// history value the reaper did not write is left alone: an error says so.
func (j *Journal) AppendHistory(ctx context.Context, session string, add []reaperkv.Activity) error {
	key := reaperkv.HistoryKeyOf(j.prefix)
	var err error
	for range 2 {
		var p *api.KVPair
		p, _, err = j.kv.Get(key, (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx))
		if err != nil {
			return fmt.Errorf("read %s: %w", key, err)
		}
		var have []reaperkv.Activity
		var index uint64
		if p != nil {
			if have, err = reaperkv.ParseHistory(p.Value); err != nil {
				return fmt.Errorf("%w (`consul kv delete %s` starts a new one)", err, key)
			}
			index = p.ModifyIndex
		}
		_, data, merr := reaperkv.AppendHistory(have, add, reaperkv.MaxHistoryEntries, reaperkv.MaxHistoryBytes)
		if merr != nil {
			return merr
		}
		err = j.txn(ctx, session, &api.KVTxnOp{Verb: api.KVCAS, Key: key, Value: data, Index: index})
		var refused *txnRefused
		if !errors.As(err, &refused) {
			return err
		}
	}
	return err
}
