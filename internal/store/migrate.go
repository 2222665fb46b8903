package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/hashicorp/consul/api"
	"github.com/jiocloud/orchestrate/internal/store/schema"
)

// Migrate moves hosts' records from the layout before node restriction
// (legacy.go) to each host's own records under hosts/<host>/. For each host,
// one transaction creates each new record with check-and-set index 0 (a
// record the host wrote itself since the upgrade stands: the older one is
// only deleted) and deletes the older keys with check-and-set on the index
// read; a transaction that lost a race with a writer is planned again from
// a new read. Nothing is written while an older-layout rollout slot is held
// (a rollout the older orchestrate started is in progress) or while an
// older key holds a value orchestrate did not write.

// OldRecords is one host's records of one kind in the older layout, and
// the host's own record they move to.
type OldRecords struct {
	Host string `json:"host"`
	// Kind is version, status/<category>, metrics/<name> or drain (an
	// answer kept inside the drain request).
	Kind string `json:"kind"`
	// Keys are the older keys (for drain, the request, which stays
	// without the answer).
	Keys []string `json:"keys"`
	// Target is the host's own record.
	Target string `json:"target"`
	// Stands: the host wrote Target itself since the upgrade; the older
	// keys are only deleted.
	Stands bool `json:"stands,omitempty"`
}

// String says what migrating them does.
func (o OldRecords) String() string {
	from := strings.Join(o.Keys, " ")
	if o.Kind == hostDrain {
		from = "the answer inside " + o.Keys[0]
	}
	if o.Stands {
		return from + ": deleted (" + o.Target + ", written by the host since the upgrade, stands)"
	}
	return from + " -> " + o.Target
}

// Migration is what is left of the older layout.
type Migration struct {
	// Moves lists the records to move, by host then kind.
	Moves []OldRecords `json:"moves"`
	// HeldSlots lists the older layout's rollout slots held by a session
	// (rollout/<role>/slot/<session>): a rollout in progress.
	HeldSlots []string `json:"held_slots"`
	// Unreadable lists older keys whose value orchestrate did not write:
	// they cannot move.
	Unreadable []Problem `json:"unreadable"`
}

// Left reports whether anything of the older layout is left.
func (m *Migration) Left() bool {
	return len(m.Moves) > 0 || len(m.HeldSlots) > 0 || len(m.Unreadable) > 0
}

// ErrSlotsHeld: an older-layout rollout slot is held; nothing was moved.
var ErrSlotsHeld = errors.New("a rollout slot of the layout before node restriction is held (a rollout the older orchestrate started is in progress)")

// keyed is a key as read, with its modify index.
type keyed struct {
	key   string
	index uint64
}

// move is one OldRecords, with what its transaction does.
type move struct {
	OldRecords
	value       []byte  // the new record; nil when Stands
	targetIndex uint64  // check-and-set index of the write (0: create)
	deletes     []keyed // the older keys
	// rewrite is the drain request without its answer, check-and-set at
	// its index.
	rewrite      []byte
	rewriteIndex uint64
}

func (m move) ops() api.KVTxnOps {
	var ops api.KVTxnOps
	if m.value != nil {
		ops = append(ops, &api.KVTxnOp{Verb: api.KVCAS, Key: m.Target, Value: m.value, Index: m.targetIndex})
	}
	for _, d := range m.deletes {
		ops = append(ops, &api.KVTxnOp{Verb: api.KVDeleteCAS, Key: d.key, Index: d.index})
	}
	if m.rewrite != nil {
		ops = append(ops, &api.KVTxnOp{Verb: api.KVCAS, Key: m.Keys[0], Value: m.rewrite, Index: m.rewriteIndex})
	}
	return ops
}

// plan is a migration read from one listing of the prefix.
type plan struct {
	Migration
	byHost map[string][]move
}

// PlanMigration reads what is left of the older layout.
func (s *Store) PlanMigration(ctx context.Context) (*Migration, error) {
	p, err := s.planMigration(ctx)
	if err != nil {
		return nil, err
	}
	return &p.Migration, nil
}

func (s *Store) planMigration(ctx context.Context) (*plan, error) {
	pairs, err := s.listAll(ctx)
	if err != nil {
		return nil, err
	}
	r := newMigrationReader(s.prefix)
	for _, p := range pairs {
		r.add(p)
	}
	return r.plan(), nil
}

// Migrate moves every host's older records (see the comment at the top of
// this file) and returns what it moved. ErrSlotsHeld, and an InputError
// naming each unreadable older key, before anything is written.
func (s *Store) Migrate(ctx context.Context) ([]OldRecords, error) {
	p, err := s.planMigration(ctx)
	if err != nil {
		return nil, err
	}
	if len(p.HeldSlots) > 0 {
		return nil, fmt.Errorf("%w: %s; nothing moved: migrate once it ends (or its holder's session expires)", ErrSlotsHeld, strings.Join(p.HeldSlots, ", "))
	}
	if len(p.Unreadable) > 0 {
		var bad []string
		for _, u := range p.Unreadable {
			bad = append(bad, u.String())
		}
		return nil, &InputError{Err: fmt.Errorf("older keys hold values orchestrate did not write, nothing moved: %s; delete them (consul kv delete KEY) or write what orchestrate writes", strings.Join(bad, "; "))}
	}
	var done []OldRecords
	for _, host := range sortedKeys(p.byHost) {
		moved, err := s.migrateHost(ctx, host, p.byHost[host])
		done = append(done, moved...)
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// migrateHost moves host's records: one transaction (more only when they
// take more operations than one transaction holds, each kind whole in
// one), planned again from a new read when a writer raced it.
func (s *Store) migrateHost(ctx context.Context, host string, moves []move) ([]OldRecords, error) {
	var done []OldRecords
	for attempt := 0; attempt < maxAttempts; attempt++ {
		if err := backoff(ctx, attempt); err != nil {
			return done, err
		}
		if attempt > 0 {
			p, err := s.planMigration(ctx)
			if err != nil {
				return done, err
			}
			if len(p.HeldSlots) > 0 || len(p.Unreadable) > 0 {
				return done, fmt.Errorf("migrate %s: the older layout changed while moving it (%d held slots, %d unreadable keys): run migrate again", host, len(p.HeldSlots), len(p.Unreadable))
			}
			moves = p.byHost[host]
		}
		left, err := s.commitMoves(ctx, host, moves, &done)
		if err != nil || len(left) == 0 {
			return done, err
		}
	}
	return done, fmt.Errorf("migrate %s: %w", host, ErrConflict)
}

// commitMoves commits moves in as few transactions as hold them; it returns
// the moves of a transaction that lost a race (nil when all committed).
func (s *Store) commitMoves(ctx context.Context, host string, moves []move, done *[]OldRecords) ([]move, error) {
	for len(moves) > 0 {
		var ops api.KVTxnOps
		n := 0
		for n < len(moves) && (n == 0 || len(ops)+len(moves[n].ops()) <= maxTxnOps) {
			ops = append(ops, moves[n].ops()...)
			n++
		}
		if len(ops) > maxTxnOps {
			return nil, &InputError{Err: fmt.Errorf("migrate %s: %s has %d older keys, more than one transaction moves; delete the stale ones by hand", host, moves[0].Kind, len(moves[0].Keys))}
		}
		ok, resp, _, err := s.kv.Txn(ops, readOpts(ctx))
		switch {
		case err != nil:
			return nil, fmt.Errorf("migrate %s: %w", host, err)
		case !ok && movedUnder(resp):
			return moves, nil
		case !ok:
			return nil, refusedOr(resp, fmt.Errorf("migrate %s: transaction rolled back: %s", host, TxnErrors(resp)))
		}
		for _, m := range moves[:n] {
			*done = append(*done, m.OldRecords)
		}
		moves = moves[n:]
	}
	return nil, nil
}

func sortedKeys[T any](m map[string]T) []string {
	out := make([]string, 0, len(m))
	for h := range m {
		out = append(out, h)
	}
	sort.Strings(out)
	return out
}

// migrationReader collects, from one listing, each host's older records
// and own records by kind.
type migrationReader struct {
	prefix string
	// old: host -> kind -> the older pairs; own: host -> kind -> the
	// host's own record.
	old        map[string]map[string][]*api.KVPair
	own        map[string]map[string]*api.KVPair
	heldSlots  []string
	unreadable []Problem
}

func newMigrationReader(prefix string) *migrationReader {
	return &migrationReader{prefix: prefix, old: map[string]map[string][]*api.KVPair{}, own: map[string]map[string]*api.KVPair{}}
}

// add sorts one pair of the listing.
func (r *migrationReader) add(p *api.KVPair) {
	parts := strings.Split(schema.RelKey(r.prefix, p.Key), "/")
	switch {
	case parts[0] == hostRecordsDir && len(parts) >= 3:
		r.addOwn(parts[1], strings.Join(parts[2:], "/"), p)
	case parts[0] == dirRunning && len(parts) == 3 && schema.ValidName("host", parts[2]) == nil:
		r.addOld(parts[2], hostVersion, p)
	case parts[0] == dirStatus && len(parts) == 4 && schema.ValidName("category", parts[1]) == nil && schema.ValidName("host", parts[3]) == nil:
		r.addOld(parts[3], statusKind(parts[1]), p)
	case parts[0] == dirMetrics && len(parts) == 4 && schema.ValidName("host", parts[2]) == nil && schema.ValidName("metric", parts[3]) == nil:
		r.addOld(parts[2], metricKind(parts[3]), p)
	case parts[0] == dirDrain && len(parts) == 2:
		var d schema.DrainRecord
		if schema.StrictJSON(p.Value, &d) == nil && d.Answer != nil {
			r.addOld(parts[1], hostDrain, p)
		}
	case parts[0] == dirRollout && len(parts) == 4 && parts[2] == rolloutSlots && p.Session != "" && parts[3] == p.Session:
		r.heldSlots = append(r.heldSlots, p.Key)
	case parts[0] == dirRunning || parts[0] == dirStatus || parts[0] == dirMetrics:
		r.unreadable = append(r.unreadable, Problem{Key: p.Key, Problem: "not a record of the older layout (" + parts[0] + "/...)"})
	}
}

func (r *migrationReader) addOld(host, kind string, p *api.KVPair) {
	if r.old[host] == nil {
		r.old[host] = map[string][]*api.KVPair{}
	}
	r.old[host][kind] = append(r.old[host][kind], p)
}

func (r *migrationReader) addOwn(host, kind string, p *api.KVPair) {
	if r.own[host] == nil {
		r.own[host] = map[string]*api.KVPair{}
	}
	r.own[host][kind] = p
}

// plan turns what was read into moves.
func (r *migrationReader) plan() *plan {
	p := &plan{byHost: map[string][]move{}}
	p.HeldSlots, p.Unreadable = r.heldSlots, r.unreadable
	for _, host := range sortedKeys(r.old) {
		kinds := r.old[host]
		for _, kind := range sortedKeys(kinds) {
			m, err := r.move(host, kind, kinds[kind])
			if err != nil {
				p.Unreadable = append(p.Unreadable, Problem{Key: err.key, Problem: err.why})
				continue
			}
			p.byHost[host] = append(p.byHost[host], m)
			p.Moves = append(p.Moves, m.OldRecords)
		}
	}
	return p
}

// unmovable names an older key that cannot move, and why.
type unmovable struct{ key, why string }

// move plans one host's older records of one kind.
func (r *migrationReader) move(host, kind string, olds []*api.KVPair) (move, *unmovable) {
	m := move{OldRecords: OldRecords{Host: host, Kind: kind, Target: HostDir(r.prefix, host) + kind}}
	for _, p := range olds {
		m.Keys = append(m.Keys, p.Key)
	}
	own := r.own[host][kind]
	if own != nil {
		m.Stands, m.targetIndex = true, own.ModifyIndex
	}
	if kind == hostDrain {
		return r.moveDrainAnswer(m, olds[0], own)
	}
	for _, p := range olds {
		m.deletes = append(m.deletes, keyed{p.Key, p.ModifyIndex})
	}
	value, err := newestRecord(kind, olds)
	if err != nil {
		return m, err
	}
	if !m.Stands {
		m.value = value
	}
	return m, nil
}

// newestRecord is, of a host's older records of one kind, the newest,
// rewritten as the host's own record holds it.
func newestRecord(kind string, olds []*api.KVPair) ([]byte, *unmovable) {
	var best []byte
	var bestTime int64
	for i, p := range olds {
		parts := strings.Split(p.Key, "/")
		rec, t, err := convertOld(kind, parts, p.Value)
		if err != nil {
			return nil, &unmovable{p.Key, err.Error()}
		}
		if i == 0 || t > bestTime {
			best, bestTime = rec, t
		}
	}
	return best, nil
}

// convertOld rewrites one older record (its key split at "/") as the
// host's own record of kind, with its time for choosing the newest.
func convertOld(kind string, parts []string, value []byte) ([]byte, int64, error) {
	n := len(parts)
	switch {
	case kind == hostVersion:
		var v VersionValue
		if err := json.Unmarshal(value, &v); err != nil {
			return nil, 0, fmt.Errorf("value is not the JSON orchestrate writes: %w", err)
		}
		v.Version = parts[n-2]
		if err := schema.ValidName("version", v.Version); err != nil {
			return nil, 0, err
		}
		data, err := json.Marshal(v)
		return data, v.Time.UnixNano(), err
	case strings.HasPrefix(kind, statusKind("")):
		rec := statusRecord{State: parts[n-2]}
		if !ValidState(rec.State) {
			return nil, 0, fmt.Errorf("unknown state %q", rec.State)
		}
		if err := json.Unmarshal(value, &rec.StatusValue); err != nil {
			return nil, 0, fmt.Errorf("value is not the JSON orchestrate writes: %w", err)
		}
		data, err := json.Marshal(rec)
		return data, rec.Time.UnixNano(), err
	default: // metrics/<name>
		m, err := parseMetricReport(value)
		if err != nil {
			return nil, 0, err
		}
		m.Role = parts[n-3]
		data, err := json.Marshal(m)
		return data, m.Time.UnixNano(), err
	}
}

// moveDrainAnswer moves an answer kept inside a drain request to the
// host's own record, naming the request's entry, and rewrites the request
// without it. The host's own answer to the same request stands; an own
// answer to an earlier request is replaced.
func (r *migrationReader) moveDrainAnswer(m move, req, own *api.KVPair) (move, *unmovable) {
	var d schema.DrainRecord
	if err := schema.StrictJSON(req.Value, &d); err != nil || d.Answer == nil {
		return m, &unmovable{req.Key, "not a drain request with an answer"}
	}
	a := *d.Answer
	a.Entry = d.Entry
	if own != nil {
		if prev, err := parseDrainAnswer(own.Value); err == nil && prev.Entry == d.Entry {
			m.Stands = true
		} else {
			m.Stands = false
		}
	}
	if !m.Stands {
		m.value, _ = json.Marshal(a)
	}
	d.Answer = nil
	m.rewrite, _ = json.Marshal(d)
	m.rewriteIndex = req.ModifyIndex
	return m, nil
}
